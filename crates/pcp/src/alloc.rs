//! The allocation path (spec 04 §4).

use crate::error::AllocMiss;
use crate::pcp::PerCpuPages;
use crate::types::{ListIndex, MigrateType, Order, Pfn};
use crate::zone::{PcpZone, RefillSink, ZoneFlags};

impl PerCpuPages<'_> {
    /// `rmqueue_pcplist` (spec 04 §4.1): pops the head of the `(order, mt)`
    /// list, refilling it from the zone in one batch when empty.
    #[inline(always)]
    pub fn alloc<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
    ) -> Result<Pfn, AllocMiss> {
        let li = ListIndex::of(order, mt, self.config.thp_order()).ok_or(AllocMiss::NotCached)?;
        if order.get() == 0 && self.config.home_order().is_some() {
            return self.alloc_home(zone, mt, li);
        }
        // An allocation breaks a free streak.
        self.free_count >>= 1;
        if let Some(f) = self.lists.pop_head(li) {
            self.count -= order.pages() as u32;
            self.stats.allocs += 1;
            return Ok(f);
        }
        self.alloc_refill(zone, order, mt, li)
            .ok_or(AllocMiss::ZoneEmpty)
    }

    /// An order-0 allocation from the list's home (its lowest frame),
    /// refilled from the zone when empty.
    #[inline(always)]
    fn alloc_home<Z: PcpZone>(
        &mut self,
        zone: &Z,
        mt: MigrateType,
        li: ListIndex,
    ) -> Result<Pfn, AllocMiss> {
        // spec 04 §5.7: the frame this CPU freed last first.
        if let Some(f) = self.alloc_hot(mt).or_else(|| self.take_home(li)) {
            return Ok(f);
        }
        self.alloc_home_miss(zone, mt, li)
            .ok_or(AllocMiss::ZoneEmpty)
    }

    /// An order-0 allocation whose home's current region is empty: from
    /// another region of the home, else after a refill.
    #[inline(never)]
    fn alloc_home_miss<Z: PcpZone>(
        &mut self,
        zone: &Z,
        mt: MigrateType,
        li: ListIndex,
    ) -> Option<Pfn> {
        if self.homes[li.get()].switch() {
            return self.take_home(li);
        }
        self.free_count >>= 1;
        self.alloc_refill(zone, Order::new_truncated(0), mt, li)
    }

    /// The lowest frame of the current region of list `li`'s home, counted
    /// as an allocation (and breaking a free streak); `None`, nothing
    /// changed, when it holds none.
    #[inline(always)]
    fn take_home(&mut self, li: ListIndex) -> Option<Pfn> {
        let f = self.homes[li.get()].take()?;
        self.free_count >>= 1;
        self.count -= 1;
        self.stats.allocs += 1;
        Some(f)
    }

    /// The newest hot frame (spec 04 §5.7) if it is of list type `mt`,
    /// counted as an allocation; `None`, nothing changed, otherwise.
    #[inline(always)]
    pub(crate) fn alloc_hot(&mut self, mt: MigrateType) -> Option<Pfn> {
        let f = self.hot.pop(mt)?;
        self.free_count >>= 1;
        self.stats.allocs += 1;
        Some(f)
    }

    /// An order-0 frame of list type `mt` with no call on the way: the
    /// newest hot frame if it is of that type, else, if `home_ok()`, as
    /// [`alloc_home_hit`](Self::alloc_home_hit).
    #[inline(always)]
    pub fn alloc_hit(&mut self, mt: MigrateType, home_ok: impl FnOnce() -> bool) -> Option<Pfn> {
        if let Some(f) = self.alloc_hot(mt) {
            return Some(f);
        }
        if !home_ok() {
            return None;
        }
        self.alloc_home_hit(mt)
    }

    /// The order-0 allocation [`alloc`](Self::alloc) makes when the
    /// current region of the home of `mt`'s list holds a frame, with no
    /// call on the way (a caller's hit path then needs no stack frame):
    /// `None`, nothing changed, when it holds none or the list has no
    /// home; `alloc` then takes from another region or refills.
    #[inline(always)]
    pub fn alloc_home_hit(&mut self, mt: MigrateType) -> Option<Pfn> {
        // Without homes every home stays empty: no need to ask the
        // configuration first.
        let li = ListIndex::of(Order::new_truncated(0), mt, None)?;
        self.take_home(li)
    }

    /// `n` contiguous order-0 frames (2..=64) from the home of `mt`'s
    /// list, each counted as an allocation: the lowest such run within one
    /// bitmap word. A home that holds no frame is refilled first, as an
    /// order-0 allocation would refill it (a refill brings its frames a
    /// bitmap word at a time, so it brings runs). `None` without a home,
    /// for `n` out of range, or when the home holds no such run (nothing
    /// changed but that refill): the caller asks the zone then.
    #[inline]
    pub fn alloc_run<Z: PcpZone>(&mut self, zone: &Z, n: u32, mt: MigrateType) -> Option<Pfn> {
        let (li, _) = self.home_list(mt)?;
        if !(2..=64).contains(&n) {
            return None;
        }
        let refilled = self.homes[li.get()].is_empty();
        if refilled {
            self.refill_home(zone, mt, li);
        }
        let f = self.homes[li.get()].take_run(n)?;
        if refilled {
            // As the first block after a refill: not a local hit.
            self.not_local += u64::from(n);
        }
        self.free_count >>= 1;
        self.count -= n;
        self.stats.allocs += u64::from(n);
        Some(f)
    }

    /// A refill of the empty home of list `li` (of type `mt`), sized as
    /// an order-0 allocation's: for [`alloc_run`](Self::alloc_run).
    #[inline(never)]
    fn refill_home<Z: PcpZone>(&mut self, zone: &Z, mt: MigrateType, li: ListIndex) {
        let order = Order::new_truncated(0);
        let n = self.nr_pcp_alloc(zone.flags(), order);
        self.refill(zone, order, mt, li, n);
    }

    /// A refill of list `li` and its first block; `None` when the zone
    /// gave nothing. An `Option` comes back in two registers, where a
    /// `Result` of a frame and a miss would come back through memory on
    /// the hit path's account too (both meet where the caller goes on).
    #[inline(never)]
    fn alloc_refill<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
        li: ListIndex,
    ) -> Option<Pfn> {
        let n = self.nr_pcp_alloc(zone.flags(), order);
        self.refill(zone, order, mt, li, n);
        self.take_refilled(order, li).ok()
    }

    /// The first block after a refill of list `li` (no local hit), or a
    /// miss when the refill brought none.
    fn take_refilled(&mut self, order: Order, li: ListIndex) -> Result<Pfn, AllocMiss> {
        match self.pop_head(li) {
            Some(f) => {
                self.count -= order.pages() as u32;
                self.stats.allocs += 1;
                self.not_local += 1;
                Ok(f)
            }
            None => {
                self.stats.misses += 1;
                Err(AllocMiss::ZoneEmpty)
            }
        }
    }

    /// [`alloc`](Self::alloc) for a caller that must not wait (an NMI
    /// handler, a tracer): a block off the list, or one from a refill the
    /// zone grants at once ([`PcpZone::try_refill`]); never a spill. A
    /// refill that would have to spill first (every slot in use) or that
    /// the zone refuses returns [`AllocMiss::Busy`] with nothing changed:
    /// not the lists, the counters or the tuning of `high`.
    #[inline]
    pub fn try_alloc<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
    ) -> Result<Pfn, AllocMiss> {
        let li = ListIndex::of(order, mt, self.config.thp_order()).ok_or(AllocMiss::NotCached)?;
        if order.get() == 0
            && let Some(f) = self.alloc_hot(mt)
        {
            return Ok(f);
        }
        if self.list_len(li) > 0 {
            // A hit, which `alloc` takes without calling the zone.
            return self.alloc(zone, order, mt);
        }
        self.try_alloc_refill(zone, order, mt, li)
    }

    /// [`try_alloc`](Self::try_alloc) after a miss: a refill the zone
    /// grants at once.
    #[inline(never)]
    fn try_alloc_refill<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
        li: ListIndex,
    ) -> Result<Pfn, AllocMiss> {
        if self.lists.is_full() {
            return Err(AllocMiss::Busy);
        }
        // `nr_pcp_alloc` tunes `high` as it sizes the refill: undone if
        // the zone refuses.
        let tuning = (self.high, self.alloc_factor);
        let n = self.nr_pcp_alloc(zone.flags(), order);
        if self
            .refill_with(order, li, n, |sink| zone.try_refill(order, mt, sink))
            .is_none()
        {
            (self.high, self.alloc_factor) = tuning;
            return Err(AllocMiss::Busy);
        }
        self.free_count >>= 1;
        self.take_refilled(order, li)
    }

    /// Fills `out` with blocks of `(order, mt)`, refilling as needed; returns
    /// how many were written (fewer only if the zone ran dry). The per-block
    /// work is the same as [`alloc`](Self::alloc) without the per-call
    /// overhead (like `alloc_pages_bulk`).
    pub fn alloc_bulk<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
        out: &mut [Pfn],
    ) -> Result<usize, AllocMiss> {
        let li = ListIndex::of(order, mt, self.config.thp_order()).ok_or(AllocMiss::NotCached)?;
        if order.get() == 0 && self.config.home_order().is_some() {
            // A home list is a bitmap: one frame at a time.
            let mut done = 0;
            while done < out.len() {
                match self.alloc(zone, order, mt) {
                    Ok(f) => out[done] = f,
                    Err(_) => break,
                }
                done += 1;
            }
            return Ok(done);
        }
        self.free_count >>= 1;
        let pages = order.pages() as u32;
        let mut done = 0;
        while done < out.len() {
            let k = self.lists.pop_head_into(li, &mut out[done..]);
            if k > 0 {
                done += k;
                self.count -= k as u32 * pages;
                continue;
            }
            let n = self.nr_pcp_alloc(zone.flags(), order);
            if self.refill(zone, order, mt, li, n) == 0 {
                self.stats.misses += 1;
                break;
            }
            // The first block after a refill is not a local hit.
            if let Some(f) = self.pop_head(li) {
                out[done] = f;
                done += 1;
                self.count -= pages;
                self.not_local += 1;
            }
        }
        self.stats.allocs += done as u64;
        Ok(done)
    }

    /// The hottest block of list `li` (a home list's lowest frame).
    #[inline]
    fn pop_head(&mut self, li: ListIndex) -> Option<Pfn> {
        match (self.config.home_order(), self.homes.get_mut(li.get())) {
            (Some(_), Some(h)) => h.take_any(),
            _ => self.lists.pop_head(li),
        }
    }

    /// `nr_pcp_alloc` (spec 04 §4.2): refill size in blocks of `order`.
    /// Grows `high` (the CPU keeps refilling, so it wants a bigger cache) and
    /// doubles the next order-0 refill while there is room below `high`.
    pub(crate) fn nr_pcp_alloc(&mut self, zflags: ZoneFlags, order: Order) -> u32 {
        let base = self.sizing.batch();
        let mut high = self.clamped_high();
        if high < base {
            return 1; // disabled or boot pageset
        }
        let mut b = if order.get() > 0 {
            base
        } else {
            base << self.alloc_factor
        };
        if !self.sizing.is_fixed() && !zflags.contains(ZoneFlags::BELOW_HIGH) {
            high = (high + b).min(self.sizing.high_max());
            self.high = high;
        }
        if order.get() == 0 {
            let cap = (high as i64 - self.count as i64 - base as i64).max(base as i64);
            if (b as i64) <= cap && self.alloc_factor < self.config.scale_max() {
                self.alloc_factor += 1;
            }
            b = (b as i64).min(cap) as u32;
        }
        if b > 1 {
            // Same page volume for higher orders.
            b = (b >> order.get()).max(2);
        }
        b
    }

    /// One `rmqueue_bulk` call: asks the zone for up to `n` blocks (fewer if
    /// the slot memory is short). Returns the blocks received.
    pub(crate) fn refill<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
        li: ListIndex,
        n: u32,
    ) -> usize {
        if self.lists.is_full() {
            // Every slot holds some other list's block: make room first.
            let b = self.sizing.batch().max(1);
            self.spill(zone, b, li);
        }
        self.refill_with(order, li, n, |sink| {
            zone.refill(order, mt, sink);
            true
        })
        .unwrap_or(0)
    }

    /// A refill of list `li` by up to `n` blocks of `order` through `ask`
    /// (one call into the zone): the blocks received, or `None`, with
    /// nothing counted, when `ask` says the zone refused.
    fn refill_with(
        &mut self,
        order: Order,
        li: ListIndex,
        n: u32,
        ask: impl FnOnce(&mut RefillSink<'_, '_>) -> bool,
    ) -> Option<usize> {
        // The sink refuses blocks once the slots run out (the zone keeps
        // them); a home list's sink, blocks of another region.
        let home = match self.config.home_order() {
            Some(shift) if order.get() == 0 => Some((&mut self.homes[li.get()], shift.get())),
            _ => None,
        };
        let mut sink = RefillSink::new(&mut self.lists, home, li, n as usize);
        if !ask(&mut sink) {
            return None;
        }
        let got = sink.taken();
        self.count += got as u32 * order.pages() as u32;
        self.stats.refills += 1;
        self.stats.refilled_blocks += got as u64;
        self.stats.zone_lock_acquisitions += 1;
        Some(got)
    }
}
