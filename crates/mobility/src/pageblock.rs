//! The pageblock bitmap: per pageblock in caller memory, one byte holding
//! its migratetype, the compaction skip hint and the isolate bit (spec 02
//! §3); and per region (a block of the zone's maximum order, 4 MiB by
//! default), one bit saying it is mixed (see [`Pageblocks::mixed_regions`]);
//! and per superpageblock (1 GiB by default) the count of its pageblocks
//! that taint it ([`Superpageblocks`]).

use core::mem::MaybeUninit;

use pageframe_buddy::{Order, Pfn, PfnRange};
use pageframe_types::carve;

use crate::MigrateType;
use crate::superpageblock::{Superpageblocks, taints};

const TYPE_MASK: u8 = 0b111;
/// Compaction skip hint (spec 03 §6).
const SKIP: u8 = 1 << 3;
/// Isolated; the type bits keep the underlying type (spec 02 §3; Linux 6.17+).
const ISOLATE: u8 = 1 << 4;
/// Per-pageblock flags for a span of frames.
pub struct Pageblocks<'a> {
    first: Pfn,
    order: u8,
    /// Order of a region (the zone's maximum order).
    region: u8,
    bits: &'a mut [u8],
    /// Bit `r`: region `r` is mixed.
    mixed: &'a mut [u64],
    /// The superpageblocks and their taint counts.
    spb: Superpageblocks<'a>,
}

impl<'a> Pageblocks<'a> {
    const fn blocks(span: PfnRange, order: Order) -> usize {
        let lo = span.start.align_down(order).get();
        let hi = span.end.align_up(order).get();
        ((hi.saturating_sub(lo)) >> order.get()) as usize
    }

    /// Words of the mixed-region bitmap: one bit for each region (a block
    /// of order `region`, aligned as the buddy aligns it) that meets `span`.
    const fn mixed_words(span: PfnRange, region: Order) -> usize {
        let lo = span.start.get() >> region.get();
        let hi = span.end.align_up(region).get() >> region.get();
        (hi.saturating_sub(lo) as usize).div_ceil(64)
    }

    /// Bytes needed for `span` with pageblocks of `order`, regions of
    /// `region` (the zone's maximum order, at least `order`) and
    /// superpageblocks of `2^spb_shift` frames, from a buffer at any
    /// address.
    pub const fn bytes(span: PfnRange, order: Order, region: Order, spb_shift: u8) -> usize {
        match carve::bytes_for::<u64>(Self::mixed_words(span, region)) {
            Some(m) => Self::blocks(span, order)
                .saturating_add(m)
                .saturating_add(Superpageblocks::bytes(span, spb_shift)),
            None => usize::MAX,
        }
    }

    /// A bitmap over `span`, every block typed `initial` (so no region is
    /// mixed), carved from `mem` (`None` if it is shorter than
    /// [`Pageblocks::bytes`], or the orders do not nest: pageblocks inside
    /// regions inside superpageblocks).
    pub fn new(
        span: PfnRange,
        order: Order,
        region: Order,
        spb_shift: u8,
        mem: &'a mut [MaybeUninit<u8>],
        initial: MigrateType,
    ) -> Option<Self> {
        let n = Self::blocks(span, order);
        if mem.len() < n || region < order || spb_shift < region.get() {
            return None;
        }
        let first = span.start.align_down(order);
        let (bits, rest) = carve::carve_init(mem, n, |_| initial as u8)?;
        let (mixed, rest) = carve::carve_init(rest, Self::mixed_words(span, region), |_| 0u64)?;
        // Every pageblock of the table inside a region taints it when the
        // initial type does.
        let end = first.get() + ((n as u64) << order.get());
        let (spb, _) = Superpageblocks::carve(span, spb_shift, rest, |r| {
            let lo = r.start.get().max(first.get());
            let hi = r.end.get().min(end);
            if taints(initial) && hi > lo {
                ((hi - lo) >> order.get()) as u32
            } else {
                0
            }
        })?;
        Some(Pageblocks {
            first,
            order: order.get(),
            region: region.get(),
            bits,
            mixed,
            spb,
        })
    }

    /// The superpageblocks and how many pageblocks taint each.
    pub fn superpageblocks(&self) -> &Superpageblocks<'a> {
        &self.spb
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
                let was = MigrateType::from_value(*f & TYPE_MASK).is_some_and(taints);
                *f = (*f & SKIP) | t as u8;
                self.spb.adjust(pfn, was, taints(t));
                self.update_mixed(pfn);
                true
            }
            _ => false,
        }
    }

    /// Region number of `pfn`, counted from the first region that meets
    /// the table.
    fn region_of(&self, pfn: Pfn) -> usize {
        ((pfn.get() >> self.region) - (self.first.get() >> self.region)) as usize
    }

    /// Recomputes the mixed bit of `pfn`'s region from its pageblocks'
    /// base types.
    fn update_mixed(&mut self, pfn: Pfn) {
        let mut seen = 0u8;
        for start in self.region_starts(pfn) {
            if let Some(i) = self.index(start)
                && let Some(t) = MigrateType::from_value(self.bits[i] & TYPE_MASK)
                && matches!(
                    t,
                    MigrateType::Unmovable | MigrateType::Movable | MigrateType::Reclaimable
                )
            {
                seen |= 1 << t as u8;
            }
        }
        let pinned = seen & !(1 << MigrateType::Movable as u8) != 0;
        let on = pinned && seen.count_ones() > 1;
        let r = self.region_of(pfn);
        if let Some(w) = self.mixed.get_mut(r / 64) {
            if on {
                *w |= 1 << (r % 64);
            } else {
                *w &= !(1 << (r % 64));
            }
        }
    }

    /// The regions (blocks of the zone's maximum order) that are mixed,
    /// by their first frame: they hold a pageblock typed unmovable or
    /// reclaimable beside one of another basic type. Fallbacks for
    /// unmovable and reclaimable requests look here first, so that what
    /// they pin lands in regions that are pinned already (no region with
    /// one unmovable frame in it can become a free block of the maximum
    /// order, whatever its other pageblocks hold).
    pub fn mixed_regions(&self) -> impl Iterator<Item = Pfn> + '_ {
        let base = self.first.get() >> self.region;
        self.mixed.iter().enumerate().flat_map(move |(w, &v)| {
            let mut v = v;
            core::iter::from_fn(move || {
                if v == 0 {
                    return None;
                }
                let b = v.trailing_zeros() as u64;
                v &= v - 1;
                Some(Pfn((base + w as u64 * 64 + b) << self.region))
            })
        })
    }

    /// The first frames of the pageblocks of the region holding `pfn`
    /// that the table covers.
    pub fn region_starts(&self, pfn: Pfn) -> impl Iterator<Item = Pfn> + '_ {
        let lo = (pfn.get() >> self.region) << self.region;
        let end = self.first.get() + ((self.len() as u64) << self.order);
        let (lo, hi) = (lo.max(self.first.get()), (lo + (1 << self.region)).min(end));
        (lo..hi).step_by(1 << self.order).map(Pfn)
    }

    /// The first frames of the pageblocks the table covers that meet `range`.
    pub fn block_starts_in(&self, range: PfnRange) -> impl Iterator<Item = Pfn> + '_ {
        let end = self.first.get() + ((self.len() as u64) << self.order);
        let lo = range
            .start
            .align_down(self.order())
            .get()
            .max(self.first.get());
        let hi = range.end.get().min(end);
        (lo..hi.max(lo)).step_by(1 << self.order).map(Pfn)
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
