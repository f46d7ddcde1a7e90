//! `per_cpu_pages`: one CPU's cache for one zone (spec 04 §2.1).
//!
//! Every method takes `&mut self`: exclusive access is the caller's
//! contract, proven by the borrow (see [`crate::percpu`] for how a CPU gets
//! one). Nothing here is atomic.

use crate::error::PcpError;
use crate::foreign::Foreign;
use crate::home::Home;
use crate::hot::Hot;
use crate::lists::{Lists, Slot};
use crate::sizing::{PcpConfig, PcpSizing};
use crate::stats::PcpStats;
use crate::types::{ListIndex, MigrateType, NR_PCP_LISTS, Order, PCP_TYPES};

bitflags::bitflags! {
    /// `PCPF_*` flags (spec 04 §2.1).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub struct PcpFlags: u8 {
        /// The previous free was of a cached order above 0 (§5.2).
        const PREV_FREE_HIGH_ORDER = 1 << 0;
        /// This CPU's LLC slice holds more than 3 batches (§8).
        const FREE_HIGH_BATCH = 1 << 1;
    }
}

/// One CPU's page cache for one zone. In the declared order: what every
/// operation reads first, the homes' bitmaps (most of its size) last, so
/// that a hit touches as few pages of it as it can.
#[derive(Debug)]
#[repr(C)]
pub struct PerCpuPages<'m> {
    pub(crate) lists: Lists<'m>,
    pub(crate) count: u32,
    pub(crate) high: u32,
    pub(crate) sizing: PcpSizing,
    pub(crate) config: PcpConfig,
    pub(crate) flags: PcpFlags,
    pub(crate) alloc_factor: u8,
    pub(crate) free_count: u32,
    /// `batch << scale_max`: `free_count` stops growing there (§5.2).
    pub(crate) free_count_cap: u32,
    /// The counters, but for `local_hits`, which [`PerCpuPages::stats`]
    /// works out from `allocs` and `not_local`: a hit counts one counter.
    pub(crate) stats: PcpStats,
    /// Allocations served by the zone through a refill (not local hits).
    pub(crate) not_local: u64,
    /// The foreign frames (not counted in `count`).
    pub(crate) foreign: Foreign,
    /// The order-0 frames of its homes freed last, handed out first (spec
    /// 04 §5.7; not counted in `count`).
    pub(crate) hot: Hot,
    /// Per PCP type, with a home ([`crate::PcpConfig::with_home`]): its
    /// order-0 list, the frames of its home regions (the linked order-0
    /// lists stay empty then).
    pub(crate) homes: [Home; PCP_TYPES],
}

