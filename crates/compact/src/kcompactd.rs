//! The per-node background compactor (spec 03 §11.2, §11.3) and
//! whole-node compaction on demand. There are no threads or clocks below
//! the facade: the kernel runs a thread or timer that calls
//! [`Kcompactd::tick`] with the current time, and allocating CPUs call
//! [`KcompactdWake::wakeup`] when a high-order request had to go slow.
//!
//! The two halves are separate objects so that a wake-up (any CPU, any
//! time, `&self`, atomics only) never waits for a running daemon, which
//! owns its [`Kcompactd`] (`&mut self`) for as long as a tick compacts.

use crate::sync::{AtomicU16, Relaxed};
use core::fmt;

use pageframe_buddy::Order;

use crate::access::locked;
use crate::control::{CompactOutcome, CompactRequest, RunStats};
use crate::proactive::{Thresholds, node_score, thresholds};
use crate::skip::reset_isolation_suitable;
use crate::suitable::suit_allocation_order;
use crate::{
    CompactResult, DEFAULT_EXTFRAG_THRESHOLD, DEFAULT_PROACTIVENESS, FrameMover,
    HPAGE_FRAG_CHECK_INTERVAL_MS, NodeZone, ZoneLock, compact_zone,
};

const NS_PER_MS: u64 = 1_000_000;
/// Back-off after a proactive run that did not lower the score: `500 ms <<
/// 6`, about 32 s (spec 03 §11.3).
const BACKOFF_SHIFT: u32 = 6;

/// A proactiveness above 100 was refused (the setting is unchanged).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ProactivenessError {
    /// The refused value.
    pub value: u32,
}

impl fmt::Display for ProactivenessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "proactiveness {} is not in 0..=100", self.value)
    }
}

impl core::error::Error for ProactivenessError {}

/// kcompactd's counters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct KcompactdStats {
    /// Work rounds for a woken order (`compact_daemon_wake`).
    pub wakes: u64,
    /// Proactive checks made (the score was computed).
    pub proactive_checks: u64,
    /// Proactive compactions run (the score was above `high`).
    pub proactive_runs: u64,
    /// Runs after which the score did not improve: the next check was
    /// pushed out by the back-off.
    pub backoffs: u64,
    /// Ticks that found no check due (waiting out the period).
    pub idle_ticks: u64,
    /// Of those, ticks that fell inside a back-off period.
    pub backoff_ticks: u64,
}

/// What one [`Kcompactd::tick`] did.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct TickReport {
    /// A woken order's work ran.
    pub work: bool,
    /// The proactive check ran.
    pub checked: bool,
    /// A proactive compaction ran: the node score before and after.
    pub proactive: Option<(u32, u32)>,
    /// The node score when checked.
    pub score: Option<u32>,
    /// When (same clock as `now`) the next proactive check is due, if
    /// proactive compaction is on.
    pub next_check: Option<u64>,
}

/// The per-node compaction daemon's state: proactiveness, the pending
/// wakeup, the next proactive check and its back-off.
#[derive(Clone, Debug)]
pub struct Kcompactd {
    proactiveness: u8,
    extfrag_threshold: u32,
    /// When the next proactive check is due (nanoseconds, caller's clock).
    next_check: u64,
    backing_off: bool,
    /// A proactiveness write asks for a check at the next tick.
    trigger: bool,
    stats: KcompactdStats,
}

/// A node's pending kcompactd wake-up: the highest order asked (0: none)
/// and the lowest highest-zone index asked, in one atomic word so that a
/// wake-up and the daemon taking it never see half of the other (a request
/// is merged into the pending one, or taken whole). Shared by every
/// allocating CPU; only the slow path writes it.
#[derive(Debug)]
pub struct KcompactdWake {
    /// `order << 8 | highest_zone`; [`EMPTY`] when nothing is pending.
    word: AtomicU16,
}

/// Nothing pending: order 0, no zone limit.
const EMPTY: u16 = u8::MAX as u16;

impl Default for KcompactdWake {
    fn default() -> Self {
        Self::new()
    }
}

