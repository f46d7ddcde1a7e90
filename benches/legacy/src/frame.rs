//! Per-frame metadata (16 bytes a frame) in memory the caller hands over,
//! written lazily: a free max-order block is described by its head alone.

use core::mem::{MaybeUninit, size_of};

use pageframe_types::carve;

/// Index of a frame inside a zone's metadata table (zone-relative frame number).
pub(crate) type Idx = u32;
/// The "no frame" link value.
pub(crate) const NIL: Idx = Idx::MAX;

/// What a frame is, from the buddy layer's point of view (spec 01 §3.1).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum State {
    /// Not managed: firmware reserved, outside the zone, or never handed over.
    Hole = 0,
    /// Head of a block on a free list (Linux's `PageBuddy`); `order` and `list` are valid.
    FreeHead = 1,
    /// Head of an allocated block; `order` is valid.
    AllocHead = 2,
    /// Any other frame of a free or allocated block.
    Tail = 3,
}

/// Bit of [`Frame::flags`] on a free head: reported to the hypervisor since
/// it went on its list (see `report.rs`).
pub(crate) const REPORTED: u8 = 1;

/// Metadata of one frame. 16 bytes (Linux's `struct page` is 64).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Frame {
    /// Free-list successor (valid on free heads).
    pub next: Idx,
    /// Free-list predecessor (valid on free heads).
    pub prev: Idx,
    /// See [`State`].
    pub state: State,
    /// Block order on heads.
    pub order: u8,
    /// Free list the block is on (free heads).
    pub list: u8,
    /// Free-block flag bits ([`REPORTED`]), cleared whenever the block goes
    /// on a list; the rest spare (keep the record 16 bytes and aligned).
    pub flags: u8,
    /// An opaque word the layers above may keep on allocated block heads.
    pub tag: u32,
}

const _: () = assert!(size_of::<Frame>() == 16);

impl Frame {
    pub const fn with_state(state: State) -> Frame {
        Frame {
            next: NIL,
            prev: NIL,
            state,
            order: 0,
            list: 0,
            flags: 0,
            tag: 0,
        }
    }
}

/// The frame metadata array with its lazy-init invariant enforced here:
/// slot `i` is initialised if and only if it heads a max-order block (all
/// heads are written when the table is carved) or its block's bit in `init`
/// is set (then every frame of the block was written). No code outside this
/// type can reach a slot, so the invariant cannot be broken from outside,
/// and every read is safe: a frame of a block never written reads as its
/// head says (a hole, or a tail of a whole free or allocated block).
pub(crate) struct FrameTable<'a> {
    slots: &'a mut [MaybeUninit<Frame>],
    /// One bit per max-order block: all of its frames are written.
    init: &'a mut [u64],
    /// The max order: blocks of `1 << shift` frames.
    shift: u8,
}

impl<'a> FrameTable<'a> {
    /// Bytes of metadata a table of `frames` frames (a multiple of the
    /// max-order block) needs from a buffer at any address.
    pub const fn bytes(frames: u64, max_order: u8) -> usize {
        let blocks = frames >> max_order;
        let words = blocks.div_ceil(64) as usize;
        let a = match carve::bytes_for::<Frame>(frames as usize) {
            Some(a) => a,
            None => return usize::MAX,
        };
        let b = match carve::bytes_for::<u64>(words) {
            Some(b) => b,
            None => return usize::MAX,
        };
        a.saturating_add(b)
    }

