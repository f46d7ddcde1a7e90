//! Counters and the `buddyinfo`-style report.

use core::fmt;

use crate::Order;
use crate::policy::{ListId, MAX_LISTS, MergePolicy};
use crate::zone::BuddyZone;

/// Event counters of a zone (monotonic; `add_free_range` does not count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful allocations (`alloc`, `alloc_at`).
    pub allocs: u64,
    /// Successful frees.
    pub frees: u64,
    /// Blocks split in two.
    pub splits: u64,
    /// Buddy pairs merged.
    pub merges: u64,
    /// Allocations refused for lack of a free block.
    pub alloc_failures: u64,
}

impl<'a, P: MergePolicy> BuddyZone<'a, P> {
    /// The event counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Free frames over all lists.
    pub fn free_pages(&self) -> u64 {
        self.areas.total() + self.sub.total()
    }

    /// Free frames on one list.
    pub fn free_pages_in(&self, list: ListId) -> u64 {
        self.areas.pages(list) + self.sub.pages(list.index())
    }

    /// Free blocks of `order` over all lists (Linux's `nr_free`).
    pub fn free_blocks(&self, order: Order) -> u64 {
        (0..MAX_LISTS as u8)
            .filter_map(ListId::new)
            .map(|l| self.free_blocks_in(order, l))
            .sum()
    }

    /// Whether `list` holds a free block of at least `order` (up to the
    /// zone's maximum): what the watermark check for `order > 0` asks of
    /// each list, from the non-empty masks rather than order by order.
    #[inline]
    pub fn has_block_in(&self, order: Order, list: ListId) -> bool {
        let o = order.get();
        if o > self.max_order {
            return false;
        }
        (o < self.c && (o..self.c).any(|s| self.sub.blocks(list.index(), s) > 0))
            || self
                .areas
                .first_nonempty(list, o.max(self.c), self.max_order)
                .is_some()
    }

    /// Free blocks of `order` on `list`.
    pub fn free_blocks_in(&self, order: Order, list: ListId) -> u64 {
        if order.get() > self.max_order {
            return 0;
        }
        if order.get() < self.c {
            return self.sub.blocks(list.index(), order.get());
        }
        self.areas.head(order.get(), list).len as u64
    }

    /// A `/proc/buddyinfo`-style line: free blocks per order.
    pub fn buddyinfo(&self) -> BuddyInfo<'_, 'a, P> {
        BuddyInfo {
            zone: self,
            label: &"zone",
        }
    }

    /// The same, with the line's label printed by `label` (the facade
    /// prints `Node N, zone Normal` there, as Linux does).
    pub fn buddyinfo_labelled<'s>(&'s self, label: &'s dyn fmt::Display) -> BuddyInfo<'s, 'a, P> {
        BuddyInfo { zone: self, label }
    }
}

/// Displays free blocks per order, like Linux's `/proc/buddyinfo`.
pub struct BuddyInfo<'z, 'a, P: MergePolicy> {
    zone: &'z BuddyZone<'a, P>,
    label: &'z dyn fmt::Display,
}

impl<P: MergePolicy> fmt::Display for BuddyInfo<'_, '_, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.label)?;
        for o in 0..=self.zone.max_order {
            write!(f, " {:>6}", self.zone.free_blocks(Order::new_truncated(o)))?;
        }
        Ok(())
    }
}
