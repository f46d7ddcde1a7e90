//! Chunks: the core's unit of bookkeeping, `2^c` frames (`c` the chunk
//! order, at most [`MAX_CHUNK_ORDER`]; the mobility layer makes a chunk its
//! pageblock or a part of one).
//!
//! Blocks of at least the chunk order are linked on per-order free lists
//! by chunk index, as a classic buddy allocator links them by frame.
//! Blocks below it live inside one chunk, in its free bitmap (`bits.rs`),
//! and the chunk keeps how many free blocks of each order it holds. A
//! chunk with some but not all of its frames free is filed by how full it
//! is (`partial_chunks.rs`), which is how allocations find the fullest chunk.

use core::mem::MaybeUninit;

use pageframe_types::carve;

use crate::frame::{Idx, NIL};

/// The largest chunk order: a chunk's free bitmap fills at most one 64-byte
/// cache line (512 frames, a 2 MiB pageblock on x86-64).
pub const MAX_CHUNK_ORDER: u8 = 9;

/// What a chunk is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Mode {
    /// Every frame is a hole.
    Hole = 0,
    /// Frame by frame: the free bitmap and the per-frame words say what
    /// each frame is. Never wholly free (it then becomes a free block).
    Split = 1,
    /// Head of a free block of at least the chunk order, on a free list.
    FreeHead = 2,
    /// Head of an allocated block of at least the chunk order.
    AllocHead = 3,
    /// Inside a free or allocated block whose head is a lower chunk.
    Covered = 4,
    /// Its free frames are held by a reservation (`reservation.rs`); the
    /// free bitmap holds the frames freed to the zone meanwhile.
    Reserved = 5,
}

/// Bit of [`Chunk::flags`]: a free head reported to the hypervisor since it
/// went on its list (`reporting.rs`).
pub(crate) const REPORTED: u8 = 1;
/// Bit of [`Chunk::flags`]: some bit of the chunk's reported bitmap is set.
pub(crate) const RBITS: u8 = 2;
/// Bit of [`Chunk::flags`]: filed on a partial list at `class`/`bucket`.
pub(crate) const FILED: u8 = 4;

/// Metadata of one chunk (44 bytes; 0.09 bytes a frame at order 9).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Chunk {
    /// List links: the free list of a free head, or the partial list of a
    /// split chunk.
    pub next: Idx,
    pub prev: Idx,
    /// The tag of an allocated head.
    pub tag: u32,
    /// Split: free frames.
    pub free: u16,
    /// Split: bit `o` set iff `counts[o] > 0`.
    pub omask: u16,
    pub mode: Mode,
    /// Block order of a head.
    pub order: u8,
    /// The list a free head is on, or a split chunk's free blocks are on.
    pub list: u8,
    pub flags: u8,
    /// Split and filed: the partial list it is on.
    pub class: u8,
    pub bucket: u8,
    /// Split: maximal free blocks per order below the chunk order.
    pub counts: [u16; MAX_CHUNK_ORDER as usize],
}

impl Chunk {
    pub const HOLE: Chunk = Chunk {
        next: NIL,
        prev: NIL,
        tag: 0,
        free: 0,
        omask: 0,
        mode: Mode::Hole,
        order: 0,
        list: 0,
        flags: 0,
        class: 0,
        bucket: 0,
        counts: [0; MAX_CHUNK_ORDER as usize],
    };

    /// Adds `delta` to the count of free blocks of `order` and keeps the
    /// order mask.
    #[inline]
    pub fn add_count(&mut self, order: u8, delta: i32) {
        let slot = &mut self.counts[order as usize];
        *slot = (i32::from(*slot) + delta) as u16;
        if *slot == 0 {
            self.omask &= !(1 << order);
        } else {
            self.omask |= 1 << order;
        }
    }

    /// The highest order with a free block (a split chunk with free frames).
    #[inline]
    pub fn top_order(&self) -> u8 {
        15 - self.omask.leading_zeros() as u8
    }
}

/// All chunks of a zone's table.
pub(crate) struct ChunkTable<'a> {
    pub slots: &'a mut [Chunk],
}

impl<'a> ChunkTable<'a> {
    /// Bytes for `n` chunks from a buffer at any address.
    pub const fn bytes(n: usize) -> usize {
        match carve::bytes_for::<Chunk>(n) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// `n` chunks, all holes.
    pub fn carve(
        mem: &'a mut [MaybeUninit<u8>],
        n: usize,
    ) -> Option<(ChunkTable<'a>, &'a mut [MaybeUninit<u8>])> {
        let (slots, rest) = carve::carve_init(mem, n, |_| Chunk::HOLE)?;
        Some((ChunkTable { slots }, rest))
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

impl core::ops::Index<Idx> for ChunkTable<'_> {
    type Output = Chunk;
    #[inline]
    fn index(&self, k: Idx) -> &Chunk {
        &self.slots[k as usize]
    }
}

impl core::ops::IndexMut<Idx> for ChunkTable<'_> {
    #[inline]
    fn index_mut(&mut self, k: Idx) -> &mut Chunk {
        &mut self.slots[k as usize]
    }
}
