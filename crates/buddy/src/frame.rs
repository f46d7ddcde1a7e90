//! Per-frame words (2 bytes a frame) for the frames of split chunks, in
//! memory the caller hands over, written lazily: a chunk's words are
//! written the first time the chunk is split, so setting up a zone writes
//! none of them.
//!
//! A frame's word matters only where the chunk's free bitmap says the frame
//! is not free: it then says whether the frame is a hole, the head of an
//! allocated block (with the block's order and the tag the layers above
//! keep on it), or another frame of an allocated block.

use core::mem::MaybeUninit;

use pageframe_types::carve;

/// Index of a frame inside a zone's table (zone-relative frame number).
pub(crate) type Idx = u32;
/// The "no chunk" link value.
pub(crate) const NIL: Idx = Idx::MAX;

/// What a not-free frame of a split chunk is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// A frame of an allocated block other than its head.
    Tail,
    /// The head of an allocated block.
    Head,
    /// Not managed.
    Hole,
    /// Handed to a reservation (`reservation.rs`): free or allocated from
    /// it, which only the reservation knows.
    Reserved,
}

/// One frame's word: order in bits 0..4, kind in bits 4..6, the tag in bits
/// 6..16. Two bytes: the word is most of the core's memory a frame, and
/// the layers above need ten bits of tag (see `pageframe_mobility::tag`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(transparent)]
pub(crate) struct Word(u16);

/// Bits of a block's tag kept by the core (the rest is cut off).
pub const TAG_BITS: u32 = 10;
/// The tag bits the core keeps, as a mask.
pub(crate) const TAG_MASK: u32 = (1 << TAG_BITS) - 1;
const TAG_SHIFT: u32 = 6;
const KIND_SHIFT: u32 = 4;

impl Word {
    pub const TAIL: Word = Word(0);
    pub const HOLE: Word = Word(2 << KIND_SHIFT);
    pub const RESERVED: Word = Word(3 << KIND_SHIFT);

    #[inline]
    pub const fn head(order: u8, tag: u32) -> Word {
        Word(((order as u32 & 0xf) | 1 << KIND_SHIFT | (tag & TAG_MASK) << TAG_SHIFT) as u16)
    }

    #[inline]
    pub const fn kind(self) -> Kind {
        match (self.0 >> KIND_SHIFT) & 3 {
            1 => Kind::Head,
            2 => Kind::Hole,
            3 => Kind::Reserved,
            _ => Kind::Tail,
        }
    }

    #[inline]
    pub const fn order(self) -> u8 {
        (self.0 & 0xf) as u8
    }

    #[inline]
    pub const fn tag(self) -> u32 {
        (self.0 >> TAG_SHIFT) as u32
    }
}

/// The per-frame words with their lazy-init invariant enforced here: the
/// words of chunk `k` are initialised if and only if bit `k` of `init` is
/// set. No code outside this type reaches a word, so every read is safe: a
/// word of a chunk never written reads as a hole.
pub(crate) struct FrameWords<'a> {
    slots: &'a mut [MaybeUninit<Word>],
    init: &'a mut [u64],
    /// Chunk order.
    shift: u8,
}

impl<'a> FrameWords<'a> {
    /// Bytes a table of `frames` frames in chunks of order `c` needs from a
    /// buffer at any address.
    pub const fn bytes(frames: u64, c: u8) -> usize {
        let words = (frames >> c).div_ceil(64) as usize;
        let a = match carve::bytes_for::<Word>(frames as usize) {
            Some(a) => a,
            None => return usize::MAX,
        };
        let b = match carve::bytes_for::<u64>(words) {
            Some(b) => b,
            None => return usize::MAX,
        };
        a.saturating_add(b)
    }

    /// Carves a table of `frames` frames, none written.
    pub fn carve(
        bytes: &'a mut [MaybeUninit<u8>],
        frames: usize,
        c: u8,
    ) -> Option<(FrameWords<'a>, &'a mut [MaybeUninit<u8>])> {
        let (slots, rest) = carve::carve::<Word>(bytes, frames)?;
        let words = (frames >> c).div_ceil(64);
        let (init, rest) = carve::carve_init(rest, words, |_| 0u64)?;
        Some((
            FrameWords {
                slots,
                init,
                shift: c,
            },
            rest,
        ))
    }

    #[inline]
    fn is_init(&self, i: Idx) -> bool {
        let k = (i >> self.shift) as usize;
        self.init
            .get(k / 64)
            .is_some_and(|w| w & (1 << (k % 64)) != 0)
    }

    /// Frame `i`'s word (a hole if its chunk was never written).
    #[inline]
    pub fn get(&self, i: Idx) -> Word {
        if self.is_init(i) {
            // SAFETY: the chunk's init bit is set, so every word of the
            // chunk was written (`init_chunk`), `i`'s included.
            unsafe { self.slots[i as usize].assume_init() }
        } else {
            Word::HOLE
        }
    }

    /// Writes frame `i`'s word, writing its whole chunk first (as holes) if
    /// it never was.
    #[inline]
    pub fn set(&mut self, i: Idx, w: Word) {
        self.ready(i);
        self.slots[i as usize].write(w);
    }

    /// Writes `w` to the `n` frames from `i`, all of one chunk (a block's
    /// tail below the chunk order): one check of the chunk, one fill.
    #[inline]
    pub fn set_run(&mut self, i: Idx, n: u32, w: Word) {
        if n == 0 {
            return;
        }
        self.ready(i);
        debug_assert_eq!(i >> self.shift, (i + n - 1) >> self.shift);
        for s in &mut self.slots[i as usize..(i + n) as usize] {
            s.write(w);
        }
    }

    /// Writes `w` to frame `base + b` for each bit `b` of `bits`, all of one
    /// chunk (a word of a chunk's bitmap): one check of the chunk.
    #[inline]
    pub fn set_bits(&mut self, base: Idx, bits: u64, w: Word) {
        if bits == 0 {
            return;
        }
        if bits == u64::MAX {
            // A whole word of frames (a fresh chunk's): one fill.
            return self.set_run(base, 64, w);
        }
        self.ready(base);
        let mut rest = bits;
        while rest != 0 {
            let i = base + rest.trailing_zeros();
            debug_assert_eq!(i >> self.shift, base >> self.shift);
            self.slots[i as usize].write(w);
            rest &= rest - 1;
        }
    }

    /// The chunk holding `i` written (as holes) before a word of it is.
    #[inline(always)]
    fn ready(&mut self, i: Idx) {
        if !self.is_init(i) {
            self.init_chunk(i);
        }
    }

    /// Writes every word of the chunk holding `i` as a hole, once.
    pub fn init_chunk(&mut self, i: Idx) {
        if self.is_init(i) {
            return;
        }
        let n = 1usize << self.shift;
        let h = (i as usize) & !(n - 1);
        let end = (h + n).min(self.slots.len());
        for s in &mut self.slots[h..end] {
            s.write(Word::HOLE);
        }
        let k = (i >> self.shift) as usize;
        if let Some(w) = self.init.get_mut(k / 64) {
            *w |= 1 << (k % 64);
        }
    }
}
