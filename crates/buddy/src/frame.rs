//! Per-frame metadata (16 bytes a frame) in memory the caller hands over,
//! written lazily: a free max-order block is described by its head alone.

use core::mem::{MaybeUninit, align_of, size_of};

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

/// Frame flag: set on a max-order block's head once every frame of that block
/// has been written. Without it, the head's state stands for the whole block
/// (a free max-order block, or a max-order-sized hole) and the other frames'
/// metadata is uninitialised memory that must not be read.
pub(crate) const F_SPAN_INIT: u8 = 1 << 0;

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
    /// `F_*` bits; survive state changes.
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

/// Bytes of metadata a table of `frames` frames needs, including slack for
/// aligning an arbitrary byte buffer.
pub(crate) const fn table_bytes(frames: u64) -> usize {
    (frames as usize) * size_of::<Frame>() + align_of::<Frame>() - 1
}

/// The frame metadata array. Element `i` may be uninitialised; the zone's
/// lazy-init invariant (see `F_SPAN_INIT`) says which may be read.
pub(crate) struct FrameTable<'a> {
    slots: &'a mut [MaybeUninit<Frame>],
}

impl<'a> FrameTable<'a> {
    /// Carves a table of `frames` entries out of `bytes` (aligning its start).
    /// `None` if the buffer is too small.
    pub fn carve(bytes: &'a mut [MaybeUninit<u8>], frames: usize) -> Option<FrameTable<'a>> {
        let skip = bytes.as_ptr().align_offset(align_of::<Frame>());
        let need = frames.checked_mul(size_of::<Frame>())?.checked_add(skip)?;
        if skip == usize::MAX || bytes.len() < need {
            return None;
        }
        let aligned = &mut bytes[skip..need];
        // SAFETY: `aligned` is exclusively borrowed for 'a, starts at an address
        // aligned for `Frame` (align_offset above) and holds exactly
        // `frames * size_of::<Frame>()` bytes. `MaybeUninit<Frame>` has no
        // validity requirement, so reinterpreting uninitialised bytes as
        // uninitialised frames is sound.
        let slots = unsafe {
            core::slice::from_raw_parts_mut(
                aligned.as_mut_ptr().cast::<MaybeUninit<Frame>>(),
                frames,
            )
        };
        Some(FrameTable { slots })
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Writes frame `i` (always allowed).
    #[inline]
    pub fn write(&mut self, i: Idx, f: Frame) {
        self.slots[i as usize].write(f);
    }

    /// Reads frame `i`. The caller must know `i` is initialised (it was
    /// written since the table was carved): see the zone's lazy-init rule.
    #[inline]
    pub fn get(&self, i: Idx) -> &Frame {
        let slot = &self.slots[i as usize];
        // SAFETY: every caller only passes indices that the lazy-init invariant
        // guarantees were written: heads of max-order blocks (written at init),
        // and frames of max-order blocks whose head carries F_SPAN_INIT (all
        // written by `init_span`). Miri checks this on the test suite.
        unsafe { slot.assume_init_ref() }
    }

    /// Mutable access to frame `i`; same precondition as [`FrameTable::get`].
    #[inline]
    pub fn get_mut(&mut self, i: Idx) -> &mut Frame {
        let slot = &mut self.slots[i as usize];
        // SAFETY: as in `get`: callers only pass initialised indices.
        unsafe { slot.assume_init_mut() }
    }
}
