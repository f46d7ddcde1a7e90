//! Result codes, priorities and migrate modes (spec 03 §3.4, §3.5).

use core::fmt;

/// What a compaction run (or a direct-compaction pass over several zones)
/// achieved. Ordered: callers combining zones keep the maximum (spec 03
/// §3.5).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum CompactResult {
    /// The fragmentation index says a failure would come from lack of
    /// memory, not fragmentation: reclaim, don't compact.
    NotSuitableZone = 0,
    /// Not started: too few free frames, or not worth it.
    Skipped = 1,
    /// Not started: deferred after recent failures (spec 03 §7).
    Deferred = 2,
    /// Internal: nothing suitable yet, keep going (treated as `Continue`).
    NoSuitablePage = 3,
    /// Keep scanning.
    Continue = 4,
    /// The scanners met after scanning the whole zone, without success.
    Complete = 5,
    /// The scanners met, but the run started from cached positions and so
    /// skipped part of the zone.
    PartialSkipped = 6,
    /// Aborted: contention, a stop request, or no destination frames.
    Contended = 7,
    /// A suitable block should now be allocatable (or was captured).
    Success = 8,
}

impl CompactResult {
    /// Linux's name (`COMPACT_*`).
    pub const fn name(self) -> &'static str {
        match self {
            CompactResult::NotSuitableZone => "NOT_SUITABLE_ZONE",
            CompactResult::Skipped => "SKIPPED",
            CompactResult::Deferred => "DEFERRED",
            CompactResult::NoSuitablePage => "NO_SUITABLE_PAGE",
            CompactResult::Continue => "CONTINUE",
            CompactResult::Complete => "COMPLETE",
            CompactResult::PartialSkipped => "PARTIAL_SKIPPED",
            CompactResult::Contended => "CONTENDED",
            CompactResult::Success => "SUCCESS",
        }
    }
}

impl fmt::Display for CompactResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How hard a migration may try (spec 03 §3.4). Ordered from the least to
/// the most blocking.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum MigrateMode {
    /// Never block: trylocks only, skip pages under writeback or dirty
    /// pages that would need blocking work.
    Async = 0,
    /// May block on most things, but not on writeback.
    SyncLight = 1,
    /// May wait for writeback (`compact_memory`).
    Sync = 2,
}

/// Direct-compaction priority (spec 03 §3.4): lower values try harder.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum Priority {
    /// Whole zone, skip hints and block suitability ignored, sync-light.
    SyncFull = 0,
    /// Sync-light migration, honouring skip hints (the default).
    SyncLight = 1,
    /// Async migration (the first attempt).
    Async = 2,
}

impl Priority {
    /// The most thorough priority (`MIN_COMPACT_PRIORITY`).
    pub const MIN: Priority = Priority::SyncFull;
    /// The priority costly orders stop at (`MIN_COMPACT_COSTLY_PRIORITY`).
    pub const MIN_COSTLY: Priority = Priority::SyncLight;
    /// The slow path's default (`DEF_COMPACT_PRIORITY`).
    pub const DEF: Priority = Priority::SyncLight;
    /// The first attempt (`INIT_COMPACT_PRIORITY`).
    pub const INIT: Priority = Priority::Async;

    /// The migrate mode a run at this priority uses.
    pub const fn mode(self) -> MigrateMode {
        match self {
            Priority::Async => MigrateMode::Async,
            Priority::SyncLight | Priority::SyncFull => MigrateMode::SyncLight,
        }
    }

    /// Whether runs at this priority scan the whole zone, ignoring skip
    /// hints and block suitability.
    pub const fn is_full(self) -> bool {
        matches!(self, Priority::SyncFull)
    }

    /// The next more thorough priority, if any.
    pub const fn raised(self) -> Option<Priority> {
        match self {
            Priority::Async => Some(Priority::SyncLight),
            Priority::SyncLight => Some(Priority::SyncFull),
            Priority::SyncFull => None,
        }
    }
}
