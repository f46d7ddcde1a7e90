//! The list index (spec 04 §2.2) and the CPU number; frame numbers, orders
//! and migratetypes are the shared `pageframe-types` vocabulary.

/// Highest order cached on the low-order lists (`PAGE_ALLOC_COSTLY_ORDER`, spec 04 §2.2).
pub const COSTLY_ORDER: u8 = 3;
/// Lists for orders `0..=COSTLY_ORDER` times the three PCP migratetypes (12).
pub const NR_LOWORDER_LISTS: usize = PCP_TYPES * (COSTLY_ORDER as usize + 1);
/// All lists: the low-order ones plus two for the pageblock (THP) order (spec 04 §2.2).
pub const NR_PCP_LISTS: usize = NR_LOWORDER_LISTS + 2;

pub use pageframe_types::{MigrateType, Order, PCP_TYPES, Pfn};

/// The three migratetypes that own PCP lists, in list-index order.
pub const PCP_LIST_TYPES: [MigrateType; PCP_TYPES] = [
    MigrateType::Unmovable,
    MigrateType::Movable,
    MigrateType::Reclaimable,
];

/// Which PCP list a block freed from a pageblock of type `block` goes to
/// (spec 04 §5.1): the three basic types keep their own list, HighAtomic and
/// CMA are cached on the Movable list, and Isolate bypasses the PCP (`None`:
/// free it straight to the zone).
#[inline]
pub const fn pcp_list_type(block: MigrateType) -> Option<MigrateType> {
    match block {
        MigrateType::Unmovable | MigrateType::Movable | MigrateType::Reclaimable => Some(block),
        MigrateType::HighAtomic | MigrateType::Cma => Some(MigrateType::Movable),
        MigrateType::Isolate => None,
    }
}

/// Index of one of the [`NR_PCP_LISTS`] lists of a CPU's cache (spec 04 §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListIndex(u8);

impl ListIndex {
    /// The list for `(order, mt)`, given the pageblock (THP) order if it is
    /// cached; `None` when the order bypasses the PCP (`pcp_allowed_order`)
    /// or `mt` has no PCP lists (only the three basic types do).
    #[inline]
    pub const fn of(order: Order, mt: MigrateType, thp: Option<Order>) -> Option<ListIndex> {
        if !mt.has_pcp_lists() {
            return None;
        }
        if order.get() <= COSTLY_ORDER {
            // spec 04 §2.2: index = 3 × order + mt
            return Some(ListIndex(PCP_TYPES as u8 * order.get() + mt as u8));
        }
        match thp {
            // spec 04 §2.2: UNMOVABLE and RECLAIMABLE share list 12, MOVABLE is 13.
            Some(t) if t.get() == order.get() => Some(ListIndex(
                NR_LOWORDER_LISTS as u8 + matches!(mt, MigrateType::Movable) as u8,
            )),
            _ => None,
        }
    }

    /// The list at position `i`, if `i < NR_PCP_LISTS`.
    #[inline]
    pub const fn new(i: usize) -> Option<ListIndex> {
        if i < NR_PCP_LISTS {
            Some(ListIndex(i as u8))
        } else {
            None
        }
    }

    /// Position of the list (0..14).
    #[inline]
    pub const fn get(self) -> usize {
        self.0 as usize
    }

    /// What [`crate::PerCpuPages::for_each_block`] names the foreign
    /// frames by: order-0 frames freed outside their list's home (see
    /// [`crate::PcpConfig::with_home`]), never allocated from, held apart
    /// from the lists ([`crate::FOREIGN_FRAMES`] at most) and spilled to
    /// the zone a batch at a time. Not one of the [`NR_PCP_LISTS`].
    pub(crate) const FOREIGN: ListIndex = ListIndex(NR_PCP_LISTS as u8);

    /// Whether this names the foreign frames (see [`ListIndex::FOREIGN`]).
    #[inline]
    pub const fn is_foreign(self) -> bool {
        self.0 as usize == NR_PCP_LISTS
    }

    /// Order of the blocks on this list (the inverse map of spec 04 §2.2).
    #[inline]
    pub const fn order(self, thp: Order) -> Order {
        if self.0 as usize == NR_PCP_LISTS {
            Order::new_truncated(0)
        } else if (self.0 as usize) < NR_LOWORDER_LISTS {
            Order::new_truncated(self.0 / PCP_TYPES as u8)
        } else {
            thp
        }
    }
}

/// A CPU number as the kernel numbers its CPUs; the PCP uses it
/// only to index the per-zone set of caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_index_round_trips() {
        let thp = Order::new_truncated(9);
        for o in 0..=COSTLY_ORDER {
            for mt in PCP_LIST_TYPES {
                let i = ListIndex::of(Order::new_truncated(o), mt, Some(thp)).unwrap();
                assert_eq!(i.get(), 3 * o as usize + mt as usize);
                assert_eq!(i.order(thp), Order::new_truncated(o));
            }
        }
        let u = ListIndex::of(thp, MigrateType::Unmovable, Some(thp)).unwrap();
        let r = ListIndex::of(thp, MigrateType::Reclaimable, Some(thp)).unwrap();
        let m = ListIndex::of(thp, MigrateType::Movable, Some(thp)).unwrap();
        assert_eq!((u.get(), r.get(), m.get()), (12, 12, 13));
        assert_eq!(m.order(thp), thp);
        assert_eq!(
            ListIndex::of(Order::new_truncated(4), MigrateType::Movable, Some(thp)),
            None
        );
        assert_eq!(ListIndex::of(thp, MigrateType::Movable, None), None);
    }

    #[test]
    fn free_type_mapping() {
        use MigrateType::*;
        assert_eq!(pcp_list_type(Reclaimable), Some(Reclaimable));
        assert_eq!(pcp_list_type(HighAtomic), Some(Movable));
        assert_eq!(pcp_list_type(Cma), Some(Movable));
        assert_eq!(pcp_list_type(Isolate), None);
        assert_eq!(ListIndex::of(Order::ZERO, HighAtomic, None), None);
    }
}
