//! Partly free chunks, filed by how full they are: the core's placement
//! rule (not Linux's), which keeps memory unfragmented without compaction.
//!
//! A request below the chunk order is served from the fullest chunk of its
//! list that holds a free block large enough. Chunks that are nearly empty
//! are then only ever freed into, so they drain into whole free chunks (2
//! MiB blocks at the default pageblock order) while the busy ones fill up:
//! the "fill the fullest first" choice of LLFree (ATC'23), which Linux's
//! LIFO free lists do not make (after random frees they hand out frames of
//! every pageblock alike, so no pageblock ever drains).
//!
//! The choice costs O(1): each list keeps, for every (class, bucket), a
//! doubly linked list of chunks, where the class is the order of the
//! chunk's largest free block and the bucket its free-frame count in 32
//! steps (bucket 0 the fullest), plus bit masks of the non-empty ones. A
//! request of order `k` takes the lowest bucket that has a chunk of class
//! `>= k`: one scan of a 32-bit mask and one of a 16-bit one. A chunk
//! moves between lists only when its bucket or class changes, and it is
//! not sorted inside its bucket (the last filed is taken first).

use pageframe_types::carve;

use crate::chunk::{Chunk, ChunkTable, FILED, MAX_CHUNK_ORDER};
use crate::frame::{Idx, NIL};
use crate::policy::MAX_LISTS;

/// Fill buckets per class.
pub(crate) const BUCKETS: usize = 32;
const CLASSES: usize = MAX_CHUNK_ORDER as usize;

/// The bucket of a chunk of order `c` with `free` free frames
/// (`0 < free < 2^c`): 0 for the fullest.
#[inline]
pub(crate) const fn bucket(free: u16, c: u8) -> u8 {
    if c >= 5 {
        ((free as u32 * BUCKETS as u32) >> c) as u8
    } else {
        free as u8
    }
}

/// The lists of partly free chunks of every list. The list heads (9 KiB)
/// live in the zone's metadata so that a zone stays small.
pub(crate) struct PartialIndex<'a> {
    /// `heads[(l * CLASSES + j) * BUCKETS + b]`.
    heads: &'a mut [Idx],
    /// Bit `j` of `classes[l * BUCKETS + b]`: list `l`'s class `j` bucket
    /// `b` is not empty.
    classes: &'a mut [u16],
    /// Bit `b` of `buckets[l]`: some class of list `l` has bucket `b`.
    buckets: &'a mut [u32],
}

const HEADS: usize = MAX_LISTS * CLASSES * BUCKETS;

#[inline]
const fn hi(l: usize, j: usize, b: usize) -> usize {
    ((l & (MAX_LISTS - 1)) * CLASSES + j % CLASSES) * BUCKETS + b % BUCKETS
}

#[inline]
const fn ci(l: usize, b: usize) -> usize {
    (l & (MAX_LISTS - 1)) * BUCKETS + b % BUCKETS
}

impl<'a> PartialIndex<'a> {
    /// Bytes [`PartialIndex::carve`] needs from a buffer at any address.
    pub const fn bytes() -> usize {
        let h = match carve::bytes_for::<Idx>(HEADS) {
            Some(b) => b,
            None => usize::MAX,
        };
        let c = match carve::bytes_for::<u16>(MAX_LISTS * BUCKETS) {
            Some(b) => b,
            None => usize::MAX,
        };
        let b = match carve::bytes_for::<u32>(MAX_LISTS) {
            Some(b) => b,
            None => usize::MAX,
        };
        h.saturating_add(c).saturating_add(b)
    }

    /// An empty index whose lists live at the front of `mem`.
    pub fn carve(
        mem: &'a mut [core::mem::MaybeUninit<u8>],
    ) -> Option<(PartialIndex<'a>, &'a mut [core::mem::MaybeUninit<u8>])> {
        let (heads, rest) = carve::carve_init(mem, HEADS, |_| NIL)?;
        let (classes, rest) = carve::carve_init(rest, MAX_LISTS * BUCKETS, |_| 0u16)?;
        let (buckets, rest) = carve::carve_init(rest, MAX_LISTS, |_| 0u32)?;
        Some((
            PartialIndex {
                heads,
                classes,
                buckets,
            },
            rest,
        ))
    }

    /// Files split chunk `k` (with free frames) at the head of the list its
    /// largest free block and fill select.
    #[inline]
    pub fn file(&mut self, chunks: &mut ChunkTable<'_>, k: Idx, c: u8) {
        let ch = &mut chunks[k];
        let l = ch.list as usize & (MAX_LISTS - 1);
        let (j, b) = (ch.top_order() as usize, bucket(ch.free, c) as usize);
        let old = self.heads[hi(l, j, b)];
        ch.next = old;
        ch.prev = NIL;
        ch.class = j as u8;
        ch.bucket = b as u8;
        ch.flags |= FILED;
        if old != NIL {
            chunks[old].prev = k;
        }
        self.heads[hi(l, j, b)] = k;
        self.classes[ci(l, b)] |= 1 << j;
        self.buckets[l] |= 1 << b;
    }

    /// Takes chunk `k` off its partial list.
    #[inline]
    pub fn unfile(&mut self, chunks: &mut ChunkTable<'_>, k: Idx) {
        let ch = chunks[k];
        debug_assert!(ch.flags & FILED != 0);
        let l = ch.list as usize & (MAX_LISTS - 1);
        let (j, b) = (ch.class as usize % CLASSES, ch.bucket as usize % BUCKETS);
        if ch.prev == NIL {
            self.heads[hi(l, j, b)] = ch.next;
        } else {
            chunks[ch.prev].next = ch.next;
        }
        if ch.next != NIL {
            chunks[ch.next].prev = ch.prev;
        }
        chunks[k].flags &= !FILED;
        if self.heads[hi(l, j, b)] == NIL {
            self.classes[ci(l, b)] &= !(1 << j);
            if self.classes[ci(l, b)] == 0 {
                self.buckets[l] &= !(1 << b);
            }
        }
    }

    /// Whether `k`'s filing is what its state asks for.
    #[inline]
    pub fn filed_right(ch: &Chunk, c: u8) -> bool {
        ch.flags & FILED != 0 && ch.class == ch.top_order() && ch.bucket == bucket(ch.free, c)
    }

    /// The fullest chunk of `list` holding a free block of at least `order`.
    #[inline]
    pub fn pick(&self, list: usize, order: u8) -> Option<Idx> {
        let l = list & (MAX_LISTS - 1);
        let mut bm = self.buckets[l];
        while bm != 0 {
            let b = bm.trailing_zeros() as usize;
            let cm = self.classes[ci(l, b)] >> order;
            if cm != 0 {
                let j = order as usize + cm.trailing_zeros() as usize;
                return Some(self.heads[hi(l, j, b)]);
            }
            bm &= bm - 1;
        }
        None
    }

    /// The first chunk on the list of `list`, `class`, `bucket`.
    #[inline]
    pub fn head(&self, list: usize, class: usize, bucket: usize) -> Idx {
        self.heads[hi(list, class, bucket)]
    }

    /// Whether list `l`'s class `j` bucket `b` is marked non-empty.
    pub fn marked(&self, list: usize, class: usize, bucket: usize) -> bool {
        let l = list & (MAX_LISTS - 1);
        self.classes[ci(l, bucket)] & (1 << class) != 0 && self.buckets[l] & (1 << bucket) != 0
    }
}
