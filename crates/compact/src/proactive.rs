//! Proactive compaction's measures (spec 03 §4.4, §11.3): the fragmentation
//! score of a zone and of a node, and the thresholds derived from
//! `vm.compaction_proactiveness`.

use pageframe_buddy::Order;
use pageframe_mobility::MobileZone;

use crate::access::locked;
use crate::{NodeZone, ZoneLock};

/// The start (`high`) and stop (`low`) fragmentation scores for a
/// proactiveness.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Thresholds {
    /// A zone's proactive run stops once its score is at or below this.
    pub low: u32,
    /// Proactive compaction starts when the node score is above this.
    pub high: u32,
}

/// The thresholds for proactiveness `p` (values above 100 count as 100):
/// `low = 100 - p`, `high = min(low + min(10, low / 2), 100)` (Linux 6.18;
/// the reduced leeway keeps `high` meaningful for `p > 80`).
pub const fn thresholds(p: u8) -> Thresholds {
    let p = if p > 100 { 100 } else { p as u32 };
    let low = 100 - p;
    let leeway = if low / 2 < 10 { low / 2 } else { 10 };
    let high = if low + leeway < 100 {
        low + leeway
    } else {
        100
    };
    Thresholds { low, high }
}

/// The order the score is measured at: the huge-page order
/// (`COMPACTION_HPAGE_ORDER`), taken as the zone's pageblock order (9 on
/// x86-64, where the two coincide).
fn hpage_order(z: &MobileZone<'_>) -> Order {
    z.pageblock_order().min(z.buddy().max_order())
}

/// A zone's fragmentation score: the percentage of its free memory that is
/// not in huge-page-sized free blocks (`extfrag_for_order`), 0..=100.
pub fn fragmentation_score(z: &MobileZone<'_>) -> u32 {
    z.extfrag_percent(hpage_order(z))
}

/// A zone's contribution to its node's score:
/// `present * score / (node_present + 1)`, so small zones barely count.
pub const fn weighted_score(present: u64, score: u32, node_present: u64) -> u64 {
    present * score as u64 / (node_present + 1)
}

/// The node's fragmentation score: the sum of its populated zones' weighted
/// scores (present pages taken as managed pages). `None` if a zone's lock
/// refused.
pub fn node_score<Z: ZoneLock + ?Sized>(zones: &[NodeZone<'_, Z>]) -> Option<u32> {
    let mut node_present = 0u64;
    for nz in zones {
        node_present += locked(nz.zone, |z| z.buddy().managed_pages())?;
    }
    let mut total = 0u64;
    for nz in zones {
        let (present, score) = locked(nz.zone, |z| {
            (z.buddy().managed_pages(), fragmentation_score(z))
        })?;
        total += weighted_score(present, score, node_present);
    }
    Some(total.min(100) as u32)
}
