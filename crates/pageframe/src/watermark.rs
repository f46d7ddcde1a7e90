//! Watermarks: how much free memory a zone keeps back, and the check every
//! allocation passes (spec 01 §7).

use crate::gfp::{AllocFlags, Mark};

/// `vm.watermark_scale_factor` default: the low/high gap is 0.1% of the zone.
pub const DEFAULT_WATERMARK_SCALE_FACTOR: u32 = 10;
/// `vm.lowmem_reserve_ratio` for DMA, DMA32, Normal, Movable (spec 01 §7.3).
pub const LOWMEM_RESERVE_RATIO: [u64; 4] = [256, 256, 32, 0];

/// A zone's watermarks, in frames (spec 01 §7.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Watermarks {
    /// Below this only privileged requests proceed.
    pub min: u64,
    /// The fast path's threshold; kswapd wakes below it.
    pub low: u64,
    /// kswapd sleeps above it.
    pub high: u64,
    /// Memory-tiering promotion threshold.
    pub promo: u64,
}

impl Watermarks {
    /// Watermarks of a zone with `managed` frames that gets `share` frames of
    /// the min reserve (spec 01 §7.1 for a non-highmem zone).
    pub const fn compute(share: u64, managed: u64, scale_factor: u32) -> Watermarks {
        let by_size = managed * scale_factor as u64 / 10_000;
        let gap = if share / 4 > by_size {
            share / 4
        } else {
            by_size
        };
        Watermarks {
            min: share,
            low: share + gap,
            high: share + 2 * gap,
            promo: share + 3 * gap,
        }
    }

    /// The mark a check uses.
    pub const fn get(&self, mark: Mark) -> u64 {
        match mark {
            Mark::Min => self.min,
            Mark::Low => self.low,
            Mark::High => self.high,
        }
    }
}

/// `min_free_kbytes` for `lowmem_kib` of low memory: 4·√KiB clamped to
/// 128 KiB..256 MiB (spec 01 §7.2).
pub const fn default_min_free_kbytes(lowmem_kib: u64) -> u64 {
    let v = (lowmem_kib * 16).isqrt();
    if v < 128 {
        128
    } else if v > 262_144 {
        262_144
    } else {
        v
    }
}

/// `__zone_watermark_ok` without highatomic or CMA terms (spec 01 §7.4):
/// may an allocation of `order` proceed given `free` frames, the mark, the
/// lowmem reserve held against the requester, and whether a free block of at
/// least `order` exists (`has_block(order)`).
pub fn watermark_ok(
    free: u64,
    order: u8,
    mark: u64,
    reserve: u64,
    flags: AllocFlags,
    has_block: impl Fn(u8) -> bool,
) -> bool {
    if flags.contains(AllocFlags::NO_WATERMARKS) {
        return true;
    }
    let free = free as i64 - ((1i64 << order) - 1);
    let mut min = mark as i64;
    if flags.contains(AllocFlags::MIN_RESERVE) {
        min -= min / 2;
        if flags.contains(AllocFlags::NON_BLOCK) {
            min -= min / 4;
        }
    }
    if flags.contains(AllocFlags::OOM) {
        min -= min / 2;
    }
    if free <= min + reserve as i64 {
        return false;
    }
    order == 0 || has_block(order)
}
