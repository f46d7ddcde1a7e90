//! Reservations: a chunk's free frames handed to one CPU, which allocates
//! order-0 frames from them and takes back the ones it freed, without the
//! zone's lock and without touching any memory another CPU writes (LLFree's
//! per-core reservation of a tree, ATC'23, at chunk granularity).
//!
//! The zone picks the chunk as it picks one for any small request (best fit,
//! fullest first), moves the chunk's free bitmap into the [`Reservation`]
//! and marks the chunk reserved: its free frames leave the zone's counts and
//! lists, and every frame handed over gets a "reserved" word (only the
//! reservation knows whether it is free). While reserved, a block freed to
//! the zone is recorded in the chunk's own bitmap; blocks allocated before
//! the reservation free as usual. [`BuddyZone::unreserve`] merges both
//! bitmaps back, writes the frames the reservation still has allocated as
//! order-0 blocks with its tag, and files the chunk again.
//!
//! Nothing may move or take a reserved chunk's frames: walks report every
//! not-free frame of it as allocated with tag 0, and its free frames not at
//! all. A layer above releases reservations before it isolates a range.

use crate::bits;
use crate::chunk::{Chunk, Mode};
use crate::frame::{Idx, Kind, Word};
use crate::policy::{ListId, MergePolicy};
use crate::zone::BuddyZone;
use crate::{MAX_CHUNK_ORDER, Pfn};

/// Words of the largest chunk's bitmap.
const WORDS: usize = bits::words(MAX_CHUNK_ORDER);

/// The free frames of one chunk, held for order-0 allocations. Plain data:
/// owning it is what makes its frames the holder's to hand out. Give it
/// back with [`BuddyZone::unreserve`] (dropping it leaves the chunk
/// reserved, its free frames unused).
#[derive(Debug)]
pub struct Reservation {
    /// The zone it came from (the address of its chunk table).
    zone: usize,
    chunk: Idx,
    first: Pfn,
    /// Free frames.
    free: [u64; WORDS],
    /// Frames the zone handed over (free ones, or allocated from them).
    given: [u64; WORDS],
    words: usize,
    /// Frames in the chunk.
    frames: usize,
    list: ListId,
    tag: u32,
}

impl Reservation {
    /// The lowest free frame of the reservation, now allocated.
    #[inline]
    pub fn alloc(&mut self) -> Option<Pfn> {
        for (i, w) in self.free[..self.words].iter_mut().enumerate() {
            if *w != 0 {
                let b = w.trailing_zeros();
                *w &= *w - 1;
                return Some(self.first + ((i as u64) << 6 | u64::from(b)));
            }
        }
        None
    }

    /// Takes back a frame this reservation handed out and that is not free
    /// in it; `false` (nothing changed) for any other frame.
    #[inline]
    pub fn free(&mut self, pfn: Pfn) -> bool {
        let Some(x) = self.bit(pfn) else {
            return false;
        };
        let (i, m) = (x >> 6, 1u64 << (x & 63));
        if self.given[i] & m == 0 || self.free[i] & m != 0 {
            return false;
        }
        self.free[i] |= m;
        true
    }

    /// Whether `pfn` is a frame this reservation handed out and that is not
    /// free in it: what [`Reservation::free`] would take back.
    #[inline]
    pub fn handed_out(&self, pfn: Pfn) -> bool {
        self.bit(pfn).is_some_and(|x| {
            let (i, m) = (x >> 6, 1u64 << (x & 63));
            self.given[i] & m != 0 && self.free[i] & m == 0
        })
    }

    /// Whether `pfn` lies in the reserved chunk.
    #[inline]
    pub fn contains(&self, pfn: Pfn) -> bool {
        self.bit(pfn).is_some()
    }

    #[inline]
    fn bit(&self, pfn: Pfn) -> Option<usize> {
        let x = pfn.get().checked_sub(self.first.get())? as usize;
        (x < self.frames).then_some(x)
    }

    /// The reserved chunk's first frame.
    pub fn chunk_start(&self) -> Pfn {
        self.first
    }

    /// Free frames left.
    pub fn free_frames(&self) -> u32 {
        self.free[..self.words].iter().map(|w| w.count_ones()).sum()
    }

    /// The list the frames came from.
    pub fn list(&self) -> ListId {
        self.list
    }
}

