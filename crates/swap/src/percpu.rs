//! The per-CPU cluster cache (spec 05 §3.4) and per-CPU counters.
//!
//! Linux guards `percpu_swap_cluster` with a local lock; here exclusivity is
//! the caller's contract expressed as `&mut SwapCpu`: one `SwapCpu` per CPU, used with preemption off in a
//! kernel or owned by one thread on a host. Counting here is plain
//! arithmetic, so the fast path takes no atomic read-modify-write besides
//! the cluster lock itself.

use crate::error::FallbackReason;
use crate::slot::{MAX_ORDERS, Order, Slot};

/// Allocation counters of one CPU (vmstat style, spec 05 §11).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CpuStats {
    /// Successful allocations per order (`swpout` per size; at the cluster
    /// order this is `thp_swpout`, the huge allocations).
    pub alloc: [u64; MAX_ORDERS],
    /// Failed allocations per order (`swpout_fallback`; for order > 0 the
    /// caller then splits the folio and allocates base slots).
    pub fallback: [u64; MAX_ORDERS],
    /// Failures by reason, all orders together.
    pub reasons: [u64; FallbackReason::COUNT],
    /// Allocations served from this CPU's cached cluster without the list lock.
    pub fast: u64,
    /// Allocations that went through the cluster lists.
    pub slow: u64,
}

impl CpuStats {
    /// Adds another CPU's counters to these.
    pub fn merge(&mut self, other: &CpuStats) {
        for i in 0..MAX_ORDERS {
            self.alloc[i] += other.alloc[i];
            self.fallback[i] += other.fallback[i];
        }
        for i in 0..FallbackReason::COUNT {
            self.reasons[i] += other.reasons[i];
        }
        self.fast += other.fast;
        self.slow += other.slow;
    }

    /// Failures of `order` as a fraction of attempts (0 when none).
    pub fn fallback_ratio(&self, order: Order) -> f64 {
        let i = usize::from(order.get());
        let (Some(&alloc), Some(&fallback)) = (self.alloc.get(i), self.fallback.get(i)) else {
            return 0.0;
        };
        let a = alloc + fallback;
        if a == 0 {
            0.0
        } else {
            fallback as f64 / a as f64
        }
    }
}

/// One CPU's view of a swap device: per order, the next slot to try in the
/// cluster it allocated from last, plus its counters.
#[derive(Clone, Debug, Default)]
pub struct SwapCpu {
    pub(crate) next: [Option<Slot>; MAX_ORDERS],
    pub(crate) stats: CpuStats,
}

impl SwapCpu {
    /// An empty cache.
    pub const fn new() -> Self {
        SwapCpu {
            next: [None; MAX_ORDERS],
            stats: CpuStats {
                alloc: [0; MAX_ORDERS],
                fallback: [0; MAX_ORDERS],
                reasons: [0; FallbackReason::COUNT],
                fast: 0,
                slow: 0,
            },
        }
    }

    /// This CPU's counters.
    pub fn stats(&self) -> &CpuStats {
        &self.stats
    }

    /// Forgets the cached clusters (e.g. when the CPU goes offline).
    pub fn drain(&mut self) {
        self.next = [None; MAX_ORDERS];
    }
}
