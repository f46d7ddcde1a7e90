//! The per-CPU lists (spec 04 §2.2) in caller-provided slot memory.
//!
//! Storage choice: every cached block occupies one [`Slot`] of a slice the
//! caller hands over (no heap). Each of the 14 lists is a
//! doubly linked list of slot indices, so all four moves the algorithm needs
//! are O(1): allocation pops the head (hottest), frees push the head, refill
//! appends at the tail (ascending physical order of a split block, §4.1) and
//! spill pops the tail (coldest, §5.5). Unused slots form a stack. Keeping
//! the links out of the per-frame metadata means the crate needs nothing
//! from the buddy allocator, and a remote CPU never writes a frame's links.
//! Cost: 16 bytes per cached block, i.e. 0.4% of the memory being cached.

use crate::types::{ListIndex, NR_PCP_LISTS, Pfn};

const NIL: u32 = u32::MAX;

/// One list cell: a cached block's frame number and its neighbours.
#[derive(Clone, Copy, Debug)]
pub struct Slot {
    frame: u64,
    next: u32,
    prev: u32,
}

impl Slot {
    /// An unused slot, for initialising caller memory
    /// (`[Slot::EMPTY; N]` or `vec![Slot::EMPTY; n]`).
    pub const EMPTY: Slot = Slot {
        frame: 0,
        next: NIL,
        prev: NIL,
    };
}

#[derive(Clone, Copy, Debug)]
struct Head {
    first: u32,
    last: u32,
    len: u32,
}

const EMPTY_HEAD: Head = Head {
    first: NIL,
    last: NIL,
    len: 0,
};

/// Fourteen deques of frames sharing one slot arena.
#[derive(Debug)]
pub(crate) struct Lists<'m> {
    slots: &'m mut [Slot],
    free: u32,
    heads: [Head; NR_PCP_LISTS],
}

