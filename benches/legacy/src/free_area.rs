//! Free lists: per order, `MAX_LISTS` intrusive doubly linked lists of block
//! heads (spec 01 §3.2), linked by frame index so links are 4 bytes.

use crate::ORDER_LIMIT;
use crate::frame::{FrameTable, Idx, NIL};
use crate::policy::{ListId, MAX_LISTS};

const ORDERS: usize = ORDER_LIMIT as usize + 1;
// Both dimensions are powers of two: `& (N - 1)` proves indices in range.
const _: () = assert!(ORDERS.is_power_of_two() && MAX_LISTS.is_power_of_two());

#[inline]
fn oi(order: u8) -> usize {
    order as usize & (ORDERS - 1)
}

#[inline]
fn li(list: usize) -> usize {
    list & (MAX_LISTS - 1)
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct ListHead {
    pub head: Idx,
    pub tail: Idx,
    pub len: u32,
}

impl ListHead {
    const EMPTY: ListHead = ListHead {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// The list heads of one order.
pub(crate) type OrderLists = [ListHead; MAX_LISTS];

/// All free lists of a zone plus the counts derived per list. The heads
/// (about 1.5 KiB) live in the zone's metadata, not inline, so that a zone
/// is small enough to build on a small stack.
pub(crate) struct FreeAreas<'a> {
    lists: &'a mut [OrderLists; ORDERS],
    /// Bit `o` of `nonempty[l]` is set iff list `l` of order `o` holds a block:
    /// finds the smallest sufficient order with one bit scan.
    nonempty: [u32; MAX_LISTS],
    /// Free frames per list.
    pages: [u64; MAX_LISTS],
}

impl<'a> FreeAreas<'a> {
    /// Bytes [`FreeAreas::carve`] needs from a buffer at any address.
    pub const fn bytes() -> usize {
        match pageframe_types::carve::bytes_for::<OrderLists>(ORDERS) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// Empty lists whose heads live at the front of `mem`; returns them and
    /// the rest of `mem`.
    pub fn carve(
        mem: &'a mut [core::mem::MaybeUninit<u8>],
    ) -> Option<(FreeAreas<'a>, &'a mut [core::mem::MaybeUninit<u8>])> {
        let (lists, rest) =
            pageframe_types::carve::carve_init(mem, ORDERS, |_| [ListHead::EMPTY; MAX_LISTS])?;
        let lists: &'a mut [OrderLists; ORDERS] = lists.try_into().ok()?;
        Some((
            FreeAreas {
                lists,
                nonempty: [0; MAX_LISTS],
                pages: [0; MAX_LISTS],
            },
            rest,
        ))
    }

    #[inline]
    pub fn head(&self, order: u8, list: ListId) -> &ListHead {
        &self.lists[oi(order)][li(list.index())]
    }

    /// Free frames on `list` across orders.
    #[inline]
    pub fn pages(&self, list: ListId) -> u64 {
        self.pages[li(list.index())]
    }

    #[inline]
    pub fn nonempty_mask(&self, list: ListId) -> u32 {
        self.nonempty[li(list.index())]
    }

    /// Smallest order `>= order` whose `list` is non-empty, up to `max`.
    #[inline]
    pub fn first_nonempty(&self, list: ListId, order: u8, max: u8) -> Option<u8> {
        let mask = self.nonempty[li(list.index())] >> order;
        if mask == 0 {
            return None;
        }
        let o = order + mask.trailing_zeros() as u8;
        (o <= max).then_some(o)
    }

    /// Links the free head `i` (state already set, order/list fields set by
    /// the caller) at the head or tail of its list.
    #[inline]
    pub fn push(
        &mut self,
        frames: &mut FrameTable<'_>,
        i: Idx,
        order: u8,
        list: ListId,
        at_tail: bool,
    ) {
        let lh = &mut self.lists[oi(order)][li(list.index())];
        // SAFETY: `i` is a free head, and free heads are initialised: a
        // max-order head always is, and a block of a lower order lies in a
        // split max-order block (the neighbours below likewise).
        let f = unsafe { frames.get_unchecked_mut(i) };
        f.order = order;
        f.list = list.get();
        // A block going on a list anew has not been reported as such (the
        // flags are free-block flags: a plain store, which merges with the
        // stores beside it).
        f.flags = 0;
        if lh.len == 0 {
            f.next = NIL;
            f.prev = NIL;
            lh.head = i;
            lh.tail = i;
        } else if at_tail {
            let old = lh.tail;
            f.prev = old;
            f.next = NIL;
            lh.tail = i;
            // SAFETY: `old` is on the list: a free head (see above).
            unsafe { frames.get_unchecked_mut(old) }.next = i;
        } else {
            let old = lh.head;
            f.next = old;
            f.prev = NIL;
            lh.head = i;
            // SAFETY: `old` is on the list: a free head (see above).
            unsafe { frames.get_unchecked_mut(old) }.prev = i;
        }
        lh.len += 1;
        self.nonempty[li(list.index())] |= 1 << order;
        self.pages[li(list.index())] += 1 << order;
    }

    /// Unlinks the free head `i` from the list its frame names.
    #[inline]
    pub fn remove(&mut self, frames: &mut FrameTable<'_>, i: Idx) {
        let f = frames.get(i);
        self.remove_loaded(frames, &f);
    }

    /// [`FreeAreas::remove`] for a caller that already holds `i`'s metadata.
    #[inline]
    pub fn remove_loaded(&mut self, frames: &mut FrameTable<'_>, f: &crate::frame::Frame) {
        let (order, list) = (f.order, li(f.list as usize));
        let lh = &mut self.lists[oi(order)][list];
        if f.prev == NIL {
            lh.head = f.next;
        } else {
            // SAFETY: list members are free heads, which are initialised
            // (see `push`).
            unsafe { frames.get_unchecked_mut(f.prev) }.next = f.next;
        }
        if f.next == NIL {
            lh.tail = f.prev;
        } else {
            // SAFETY: as above.
            unsafe { frames.get_unchecked_mut(f.next) }.prev = f.prev;
        }
        lh.len -= 1;
        if lh.len == 0 {
            self.nonempty[list] &= !(1 << order);
        }
        self.pages[list] -= 1 << order;
    }

    /// Unlinks and returns the first block of `list` at `order`.
    #[inline]
    pub fn pop(&mut self, frames: &mut FrameTable<'_>, order: u8, list: ListId) -> Option<Idx> {
        let i = self.lists[oi(order)][li(list.index())].head;
        if i == NIL {
            return None;
        }
        self.remove(frames, i);
        Some(i)
    }
}
