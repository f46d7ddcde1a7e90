//! Per-node counters of the multi-node slow path, named after Linux's
//! vmstat lines where one exists (`thp_fault_alloc`, `compact_stall`, ...).
//!
//! THP counters are charged to the node the request came from (its local
//! node), so "remote" means served by another node. Compaction work is
//! charged to the node whose zones were compacted.

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! node_counters {
    ($($(#[$m:meta])* $f:ident),* $(,)?) => {
        /// A snapshot of one node's counters.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
        pub struct NodeStats {
            $($(#[$m])* pub $f: u64,)*
        }

        #[derive(Debug, Default)]
        pub(crate) struct NodeCounters {
            $($f: AtomicU64,)*
        }

        impl NodeCounters {
            pub(crate) fn snapshot(&self) -> NodeStats {
                NodeStats { $($f: self.$f.load(Relaxed),)* }
            }

            pub(crate) fn add(&self, s: &NodeStats) {
                $(if s.$f != 0 {
                    self.$f.fetch_add(s.$f, Relaxed);
                })*
            }
        }

        impl core::ops::AddAssign for NodeStats {
            fn add_assign(&mut self, o: NodeStats) {
                $(self.$f += o.$f;)*
            }
        }
    };
}

node_counters!(
    /// Huge-page requests made from this node (`thp_fault_alloc` + `thp_fault_fallback`).
    thp_attempts,
    /// Huge-page requests served by this node.
    thp_success_local,
    /// Huge-page requests served by another node.
    thp_success_remote,
    /// Huge-page requests that failed (`thp_fault_fallback`).
    thp_failed,
    /// Direct compactions on behalf of requests from this node that ran at
    /// least one zone (`compact_stall`).
    compact_stall,
    /// Time spent in those compactions (and their reclaim), nanoseconds.
    compact_stall_ns,
    /// Stalls after which the request got its block (`compact_success`).
    compact_success,
    /// Stalls after which it did not (`compact_fail`).
    compact_fail,
    /// Zone runs on this node's zones, direct or kcompactd.
    compact_runs,
    /// Compaction of this node skipped by deferral (zone or node level).
    compact_deferred,
    /// Requests from this node whose remote compaction was skipped by the
    /// machine-wide back-off.
    compact_global_skips,
    /// Frames scanned on this node's zones (`compact_*_scanned`).
    compact_scanned,
    /// Frames migrated on this node's zones (`pgmigrate_success`).
    compact_migrated,
    /// Direct reclaim calls on this node's zones.
    reclaim_calls,
    /// Frames direct reclaim freed on this node's zones.
    reclaimed,
    /// kcompactd wake-ups recorded for this node (`kcompactd_wake`).
    kcompactd_wakes,
    /// kcompactd work passes that ran on this node.
    kcompactd_runs,
);

impl NodeStats {
    /// Successful huge-page requests, local and remote.
    pub const fn thp_success(&self) -> u64 {
        self.thp_success_local + self.thp_success_remote
    }
}
