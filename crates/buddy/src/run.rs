//! Runs of frames: `n` contiguous frames handed out and taken back as `n`
//! allocations of order 0, for a caller whose request is a count of frames
//! rather than a power of two (OSTD's frame allocator takes and gives back
//! any number of frames). A run comes whole from one word of a split
//! chunk's bitmap, so it costs one bit operation and a recount of that
//! word, where a block of the next power of two would cost a split of its
//! spare frames now and a merge of them at every free.

use crate::chunk::{MAX_CHUNK_ORDER, Mode, RBITS};
use crate::error::FreeError;
use crate::frame::{Idx, Kind, TAG_MASK, Word};
use crate::policy::{ListId, MAX_LISTS, MergePolicy};
use crate::zone::BuddyZone;
use crate::{Order, Pfn};
use pageframe_types::run::{run_mask as mask, run_starts};

/// Longest run: one bitmap word.
pub const MAX_RUN: u32 = 64;

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// `n` contiguous free frames of `list` (1..=[`MAX_RUN`]), each now an
    /// allocation of order 0 tagged `tag`: the lowest run inside one bitmap
    /// word of the chunk an allocation of the order holding `n` would take
    /// (the fullest of those whose largest free block suffices, else a free
    /// chunk of `list` split for it), so runs fill busy chunks first as
    /// blocks do. Returns the first frame; `None`, nothing changed, when
    /// `list` has no free block that large (the caller allocates a block
    /// then, with its fallbacks). Give the frames back one
    /// by one ([`BuddyZone::free`] at order 0) or together
    /// ([`BuddyZone::free_frame_run`]).
    pub fn alloc_frame_run(&mut self, list: ListId, n: u32, tag: u32) -> Option<Pfn> {
        if !(1..=MAX_RUN).contains(&n) {
            return None;
        }
        let want = n.next_power_of_two().trailing_zeros() as u8;
        if want >= self.c {
            return None;
        }
        let k = match self.partial.pick(list.index(), want) {
            Some(k) => k,
            None => {
                // As a block would: a free chunk of the list, split (a
                // larger free block halved down to the chunk order first).
                let o = self.areas.first_nonempty(list, self.c, self.max_order)?;
                let k = self.areas.pop(&mut self.chunks, o, list)?;
                self.large_expand(k, self.c, o, list);
                self.make_split_free(k, list);
                let l = self.chunks[k].list as usize & (MAX_LISTS - 1);
                self.sub.add_pages(l, 1 << self.c);
                k
            }
        };
        // The chunk's largest free block holds 2^want >= n frames inside
        // one word (want < 6 or the chunk is one word), so a run is there.
        let (w, b) = self.words(k).iter().enumerate().find_map(|(w, &word)| {
            let s = run_starts(word, n);
            (s != 0).then(|| (w, s.trailing_zeros()))
        })?;
        let old = self.words(k)[w];
        self.words_mut(k)[w] = old & !(mask(n) << b);
        let i = self.first(k) + ((w as Idx) << 6) + b;
        self.frames.set_run(i, n, Word::head(0, tag & TAG_MASK));
        let l = self.chunks[k].list as usize & (MAX_LISTS - 1);
        self.chunks[k].free -= n as u16;
        self.sub.sub_pages(l, u64::from(n));
        self.recount_word(k, w, old);
        self.stats.allocs += u64::from(n);
        Some(self.pfn(i))
    }

    /// Frees the `n` order-0 allocations from `first` (1..=[`MAX_RUN`]),
    /// all in one word of a split chunk's bitmap, as [`BuddyZone::free`] of
    /// each at order 0 would: merged with the free frames around them, the
    /// chunk a free block of its own order once wholly free. Checked before
    /// anything changes: a frame that is not an allocation of order 0
    /// (free, part of a larger block, a hole, in a reserved chunk) or a run
    /// across words gets the error [`BuddyZone::free`] would give the first
    /// such frame (`Misaligned` for a run across words or `n` out of
    /// range), and nothing is freed.
    pub fn free_frame_run(&mut self, first: Pfn, n: u32) -> Result<(), FreeError> {
        if !(1..=MAX_RUN).contains(&n) {
            return Err(FreeError::Misaligned);
        }
        let i = self.check_free(first, Order::ZERO)?;
        let k = self.chunk_of(i);
        let x = self.bit(i);
        if self.chunks[k].mode != Mode::Split || x % 64 + n > 64 || u64::from(x + n) > 1 << self.c {
            // A reserved chunk's frames go back through its reservation;
            // a run across words is not one a run allocation made.
            return match self.chunks[k].mode {
                Mode::Split => Err(FreeError::Misaligned),
                _ => Err(FreeError::Busy),
            };
        }
        let (w, run) = ((x / 64) as usize, mask(n) << (x % 64));
        // Every frame allocated at order 0: its bit clear and its word a
        // head of order 0 (what a free of it checks), read word by word;
        // otherwise the first frame a free would refuse names the error.
        let heads = (1..n).all(|j| {
            let f = self.frames.get(i + j);
            f.kind() == Kind::Head && f.order() == 0
        });
        if self.words(k)[w] & run != 0 || !heads {
            for j in 1..n {
                self.check_free(first + u64::from(j), Order::ZERO)?;
            }
        }
        if self.chunks[k].free == 0 {
            // As a free does: the type is read when memory comes back.
            let list = self.policy.list_for(self.pfn(self.first(k)));
            self.chunks[k].list = list.get();
        }
        let old = self.words(k)[w];
        self.words_mut(k)[w] = old | run;
        if self.chunks[k].flags & RBITS != 0 {
            self.rwords_mut(k)[w] &= !run;
        }
        let l = self.chunks[k].list as usize & (MAX_LISTS - 1);
        self.stats.frees += u64::from(n);
        self.sub.add_pages(l, u64::from(n));
        self.chunks[k].free += n as u16;
        if u32::from(self.chunks[k].free) < 1 << self.c {
            self.recount_word(k, w, old);
            return Ok(());
        }
        // Wholly free: a block of the chunk order from now on (its counts
        // leave the zone's, as a free's last block does).
        let c = self.c;
        for o in 0..c {
            let had = self.chunks[k].counts[o as usize];
            *self.sub.blocks_mut(l, o) -= u64::from(had);
        }
        let ch = &mut self.chunks[k];
        ch.counts = [0; MAX_CHUNK_ORDER as usize];
        ch.omask = 0;
        self.whole_again(k, l, false);
        Ok(())
    }
}
