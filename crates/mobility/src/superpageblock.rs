//! Superpageblocks: each aligned 1 GiB of a zone (by default), with the
//! number of its pageblocks typed unmovable, reclaimable or highatomic.
//! Pageblocks group memory by mobility at 2 MiB; superpageblocks do it
//! one level up, for 1 GiB pages (Rik van Riel's "superpageblock" RFC for
//! Linux, 2026). A region with one such pageblock is *tainted*: it cannot
//! become a 1 GiB page while that pageblock holds memory, so a fallback
//! for memory that cannot move is steered into a tainted region first and
//! only then taints a clean one (`fallback.rs`). The counts change only
//! where a pageblock's type changes ([`crate::Pageblocks::set`]).

use core::mem::MaybeUninit;

use pageframe_buddy::{Pfn, PfnRange};
use pageframe_types::carve;

use crate::MigrateType;

/// Log2 of the frames in a superpageblock by default: 1 GiB of 4 KiB
/// frames, a level-3 page-table entry on x86-64.
pub const DEFAULT_SUPERPAGEBLOCK_SHIFT: u8 = 18;

/// The largest superpageblock shift a zone accepts (2^40 frames).
pub const MAX_SUPERPAGEBLOCK_SHIFT: u8 = 40;

/// Whether a pageblock of type `mt` taints its superpageblock: it holds
/// (or is kept for) memory that cannot move.
#[inline]
pub(crate) const fn taints(mt: MigrateType) -> bool {
    matches!(
        mt,
        MigrateType::Unmovable | MigrateType::Reclaimable | MigrateType::HighAtomic
    )
}

/// The superpageblocks meeting a zone and their taint counts (caller
/// memory: four bytes a region).
pub struct Superpageblocks<'a> {
    shift: u8,
    /// Region number of `counts[0]` (`pfn >> shift`).
    base: u64,
    /// Pageblocks of a tainting type, per region.
    counts: &'a mut [u32],
    /// Regions whose count is not zero.
    tainted: u32,
    /// Times a clean region became tainted, and a tainted one clean.
    taints: u64,
    cleans: u64,
}

impl<'a> Superpageblocks<'a> {
    const fn regions(span: PfnRange, shift: u8) -> usize {
        if span.is_empty() || shift >= 64 {
            return 0;
        }
        let lo = span.start.get() >> shift;
        let hi = (span.end.get() - 1) >> shift;
        (hi - lo + 1) as usize
    }

    /// Bytes [`Superpageblocks::carve`] needs for `span` (from a buffer at
    /// any address).
    pub const fn bytes(span: PfnRange, shift: u8) -> usize {
        match carve::bytes_for::<u32>(Self::regions(span, shift)) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// Counts for `span`, each region starting at `initial(region)`,
    /// carved from the front of `mem`.
    pub(crate) fn carve(
        span: PfnRange,
        shift: u8,
        mem: &'a mut [MaybeUninit<u8>],
        initial: impl Fn(PfnRange) -> u32,
    ) -> Option<(Self, &'a mut [MaybeUninit<u8>])> {
        let base = span.start.get().checked_shr(u32::from(shift))?;
        let n = Self::regions(span, shift);
        let range = |i: usize| {
            let s = (base + i as u64) << shift;
            PfnRange::new(Pfn(s), Pfn(s + (1 << shift)))
        };
        let (counts, rest) = carve::carve_init(mem, n, |i| initial(range(i)))?;
        let tainted = counts.iter().filter(|&&c| c > 0).count() as u32;
        Some((
            Superpageblocks {
                shift,
                base,
                counts,
                tainted,
                taints: 0,
                cleans: 0,
            },
            rest,
        ))
    }

    /// Log2 of a superpageblock's frames.
    pub fn shift(&self) -> u8 {
        self.shift
    }

    /// Frames in a superpageblock.
    pub fn frames(&self) -> u64 {
        1 << self.shift
    }

    /// Regions meeting the zone (the first and last may reach outside it).
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether no region meets the zone.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The frames of region `i` (aligned, whole: clip to the zone's span).
    pub fn range(&self, i: usize) -> PfnRange {
        let s = (self.base + i as u64) << self.shift;
        PfnRange::new(Pfn(s), Pfn(s + self.frames()))
    }

    /// The region holding `pfn`, if it meets the zone.
    pub fn index_of(&self, pfn: Pfn) -> Option<usize> {
        let i = (pfn.get() >> self.shift).checked_sub(self.base)? as usize;
        (i < self.len()).then_some(i)
    }

    /// Pageblocks of region `i` typed unmovable, reclaimable or highatomic.
    pub fn count(&self, i: usize) -> u32 {
        self.counts.get(i).copied().unwrap_or(0)
    }

    /// Whether the region holding `pfn` is tainted.
    pub fn is_tainted_at(&self, pfn: Pfn) -> bool {
        self.index_of(pfn).is_some_and(|i| self.count(i) > 0)
    }

    /// Regions that are tainted.
    pub fn tainted(&self) -> usize {
        self.tainted as usize
    }

    /// Times a clean region became tainted, and a tainted region clean.
    pub fn events(&self) -> (u64, u64) {
        (self.taints, self.cleans)
    }

    /// A pageblock at `pfn` went from a type that taints (`was`) or not to
    /// one that does (`now`) or not.
    #[inline]
    pub(crate) fn adjust(&mut self, pfn: Pfn, was: bool, now: bool) {
        if was == now {
            return;
        }
        let Some(i) = self.index_of(pfn) else { return };
        let c = &mut self.counts[i];
        if now {
            *c += 1;
            if *c == 1 {
                self.tainted += 1;
                self.taints += 1;
            }
        } else {
            *c = c.saturating_sub(1);
            if *c == 0 {
                self.tainted -= 1;
                self.cleans += 1;
            }
        }
    }
}
