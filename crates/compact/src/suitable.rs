//! Is compaction worth it? (spec 03 §4).

use pageframe_buddy::{COSTLY_ORDER, Order};
use pageframe_mobility::MobileZone;

use pageframe_mobility::{ReserveAccess, ZoneMarks};

use crate::CompactResult;

/// Extra order-0 frames a compaction for `order` needs above the watermark,
/// as room for the destinations (`2 << order`, spec 03 §2).
pub const fn compact_gap(order: Order) -> u64 {
    2u64 << order.get()
}

/// `__compaction_suitable` (spec 03 §4.1): enough order-0 frames above
/// `mark` (plus the gap, plus the low-min distance for costly orders).
fn enough_free(zone: &MobileZone<'_>, order: Order, mark: u64, marks: &ZoneMarks) -> bool {
    let mut wmark = mark.saturating_add(compact_gap(order));
    if order.get() > COSTLY_ORDER {
        wmark = wmark.saturating_add(marks.wmark.low.saturating_sub(marks.wmark.min));
    }
    // Linux checks with ALLOC_CMA here: CMA frames can be destinations.
    zone.watermark_ok(Order::ZERO, wmark, marks.reserve, ReserveAccess::CMA)
}

/// `compaction_suitable` (spec 03 §4.2): enough free frames, and for costly
/// orders a fragmentation index above `extfrag_threshold` (an index in
/// `0..=threshold` means the failure comes from lack of memory: reclaim
/// instead). `mark` is the watermark the request is checked against.
pub fn compaction_suitable(
    zone: &MobileZone<'_>,
    order: Order,
    mark: u64,
    marks: &ZoneMarks,
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
    marks: &ZoneMarks,
    extfrag_threshold: u32,
    asynchronous: bool,
    cma_ok: bool,
) -> CompactResult {
    let access = if cma_ok {
        ReserveAccess::CMA
    } else {
        ReserveAccess::empty()
    };
    if zone.watermark_ok(order, mark, marks.reserve, access) {
        return CompactResult::Success;
    }
    if order.get() > COSTLY_ORDER && asynchronous && !cma_ok {
        // Don't build the block inside CMA, where this request can't use it:
        // the gap must be there in frames it can count.
        let gap = mark.saturating_add(compact_gap(order));
        if !zone.watermark_ok(Order::ZERO, gap, marks.reserve, access) {
            return CompactResult::Skipped;
        }
    }
    if !compaction_suitable(zone, order, mark, marks, extfrag_threshold) {
        return CompactResult::Skipped;
    }
    CompactResult::Continue
}
