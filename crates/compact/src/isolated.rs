//! The blocks a run holds isolated: migration sources and free destination
//! blocks. Fixed-capacity arrays, since the crate has no heap; the scanners
//! stop isolating when they are full.

use pageframe_buddy::{Order, Pfn};

use crate::MIGRATE_BATCH_MAX;

/// Source capacity: a batch stops at `MIGRATE_BATCH_MAX` frames, and every
/// source holds at least one.
pub(crate) const SOURCE_CAP: usize = MIGRATE_BATCH_MAX as usize;
/// The free scanner stops isolating at this many blocks...
pub(crate) const FREE_LIMIT: usize = 48;
/// ...which leaves room for the pieces of splitting one block down from the
/// largest order.
const FREE_CAP: usize = FREE_LIMIT + pageframe_buddy::ORDER_LIMIT as usize + 1;

/// An isolated migration source.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Source {
    pub pfn: Pfn,
    pub order: Order,
    /// Its tag word when isolated (without the isolation bit).
    pub tag: u32,
    /// The kernel's migrator isolated it too (and gets it back through
    /// `putback`); until then only the allocator's mark holds it.
    pub confirmed: bool,
}

pub(crate) const NO_SOURCE: Source = Source {
    pfn: Pfn(0),
    order: Order::ZERO,
    tag: 0,
    confirmed: false,
};

/// Isolated sources, in scan order.
pub(crate) struct Sources {
    items: [Source; SOURCE_CAP],
    len: usize,
}

impl Sources {
    pub const fn new() -> Self {
        Sources {
            items: [NO_SOURCE; SOURCE_CAP],
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == SOURCE_CAP
    }

    pub fn push(&mut self, s: Source) -> bool {
        if self.is_full() {
            return false;
        }
        self.items[self.len] = s;
        self.len += 1;
        true
    }

    pub fn as_slice(&self) -> &[Source] {
        &self.items[..self.len]
    }

    /// Marks source `i` as isolated by the kernel too.
    pub fn confirm(&mut self, i: usize) {
        if let Some(s) = self.items[..self.len].get_mut(i) {
            s.confirmed = true;
        }
    }

    /// Keeps the sources for which `keep` is true, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&Source) -> bool) {
        let mut w = 0;
        for r in 0..self.len {
            if keep(&self.items[r]) {
                self.items[w] = self.items[r];
                w += 1;
            }
        }
        self.len = w;
    }

    /// Drops the sources from index `from` on.
    pub fn truncate(&mut self, from: usize) {
        self.len = self.len.min(from);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// Isolated free blocks, usable as destinations (Linux keeps them per order
/// since 6.9; a short array searched by order is the same here).
pub(crate) struct FreePages {
    items: [(Pfn, Order); FREE_CAP],
    len: usize,
}

impl FreePages {
    pub const fn new() -> Self {
        FreePages {
            items: [(Pfn(0), Order::ZERO); FREE_CAP],
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the free scanner should stop isolating.
    pub fn is_full(&self) -> bool {
        self.len >= FREE_LIMIT
    }

    /// Whether `n` more entries fit.
    pub fn has_room(&self, n: usize) -> bool {
        self.len + n <= FREE_CAP
    }

    pub fn push(&mut self, pfn: Pfn, order: Order) -> bool {
        if self.len == FREE_CAP {
            return false;
        }
        self.items[self.len] = (pfn, order);
        self.len += 1;
        true
    }

    /// Removes and returns a block of the smallest order `>= order`
    /// (`compaction_alloc`).
    pub fn take(&mut self, order: Order) -> Option<(Pfn, Order)> {
        let mut best: Option<usize> = None;
        for i in (0..self.len).rev() {
            let o = self.items[i].1;
            if o >= order && best.is_none_or(|b| o < self.items[b].1) {
                best = Some(i);
                if o == order {
                    break;
                }
            }
        }
        let i = best?;
        let item = self.items[i];
        self.items[i] = self.items[self.len - 1];
        self.len -= 1;
        Some(item)
    }

    /// Removes every block.
    pub fn drain(&mut self) -> impl Iterator<Item = (Pfn, Order)> + '_ {
        let n = core::mem::take(&mut self.len);
        self.items[..n].iter().copied()
    }
}
