//! Partly free chunks, filed by their largest free block and how full they
//! are: the core's placement rule (not Linux's), which keeps memory
//! unfragmented without compaction.
//!
//! A request of order `k` below the chunk order is served from a chunk of
//! its list whose largest free block is the smallest that is still at
//! least `k` (best fit, as `__rmqueue_smallest` picks the smallest order,
//! but per chunk), and among those from the fullest. Chunks that are
//! nearly empty have large free blocks and few frames in use, so they are
//! chosen last: they are only ever freed into and drain into whole free
//! chunks (2 MiB blocks at the default pageblock order), while busy chunks
//! fill their holes. That is LLFree's "fill the fullest first" (ATC'23),
//! which Linux's LIFO free lists do not make: after random frees they hand
//! out frames of every pageblock alike, so no pageblock ever drains.
//! Choosing by largest block first also keeps the blocks of orders 1-3
//! that small requests of those orders need (filling by fill alone split
//! them for order-0 requests, and the mixed-churn lab's order-3 movable
//! requests then stole from other types).
//!
//! The choice costs O(1): each list keeps, for every (class, bucket), a
//! doubly linked list of chunks, where the class is the order of the
//! chunk's largest free block and the bucket its free-frame count in 32
//! steps (bucket 0 the fullest), plus bit masks of the non-empty ones. A
//! request of order `k` takes the lowest class `>= k` that has a chunk and
//! in it the lowest bucket: two bit scans. A chunk moves between lists only
//! when its class or bucket changes, and is not sorted inside its bucket
//! (the last filed is taken first). A chunk whose fill goes back and forth
//! across a bucket's edge stays filed until it moves two buckets away.

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
    /// Bit `b` of `buckets[l * CLASSES + j]`: list `l`'s class `j` has
    /// chunks in bucket `b`.
    buckets: &'a mut [u32],
    /// Bit `j` of `classes[l]`: list `l` has chunks of class `j`.
    classes: &'a mut [u16],
}

const HEADS: usize = MAX_LISTS * CLASSES * BUCKETS;

#[inline]
const fn hi(l: usize, j: usize, b: usize) -> usize {
    ((l & (MAX_LISTS - 1)) * CLASSES + j % CLASSES) * BUCKETS + b % BUCKETS
}

#[inline]
const fn bi(l: usize, j: usize) -> usize {
    (l & (MAX_LISTS - 1)) * CLASSES + j % CLASSES
}

impl<'a> PartialIndex<'a> {
    /// Bytes [`PartialIndex::carve`] needs from a buffer at any address.
    pub const fn bytes() -> usize {
        let h = match carve::bytes_for::<Idx>(HEADS) {
            Some(b) => b,
            None => usize::MAX,
        };
        let b = match carve::bytes_for::<u32>(MAX_LISTS * CLASSES) {
            Some(b) => b,
            None => usize::MAX,
        };
        let c = match carve::bytes_for::<u16>(MAX_LISTS) {
            Some(b) => b,
            None => usize::MAX,
        };
        h.saturating_add(b).saturating_add(c)
    }

    /// An empty index whose lists live at the front of `mem`.
    pub fn carve(
        mem: &'a mut [core::mem::MaybeUninit<u8>],
    ) -> Option<(PartialIndex<'a>, &'a mut [core::mem::MaybeUninit<u8>])> {
        let (heads, rest) = carve::carve_init(mem, HEADS, |_| NIL)?;
        let (buckets, rest) = carve::carve_init(rest, MAX_LISTS * CLASSES, |_| 0u32)?;
        let (classes, rest) = carve::carve_init(rest, MAX_LISTS, |_| 0u16)?;
        Some((
            PartialIndex {
                heads,
                buckets,
                classes,
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
        self.buckets[bi(l, j)] |= 1 << b;
        self.classes[l] |= 1 << j;
    }

    /// Takes chunk `k` off its partial list.
    #[inline]
    pub fn unfile(&mut self, chunks: &mut ChunkTable<'_>, k: Idx) {
        let ch = &chunks[k];
        debug_assert!(ch.flags & FILED != 0);
        let l = ch.list as usize & (MAX_LISTS - 1);
        let (j, b) = (ch.class as usize % CLASSES, ch.bucket as usize % BUCKETS);
        let (prev, next) = (ch.prev, ch.next);
        if prev == NIL {
            self.heads[hi(l, j, b)] = next;
        } else {
            chunks[prev].next = next;
        }
        if next != NIL {
            chunks[next].prev = prev;
        }
        chunks[k].flags &= !FILED;
        if self.heads[hi(l, j, b)] == NIL {
            self.buckets[bi(l, j)] &= !(1 << b);
            if self.buckets[bi(l, j)] == 0 {
                self.classes[l] &= !(1 << j);
            }
        }
    }

    /// Whether `k`'s filing is what its state asks for: its class exactly,
    /// its bucket within one (a chunk whose fill goes back and forth across
    /// a bucket's edge is not moved each time; the order of chunks is off
    /// by at most 16 frames of 512).
    #[inline]
    pub fn filed_right(ch: &Chunk, c: u8) -> bool {
        ch.flags & FILED != 0
            && ch.class == ch.top_order()
            && ch.bucket.abs_diff(bucket(ch.free, c)) <= 1
    }

    /// For a request of `order` on `list`: the fullest chunk among those
    /// whose largest free block is the smallest that suffices.
    #[inline]
    pub fn pick(&self, list: usize, order: u8) -> Option<Idx> {
        let l = list & (MAX_LISTS - 1);
        let cm = self.classes[l] >> order;
        if cm == 0 {
            return None;
        }
        let j = order as usize + cm.trailing_zeros() as usize;
        let b = self.buckets[bi(l, j)].trailing_zeros() as usize;
        Some(self.heads[hi(l, j, b)])
    }

    /// The first chunk on the list of `list`, `class`, `bucket`.
    #[inline]
    pub fn head(&self, list: usize, class: usize, bucket: usize) -> Idx {
        self.heads[hi(list, class, bucket)]
    }

    /// Whether list `l`'s class `j` bucket `b` is marked non-empty.
    pub fn marked(&self, list: usize, class: usize, bucket: usize) -> bool {
        let l = list & (MAX_LISTS - 1);
        self.buckets[bi(l, class)] & (1 << bucket) != 0 && self.classes[l] & (1 << class) != 0
    }
}
