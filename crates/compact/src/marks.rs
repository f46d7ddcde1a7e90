//! Watermark inputs. Compaction sits below the facade, so it does not know
//! how watermarks are computed: the caller passes the numbers (spec 01 §7).

use pageframe_buddy::Order;
use pageframe_mobility::{MigrateType, MobileZone};

/// A zone's watermarks in frames, and the lowmem reserve it holds against
/// the requester (spec 01 §7.1, §7.3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneMarks {
    /// `WMARK_MIN`.
    pub min: u64,
    /// `WMARK_LOW`.
    pub low: u64,
    /// `WMARK_HIGH`.
    pub high: u64,
    /// Frames held back from the requester's zone class (`lowmem_reserve`).
    pub reserve: u64,
}

/// Which watermark a check uses.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Mark {
    /// The slow path's mark (`ALLOC_WMARK_MIN`), also kcompactd's.
    #[default]
    Min,
    /// The fast path's mark.
    Low,
    /// kswapd's target.
    High,
}

impl ZoneMarks {
    /// The value of `mark`.
    pub const fn get(&self, mark: Mark) -> u64 {
        match mark {
            Mark::Min => self.min,
            Mark::Low => self.low,
            Mark::High => self.high,
        }
    }
}

/// Free frames a normal request may count: the highatomic reserve's free
/// frames are not for it (spec 01 §7.4).
pub(crate) fn usable_free(zone: &MobileZone<'_>) -> u64 {
    let free = zone.free_pages();
    free - zone.free_pages_of(MigrateType::HighAtomic).min(free)
}

/// Whether a free block of at least `order` sits on a list a normal request
/// may take from (the three basic types, CMA).
pub(crate) fn has_block(zone: &MobileZone<'_>, order: Order) -> bool {
    let max = zone.buddy().max_order().get();
    (order.get()..=max).filter_map(Order::new).any(|o| {
        [
            MigrateType::Unmovable,
            MigrateType::Movable,
            MigrateType::Reclaimable,
            MigrateType::Cma,
        ]
        .iter()
        .any(|&t| zone.free_blocks_of(o, t) > 0)
    })
}

/// `__zone_watermark_ok` for a normal request (spec 01 §7.4): after taking
/// `2^order` frames, more than `mark + reserve` must remain, and for
/// `order > 0` a block of that order must exist.
pub fn watermark_ok(zone: &MobileZone<'_>, order: Order, mark: u64, reserve: u64) -> bool {
    let free = usable_free(zone) as i128 - (order.pages() as i128 - 1);
    if free <= mark as i128 + reserve as i128 {
        return false;
    }
    order == Order::ZERO || has_block(zone, order)
}
