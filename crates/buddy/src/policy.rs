//! The policy hook: which free list a block belongs to and whether blocks on
//! different lists may merge. The buddy core is mechanism only; the mobility
//! layer (migratetypes, pageblocks) supplies the policy: mechanism below,
//! policy above.

use crate::{Order, Pfn};

/// Number of free lists each order keeps (room for Linux's six
/// migratetypes: unmovable, movable, reclaimable, highatomic, CMA, isolate;
/// a power of two so list indices are masked rather than bounds-checked on
/// the hot path).
pub const MAX_LISTS: usize = 8;

/// Which of an order's free lists a block is on. The core gives lists no
/// meaning; the policy does (e.g. one list per migratetype).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
#[repr(transparent)]
pub struct ListId(u8);

impl ListId {
    /// List 0, the only list a [`SingleList`] policy uses.
    pub const DEFAULT: ListId = ListId(0);

    /// `Some(list)` if `n < MAX_LISTS`.
    #[inline]
    pub const fn new(n: u8) -> Option<ListId> {
        if (n as usize) < MAX_LISTS {
            Some(ListId(n))
        } else {
            None
        }
    }

    /// The raw list number.
    #[inline]
    pub const fn get(self) -> u8 {
        self.0
    }

    /// From a list number stored in frame metadata (always `< MAX_LISTS`).
    #[inline]
    pub(crate) const fn from_stored(n: u8) -> ListId {
        debug_assert!((n as usize) < MAX_LISTS);
        ListId(n)
    }

    #[inline]
    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Placement and merge policy consulted by the buddy core.
pub trait MergePolicy {
    /// The list a block freed at `pfn` goes to. Looked up when memory
    /// reaches the free lists (spec 02 §4): for a block of at least the
    /// chunk order at each insertion; below it when a chunk with no free
    /// frame gets one (the chunk's free blocks then share that list). Must
    /// name one list for all frames of a chunk.
    fn list_for(&self, pfn: Pfn) -> ListId;

    /// Whether a block on `list` may merge with its free buddy, of the same
    /// `order`, that sits on a different list `buddy_list`. The merged block
    /// goes on `list`. Only asked when the lists differ.
    fn can_merge(&self, order: Order, list: ListId, buddy_list: ListId) -> bool {
        let _ = (order, list, buddy_list);
        false
    }

    /// Told after a buddy at `buddy` (of `order`) from another list was merged
    /// into a block that goes on `into`, so the policy can retag the buddy's
    /// frames (spec 01 §5: the pageblocks covered by the buddy take the new type).
    fn merged(&mut self, buddy: Pfn, order: Order, into: ListId) {
        let _ = (buddy, order, into);
    }

    /// Whether a free block of at least the chunk order at `pfn`, going on
    /// `list`, goes to the tail of its free list (handed out after the
    /// others): memory the policy keeps for other uses while there is
    /// other memory. Asked at each insertion of such a block.
    #[inline]
    fn keep_for_last(&self, pfn: Pfn, list: ListId) -> bool {
        let _ = (pfn, list);
        false
    }
}

/// The trivial policy: one list, everything merges.
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleList;

impl MergePolicy for SingleList {
    #[inline]
    fn list_for(&self, _pfn: Pfn) -> ListId {
        ListId::DEFAULT
    }
}
