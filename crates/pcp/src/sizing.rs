//! `batch`, `high_min` and `high_max` (spec 04 §3, §8, §10).

use crate::error::PcpError;
use crate::types::Order;

/// Default `CONFIG_PCP_BATCH_SCALE_MAX` (spec 04 §10).
pub const DEFAULT_SCALE_MAX: u8 = 5;
/// Largest accepted `scale_max` (spec 04 §10: range 0..=6).
pub const MAX_SCALE_MAX: u8 = 6;

/// Largest power of two `<= v` (`v > 0`).
const fn rounddown_pow_of_two(v: u64) -> u64 {
    1u64 << (63 - v.leading_zeros())
}

/// `zone_batchsize` (spec 04 §3.1): about 0.1% of the zone capped at 1 MiB,
/// quartered, then rounded to `2^n - 1` so successive batches do not alias
/// in a physically indexed cache.
pub const fn zone_batchsize(managed_pages: u64, page_size: u64) -> u32 {
    let cap = match (1u64 << 20).checked_div(page_size) {
        Some(c) => c,
        None => 0,
    };
    let mut b = managed_pages >> 10;
    if b > cap {
        b = cap;
    }
    b /= 4;
    if b < 1 {
        b = 1;
    }
    b = rounddown_pow_of_two(b + b / 2) - 1;
    if b < 1 { 1 } else { b as u32 }
}

/// What `zone_highsize` needs to know about a zone (spec 04 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneGeometry {
    /// Managed pages of the zone.
    pub managed_pages: u64,
    /// The zone's low watermark in pages (`WLOW`).
    pub low_wmark: u64,
    /// Base page size in bytes (4096 on x86-64).
    pub page_size: u64,
    /// CPUs of the zone's node (plus one when called from CPU online); 0 is
    /// treated as 1.
    pub local_cpus: u32,
    /// `vm.percpu_pagelist_high_fraction`: 0 = auto-tuning, else >= 8.
    pub high_fraction: u32,
}

/// `zone_highsize` for one fraction (0 = low watermark): the zone share split
/// across the node's CPUs, never below `4 * batch` (spec 04 §3.2).
const fn highsize(z: &ZoneGeometry, batch: u32, fraction: u64) -> u64 {
    let cpus = if z.local_cpus == 0 {
        1
    } else {
        z.local_cpus as u64
    };
    let total = match z.managed_pages.checked_div(fraction) {
        Some(t) => t,
        None => z.low_wmark, // fraction 0: the low watermark
    };
    let per_cpu = total / cpus;
    let floor = 4 * batch as u64;
    if per_cpu > floor { per_cpu } else { floor }
}

/// The three zone-level PCP parameters plus the cache-slice flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpSizing {
    batch: u32,
    high_min: u32,
    high_max: u32,
    free_high_batch: bool,
}

impl PcpSizing {
    /// The boot pageset (spec 04 §3.3): `high_min = high_max = 0`, `batch = 1`.
    /// Refills take one page and every free spills at once. Also what
    /// `zone_pcp_disable` installs.
    pub const BOOT: PcpSizing = PcpSizing {
        batch: 1,
        high_min: 0,
        high_max: 0,
        free_high_batch: false,
    };

    /// Explicit values; `batch >= 1` and `high_min <= high_max`, and
    /// `high_max` must stay below 2^30 so page arithmetic cannot overflow.
    pub const fn new(batch: u32, high_min: u32, high_max: u32) -> Result<PcpSizing, PcpError> {
        if batch == 0 || high_min > high_max || high_max >= 1 << 30 || batch >= 1 << 20 {
            return Err(PcpError::InvalidSizing);
        }
        Ok(PcpSizing {
            batch,
            high_min,
            high_max,
            free_high_batch: false,
        })
    }

    /// `zone_batchsize` + `zone_highsize` (spec 04 §3.1-3.2). With fraction 0,
    /// `high` floats between the low watermark's per-CPU share and 1/8 of the
    /// zone per CPU; with fraction N >= 8 both bounds are `managed / N` per CPU
    /// (manual mode, tuning off). Both are at least `4 * batch`.
    pub const fn for_zone(z: ZoneGeometry) -> Result<PcpSizing, PcpError> {
        if z.high_fraction != 0 && z.high_fraction < 8 {
            return Err(PcpError::InvalidHighFraction);
        }
        let batch = zone_batchsize(z.managed_pages, z.page_size);
        let (lo, hi) = if z.high_fraction == 0 {
            (highsize(&z, batch, 0), highsize(&z, batch, 8))
        } else {
            let h = highsize(&z, batch, z.high_fraction as u64);
            (h, h)
        };
        // The low watermark share can exceed the 1/8 share on tiny zones; keep
        // the pair ordered and within the documented range.
        let cap = (1u64 << 30) - 1;
        let hi = if hi > cap { cap } else { hi };
        let lo = if lo > hi { hi } else { lo };
        PcpSizing::new(batch, lo as u32, hi as u32)
    }

