//! Fragmentation maps: each pageblock as one character, by migratetype and
//! fill, as Gorman's 2005 fragmentation-avoidance work drew memory. A map
//! shows at a glance what the counters only sum up: whether free memory
//! lies in whole free pageblocks or in holes spread across used ones.

use pageframe_buddy::{BlockInfo, Pfn, PfnRange};

use crate::migratetype::MigrateType;
use crate::zone::MobileZone;

/// One pageblock, as a fragmentation map shows it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageblockUse {
    /// Its frames (inside the zone's span).
    pub range: PfnRange,
    /// Its migratetype (`None` when no frame of it is managed).
    pub migratetype: Option<MigrateType>,
    /// Managed frames in it.
    pub managed: u64,
    /// Free frames in it.
    pub free: u64,
}

impl PageblockUse {
    /// Its character: `_` nothing managed, `.` all free, otherwise the
    /// migratetype's letter (`U`nmovable, `M`ovable, `R`eclaimable,
    /// `H`ighatomic, `C`MA, `I`solate), upper case when full, lower case
    /// when partly free.
    pub fn symbol(&self) -> char {
        let Some(mt) = self.migratetype.filter(|_| self.managed > 0) else {
            return '_';
        };
        if self.free == self.managed {
            return '.';
        }
        let c = match mt {
            MigrateType::Unmovable => 'U',
            MigrateType::Movable => 'M',
            MigrateType::Reclaimable => 'R',
            MigrateType::HighAtomic => 'H',
            MigrateType::Cma => 'C',
            MigrateType::Isolate => 'I',
        };
        if self.free == 0 {
            c
        } else {
            c.to_ascii_lowercase()
        }
    }
}

impl MobileZone<'_> {
    /// The pageblock holding `pfn` (clipped to the span); `None` outside
    /// the span. One walk over the block's free and allocated blocks.
    pub fn pageblock_use(&self, pfn: Pfn) -> Option<PageblockUse> {
        if !self.span().contains(pfn) {
            return None;
        }
        let order = self.pageblock_order();
        let start = pfn.align_down(order);
        let end = start
            .checked_add(order.pages())
            .unwrap_or(Pfn::new(u64::MAX));
        let range = PfnRange::new(start, end).intersect(&self.span());
        let (mut managed, mut free) = (0, 0);
        for (p, info) in self.buddy().walk(range) {
            // A block may reach past the pageblock (orders above it): count
            // the part inside.
            let (head, len, is_free) = match info {
                BlockInfo::Hole => continue,
                BlockInfo::Free { head, order, .. } => (head, order.pages(), true),
                BlockInfo::Allocated { head, order, .. } => (head, order.pages(), false),
            };
            let b = PfnRange::new(head, head.checked_add(len).unwrap_or(Pfn::new(u64::MAX)));
            let inside = b.intersect(&range).intersect(&PfnRange::new(p, range.end));
            managed += inside.len();
            if is_free {
                free += inside.len();
            }
        }
        Some(PageblockUse {
            range,
            migratetype: self.block_type(range.start),
            managed,
            free,
        })
    }
}
