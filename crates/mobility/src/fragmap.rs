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

/// One superpageblock (1 GiB by default), as a map of 1 GiB pages shows
/// it: [`MobileZone::superpageblock_use`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SuperpageblockUse {
    /// Its frames (inside the zone's span).
    pub range: PfnRange,
    /// It lies inside the zone and holds no hole: it could be a 1 GiB page.
    pub whole: bool,
    /// Its pageblocks typed unmovable, reclaimable or highatomic.
    pub tainting: u32,
    /// Free frames in it.
    pub free: u64,
}

impl SuperpageblockUse {
    /// Whether a pageblock in it holds (or is kept for) memory that cannot
    /// move.
    pub fn is_tainted(&self) -> bool {
        self.tainting > 0
    }

    /// Whether it is a free 1 GiB page now.
    pub fn is_free(&self) -> bool {
        self.whole && self.free == self.range.len()
    }

    /// Its character: `F` a free 1 GiB page now, `C` clean (free and
    /// movable memory only, by its pageblocks' types), `T` tainted; lower
    /// case (`c`, `t`) for one that can never be a 1 GiB page (it reaches
    /// outside the zone or holds a hole).
    pub fn symbol(&self) -> char {
        let c = if self.is_free() {
            'F'
        } else if self.is_tainted() {
            'T'
        } else {
            'C'
        };
        if self.whole {
            c
        } else {
            c.to_ascii_lowercase()
        }
    }
}

/// A zone's superpageblocks summed up: [`MobileZone::superpageblock_counts`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SuperpageblockCounts {
    /// Superpageblocks that could be 1 GiB pages (inside the zone, no hole).
    pub whole: u64,
    /// Superpageblocks holding a pageblock of a tainting type (whole or not).
    pub tainted: u64,
    /// Whole superpageblocks that are not tainted.
    pub clean: u64,
    /// Whole superpageblocks wholly free: 1 GiB pages to be had now.
    pub free: u64,
}

impl MobileZone<'_> {
    /// Superpageblock `i` of the zone (see
    /// [`crate::Superpageblocks::range`]); `None` past the last. One look at
    /// each of its chunks.
    pub fn superpageblock_use(&self, i: usize) -> Option<SuperpageblockUse> {
        let spb = self.mobility().pageblocks().superpageblocks();
        if i >= spb.len() {
            return None;
        }
        let full = spb.range(i);
        let room = self
            .buddy()
            .room(full, crate::list_of(MigrateType::Movable));
        Some(SuperpageblockUse {
            range: full.intersect(&self.span()),
            whole: room.whole,
            tainting: spb.count(i),
            free: room.free,
        })
    }

    /// Every superpageblock of the zone, summed up.
    pub fn superpageblock_counts(&self) -> SuperpageblockCounts {
        let n = self.mobility().pageblocks().superpageblocks().len();
        let mut c = SuperpageblockCounts::default();
        for u in (0..n).filter_map(|i| self.superpageblock_use(i)) {
            c.tainted += u64::from(u.is_tainted());
            if u.whole {
                c.whole += 1;
                c.clean += u64::from(!u.is_tainted());
                c.free += u64::from(u.is_free());
            }
        }
        c
    }
}
