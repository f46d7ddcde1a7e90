//! Splitting an allocated block into its two halves, both still allocated
//! (Linux `split_page`, one level at a time): the owner of a block of
//! order `k` then owns two blocks of order `k - 1` that it may free apart.
//! A kernel gives back part of an allocation this way: the frames it keeps
//! and the frames it frees become blocks of their own.

use crate::chunk::{Chunk, Mode};
use crate::error::FreeError;
use crate::frame::Word;
use crate::policy::MergePolicy;
use crate::zone::BuddyZone;
use crate::{Order, Pfn};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Splits the allocated block of `order` headed by `pfn` into two
    /// allocated blocks of `order - 1`, each with the block's tag, and
    /// returns the head of the upper half. Nothing moves: the frames stay
    /// allocated, only the books now hold two blocks.
    ///
    /// Refused with a typed error, changing nothing: every error of
    /// [`BuddyZone::free`] (the block must be a live allocation of exactly
    /// `order`), and [`FreeError::SingleFrame`] for an order-0 block.
    pub fn split_allocated(&mut self, pfn: Pfn, order: Order) -> Result<Pfn, FreeError> {
        self.split_allocated_masked(pfn, order, u32::MAX)
    }

    /// [`BuddyZone::split_allocated`], the upper half's tag being the
    /// block's with only the bits of `upper_mask` kept (a layer above drops
    /// the marks that belong to the lower half's head alone).
    pub fn split_allocated_masked(
        &mut self,
        pfn: Pfn,
        order: Order,
        upper_mask: u32,
    ) -> Result<Pfn, FreeError> {
        let i = self.check_free(pfn, order)?;
        if order == Order::ZERO {
            return Err(FreeError::SingleFrame);
        }
        let half = order.get() - 1;
        let upper = i + (1 << half);
        let k = self.chunk_of(i);
        match self.chunks[k].mode {
            Mode::Split | Mode::Reserved => {
                let tag = self.frames.get(i).tag();
                self.frames.set(i, Word::head(half, tag));
                self.frames.set(upper, Word::head(half, tag & upper_mask));
            }
            Mode::AllocHead if half >= self.c => {
                let ch = &mut self.chunks[k];
                ch.order = half;
                let tag = ch.tag;
                let u = self.chunk_of(upper);
                self.chunks[u] = Chunk {
                    mode: Mode::AllocHead,
                    order: half,
                    tag: tag & upper_mask,
                    ..Chunk::HOLE
                };
            }
            Mode::AllocHead => {
                // A block of exactly the chunk order: the chunk turns into
                // a split chunk with no free frame, whose words name the
                // two halves.
                let tag = self.chunks[k].tag;
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
                self.frames.set_run(first, 1 << self.c, Word::TAIL);
                self.frames.set(i, Word::head(half, tag));
                self.frames.set(upper, Word::head(half, tag & upper_mask));
            }
            // `check_free` accepted a head: a split, reserved or
            // allocated-head chunk.
            _ => unreachable!("a live allocation's chunk is split or an allocated head"),
        }
        Ok(self.pfn(upper))
    }
}
