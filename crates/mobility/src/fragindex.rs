//! Fragmentation metrics from free block counts per order (spec 03 §4.4).

/// Free frames and 2^order-sized blocks that could be carved, from
/// `nr_free[o]` = free blocks of order `o`.
fn totals(nr_free: &[u64], order: usize) -> (u64, u64, u64) {
    let free: u64 = nr_free.iter().enumerate().map(|(o, &n)| n << o).sum();
    let blocks: u64 = nr_free.iter().sum();
    let suitable: u64 = nr_free
        .iter()
        .enumerate()
        .skip(order)
        .map(|(o, &n)| n << (o - order))
        .sum();
    (free, blocks, suitable)
}

/// Linux's fragmentation index ×1000 for `order`: −1000 if an allocation
/// would succeed, 0 if there is no free memory at all, otherwise towards 0
/// when failure is for lack of memory and towards 1000 when it is for
/// fragmentation.
pub fn fragmentation_index(nr_free: &[u64], order: usize) -> i32 {
    let (free, blocks, suitable) = totals(nr_free, order);
    if blocks == 0 {
        return 0;
    }
    if suitable > 0 {
        return -1000;
    }
    let requested = 1u64 << order;
    1000 - ((1000 + free * 1000 / requested) / blocks) as i32
}

/// Unusable free space index ×1000 for `order`: the share of free memory
/// that cannot serve a request of that order.
pub fn unusable_index(nr_free: &[u64], order: usize) -> u32 {
    let (free, _, suitable) = totals(nr_free, order);
    if free == 0 {
        return 1000;
    }
    ((free - (suitable << order)) * 1000 / free) as u32
}

/// External fragmentation in percent for `order` (`extfrag_for_order`):
/// the basis of the proactive compaction score.
pub fn extfrag_percent(nr_free: &[u64], order: usize) -> u32 {
    let (free, _, suitable) = totals(nr_free, order);
    if free == 0 {
        return 0;
    }
    ((free - (suitable << order)) * 100 / free) as u32
}
