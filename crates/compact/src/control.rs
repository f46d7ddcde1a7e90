//! What a run is asked to do (`compact_control`'s inputs, spec 03 §3.3) and
//! what it reports.

use pageframe_buddy::{Order, Pfn};
use pageframe_mobility::MigrateType;

use crate::{CompactResult, DEFAULT_EXTFRAG_THRESHOLD, Mark, MigrateMode, Priority, ZoneMarks};

/// Who asked for a run; decides counters and a few rules.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RunKind {
    /// Direct compaction in the allocation slow path (may capture).
    Direct,
    /// kcompactd working for an order it was woken for.
    Kcompactd,
    /// kcompactd's proactive compaction: stops at a fragmentation score.
    Proactive,
    /// `compact_memory` / per-node `compact`: until the scanners meet.
    Manual,
}

/// The parameters of one zone run.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CompactRequest {
    /// Target order; `None` compacts without a target (Linux order −1).
    pub order: Option<Order>,
    /// The requester's migratetype (`gfp_migratetype`).
    pub migratetype: MigrateType,
    /// Migrate mode.
    pub mode: MigrateMode,
    /// Who asks.
    pub kind: RunKind,
    /// Scan from the zone's ends rather than the cached positions.
    pub whole_zone: bool,
    /// Ignore pageblock skip hints.
    pub ignore_skip_hint: bool,
    /// Take destinations from any pageblock type, not only movable.
    pub ignore_block_suitable: bool,
    /// The zone's watermarks for this requester.
    pub marks: ZoneMarks,
    /// Which watermark the request is checked against.
    pub mark: Mark,
    /// `vm.extfrag_threshold` (0..=1000).
    pub extfrag_threshold: u32,
    /// Hand a block of `order` freed by a migration straight to the caller
    /// (direct compaction only, spec 03 §8).
    pub capture: bool,
    /// Proactive runs stop a zone once its score is at or below this.
    pub proactive_low: u32,
}

impl CompactRequest {
    /// A direct-compaction run for `order` at `prio` (`compact_zone_order`):
    /// capture on, checked against the min watermark.
    pub fn direct(
        order: Order,
        migratetype: MigrateType,
        prio: Priority,
        marks: ZoneMarks,
    ) -> Self {
        CompactRequest {
            order: Some(order),
            migratetype,
            mode: prio.mode(),
            kind: RunKind::Direct,
            whole_zone: prio.is_full(),
            ignore_skip_hint: prio.is_full(),
            ignore_block_suitable: prio.is_full(),
            marks,
            mark: Mark::Min,
            extfrag_threshold: DEFAULT_EXTFRAG_THRESHOLD,
            capture: true,
            proactive_low: 0,
        }
    }

    /// kcompactd's run for an order it was woken for (spec 03 §11.2):
    /// sync-light, skip hints honoured, as an unmovable (`GFP_KERNEL`)
    /// request checked against the min watermark.
    pub fn kcompactd(order: Order, marks: ZoneMarks) -> Self {
        CompactRequest {
            order: Some(order),
            migratetype: MigrateType::Unmovable,
            mode: MigrateMode::SyncLight,
            kind: RunKind::Kcompactd,
            whole_zone: false,
            ignore_skip_hint: false,
            ignore_block_suitable: false,
            marks,
            mark: Mark::Min,
            extfrag_threshold: DEFAULT_EXTFRAG_THRESHOLD,
            capture: false,
            proactive_low: 0,
        }
    }

    /// A proactive run (spec 03 §11.3): no target order, sync-light, whole
    /// zone, skip hints ignored; stops once the zone's score is `<= low`.
    pub fn proactive(low: u32, marks: ZoneMarks) -> Self {
        CompactRequest {
            order: None,
            migratetype: MigrateType::Unmovable,
            mode: MigrateMode::SyncLight,
            kind: RunKind::Proactive,
            whole_zone: true,
            ignore_skip_hint: true,
            ignore_block_suitable: false,
            marks,
            mark: Mark::Min,
            extfrag_threshold: DEFAULT_EXTFRAG_THRESHOLD,
            capture: false,
            proactive_low: low,
        }
    }

    /// `compact_memory`: no target order, sync, whole zone, skip hints
    /// ignored, until the scanners meet.
    pub fn full(marks: ZoneMarks) -> Self {
        CompactRequest {
            order: None,
            migratetype: MigrateType::Unmovable,
            mode: MigrateMode::Sync,
            kind: RunKind::Manual,
            whole_zone: true,
            ignore_skip_hint: true,
            ignore_block_suitable: false,
            marks,
            mark: Mark::Min,
            extfrag_threshold: DEFAULT_EXTFRAG_THRESHOLD,
            capture: false,
            proactive_low: 0,
        }
    }

    pub(crate) fn is_direct(&self) -> bool {
        self.kind == RunKind::Direct
    }

    pub(crate) fn is_async(&self) -> bool {
        self.mode == MigrateMode::Async
    }
}

/// What one run did.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct RunStats {
    /// Frames the migrate scanner looked at.
    pub migrate_scanned: u64,
    /// Frames the free scanner looked at.
    pub free_scanned: u64,
    /// Frames isolated as migration sources.
    pub isolated_source: u64,
    /// Frames isolated as destinations.
    pub isolated_free: u64,
    /// Frames migrated.
    pub migrated: u64,
    /// Frames that failed to migrate (refused, pinned, no destination).
    pub failed: u64,
    /// Source blocks the kernel refused to isolate.
    pub isolate_refused: u64,
}

/// The result of one zone run.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CompactOutcome {
    /// What the run achieved.
    pub result: CompactResult,
    /// The block captured for a direct compactor: allocated as the request's
    /// migratetype, of exactly the request's order. The caller owns it.
    pub captured: Option<Pfn>,
    /// Counters of this run.
    pub stats: RunStats,
}

impl CompactOutcome {
    pub(crate) fn early(result: CompactResult) -> Self {
        CompactOutcome {
            result,
            captured: None,
            stats: RunStats::default(),
        }
    }
}
