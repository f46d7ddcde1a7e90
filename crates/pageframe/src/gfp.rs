//! GFP flags: what an allocation request may do and where it may come from
//! (spec 01 §8.1; bit positions as in Linux 6.18).

use bitflags::bitflags;

use pageframe_mobility::{AllocMode, Mark, ReserveAccess};

use crate::ZoneKind;

bitflags! {
    /// Allocation request flags (`gfp_t`).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
    pub struct Gfp: u32 {
        /// Zone selector: the DMA zone (x86: below 16 MiB).
        const DMA = 1 << 0;
        /// Zone selector: high memory (32-bit only; with MOVABLE selects the Movable zone).
        const HIGHMEM = 1 << 1;
        /// Zone selector: memory below 4 GiB.
        const DMA32 = 1 << 2;
        /// The frames can be migrated (user pages, page cache).
        const MOVABLE = 1 << 3;
        /// The frames can be reclaimed (shrinkable caches).
        const RECLAIMABLE = 1 << 4;
        /// High priority: may dip into half of the min reserve.
        const HIGH = 1 << 5;
        /// Reclaim may start I/O (compaction requires it).
        const IO = 1 << 6;
        /// Reclaim may call into file systems.
        const FS = 1 << 7;
        /// Caller wants zeroed memory. The allocator never touches frame
        /// contents (frames are numbers): the caller zeroes through its mapping.
        const ZERO = 1 << 8;
        /// The caller may sleep and do direct reclaim or compaction.
        const DIRECT_RECLAIM = 1 << 10;
        /// The caller may wake the background reclaimer.
        const KSWAPD_RECLAIM = 1 << 11;
        /// Do not report a failure.
        const NOWARN = 1 << 13;
        /// Try hard, may still fail; never the OOM killer.
        const RETRY_MAYFAIL = 1 << 14;
        /// Never fail (order <= 1 expected).
        const NOFAIL = 1 << 15;
        /// One attempt at reclaim/compaction, then fail.
        const NORETRY = 1 << 16;
        /// Ignore watermarks entirely (memory for freeing memory).
        const MEMALLOC = 1 << 17;
        /// Build a compound page.
        const COMP = 1 << 18;
        /// Never use the reserves (overrides MEMALLOC).
        const NOMEMALLOC = 1 << 19;
        /// Enforce the cpuset.
        const HARDWALL = 1 << 20;
        /// Only this node.
        const THISNODE = 1 << 21;

        /// Both reclaim flags.
        const RECLAIM = Self::DIRECT_RECLAIM.bits() | Self::KSWAPD_RECLAIM.bits();
        /// Ordinary kernel allocation: may sleep, reclaim, do I/O.
        const KERNEL = Self::RECLAIM.bits() | Self::IO.bits() | Self::FS.bits();
        /// Cannot sleep, high priority (interrupt context).
        const ATOMIC = Self::HIGH.bits() | Self::KSWAPD_RECLAIM.bits();
        /// Cannot sleep, no reserve access.
        const NOWAIT = Self::KSWAPD_RECLAIM.bits() | Self::NOWARN.bits();
        /// May sleep but no I/O.
        const NOIO = Self::RECLAIM.bits();
        /// May sleep, I/O but no file-system calls.
        const NOFS = Self::RECLAIM.bits() | Self::IO.bits();
        /// User-space allocation.
        const USER = Self::KERNEL.bits() | Self::HARDWALL.bits();
        /// Movable user-space allocation that may use high zones.
        const HIGHUSER_MOVABLE = Self::USER.bits() | Self::HIGHMEM.bits() | Self::MOVABLE.bits();
        /// Transparent huge page, opportunistic: no reclaim at all.
        const TRANSHUGE_LIGHT = (Self::HIGHUSER_MOVABLE.bits() | Self::COMP.bits() | Self::NOMEMALLOC.bits()
            | Self::NOWARN.bits()) & !Self::RECLAIM.bits();
        /// Transparent huge page that may compact directly.
        const TRANSHUGE = Self::TRANSHUGE_LIGHT.bits() | Self::DIRECT_RECLAIM.bits();
    }
}

