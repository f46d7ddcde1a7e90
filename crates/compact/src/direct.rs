//! Direct compaction in the allocation slow path (spec 03 §11.1) and the
//! slow path's retry policy for it (spec 01 §10.2).

use pageframe_buddy::{COSTLY_ORDER, Order, Pfn};
use pageframe_mobility::MigrateType;

use crate::control::CompactRequest;
use crate::{
    CompactResult, CompactStats, FrameMover, MAX_COMPACT_RETRIES, NodeZone, Priority, ZoneLock,
    compact_zone,
};

/// What a direct compaction over a zonelist achieved.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DirectOutcome {
    /// The best result over the zones (results are ordered, spec 03 §3.5).
    pub result: CompactResult,
    /// A block captured for the caller: (index of its zone in the slice,
    /// head). It is allocated as the request's migratetype, of exactly the
    /// requested order; the caller owns it.
    pub captured: Option<(usize, Pfn)>,
    /// The zone whose run reported success (the allocator should retry
    /// there first).
    pub success_zone: Option<usize>,
    /// The first zone where a run actually started.
    pub ran_zone: Option<usize>,
    /// The order compacted for.
    pub order: Order,
}

/// `try_to_compact_pages` (spec 03 §11.1): compacts the zones of `zones`, in
/// the zonelist order given, for a request of `order` and migratetype `mt`
/// at priority `prio`, until one succeeds. Zones deferred after recent
/// failures are skipped unless `prio` is [`Priority::SyncFull`]; a sync run
/// that scans to the end without success defers its zone, a success resets
/// the zone's failed order. A zone whose skip hints a finished pass asked
/// to clear gets them cleared first (kswapd's job in Linux; there is none
/// here).
///
/// The caller decides whether compaction is allowed at all (Linux requires
/// `__GFP_IO` and direct-reclaim permission) and reports the allocation's
/// outcome with [`DirectOutcome::finish`].
pub fn try_to_compact_pages<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
    zones: &[NodeZone<'_, Z>],
    order: Order,
    mt: MigrateType,
    prio: Priority,
    migrator: &mut M,
) -> DirectOutcome {
    let mut out = DirectOutcome {
        result: CompactResult::Skipped,
        captured: None,
        success_zone: None,
        ran_zone: None,
        order,
    };
    for (i, nz) in zones.iter().enumerate() {
        if prio != Priority::SyncFull && nz.state.compaction_deferred(order) {
            out.result = out.result.max(CompactResult::Deferred);
            nz.state.account(&CompactStats {
                deferred: 1,
                ..CompactStats::default()
            });
            continue;
        }
        // Linux clears the skip hints a finished pass asked for when kswapd
        // goes to sleep; with no kswapd here, the next direct compactor of
        // the zone does it (a flag check unless a pass completed).
        crate::reset_isolation_suitable(nz.zone, nz.state);
        let req = CompactRequest::direct(order, mt, prio, nz.marks);
        let run = compact_zone(nz.zone, nz.state, migrator, &req);
        if run.result > CompactResult::Deferred && out.ran_zone.is_none() {
            out.ran_zone = Some(i);
        }
        out.result = out.result.max(run.result);
        match run.result {
            CompactResult::Success => {
                nz.state.defer_reset(order, false);
                out.captured = run.captured.map(|p| (i, p));
                out.success_zone = Some(i);
                break;
            }
            CompactResult::Complete | CompactResult::PartialSkipped if prio != Priority::Async => {
                nz.state.defer_compaction(order);
            }
            // An abort (fatal signal, contention) ends the whole attempt.
            CompactResult::Contended => break,
            _ => {}
        }
    }
    out
}

impl DirectOutcome {
    /// Reports whether the allocation got a block after this compaction,
    /// from which zone (`page_zone`, an index into the same slice): counts
    /// `compact_stall` and `compact_success`/`compact_fail`, and on success
    /// forgets the zone's past failures and its pending skip-hint flush
    /// (spec 03 §7, §11.1).
    pub fn finish<Z: ZoneLock + ?Sized>(
        &self,
        zones: &[NodeZone<'_, Z>],
        page_zone: Option<usize>,
    ) {
        if self.result == CompactResult::Skipped {
            return;
        }
        let stall_zone = self.ran_zone.or(page_zone).unwrap_or(0);
        if let Some(z) = zones.get(stall_zone) {
            z.state.account(&CompactStats {
                stall: 1,
                fail: u64::from(page_zone.is_none()),
                ..CompactStats::default()
            });
        }
        if let Some(z) = page_zone.and_then(|i| zones.get(i)) {
            z.state.defer_reset(self.order, true);
            z.state
                .blockskip_flush
                .store(false, core::sync::atomic::Ordering::Relaxed);
            z.state.account(&CompactStats {
                success: 1,
                ..CompactStats::default()
            });
        }
    }
}

/// The slow path's compaction retry state (`should_compact_retry`, spec 01
/// §10.2): the current priority and the retries made at it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CompactRetry {
    order: Order,
    prio: Priority,
    retries: u32,
}

impl CompactRetry {
    /// Fresh state for a request of `order`, at the default priority.
    pub const fn new(order: Order) -> Self {
        CompactRetry {
            order,
            prio: Priority::DEF,
            retries: 0,
        }
    }

    /// The priority the next direct compaction should use.
    pub const fn priority(&self) -> Priority {
        self.prio
    }

    /// Overrides the priority (a costly `__GFP_NORETRY` request keeps async
    /// compaction after its first attempt, spec 01 §10).
    pub fn set_priority(&mut self, prio: Priority) {
        self.prio = prio;
    }

    /// Retries counted at the current priority.
    pub const fn retries(&self) -> u32 {
        self.retries
    }

    /// Whether the slow path should retry after a compaction that ended
    /// with `result` and an allocation that still failed. `zonelist_suitable`
    /// is asked only after `Skipped`: would some zone pass the suitability
    /// check once reclaim frees what it can? May raise the priority.
    pub fn should_retry(
        &mut self,
        result: CompactResult,
        zonelist_suitable: impl FnOnce() -> bool,
    ) -> bool {
        if self.order == Order::ZERO {
            return false;
        }
        let costly = self.order.get() > COSTLY_ORDER;
        match result {
            // Made progress: retry a bounded number of times.
            CompactResult::Success => {
                self.retries += 1;
                let max = if costly {
                    MAX_COMPACT_RETRIES / 4
                } else {
                    MAX_COMPACT_RETRIES
                };
                if self.retries <= max {
                    return true;
                }
                self.raise(costly)
            }
            // Needs reclaim first.
            CompactResult::Skipped => zonelist_suitable(),
            // Failed or withdrawn: only a harder priority can help.
            _ => self.raise(costly),
        }
    }

    fn raise(&mut self, costly: bool) -> bool {
        let min = if costly {
            Priority::MIN_COSTLY
        } else {
            Priority::MIN
        };
        match self.prio.raised() {
            Some(p) if self.prio > min => {
                self.prio = p;
                self.retries = 0;
                true
            }
            _ => false,
        }
    }
}
