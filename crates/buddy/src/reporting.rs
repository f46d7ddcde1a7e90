//! Free page reporting, the mechanism (spec 01 §3.1: the `reported` flag).
//! A free block of at least the chunk order carries a "reported" bit on its
//! head chunk; below the chunk order, each frame has a bit in its chunk's
//! reported bitmap and a block is reported when all its frames are. Both
//! are cleared whenever memory goes on a list anew (freed, merged, moved),
//! so a block allocated since it was last reported, or merged into a larger
//! one, is unreported again. The reporter takes unreported blocks off the
//! lists, tells the hypervisor outside the lock, and gives them back marked.

use crate::chunk::{Mode, RBITS, REPORTED};
use crate::error::FreeError;
use crate::frame::NIL;
use crate::partial_chunks::BUCKETS;
use crate::policy::{ListId, MergePolicy};
use crate::zone::{BlockInfo, BuddyZone};
use crate::{Order, Pfn, bits};

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// Takes up to `out.len()` free blocks of at least `min` order from
    /// `list` that are not reported, off the free lists (allocated, as far
    /// as the core is concerned, until [`BuddyZone::return_reported`]), and
    /// writes them to `out`, taking at most `max_pages` frames. Returns how
    /// many blocks. Orders are searched from the highest down; a free list
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
            if o >= self.c {
                let mut k = self.areas.head(o, list).head;
                while k != NIL && n < out.len() && left >= 1 << o {
                    let ch = self.chunks[k];
                    if ch.flags & REPORTED == 0 {
                        left -= 1 << o;
                        self.areas.remove(&mut self.chunks, k);
                        self.large_mark_allocated(k, o, 0);
                        out[n] = (self.pfn(self.first(k)), Order::new_truncated(o));
                        n += 1;
                    }
                    k = ch.next;
                }
            } else {
                n = self.take_unreported_small(o, list, out, n, &mut left);
            }
        }
        n
    }

    /// [`BuddyZone::take_unreported`] for blocks of exactly `o`, below the
    /// chunk order: the chunks of `list` are visited list by list; a chunk
    /// that gives blocks is refiled and may be met again (with none left).
    fn take_unreported_small(
        &mut self,
        o: u8,
        list: ListId,
        out: &mut [(Pfn, Order)],
        mut n: usize,
        left: &mut u64,
    ) -> usize {
        if self.sub.blocks(list.index(), o) == 0 {
            return n;
        }
        for b in 0..BUCKETS {
            for j in o as usize..self.c as usize {
                let mut k = self.partial.head(list.index(), j, b);
                while k != NIL && n < out.len() && *left >= 1 << o {
                    let next = self.chunks[k].next;
                    if self.chunks[k].counts[o as usize] > 0 {
                        // Collect first (the bitmap is read while nothing
                        // changes), then take.
                        let start = n;
                        for x in bits::maximal_blocks(self.words(k), o) {
                            if n == out.len() || *left < 1 << o {
                                break;
                            }
                            if !bits::all_set(self.rwords(k), x, o) {
                                out[n] = (self.pfn(self.first(k) + x), Order::new_truncated(o));
                                n += 1;
                                *left -= 1 << o;
                            }
                        }
                        for &(p, _) in &out[start..n] {
                            let x = self.bit(self.idx(p));
                            self.take_in(k, o, x, o, x, 0);
                        }
                    }
                    k = next;
                }
            }
        }
        n
    }

    /// Gives back a block [`BuddyZone::take_unreported`] took: freed to the
    /// tail of its list (so that allocations prefer memory the hypervisor
    /// still backs) and, if `reported`, it did not merge with a free buddy
    /// and its chunk was not reserved meanwhile (the reservation keeps it,
    /// unmarked), marked reported. Same errors as `free`.
    pub fn return_reported(
        &mut self,
        pfn: Pfn,
        order: Order,
        reported: bool,
    ) -> Result<(), FreeError> {
        let i = self.check_free(pfn, order)?;
        self.stats.frees += 1;
        let k = self.chunk_of(i);
        // A chunk reserved meanwhile takes the block into its reservation's
        // keeping, not onto a list: nothing there carries marks.
        let reserved = self.chunks[k].mode == Mode::Reserved;
        let (h, o) = self.free_block(i, order.get(), true);
        if reported && !reserved && h == i && o == order.get() {
            if o >= self.c {
                self.chunks[k].flags |= REPORTED;
            } else {
                let x = self.bit(i);
                bits::set(self.rwords_mut(k), x, o);
                self.chunks[k].flags |= RBITS;
            }
        }
        Ok(())
    }

    /// Frames in free blocks of at least `min` order on `list`, and how
    /// many of them are reported.
    pub fn reported_pages(&self, min: Order, list: ListId) -> (u64, u64) {
        let (mut free, mut reported) = (0, 0);
        for o in min.get().max(self.c)..=self.max_order {
            let mut k = self.areas.head(o, list).head;
            while k != NIL {
                let ch = &self.chunks[k];
                free += 1u64 << o;
                if ch.flags & REPORTED != 0 {
                    reported += 1u64 << o;
                }
                k = ch.next;
            }
        }
        if min.get() < self.c {
            for b in 0..BUCKETS {
                for j in 0..self.c as usize {
                    let mut k = self.partial.head(list.index(), j, b);
                    while k != NIL {
                        for o in min.get()..self.c {
                            for x in bits::maximal_blocks(self.words(k), o) {
                                free += 1u64 << o;
                                if bits::all_set(self.rwords(k), x, o) {
                                    reported += 1u64 << o;
                                }
                            }
                        }
                        k = self.chunks[k].next;
                    }
                }
            }
        }
        (free, reported)
    }

    /// Whether the free block headed by `pfn` is marked reported.
    pub fn is_reported(&self, pfn: Pfn) -> bool {
        let Some(BlockInfo::Free { head, order, .. }) = self.block_at(pfn) else {
            return false;
        };
        if head != pfn {
            return false;
        }
        let i = self.idx(pfn);
        let k = self.chunk_of(i);
        if order.get() >= self.c {
            self.chunks[k].flags & REPORTED != 0
        } else {
            bits::all_set(self.rwords(k), self.bit(i), order.get())
        }
    }
}