impl Gfp {
    /// The highest zone the request may use (`gfp_zone`, spec 01 §3.5), or
    /// `None` for an invalid selector combination (more than one of
    /// DMA/DMA32/HIGHMEM, except HIGHMEM with MOVABLE).
    pub const fn highest_zone(self) -> Option<ZoneKind> {
        let dma = self.contains(Gfp::DMA);
        let dma32 = self.contains(Gfp::DMA32);
        let high = self.contains(Gfp::HIGHMEM);
        let movable = self.contains(Gfp::MOVABLE);
        match (dma, dma32, high) {
            (false, false, false) => Some(ZoneKind::Normal),
            (true, false, false) => Some(ZoneKind::Dma),
            (false, true, false) => Some(ZoneKind::Dma32),
            // No HIGHMEM on 64-bit: it means Normal, or Movable with MOVABLE.
            (false, false, true) => Some(if movable {
                ZoneKind::Movable
            } else {
                ZoneKind::Normal
            }),
            _ => None,
        }
    }

    /// The highest zone of a valid request (`gfp_zone` as Linux computes
    /// it, one table lookup on the four zone bits), or `None` if the flags
    /// are invalid in any way: two zone selectors, or movable and
    /// reclaimable at once.
    #[inline]
    pub const fn request_zone(self) -> Option<ZoneKind> {
        if self.contains(Gfp::MOVABLE.union(Gfp::RECLAIMABLE)) {
            return None;
        }
        ZONE_TABLE[(self.bits() & 0xf) as usize]
    }

    /// The migratetype the mobility bits select (spec 01 §8.1:
    /// `(gfp >> 3) & 3`); both bits set is invalid and reads as unmovable.
    pub const fn migratetype(self) -> pageframe_mobility::MigrateType {
        use pageframe_mobility::MigrateType;
        match (self.contains(Gfp::MOVABLE), self.contains(Gfp::RECLAIMABLE)) {
            (true, false) => MigrateType::Movable,
            (false, true) => MigrateType::Reclaimable,
            _ => MigrateType::Unmovable,
        }
    }

    /// Whether the flags are a valid combination: at most one mobility bit
    /// and a valid zone selector (spec 01 §8.1).
    pub const fn is_valid(self) -> bool {
        self.request_zone().is_some()
    }
}

/// `highest_zone` for every combination of the four zone bits (DMA,
/// HIGHMEM, DMA32, MOVABLE), as Linux's `GFP_ZONE_TABLE`.
const ZONE_TABLE: [Option<ZoneKind>; 16] = {
    let mut t = [None; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = Gfp::from_bits_retain(i as u32).highest_zone();
        i += 1;
    }
    t
};

/// Where the reserve-access bits of [`AllocFlags`] start: above the
/// watermark index.
const ACCESS_SHIFT: u32 = 2;

/// The reserve-access flags that come from [`AllocFlags`] (CMA access
/// comes from the request's GFP).
const ACCESS_FLAGS: ReserveAccess = ReserveAccess::all().difference(ReserveAccess::CMA);

/// The [`AllocFlags`] bit that grants reserve access `a`.
const fn access_bit(a: ReserveAccess) -> u32 {
    (a.bits() as u32) << ACCESS_SHIFT
}

bitflags! {
    /// Allocator-internal flags derived from GFP (spec 01 §8.2); exposed for
    /// tests and for layers that drive zones directly.
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
    pub struct AllocFlags: u32 {
        /// Watermark index bits (0 = min, 1 = low, 2 = high).
        const WMARK_MASK = 0x3;
        /// Skip watermark checks.
        const NO_WATERMARKS = access_bit(ReserveAccess::NO_WATERMARKS);
        /// OOM-victim partial reserve access.
        const OOM = access_bit(ReserveAccess::OOM);
        /// The caller cannot block.
        const NON_BLOCK = access_bit(ReserveAccess::NON_BLOCK);
        /// `__GFP_HIGH`: may use half the min reserve.
        const MIN_RESERVE = access_bit(ReserveAccess::MIN_RESERVE);
        /// Avoid fallbacks below pageblock order (spec 02 §5.5).
        const NOFRAGMENT = 0x100;
        /// May use and reserve highatomic pageblocks.
        const HIGHATOMIC = access_bit(ReserveAccess::HIGHATOMIC);
        /// May wake kswapd.
        const KSWAPD = 0x800;
        /// Any of the reserve-access flags (spec 01 §8.2).
        const RESERVES = Self::NON_BLOCK.bits() | Self::MIN_RESERVE.bits() | Self::HIGHATOMIC.bits() | Self::OOM.bits();
    }
}

impl AllocFlags {
    /// The watermark these flags test.
    pub const fn mark(self) -> Mark {
        match self.bits() & 3 {
            0 => Mark::Min,
            1 => Mark::Low,
            _ => Mark::High,
        }
    }