    /// Spec 04 §8: set `FREE_HIGH_BATCH` iff this CPU's share of the last-level
    /// cache holds more than `3 * batch` pages.
    pub const fn with_cache_slice(mut self, slice_bytes: u64, page_size: u64) -> PcpSizing {
        let pages = match slice_bytes.checked_div(page_size) {
            Some(p) => p,
            None => 0,
        };
        self.free_high_batch = pages > 3 * self.batch as u64;
        self
    }

    /// The same values with `FREE_HIGH_BATCH` forced on or off.
    pub const fn with_free_high_batch(mut self, on: bool) -> PcpSizing {
        self.free_high_batch = on;
        self
    }

    /// Base refill/spill chunk in pages.
    #[inline]
    pub const fn batch(&self) -> u32 {
        self.batch
    }
    /// Lower bound for `high`.
    #[inline]
    pub const fn high_min(&self) -> u32 {
        self.high_min
    }
    /// Upper bound for `high`.
    #[inline]
    pub const fn high_max(&self) -> u32 {
        self.high_max
    }
    /// Whether a high-order free streak keeps a batch cached (spec 04 §8).
    #[inline]
    pub const fn free_high_batch(&self) -> bool {
        self.free_high_batch
    }
    /// Manual mode: `high_min == high_max`, so `high` never tunes itself.
    #[inline]
    pub const fn is_fixed(&self) -> bool {
        self.high_min == self.high_max
    }

    /// Suggested number of list slots (one per cached block) for a cache with
    /// this sizing and `config`; fewer are safe (the cache spills early or
    /// refills less, it never loses a frame).
    ///
    /// Without a home: `high_max` plus two batches of head-room, since an
    /// order-0 refill stops `batch` below `high` and a free spills once
    /// `count` reaches `high` (spec 04 §4.2, §5.2).
    ///
    /// With a home ([`PcpConfig::with_home`]) the order-0 frames live in
    /// the homes' bitmaps and the foreign frames in a stack of their own
    /// ([`crate::FOREIGN_FRAMES`]), so only the blocks of orders 1..=3 and
    /// the pageblock order take slots, and the slots follow what those
    /// lists hold between two spills, not the zone's size: `batch <<
    /// scale_max` (the cap of `free_count`; a refill of those orders
    /// brings `max(batch >> order, 2)` blocks), plus two; never more than
    /// without a home.
    pub const fn suggested_slots(&self, config: PcpConfig) -> usize {
        let plain = self.high_max as usize + 2 * self.batch as usize + 2;
        if config.home_order.is_none() {
            return plain;
        }
        let homed = ((self.batch as usize) << config.scale_max) + 2;
        if homed < plain { homed } else { plain }
    }
}

/// Static per-zone configuration of the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcpConfig {
    thp_order: Option<Order>,
    scale_max: u8,
    home_order: Option<Order>,
}

impl PcpConfig {
    /// `thp_order`: the pageblock/THP order that gets the two extra lists
    /// (`None` without THP); `scale_max`: `CONFIG_PCP_BATCH_SCALE_MAX` (0..=6).
    pub const fn new(thp_order: Option<Order>, scale_max: u8) -> Result<PcpConfig, PcpError> {
        if scale_max > MAX_SCALE_MAX {
            return Err(PcpError::InvalidConfig);
        }
        if let Some(o) = thp_order
            && (o.get() <= crate::types::COSTLY_ORDER || o.get() >= 31)
        {
            return Err(PcpError::InvalidConfig);
        }
        Ok(PcpConfig {
            thp_order,
            scale_max,
            home_order: None,
        })
    }

    /// Keeps order-0 placement (a departure from Linux, spec 04 §5.6, as the
    /// buddy core's fullest-first choice is): each order-0 list has a *home*, the
    /// aligned regions of `2^home` frames its last refills came from (the
    /// zone's chunks, pageblocks; up to [`crate::HOME_REGIONS`], the
    /// newest one's frames handed out first). A free inside the home goes
    /// on the list and is handed out again; a free outside it goes on a
    /// separate list that is never allocated from and goes back to the zone
    /// a batch at a time. Linux's LIFO lists recycle every freed frame, so a
    /// CPU's allocations drift over all of memory and, after churn, no
    /// pageblock empties; with a home they stay in the few chunks the zone
    /// chose (the fullest), as the zone's own order-0 path keeps them
    /// (LLFree's per-core reservation, ATC'23). A home list is a bitmap of
    /// each region: the lowest frame goes out first.
    ///
    /// `InvalidConfig` for a home larger than [`crate::MAX_HOME_ORDER`].
    pub const fn with_home(self, home: Order) -> Result<PcpConfig, PcpError> {
        if home.get() > crate::home::MAX_HOME_ORDER {
            return Err(PcpError::InvalidConfig);
        }
        Ok(PcpConfig {
            home_order: Some(home),
            ..self
        })
    }