    /// Carves a table of `frames` frames out of `bytes` with every block
    /// head written as `head` and no block initialised. `None` if the
    /// buffer is too small.
    pub fn carve(
        bytes: &'a mut [MaybeUninit<u8>],
        frames: usize,
        max_order: u8,
        head: Frame,
    ) -> Option<(FrameTable<'a>, &'a mut [MaybeUninit<u8>])> {
        let (slots, rest) = carve::carve::<Frame>(bytes, frames)?;
        let words = (frames >> max_order).div_ceil(64);
        let (init, rest) = carve::carve_init(rest, words, |_| 0u64)?;
        for h in (0..frames).step_by(1 << max_order) {
            slots[h].write(head);
        }
        Some((
            FrameTable {
                slots,
                init,
                shift: max_order,
            },
            rest,
        ))
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    fn head_of(&self, i: Idx) -> Idx {
        i & !((1 << self.shift) - 1)
    }

    /// Whether every frame of the max-order block holding `i` was written.
    #[inline]
    pub fn is_init(&self, i: Idx) -> bool {
        let b = (i >> self.shift) as usize;
        self.init
            .get(b / 64)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    }

    /// Whether slot `i` is initialised (the invariant above).
    #[inline]
    fn written(&self, i: Idx) -> bool {
        i == self.head_of(i) || self.is_init(i)
    }

    /// Frame `i`'s metadata. A frame of a block never written reads as its
    /// head says: a hole, or a tail.
    #[inline]
    pub fn get(&self, i: Idx) -> Frame {
        if self.written(i) {
            // SAFETY: `written(i)` means the slot is initialised (the
            // invariant documented on the type, kept by every writer here).
            return unsafe { *self.slots[i as usize].assume_init_ref() };
        }
        let h = self.head_of(i);
        // SAFETY: block heads are always initialised (written at `carve`).
        let head = unsafe { self.slots[h as usize].assume_init_ref() };
        if head.state == State::Hole {
            Frame::with_state(State::Hole)
        } else {
            Frame::with_state(State::Tail)
        }
    }

    /// Frame `i`'s metadata without the lazy-init check, for the hot paths
    /// (free lists, split, merge) that only touch frames of split blocks.
    ///
    /// # Safety
    ///
    /// Slot `i` must be initialised: it heads a max-order block, or lies in
    /// a max-order block that was split (every block of an order below the
    /// maximum does, and so do free-list neighbours and buddies below the
    /// maximum order).
    #[inline(always)]
    pub unsafe fn get_unchecked(&self, i: Idx) -> &Frame {
        debug_assert!(self.written(i));
        // SAFETY: the caller guarantees slot `i` is initialised (indexing
        // is still bounds-checked).
        unsafe { self.slots[i as usize].assume_init_ref() }
    }

    /// Mutable [`FrameTable::get_unchecked`].
    ///
    /// # Safety
    ///
    /// As for [`FrameTable::get_unchecked`].
    #[inline(always)]
    pub unsafe fn get_unchecked_mut(&mut self, i: Idx) -> &mut Frame {
        debug_assert!(self.written(i));
        // SAFETY: the caller guarantees slot `i` is initialised (indexing
        // is still bounds-checked).
        unsafe { self.slots[i as usize].assume_init_mut() }
    }

    /// Mutable access to frame `i`, writing its whole block first if it was
    /// never written.
    #[inline]
    pub fn get_mut(&mut self, i: Idx) -> &mut Frame {
        if !self.written(i) {
            self.init_block(i);
        }
        // SAFETY: initialised: a head, or its block was just written.
        unsafe { self.slots[i as usize].assume_init_mut() }
    }

    /// Writes every frame of the max-order block holding `i` (as its head
    /// describes them) so that its frames may be read and split one by one.
    pub fn init_block(&mut self, i: Idx) {
        if self.is_init(i) {
            return;
        }
        let h = self.head_of(i);
        let fill = if self.get(h).state == State::Hole {
            State::Hole
        } else {
            State::Tail
        };
        let end = (h as usize + (1usize << self.shift)).min(self.slots.len());
        for s in &mut self.slots[h as usize + 1..end] {
            s.write(Frame::with_state(fill));
        }
        let b = (i >> self.shift) as usize;
        if let Some(w) = self.init.get_mut(b / 64) {
            *w |= 1 << (b % 64);
        }
    }
}
