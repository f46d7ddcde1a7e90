//! Each node's background compactor, kcompactd (spec 03 §3.2, §11.2): the
//! slow path records what it was woken for; the kernel (or the lab) runs
//! [`Machine::run_kcompactd`] from the node's thread, outside any request.
//! Also the suitability check both it and direct compaction use (spec 03
//! §4.1-4.3).

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use pageframe_buddy::Order;
use pageframe_mobility::MigrateType;

use pageframe_compact::{CompactResult, Priority, reset_isolation_suitable};

use crate::compactor::{Compactor, ZoneTarget};
use crate::machine::Machine;
use crate::numa_stats::NodeStats;
use crate::topology::NodeId;
use crate::zone::{Zone, ZoneKind};

/// `vm.extfrag_threshold` default (spec 03 §13): a fragmentation index at
/// or below it means a failure would come from lack of memory.
pub const EXTFRAG_THRESHOLD: i32 = 500;

/// What kcompactd was woken for (`kcompactd_max_order`,
/// `kcompactd_highest_zoneidx`).
#[derive(Debug)]
pub(crate) struct KcompactdState {
    max_order: AtomicU8,
    highest: AtomicU8,
}

impl Default for KcompactdState {
    fn default() -> Self {
        KcompactdState {
            max_order: AtomicU8::new(0),
            highest: AtomicU8::new(ZoneKind::Movable as u8),
        }
    }
}

/// Whether compaction of a zone for an order is worth running
/// (`compaction_suit_allocation_order`, spec 03 §4.3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Suitability {
    /// A free block of the order is already there within the min watermark.
    Ready,
    /// Compaction could build one: run it.
    Continue,
    /// Too little free memory to compact into, or the fragmentation index
    /// says a failure would come from lack of memory: reclaim first.
    Skip,
}

/// Suitability of `zone` for `order` against its min watermark: ready if a
/// block is there; skipped unless `free > min + 2^(order+1)` (plus the
/// low-min gap for costly orders, spec 03 §4.1) and, for costly orders,
/// the fragmentation index is above [`EXTFRAG_THRESHOLD`] (spec 03 §4.2).
pub fn suitability(zone: &Zone<'_>, order: Order) -> Suitability {
    let w = zone.watermarks();
    zone.with_zone(|m| {
        let free = m
            .free_pages()
            .saturating_sub(m.free_pages_of(MigrateType::HighAtomic));
        let has_block = (order.get()..=m.buddy().max_order().get())
            .filter_map(Order::new)
            .any(|o| {
                [
                    MigrateType::Unmovable,
                    MigrateType::Movable,
                    MigrateType::Reclaimable,
                ]
                .iter()
                .any(|&t| m.free_blocks_of(o, t) > 0)
            });
        if has_block && free.saturating_sub(order.pages() - 1) > w.min {
            return Suitability::Ready;
        }
        let mut need = w.min + (2 << order.get());
        if order.is_costly() {
            need += w.low - w.min;
        }
        if free <= need {
            return Suitability::Skip;
        }
        if order.is_costly() {
            let fi = m.fragmentation_index(order);
            if (0..=EXTFRAG_THRESHOLD).contains(&fi) {
                return Suitability::Skip;
            }
        }
        Suitability::Continue
    })
}

/// What one kcompactd pass did.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct KcompactdReport {
    /// The order it worked for (0: nothing to do).
    pub order: u8,
    /// Zone runs.
    pub runs: u32,
    /// Zone runs that made a block of the order.
    pub successes: u32,
    /// Zones skipped because they were deferred.
    pub deferred: u32,
}

