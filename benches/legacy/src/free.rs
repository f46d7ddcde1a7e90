//! Freeing: checked free, then insert and coalesce (spec 01 §5).

use crate::error::FreeError;
use crate::frame::{Idx, State};
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Frees the block of `order` at `pfn`, merging it with its buddy while
    /// the buddy is a free block of the same order and the policy allows.
    ///
    /// Refused with a typed error, changing nothing: an order above the
    /// maximum, a frame outside the span, misaligned, in a hole, already free,
    /// inside a block but not its head, or allocated with another order.
    #[inline]
    pub fn free(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let i = self.check_free(pfn, order)?;
        let list = self.policy.list_for(pfn);
        self.stats.frees += 1;
        self.policy.freed(pfn, order);
        self.free_block(i, order.get(), list, false);
        Ok(())
    }

    /// Whether `free(pfn, order)` would be accepted, without freeing: the
    /// same typed errors, no state change.
    pub fn would_free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.check_free(pfn, order).map(|_| ())
    }

    /// The metadata index of `pfn` if freeing it at `order` is valid.
    #[inline]
    pub(crate) fn check_free(&self, pfn: Pfn, order: Order) -> Result<Idx, FreeError> {
        if order.get() > self.max_order {
            return Err(FreeError::OrderTooLarge);
        }
        if !self.span.contains(pfn) {
            return Err(FreeError::OutOfRange);
        }
        if !pfn.is_aligned(order) {
            return Err(FreeError::Misaligned);
        }
        let i = self.idx(pfn);
        let f = self.view(i);
        match f.state {
            State::AllocHead if f.order == order.get() => Ok(i),
            State::AllocHead => Err(FreeError::WrongOrder {
                allocated: Order::new_truncated(f.order),
            }),
            State::FreeHead => Err(FreeError::AlreadyFree),
            State::Hole => Err(FreeError::Hole),
            State::Tail => match self.containing(i) {
                Some((h, hf)) if hf.state == State::AllocHead => Err(FreeError::NotBlockHead {
                    head: self.pfn(h),
                    order: Order::new_truncated(hf.order),
                }),
                _ => Err(FreeError::AlreadyFree),
            },
        }
    }

    /// Inserts the block at `i` (currently an allocated head whose other
    /// frames are tails) into the free lists, coalescing upward.
    #[inline]
    pub(crate) fn free_block(&mut self, i: Idx, order: u8, list: ListId, to_tail: bool) {
        self.insert_merging(i, order, list, to_tail, true);
    }

    /// Inserts the block at `i` on `list`, merging upward with free buddies
    /// on the same list, and with buddies on other lists too if `cross` and
    /// the policy allows. Returns the final head and order.
    #[inline]
    pub(crate) fn insert_merging(
        &mut self,
        mut i: Idx,
        mut order: u8,
        list: ListId,
        to_tail: bool,
        cross: bool,
    ) -> (Idx, u8) {
        let max = self.max_order;
        while order < max {
            let b = i ^ (1 << order);
            // SAFETY: below the maximum order, `b` lies in the same max-order
            // block as `i`, which holds a block below the maximum: a split,
            // initialised block.
            let bf = *unsafe { self.frames.get_unchecked(b) };
            if bf.state != State::FreeHead || bf.order != order {
                break;
            }
            let blist = ListId::from_stored(bf.list);
            if blist != list
                && !(cross
                    && self
                        .policy
                        .can_merge(Order::new_truncated(order), list, blist))
            {
                break;
            }
            self.areas.remove_loaded(&mut self.frames, &bf);
            if blist != list {
                let bp = self.pfn(b);
                self.policy.merged(bp, Order::new_truncated(order), list);
            }
            // The higher of the two heads becomes an ordinary frame.
            let upper = i.max(b);
            // SAFETY: `upper` is `i` or `b`, both in that split block.
            unsafe { self.frames.get_unchecked_mut(upper) }.state = State::Tail;
            i = i.min(b);
            order += 1;
            self.stats.merges += 1;
        }
        self.set(i, State::FreeHead, order);
        let tail = to_tail || self.merge_likely(i, order);
        self.areas.push(&mut self.frames, i, order, list, tail);
        (i, order)
    }

    /// spec 01 §5.1 (`buddy_merge_likely`): if the parent's buddy one order
    /// up is already free, this block is likely to merge two levels up once
    /// its own buddy comes back, so it should be allocated last.
    #[inline]
    fn merge_likely(&self, i: Idx, order: u8) -> bool {
        if order + 1 >= self.max_order {
            return false;
        }
        let parent = i & !(1 << order);
        let uncle = parent ^ (1 << (order + 1));
        // SAFETY: `order + 1` is below the maximum order, so `uncle` lies
        // in the same max-order block as the block of `order` at `i`: a
        // split, initialised block.
        let f = unsafe { self.frames.get_unchecked(uncle) };
        f.state == State::FreeHead && f.order == order + 1
    }
}
