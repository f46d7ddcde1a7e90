//! Frame numbers and physical addresses: the units the allocator speaks.

use core::fmt;
use core::ops::{Add, Sub};

use crate::Order;

/// log2 of the page size: frames are 4 KiB.
pub const PAGE_SHIFT: u32 = 12;
/// Size of one page frame in bytes.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// One past the highest frame number a 64-bit physical address can name
/// (`2^64 / PAGE_SIZE`). Zones refuse spans that reach beyond it.
pub const MAX_PFN: u64 = 1 << (64 - PAGE_SHIFT);

/// A physical frame number: the physical address divided by [`PAGE_SIZE`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Pfn(pub u64);

impl Pfn {
    /// The frame with number `n`.
    #[inline]
    pub const fn new(n: u64) -> Self {
        Pfn(n)
    }

    /// The raw frame number.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The physical address of the first byte of this frame (saturating:
    /// a number at or above [`MAX_PFN`] names no frame and gives
    /// `u64::MAX`).
    #[inline]
    pub const fn addr(self) -> PhysAddr {
        if self.0 >= MAX_PFN {
            PhysAddr(u64::MAX)
        } else {
            PhysAddr(self.0 << PAGE_SHIFT)
        }
    }

    /// The frame `n` frames after this one, if the number fits in a `u64`.
    #[inline]
    pub const fn checked_add(self, n: u64) -> Option<Pfn> {
        match self.0.checked_add(n) {
            Some(v) => Some(Pfn(v)),
            None => None,
        }
    }

    /// Whether this frame can head a block of `order` (natural alignment).
    #[inline]
    pub const fn is_aligned(self, order: Order) -> bool {
        self.0 & (order.pages() - 1) == 0
    }

    /// This frame number rounded down to a multiple of `2^order`.
    #[inline]
    pub const fn align_down(self, order: Order) -> Pfn {
        Pfn(self.0 & !(order.pages() - 1))
    }

    /// This frame number rounded up to a multiple of `2^order` (saturating).
    #[inline]
    pub const fn align_up(self, order: Order) -> Pfn {
        let mask = order.pages() - 1;
        match self.0.checked_add(mask) {
            Some(v) => Pfn(v & !mask),
            None => Pfn(!mask),
        }
    }
}

impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pfn({:#x})", self.0)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// `pfn + n`, saturating at `u64::MAX` (use [`Pfn::checked_add`] to
/// detect overflow).
impl Add<u64> for Pfn {
    type Output = Pfn;
    #[inline]
    fn add(self, rhs: u64) -> Pfn {
        Pfn(self.0.saturating_add(rhs))
    }
}

/// The distance `a - b` in frames, saturating at 0 when `b > a`.
impl Sub<Pfn> for Pfn {
    type Output = u64;
    #[inline]
    fn sub(self, rhs: Pfn) -> u64 {
        self.0.saturating_sub(rhs.0)
    }
}

/// A physical address. Used only at the edges (memory maps, page tables);
/// the allocator itself works in [`Pfn`]s.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct PhysAddr(pub u64);

impl PhysAddr {
    /// The address `a`.
    #[inline]
    pub const fn new(a: u64) -> Self {
        PhysAddr(a)
    }

    /// The raw address.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The frame containing this address.
    #[inline]
    pub const fn pfn_down(self) -> Pfn {
        Pfn(self.0 >> PAGE_SHIFT)
    }

    /// The first frame that starts at or after this address.
    #[inline]
    pub const fn pfn_up(self) -> Pfn {
        Pfn(self.0.div_ceil(PAGE_SIZE))
    }
}

impl fmt::Debug for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PhysAddr({:#x})", self.0)
    }
}

/// A half-open range of frames `[start, end)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PfnRange {
    /// First frame in the range.
    pub start: Pfn,
    /// One past the last frame.
    pub end: Pfn,
}

impl PfnRange {
    /// The frames `[start, end)`; an `end` below `start` gives an empty range.
    #[inline]
    pub const fn new(start: Pfn, end: Pfn) -> Self {
        PfnRange { start, end }
    }

    /// The whole frames inside the byte range `[start, end)`: partial frames at
    /// either edge are left out (firmware maps are not page aligned).
    #[inline]
    pub const fn from_addrs(start: PhysAddr, end: PhysAddr) -> Self {
        PfnRange {
            start: start.pfn_up(),
            end: end.pfn_down(),
        }
    }

    /// Number of frames (0 for an empty or inverted range).
    #[inline]
    pub const fn len(&self) -> u64 {
        self.end.0.saturating_sub(self.start.0)
    }

    /// Whether the range holds no frame.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.end.0 <= self.start.0
    }

    /// Whether `pfn` lies in the range.
    #[inline]
    pub const fn contains(&self, pfn: Pfn) -> bool {
        pfn.0 >= self.start.0 && pfn.0 < self.end.0
    }

    /// Whether `other` lies entirely inside this range.
    #[inline]
    pub const fn contains_range(&self, other: &PfnRange) -> bool {
        other.is_empty() || (other.start.0 >= self.start.0 && other.end.0 <= self.end.0)
    }

    /// The frames both ranges share.
    #[inline]
    pub fn intersect(&self, other: &PfnRange) -> PfnRange {
        PfnRange {
            start: Pfn(self.start.0.max(other.start.0)),
            end: Pfn(self.end.0.min(other.end.0)),
        }
    }

    /// Splits the range into naturally aligned blocks of at most `max` order,
    /// largest first from the left: the decomposition `reserve_range` and
    /// `release_range` agree on.
    pub fn blocks(&self, max: Order) -> AlignedBlocks {
        AlignedBlocks {
            next: self.start.0,
            end: self.end.0,
            max,
        }
    }
}