impl<'m> Lists<'m> {
    /// Takes over `slots` (its previous contents are ignored). The caller
    /// checked `1 <= slots.len() < u32::MAX`.
    pub(crate) fn new(slots: &'m mut [Slot]) -> Lists<'m> {
        let n = slots.len() as u32;
        for (i, s) in slots.iter_mut().enumerate() {
            let i = i as u32;
            *s = Slot {
                frame: 0,
                next: if i + 1 < n { i + 1 } else { NIL },
                prev: NIL,
            };
        }
        Lists {
            slots,
            free: 0,
            heads: [EMPTY_HEAD; NR_PCP_LISTS],
        }
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Whether every slot holds a block.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.free == NIL
    }

    /// Unused slots (walks the free stack: for checks, not the fast path).
    #[cfg(test)]
    pub(crate) fn free_slots(&self) -> usize {
        let mut n = 0;
        let mut s = self.free;
        while s != NIL && n <= self.slots.len() {
            n += 1;
            s = self.slots[s as usize].next;
        }
        n
    }

    #[inline]
    pub(crate) fn len(&self, li: ListIndex) -> u32 {
        self.heads[li.get()].len
    }

    #[inline]
    pub(crate) fn is_empty(&self, li: ListIndex) -> bool {
        self.heads[li.get()].first == NIL
    }

    #[inline]
    fn take_slot(&mut self, frame: Pfn) -> Option<u32> {
        let s = self.free;
        if s == NIL {
            return None;
        }
        let slot = &mut self.slots[s as usize];
        self.free = slot.next;
        slot.frame = frame.0;
        Some(s)
    }

    #[inline]
    fn put_slot(&mut self, s: u32) -> Pfn {
        let slot = &mut self.slots[s as usize];
        let f = Pfn(slot.frame);
        slot.next = self.free;
        slot.prev = NIL;
        self.free = s;
        f
    }

    /// Pushes at the head (a freed, cache-hot block). Gives the frame back
    /// when no slot is left.
    #[inline]
    pub(crate) fn push_head(&mut self, li: ListIndex, frame: Pfn) -> Result<(), Pfn> {
        let Some(s) = self.take_slot(frame) else {
            return Err(frame);
        };
        let h = &mut self.heads[li.get()];
        let old = h.first;
        h.first = s;
        h.len += 1;
        if old == NIL {
            h.last = s;
        } else {
            self.slots[old as usize].prev = s;
        }
        let slot = &mut self.slots[s as usize];
        slot.next = old;
        slot.prev = NIL;
        Ok(())
    }

    /// Appends at the tail (refill order, spec 04 §4.1).
    #[inline]
    pub(crate) fn push_tail(&mut self, li: ListIndex, frame: Pfn) -> Result<(), Pfn> {
        let Some(s) = self.take_slot(frame) else {
            return Err(frame);
        };
        let h = &mut self.heads[li.get()];
        let old = h.last;
        h.last = s;
        h.len += 1;
        if old == NIL {
            h.first = s;
        } else {
            self.slots[old as usize].next = s;
        }
        let slot = &mut self.slots[s as usize];
        slot.prev = old;
        slot.next = NIL;
        Ok(())
    }

    /// Removes the head (the block handed to an allocation).
    #[inline]
    pub(crate) fn pop_head(&mut self, li: ListIndex) -> Option<Pfn> {
        let h = &mut self.heads[li.get()];
        let s = h.first;
        if s == NIL {
            return None;
        }
        let next = self.slots[s as usize].next;
        h.first = next;
        h.len -= 1;
        if next == NIL {
            h.last = NIL;
        } else {
            self.slots[next as usize].prev = NIL;
        }
        Some(self.put_slot(s))
    }

    /// Pops up to `out.len()` blocks from the head into `out` (the same
    /// order as repeated [`pop_head`](Self::pop_head)); returns how many.
    /// The popped cells already form a chain, so they go back to the free
    /// stack with one splice.
    pub(crate) fn pop_head_into(&mut self, li: ListIndex, out: &mut [Pfn]) -> usize {
        let h = self.heads[li.get()];
        let k = (h.len as usize).min(out.len());
        if k == 0 {
            return 0;
        }
        let first = h.first;
        let mut s = first;
        let mut last = first;
        for o in out[..k].iter_mut() {
            let slot = &self.slots[s as usize];
            *o = Pfn(slot.frame);
            last = s;
            s = slot.next;
        }
        // `s` is the new head (or NIL).
        let head = &mut self.heads[li.get()];
        head.first = s;
        head.len -= k as u32;
        if s == NIL {
            head.last = NIL;
        } else {
            self.slots[s as usize].prev = NIL;
        }
        self.slots[last as usize].next = self.free;
        self.free = first;
        k
    }

    /// Pushes `frames` at the head one after the other (the last ends up
    /// first, as with repeated [`push_head`](Self::push_head)) while free
    /// cells last; returns how many were pushed.
    pub(crate) fn push_head_from(&mut self, li: ListIndex, frames: &[Pfn]) -> usize {
        let old = self.heads[li.get()].first;
        let mut below = old; // the cell the next pushed block points to
        let mut first_pushed = NIL;
        let mut n = 0usize;
        for &f in frames {
            let s = self.free;
            if s == NIL {
                break;
            }
            if first_pushed == NIL {
                first_pushed = s;
            }
            let slot = &mut self.slots[s as usize];
            self.free = slot.next;
            slot.frame = f.0;
            slot.next = below;
            slot.prev = NIL;
            if below != NIL {
                self.slots[below as usize].prev = s;
            }
            below = s;
            n += 1;
        }
        if n > 0 {
            let h = &mut self.heads[li.get()];
            if old == NIL {
                // Into an empty list the first block pushed is the tail.
                h.last = first_pushed;
            }
            h.first = below;
            h.len += n as u32;
        }
        n
    }

    /// Removes the tail (the coldest block, spilled first, spec 04 §5.5).
    #[inline]
    pub(crate) fn pop_tail(&mut self, li: ListIndex) -> Option<Pfn> {
        let h = &mut self.heads[li.get()];
        let s = h.last;
        if s == NIL {
            return None;
        }
        let prev = self.slots[s as usize].prev;
        h.last = prev;
        h.len -= 1;
        if prev == NIL {
            h.first = NIL;
        } else {
            self.slots[prev as usize].next = NIL;
        }
        Some(self.put_slot(s))
    }

    /// Visits the frames of one list from head to tail.
    pub(crate) fn for_each(&self, li: ListIndex, mut f: impl FnMut(Pfn)) {
        let mut s = self.heads[li.get()].first;
        let mut guard = self.slots.len() + 1;
        while s != NIL && guard > 0 {
            f(Pfn(self.slots[s as usize].frame));
            s = self.slots[s as usize].next;
            guard -= 1;
        }
    }

    /// Checks the links: every list is a well-formed chain of `len` slots
    /// whose back links mirror the forward ones, and list slots plus free
    /// slots account for the whole arena exactly once.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let n = self.slots.len();
        let mut total = 0usize;
        for h in &self.heads {
            let mut s = h.first;
            let mut prev = NIL;
            let mut len = 0u32;
            while s != NIL {
                if s as usize >= n || len as usize > n {
                    return Err("list link out of range or cyclic");
                }
                if self.slots[s as usize].prev != prev {
                    return Err("back link mismatch");
                }
                prev = s;
                s = self.slots[s as usize].next;
                len += 1;
            }
            if prev != h.last {
                return Err("tail pointer mismatch");
            }
            if len != h.len {
                return Err("list length mismatch");
            }
            total += len as usize;
        }
        let mut s = self.free;
        let mut free = 0usize;
        while s != NIL {
            if s as usize >= n || free > n {
                return Err("free-slot link out of range or cyclic");
            }
            free += 1;
            s = self.slots[s as usize].next;
        }
        if total + free != n {
            return Err("slot accounting mismatch");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn li(i: usize) -> ListIndex {
        ListIndex::new(i).unwrap()
    }

    #[test]
    fn deque_order_and_capacity() {
        let mut mem = [Slot::EMPTY; 4];
        let mut l = Lists::new(&mut mem);
        l.push_tail(li(0), Pfn(1)).unwrap();
        l.push_tail(li(0), Pfn(2)).unwrap();
        l.push_head(li(0), Pfn(0)).unwrap();
        l.push_head(li(5), Pfn(9)).unwrap();
        assert_eq!(l.push_head(li(5), Pfn(10)), Err(Pfn(10)));
        l.check().unwrap();
        assert_eq!(l.len(li(0)), 3);
        assert_eq!(l.pop_tail(li(0)), Some(Pfn(2)));
        assert_eq!(l.pop_head(li(0)), Some(Pfn(0)));
        assert_eq!(l.pop_head(li(0)), Some(Pfn(1)));
        assert_eq!(l.pop_head(li(0)), None);
        assert_eq!(l.pop_tail(li(0)), None);
        assert!(l.is_empty(li(0)));
        assert_eq!(l.free_slots(), 3);
        l.check().unwrap();
        assert_eq!(l.pop_tail(li(5)), Some(Pfn(9)));
        assert_eq!(l.free_slots(), 4);
        l.check().unwrap();
    }

    #[test]
    fn bulk_moves_match_single_moves() {
        let mut mem = [Slot::EMPTY; 6];
        let mut l = Lists::new(&mut mem);
        l.push_head(li(2), Pfn(100)).unwrap();
        let pushed = l.push_head_from(li(2), &[Pfn(1), Pfn(2), Pfn(3), Pfn(4), Pfn(5), Pfn(6)]);
        assert_eq!(pushed, 5, "stops when the cells run out");
        l.check().unwrap();
        let mut out = [Pfn(0); 4];
        assert_eq!(l.pop_head_into(li(2), &mut out), 4);
        assert_eq!(out, [Pfn(5), Pfn(4), Pfn(3), Pfn(2)]);
        l.check().unwrap();
        assert_eq!(l.pop_tail(li(2)), Some(Pfn(100)));
        assert_eq!(l.pop_head_into(li(2), &mut out), 1);
        assert_eq!(out[0], Pfn(1));
        assert_eq!(l.pop_head_into(li(2), &mut out), 0);
        // Into an empty list: the first pushed block is the tail.
        assert_eq!(l.push_head_from(li(3), &[Pfn(7), Pfn(8)]), 2);
        assert_eq!(l.pop_tail(li(3)), Some(Pfn(7)));
        l.check().unwrap();
    }
}
