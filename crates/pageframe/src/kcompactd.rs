//! Each node's background compactor and whole-node compaction (spec 03
//! §11.2, §11.3; docs/rules/03-compaction.md §11): the compaction crate's
//! [`Kcompactd`](pageframe_compact::Kcompactd) runs the rules; the machine
//! keeps one per node with its pending wake-up, applies the machine's
//! tunables, and gives it the node's zones.
//!
//! There are no threads here: the kernel runs one per node (or a timer)
//! that calls [`Machine::kcompactd_tick`] at least every 500 ms; the slow
//! path records wake-ups with [`Machine::wakeup_kcompactd`] from any CPU.

use pageframe_buddy::Order;
use pageframe_compact::{CompactOutcome, TickReport, compact_memory, node_score};

use crate::compaction::{Guarded, ZoneSet};
use crate::debug::{Event, Hooks};
use crate::lock::Platform;
use crate::machine::Machine;
use crate::migrator::Migrator;
use crate::node_id::NodeId;
use crate::numa_stats::NodeStats;
use crate::zone_kind::ZoneKind;

/// # Background compaction
///
/// What a kernel's kcompactd thread or timer calls, and whole-node
/// compaction (spec 03 §11).
impl<'a, P: Platform> Machine<'a, P> {
    /// The zones of node `id`, low to high, for a requester of `highest`.
    fn node_zones(&self, id: NodeId, highest: ZoneKind) -> Option<ZoneSet<'_, 'a, P::Lock>> {
        let node = self.node(id)?;
        let refs = node.zones().map(|z| z.zone_ref());
        ZoneSet::new(self, refs, highest)
    }

    /// `wakeup_kcompactd` (spec 03 §11.2): node `id`'s kcompactd should
    /// build blocks of `order` in its zones up to `highest`. Recorded only
    /// if some such zone could use compaction; returns whether it was.
    /// Lock-free: callable from any CPU at any time.
    pub fn wakeup_kcompactd(&self, id: NodeId, order: Order, highest: ZoneKind) -> bool {
        let Some(set) = self.node_zones(id, highest) else {
            return false;
        };
        let Some(node) = self.node(id) else {
            return false;
        };
        let woken = set.with(|zones| {
            node.wake
                .wakeup(zones, order, zones.len() - 1, self.extfrag_threshold())
        });
        if woken {
            self.count(
                id,
                NodeStats {
                    kcompactd_wakes: 1,
                    ..NodeStats::default()
                },
            );
        }
        woken
    }

    /// One step of node `id`'s kcompactd at time `now_ns` (any monotonic
    /// clock): a pending wake-up's work first, otherwise the proactive check
    /// every 500 ms under the machine's proactiveness, with its back-off.
    /// Pages move through `migrator`. A second caller for the same node
    /// while one runs gets an empty report (one daemon per node).
    pub fn kcompactd_tick<M: Migrator + ?Sized>(
        &self,
        id: NodeId,
        now_ns: u64,
        migrator: &mut M,
    ) -> TickReport {
        let (Some(node), Some(set)) = (self.node(id), self.node_zones(id, ZoneKind::Movable))
        else {
            return TickReport::default();
        };
        let Some(mut k) = node.kcompactd.try_lock() else {
            return TickReport::default();
        };
        let p = self.proactiveness();
        if k.proactiveness() != p {
            // In range by construction (the machine checked it).
            let _ = k.set_proactiveness(u32::from(p));
        }
        k.set_extfrag_threshold(self.extfrag_threshold());
        let mut guarded = Guarded::new(migrator, self);
        let report = set.with(|zones| k.tick(now_ns, zones, &node.wake, &mut guarded));
        if P::Hooks::TRACE && (report.work || report.proactive.is_some()) {
            self.hooks.event(&Event::Kcompactd { node: id, report });
        }
        report
    }

    /// Compacts every zone of node `id` whole, in sync mode, ignoring skip
    /// hints (`compact_memory` / the per-node `compact` file, spec 03
    /// §11.3). Returns the best result and the summed counters.
    pub fn compact_node<M: Migrator + ?Sized>(
        &self,
        id: NodeId,
        migrator: &mut M,
    ) -> Option<CompactOutcome> {
        let set = self.node_zones(id, ZoneKind::Movable)?;
        let mut guarded = Guarded::new(migrator, self);
        if P::Hooks::TRACE {
            self.hooks.event(&Event::CompactBegin {
                node: id,
                order: None,
            });
        }
        let out = set.with(|zones| compact_memory(zones, &mut guarded));
        if P::Hooks::TRACE {
            self.hooks.event(&Event::CompactEnd {
                node: id,
                order: None,
                result: out.result,
            });
        }
        Some(out)
    }

    /// See [`crate::debug::Inspect::fragmentation_score`].
    pub(crate) fn fragmentation_score(&self, id: NodeId) -> Option<u32> {
        let set = self.node_zones(id, ZoneKind::Movable)?;
        set.with(node_score)
    }
}
