//! Per-CPU counters (principle 7: like Linux's vmstat).

/// Event counters of one CPU's cache. Plain integers: only the owner writes
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcpStats {
    /// Blocks handed out by [`alloc`](crate::PerCpuPages::alloc) and the bulk variant.
    pub allocs: u64,
    /// Allocations served from the list without touching the zone.
    pub local_hits: u64,
    /// Allocations that found the list empty and the zone empty too.
    pub misses: u64,
    /// Blocks freed into the cache.
    pub frees: u64,
    /// Refill calls into the zone (`rmqueue_bulk`).
    pub refills: u64,
    /// Blocks brought in by refills.
    pub refilled_blocks: u64,
    /// Spill calls into the zone (`free_pcppages_bulk`), drains included.
    pub spills: u64,
    /// Base pages sent back to the zone by spills.
    pub spilled_pages: u64,
    /// Zone-lock acquisitions this cache caused (one per refill or spill).
    pub zone_lock_acquisitions: u64,
    /// Spills forced by a high-order free streak (`free_high`, spec 04 §5.2).
    pub free_high_spills: u64,
    /// Full drains (local, remote request, or offline) performed.
    pub drains: u64,
    /// Decay steps run (spec 04 §6).
    pub decays: u64,
}