impl<P: MergePolicy> BuddyZone<'_, P> {
    /// An identity of this zone for its reservations.
    fn token(&self) -> usize {
        self.chunks.slots.as_ptr() as usize
    }

    /// Reserves the free frames of one chunk of `list` for order-0
    /// allocations: the chunk a small request would be served from (see
    /// `partial_chunks.rs`), or a fresh chunk split off a free block of at least
    /// the chunk order. Frames later allocated from it carry `tag` once it
    /// is given back. `None` when `list` has no free memory, when the chunk
    /// a small request would be served from has fewer than `min_free` free
    /// frames (holes in busy chunks are best filled one by one through the
    /// zone; a reservation is for a run of allocations), or when chunks are
    /// single frames (chunk order 0: every block is on the free lists).
    pub fn reserve(&mut self, list: ListId, tag: u32, min_free: u32) -> Option<Reservation> {
        let c = self.c;
        if c == 0 {
            return None;
        }
        let picked = self.partial.pick(list.index(), 0);
        if let Some(k) = picked
            && u32::from(self.chunks[k].free) < min_free
        {
            return None;
        }
        let k = if let Some(k) = picked {
            self.partial.unfile(&mut self.chunks, k);
            let ch = self.chunks[k];
            let l = ch.list as usize;
            for o in 0..c {
                *self.sub.blocks_mut(l, o) -= u64::from(ch.counts[o as usize]);
            }
            self.sub.sub_pages(l, u64::from(ch.free));
            k
        } else {
            let o = self.areas.first_nonempty(list, c, self.max_order)?;
            let k = self
                .areas
                .pop(&mut self.chunks, o, list)
                .unwrap_or_else(|| unreachable!());
            self.large_expand(k, c, o, list);
            self.make_split_free(k, list);
            k
        };
        let n = bits::words(c);
        let mut free = [0u64; WORDS];
        free[..n].copy_from_slice(self.words(k));
        self.words_mut(k).fill(0);
        self.rwords_mut(k).fill(0);
        let first = self.first(k);
        for (i, &w) in free[..n].iter().enumerate() {
            self.frames
                .set_bits(first + ((i as u32) << 6), w, Word::RESERVED);
        }
        let list = ListId::from_stored(self.chunks[k].list);
        self.chunks[k] = Chunk {
            mode: Mode::Reserved,
            list: list.get(),
            tag,
            ..Chunk::HOLE
        };
        Some(Reservation {
            zone: self.token(),
            chunk: k,
            first: self.pfn(first),
            free,
            given: free,
            words: n,
            frames: 1 << c,
            list,
            tag,
        })
    }

    /// Gives a reservation back: its free frames and those freed to the zone
    /// meanwhile become free memory of the chunk again, the frames it
    /// allocated become order-0 blocks with its tag. Refused, with the
    /// reservation handed back, if it is not one of this zone's.
    // The refused reservation goes back to its holder by value (no heap
    // here to box it in).
    #[allow(clippy::result_large_err)]
    pub fn unreserve(&mut self, r: Reservation) -> Result<(), Reservation> {
        let k = r.chunk;
        if r.zone != self.token()
            || k as usize >= self.chunks.len()
            || self.chunks[k].mode != Mode::Reserved
        {
            return Err(r);
        }
        let c = self.c;
        let first = self.first(k);
        self.reserved_free -= u64::from(self.chunks[k].free);
        for i in 0..r.words {
            let zone_side = self.words(k)[i];
            debug_assert_eq!(zone_side & r.free[i], 0, "a frame free twice");
            let live = r.given[i] & !r.free[i] & !zone_side;
            self.frames
                .set_bits(first + ((i as u32) << 6), live, Word::head(0, r.tag));
            self.words_mut(k)[i] = zone_side | r.free[i];
        }
        let list = self.policy.list_for(self.pfn(first));
        let w = self.words(k);
        let free = bits::count(w);
        if free == 0 {
            // All handed out and nothing came back: a full chunk.
            self.chunks[k] = Chunk {
                mode: Mode::Split,
                list: list.get(),
                ..Chunk::HOLE
            };
            return Ok(());
        }
        if free == 1 << c {
            self.chunks[k].flags = 0;
            self.large_insert(k, c, list, false, true);
            return Ok(());
        }
        let mut counts = [0u16; MAX_CHUNK_ORDER as usize];
        bits::count_maximal(w, c, &mut counts);
        let l = list.index();
        let mut ch = Chunk {
            mode: Mode::Split,
            list: list.get(),
            free: free as u16,
            ..Chunk::HOLE
        };
        for o in 0..c {
            let n = counts[o as usize];
            if n != 0 {
                ch.add_count(o, i32::from(n));
                *self.sub.blocks_mut(l, o) += u64::from(n);
            }
        }
        self.sub.add_pages(l, u64::from(free));
        self.chunks[k] = ch;
        self.refile(k);
        Ok(())
    }

    /// Frames freed into reserved chunks since they were reserved: free,
    /// but not the zone's to hand out (nor counted by
    /// [`BuddyZone::free_pages`]) until their reservations come back.
    pub fn reserved_free_pages(&self) -> u64 {
        self.reserved_free
    }

    /// Whether [`BuddyZone::reserve`] would reserve a chunk of `list` with
    /// at least `min_free` free frames now.
    pub fn reservable(&self, list: ListId, min_free: u32) -> bool {
        match self.partial.pick(list.index(), 0) {
            Some(k) => u32::from(self.chunks[k].free) >= min_free,
            None => self
                .areas
                .first_nonempty(list, self.c, self.max_order)
                .is_some(),
        }
    }

    /// Whether `pfn` lies in a chunk a reservation holds.
    pub fn is_reserved(&self, pfn: Pfn) -> bool {
        self.span.contains(pfn) && self.chunks[self.chunk_of(self.idx(pfn))].mode == Mode::Reserved
    }

    /// What frame `i` of reserved chunk `k` belongs to, as walks see it:
    /// not-free frames as allocated with tag 0 (nothing may move them), free
    /// ones likewise (they are the reservation's or wait for it).
    pub(crate) fn reserved_block_at(&self, i: Idx) -> crate::BlockInfo {
        if !self.is_free_bit(i) {
            match self.frames.get(i).kind() {
                Kind::Hole => return crate::BlockInfo::Hole,
                Kind::Head | Kind::Tail => {
                    if let Some((h, w)) = self.alloc_head_of(i) {
                        return crate::BlockInfo::Allocated {
                            head: self.pfn(h),
                            order: crate::Order::new_truncated(w.order()),
                            tag: 0,
                        };
                    }
                }
                Kind::Reserved => {}
            }
        }
        crate::BlockInfo::Allocated {
            head: self.pfn(i),
            order: crate::Order::ZERO,
            tag: 0,
        }
    }
}
