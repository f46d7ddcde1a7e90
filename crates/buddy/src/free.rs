//! Freeing: checked free, then insert and coalesce (spec 01 §5).

use crate::chunk::Mode;
use crate::error::FreeError;
use crate::frame::{Idx, Kind};
use crate::policy::MergePolicy;
use crate::zone::{BlockInfo, BuddyZone};
use crate::{Order, Pfn, bits};

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
        self.stats.frees += 1;
        self.free_block(i, order.get(), false);
        Ok(())
    }

    /// Frees a block whose owner the caller has already checked, without
    /// the core's own checks: for a layer above that keeps its own record
    /// of every live allocation (the facade's ownership bytes) and so
    /// would only repeat them. One cache line fewer on the free path.
    ///
    /// # Safety
    ///
    /// `pfn` must head a block this zone allocated with exactly `order`
    /// that has not been freed since (what [`BuddyZone::free`] checks);
    /// otherwise the zone's books break (frames lost or handed out twice).
    #[inline]
    pub unsafe fn free_unchecked(&mut self, pfn: Pfn, order: Order) {
        debug_assert!(
            self.check_free(pfn, order) == Ok(self.idx(pfn))
                || (order == Order::ZERO
                    && self.check_free(pfn, order) == Err(FreeError::Busy)
                    && self.frames.get(self.idx(pfn)).kind() == Kind::Reserved),
            "free_unchecked of a block that is not live"
        );
        self.stats.frees += 1;
        self.free_block(self.idx(pfn), order.get(), false);
    }

    /// Whether `free(pfn, order)` would be accepted, without freeing: the
    /// same typed errors, no state change.
    pub fn would_free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.check_free(pfn, order).map(|_| ())
    }

    /// The table index of `pfn` if freeing it at `order` is valid.
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
        let k = self.chunk_of(i);
        let ch = &self.chunks[k];
        match ch.mode {
            Mode::Split => {
                if bits::all_set(self.words(k), self.bit(i), 0) {
                    return Err(FreeError::AlreadyFree);
                }
                let w = self.frames.get(i);
                match w.kind() {
                    Kind::Head if w.order() == order.get() => Ok(i),
                    Kind::Head => Err(FreeError::WrongOrder {
                        allocated: Order::new_truncated(w.order()),
                    }),
                    Kind::Hole => Err(FreeError::Hole),
                    Kind::Tail => Err(self.inside_error(pfn)),
                    Kind::Reserved => Err(FreeError::Busy),
                }
            }
            Mode::Reserved => {
                if bits::all_set(self.words(k), self.bit(i), 0) {
                    return Err(FreeError::AlreadyFree);
                }
                let w = self.frames.get(i);
                match w.kind() {
                    Kind::Head if w.order() == order.get() => Ok(i),
                    Kind::Head => Err(FreeError::WrongOrder {
                        allocated: Order::new_truncated(w.order()),
                    }),
                    Kind::Hole => Err(FreeError::Hole),
                    Kind::Tail => Err(self.inside_error(pfn)),
                    // Free in the reservation or allocated from it: only
                    // the reservation's holder can tell.
                    Kind::Reserved => Err(FreeError::Busy),
                }
            }
            Mode::Hole => Err(FreeError::Hole),
            Mode::AllocHead if i == self.first(k) => {
                if ch.order == order.get() {
                    Ok(i)
                } else {
                    Err(FreeError::WrongOrder {
                        allocated: Order::new_truncated(ch.order),
                    })
                }
            }
            Mode::FreeHead if i == self.first(k) => Err(FreeError::AlreadyFree),
            _ => Err(self.inside_error(pfn)),
        }
    }

    /// The error for freeing a frame inside a block that it does not head.
    fn inside_error(&self, pfn: Pfn) -> FreeError {
        match self.block_at(pfn) {
            Some(BlockInfo::Allocated { head, order, .. }) => {
                FreeError::NotBlockHead { head, order }
            }
            Some(BlockInfo::Hole) => FreeError::Hole,
            _ => FreeError::AlreadyFree,
        }
    }

    /// Gives the allocated block at `i` back to the free memory, merging;
    /// returns the free block it ended in (first frame, order).
    #[inline]
    pub(crate) fn free_block(&mut self, i: Idx, order: u8, to_tail: bool) -> (Idx, u8) {
        let k = self.chunk_of(i);
        if self.chunks[k].mode == Mode::Reserved {
            // Recorded for the reservation's return (`reservation.rs`).
            let x = self.bit(i);
            bits::set(self.words_mut(k), x, order);
            self.chunks[k].free += 1 << order;
            self.reserved_free += 1 << order;
            (i, order)
        } else if order < self.c {
            self.free_in(k, self.bit(i), order, to_tail)
        } else {
            let list = self.policy.list_for(self.pfn(i));
            let (h, o) = self.large_insert(k, order, list, to_tail, true);
            (self.first(h), o)
        }
    }
}
