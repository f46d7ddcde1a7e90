//! Is compaction worth it? (spec 03 §4).

use pageframe_buddy::{COSTLY_ORDER, Order};
use pageframe_mobility::MobileZone;

use crate::CompactResult;
use crate::marks::{usable_free, watermark_ok};

/// Extra order-0 frames a compaction for `order` needs above the watermark,
/// as room for the destinations (`2 << order`, spec 03 §2).
pub const fn compact_gap(order: Order) -> u64 {
    2u64 << order.get()
}

/// `__compaction_suitable` (spec 03 §4.1): enough order-0 frames above
/// `mark` (plus the gap, plus the low-min distance for costly orders).
fn enough_free(zone: &MobileZone<'_>, order: Order, mark: u64, marks: &crate::ZoneMarks) -> bool {
    let mut wmark = mark + compact_gap(order);
    if order.get() > COSTLY_ORDER {
        wmark += marks.low.saturating_sub(marks.min);
    }
    watermark_ok(zone, Order::ZERO, wmark, marks.reserve)
}

/// `compaction_suitable` (spec 03 §4.2): enough free frames, and for costly
/// orders a fragmentation index above `extfrag_threshold` (an index in
/// `0..=threshold` means the failure comes from lack of memory: reclaim
/// instead). `mark` is the watermark the request is checked against.
pub fn compaction_suitable(
    zone: &MobileZone<'_>,
    order: Order,
    mark: u64,
    marks: &crate::ZoneMarks,
    extfrag_threshold: u32,
) -> bool {
    if !enough_free(zone, order, mark, marks) {
        return false;
    }
    if order.get() > COSTLY_ORDER {
        let fi = zone.fragmentation_index(order);
        if fi >= 0 && fi as u32 <= extfrag_threshold {
            return false;
        }
    }
    true
}

/// `compaction_suit_allocation_order` (spec 03 §4.3): `Success` if the
/// request could already be served, `Skipped` if compaction would not help,
/// `Continue` to compact. `asynchronous` is an async direct run, which for
/// costly requests that may not use CMA also wants the gap in non-CMA frames
/// (`cma_ok` says whether the request may use CMA memory, i.e. is movable).
pub fn suit_allocation_order(
    zone: &MobileZone<'_>,
    order: Order,
    mark: u64,
    marks: &crate::ZoneMarks,
    extfrag_threshold: u32,
    asynchronous: bool,
    cma_ok: bool,
) -> CompactResult {
    if watermark_ok(zone, order, mark, marks.reserve) {
        return CompactResult::Success;
    }
    if order.get() > COSTLY_ORDER && asynchronous && !cma_ok {
        // Don't build the block inside CMA, where this request can't use it.
        let cma = zone.free_pages_of(pageframe_mobility::MigrateType::Cma);
        let free = usable_free(zone).saturating_sub(cma);
        if free <= mark + compact_gap(order) + marks.reserve {
            return CompactResult::Skipped;
        }
    }
    if !compaction_suitable(zone, order, mark, marks, extfrag_threshold) {
        return CompactResult::Skipped;
    }
    CompactResult::Continue
}
