//! The free path (spec 04 §5.2-5.4).

use crate::error::PcpError;
use crate::foreign::FOREIGN_FRAMES;
use crate::pcp::{PcpFlags, PerCpuPages};
use crate::types::{COSTLY_ORDER, ListIndex, MigrateType, Order, Pfn};
use crate::zone::{PcpZone, ZoneFlags};

/// Where [`PerCpuPages::free_home_hit`] left an order-0 free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeFree {
    /// The frame is in its list's home: done.
    Hit,
    /// The frame lies outside its list's home; nothing changed.
    Foreign,
    /// Any other free (a spill due, a remote request waiting, the frame
    /// held already, a cache without homes); nothing changed.
    Other,
}

/// What a free did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeOutcome {
    /// The block went on the list; nothing left the cache.
    Cached,
    /// The block went on the list and this many base pages were spilled to
    /// the zone (`count` reached the threshold, or the slot memory was full).
    Spilled(u32),
}

impl PerCpuPages<'_> {
    /// `free_frozen_page_commit` (spec 04 §5.2): pushes the block at the head
    /// of its list, tracks the free streak, and spills a batch to the zone
    /// when `count` reaches the (possibly shrunk) threshold.
    ///
    /// `mt` is the list type; map a pageblock type with
    /// [`pcp_list_type`](crate::pcp_list_type) first (ISOLATE pages must bypass the PCP).
    /// The PCP does not check that `frame` is allocated: the facade's checked
    /// free does that before calling. `Err(NotCached)` leaves state unchanged.
    #[inline(always)]
    pub fn free<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frame: Pfn,
        order: Order,
        mt: MigrateType,
    ) -> Result<FreeOutcome, PcpError> {
        let li = ListIndex::of(order, mt, self.config.thp_order()).ok_or(PcpError::NotCached)?;
        if order.get() == 0
            && let Some(shift) = self.config.home_order()
        {
            // Into the home's bitmap, or foreign.
            if !self.homes[li.get()].put(frame, shift.get()) {
                return self.free_foreign(zone, frame);
            }
        } else if order.get() != 0 || self.lists.is_full() {
            return self.free_slow(zone, frame, order, li);
        } else if self.lists.push_head(li, frame).is_err() {
            return Err(PcpError::NoRoom);
        }
        // Order-0 fast path: the same steps as `free_slow` with the
        // high-order streak logic folded away, and a quick exit when the
        // zone is calm and `count` stays below `high`: `nr_pcp_high` would
        // then change nothing (high is kept within bounds between calls).
        self.account_order0_frees(1);
        let zflags = zone.flags();
        if zflags.is_empty() && self.count < self.high {
            return Ok(FreeOutcome::Cached);
        }
        Ok(self.commit_threshold(zone, zflags, li, false, 0))
    }

    /// The order-0 free [`free`](Self::free) makes of `frame`, of list
    /// type `mt`, when it lies in that list's home, the zone is calm and
    /// `count` stays below `high`, with no call on the way (a caller's hit
    /// path then needs no stack frame): [`HomeFree::Hit`]. A frame outside
    /// the home is [`HomeFree::Foreign`] (for
    /// [`free_foreign`](Self::free_foreign)), anything else
    /// [`HomeFree::Other`] (for `free`); both leave the cache unchanged.
    #[inline(always)]
    pub fn free_home_hit<Z: PcpZone>(&mut self, zone: &Z, frame: Pfn, mt: MigrateType) -> HomeFree {
        let Some((li, shift)) = self.home_list(mt) else {
            return HomeFree::Other;
        };
        let home = &mut self.homes[li.get()];
        if !home.contains(frame, shift) {
            return HomeFree::Foreign;
        }
        if self.count + 1 >= self.high || !zone.flags().is_empty() {
            return HomeFree::Other;
        }
        let Some(v) = home.vacancy(frame, shift) else {
            return HomeFree::Other;
        };
        home.fill(v);
        self.account_order0_frees(1);
        HomeFree::Hit
    }

    /// The order-0 free of `frame`, of list type `mt`, with no call on the
    /// way: hot if [`hot_takes`](Self::hot_takes) it, else as
    /// [`free_home_hit`](Self::free_home_hit).
    #[inline(always)]
    pub fn free_hit<Z: PcpZone>(&mut self, zone: &Z, frame: Pfn, mt: MigrateType) -> HomeFree {
        if self.hot_takes(frame, mt) && self.free_hot(frame, mt) {
            return HomeFree::Hit;
        }
        self.free_home_hit(zone, frame, mt)
    }

    /// Whether [`free_hit`](Self::free_hit) would keep `frame`, an order-0
    /// frame of list type `mt` being freed, hot (spec 04 §5.7): there is
    /// room, and it lies in the home of its list.
    #[inline(always)]
    pub fn hot_takes(&self, frame: Pfn, mt: MigrateType) -> bool {
        self.hot.has_room()
            && self
                .home_list(mt)
                .is_some_and(|(li, shift)| self.homes[li.get()].contains(frame, shift))
    }

    /// Holds `frame`, an order-0 frame of list type `mt` just freed, hot,
    /// counted as a free, after [`hot_takes`](Self::hot_takes) said yes:
    /// `false`, nothing changed, when there is no room.
    #[inline(always)]
    pub(crate) fn free_hot(&mut self, frame: Pfn, mt: MigrateType) -> bool {
        if !self.hot.push(frame, mt) {
            return false;
        }
        // Counted as a free, and the last free is of order 0 now; the
        // free streak and the refill scale (§5.2) are left as they were:
        // at most eight frames, on their way back to an allocation.
        self.stats.frees += 1;
        self.flags.remove(PcpFlags::PREV_FREE_HIGH_ORDER);
        true
    }

    /// Room for one more foreign frame: the foreign frames spilled when
    /// they fill their stack. Returns the pages spilled.
    #[inline(always)]
    fn make_room<Z: PcpZone>(&mut self, zone: &Z) -> u32 {
        if self.foreign.is_full() {
            return self.spill_foreign(zone);
        }
        0
    }

    /// Moves the hot frames to the foreign frames, on their way back to
    /// the zone with them (a drain's first step).
    pub(crate) fn cool<Z: PcpZone>(&mut self, zone: &Z) {
        while let Some((frame, mt)) = self.hot.pop_any() {
            self.make_room(zone);
            if !self.foreign.push(frame) {
                // No room even after a spill (the zone refused it): the
                // frame stays hot, nothing lost.
                let kept = self.hot.push(frame, mt);
                debug_assert!(kept);
                break;
            }
        }
    }

    /// An order-0 free outside its list's home ([`crate::PcpConfig::with_home`]):
    /// onto the foreign frames, which go back to the zone together once
    /// they are a batch (or [`FOREIGN_FRAMES`], the most they hold): a CPU
    /// that only frees (another CPU's pages) takes the zone lock once a
    /// batch, and no more than a batch of scattered frames waits here
    /// after a long streak of frees. The
    /// bookkeeping is an order-0 free's. [`free`](Self::free) makes it of a
    /// frame outside the home; a caller whose
    /// [`free_home_hit`](Self::free_home_hit) said [`HomeFree::Foreign`]
    /// makes it directly.
    #[inline(always)]
    pub fn free_foreign<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frame: Pfn,
    ) -> Result<FreeOutcome, PcpError> {
        let mut spilled = self.make_room(zone);
        if !self.foreign.push(frame) {
            return Err(PcpError::NoRoom);
        }
        self.alloc_factor >>= 1;
        self.stats.frees += 1;
        self.flags.remove(PcpFlags::PREV_FREE_HIGH_ORDER);
        if self.free_count < self.free_count_cap {
            self.free_count += 1;
        }
        // A batch at a time, however long the free streak: each frame
        // waiting here keeps a region of the zone from merging, and a
        // batch already takes the zone lock once for many frees. (A
        // sizing's batch is at least one.)
        if self.foreign.len() >= self.sizing.batch().min(FOREIGN_FRAMES as u32) {
            spilled += self.spill_foreign(zone);
        }
        Ok(match spilled {
            0 => FreeOutcome::Cached,
            n => FreeOutcome::Spilled(n),
        })
    }

    /// Frees every block of `frames` (same order and list type), with the
    /// same result as calling [`free`](Self::free) on each in turn: runs of
    /// order-0 frees that keep `count` below `high` while the zone is calm
    /// change nothing but counters, so they are pushed in one go and
    /// accounted once. Stops at the first error, reporting how many were
    /// freed.
    pub fn free_bulk<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frames: &[Pfn],
        order: Order,
        mt: MigrateType,
    ) -> Result<usize, (usize, PcpError)> {
        let li =
            ListIndex::of(order, mt, self.config.thp_order()).ok_or((0, PcpError::NotCached))?;
        let mut i = 0;
        while i < frames.len() {
            // With a home, each frame's place decides its list: one by one.
            if order.get() == 0 && self.config.home_order().is_none() && zone.flags().is_empty() {
                // Each of these frees leaves count < high (§5.3 then keeps
                // high and nothing spills).
                let below = self.high.saturating_sub(self.count + 1) as usize;
                let k = below.min(frames.len() - i);
                let pushed = if k > 0 {
                    self.lists.push_head_from(li, &frames[i..i + k])
                } else {
                    0
                };
                if pushed > 0 {
                    self.account_order0_frees(pushed as u32);
                    i += pushed;
                    continue;
                }
            }
            self.free(zone, frames[i], order, mt).map_err(|e| (i, e))?;
            i += 1;
        }
        Ok(frames.len())
    }

    /// `n` contiguous order-0 frames (1..=64) from `first`, freed at once
    /// when they lie in one bitmap word of the home of `mt`'s list and none
    /// is held: the same result as [`free`](Self::free) of each in turn.
    /// `None` (nothing changed) for any other run: free it frame by frame.
    #[inline]
    pub fn free_run<Z: PcpZone>(
        &mut self,
        zone: &Z,
        first: Pfn,
        n: u32,
        mt: MigrateType,
    ) -> Option<FreeOutcome> {
        let (li, shift) = self.home_list(mt)?;
        if !self.homes[li.get()].put_run(first, n, shift) {
            return None;
        }
        self.account_order0_frees(n);
        let zflags = zone.flags();
        if zflags.is_empty() && self.count < self.high {
            return Some(FreeOutcome::Cached);
        }
        Some(self.commit_threshold(zone, zflags, li, false, 0))
    }

    /// The bookkeeping of `k` order-0 frees that did not reach `high`.
    #[inline(always)]
    fn account_order0_frees(&mut self, k: u32) {
        self.alloc_factor = if k >= 8 { 0 } else { self.alloc_factor >> k };
        self.count += k;
        self.stats.frees += k as u64;
        self.flags.remove(PcpFlags::PREV_FREE_HIGH_ORDER);
        let cap = self.free_count_cap;
        if self.free_count < cap {
            self.free_count = (self.free_count + k).min(cap);
        }
    }

    /// The general free path: high orders, full slot memory. Inline at
    /// `free`'s callers, but for the spill that makes room and the
    /// threshold's tail.
    #[inline(always)]
    fn free_slow<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frame: Pfn,
        order: Order,
        li: ListIndex,
    ) -> Result<FreeOutcome, PcpError> {
        let mut made_room = 0;
        if self.lists.is_full() {
            made_room = self.make_room_for(zone, li);
        }
        if self.lists.push_head(li, frame).is_err() {
            // Only if the zone declined the spill above: the caller frees
            // the block to the zone directly (like a failed trylock, §12(9)).
            return Err(PcpError::NoRoom);
        }
        // A free halves the refill scale.
        self.alloc_factor >>= 1;
        let pages = order.pages() as u32;
        self.count += pages;
        self.stats.frees += 1;
        let batch = self.sizing.batch();

        let mut free_high = false;
        if order.get() > 0 && order.get() <= COSTLY_ORDER {
            // spec 04 §5.2 / §11(1): only a second consecutive high-order free
            // within a long free streak drains everything.
            free_high = self.free_count >= batch + self.sizing.high_min() / 2
                && self.flags.contains(PcpFlags::PREV_FREE_HIGH_ORDER)
                && (!self.flags.contains(PcpFlags::FREE_HIGH_BATCH) || self.count >= batch);
            self.flags.insert(PcpFlags::PREV_FREE_HIGH_ORDER);
        } else if self.flags.contains(PcpFlags::PREV_FREE_HIGH_ORDER) {
            self.flags.remove(PcpFlags::PREV_FREE_HIGH_ORDER);
        }
        if self.free_count < self.free_count_cap {
            self.free_count += pages;
        }
        let zflags = zone.flags();
        // The order-0 path's quick exit: a calm zone, no free-high drain
        // and `count` below `high` leave `nr_pcp_high` nothing to change.
        if made_room == 0 && !free_high && zflags.is_empty() && self.count < self.high {
            return Ok(FreeOutcome::Cached);
        }
        Ok(self.commit_threshold(zone, zflags, li, free_high, made_room))
    }

    /// Slot memory exhausted (fewer slots than suggested): a batch spilled
    /// first so that the block can be cached. Never loses a frame. Returns
    /// the pages spilled.
    #[cold]
    #[inline(never)]
    fn make_room_for<Z: PcpZone>(&mut self, zone: &Z, li: ListIndex) -> u32 {
        let b = self.sizing.batch().max(1);
        self.spill(zone, b, li)
    }

    /// Tail of `free_frozen_page_commit`: compute the threshold and spill if
    /// `count` reached it. `made_room`: pages already spilled by this free.
    #[inline(never)]
    fn commit_threshold<Z: PcpZone>(
        &mut self,
        zone: &Z,
        zflags: ZoneFlags,
        li: ListIndex,
        free_high: bool,
        made_room: u32,
    ) -> FreeOutcome {
        let batch = self.sizing.batch();
        let high = self.nr_pcp_high(zflags, batch, free_high);
        if self.count < high {
            return if made_room == 0 {
                FreeOutcome::Cached
            } else {
                FreeOutcome::Spilled(made_room)
            };
        }
        let n = self.nr_pcp_free(batch, high, free_high);
        if free_high {
            self.stats.free_high_spills += 1;
        }
        let spilled = self.spill(zone, n, li);
        if zflags.contains(ZoneFlags::BELOW_HIGH) {
            zone.recheck_below_high();
        }
        // nr_pcp_free can be 0 (high == batch): then nothing left.
        match made_room + spilled {
            0 => FreeOutcome::Cached,
            n => FreeOutcome::Spilled(n),
        }
    }

    /// `nr_pcp_high` (spec 04 §5.3): the threshold for this free, adjusting
    /// `high` on the way (shrink on free streaks, reclaim and pressure; make
    /// room for a batch on a mostly-freeing CPU).
    pub(crate) fn nr_pcp_high(&mut self, zflags: ZoneFlags, batch: u32, free_high: bool) -> u32 {
        let high = self.clamped_high();
        let high_min = self.sizing.high_min();
        if high == 0 {
            return 0;
        }
        if free_high {
            let cut = (batch as u64) << self.config.scale_max();
            self.high = (high as u64).saturating_sub(cut).max(high_min as u64) as u32;
            return 0;
        }
        if zflags.contains(ZoneFlags::RECLAIM_ACTIVE) {
            let fc = self.free_count.max(batch);
            self.high = high.saturating_sub(fc).max(high_min);
            return (4 * batch).min(self.high);
        }
        if self.sizing.is_fixed() {
            return high;
        }
        if zflags.contains(ZoneFlags::BELOW_HIGH) {
            let fc = self.free_count.max(batch);
            self.high = high.saturating_sub(fc).max(high_min);
            return self.count.max(high_min);
        }
        if self.count >= high {
            let need = self.free_count + batch;
            if self.high < need {
                self.high = need.clamp(high_min, self.sizing.high_max());
            }
        }
        high
    }

    /// `nr_pcp_free` (spec 04 §5.4): how many pages to spill.
    pub(crate) fn nr_pcp_free(&self, batch: u32, high: u32, free_high: bool) -> u32 {
        if free_high {
            return self.count.min(batch << self.config.scale_max());
        }
        if high < batch {
            return 1;
        }
        // Kernel clamp(v, lo, hi) = min(max(v, lo), hi): leave >= batch pages,
        // spill more after a longer free streak.
        self.free_count.max(batch).min(high - batch)
    }
}
