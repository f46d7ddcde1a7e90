//! The hooks the multi-node slow path calls to make room for a high-order
//! request: compact one zone, reclaim on one zone, and read the time.
//!
//! The facade keeps the policy (which zones, in what order, how often:
//! deferral, spec 03 §7, §11.1) and leaves the mechanism behind a trait:
//! [`crate::CompactDriver`] runs [`pageframe_compact::compact_zone`] with
//! the kernel's [`pageframe_compact::Migrator`]; tests script outcomes.
//! Compaction runs outside every zone lock the facade holds; an
//! implementation takes the zone's lock itself through
//! [`crate::Zone::with_zone`].

use pageframe_buddy::{Order, Pfn};
use pageframe_compact::{CompactResult, CompactState, Priority};
use pageframe_mobility::MigrateType;

use crate::topology::NodeId;
use crate::zone::Zone;

/// Work a run did: what it cost, in the units compaction is measured in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CompactWork {
    /// Frames the scanners looked at.
    pub scanned: u64,
    /// Frames migrated (each one a copy of its contents).
    pub migrated: u64,
}

/// The result of one zone run.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CompactRun {
    /// What it achieved (spec 03 §3.5): `Success`, a failure
    /// (`Complete`/`PartialSkipped`, which defer the zone after a non-async
    /// run), not started (`Skipped`, `Deferred`, `NotSuitableZone`), or
    /// aborted (`Contended`, which ends the pass).
    pub result: CompactResult,
    /// A block of exactly the requested order the run captured for the
    /// caller (spec 03 §8): already allocated, in the zone compacted, owned
    /// by the caller from now on. `None` leaves the block on the free lists.
    pub captured: Option<Pfn>,
    /// The work done.
    pub work: CompactWork,
}

impl CompactRun {
    /// A run that did not start.
    pub const fn skipped() -> CompactRun {
        CompactRun {
            result: CompactResult::Skipped,
            captured: None,
            work: CompactWork {
                scanned: 0,
                migrated: 0,
            },
        }
    }
}

/// The zone a [`Compactor`] is asked to compact.
#[derive(Clone, Copy)]
pub struct ZoneTarget<'z, 'a> {
    /// The zone's node.
    pub node: NodeId,
    /// The zone.
    pub zone: &'z Zone<'a>,
    /// Its compaction state.
    pub state: &'z CompactState,
    /// The requester's migratetype.
    pub mt: MigrateType,
    /// A kcompactd run (no requester waiting, nothing to capture) rather
    /// than direct compaction.
    pub background: bool,
}

/// The slow path's hooks into the rest of the kernel.
pub trait Compactor {
    /// Compacts `target` for a block of `order` at `prio`: moves movable
    /// allocations so that a free block of `order` appears for a request
    /// of `target.mt`. The facade has already applied deferral and
    /// suitability; `target.state` is the zone's compaction state (cached
    /// scanner positions, skip-hint flush, counters) kept by the machine.
    fn compact(&mut self, target: ZoneTarget<'_, '_>, order: Order, prio: Priority) -> CompactRun;

    /// Direct reclaim on `zone` of `node`: frees up to `pages` frames, and
    /// returns how many it freed. The default reclaims nothing (a machine
    /// without reclaimable memory, or a "compact only" caller).
    fn reclaim(&mut self, node: NodeId, zone: &Zone<'_>, pages: u64) -> u64 {
        let _ = (node, zone, pages);
        0
    }
}

/// A time source for the stall statistics, in nanoseconds.
pub trait Clock {
    /// Now, in nanoseconds from an arbitrary origin, never decreasing.
    fn now_ns(&self) -> u64;
}

/// A clock that always reads 0: stall times stay 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct NoClock;

impl Clock for NoClock {
    fn now_ns(&self) -> u64 {
        0
    }
}
