//! Device-wide counters and the list report (spec 05 §11).

use core::sync::atomic::Ordering;

use pageframe_types::atomic::AtomicU64;

use crate::slot::MAX_ORDERS;

/// Rare events counted on the device (relaxed atomics: none of them is on
/// the allocation fast path).
#[derive(Default)]
pub(crate) struct DeviceCounters {
    pub splits: AtomicU64,
    pub huge_swapin: AtomicU64,
    pub huge_swapin_fallback: AtomicU64,
    pub discarded: AtomicU64,
    pub huge_freed: AtomicU64,
}

impl DeviceCounters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A snapshot of the device: cluster lists and event counters.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DeviceStats {
    /// Clusters on the free list.
    pub free_clusters: u32,
    /// Clusters on `nonfull[order]`.
    pub nonfull: [u32; MAX_ORDERS],
    /// Clusters on `frag[order]`.
    pub frag: [u32; MAX_ORDERS],
    /// Clusters on the full list.
    pub full: u32,
    /// Clusters waiting for or undergoing discard.
    pub discard: u32,
    /// Times the list lock was taken.
    pub list_lock_acquisitions: u64,
    /// Huge entries split into base entries (legacy `split_swap_cluster`).
    pub splits: u64,
    /// Huge entries read back as one huge page (`thp_swpin`).
    pub huge_swapin: u64,
    /// Huge entries split at swap-in by policy or THP shortage
    /// (`thp_swpin_fallback`).
    pub huge_swapin_fallback: u64,
    /// Whole huge entries freed in one step (the huge-cluster free path).
    pub huge_freed: u64,
    /// Clusters discarded.
    pub discarded: u64,
    /// Continuation pages in use.
    pub cont_pages_used: u32,
    /// Continuation pages in the pool, in use or not.
    pub cont_pages_total: u32,
}