impl<'m> PerCpuPages<'m> {
    /// A cache over the caller's `slots` (one per cached block; see
    /// [`PcpSizing::suggested_slots`]). `high` starts at `high_min`.
    pub fn new(
        slots: &'m mut [Slot],
        sizing: PcpSizing,
        config: PcpConfig,
    ) -> Result<PerCpuPages<'m>, PcpError> {
        // Page counts are u32: the largest possible content must fit.
        let max_block = config.thp_order().map_or(8, |o| o.pages() as u32 as u64);
        if slots.is_empty() || (slots.len() as u64).saturating_mul(max_block) >= 1 << 31 {
            return Err(PcpError::InvalidStorage);
        }
        let mut flags = PcpFlags::empty();
        flags.set(PcpFlags::FREE_HIGH_BATCH, sizing.free_high_batch());
        Ok(PerCpuPages {
            lists: Lists::new(slots),
            count: 0,
            high: sizing.high_min(),
            sizing,
            config,
            flags,
            alloc_factor: 0,
            free_count: 0,
            free_count_cap: sizing.batch() << config.scale_max(),
            stats: PcpStats::default(),
            not_local: 0,
            homes: [Home::EMPTY; PCP_TYPES],
            foreign: Foreign::EMPTY,
            hot: Hot::EMPTY,
        })
    }

    /// Installs new zone-level values (`pageset_update`, spec 04 §2.3) and
    /// clamps `high` into the new bounds at once, so `high_min <= high <=
    /// high_max` holds between operations too (Linux clamps lazily on the
    /// next read; every path here clamps before use as well).
    pub fn set_sizing(&mut self, sizing: PcpSizing) {
        self.sizing = sizing;
        self.free_count_cap = sizing.batch() << self.config.scale_max();
        self.high = self.high.clamp(sizing.high_min(), sizing.high_max());
        self.flags
            .set(PcpFlags::FREE_HIGH_BATCH, sizing.free_high_batch());
    }

    /// The order-0 list of `mt` and its home's order, with homes.
    #[inline]
    pub(crate) fn home_list(&self, mt: MigrateType) -> Option<(ListIndex, u8)> {
        let shift = self.config.home_order()?;
        let li = ListIndex::of(Order::new_truncated(0), mt, self.config.thp_order())?;
        Some((li, shift.get()))
    }

    /// Base pages the cache holds: on its lists (Linux's `count`, which
    /// `high` bounds), on the foreign list and hot.
    #[inline]
    pub fn count(&self) -> u32 {
        self.count + self.foreign.len() + self.hot.len()
    }

    /// Order-0 frames held hot (spec 04 §5.7).
    #[inline]
    pub fn hot(&self) -> u32 {
        self.hot.len()
    }
    /// The current, auto-tuned drain threshold.
    #[inline]
    pub fn high(&self) -> u32 {
        self.high
    }
    /// Current zone-level values.
    #[inline]
    pub fn sizing(&self) -> PcpSizing {
        self.sizing
    }
    /// Static configuration.
    #[inline]
    pub fn config(&self) -> PcpConfig {
        self.config
    }
    /// `PCPF_*` flags.
    #[inline]
    pub fn flags(&self) -> PcpFlags {
        self.flags
    }
    /// Refill scale: an order-0 refill asks for `batch << alloc_factor`.
    #[inline]
    pub fn alloc_factor(&self) -> u8 {
        self.alloc_factor
    }
    /// Recent consecutive-free volume in pages.
    #[inline]
    pub fn free_count(&self) -> u32 {
        self.free_count
    }
    /// Counters.
    #[inline]
    pub fn stats(&self) -> PcpStats {
        PcpStats {
            local_hits: self.stats.allocs.wrapping_sub(self.not_local),
            ..self.stats
        }
    }
    /// Blocks on list `li`.
    #[inline]
    pub fn list_len(&self, li: ListIndex) -> u32 {
        match self.home_of(li) {
            Some(h) => h.len(),
            None => self.lists.len(li),
        }
    }

    /// The home that holds list `li`'s blocks, if the list has one (an
    /// order-0 list with [`crate::PcpConfig::with_home`]).
    #[inline]
    pub(crate) fn home_of(&self, li: ListIndex) -> Option<&Home> {
        self.config.home_order()?;
        self.homes.get(li.get())
    }
    /// Slots (blocks) the cache can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.lists.capacity()
    }
    /// Frames on the foreign list (order-0 frees outside their home, on
    /// their way back to the zone; see [`crate::PcpConfig::with_home`]).
    #[inline]
    pub fn foreign(&self) -> u32 {
        self.foreign.len()
    }
    /// Visits every cached block as `(list, frame)`: the hot frames first
    /// (on their type's order-0 list), then list by list, head first, the
    /// foreign list ([`ListIndex::is_foreign`]) last.
    pub fn for_each_block(&self, mut f: impl FnMut(ListIndex, crate::types::Pfn)) {
        let thp = self.config.thp_order();
        self.hot.for_each(|fr, mt| {
            if let Some(li) = ListIndex::of(Order::new_truncated(0), mt, thp) {
                f(li, fr);
            }
        });
        for i in 0..NR_PCP_LISTS {
            if let Some(li) = ListIndex::new(i) {
                if let Some(h) = self.home_of(li) {
                    h.for_each(|fr| f(li, fr));
                }
                self.lists.for_each(li, |fr| f(li, fr));
            }
        }
        for &fr in self.foreign.frames() {
            f(ListIndex::FOREIGN, fr);
        }
    }

    pub(crate) fn thp(&self) -> Order {
        // Lists 12/13 stay empty without THP; the order is never used then.
        self.config.thp_order().unwrap_or(Order::new_truncated(0))
    }

    /// `high` clamped into `[high_min, high_max]` (every read clamps first,
    /// spec 04 §4.2/§5.3).
    #[inline]
    pub(crate) fn clamped_high(&mut self) -> u32 {
        let h = self
            .high
            .clamp(self.sizing.high_min(), self.sizing.high_max());
        self.high = h;
        h
    }

    /// Walks all invariants of spec 04 §12 that a single cache can check:
    /// list links and slot accounting, `count` equals the pages on the lists
    /// (1), `high` within bounds (2), and the tuning state within range.
    pub fn validate(&self) -> Result<(), &'static str> {
        self.lists.check()?;
        self.hot.check()?;
        let mut twice = false;
        self.hot.for_each(|fr, _| {
            twice |= self.foreign.holds(fr);
            if let Some(shift) = self.config.home_order() {
                twice |= self.homes.iter().any(|h| h.holds(fr, shift.get()));
            }
        });
        if twice {
            return Err("a hot frame also on a list");
        }
        let thp = self.thp();
        let mut pages = 0u64;
        for i in 0..NR_PCP_LISTS {
            let li = ListIndex::new(i).ok_or("list index")?;
            if let (Some(h), Some(shift)) = (self.home_of(li), self.config.home_order()) {
                h.check(shift.get())?;
                if self.lists.len(li) != 0 {
                    return Err("a home list's frames on the linked list");
                }
            }
            let len = self.list_len(li) as u64;
            if i >= crate::types::NR_LOWORDER_LISTS && self.config.thp_order().is_none() && len > 0
            {
                return Err("THP list used without a THP order");
            }
            pages += len * li.order(thp).pages();
        }
        if pages != self.count as u64 {
            return Err("count differs from the pages on the lists");
        }
        if self.config.home_order().is_none() && self.foreign.len() != 0 {
            return Err("foreign frames without a home");
        }
        if self.high < self.sizing.high_min() || self.high > self.sizing.high_max() {
            return Err("high outside [high_min, high_max]");
        }
        if self.alloc_factor > self.config.scale_max() {
            return Err("alloc_factor above scale_max");
        }
        Ok(())
    }
}
