//! The hooks the multi-node slow path calls to make room for a high-order
//! request: compact one zone, reclaim on one zone, and read the time.
//!
//! The facade keeps the policy (which zones, in what order, how often:
//! deferral, spec 03 §7, §11.1) and leaves the mechanism to the caller: a
//! kernel drives `pageframe-compact` with its own page mover, the lab a
//! simulated one. Compaction runs outside every zone lock the facade holds;
//! an implementation takes the zone's lock itself through
//! [`crate::Zone::with_zone`].

use pageframe_buddy::{Order, Pfn};

use crate::topology::NodeId;
use crate::zone::Zone;

/// How hard a direct compaction may try (spec 03 §3.4); lower is harder.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum CompactPriority {
    /// Whole zone, skip hints ignored; deferral does not apply.
    SyncFull = 0,
    /// May block on most things; honours skip hints (the default).
    SyncLight = 1,
    /// Never blocks; gives up on a pageblock at the first frame it cannot
    /// move (the first attempt).
    Async = 2,
}

impl CompactPriority {
    /// The next harder priority, if any.
    pub const fn raised(self) -> Option<CompactPriority> {
        match self {
            CompactPriority::Async => Some(CompactPriority::SyncLight),
            CompactPriority::SyncLight => Some(CompactPriority::SyncFull),
            CompactPriority::SyncFull => None,
        }
    }
}

/// What one zone run achieved (the subset of spec 03 §3.5 the slow path
/// acts on). Ordered: combining zones keeps the maximum.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum CompactVerdict {
    /// Not started: too little free memory, or not worth it.
    Skipped,
    /// Not started: deferred after recent failures.
    Deferred,
    /// Scanned to the end without making a block of the order: a failure
    /// (defers the zone after a non-async run).
    Complete,
    /// Stopped early (contention, async abort): no verdict on the zone.
    Aborted,
    /// A free block of the order should now exist (or was captured).
    Success,
}

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
    /// What it achieved.
    pub verdict: CompactVerdict,
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
            verdict: CompactVerdict::Skipped,
            captured: None,
            work: CompactWork {
                scanned: 0,
                migrated: 0,
            },
        }
    }
}

/// The slow path's hooks into the rest of the kernel.
pub trait Compactor {
    /// Compacts `zone` of `node` for a block of `order` at `prio`: moves
    /// movable allocations so that a free block of `order` appears.
    fn compact(
        &mut self,
        node: NodeId,
        zone: &Zone<'_>,
        order: Order,
        prio: CompactPriority,
    ) -> CompactRun;

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
