//! Allocation: take the smallest sufficient block and split it (spec 01 §6).

use crate::error::AllocError;
use crate::frame::{Frame, Idx, State};
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Allocates `2^order` naturally aligned frames from `list`: the first
    /// block of the smallest order that has one is split, the lower half kept
    /// and each upper half pushed on the head of the next lower order's list
    /// (`__rmqueue_smallest` + `expand`, spec 01 §6.1-6.2).
    #[inline]
    pub fn alloc(&mut self, order: Order, list: ListId) -> Result<Pfn, AllocError> {
        let want = order.get();
        if want > self.max_order {
            return Err(AllocError::OrderTooLarge);
        }
        let Some(o) = self.areas.first_nonempty(list, want, self.max_order) else {
            self.stats.alloc_failures += 1;
            return Err(AllocError::OutOfMemory);
        };
        let i = self
            .areas
            .pop(&mut self.frames, o, list)
            .unwrap_or_else(|| unreachable!());
        if o == self.max_order && want < o {
            self.init_span(i);
        }
        self.expand(i, want, o, list);
        self.mark_allocated(i, want);
        Ok(self.pfn(i))
    }

    /// Splits the block at `i` from order `high` down to `low`, returning the
    /// upper halves to `list` (spec 01 §6.2: ascending addresses are handed
    /// out by repeated small allocations).
    #[inline]
    pub(crate) fn expand(&mut self, i: Idx, low: u8, mut high: u8, list: ListId) {
        while high > low {
            high -= 1;
            let half = i + (1 << high);
            // SAFETY: `half` lies in the block being split, whose max-order
            // block is initialised (split before, or by the caller now).
            *unsafe { self.frames.get_unchecked_mut(half) } = Frame::with_state(State::FreeHead);
            self.areas.push(&mut self.frames, half, high, list, false);
            self.stats.splits += 1;
        }
    }

    /// Splits the unlinked free block at `cur` of order `o` down to order
    /// `want` around frame `target`; the halves not holding `target` go back
    /// free on `list`. Returns the head of the order-`want` block holding
    /// `target` (unlinked; its state is the caller's to set).
    pub(crate) fn split_toward(
        &mut self,
        mut cur: Idx,
        mut o: u8,
        target: Idx,
        want: u8,
        list: ListId,
    ) -> Idx {
        if o == self.max_order && want < o && !self.frames.is_init(cur) {
            self.init_span(cur);
        }
        while o > want {
            o -= 1;
            let upper = cur + (1 << o);
            let (keep, give) = if target >= upper {
                (upper, cur)
            } else {
                (cur, upper)
            };
            self.set(give, State::FreeHead, o);
            self.areas.push(&mut self.frames, give, o, list, false);
            self.stats.splits += 1;
            cur = keep;
        }
        cur
    }

    #[inline]
    pub(crate) fn mark_allocated(&mut self, i: Idx, order: u8) {
        // SAFETY: `i` heads the block being allocated: a max-order head
        // (always initialised) or a block of a split max-order block.
        let f = unsafe { self.frames.get_unchecked_mut(i) };
        f.state = State::AllocHead;
        f.order = order;
        f.tag = 0;
        self.stats.allocs += 1;
        let p = self.pfn(i);
        self.policy.allocated(p, Order::new_truncated(order));
    }

    /// Allocates the specific block of `order` at `pfn` (for contiguous
    /// allocation or to reserve a known range), splitting the free block that
    /// contains it; the pieces around it stay free on that block's list.
    pub fn alloc_at(&mut self, pfn: Pfn, order: Order) -> Result<(), AllocError> {
        let want = order.get();
        if want > self.max_order {
            return Err(AllocError::OrderTooLarge);
        }
        if !self.span.contains(pfn) || !self.span.contains(pfn + (order.pages() - 1)) {
            return Err(AllocError::OutOfRange);
        }
        if !pfn.is_aligned(order) {
            return Err(AllocError::Misaligned);
        }
        let target = self.idx(pfn);
        let (cur, f) = match self.containing(target) {
            None => return Err(AllocError::Hole),
            Some((h, f)) if f.state == State::FreeHead && f.order >= want => (h, f),
            Some(_) => return Err(AllocError::Busy),
        };
        let list = ListId::from_stored(f.list);
        self.areas.remove(&mut self.frames, cur);
        let cur = self.split_toward(cur, f.order, target, want, list);
        self.mark_allocated(cur, want);
        Ok(())
    }
}