impl Machine<'_> {
    /// `wakeup_kcompactd` (spec 03 §11.2): records that node `id` should
    /// compact for `order` in zones up to `highest`. Order 0 is ignored; the
    /// wake counts only if some such zone is worth compacting. Returns
    /// whether it did.
    pub fn wakeup_kcompactd(&self, id: NodeId, order: Order, highest: ZoneKind) -> bool {
        let (Some(node), Some(st)) = (self.node(id), self.state.get(id.index())) else {
            return false;
        };
        if order == Order::ZERO {
            return false;
        }
        let k = &st.kcompactd;
        if k.max_order.load(Relaxed) < order.get() {
            k.max_order.store(order.get(), Relaxed);
        }
        if k.highest.load(Relaxed) > highest as u8 {
            k.highest.store(highest as u8, Relaxed);
        }
        let worth = node
            .zones()
            .filter(|z| z.kind() <= highest)
            .any(|z| suitability(z, order) == Suitability::Continue);
        if worth {
            self.count(
                id,
                NodeStats {
                    kcompactd_wakes: 1,
                    ..NodeStats::default()
                },
            );
        }
        worth
    }

    /// Whether node `id`'s kcompactd has work recorded.
    pub fn kcompactd_pending(&self, id: NodeId) -> bool {
        self.state
            .get(id.index())
            .is_some_and(|s| s.kcompactd.max_order.load(Relaxed) > 0)
    }

    /// One kcompactd work pass on node `id` (`kcompactd_do_work`, spec 03
    /// §11.2): for each zone up to the recorded highest, low to high, skip
    /// it if deferred or not worth it, else compact it sync-light; a
    /// success forgets the zone's failed order, a failure defers it. Then
    /// the recorded request is cleared.
    pub fn run_kcompactd<C: Compactor + ?Sized>(
        &self,
        id: NodeId,
        compactor: &mut C,
    ) -> KcompactdReport {
        let mut rep = KcompactdReport::default();
        let (Some(node), Some(st)) = (self.node(id), self.state.get(id.index())) else {
            return rep;
        };
        let max = st.kcompactd.max_order.load(Relaxed);
        let Some(order) = Order::new(max).filter(|o| o.get() > 0) else {
            return rep;
        };
        let highest = st.kcompactd.highest.load(Relaxed);
        rep.order = max;
        let mut s = NodeStats {
            kcompactd_runs: 1,
            ..NodeStats::default()
        };
        for z in node.zones().filter(|z| z.kind() as u8 <= highest) {
            let cs = &st.zone_compact[z.kind().index()];
            // Direct compactors that scanned a whole zone asked for its skip
            // hints to be cleared; with no kswapd going to sleep here, the
            // node's compactor does it before its work.
            reset_isolation_suitable(z, cs);
            if cs.compaction_deferred(order) {
                rep.deferred += 1;
                s.compact_deferred += 1;
                continue;
            }
            if suitability(z, order) != Suitability::Continue {
                continue;
            }
            let target = ZoneTarget {
                node: id,
                zone: z,
                state: cs,
                mt: MigrateType::Unmovable,
                background: true,
            };
            let run = compactor.compact(target, order, Priority::SyncLight);
            rep.runs += 1;
            s.compact_runs += 1;
            s.compact_scanned += run.work.scanned;
            s.compact_migrated += run.work.migrated;
            if let Some(p) = run.captured {
                // kcompactd asks for no block: give a captured one back so
                // it stays free for the next request. A compactor that
                // hands over a block it does not own gets it refused here.
                let _ = z.free(p, order);
            }
            match run.result {
                CompactResult::Success => {
                    rep.successes += 1;
                    cs.defer_reset(order, false);
                }
                CompactResult::Complete | CompactResult::PartialSkipped => {
                    cs.defer_compaction(order)
                }
                _ => {}
            }
        }
        self.count(id, s);
        if st.kcompactd.max_order.load(Relaxed) <= max {
            st.kcompactd.max_order.store(0, Relaxed);
        }
        if st.kcompactd.highest.load(Relaxed) >= highest {
            st.kcompactd.highest.store(ZoneKind::Movable as u8, Relaxed);
        }
        rep
    }
}
