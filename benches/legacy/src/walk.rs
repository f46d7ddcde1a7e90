//! Mechanisms the policy layers above drive: walking the blocks of a range,
//! moving free blocks between lists, splitting free blocks, freeing a block
//! in pieces. They keep every invariant; none knows what lists mean.

use crate::error::{AllocError, FreeError};
use crate::frame::State;
use crate::policy::{ListId, MergePolicy};
use crate::zone::{BlockInfo, BuddyZone};
use crate::{Order, Pfn, PfnRange};

/// One step of a walk: the frame where it stands and what it belongs to. A
/// block is reported once, at its head (or at the walk's start if the block
/// began before it); a hole frame by frame.
pub type WalkItem = (Pfn, BlockInfo);

/// Iterator over the blocks meeting a range; see [`BuddyZone::walk`].
pub struct Walk<'z, 'a, P: MergePolicy> {
    zone: &'z BuddyZone<'a, P>,
    next: Pfn,
    end: Pfn,
}

impl<P: MergePolicy> Iterator for Walk<'_, '_, P> {
    type Item = WalkItem;

    fn next(&mut self) -> Option<WalkItem> {
        if self.next >= self.end {
            return None;
        }
        let p = self.next;
        let info = self.zone.block_at(p)?;
        self.next = match info {
            BlockInfo::Hole => p + 1,
            BlockInfo::Free { head, order, .. } | BlockInfo::Allocated { head, order, .. } => {
                head + order.pages()
            }
        };
        Some((p, info))
    }
}

impl<'a, P: MergePolicy> BuddyZone<'a, P> {
    /// Walks the blocks that meet `range` (clipped to the span), low to high.
    pub fn walk(&self, range: PfnRange) -> Walk<'_, 'a, P> {
        let r = range.intersect(&self.span);
        Walk {
            zone: self,
            next: r.start,
            end: r.end.max(r.start),
        }
    }

    /// The head of the first block on `list` at `order` (what `alloc` would
    /// split next), without taking it.
    pub fn first_free(&self, order: Order, list: ListId) -> Option<Pfn> {
        if order.get() > self.max_order {
            return None;
        }
        let h = self.areas.head(order.get(), list).head;
        (h != crate::frame::NIL).then(|| self.pfn(h))
    }

    /// Moves the free block headed by `head` to `list` (for a policy
    /// retyping memory), merging it with free buddies already on `list`, and
    /// returns the head and order of the resulting block. `None`, changing
    /// nothing, if `head` is not the head of a free block.
    pub fn move_free_block(&mut self, head: Pfn, list: ListId) -> Option<(Pfn, Order)> {
        if !self.span.contains(head) {
            return None;
        }
        let i = self.idx(head);
        let f = self.view(i);
        if f.state != State::FreeHead {
            return None;
        }
        if f.list == list.get() {
            return Some((head, Order::new_truncated(f.order)));
        }
        self.areas.remove(&mut self.frames, i);
        let (h, o) = self.insert_merging(i, f.order, list, false, false);
        Some((self.pfn(h), Order::new_truncated(o)))
    }

    /// Files the free memory around `pfn` on `list` at the granularity of
    /// `order` (for retyping one pageblock inside a larger free block): the
    /// free block containing `pfn` is split until the block holding `pfn` has
    /// at most `order`; that block moves to `list`, the other pieces stay on
    /// the original list. A block already on `list` is left whole (splitting
    /// it would only leave same-list buddies unmerged). The moved block
    /// merges with free buddies already on `list`. Returns the head and order
    /// of the block now holding `pfn`, or `None` (nothing changed) if `pfn`
    /// is not in a free block.
    pub fn carve_free_block(
        &mut self,
        pfn: Pfn,
        order: Order,
        list: ListId,
    ) -> Option<(Pfn, Order)> {
        if !self.span.contains(pfn) {
            return None;
        }
        let target = self.idx(pfn);
        let (cur, f) = self
            .containing(target)
            .filter(|(_, f)| f.state == State::FreeHead)?;
        let o = f.order;
        let old = ListId::from_stored(f.list);
        if o <= order.get() || old == list {
            return self.move_free_block(self.pfn(cur), list);
        }
        self.areas.remove(&mut self.frames, cur);
        let cur = self.split_toward(cur, o, target, order.get(), old);
        let o = order.get();
        let (h, o) = self.insert_merging(cur, o, list, false, false);
        Some((self.pfn(h), Order::new_truncated(o)))
    }

    /// Frees an allocated block of `order` as separate pieces of `piece`
    /// order, each going to the list the policy names for it (spec 01 §5.2:
    /// blocks above a pageblock are freed pageblock by pageblock so each
    /// piece lands on its own pageblock's list). Same errors as `free`.
    pub fn free_in_pieces(
        &mut self,
        pfn: Pfn,
        order: Order,
        piece: Order,
    ) -> Result<(), FreeError> {
        let i = self.check_free(pfn, order)?;
        if piece >= order {
            return self.free(pfn, order);
        }
        if order.get() == self.max_order && !self.frames.is_init(i) {
            self.init_span(i);
        }
        self.stats.frees += 1;
        let step = 1u32 << piece.get();
        for k in 0..1u32 << (order.get() - piece.get()) {
            let j = i + k * step;
            self.set(j, State::AllocHead, piece.get());
            let pj = self.pfn(j);
            self.policy.freed(pj, piece);
            let list = self.policy.list_for(pj);
            self.free_block(j, piece.get(), list, false);
        }
        Ok(())
    }

    /// Takes the whole free block headed by `head` off its list as allocated
    /// (for a policy that must re-file it), returning its order.
    pub fn take_free_block(&mut self, head: Pfn) -> Result<Order, AllocError> {
        let f = match self.block_at(head) {
            None => return Err(AllocError::OutOfRange),
            Some(BlockInfo::Free { head: h, order, .. }) if h == head => order,
            Some(BlockInfo::Hole) => return Err(AllocError::Hole),
            Some(_) => return Err(AllocError::Busy),
        };
        self.alloc_at(head, f).map(|()| f)
    }
}
