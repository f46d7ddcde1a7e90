//! Per-CPU counters, like Linux's vmstat.

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

impl PcpStats {
    /// What happened between `earlier` (a snapshot of the same cache) and
    /// `self`: each counter's difference, wrapping as the counters do.
    pub fn since(&self, earlier: &PcpStats) -> PcpStats {
        PcpStats {
            allocs: self.allocs.wrapping_sub(earlier.allocs),
            local_hits: self.local_hits.wrapping_sub(earlier.local_hits),
            misses: self.misses.wrapping_sub(earlier.misses),
            frees: self.frees.wrapping_sub(earlier.frees),
            refills: self.refills.wrapping_sub(earlier.refills),
            refilled_blocks: self.refilled_blocks.wrapping_sub(earlier.refilled_blocks),
            spills: self.spills.wrapping_sub(earlier.spills),
            spilled_pages: self.spilled_pages.wrapping_sub(earlier.spilled_pages),
            zone_lock_acquisitions: self
                .zone_lock_acquisitions
                .wrapping_sub(earlier.zone_lock_acquisitions),
            free_high_spills: self.free_high_spills.wrapping_sub(earlier.free_high_spills),
            drains: self.drains.wrapping_sub(earlier.drains),
            decays: self.decays.wrapping_sub(earlier.decays),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PcpStats;

    #[test]
    fn since_takes_each_counter_difference_and_wraps() {
        let earlier = PcpStats {
            allocs: 10,
            local_hits: 7,
            refills: u64::MAX,
            drains: 1,
            ..PcpStats::default()
        };
        let now = PcpStats {
            allocs: 25,
            local_hits: 19,
            refills: 2,
            drains: 1,
            decays: 4,
            ..PcpStats::default()
        };
        let d = now.since(&earlier);
        assert_eq!(d.allocs, 15);
        assert_eq!(d.local_hits, 12);
        assert_eq!(d.refills, 3, "a counter that wrapped");
        assert_eq!(d.drains, 0);
        assert_eq!(d.decays, 4);
        assert_eq!(d.since(&PcpStats::default()), d);
    }
}