impl fmt::Debug for PfnRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:#x}, {:#x})", self.start.0, self.end.0)
    }
}

/// Iterator over the aligned blocks that tile a range; see [`PfnRange::blocks`].
#[derive(Clone, Debug)]
pub struct AlignedBlocks {
    next: u64,
    end: u64,
    max: Order,
}

impl Iterator for AlignedBlocks {
    type Item = (Pfn, Order);

    fn next(&mut self) -> Option<(Pfn, Order)> {
        if self.next >= self.end {
            return None;
        }
        let align = if self.next == 0 {
            63
        } else {
            self.next.trailing_zeros()
        };
        let fit = 63 - (self.end - self.next).leading_zeros();
        let o = align.min(fit).min(self.max.get() as u32) as u8;
        let pfn = Pfn(self.next);
        // `next + 2^o <= end` by the choice of `o`: no overflow.
        self.next += 1 << o;
        Some((pfn, Order::new_truncated(o)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_near_the_top_never_panics() {
        let top = Pfn(u64::MAX);
        assert_eq!(top + 5, Pfn(u64::MAX), "saturating add");
        assert_eq!(top.checked_add(1), None);
        assert_eq!(Pfn(3) - Pfn(10), 0, "saturating distance");
        assert_eq!(top.addr(), PhysAddr(u64::MAX), "no frame above MAX_PFN");
        assert_eq!(
            Pfn(MAX_PFN - 1).addr(),
            PhysAddr(u64::MAX - (PAGE_SIZE - 1))
        );
        assert_eq!(top.align_up(Order::DEFAULT_MAX), Pfn(!1023));
        assert_eq!(PhysAddr(u64::MAX).pfn_up(), Pfn(MAX_PFN));
        let r = PfnRange::new(Pfn(u64::MAX - 2000), top);
        assert_eq!(r.len(), 2000);
        let total: u64 = r.blocks(Order::DEFAULT_MAX).map(|(_, o)| o.pages()).sum();
        assert_eq!(total, 2000, "the blocks tile the range exactly");
        assert!(PfnRange::new(top, Pfn(0)).is_empty());
        assert_eq!(PfnRange::new(top, Pfn(0)).blocks(Order::ZERO).count(), 0);
    }

    #[test]
    fn blocks_are_aligned_and_maximal() {
        for (s, e) in [(0u64, 4096u64), (1, 1025), (511, 2049), (7, 8)] {
            let mut next = s;
            for (p, o) in PfnRange::new(Pfn(s), Pfn(e)).blocks(Order::DEFAULT_MAX) {
                assert_eq!(p.get(), next);
                assert!(p.is_aligned(o));
                next += o.pages();
            }
            assert_eq!(next, e);
        }
    }
}
