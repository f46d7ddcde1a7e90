//! The pageblock bitmap: per pageblock in caller memory, one byte holding
//! its migratetype, the compaction skip hint and the isolate bit (spec 02
//! §3).

use core::mem::MaybeUninit;

use pageframe_buddy::{Order, Pfn, PfnRange};

use crate::MigrateType;

const TYPE_MASK: u8 = 0b111;
/// Compaction skip hint (spec 03 §6).
const SKIP: u8 = 1 << 3;
/// Isolated; the type bits keep the underlying type (spec 02 §3; Linux 6.17+).
const ISOLATE: u8 = 1 << 4;
/// Per-pageblock flags for a span of frames.
pub struct Pageblocks<'a> {
    first: Pfn,
    order: u8,
    bits: &'a mut [u8],
}

impl<'a> Pageblocks<'a> {
    /// Bytes needed for `span` with pageblocks of `order`.
    pub const fn bytes(span: PfnRange, order: Order) -> usize {
        let lo = span.start.align_down(order).get();
        let hi = span.end.align_up(order).get();
        ((hi.saturating_sub(lo)) >> order.get()) as usize
    }

    /// A bitmap over `span`, every block typed `initial`, carved from `mem`
    /// (`None` if it is shorter than [`Pageblocks::bytes`]).
    pub fn new(
        span: PfnRange,
        order: Order,
        mem: &'a mut [MaybeUninit<u8>],
        initial: MigrateType,
    ) -> Option<Self> {
        let n = Self::bytes(span, order);
        let mem = mem.get_mut(..n)?;
        for b in mem.iter_mut() {
            b.write(initial as u8);
        }
        // SAFETY: every one of the `n` bytes was written just above, and
        // `MaybeUninit<u8>` has the layout of `u8`.
        let bits = unsafe { &mut *(mem as *mut [MaybeUninit<u8>] as *mut [u8]) };
        Some(Pageblocks {
            first: span.start.align_down(order),
            order: order.get(),
            bits,
        })
    }

    /// Pageblock order.
    pub fn order(&self) -> Order {
        Order::new(self.order).unwrap_or_default()
    }

    /// Frames per pageblock.
    pub fn pages(&self) -> u64 {
        1 << self.order
    }

    /// Number of pageblocks.
    pub fn len(&self) -> usize {
        self.bits.len()
    }

    /// Whether the bitmap covers no block.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// The frames of the pageblock holding `pfn`.
    pub fn block_range(&self, pfn: Pfn) -> PfnRange {
        let s = pfn.align_down(self.order());
        PfnRange::new(s, s + self.pages())
    }

    #[inline]
    fn index(&self, pfn: Pfn) -> Option<usize> {
        let i = (pfn.get().checked_sub(self.first.get())? >> self.order) as usize;
        (i < self.len()).then_some(i)
    }

    #[inline]
    fn flags(&self, i: usize) -> u8 {
        self.bits[i]
    }

    #[inline]
    fn flags_mut(&mut self, i: usize) -> &mut u8 {
        &mut self.bits[i]
    }

    /// The effective type of `pfn`'s block: `Isolate` if isolated.
    #[inline]
    pub fn get(&self, pfn: Pfn) -> Option<MigrateType> {
        let b = self.flags(self.index(pfn)?);
        if b & ISOLATE != 0 {
            Some(MigrateType::Isolate)
        } else {
            MigrateType::from_value(b & TYPE_MASK)
        }
    }

    /// The underlying type, ignoring isolation.
    pub fn base(&self, pfn: Pfn) -> Option<MigrateType> {
        MigrateType::from_value(self.flags(self.index(pfn)?) & TYPE_MASK)
    }

    /// Sets the type; setting a type clears isolation (spec 02 §11.8).
    /// `Isolate` is not a storable type: use [`Pageblocks::set_isolated`].
    pub fn set(&mut self, pfn: Pfn, mt: MigrateType) -> bool {
        match (self.index(pfn), mt) {
            (Some(i), t) if t != MigrateType::Isolate => {
                let f = self.flags_mut(i);
                *f = (*f & SKIP) | t as u8;
                true
            }
            _ => false,
        }
    }

    /// Whether the block is isolated.
    pub fn is_isolated(&self, pfn: Pfn) -> bool {
        self.index(pfn)
            .is_some_and(|i| self.flags(i) & ISOLATE != 0)
    }

    /// Sets or clears the isolate bit, keeping the type bits.
    pub fn set_isolated(&mut self, pfn: Pfn, on: bool) {
        if let Some(i) = self.index(pfn) {
            let f = self.flags_mut(i);
            if on { *f |= ISOLATE } else { *f &= !ISOLATE }
        }
    }

    /// The compaction skip hint.
    pub fn skip(&self, pfn: Pfn) -> bool {
        self.index(pfn).is_some_and(|i| self.flags(i) & SKIP != 0)
    }

    /// Sets or clears the compaction skip hint.
    pub fn set_skip(&mut self, pfn: Pfn, on: bool) {
        if let Some(i) = self.index(pfn) {
            let f = self.flags_mut(i);
            if on { *f |= SKIP } else { *f &= !SKIP }
        }
    }

    /// Clears every skip hint (spec 03 §6.3).
    pub fn clear_skip_all(&mut self) {
        for b in self.bits.iter_mut() {
            *b &= !SKIP;
        }
    }

    /// Pageblocks of each effective type, indexed by type value.
    pub fn count_by_type(&self) -> [u64; crate::MIGRATE_TYPES] {
        let mut n = [0u64; crate::MIGRATE_TYPES];
        for &b in self.bits.iter() {
            let t = if b & ISOLATE != 0 {
                MigrateType::Isolate as usize
            } else {
                (b & TYPE_MASK) as usize
            };
            n[t.min(crate::MIGRATE_TYPES - 1)] += 1;
        }
        n
    }

    /// First frame of block `i`.
    pub fn block_start(&self, i: usize) -> Pfn {
        self.first + ((i as u64) << self.order)
    }
}
