//! Watermarks (spec 01 §7, docs/rules/01-buddy.md §7): how much free memory a
//! zone keeps back, and the one check every allocation, the per-CPU refill,
//! compaction's suitability test and kcompactd pass through.
//!
//! This is the only home of the rule: the facade computes the numbers per
//! zone and node, the compaction crate asks the same question with the min
//! mark, and both call [`MobileZone::watermark_ok`].

use bitflags::bitflags;
use pageframe_buddy::Order;

use crate::migratetype::list_of;
use crate::{MigrateType, MobileZone};

/// `vm.watermark_scale_factor` default: the low/high gap is 0.1% of the zone.
pub const DEFAULT_WATERMARK_SCALE_FACTOR: u32 = 10;
/// The largest `vm.watermark_scale_factor` (30%).
pub const MAX_WATERMARK_SCALE_FACTOR: u32 = 3000;
/// `vm.lowmem_reserve_ratio` for DMA, DMA32, Normal, Movable (spec 01 §7.3).
pub const LOWMEM_RESERVE_RATIO: [u64; 4] = [256, 256, 32, 0];
/// The largest `vm.min_free_kbytes` the default computation gives (256 MiB).
pub const MAX_DEFAULT_MIN_FREE_KBYTES: u64 = 262_144;

/// A zone's watermarks, in frames (spec 01 §7.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Watermarks {
    /// Below this only privileged requests proceed.
    pub min: u64,
    /// The fast path's threshold; background reclaim wakes below it.
    pub low: u64,
    /// Background reclaim sleeps above it; per-CPU caches stop growing below.
    pub high: u64,
    /// Memory-tiering promotion threshold.
    pub promo: u64,
}

/// Which watermark a check uses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u8)]
pub enum Mark {
    /// The slow path's mark (`ALLOC_WMARK_MIN`), also compaction's.
    #[default]
    Min = 0,
    /// The fast path's mark.
    Low = 1,
    /// Background reclaim's target.
    High = 2,
}

impl Watermarks {
    /// Watermarks of a zone with `managed` frames that gets `share` frames
    /// of the min reserve (spec 01 §7.1, a zone that is neither highmem nor
    /// movable): `gap = max(share / 4, managed * scale_factor / 10000)`.
    /// Saturating: any input gives ordered watermarks, never a panic.
    pub const fn compute(share: u64, managed: u64, scale_factor: u32) -> Watermarks {
        let by_size = mul_div(managed, scale_factor as u64, 10_000);
        let gap = if share / 4 > by_size {
            share / 4
        } else {
            by_size
        };
        Watermarks::with_gap(share, gap)
    }

    /// `min`, then `low`, `high`, `promo` each `gap` above the previous one
    /// (saturating).
    pub const fn with_gap(min: u64, gap: u64) -> Watermarks {
        let low = min.saturating_add(gap);
        let high = low.saturating_add(gap);
        Watermarks {
            min,
            low,
            high,
            promo: high.saturating_add(gap),
        }
    }

    /// The value of `mark`.
    pub const fn get(&self, mark: Mark) -> u64 {
        match mark {
            Mark::Min => self.min,
            Mark::Low => self.low,
            Mark::High => self.high,
        }
    }
}

/// A zone's watermarks as one requester sees them: the marks, and the lowmem
/// reserve the zone holds against the requester's zone class (spec 01 §7.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ZoneMarks {
    /// The zone's watermarks.
    pub wmark: Watermarks,
    /// Frames withheld from this requester (`lowmem_reserve[highest]`).
    pub reserve: u64,
}

impl ZoneMarks {
    /// The value of `mark`.
    pub const fn get(&self, mark: Mark) -> u64 {
        self.wmark.get(mark)
    }
}

/// `a * b / c` without overflow in the intermediate product (saturating
/// when the quotient itself does not fit).
const fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    let q = (a as u128 * b as u128) / c as u128;
    if q > u64::MAX as u128 {
        u64::MAX
    } else {
        q as u64
    }
}

/// `vm.min_free_kbytes` for `lowmem_kib` of low memory: 4·√KiB clamped to
/// 128 KiB..256 MiB (spec 01 §7.2). Total for every input.
pub const fn default_min_free_kbytes(lowmem_kib: u64) -> u64 {
    let v = lowmem_kib.saturating_mul(16).isqrt();
    if v < 128 {
        128
    } else if v > MAX_DEFAULT_MIN_FREE_KBYTES {
        MAX_DEFAULT_MIN_FREE_KBYTES
    } else {
        v
    }
}

