//! Frame numbers, orders, PCP migratetypes and the list index (spec 04 §2.2).

/// Highest order cached on the low-order lists (`PAGE_ALLOC_COSTLY_ORDER`, spec 04 §2.2).
pub const COSTLY_ORDER: u8 = 3;
/// Number of migratetypes that have their own PCP lists (`MIGRATE_PCPTYPES`, spec 02 §2).
pub const PCP_TYPES: usize = 3;
/// Lists for orders `0..=COSTLY_ORDER` times the three PCP migratetypes (12).
pub const NR_LOWORDER_LISTS: usize = PCP_TYPES * (COSTLY_ORDER as usize + 1);
/// All lists: the low-order ones plus two for the pageblock (THP) order (spec 04 §2.2).
pub const NR_PCP_LISTS: usize = NR_LOWORDER_LISTS + 2;

/// A page-frame number as the PCP sees it: an opaque `u64` that the zone hands
/// out on refill and takes back on spill. The PCP never dereferences it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame(pub u64);

impl Frame {
    /// The raw frame number.
    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for Frame {
    fn from(v: u64) -> Self {
        Frame(v)
    }
}

/// A block order: the block spans `2^order` base pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Order(pub u8);

impl Order {
    /// Order 0 (a single base page).
    pub const ZERO: Order = Order(0);

    /// Number of base pages in a block of this order (saturating at `u32::MAX`).
    #[inline]
    pub const fn pages(self) -> u32 {
        if self.0 >= 32 {
            u32::MAX
        } else {
            1u32 << self.0
        }
    }
}

/// One of the three migratetypes that own PCP lists (spec 02 §2):
/// unmovable (0), movable (1), reclaimable (2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Migratetype(u8);

impl Migratetype {
    /// `MIGRATE_UNMOVABLE`.
    pub const UNMOVABLE: Migratetype = Migratetype(0);
    /// `MIGRATE_MOVABLE`.
    pub const MOVABLE: Migratetype = Migratetype(1);
    /// `MIGRATE_RECLAIMABLE`.
    pub const RECLAIMABLE: Migratetype = Migratetype(2);
    /// The three PCP types in index order.
    pub const ALL: [Migratetype; PCP_TYPES] = [Self::UNMOVABLE, Self::MOVABLE, Self::RECLAIMABLE];

    /// A PCP migratetype from its raw value; `None` unless `raw < 3`.
    #[inline]
    pub const fn new(raw: u8) -> Option<Migratetype> {
        if (raw as usize) < PCP_TYPES {
            Some(Migratetype(raw))
        } else {
            None
        }
    }

    /// Which PCP list a page freed from a pageblock of raw type `block_type`
    /// goes to (spec 04 §5.1): the three basic types keep their own list,
    /// HIGHATOMIC (3) and CMA (4) are cached on the MOVABLE list, and
    /// ISOLATE (5) or any unknown value bypasses the PCP (`None`: free it
    /// straight to the zone).
    #[inline]
    pub const fn for_free(block_type: u8) -> Option<Migratetype> {
        match block_type {
            0..=2 => Some(Migratetype(block_type)),
            3 | 4 => Some(Self::MOVABLE),
            _ => None,
        }
    }

    /// The raw value (0..3).
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }
}

/// Index of one of the [`NR_PCP_LISTS`] lists of a CPU's cache (spec 04 §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListIndex(u8);

impl ListIndex {
    /// The list for `(order, mt)`, given the pageblock (THP) order if it is
    /// cached; `None` when the order bypasses the PCP (`pcp_allowed_order`).
    #[inline]
    pub const fn of(order: Order, mt: Migratetype, thp: Option<Order>) -> Option<ListIndex> {
        if order.0 <= COSTLY_ORDER {
            // spec 04 §2.2: index = 3 × order + mt
            return Some(ListIndex(PCP_TYPES as u8 * order.0 + mt.0));
        }
        match thp {
            // spec 04 §2.2: UNMOVABLE and RECLAIMABLE share list 12, MOVABLE is 13.
            Some(t) if t.0 == order.0 => Some(ListIndex(
                NR_LOWORDER_LISTS as u8 + (mt.0 == Migratetype::MOVABLE.0) as u8,
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

    /// Order of the blocks on this list (the inverse map of spec 04 §2.2).
    #[inline]
    pub const fn order(self, thp: Order) -> Order {
        if (self.0 as usize) < NR_LOWORDER_LISTS {
            Order(self.0 / PCP_TYPES as u8)
        } else {
            thp
        }
    }
}

/// A CPU number as handed out by the embedding (`CpuLocal`); the PCP uses it
/// only to index the per-zone set of caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_index_round_trips() {
        let thp = Order(9);
        for o in 0..=COSTLY_ORDER {
            for mt in Migratetype::ALL {
                let i = ListIndex::of(Order(o), mt, Some(thp)).unwrap();
                assert_eq!(i.get(), 3 * o as usize + mt.get() as usize);
                assert_eq!(i.order(thp), Order(o));
            }
        }
        let u = ListIndex::of(thp, Migratetype::UNMOVABLE, Some(thp)).unwrap();
        let r = ListIndex::of(thp, Migratetype::RECLAIMABLE, Some(thp)).unwrap();
        let m = ListIndex::of(thp, Migratetype::MOVABLE, Some(thp)).unwrap();
        assert_eq!((u.get(), r.get(), m.get()), (12, 12, 13));
        assert_eq!(m.order(thp), thp);
        assert_eq!(
            ListIndex::of(Order(4), Migratetype::MOVABLE, Some(thp)),
            None
        );
        assert_eq!(ListIndex::of(thp, Migratetype::MOVABLE, None), None);
    }

    #[test]
    fn free_type_mapping() {
        assert_eq!(Migratetype::for_free(2), Some(Migratetype::RECLAIMABLE));
        assert_eq!(Migratetype::for_free(3), Some(Migratetype::MOVABLE));
        assert_eq!(Migratetype::for_free(4), Some(Migratetype::MOVABLE));
        assert_eq!(Migratetype::for_free(5), None);
        assert_eq!(Migratetype::new(3), None);
    }
}
