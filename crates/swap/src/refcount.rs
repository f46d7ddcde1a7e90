//! Reference counting on entries (spec 05 §6): map references from page
//! tables, the swap-cache bit, and freeing when both are gone. Every
//! operation checks all slots of the entry first and changes nothing on
//! error.

use crate::cluster::ClusterInner;
use crate::device::SwapDevice;
use crate::error::SwapError;
use crate::map::{self, Digits, MAP_BAD, MapFlags};
use crate::slot::{Order, Slot};
use crate::stats::DeviceCounters;

const CACHE: u8 = MapFlags::HAS_CACHE.bits();

impl<'a> SwapDevice<'a> {
    /// Runs `f` on the locked cluster of the entry after the common checks
    /// (range, alignment, huge entries only as a whole).
    fn with_entry<R>(
        &self,
        slot: Slot,
        order: Order,
        f: impl FnOnce(&mut ClusterInner<'a>, usize, usize) -> Result<R, SwapError>,
    ) -> Result<R, SwapError> {
        let (idx, off, n) = self.locate(slot, order)?;
        let mut g = self.clusters[idx].0.lock();
        if g.huge && n != self.cs {
            // Legacy CLUSTER_FLAG_HUGE (spec 05 §8, §10): until the entry is
            // split, its slots are only handled together.
            return Err(SwapError::HugeEntry);
        }
        f(&mut g, off, n)
    }

    fn check_in_use(
        g: &ClusterInner<'a>,
        base: u32,
        off: usize,
        n: usize,
    ) -> Result<(), SwapError> {
        for i in 0..n {
            match g.map[off + i] {
                0 => return Err(SwapError::NotInUse(Slot::new(base + i as u32))),
                MAP_BAD => return Err(SwapError::BadSlot(Slot::new(base + i as u32))),
                _ => {}
            }
        }
        Ok(())
    }

    /// Adds one map reference to every slot of the entry (`swap_duplicate`:
    /// a page-table entry now holds it; for a huge entry, the PMD swap entry
    /// references all its slots). Counts past 62 carry into continuation
    /// storage; without room the call fails with
    /// [`SwapError::CountOverflow`].
    pub fn duplicate(&self, slot: Slot, order: Order) -> Result<(), SwapError> {
        let (idx, off, n) = self.locate(slot, order)?;
        let mut g = self.clusters[idx].0.lock();
        if g.huge && n != self.cs {
            return Err(SwapError::HugeEntry);
        }
        Self::check_in_use(&g, slot.get(), off, n)?;
        let ClusterInner { map, cont, .. } = &mut *g;
        let mut depth = 0;
        let mut first_carry = slot;
        for i in 0..n {
            let d = Digits {
                levels: cont,
                index: off + i,
            };
            let here = slot.get() + i as u32;
            match d.carry_depth(map[off + i]) {
                None => return Err(SwapError::CountOverflow(Slot::new(here))),
                Some(c) if c > depth => {
                    depth = c;
                    first_carry = Slot::new(here);
                }
                Some(_) => {}
            }
        }
        let missing = cont[..depth].iter().filter(|c| c.is_none()).count();
        if missing > 0 {
            let mut pool = self.pool.lock();
            if pool.available() < missing {
                return Err(SwapError::CountOverflow(first_carry));
            }
            for c in cont[..depth].iter_mut() {
                if c.is_none() {
                    *c = pool.take();
                }
            }
        }
        for i in 0..n {
            let mut d = Digits {
                levels: cont,
                index: off + i,
            };
            map[off + i] = d.increment(map[off + i]);
        }
        Ok(())
    }

    /// Drops one map reference from every slot of the entry
    /// (`swap_entries_put_map`). Slots left with neither references nor the
    /// cache bit become free; returns how many.
    pub fn put_map(&self, slot: Slot, order: Order) -> Result<u32, SwapError> {
        let (idx, off, n) = self.locate(slot, order)?;
        let mut g = self.clusters[idx].0.lock();
        if g.huge && n != self.cs {
            return Err(SwapError::HugeEntry);
        }
        Self::check_in_use(&g, slot.get(), off, n)?;
        let ClusterInner { map, cont, .. } = &mut *g;
        for i in 0..n {
            let b = map[off + i];
            if map::low(b) == 0 && !map::continued(b) {
                return Err(SwapError::CountUnderflow(Slot::new(slot.get() + i as u32)));
            }
        }
        let first = map[off];
        let freed = if n > 1
            && map::low(first) == 1
            && !map::continued(first)
            && map[off..off + n].iter().all(|&b| b == first)
        {
            // spec 05 §6 fast case: one uniform reference on every slot.
            map[off..off + n].fill(first - 1);
            if first - 1 == 0 { n } else { 0 }
        } else {
            let mut freed = 0;
            let mut borrowed = false;
            for i in 0..n {
                let mut d = Digits {
                    levels: cont,
                    index: off + i,
                };
                borrowed |= map::low(map[off + i]) == 0;
                map[off + i] = d.decrement(map[off + i]);
                freed += (map[off + i] == 0) as usize;
            }
            if borrowed {
                self.trim_continuation(cont);
            }
            freed
        };
        self.account_freed(idx, off..off + n, &mut g, freed);
        Ok(freed as u32)
    }

    /// Drops the swap-cache bit of every slot of the entry
    /// (`put_swap_folio`): the folio left the swap cache. Slots without map
    /// references become free; a huge entry with none frees its whole
    /// cluster in one step. Returns how many slots were freed.
    pub fn put_cache(&self, slot: Slot, order: Order) -> Result<u32, SwapError> {
        let (idx, off, n) = self.locate(slot, order)?;
        let mut g = self.clusters[idx].0.lock();
        if g.huge && n != self.cs {
            return Err(SwapError::HugeEntry);
        }
        Self::check_in_use(&g, slot.get(), off, n)?;
        if let Some(i) = (0..n).find(|&i| !map::has_cache(g.map[off + i])) {
            return Err(SwapError::NoCache(Slot::new(slot.get() + i as u32)));
        }
        let freed = self.drop_cache(&mut g, off, n);
        self.account_freed(idx, off..off + n, &mut g, freed);
        Ok(freed as u32)
    }

    /// Frees an entry that only the swap cache holds (a fresh allocation
    /// whose swap-out was abandoned, or the end of a swap-in). Fails with
    /// [`SwapError::StillMapped`] if a slot still has map references.
    pub fn free(&self, slot: Slot, order: Order) -> Result<(), SwapError> {
        let (idx, off, n) = self.locate(slot, order)?;
        let mut g = self.clusters[idx].0.lock();
        if g.huge && n != self.cs {
            return Err(SwapError::HugeEntry);
        }
        Self::check_in_use(&g, slot.get(), off, n)?;
        for i in 0..n {
            let b = g.map[off + i];
            let here = Slot::new(slot.get() + i as u32);
            if !map::has_cache(b) {
                return Err(SwapError::NoCache(here));
            }
            if b != CACHE {
                return Err(SwapError::StillMapped(here));
            }
        }
        let freed = self.drop_cache(&mut g, off, n);
        self.account_freed(idx, off..off + n, &mut g, freed);
        Ok(())
    }

    /// Claims the swap cache for every slot of the entry before reading it
    /// in (`swapcache_prepare`): fails with [`SwapError::CacheExists`] if a
    /// slot already has the cache bit (someone else is swapping it in).
    pub fn swapcache_prepare(&self, slot: Slot, order: Order) -> Result<(), SwapError> {
        self.with_entry(slot, order, |g, off, n| {
            Self::check_in_use(g, slot.get(), off, n)?;
            if let Some(i) = (0..n).find(|&i| map::has_cache(g.map[off + i])) {
                return Err(SwapError::CacheExists(Slot::new(slot.get() + i as u32)));
            }
            for b in &mut g.map[off..off + n] {
                *b |= CACHE;
            }
            Ok(())
        })
    }

    /// Clears the cache bit on `n` checked slots; returns how many became 0.
    fn drop_cache(&self, g: &mut ClusterInner<'a>, off: usize, n: usize) -> usize {
        let run = &mut g.map[off..off + n];
        if run.iter().all(|&b| b == CACHE) {
            // spec 05 §6: every slot cache-only, free them all at once (for a
            // huge entry: the whole cluster in one step).
            run.fill(0);
            if n == self.cs {
                DeviceCounters::bump(&self.counters.huge_freed);
            }
            return n;
        }
        let mut freed = 0;
        for b in run.iter_mut() {
            *b &= !CACHE;
            freed += (*b == 0) as usize;
        }
        freed
    }

    /// After a borrow, give back the top continuation pages no slot of the
    /// cluster uses any more (Linux keeps them until swapoff; the pool here
    /// is small and shared, so it is refilled as soon as possible).
    fn trim_continuation(&self, cont: &mut [Option<&'a mut [u8]>]) {
        for c in cont.iter_mut().rev() {
            match c {
                Some(page) if page.iter().all(|&d| d == 0) => {
                    if let Some(page) = c.take() {
                        self.pool.lock().give(page);
                    }
                }
                Some(_) => return,
                None => {}
            }
        }
    }

    fn account_freed(
        &self,
        idx: usize,
        range: core::ops::Range<usize>,
        g: &mut ClusterInner<'a>,
        freed: usize,
    ) {
        if freed > 0 {
            g.hint = g.hint.min(range.start as u32);
            crate::scan::refresh(&mut g.summary, g.map, range.start, range.end);
            g.count -= freed as u32;
            self.settle_after_free(idx, g);
        }
    }
}
