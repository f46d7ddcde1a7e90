//! The mobility policy the buddy core consults: a freed block goes to its
//! pageblock's list; blocks merge across pageblocks only between mergeable
//! types, and the merged buddy's pageblocks take the new type (spec 01 §5).

use pageframe_buddy::{ListId, MergePolicy, Order, Pfn};

use crate::migratetype::list_of;
use crate::stats::FallbackStats;
use crate::{MigrateType, Pageblocks};

/// Mobility state owned by the buddy zone: the pageblock bitmap, whether
/// grouping is on, the highatomic reserve and the fallback counters.
pub struct Mobility<'a> {
    pub(crate) blocks: Pageblocks<'a>,
    pub(crate) grouping: bool,
    /// Where fallbacks for memory that cannot move go (a tunable).
    pub(crate) placement: crate::Placement,
    /// Frames in HighAtomic pageblocks (Linux `nr_reserved_highatomic`).
    pub(crate) reserved_highatomic: u64,
    pub(crate) stats: FallbackStats,
    /// Per type that keeps to the superpageblocks, the last search of the
    /// tainted ones under NOFRAGMENT that found nothing.
    pub(crate) futile: [Option<crate::placement::Futile>; 2],
}

impl<'a> Mobility<'a> {
    /// The pageblock bitmap.
    pub fn pageblocks(&self) -> &Pageblocks<'a> {
        &self.blocks
    }

    /// The pageblock bitmap, mutably (compaction's skip hints).
    pub fn pageblocks_mut(&mut self) -> &mut Pageblocks<'a> {
        &mut self.blocks
    }

    /// Whether grouping by mobility is on.
    pub fn grouping(&self) -> bool {
        self.grouping
    }

    /// Where fallbacks for memory that cannot move go.
    pub fn placement(&self) -> crate::Placement {
        self.placement
    }

    #[inline]
    fn type_of(&self, pfn: Pfn) -> MigrateType {
        self.blocks.get(pfn).unwrap_or(MigrateType::Unmovable)
    }
}

impl MergePolicy for Mobility<'_> {
    #[inline]
    fn list_for(&self, pfn: Pfn) -> ListId {
        list_of(self.type_of(pfn))
    }

    fn can_merge(&self, order: Order, list: ListId, buddy_list: ListId) -> bool {
        // Below a pageblock both halves share one block and so one list;
        // across pageblocks only the fallback types mix.
        order >= self.blocks.order()
            && crate::type_of_list(list).is_mergeable()
            && crate::type_of_list(buddy_list).is_mergeable()
    }

    /// Under [`crate::Placement::Superpageblock`], the movable memory of a
    /// tainted superpageblock is handed out after the rest (while a clean
    /// one exists): movable memory fills the clean regions first, and the
    /// tainted ones keep room for what cannot move.
    #[inline]
    fn keep_for_last(&self, pfn: Pfn, list: ListId) -> bool {
        if self.placement != crate::Placement::Superpageblock
            || list != list_of(MigrateType::Movable)
        {
            return false;
        }
        let s = self.blocks.superpageblocks();
        s.tainted() < s.len() && s.is_tainted_at(pfn)
    }

    fn merged(&mut self, buddy: Pfn, order: Order, into: ListId) {
        let mt = crate::type_of_list(into);
        let mut p = buddy;
        while p < buddy + order.pages() {
            self.blocks.set(p, mt);
            p = p + self.blocks.pages();
        }
    }
}
