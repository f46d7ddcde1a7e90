//! Mechanisms the policy layers above drive: walking the blocks of a range,
//! moving free memory between lists, splitting free blocks, freeing a block
//! in pieces. They keep every invariant; none knows what lists mean.

use crate::chunk::{Chunk, Mode};
use crate::error::{AllocError, FreeError};
use crate::frame::{Idx, NIL, Word};
use crate::partial_chunks::BUCKETS;
use crate::policy::{ListId, MergePolicy};
use crate::zone::{BlockInfo, BuddyZone};
use crate::{Order, Pfn, PfnRange, bits};

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

    /// A free block of exactly `order` on `list`, without taking it: from
    /// the chunk order up, the first on its free list (what `alloc` would
    /// split next); below it, the lowest one in the fullest chunk that has
    /// one (where small allocations go).
    pub fn first_free(&self, order: Order, list: ListId) -> Option<Pfn> {
        self.free_block_by_fill(order, list, false)
    }

    /// Like [`BuddyZone::first_free`], but below the chunk order from the
    /// chunk with the most free frames that has such a block: where a
    /// policy claiming memory for another use finds the most room (spec 02
    /// §5.3 claims a pageblock whose free memory is half of it).
    pub fn roomiest_free(&self, order: Order, list: ListId) -> Option<Pfn> {
        self.free_block_by_fill(order, list, true)
    }

    fn free_block_by_fill(&self, order: Order, list: ListId, emptiest: bool) -> Option<Pfn> {
        let o = order.get();
        if o > self.max_order {
            return None;
        }
        if o >= self.c {
            let h = self.areas.head(o, list).head;
            return (h != NIL).then(|| self.pfn(self.first(h)));
        }
        if self.sub.blocks(list.index(), o) == 0 {
            return None;
        }
        for n in 0..BUCKETS {
            let b = if emptiest { BUCKETS - 1 - n } else { n };
            for j in o as usize..self.c as usize {
                let mut k = self.partial.head(list.index(), j, b);
                while k != NIL {
                    let ch = &self.chunks[k];
                    if ch.counts[o as usize] > 0 {
                        let x = bits::find_maximal(self.words(k), o)?;
                        return Some(self.pfn(self.first(k) + x));
                    }
                    k = ch.next;
                }
            }
        }
        None
    }

    /// The free memory on `list` in `range` (clipped to the span): how many
    /// free frames it holds in chunks lying wholly inside it, and its
    /// largest free block there (the lowest of that order). One look at
    /// each chunk's counts and one bit scan: a policy can weigh a few
    /// pageblocks against each other cheaply.
    pub fn free_room(&self, range: PfnRange, list: ListId) -> (u64, Option<(Pfn, Order)>) {
        let r = range.intersect(&self.span);
        if r.is_empty() {
            return (0, None);
        }
        let lo = self.idx(r.start);
        let hi = lo + r.len() as Idx;
        let (mut free, mut best): (u64, Option<(Idx, u8)>) = (0, None);
        let mut k = self.chunk_of(lo);
        while self.first(k) < hi {
            let ch = &self.chunks[k];
            let inside = self.first(k) >= lo && self.first(k) + (1 << self.c) <= hi;
            let room = match ch.mode {
                Mode::FreeHead if self.first(k) + (1 << ch.order) <= hi => {
                    Some((1u64 << ch.order, ch.order))
                }
                Mode::Split if ch.free > 0 => Some((u64::from(ch.free), ch.top_order())),
                _ => None,
            };
            if let Some((n, o)) = room
                && inside
                && ch.list == list.get()
            {
                free += n;
                if best.is_none_or(|(_, b)| o > b) {
                    best = Some((k, o));
                }
            }
            k += 1;
        }
        let best = best.and_then(|(k, o)| {
            let x = if self.chunks[k].mode == Mode::Split {
                bits::find_maximal(self.words(k), o)?
            } else {
                0
            };
            Some((self.pfn(self.first(k) + x), Order::new_truncated(o)))
        });
        (free, best)
    }

    /// Moves the free block headed by `head` to `list` (for a policy
    /// retyping memory) and returns the head and order of the block now
    /// holding `head`. A block of at least the chunk order merges with
    /// free buddies already on `list`; a smaller one moves with every free
    /// block of its chunk (they share one list). `None`, changing nothing,
    /// if `head` is not the head of a free block.
    pub fn move_free_block(&mut self, head: Pfn, list: ListId) -> Option<(Pfn, Order)> {
        let Some(BlockInfo::Free {
            head: h,
            order,
            list: old,
        }) = self.block_at(head)
        else {
            return None;
        };
        if h != head {
            return None;
        }
        if old == list {
            return Some((head, order));
        }
        let k = self.chunk_of(self.idx(head));
        if order.get() < self.c {
            self.move_chunk(k, list);
            return Some((head, order));
        }
        self.areas.remove(&mut self.chunks, k);
        let (h, o) = self.large_insert(k, order.get(), list, false, false);
        Some((self.pfn(self.first(h)), Order::new_truncated(o)))
    }

    /// Moves the free blocks of at least the chunk order on `list` lying
    /// wholly inside `range` to the tail of their free lists (handed out
    /// after the others; for a policy that starts keeping the range for
    /// other uses). Returns how many moved.
    pub fn requeue_last(&mut self, range: PfnRange, list: ListId) -> u64 {
        let r = range.intersect(&self.span);
        if r.is_empty() {
            return 0;
        }
        let (lo, hi) = (self.idx(r.start), self.idx(r.start) + r.len() as Idx);
        let mut moved = 0;
        let mut k = self.chunk_of(lo);
        while self.first(k) < hi {
            let ch = self.chunks[k];
            let step = match ch.mode {
                Mode::FreeHead | Mode::AllocHead => 1 << (ch.order - self.c),
                _ => 1,
            };
            let first = self.first(k);
            if ch.mode == Mode::FreeHead
                && ch.list == list.get()
                && first >= lo
                && first + (1 << ch.order) <= hi
            {
                self.areas.remove(&mut self.chunks, k);
                self.areas.push(&mut self.chunks, k, ch.order, list, true);
                // A block put back on a list keeps its report.
                self.chunks[k].flags |= ch.flags & crate::chunk::REPORTED;
                moved += 1;
            }
            k += step;
        }
        moved
    }

    /// Files the free memory of `range` (whole chunks) on `list`, for a
    /// policy retyping it: free blocks inside it move; a free block reaching
    /// outside is split so that only its part inside moves. Returns the free
    /// frames moved.
    pub fn move_free_range(&mut self, range: PfnRange, list: ListId) -> u64 {
        let range = range.intersect(&self.span);
        let mut moved = 0;
        let mut p = range.start;
        while p < range.end {
            p = match self.block_at(p) {
                Some(BlockInfo::Free {
                    head,
                    order,
                    list: old,
                }) => {
                    let end = head + order.pages();
                    if old != list {
                        if order.get() < self.c {
                            moved += self.move_chunk(self.chunk_of(self.idx(p)), list);
                            p.align_down(Order::new_truncated(self.c)) + (1u64 << self.c)
                        } else if head < range.start || end > range.end {
                            // Carve out the largest aligned piece at `p`
                            // inside the range.
                            let room = (range.end - p).min(end - p);
                            let fit = (63 - room.leading_zeros()) as u8;
                            let align = p.get().trailing_zeros().min(63) as u8;
                            let o = Order::new_truncated(fit.min(align).min(order.get()));
                            if self.carve_free_block(p, o, list).is_some() {
                                moved += o.pages();
                            }
                            p + o.pages()
                        } else {
                            self.move_free_block(head, list);
                            moved += order.pages();
                            end
                        }
                    } else {
                        end.max(p + 1)
                    }
                }
                Some(BlockInfo::Allocated { head, order, .. }) => (head + order.pages()).max(p + 1),
                _ => p + 1,
            };
        }
        moved
    }

    /// Files the free memory around `pfn` on `list` at the granularity of
    /// `order` (for retyping one pageblock inside a larger free block): the
    /// free block containing `pfn` is split until the block holding `pfn` has
    /// at most `order`; that block moves to `list`, the other pieces stay on
    /// the original list. A block already on `list` is left whole. Below the
    /// chunk order the whole chunk moves (its free blocks share one list).
    /// Returns the head and order of the block now holding `pfn`, or `None`
    /// (nothing changed) if `pfn` is not in a free block.
    pub fn carve_free_block(
        &mut self,
        pfn: Pfn,
        order: Order,
        list: ListId,
    ) -> Option<(Pfn, Order)> {
        let Some(BlockInfo::Free {
            head,
            order: o,
            list: old,
        }) = self.block_at(pfn)
        else {
            return None;
        };
        let want = order.get().max(self.c);
        if o.get() <= want || old == list {
            return self.move_free_block(head, list);
        }
        let target = self.chunk_of(self.idx(pfn));
        let h = self.chunk_of(self.idx(head));
        self.areas.remove(&mut self.chunks, h);
        let cur = self.large_split_toward(h, o.get(), target, want, old);
        let (h, o) = self.large_insert(cur, want, list, false, false);
        Some((self.pfn(self.first(h)), Order::new_truncated(o)))
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
        self.stats.frees += 1;
        let (o, p) = (order.get(), piece.get());
        if p >= self.c {
            // Each piece's head chunk heads an allocated block of its own.
            for n in 0..1u32 << (o - p) {
                let k = self.chunk_of(i) + (n << (p - self.c));
                self.chunks[k].mode = Mode::AllocHead;
                self.chunks[k].order = p;
            }
        } else if o >= self.c {
            // Every chunk of the block becomes a split chunk of pieces.
            for n in 0..1u32 << (o - self.c) {
                let k = self.chunk_of(i) + n;
                let first = self.first(k);
                self.frames.init_chunk(first);
                self.words_mut(k).fill(0);
                self.rwords_mut(k).fill(0);
                let list = self.policy.list_for(self.pfn(first)).get();
                self.chunks[k] = Chunk {
                    mode: Mode::Split,
                    list,
                    ..Chunk::HOLE
                };
                self.mark_pieces(first, self.c, p);
            }
        } else {
            self.mark_pieces(i, o, p);
        }
        for n in 0..1u32 << (o - p) {
            self.free_block(i + (n << p), p, false);
        }
        Ok(())
    }

    /// Writes the frames of the allocated block of order `o` at `i` (in a
    /// split chunk) as allocated blocks of order `p` each.
    fn mark_pieces(&mut self, i: Idx, o: u8, p: u8) {
        for t in 0..1u32 << o {
            let w = if t % (1 << p) == 0 {
                Word::head(p, 0)
            } else {
                Word::TAIL
            };
            self.frames.set(i + t, w);
        }
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
