//! Per-zone compaction state (spec 03 §3.1): cached scanner positions,
//! deferral, and counters. Every field is an atomic so the state can live
//! next to a shared zone and serve concurrent compactors without a lock, as
//! Linux's racy per-zone fields do: the positions are hints, never trusted
//! for correctness.

use core::sync::atomic::{AtomicBool, Ordering::Relaxed};

use pageframe_types::atomic::AtomicU64;

use pageframe_buddy::Pfn;

use crate::{Deferral, ZoneLock, ZoneMarks};

/// "Not set yet": the first run treats it as the zone's start.
pub(crate) const UNSET: u64 = u64::MAX;

/// Compaction counters, named after Linux's vmstat `compact_*` and
/// `pgmigrate_*` lines (spec 03 §13).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CompactStats {
    /// Frames the migrate scanner looked at (`compact_migrate_scanned`).
    pub migrate_scanned: u64,
    /// Frames the free scanner looked at (`compact_free_scanned`).
    pub free_scanned: u64,
    /// Frames isolated by either scanner (`compact_isolated`).
    pub isolated: u64,
    /// Direct compactions that ran (`compact_stall`).
    pub stall: u64,
    /// Direct compactions after which the allocation failed (`compact_fail`).
    pub fail: u64,
    /// Direct compactions after which the allocation succeeded
    /// (`compact_success`).
    pub success: u64,
    /// Migrate-scanner frames in kcompactd and proactive runs
    /// (`compact_daemon_migrate_scanned`).
    pub daemon_migrate_scanned: u64,
    /// Free-scanner frames in kcompactd and proactive runs
    /// (`compact_daemon_free_scanned`).
    pub daemon_free_scanned: u64,
    /// Frames migrated (`pgmigrate_success`).
    pub migrate_success: u64,
    /// Frames that failed to migrate (`pgmigrate_fail`).
    pub migrate_fail: u64,
    /// Runs of the zone loop.
    pub runs: u64,
    /// Direct runs skipped because the zone was deferred.
    pub deferred: u64,
    /// Blocks handed to a direct compactor by capture (spec 03 §8).
    pub captured: u64,
}

macro_rules! counters {
    ($($f:ident),* $(,)?) => {
        #[derive(Default)]
        struct Counters { $($f: AtomicU64,)* }
        impl Counters {
            const fn new() -> Self { Counters { $($f: AtomicU64::new(0),)* } }
            fn snapshot(&self) -> CompactStats {
                CompactStats { $($f: self.$f.load(Relaxed),)* }
            }
            fn add(&self, s: &CompactStats) {
                $(if s.$f != 0 { self.$f.fetch_add(s.$f, Relaxed); })*
            }
        }
        /// Counters of several zones (or runs) added up.
        impl core::ops::AddAssign for CompactStats {
            fn add_assign(&mut self, o: CompactStats) {
                $(self.$f += o.$f;)*
            }
        }
    };
}

counters!(
    migrate_scanned,
    free_scanned,
    isolated,
    stall,
    fail,
    success,
    daemon_migrate_scanned,
    daemon_free_scanned,
    migrate_success,
    migrate_fail,
    runs,
    deferred,
    captured,
);

/// The compaction state of one zone. Create one per zone (a `const fn`, so
/// it can sit in a static or next to the zone) and pass it to every run on
/// that zone.
pub struct CompactState {
    /// Where the next migrate scan starts: `[0]` async, `[1]` sync.
    pub(crate) cached_migrate: [AtomicU64; 2],
    /// Where the next free scan starts (pageblock aligned).
    pub(crate) cached_free: AtomicU64,
    /// First source / target block found by the last skip-hint reset.
    pub(crate) init_migrate: AtomicU64,
    pub(crate) init_free: AtomicU64,
    /// Deferral (spec 03 §7).
    pub(crate) defer: Deferral,
    /// A direct compactor's scanners met: skip hints are due for a reset.
    pub(crate) blockskip_flush: AtomicBool,
    counters: Counters,
}

impl Default for CompactState {
    fn default() -> Self {
        Self::new()
    }
}

impl CompactState {
    /// Fresh state: scanners start at the zone's ends, nothing deferred.
    pub const fn new() -> Self {
        CompactState {
            cached_migrate: [AtomicU64::new(UNSET), AtomicU64::new(UNSET)],
            cached_free: AtomicU64::new(UNSET),
            init_migrate: AtomicU64::new(UNSET),
            init_free: AtomicU64::new(UNSET),
            defer: Deferral::new(),
            blockskip_flush: AtomicBool::new(false),
            counters: Counters::new(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CompactStats {
        self.counters.snapshot()
    }

    pub(crate) fn account(&self, s: &CompactStats) {
        self.counters.add(s);
    }

    /// Where the next async (`sync = false`) or sync migrate scan would
    /// start, if a run has set it.
    pub fn cached_migrate_pfn(&self, sync: bool) -> Option<Pfn> {
        let v = self.cached_migrate[usize::from(sync)].load(Relaxed);
        (v != UNSET).then_some(Pfn(v))
    }

    /// Where the next free scan would start, if a run has set it.
    pub fn cached_free_pfn(&self) -> Option<Pfn> {
        let v = self.cached_free.load(Relaxed);
        (v != UNSET).then_some(Pfn(v))
    }

    /// Whether a direct compactor asked for the skip hints to be reset
    /// (`compact_blockskip_flush`).
    pub fn blockskip_flush(&self) -> bool {
        self.blockskip_flush.load(Relaxed)
    }

    /// Sets the scanners' cached positions back to the zone's ends
    /// (`reset_cached_positions`).
    pub(crate) fn reset_cached_positions(&self, start: u64, free_start: u64) {
        self.cached_migrate[0].store(start, Relaxed);
        self.cached_migrate[1].store(start, Relaxed);
        self.cached_free.store(free_start, Relaxed);
    }
}

/// One zone of a node as the node-level entry points see it: the zone, its
/// compaction state, and its watermarks for the request at hand.
pub struct NodeZone<'z, Z: ZoneLock + ?Sized> {
    /// The zone.
    pub zone: &'z Z,
    /// Its compaction state.
    pub state: &'z CompactState,
    /// Its watermarks and the lowmem reserve held against the requester.
    pub marks: ZoneMarks,
}

impl<'z, Z: ZoneLock + ?Sized> NodeZone<'z, Z> {
    /// Bundles a zone with its state and marks.
    pub fn new(zone: &'z Z, state: &'z CompactState, marks: ZoneMarks) -> Self {
        NodeZone { zone, state, marks }
    }
}

impl<Z: ZoneLock + ?Sized> Clone for NodeZone<'_, Z> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Z: ZoneLock + ?Sized> Copy for NodeZone<'_, Z> {}
