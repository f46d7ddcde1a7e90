//! Free page reporting, the mechanism (spec 01 §3.1: the `reported` flag):
//! a free block head carries a "reported" bit, cleared whenever the block
//! goes on a list anew (freed, merged, moved), so a block that was
//! allocated since it was last reported, or merged into a larger one, is
//! unreported again. The reporter takes unreported blocks off the lists,
//! tells the hypervisor outside the lock, and gives them back marked.

use crate::error::FreeError;
use crate::frame::{NIL, REPORTED, State};
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Takes up to `out.len()` free blocks of at least `min` order from
    /// `list` that are not reported, off the free lists (allocated, as far
    /// as the core is concerned, until [`BuddyZone::return_reported`]), and
    /// writes them to `out`, taking at most `max_pages` frames. Returns how
    /// many blocks. Lists are searched from the highest order down, each
    /// from its head (blocks given back reported go to the tail).
    pub fn take_unreported(
        &mut self,
        min: Order,
        list: ListId,
        out: &mut [(Pfn, Order)],
        max_pages: u64,
    ) -> usize {
        let mut n = 0;
        let mut left = max_pages;
        for o in (min.get()..=self.max_order).rev() {
            let mut i = self.areas.head(o, list).head;
            while i != NIL && n < out.len() && left >= 1 << o {
                let f = self.view(i);
                let next = f.next;
                if f.flags & REPORTED == 0 {
                    left -= 1 << o;
                    let p = self.pfn(i);
                    self.areas.remove_loaded(&mut self.frames, &f);
                    self.mark_allocated(i, o);
                    out[n] = (p, Order::new_truncated(o));
                    n += 1;
                }
                i = next;
            }
        }
        n
    }

    /// Gives back a block [`BuddyZone::take_unreported`] took: freed to the
    /// tail of its list (so that allocations prefer memory the hypervisor
    /// still backs) and, if `reported` and it did not merge with a free
    /// buddy, marked reported. Same errors as `free`.
    pub fn return_reported(
        &mut self,
        pfn: Pfn,
        order: Order,
        reported: bool,
    ) -> Result<(), FreeError> {
        let i = self.check_free(pfn, order)?;
        let list = self.policy.list_for(pfn);
        self.stats.frees += 1;
        self.policy.freed(pfn, order);
        let (h, o) = self.insert_merging(i, order.get(), list, true, true);
        if reported && h == i && o == order.get() {
            self.frames.get_mut(h).flags |= REPORTED;
        }
        Ok(())
    }

    /// Frames in free blocks of at least `min` order on `list`, and how
    /// many of them are reported.
    pub fn reported_pages(&self, min: Order, list: ListId) -> (u64, u64) {
        let (mut free, mut reported) = (0, 0);
        for o in min.get()..=self.max_order {
            let mut i = self.areas.head(o, list).head;
            while i != NIL {
                let f = self.view(i);
                free += 1u64 << o;
                if f.flags & REPORTED != 0 {
                    reported += 1u64 << o;
                }
                i = f.next;
            }
        }
        (free, reported)
    }

    /// Whether the free block headed by `pfn` is marked reported.
    pub fn is_reported(&self, pfn: Pfn) -> bool {
        if !self.span.contains(pfn) {
            return false;
        }
        let f = self.view(self.idx(pfn));
        f.state == State::FreeHead && f.flags & REPORTED != 0
    }
}
