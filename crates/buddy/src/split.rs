//! Blocks below the chunk order, inside their chunk: taking one out of a
//! free block (split, spec 01 §6.2) and giving one back (merge, spec 01 §5)
//! are bit operations on the chunk's free bitmap plus the chunk's and the
//! zone's counts of free blocks per order.

use crate::bits;
use crate::chunk::{Chunk, FILED, MAX_CHUNK_ORDER, Mode, RBITS};
use crate::frame::{Idx, Word};
use crate::partial_chunks::PartialIndex;
use crate::policy::{ListId, MAX_LISTS, MergePolicy};
use crate::zone::BuddyZone;

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Turns the unlinked, wholly free chunk `k` into a split chunk on
    /// `list` whose frames are all free. Transient: the caller takes a
    /// block out of it at once.
    pub(crate) fn make_split_free(&mut self, k: Idx, list: ListId) {
        self.frames.init_chunk(self.first(k));
        self.words_mut(k).fill(!0);
        if self.c < 6 {
            let all = (1u64 << (1u32 << self.c)) - 1;
            self.words_mut(k)[0] = all;
        }
        self.rwords_mut(k).fill(0);
        self.chunks[k] = Chunk {
            mode: Mode::Split,
            free: 1 << self.c,
            list: list.get(),
            ..Chunk::HOLE
        };
    }

    /// Allocates a block of `order` (below the chunk order) from split
    /// chunk `k`, which has one: the lowest block of the smallest order that
    /// suffices, split with its upper halves left free (spec 01 §6.1-6.2
    /// inside the chunk). Returns the block's first frame.
    #[inline]
    pub(crate) fn alloc_in(&mut self, k: Idx, order: u8, tag: u32) -> Idx {
        let ch = &self.chunks[k];
        let (j, x) = if u32::from(ch.free) == 1 << self.c {
            (self.c, 0)
        } else {
            let j = order + (ch.omask >> order).trailing_zeros() as u8;
            let x = bits::find_maximal(self.words(k), j).unwrap_or_else(|| unreachable!());
            (j, x)
        };
        self.take_in(k, j, x, order, x, tag);
        self.first(k) + x
    }

    /// Redoes split chunk `k`'s counts of free blocks per order (and the
    /// zone's) from its bitmap after `taken` frames left it by bits, and
    /// refiles it.
    pub(crate) fn recount(&mut self, k: Idx, taken: u16) {
        let c = self.c;
        let l = self.chunks[k].list as usize & (MAX_LISTS - 1);
        let mut counts = [0u16; MAX_CHUNK_ORDER as usize];
        bits::count_maximal(self.words(k), c, &mut counts);
        for o in 0..c {
            let old = self.chunks[k].counts[o as usize];
            let new = counts[o as usize];
            if old != new {
                self.chunks[k].add_count(o, i32::from(new) - i32::from(old));
                let b = self.sub.blocks_mut(l, o);
                *b = *b + u64::from(new) - u64::from(old);
            }
        }
        self.chunks[k].free -= taken;
        self.sub.sub_pages(l, u64::from(taken));
        self.refile(k);
    }

    /// Redoes split chunk `k`'s counts of free blocks per order (and the
    /// zone's) after word `w` of its bitmap changed from `old` and no other
    /// word did (a run of frames taken or given back: the chunk's free
    /// frames and the zone's pages are the caller's to count), and refiles
    /// it. Only that word's blocks are counted again, and the blocks of
    /// whole words only when the word became full or stopped being so.
    pub(crate) fn recount_word(&mut self, k: Idx, w: usize, old: u64) {
        let c = self.c;
        let l = self.chunks[k].list as usize & (MAX_LISTS - 1);
        let new = self.words(k)[w];
        let low = c.min(6);
        let (was, now) = (bits::word_maximal(old, low), bits::word_maximal(new, low));
        let mut counts = self.chunks[k].counts;
        for o in 0..usize::from(low) {
            counts[o] = counts[o] + now[o] - was[o];
        }
        if c > 6 && (old == !0) != (new == !0) {
            bits::count_whole_words(self.words(k), c, &mut counts);
        }
        for o in 0..c {
            let (had, has) = (self.chunks[k].counts[o as usize], counts[o as usize]);
            if had != has {
                self.chunks[k].add_count(o, i32::from(has) - i32::from(had));
                let b = self.sub.blocks_mut(l, o);
                *b = *b + u64::from(has) - u64::from(had);
            }
        }
        self.refile(k);
    }

    /// Takes the block of `order` at bit `t` of split chunk `k` out of the
    /// free block of order `j` at bit `x` that holds it (`j` the chunk order
    /// for a wholly free chunk), leaving the other halves free, and marks
    /// it allocated.
    #[inline]
    pub(crate) fn take_in(&mut self, k: Idx, j: u8, x: u32, order: u8, t: u32, tag: u32) {
        let c = self.c;
        let ch = &mut self.chunks[k];
        let l = ch.list as usize & (MAX_LISTS - 1);
        if j < c {
            ch.add_count(j, -1);
            *self.sub.blocks_mut(l, j) -= 1;
            let (mut lo, mut o) = (x, j);
            while o > order {
                o -= 1;
                let upper = lo + (1 << o);
                lo = if t >= upper { upper } else { lo };
                ch.add_count(o, 1);
                *self.sub.blocks_mut(l, o) += 1;
            }
        } else {
            // A wholly free chunk turns into pieces below the chunk order:
            // one free block of each order from `order` up, wherever `t` is.
            self.sub.add_pages(l, 1 << c);
            ch.counts[order as usize..c as usize].fill(1);
            ch.omask = ((1u16 << c) - 1) & !((1u16 << order) - 1);
            for o in order..c {
                *self.sub.blocks_mut(l, o) += 1;
            }
        }
        self.stats.splits += u64::from(j - order);
        let ch = &mut self.chunks[k];
        ch.free -= 1 << order;
        self.sub.sub_pages(l, 1 << order);
        self.refile(k);
        bits::clear(self.words_mut(k), t, order);
        let i = self.first(k) + t;
        self.frames.set(i, Word::head(order, tag));
        self.frames.set_run(i + 1, (1 << order) - 1, Word::TAIL);
        self.stats.allocs += 1;
    }

    /// Gives the not-free block of `order` at bit `x` of split chunk `k`
    /// back (a freed block, or frames handed over): sets its bits and merges
    /// it with free buddies inside the chunk. A chunk that becomes wholly
    /// free goes to the free lists as a block of the chunk order (and may
    /// merge on). Returns the free block it ended in, as (first frame,
    /// order).
    #[inline]
    pub(crate) fn free_in(&mut self, k: Idx, mut x: u32, order: u8, to_tail: bool) -> (Idx, u8) {
        let c = self.c;
        if self.chunks[k].free == 0 {
            // The type is read when memory reaches the free lists (spec
            // 02 §4): a chunk with no free frame may have been retyped.
            let list = self.policy.list_for(self.pfn(self.first(k)));
            self.chunks[k].list = list.get();
        }
        // One look-up of the chunk's record and bitmap for the whole merge
        // (the fields are borrowed apart, so no index is checked twice).
        let n = self.wpc as usize;
        let words = &mut self.fbits[k as usize * n..(k as usize + 1) * n];
        let ch = &mut self.chunks[k];
        if ch.flags & RBITS != 0 {
            bits::clear(
                &mut self.rbits[k as usize * n..(k as usize + 1) * n],
                x,
                order,
            );
        }
        bits::set(words, x, order);
        let l = ch.list as usize & (MAX_LISTS - 1);
        let m = if u32::from(ch.free) + (1 << order) == 1 << c {
            // The last block comes back: its buddies are one free block of
            // each order above it.
            for o in order..c {
                *self.sub.blocks_mut(l, o) -= 1;
            }
            ch.counts = [0; crate::chunk::MAX_CHUNK_ORDER as usize];
            ch.omask = 0;
            c
        } else {
            // Each buddy it merges with was a maximal free block.
            let m = bits::maximal_order_at(words, c, x);
            // Whether a free merges is a coin toss when frees come in a
            // random order (half of them do): the first merge's counts
            // change without a branch on it, which would miss about every
            // other time; the rarer further merges (a quarter, an eighth,
            // ...) in a loop.
            let merges = m > order;
            ch.add_count(order, -i32::from(merges));
            *self.sub.blocks_mut(l, order) -= u64::from(merges);
            for o in order + 1..m {
                ch.add_count(o, -1);
                *self.sub.blocks_mut(l, o) -= 1;
            }
            x &= !((1 << m) - 1);
            m
        };
        self.stats.merges += u64::from(m - order);
        ch.free += 1 << order;
        self.sub.add_pages(l, 1 << order);
        if m < c {
            ch.add_count(m, 1);
            *self.sub.blocks_mut(l, m) += 1;
            self.refile(k);
            return (self.first(k) + x, m);
        }
        self.whole_again(k, l, to_tail)
    }

    /// Split chunk `k`, wholly free now, with its counts of free blocks
    /// already out of the zone's (list `l`'s): a block of the chunk order
    /// from now on, on the free lists (where it may merge on). Returns the
    /// free block it ended in, as (first frame, order).
    pub(crate) fn whole_again(&mut self, k: Idx, l: usize, to_tail: bool) -> (Idx, u8) {
        let c = self.c;
        if self.chunks[k].flags & FILED != 0 {
            self.partial.unfile(&mut self.chunks, k);
        }
        self.sub.sub_pages(l, 1 << c);
        if self.chunks[k].flags & RBITS != 0 {
            self.rwords_mut(k).fill(0);
        }
        self.chunks[k].flags = 0;
        self.chunks[k].free = 0;
        let list = self.policy.list_for(self.pfn(self.first(k)));
        let (h, o) = self.large_insert(k, c, list, to_tail, true);
        (self.first(h), o)
    }

    /// Files the free memory of split chunk `k` on `list` (free blocks of a
    /// chunk share one list). Reported marks are dropped: the blocks go on
    /// a list anew. Returns the frames moved.
    pub(crate) fn move_chunk(&mut self, k: Idx, list: ListId) -> u64 {
        let ch = self.chunks[k];
        if ch.list == list.get() {
            return 0;
        }
        if ch.flags & FILED != 0 {
            self.partial.unfile(&mut self.chunks, k);
        }
        let (from, to) = (ch.list as usize & (MAX_LISTS - 1), list.index());
        for o in 0..self.c as usize {
            let n = u64::from(ch.counts[o]);
            *self.sub.blocks_mut(from, o as u8) -= n;
            *self.sub.blocks_mut(to, o as u8) += n;
        }
        self.sub.sub_pages(from, u64::from(ch.free));
        self.sub.add_pages(to, u64::from(ch.free));
        if ch.flags & RBITS != 0 {
            self.rwords_mut(k).fill(0);
        }
        let ch = &mut self.chunks[k];
        ch.list = list.get();
        ch.flags &= !RBITS;
        if ch.free != 0 {
            self.partial.file(&mut self.chunks, k, self.c);
        }
        u64::from(self.chunks[k].free)
    }

    /// Files split chunk `k` where its state says (on no partial list when
    /// it has no free frame), moving it only if that changed.
    #[inline(always)]
    pub(crate) fn refile(&mut self, k: Idx) {
        let ch = &self.chunks[k];
        if ch.flags & FILED != 0 {
            if ch.free != 0 && PartialIndex::filed_right(ch, self.c) {
                return;
            }
            self.partial.unfile(&mut self.chunks, k);
        }
        if self.chunks[k].free != 0 {
            self.partial.file(&mut self.chunks, k, self.c);
        }
    }

    /// Whether split chunk `k` is filed where its state says.
    pub(crate) fn filed_right(&self, k: Idx) -> bool {
        let ch = &self.chunks[k];
        if ch.free == 0 {
            ch.flags & FILED == 0
        } else {
            PartialIndex::filed_right(ch, self.c)
        }
    }
}
