//! A node: the zones of one memory domain, the zonelist walk across them,
//! and the node-wide watermark set-up (spec 01 §3.4, §3.6, §7, §9).

use core::fmt;

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange, RangeError, ValidateError};

use crate::error::{AllocError, NodeError};
use crate::gfp::{AllocFlags, Gfp};
use crate::watermark::{
    DEFAULT_WATERMARK_SCALE_FACTOR, LOWMEM_RESERVE_RATIO, Watermarks, default_min_free_kbytes,
};
use crate::zone::{NR_ZONE_KINDS, Zone, ZoneKind};

/// The zones of one node, at most one of each [`ZoneKind`].
pub struct Node<'a> {
    zones: [Option<Zone<'a>>; NR_ZONE_KINDS],
    /// `vm.min_free_kbytes` if the user set it; computed otherwise.
    min_free_kbytes: Option<u64>,
    watermark_scale_factor: u32,
}

impl Default for Node<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Node<'a> {
    /// A node without zones.
    pub const fn new() -> Node<'a> {
        Node {
            zones: [None, None, None, None],
            min_free_kbytes: None,
            watermark_scale_factor: DEFAULT_WATERMARK_SCALE_FACTOR,
        }
    }

    /// Adds a zone. Its span must not overlap another zone's.
    pub fn add_zone(&mut self, zone: Zone<'a>) -> Result<(), NodeError> {
        if self.zones[zone.kind().index()].is_some() {
            return Err(NodeError::DuplicateZone);
        }
        if self
            .zones()
            .any(|z| !z.span().intersect(&zone.span()).is_empty())
        {
            return Err(NodeError::OverlappingSpan);
        }
        let i = zone.kind().index();
        self.zones[i] = Some(zone);
        self.recompute_watermarks();
        Ok(())
    }

    /// The zone of `kind`, if present.
    pub fn zone(&self, kind: ZoneKind) -> Option<&Zone<'a>> {
        self.zones[kind.index()].as_ref()
    }

    /// Present zones, low to high.
    pub fn zones(&self) -> impl DoubleEndedIterator<Item = &Zone<'a>> + '_ {
        self.zones.iter().flatten()
    }

    /// The zone whose span holds `pfn`.
    pub fn zone_of(&self, pfn: Pfn) -> Option<&Zone<'a>> {
        self.zones().find(|z| z.span().contains(pfn))
    }

    /// Hands usable RAM over, split across the zones whose spans it meets.
    /// Every frame must fall in some zone's span; checked before anything
    /// changes. Watermarks are recomputed.
    pub fn add_free_range(&self, range: PfnRange) -> Result<(), RangeError> {
        if range.is_empty() {
            return Err(RangeError::Empty);
        }
        let covered: u64 = self.zones().map(|z| z.span().intersect(&range).len()).sum();
        if covered != range.len() {
            return Err(RangeError::OutOfSpan);
        }
        // Check every part before changing any zone: all-or-nothing.
        for z in self.zones() {
            let part = z.span().intersect(&range);
            if !part.is_empty() {
                z.with_zone(|m| m.buddy().check_add_range(part))?;
            }
        }
        for z in self.zones() {
            let part = z.span().intersect(&range);
            if !part.is_empty() {
                z.add_free_range(part)?;
            }
        }
        self.recompute_watermarks();
        Ok(())
    }

    /// Sets `vm.min_free_kbytes` (spec 01 §7.2) and recomputes watermarks.
    pub fn set_min_free_kbytes(&mut self, kib: u64) {
        self.min_free_kbytes = Some(kib);
        self.recompute_watermarks();
    }

    /// Sets `vm.watermark_scale_factor` (1..=3000) and recomputes watermarks.
    pub fn set_watermark_scale_factor(&mut self, factor: u32) {
        self.watermark_scale_factor = factor.clamp(1, 3000);
        self.recompute_watermarks();
    }

    /// The `min_free_kbytes` in force.
    pub fn min_free_kbytes(&self) -> u64 {
        self.min_free_kbytes
            .unwrap_or_else(|| default_min_free_kbytes(self.lowmem_pages() * 4))
    }

    fn lowmem_pages(&self) -> u64 {
        self.zones()
            .filter(|z| z.kind() != ZoneKind::Movable)
            .map(|z| z.managed_pages())
            .sum()
    }

    /// Recomputes every zone's watermarks and lowmem reserves
    /// (`__setup_per_zone_wmarks`, `setup_per_zone_lowmem_reserve`,
    /// spec 01 §7.1 and §7.3).
    pub fn recompute_watermarks(&self) {
        let pages_min = self.min_free_kbytes() / 4;
        let lowmem = self.lowmem_pages().max(1);
        let managed: [u64; NR_ZONE_KINDS] =
            core::array::from_fn(|i| self.zones[i].as_ref().map_or(0, |z| z.managed_pages()));
        for z in self.zones() {
            let m = managed[z.kind().index()];
            let share = pages_min * m / lowmem;
            let mut w = Watermarks::compute(share, m, self.watermark_scale_factor);
            if z.kind() == ZoneKind::Movable {
                // spec 01 §7.1: highmem/movable keep a small fixed min.
                let min = (m / 1024).clamp(32, 128);
                w = Watermarks {
                    min,
                    low: min + (w.low - w.min),
                    high: min + (w.high - w.min),
                    promo: min + (w.promo - w.min),
                };
            }
            let i = z.kind().index();
            let mut reserve = [0u64; NR_ZONE_KINDS];
            for (j, r) in reserve.iter_mut().enumerate().skip(i + 1) {
                let upper: u64 = managed[i + 1..=j].iter().sum();
                let ratio = LOWMEM_RESERVE_RATIO[i];
                *r = if ratio == 0 || m == 0 {
                    0
                } else {
                    upper / ratio
                };
            }
            let mut inner = z.inner.lock();
            inner.wmark = w;
            inner.lowmem_reserve = reserve;
        }
    }

    /// Allocates `2^order` frames: walks the zones the GFP flags allow from
    /// the highest down (the zonelist, spec 01 §3.6, §9), first against the
    /// low watermarks (without fragmenting fallbacks when a DMA32 zone backs
    /// a Normal request, spec 02 §5.5; then again allowing them), then
    /// against the min watermarks with the reserve access the flags grant.
    /// There is no reclaim: if every pass fails the request fails.
    pub fn alloc(&self, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        if !gfp.is_valid() {
            return Err(AllocError::InvalidGfp);
        }
        let highest = gfp.highest_zone().ok_or(AllocError::InvalidGfp)?;
        let mut eligible = self
            .zones()
            .rev()
            .filter(|z| z.kind() <= highest)
            .peekable();
        if eligible.peek().is_none() {
            return Err(AllocError::NoEligibleZone);
        }
        let mut last = AllocError::OutOfMemory;
        let fast = AllocFlags::fast(gfp);
        let nofragment = highest >= ZoneKind::Normal
            && self
                .zone(ZoneKind::Dma32)
                .is_some_and(|z| z.managed_pages() > 0);
        let first = if nofragment {
            fast | AllocFlags::NOFRAGMENT
        } else {
            fast
        };
        let passes = [
            Some(first),
            nofragment.then_some(fast),
            Some(AllocFlags::slow(gfp, order)),
        ];
        for flags in passes.into_iter().flatten() {
            for z in self.zones().rev().filter(|z| z.kind() <= highest) {
                match z.try_alloc(gfp, order, flags, highest) {
                    Ok(p) => return Ok(p),
                    Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
                    Err(e) => last = e,
                }
            }
        }
        Err(last)
    }

    /// Frees a block into the zone that holds it.
    pub fn free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        self.zone_of(pfn)
            .ok_or(FreeError::OutOfRange)?
            .free(pfn, order)
    }

    /// Free frames over all zones.
    pub fn free_pages(&self) -> u64 {
        self.zones().map(|z| z.free_pages()).sum()
    }

    /// Managed frames over all zones.
    pub fn managed_pages(&self) -> u64 {
        self.zones().map(|z| z.managed_pages()).sum()
    }

    /// Checks every zone.
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.zones().try_for_each(|z| z.validate())
    }

    /// A `/proc/buddyinfo` report, one line a zone.
    pub fn buddyinfo(&self) -> BuddyInfo<'_, 'a> {
        BuddyInfo(self)
    }
}

/// `/proc/buddyinfo` for a node: `Node 0, zone <name> <free blocks per order>`.
pub struct BuddyInfo<'n, 'a>(&'n Node<'a>);

impl fmt::Display for BuddyInfo<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in self.0.zones() {
            writeln!(f, "Node 0, {z}")?;
        }
        Ok(())
    }
}