    /// x86-64 defaults: THP order 9, scale max 5.
    pub const X86_64: PcpConfig = PcpConfig {
        thp_order: Some(Order::new_truncated(9)),
        scale_max: DEFAULT_SCALE_MAX,
        home_order: None,
    };

    /// The cached pageblock order, if any.
    #[inline]
    pub const fn thp_order(&self) -> Option<Order> {
        self.thp_order
    }
    /// `PCP_BATCH_SCALE_MAX`.
    #[inline]
    pub const fn scale_max(&self) -> u8 {
        self.scale_max
    }
    /// The order of an order-0 list's home region, if placement is kept
    /// ([`PcpConfig::with_home`]).
    #[inline]
    pub const fn home_order(&self) -> Option<Order> {
        self.home_order
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batchsize_matches_spec_examples() {
        // spec 04 §3.1: a 4K zone of >= 1 GiB gives 63.
        assert_eq!(zone_batchsize(1 << 18, 4096), 63);
        assert_eq!(zone_batchsize(1 << 22, 4096), 63);
        // 64 MiB zone: 16384 >> 10 = 16, /4 = 4, 4+2 = 6 -> 4 - 1 = 3.
        assert_eq!(zone_batchsize(1 << 14, 4096), 3);
        // Tiny zones bottom out at 1.
        assert_eq!(zone_batchsize(10, 4096), 1);
        assert_eq!(zone_batchsize(0, 4096), 1);
    }

    #[test]
    fn highsize_auto_and_manual() {
        let g = ZoneGeometry {
            managed_pages: 1 << 18,
            low_wmark: 4000,
            page_size: 4096,
            local_cpus: 2,
            high_fraction: 0,
        };
        let s = PcpSizing::for_zone(g).unwrap();
        assert_eq!(s.batch(), 63);
        assert_eq!(s.high_min(), 2000);
        assert_eq!(s.high_max(), (1 << 18) / 8 / 2);
        let m = PcpSizing::for_zone(ZoneGeometry {
            high_fraction: 16,
            ..g
        })
        .unwrap();
        assert!(m.is_fixed());
        assert_eq!(m.high_min(), (1 << 18) / 16 / 2);
        // The 4 * batch floor.
        let small = PcpSizing::for_zone(ZoneGeometry { low_wmark: 10, ..g }).unwrap();
        assert_eq!(small.high_min(), 4 * 63);
        assert_eq!(
            PcpSizing::for_zone(ZoneGeometry {
                high_fraction: 7,
                ..g
            }),
            Err(PcpError::InvalidHighFraction)
        );
    }

    #[test]
    fn slots_follow_the_lists_that_use_them() {
        let s = PcpSizing::new(63, 2000, 100_000).unwrap();
        let homed = PcpConfig::X86_64
            .with_home(Order::new_truncated(9))
            .unwrap();
        // Without a home every cached frame takes a slot.
        assert_eq!(s.suggested_slots(PcpConfig::X86_64), 100_000 + 2 * 63 + 2);
        // With one, the high orders, whatever the zone.
        assert_eq!(s.suggested_slots(homed), (63 << 5) + 2);
        let no_scale = PcpConfig::new(Some(Order::new_truncated(9)), 0)
            .unwrap()
            .with_home(Order::new_truncated(9))
            .unwrap();
        assert_eq!(s.suggested_slots(no_scale), 63 + 2);
        // Never more than without a home.
        let tiny = PcpSizing::new(1, 4, 8).unwrap();
        assert_eq!(tiny.suggested_slots(homed), 8 + 2 + 2);
    }

    #[test]
    fn cache_slice_flag() {
        let s = PcpSizing::new(63, 100, 1000).unwrap();
        assert!(!s.with_cache_slice(189 * 4096, 4096).free_high_batch());
        assert!(s.with_cache_slice(190 * 4096, 4096).free_high_batch());
    }

    #[test]
    fn bad_values_rejected() {
        assert_eq!(PcpSizing::new(0, 0, 0), Err(PcpError::InvalidSizing));
        assert_eq!(PcpSizing::new(1, 5, 4), Err(PcpError::InvalidSizing));
        assert_eq!(
            PcpConfig::new(Some(Order::new_truncated(3)), 5),
            Err(PcpError::InvalidConfig)
        );
        assert_eq!(PcpConfig::new(None, 7), Err(PcpError::InvalidConfig));
    }
}