    /// Fast-path flags: the low watermark (spec 01 §8.3).
    pub const fn fast(gfp: Gfp) -> AllocFlags {
        let mut f = Mark::Low as u32;
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            f |= AllocFlags::KSWAPD.bits();
        }
        AllocFlags::from_bits_retain(f)
    }

    /// The reserve access these flags grant a request with `gfp` in the
    /// watermark check (spec 01 §7.4): CMA frames count for movable
    /// requests (`ALLOC_CMA`, §8.3).
    pub const fn access(self, gfp: Gfp) -> ReserveAccess {
        // The flags that grant reserve access are the watermark check's
        // own bits, shifted (`access_bit`): one mask, not a test a flag.
        let granted = (self.bits() >> ACCESS_SHIFT) as u8 & ACCESS_FLAGS.bits();
        let cma = if gfp.contains(Gfp::MOVABLE) {
            ReserveAccess::CMA.bits()
        } else {
            0
        };
        ReserveAccess::from_bits_retain(granted | cma)
    }

    /// How the free lists may be used by a request with `gfp` (spec 01
    /// §6.3-6.4, spec 02 §5.5): NOFRAGMENT, the highatomic reserve first or
    /// as a last resort, CMA pageblocks for movable requests.
    pub const fn mode(self, gfp: Gfp) -> AllocMode {
        let mut m = 0u8;
        if gfp.contains(Gfp::MOVABLE) {
            m |= AllocMode::CMA.bits();
        }
        if self.contains(AllocFlags::NOFRAGMENT) {
            m |= AllocMode::NOFRAGMENT.bits();
        }
        if self.contains(AllocFlags::HIGHATOMIC) {
            m |= AllocMode::HIGHATOMIC.bits();
        }
        if self.intersects(AllocFlags::NON_BLOCK.union(AllocFlags::OOM)) {
            m |= AllocMode::RESERVES.bits();
        }
        AllocMode::from_bits_retain(m)
    }

    /// Slow-path flags (`gfp_to_alloc_flags` plus the reserve override,
    /// spec 01 §8.3): the min watermark, reserve access for callers that
    /// cannot block or are high priority (and the highatomic reserve for
    /// such callers' high-order requests), no watermarks for MEMALLOC.
    pub const fn slow(gfp: Gfp, order: pageframe_buddy::Order) -> AllocFlags {
        if gfp.contains(Gfp::MEMALLOC) && !gfp.contains(Gfp::NOMEMALLOC) {
            return AllocFlags::NO_WATERMARKS;
        }
        let mut f = Mark::Min as u32;
        if gfp.contains(Gfp::HIGH) {
            f |= AllocFlags::MIN_RESERVE.bits();
        }
        if gfp.contains(Gfp::KSWAPD_RECLAIM) {
            f |= AllocFlags::KSWAPD.bits();
        }
        if !gfp.contains(Gfp::DIRECT_RECLAIM) && !gfp.contains(Gfp::NOMEMALLOC) {
            f |= AllocFlags::NON_BLOCK.bits();
            if order.get() > 0 && gfp.contains(Gfp::HIGH) {
                f |= AllocFlags::HIGHATOMIC.bits();
            }
        }
        AllocFlags::from_bits_retain(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `access` is a shift and a mask: every combination of flags must
    /// still grant exactly the access each flag names, and no other flag
    /// (the watermark index, NOFRAGMENT, KSWAPD) may leak into it.
    #[test]
    fn reserve_access_is_what_each_flag_grants() {
        let pairs = [
            (AllocFlags::NO_WATERMARKS, ReserveAccess::NO_WATERMARKS),
            (AllocFlags::OOM, ReserveAccess::OOM),
            (AllocFlags::NON_BLOCK, ReserveAccess::NON_BLOCK),
            (AllocFlags::MIN_RESERVE, ReserveAccess::MIN_RESERVE),
            (AllocFlags::HIGHATOMIC, ReserveAccess::HIGHATOMIC),
        ];
        let others = [
            AllocFlags::WMARK_MASK,
            AllocFlags::NOFRAGMENT,
            AllocFlags::KSWAPD,
        ];
        for set in 0u32..1 << (pairs.len() + others.len()) {
            let mut f = AllocFlags::empty();
            let mut want = ReserveAccess::empty();
            for (i, (flag, access)) in pairs.iter().enumerate() {
                if set & 1 << i != 0 {
                    f |= *flag;
                    want |= *access;
                }
            }
            for (i, flag) in others.iter().enumerate() {
                if set & 1 << (pairs.len() + i) != 0 {
                    f |= *flag;
                }
            }
            assert_eq!(f.access(Gfp::KERNEL), want, "{f:?}");
            assert_eq!(
                f.access(Gfp::KERNEL | Gfp::MOVABLE),
                want | ReserveAccess::CMA,
                "{f:?}"
            );
        }
    }
}
