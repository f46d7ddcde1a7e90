//! Per-node counters, named after Linux's vmstat lines where one exists
//! (`thp_fault_alloc`, `compact_stall`, ...).
//!
//! Huge-page counters are charged to the node the request came from (its
//! local node), so "remote" means served by another node. Compaction work
//! is counted once, per zone, by the compaction crate
//! ([`pageframe_compact::CompactStats`]); a node's snapshot adds its zones'
//! counters up.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_types::atomic::AtomicU64;

use pageframe_compact::{CompactStats, KcompactdStats};

macro_rules! node_counters {
    ($($(#[$m:meta])* $f:ident),* $(,)?) => {
        /// A snapshot of one node's counters.
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
        pub struct NodeStats {
            $($(#[$m])* pub $f: u64,)*
            /// Compaction of the node's zones (direct and background).
            pub compact: CompactStats,
            /// The node's kcompactd (zero while a tick is running).
            pub kcompactd: KcompactdStats,
        }

        #[derive(Debug, Default)]
        pub(crate) struct NodeCounters {
            $($f: AtomicU64,)*
        }

        impl NodeCounters {
            pub(crate) const fn new() -> Self {
                NodeCounters { $($f: AtomicU64::new(0),)* }
            }

            pub(crate) fn snapshot(&self) -> NodeStats {
                NodeStats {
                    $($f: self.$f.load(Relaxed),)*
                    compact: CompactStats::default(),
                    kcompactd: KcompactdStats::default(),
                }
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
                self.compact += o.compact;
                let (a, b) = (&mut self.kcompactd, o.kcompactd);
                a.wakes += b.wakes;
                a.proactive_checks += b.proactive_checks;
                a.proactive_runs += b.proactive_runs;
                a.backoffs += b.backoffs;
                a.idle_ticks += b.idle_ticks;
                a.backoff_ticks += b.backoff_ticks;
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
    /// Requests from this node that stalled in direct compaction or reclaim.
    stalls,
    /// Time those stalls took, nanoseconds (the kernel's clock).
    stall_ns,
    /// Requests from this node whose node-level deferral skipped
    /// compaction (the node-aware policy).
    node_deferred,
    /// Requests from this node whose remote compaction was skipped by the
    /// machine-wide back-off.
    global_skips,
    /// Direct reclaim calls on this node's zones.
    reclaim_calls,
    /// Frames direct reclaim freed on this node's zones.
    reclaimed,
    /// kcompactd wake-ups recorded for this node (`kcompactd_wake`).
    kcompactd_wakes,
);

impl NodeStats {
    /// Successful huge-page requests, local and remote.
    pub const fn thp_success(&self) -> u64 {
        self.thp_success_local + self.thp_success_remote
    }
}
