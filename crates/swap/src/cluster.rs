//! Per-cluster state (spec 05 §3.3) and its state machine (§4).

use crate::map::MAX_CONT_LEVELS;

/// Exactly one state per cluster (spec 05 §3.3 `flags`, §4). The numeric
/// order matters: states up to `Frag` are allocatable.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
#[repr(u8)]
pub enum ClusterFlag {
    /// Off every list: owned by the one thread holding its lock right now.
    None = 0,
    /// Entirely free, on the free list.
    Free = 1,
    /// Has free slots and recently gained some, on `nonfull[order]`.
    Nonfull = 2,
    /// Has free slots but an allocation of its order failed or moved on, on
    /// `frag[order]`.
    Frag = 3,
    /// Every slot in use, on the full list.
    Full = 4,
    /// Free, waiting for a discard before reuse.
    Discard = 5,
}

/// A read-only view of one cluster.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ClusterSnapshot {
    /// State.
    pub flag: ClusterFlag,
    /// Allocated slots, header and bad slots included.
    pub count: u32,
    /// Order the cluster is dedicated to (0 when free).
    pub order: u8,
    /// Holds one whole-cluster THP entry that was not split.
    pub huge: bool,
}

/// The state protected by a cluster's lock: its count, flag and order, the
/// count bytes of its slots and the continuation pages attached to it.
pub(crate) struct ClusterInner<'a> {
    pub map: &'a mut [u8],
    /// No slot before this offset is free (a lower bound the scans start
    /// from; lowered on every free, raised past runs taken at it).
    pub hint: u32,
    /// Which 8-slot groups have a free slot (order-0 search in O(1)).
    pub summary: crate::scan::Summary,
    pub cont: [Option<&'a mut [u8]>; MAX_CONT_LEVELS],
    pub count: u32,
    pub flag: ClusterFlag,
    pub order: u8,
    pub huge: bool,
}

impl ClusterInner<'_> {
    /// `cluster_is_usable` (spec 05 §4) for the per-CPU fast path: on an
    /// allocatable partial list and either order 0 (which may use any
    /// cluster) or dedicated to the order. Free clusters are taken through
    /// the lists only, so that one of them is never nibbled by a stale hint.
    pub fn usable(&self, order: u8) -> bool {
        matches!(self.flag, ClusterFlag::Nonfull | ClusterFlag::Frag)
            && (order == 0 || self.order == order)
            && !self.huge
    }

    pub fn snapshot(&self) -> ClusterSnapshot {
        ClusterSnapshot {
            flag: self.flag,
            count: self.count,
            order: self.order,
            huge: self.huge,
        }
    }
}

/// A cluster lock and its state, on a cache line of its own so that CPUs
/// working on neighbouring clusters do not share a line.
#[repr(align(64))]
pub(crate) struct ClusterCell<'a>(pub crate::sync::Mutex<ClusterInner<'a>>);