bitflags! {
    /// What parts of the reserves a request may use in the watermark check
    /// (the reserve-related part of Linux's `ALLOC_*` flags, spec 01 §8.2).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
    pub struct ReserveAccess: u8 {
        /// `__GFP_HIGH`: may use half of the min reserve.
        const MIN_RESERVE = 1 << 0;
        /// The caller cannot block: with `MIN_RESERVE` a further quarter.
        const NON_BLOCK = 1 << 1;
        /// An OOM victim: another halving.
        const OOM = 1 << 2;
        /// May count (and use) the highatomic reserve's free frames.
        const HIGHATOMIC = 1 << 3;
        /// A movable request: may count free CMA frames.
        const CMA = 1 << 4;
        /// No watermark at all (memory for freeing memory).
        const NO_WATERMARKS = 1 << 5;
    }
}

impl ReserveAccess {
    /// Any of the flags that grant reserve access (Linux `ALLOC_RESERVES`):
    /// with one of them, highatomic free frames count as free.
    pub const RESERVES: ReserveAccess = ReserveAccess::MIN_RESERVE
        .union(ReserveAccess::NON_BLOCK)
        .union(ReserveAccess::OOM)
        .union(ReserveAccess::HIGHATOMIC);
}

impl MobileZone<'_> {
    /// Free frames a request without reserve access may count: the
    /// highatomic reserve's free frames are not for it (spec 01 §7.4).
    pub fn usable_free_pages(&self) -> u64 {
        let free = self.free_pages();
        free - self.free_pages_of(MigrateType::HighAtomic).min(free)
    }

    /// `__zone_watermark_ok` (spec 01 §7.4): may a request of `order` with
    /// `access` proceed against watermark value `mark` and the lowmem
    /// `reserve` held against it? After taking `2^order` frames more than
    /// `mark + reserve` must remain (the mark reduced by the reserve access
    /// the request has), counting highatomic free frames only for requests
    /// with reserve access and free CMA frames only for movable ones; for
    /// `order > 0` a free block of at least `order` must sit on a list the
    /// request may take from. Total for every input (an order above the
    /// zone's maximum has no block: false).
    #[inline]
    pub fn watermark_ok(
        &self,
        order: Order,
        mark: u64,
        reserve: u64,
        access: ReserveAccess,
    ) -> bool {
        if access.contains(ReserveAccess::NO_WATERMARKS) {
            return true;
        }
        // Free frames must exceed the mark, the reserve, the frames the
        // request may not count and all but one of its block's: the same
        // inequality with everything on one side, in saturating `u64`
        // (a sum past `u64::MAX` exceeds every free count, as it should).
        let mut withheld = order.pages() - 1;
        if !access.intersects(ReserveAccess::RESERVES) {
            withheld += self.free_pages_of(MigrateType::HighAtomic);
        }
        if !access.contains(ReserveAccess::CMA) {
            withheld += self.free_pages_of(MigrateType::Cma);
        }
        let mut min = mark;
        if access.contains(ReserveAccess::MIN_RESERVE) {
            min -= min / 2;
            if access.contains(ReserveAccess::NON_BLOCK) {
                min -= min / 4;
            }
        }
        if access.contains(ReserveAccess::OOM) {
            min -= min / 2;
        }
        if self.free_pages() <= min.saturating_add(reserve).saturating_add(withheld) {
            return false;
        }
        order == Order::ZERO || self.has_block_for(order, access)
    }

    /// Whether a free block of at least `order` sits on a list a request
    /// with `access` may take from: the three basic types, CMA for movable
    /// requests, the highatomic reserve for high-order atomic and OOM ones.
    #[inline]
    pub fn has_block_for(&self, order: Order, access: ReserveAccess) -> bool {
        let has = |t: MigrateType| self.buddy().has_block_in(order, list_of(t));
        has(MigrateType::Unmovable)
            || has(MigrateType::Movable)
            || has(MigrateType::Reclaimable)
            || (access.contains(ReserveAccess::CMA) && has(MigrateType::Cma))
            || (access.intersects(ReserveAccess::HIGHATOMIC | ReserveAccess::OOM)
                && has(MigrateType::HighAtomic))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computation_is_total_and_ordered() {
        for (share, managed, f) in [
            (0, 0, 0),
            (u64::MAX, u64::MAX, u32::MAX),
            (1 << 40, u64::MAX, 3000),
            (1024, 1 << 20, 10),
        ] {
            let w = Watermarks::compute(share, managed, f);
            assert!(w.min <= w.low && w.low <= w.high && w.high <= w.promo);
        }
        // spec 01 §7.1: 1 GiB zone with a 1024-frame share, factor 10: the
        // gap is the larger of share / 4 (256) and 0.1% of the zone (262).
        let w = Watermarks::compute(1024, 1 << 18, 10);
        assert_eq!((w.min, w.low, w.high), (1024, 1286, 1548));
        let w = Watermarks::compute(4096, 1 << 18, 10);
        assert_eq!((w.min, w.low, w.high), (4096, 5120, 6144));
        assert_eq!(default_min_free_kbytes(0), 128);
        assert_eq!(
            default_min_free_kbytes(u64::MAX),
            MAX_DEFAULT_MIN_FREE_KBYTES
        );
        assert_eq!(default_min_free_kbytes(4 << 20), 8192);
    }
}
