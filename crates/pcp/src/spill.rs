//! Spilling to the zone and draining (spec 04 §5.5, §7).

use crate::pcp::PerCpuPages;
use crate::types::ListIndex;
use crate::zone::{PcpZone, SpillBatch};

impl PerCpuPages<'_> {
    /// `free_pcppages_bulk` (spec 04 §5.5): returns up to `pages` base pages
    /// (whole blocks, so it may overshoot by less than one block) to the zone
    /// in one call, coldest first, round robin over the lists starting at
    /// `start`. Returns the pages actually spilled.
    pub(crate) fn spill<Z: PcpZone>(&mut self, zone: &Z, pages: u32, start: ListIndex) -> u32 {
        let n = pages.min(self.count);
        if n == 0 {
            return 0;
        }
        let thp = self.thp();
        let homes = self
            .config
            .home_order()
            .map(|shift| (&mut self.homes, shift.get()));
        let mut batch = SpillBatch::new(&mut self.lists, homes, thp, n, start);
        zone.spill(&mut batch);
        let out = batch.pages() as u32;
        self.count -= out;
        self.stats.spills += 1;
        self.stats.spilled_pages += out as u64;
        self.stats.zone_lock_acquisitions += 1;
        out
    }

    /// Sends every foreign frame back to the zone in one call. Returns the
    /// frames spilled. Out of line: once a batch of frees.
    #[inline(never)]
    pub(crate) fn spill_foreign<Z: PcpZone>(&mut self, zone: &Z) -> u32 {
        if self.foreign.len() == 0 {
            return 0;
        }
        let mut batch = SpillBatch::foreign(&mut self.lists, self.foreign.frames());
        zone.spill(&mut batch);
        let out = batch.pages() as u32;
        self.foreign.drop_newest(out as usize);
        self.stats.spills += 1;
        self.stats.spilled_pages += out as u64;
        self.stats.zone_lock_acquisitions += 1;
        out
    }

    /// `drain_pages_zone` (spec 04 §7): empties the cache in chunks of
    /// `batch << scale_max` pages, one zone-lock acquisition per chunk,
    /// and the foreign frames. Returns the pages drained.
    pub fn drain<Z: PcpZone>(&mut self, zone: &Z) -> u64 {
        let chunk = self.sizing.batch() << self.config.scale_max();
        let first = ListIndex::new(0).expect("list 0 exists");
        // The hot frames go back with the foreign frames.
        self.cool(zone);
        let mut total = 0u64;
        while self.count > 0 {
            let out = self.spill(zone, self.count.min(chunk), first);
            if out == 0 {
                break; // the zone refused; the blocks stay cached
            }
            total += out as u64;
        }
        total += u64::from(self.spill_foreign(zone));
        self.stats.drains += 1;
        total
    }

    /// `drain_zone_pages` (spec 04 §6-7): spills at most one batch (the NUMA
    /// remote-expiry step). Returns the pages spilled.
    pub fn drain_batch<Z: PcpZone>(&mut self, zone: &Z) -> u32 {
        let first = ListIndex::new(0).expect("list 0 exists");
        self.spill(zone, self.count.min(self.sizing.batch()), first)
    }
}
