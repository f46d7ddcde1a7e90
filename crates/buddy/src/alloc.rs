//! Allocation: a small block from the best-fitting, fullest chunk, or the
//! smallest sufficient free block, split (spec 01 §6).

use crate::chunk::Mode;
use crate::error::AllocError;
use crate::frame::{Idx, Kind, TAG_MASK};
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn, bits};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Allocates `2^order` naturally aligned frames from `list`.
    ///
    /// Below the chunk order: among the chunks of `list` whose largest free
    /// block is the smallest that suffices, the fullest serves it, from its
    /// smallest sufficient block (lowest address first); if no chunk has
    /// one, a free block of at least the chunk order is split as for larger
    /// requests and its lowest chunk serves. From the chunk order up: the first block of the smallest
    /// order that has one is split, the lower half kept and each upper half
    /// pushed on the head of the next lower order's list
    /// (`__rmqueue_smallest` + `expand`, spec 01 §6.1-6.2).
    #[inline]
    pub fn alloc(&mut self, order: Order, list: ListId) -> Result<Pfn, AllocError> {
        self.alloc_tagged(order, list, 0)
    }

    /// [`BuddyZone::alloc`] of a block whose tag is `tag` (as
    /// [`BuddyZone::set_tag`] would leave it, in the same pass: a layer
    /// that tags every allocation saves the second lookup).
    #[inline]
    pub fn alloc_tagged(
        &mut self,
        order: Order,
        list: ListId,
        tag: u32,
    ) -> Result<Pfn, AllocError> {
        let tag = tag & TAG_MASK;
        let want = order.get();
        if want > self.max_order {
            return Err(AllocError::OrderTooLarge);
        }
        if want < self.c
            && let Some(k) = self.partial.pick(list.index(), want)
        {
            let i = self.alloc_in(k, want, tag);
            return Ok(self.pfn(i));
        }
        let low = want.max(self.c);
        let Some(o) = self.areas.first_nonempty(list, low, self.max_order) else {
            self.stats.alloc_failures += 1;
            return Err(AllocError::OutOfMemory);
        };
        let k = self
            .areas
            .pop(&mut self.chunks, o, list)
            .unwrap_or_else(|| unreachable!());
        self.large_expand(k, low, o, list);
        if want < self.c {
            self.make_split_free(k, list);
            let i = self.alloc_in(k, want, tag);
            return Ok(self.pfn(i));
        }
        self.large_mark_allocated(k, want, tag);
        Ok(self.pfn(self.first(k)))
    }

    /// Up to `max` more order-0 frames of `list` from the chunk that holds
    /// `pfn` (a frame an order-0 allocation just took), lowest first, each
    /// allocated with `tag`. They are offered a bitmap word at a time:
    /// `take(base, bits)` is offered the frames `base + b` for each bit `b`
    /// of `bits` (`base` aligned to 64 frames) and returns those it takes,
    /// a subset of `bits`; frames it leaves stay free and end the run.
    /// Returns how many were taken. For a layer that fills a cache from
    /// one chunk (a per-CPU cache's home, which holds the frames of one
    /// chunk as a bitmap of the same layout): the chunk's counts are redone
    /// and it is refiled once for the run, not once a frame. Nothing is
    /// taken from a chunk of another list, one that is not split into
    /// frames, or outside the zone.
    pub fn alloc_run(
        &mut self,
        pfn: Pfn,
        list: ListId,
        max: usize,
        tag: u32,
        mut take: impl FnMut(Pfn, u64) -> u64,
    ) -> usize {
        if max == 0 || !self.span.contains(pfn) || self.c == 0 {
            return 0;
        }
        let k = self.chunk_of(self.idx(pfn));
        let ch = &self.chunks[k];
        if ch.mode != Mode::Split || ch.free == 0 || ch.list != list.get() {
            return 0;
        }
        let tag = tag & TAG_MASK;
        let first = self.first(k);
        let mut taken = 0;
        for w in 0..self.wpc as usize {
            let word = self.words(k)[w];
            if word == 0 {
                continue;
            }
            let offer = bits::lowest(word, max - taken);
            let base = first + ((w as Idx) << 6);
            let got = take(self.pfn(base), offer) & offer;
            self.words_mut(k)[w] = word & !got;
            self.frames
                .set_bits(base, got, crate::frame::Word::head(0, tag));
            taken += got.count_ones() as usize;
            if got != offer || taken == max {
                break;
            }
        }
        if taken > 0 {
            self.recount(k, taken as u16);
            self.stats.allocs += taken as u64;
        }
        taken
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
        let i = self.idx(pfn);
        let k = self.chunk_of(i);
        match self.chunks[k].mode {
            Mode::Hole => Err(AllocError::Hole),
            Mode::Reserved if self.frames.get(i).kind() == Kind::Hole && !self.is_free_bit(i) => {
                Err(AllocError::Hole)
            }
            Mode::Reserved => Err(AllocError::Busy),
            Mode::Split => {
                let x = self.bit(i);
                let w = self.words(k);
                if !bits::all_set(w, x, 0) {
                    return Err(if self.frames.get(i).kind() == Kind::Hole {
                        AllocError::Hole
                    } else {
                        AllocError::Busy
                    });
                }
                if want >= self.c || !bits::all_set(w, x, want) {
                    return Err(AllocError::Busy);
                }
                let j = bits::maximal_order_at(w, self.c, x);
                self.take_in(k, j, x & !((1 << j) - 1), want, x, 0);
                Ok(())
            }
            _ => {
                let low = want.max(self.c);
                let h = match self.large_containing(k) {
                    Some(h)
                        if self.chunks[h].mode == Mode::FreeHead && self.chunks[h].order >= low =>
                    {
                        h
                    }
                    _ => return Err(AllocError::Busy),
                };
                let hc = self.chunks[h];
                let list = ListId::from_stored(hc.list);
                self.areas.remove(&mut self.chunks, h);
                let k = self.large_split_toward(h, hc.order, k, low, list);
                if want < self.c {
                    self.make_split_free(k, list);
                    self.take_in(k, self.c, 0, want, self.bit(i), 0);
                } else {
                    self.large_mark_allocated(k, want, 0);
                }
                Ok(())
            }
        }
    }
}
