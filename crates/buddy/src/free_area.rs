//! Free lists of the blocks of at least the chunk order (spec 01 §3.2):
//! per order, `MAX_LISTS` intrusive doubly linked lists of free head
//! chunks, linked by chunk index.

use crate::ORDER_LIMIT;
use crate::chunk::{ChunkTable, Mode, REPORTED};
use crate::frame::{Idx, NIL};
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

/// The free lists of large blocks plus counts per list. The heads (about
/// 1.5 KiB) live in the zone's metadata, not inline, so that a zone is
/// small enough to build on a small stack.
pub(crate) struct FreeAreas<'a> {
    lists: &'a mut [OrderLists; ORDERS],
    /// Bit `o` of `nonempty[l]` is set iff list `l` of order `o` holds a block.
    nonempty: &'a mut [u32; MAX_LISTS],
    /// Free frames in large blocks, per list.
    pages: &'a mut [u64; MAX_LISTS],
    /// The sum of `pages`.
    total: u64,
    /// Blocks ever pushed on any list: see [`FreeAreas::pushes`].
    pushes: u64,
}

impl<'a> FreeAreas<'a> {
    /// Bytes [`FreeAreas::carve`] needs from a buffer at any address.
    pub const fn bytes() -> usize {
        use pageframe_types::carve::bytes_for;
        match (
            bytes_for::<OrderLists>(ORDERS),
            bytes_for::<u32>(MAX_LISTS),
            bytes_for::<u64>(MAX_LISTS),
        ) {
            (Some(a), Some(b), Some(c)) => a + b + c,
            _ => usize::MAX,
        }
    }

    /// Empty lists whose heads live at the front of `mem`.
    pub fn carve(
        mem: &'a mut [core::mem::MaybeUninit<u8>],
    ) -> Option<(FreeAreas<'a>, &'a mut [core::mem::MaybeUninit<u8>])> {
        let (lists, rest) =
            pageframe_types::carve::carve_init(mem, ORDERS, |_| [ListHead::EMPTY; MAX_LISTS])?;
        let lists: &'a mut [OrderLists; ORDERS] = lists.try_into().ok()?;
        let (nonempty, rest) = pageframe_types::carve::carve_init(rest, MAX_LISTS, |_| 0u32)?;
        let (pages, rest) = pageframe_types::carve::carve_init(rest, MAX_LISTS, |_| 0u64)?;
        Some((
            FreeAreas {
                lists,
                nonempty: nonempty.try_into().ok()?,
                pages: pages.try_into().ok()?,
                total: 0,
                pushes: 0,
            },
            rest,
        ))
    }

    #[inline]
    pub fn head(&self, order: u8, list: ListId) -> &ListHead {
        &self.lists[oi(order)][li(list.index())]
    }

    /// Free frames in large blocks on `list`.
    #[inline]
    pub fn pages(&self, list: ListId) -> u64 {
        self.pages[li(list.index())]
    }

    /// Free frames in large blocks on every list.
    #[inline]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many blocks have gone onto a list so far (wrapping): while it
    /// stays the same, no list has gained a block, only lost some.
    #[inline]
    pub fn pushes(&self) -> u64 {
        self.pushes
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

    /// Makes chunk `k` a free head of `order` on `list`, linked at the head
    /// or tail, unreported.
    #[inline]
    pub fn push(
        &mut self,
        chunks: &mut ChunkTable<'_>,
        k: Idx,
        order: u8,
        list: ListId,
        at_tail: bool,
    ) {
        let lh = &mut self.lists[oi(order)][li(list.index())];
        let ch = &mut chunks[k];
        ch.mode = Mode::FreeHead;
        ch.order = order;
        ch.list = list.get();
        // A block going on a list anew has not been reported as such.
        ch.flags &= !REPORTED;
        if lh.len == 0 {
            ch.next = NIL;
            ch.prev = NIL;
            lh.head = k;
            lh.tail = k;
        } else if at_tail {
            let old = lh.tail;
            ch.prev = old;
            ch.next = NIL;
            lh.tail = k;
            chunks[old].next = k;
        } else {
            let old = lh.head;
            ch.next = old;
            ch.prev = NIL;
            lh.head = k;
            chunks[old].prev = k;
        }
        lh.len += 1;
        self.nonempty[li(list.index())] |= 1 << order;
        self.pages[li(list.index())] += 1 << order;
        self.total += 1 << order;
        self.pushes = self.pushes.wrapping_add(1);
    }

    /// Unlinks the free head chunk `k` from the list it names.
    #[inline]
    pub fn remove(&mut self, chunks: &mut ChunkTable<'_>, k: Idx) {
        // The four fields it needs, not a copy of the whole record.
        let ch = &chunks[k];
        let (order, list, prev, next) = (ch.order, li(ch.list as usize), ch.prev, ch.next);
        let lh = &mut self.lists[oi(order)][list];
        if prev == NIL {
            lh.head = next;
        } else {
            chunks[prev].next = next;
        }
        if next == NIL {
            lh.tail = prev;
        } else {
            chunks[next].prev = prev;
        }
        lh.len -= 1;
        if lh.len == 0 {
            self.nonempty[list] &= !(1 << order);
        }
        self.pages[list] -= 1 << order;
        self.total -= 1 << order;
    }

    /// Unlinks and returns the first block of `list` at `order`.
    #[inline]
    pub fn pop(&mut self, chunks: &mut ChunkTable<'_>, order: u8, list: ListId) -> Option<Idx> {
        let k = self.lists[oi(order)][li(list.index())].head;
        if k == NIL {
            return None;
        }
        self.remove(chunks, k);
        Some(k)
    }
}