impl KcompactdWake {
    /// Nothing pending.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        KcompactdWake {
            word: AtomicU16::new(EMPTY),
        }
    }

    /// Nothing pending (loom's atomics are not `const`).
    #[cfg(loom)]
    pub fn new() -> Self {
        KcompactdWake {
            word: AtomicU16::new(EMPTY),
        }
    }

    /// Whether a woken order's work is pending.
    pub fn pending(&self) -> bool {
        self.word.load(Relaxed) >> 8 > 0
    }

    /// `wakeup_kcompactd` (spec 03 §11.2): the allocator (or reclaim) wants
    /// blocks of `order` from zones up to `highest_zone` (an index into the
    /// slice passed to [`Kcompactd::tick`]). Recorded only if some such zone
    /// could use compaction (judged with `extfrag_threshold`); returns
    /// whether it was. Order 0 is ignored.
    pub fn wakeup<Z: ZoneLock + ?Sized>(
        &self,
        zones: &[NodeZone<'_, Z>],
        order: Order,
        highest_zone: usize,
        extfrag_threshold: u32,
    ) -> bool {
        if order == Order::ZERO {
            return false;
        }
        let wanted = zones.iter().take(highest_zone.saturating_add(1)).any(|nz| {
            locked(nz.zone, |z| {
                order <= z.buddy().max_order()
                    && suit_allocation_order(
                        z,
                        order,
                        nz.marks.wmark.min,
                        &nz.marks,
                        extfrag_threshold,
                        false,
                        false,
                    ) == CompactResult::Continue
            })
            .unwrap_or(false)
        });
        if wanted {
            self.record(order, highest_zone);
        }
        wanted
    }

    /// Merges a request into the pending one: the larger order, the lower
    /// highest zone.
    pub(crate) fn record(&self, order: Order, highest_zone: usize) {
        let hz = u16::from(u8::try_from(highest_zone).unwrap_or(u8::MAX));
        let mut cur = self.word.load(Relaxed);
        loop {
            let o = (cur >> 8).max(u16::from(order.get()));
            let z = (cur & 0xff).min(hz);
            match self
                .word
                .compare_exchange_weak(cur, o << 8 | z, Relaxed, Relaxed)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Takes the pending request: `(order, highest zone index)`.
    pub(crate) fn take(&self) -> Option<(Order, usize)> {
        let w = self.word.swap(EMPTY, Relaxed);
        Order::new((w >> 8) as u8)
            .filter(|o| o.get() > 0)
            .map(|o| (o, usize::from(w & 0xff)))
    }
}

impl Default for Kcompactd {
    fn default() -> Self {
        Self::new()
    }
}

impl Kcompactd {
    /// Defaults: proactiveness 20, extfrag threshold 500, first check at
    /// the first tick.
    pub const fn new() -> Self {
        Kcompactd {
            proactiveness: DEFAULT_PROACTIVENESS,
            extfrag_threshold: DEFAULT_EXTFRAG_THRESHOLD,
            next_check: 0,
            backing_off: false,
            trigger: false,
            stats: KcompactdStats {
                wakes: 0,
                proactive_checks: 0,
                proactive_runs: 0,
                backoffs: 0,
                idle_ticks: 0,
                backoff_ticks: 0,
            },
        }
    }

    /// `vm.compaction_proactiveness`.
    pub fn proactiveness(&self) -> u8 {
        self.proactiveness
    }

    /// Sets `vm.compaction_proactiveness` (0 disables proactive
    /// compaction). A non-zero value asks for a check at the next tick, as
    /// writing the sysctl wakes kcompactd.
    pub fn set_proactiveness(&mut self, p: u32) -> Result<(), ProactivenessError> {
        let v = u8::try_from(p)
            .ok()
            .filter(|&v| v <= 100)
            .ok_or(ProactivenessError { value: p })?;
        self.proactiveness = v;
        self.trigger = v != 0;
        Ok(())
    }

    /// `vm.extfrag_threshold`.
    pub fn extfrag_threshold(&self) -> u32 {
        self.extfrag_threshold
    }

    /// Sets `vm.extfrag_threshold`, clamped to 0..=1000.
    pub fn set_extfrag_threshold(&mut self, t: u32) {
        self.extfrag_threshold = t.min(1000);
    }

    /// The proactive thresholds in force.
    pub fn thresholds(&self) -> Thresholds {
        thresholds(self.proactiveness)
    }

    /// The counters.
    pub fn stats(&self) -> KcompactdStats {
        self.stats
    }

    /// One step of the daemon, at time `now` (nanoseconds on any monotonic
    /// clock). A pending wakeup is served first (`kcompactd_do_work`);
    /// otherwise, if proactiveness is on and the check is due (every 500 ms,
    /// or at once after a proactiveness write), the node score is checked and,
    /// above the `high` threshold, every zone is compacted proactively down to
    /// `low`. A run that does not lower the score pushes the next check out
    /// by `500 ms << 6`. Call it from a timer at least every 500 ms; extra
    /// calls cost a comparison.
    pub fn tick<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
        &mut self,
        now: u64,
        zones: &[NodeZone<'_, Z>],
        wake: &KcompactdWake,
        migrator: &mut M,
    ) -> TickReport {
        let period = HPAGE_FRAG_CHECK_INTERVAL_MS * NS_PER_MS;
        let mut rep = TickReport::default();
        if let Some((order, highest)) = wake.take() {
            self.do_work(zones, order, highest, migrator);
            rep.work = true;
            if self.proactiveness != 0 {
                self.next_check = now.saturating_add(period);
                rep.next_check = Some(self.next_check);
            }
            return rep;
        }
        if self.proactiveness == 0 {
            return rep;
        }
        if !self.trigger && now < self.next_check {
            self.stats.idle_ticks += 1;
            if self.backing_off {
                self.stats.backoff_ticks += 1;
            }
            rep.next_check = Some(self.next_check);
            return rep;
        }
        self.trigger = false;
        self.next_check = now.saturating_add(period);
        self.stats.proactive_checks += 1;
        rep.checked = true;
        let th = self.thresholds();
        let before = node_score(zones);
        rep.score = before;
        self.backing_off = false;
        if let Some(before) = before.filter(|&s| s > th.high) {
            self.stats.proactive_runs += 1;
            for nz in zones {
                let present = locked(nz.zone, |z| z.buddy().managed_pages()).unwrap_or(0);
                if present == 0 {
                    continue;
                }
                compact_zone(
                    nz.zone,
                    nz.state,
                    migrator,
                    &CompactRequest::proactive(th.low, nz.marks),
                );
            }
            let after = node_score(zones).unwrap_or(before);
            rep.proactive = Some((before, after));
            if after >= before {
                self.stats.backoffs += 1;
                self.backing_off = true;
                self.next_check = now.saturating_add(period << BACKOFF_SHIFT);
            }
        }
        rep.next_check = Some(self.next_check);
        rep
    }

    /// `kcompactd_do_work` (spec 03 §11.2): compacts each zone up to the
    /// woken highest zone for the woken order, skipping deferred zones and
    /// zones where compaction would not help.
    fn do_work<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
        &mut self,
        zones: &[NodeZone<'_, Z>],
        order: Order,
        highest: usize,
        migrator: &mut M,
    ) {
        self.stats.wakes += 1;
        let t = self.extfrag_threshold;
        for nz in zones.iter().take(highest.saturating_add(1)) {
            // Without kswapd, a pending skip-hint flush is honoured here.
            reset_isolation_suitable(nz.zone, nz.state);
            if nz.state.compaction_deferred(order) {
                continue;
            }
            let suit = locked(nz.zone, |z| {
                z.buddy().managed_pages() > 0
                    && order <= z.buddy().max_order()
                    && suit_allocation_order(
                        z,
                        order,
                        nz.marks.wmark.min,
                        &nz.marks,
                        t,
                        false,
                        false,
                    ) == CompactResult::Continue
            });
            if suit != Some(true) {
                continue;
            }
            let mut req = CompactRequest::kcompactd(order, nz.marks);
            req.extfrag_threshold = t;
            let run = compact_zone(nz.zone, nz.state, migrator, &req);
            match run.result {
                CompactResult::Success => nz.state.defer_reset(order, false),
                CompactResult::Complete | CompactResult::PartialSkipped => {
                    migrator.drain_caches();
                    nz.state.defer_compaction(order);
                }
                _ => {}
            }
        }
    }
}

/// `compact_memory` / per-node `compact` (spec 03 §11.3): compacts every
/// populated zone of the node whole, in sync mode, ignoring skip hints,
/// until the scanners meet. Returns the highest result and the summed
/// counters.
pub fn compact_memory<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
    zones: &[NodeZone<'_, Z>],
    migrator: &mut M,
) -> CompactOutcome {
    let mut out = CompactOutcome {
        result: CompactResult::Skipped,
        captured: None,
        stats: RunStats::default(),
    };
    for nz in zones {
        let present = locked(nz.zone, |z| z.buddy().managed_pages()).unwrap_or(0);
        if present == 0 {
            continue;
        }
        let run = compact_zone(nz.zone, nz.state, migrator, &CompactRequest::full(nz.marks));
        out.result = out.result.max(run.result);
        let (a, b) = (&mut out.stats, run.stats);
        a.migrate_scanned += b.migrate_scanned;
        a.free_scanned += b.free_scanned;
        a.isolated_source += b.isolated_source;
        a.isolated_free += b.isolated_free;
        a.migrated += b.migrated;
        a.failed += b.failed;
        a.isolate_refused += b.isolate_refused;
    }
    out
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;

    /// Two CPUs record wake-ups while the daemon takes one: whatever the
    /// interleaving, every request is taken exactly once (alone or merged
    /// into another) and nothing stale is left behind.
    #[test]
    fn wakeups_are_merged_or_taken_never_lost() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let w = std::sync::Arc::new(KcompactdWake::new());
            let o = |k| Order::new(k).unwrap();
            let t1 = {
                let w = w.clone();
                loom::thread::spawn(move || w.record(o(9), 1))
            };
            let t2 = {
                let w = w.clone();
                loom::thread::spawn(move || w.record(o(3), 0))
            };
            let early = w.take();
            t1.join().unwrap();
            t2.join().unwrap();
            let late = w.take();
            let taken: std::vec::Vec<(Order, usize)> = early.into_iter().chain(late).collect();
            assert!(!taken.is_empty());
            assert_eq!(taken.iter().map(|t| t.0).max(), Some(o(9)), "{taken:?}");
            assert_eq!(taken.iter().map(|t| t.1).min(), Some(0), "{taken:?}");
            for (order, zone) in &taken {
                // Each taken request is a merge of real requests, never a
                // mix of one request and an empty word.
                assert!(
                    matches!((order.get(), *zone), (9, 1) | (3, 0) | (9, 0)),
                    "{taken:?}"
                );
            }
            assert!(!w.pending() && w.take().is_none(), "nothing left behind");
        });
    }
}
