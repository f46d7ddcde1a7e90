//! The pageblock bitmap: per pageblock in caller memory, one byte holding
//! its migratetype, the compaction skip hint and the isolate bit (spec 02
//! §3), and a 16-bit count of allocated frames for the placement policy.

use core::mem::MaybeUninit;

use pageframe_buddy::{Order, Pfn, PfnRange};

use crate::MigrateType;

const TYPE_MASK: u8 = 0b111;
/// Compaction skip hint (spec 03 §6).
const SKIP: u8 = 1 << 3;
/// Isolated; the type bits keep the underlying type (spec 02 §3; Linux 6.17+).
const ISOLATE: u8 = 1 << 4;
/// Bytes per pageblock: flags, the allocated-frame count (LE u16), then a
/// bitmap of allocated frames (one bit a frame), kept by the placement
/// policy (zero when it is off).
const fn stride(order: u8) -> usize {
    let map = (1usize << order) / 8;
    3 + if map == 0 { 1 } else { map }
}

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
        ((hi.saturating_sub(lo)) >> order.get()) as usize * stride(order.get())
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
        for (i, b) in mem.iter_mut().enumerate() {
            b.write(if i % stride(order.get()) == 0 {
                initial as u8
            } else {
                0
            });
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
        self.bits.len() / stride(self.order)
    }

    /// Whether the bitmap covers no block.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// Allocated frames in `pfn`'s block, as counted by the placement
    /// policy (0 when it is off).
    pub fn used(&self, pfn: Pfn) -> u16 {
        self.index(pfn).map_or(0, |i| {
            let at = i * stride(self.order) + 1;
            u16::from_le_bytes([self.bits[at], self.bits[at + 1]])
        })
    }

    /// Adds `delta` (may be negative) to the allocated-frame count of `pfn`'s block.
    #[inline]
    pub(crate) fn add_used(&mut self, pfn: Pfn, delta: i32) {
        if let Some(i) = self.index(pfn) {
            let at = i * stride(self.order) + 1;
            let v = u16::from_le_bytes([self.bits[at], self.bits[at + 1]]) as i32 + delta;
            let [lo, hi] = (v.clamp(0, u16::MAX as i32) as u16).to_le_bytes();
            self.bits[at] = lo;
            self.bits[at + 1] = hi;
        }
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
        self.bits[i * stride(self.order)]
    }

    #[inline]
    fn flags_mut(&mut self, i: usize) -> &mut u8 {
        &mut self.bits[i * stride(self.order)]
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

    /// The allocated-frame bitmap of block `i`.
    #[inline]
    fn map(&self, i: usize) -> &[u8] {
        let at = i * stride(self.order) + 3;
        &self.bits[at..at + stride(self.order) - 3]
    }

    #[inline]
    fn map_mut(&mut self, i: usize) -> &mut [u8] {
        let at = i * stride(self.order) + 3;
        let end = at + stride(self.order) - 3;
        &mut self.bits[at..end]
    }

    /// Marks the `2^order` frames at `pfn` allocated (`on`) or not, within
    /// `pfn`'s pageblock (the caller splits larger blocks per pageblock).
    #[inline]
    pub(crate) fn mark(&mut self, pfn: Pfn, order: Order, on: bool) {
        let Some(i) = self.index(pfn) else { return };
        let off = (pfn.get() & (self.pages() - 1)) as usize;
        let n = (order.pages() as usize).min(self.pages() as usize - off);
        let map = self.map_mut(i);
        if n < 8 {
            let mask = (((1u16 << n) - 1) << (off % 8)) as u8;
            let b = &mut map[off / 8];
            if on { *b |= mask } else { *b &= !mask }
        } else {
            map[off / 8..(off + n) / 8].fill(if on { 0xff } else { 0 });
        }
    }

    /// The first frame at or after `from` in `from`'s pageblock whose
    /// aligned group of `2^order` frames (order <= 3) is not marked
    /// allocated. The frames may still be holes: the caller checks.
    #[inline]
    pub(crate) fn find_unmarked(&self, from: Pfn, order: Order) -> Option<Pfn> {
        let i = self.index(from)?;
        let start = self.block_start(i);
        let n = order.pages() as usize;
        if n > 8 {
            return None;
        }
        let group = ((1u16 << n) - 1) as u8;
        let map = self.map(i);
        let mut off = ((from.get() - start.get()) as usize).next_multiple_of(n);
        while off < self.pages() as usize {
            let byte = map[off / 8];
            if byte == 0xff {
                off = (off / 8 + 1) * 8;
                continue;
            }
            if byte & (group << (off % 8)) == 0 {
                return Some(start + off as u64);
            }
            off += n;
        }
        None
    }

    /// Frames marked allocated in block `i`, and whether `pfn` is marked.
    pub(crate) fn marked(&self, i: usize, pfn: Pfn) -> (u32, bool) {
        let map = self.map(i);
        let off = (pfn.get().wrapping_sub(self.block_start(i).get()) as usize)
            .min(self.pages() as usize - 1);
        (
            map.iter().map(|b| b.count_ones()).sum(),
            map[off / 8] & (1 << (off % 8)) != 0,
        )
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
        for b in self.bits.iter_mut().step_by(stride(self.order)) {
            *b &= !SKIP;
        }
    }

    /// Pageblocks of each effective type, indexed by type value.
    pub fn count_by_type(&self) -> [u64; crate::MIGRATE_TYPES] {
        let mut n = [0u64; crate::MIGRATE_TYPES];
        for &b in self.bits.iter().step_by(stride(self.order)) {
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
