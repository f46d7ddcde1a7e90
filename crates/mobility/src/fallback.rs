//! Fallback when a type's own lists are empty: claim a whole pageblock of
//! another type, or steal one block from it (spec 02 §5), and retyping a
//! pageblock with its free memory (`move_freepages_block`, spec 02 §4).

use pageframe_buddy::{BlockInfo, Order, Pfn, PfnRange};

use crate::migratetype::list_of;
use crate::zone::{AllocMode, MobileZone};
use crate::{BlockError, MigrateType, Placement, fallbacks, tag};

/// The mixed regions a fallback looks at, at most (a bound on the slow
/// path's work; grouping keeps mixed regions few).
const PAIR_SCAN: usize = 64;

/// What `find_suitable_fallback` found at one order.
enum Found {
    Type(MigrateType),
    None,
    /// Claiming is not worth it at this order or below.
    TooSmall,
}

impl MobileZone<'_> {
    /// When a type's own lists are empty (spec 02 §5.2): a claim, else
    /// (unless NOFRAGMENT) a steal; for memory that cannot move, kept
    /// inside tainted superpageblocks as the placement asks
    /// ([`MobileZone::fallback_steered`]).
    pub(crate) fn fallback(
        &mut self,
        order: Order,
        mt: MigrateType,
        mode: AllocMode,
    ) -> Option<Pfn> {
        if self.steers(mt) {
            return self.fallback_steered(order, mt, mode);
        }
        if let Some(p) = self.claim(order, mt, mode) {
            return Some(p);
        }
        if mode.contains(AllocMode::NOFRAGMENT) {
            return None;
        }
        self.steal(order, mt)
    }

    /// The lowest order a claim may take for a request of `order`: a whole
    /// pageblock under NOFRAGMENT (spec 02 §5.3).
    pub(crate) fn claim_min(&self, order: Order, mode: AllocMode) -> Order {
        let pb = self.pageblock_order();
        if order < pb && mode.contains(AllocMode::NOFRAGMENT) {
            pb
        } else {
            order
        }
    }

    /// spec 02 §5.3 `should_try_claim_block`.
    pub(crate) fn should_try_claim(&self, cur: Order, mt: MigrateType) -> bool {
        let pb = self.pageblock_order().get();
        cur.get() >= pb / 2
            || matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
            || !self.mobility().grouping
    }

    fn find_fallback(&self, cur: Order, mt: MigrateType, claimable: bool) -> Found {
        if claimable && !self.should_try_claim(cur, mt) {
            return Found::TooSmall;
        }
        fallbacks(mt)
            .iter()
            .copied()
            .find(|fb| self.free_blocks_of(cur, *fb) > 0)
            .map_or(Found::None, Found::Type)
    }

    /// spec 02 §5.3 `__rmqueue_claim`: largest fallback block first, after
    /// a pinned neighbour ([`MobileZone::claim_pinned_neighbour`], ours,
    /// unless the placement is Linux's).
    pub(crate) fn claim(&mut self, order: Order, mt: MigrateType, mode: AllocMode) -> Option<Pfn> {
        let min = self.claim_min(order, mode);
        let max = self.buddy.max_order();
        if self.mobility().placement != Placement::Linux
            && let Some(p) = self.claim_pinned_neighbour(order, mt)
        {
            return Some(p);
        }
        for cur in (min.get()..=max.get()).rev() {
            let cur = Order::new(cur)?;
            let Some((head, fb)) = self.widest_fallback(cur, mt)? else {
                continue;
            };
            if let Some(p) = self.try_claim(head, cur, order, mt, fb) {
                return Some(p);
            }
        }
        None
    }

    /// The block `__rmqueue_claim` would try at order `cur`: of the first
    /// fallback type with a free block of that order, the one with the
    /// most free memory around it (the one whose pageblock most likely
    /// passes the half-free rule). `Some(None)`: none at this order;
    /// `None`: claiming is not worth it at this order or below.
    pub(crate) fn widest_fallback(
        &self,
        cur: Order,
        mt: MigrateType,
    ) -> Option<Option<(Pfn, MigrateType)>> {
        match self.find_fallback(cur, mt, true) {
            Found::Type(fb) => Some(self.buddy.roomiest_free(cur, list_of(fb)).map(|h| (h, fb))),
            Found::None => Some(None),
            Found::TooSmall => None,
        }
    }

    /// spec 02 §5.3 `try_to_claim_block`.
    pub(crate) fn try_claim(
        &mut self,
        head: Pfn,
        cur: Order,
        order: Order,
        mt: MigrateType,
        fb: MigrateType,
    ) -> Option<Pfn> {
        let pb = self.pageblock_order();
        if cur >= pb {
            // Whole pageblocks are free: retype them all and split for us.
            self.retype_span(PfnRange::new(head, head + cur.pages()), mt);
            self.buddy.move_free_block(head, list_of(mt))?;
            self.buddy.alloc_at(head, order).ok()?;
            self.buddy.set_tag(head, mt as u32);
            let s = &mut self.buddy.policy_mut().stats;
            s.claims_whole += 1;
            return Some(head);
        }
        self.buddy.policy_mut().stats.fragmenting += 1;
        let block = self.mobility().blocks.block_range(head);
        if !self.span().contains_range(&block) {
            return None;
        }
        let (mut free, mut movable) = (0u64, 0u64);
        for (_, info) in self.buddy.walk(block) {
            match info {
                BlockInfo::Free { order, .. } => free += order.pages(),
                BlockInfo::Allocated { order, tag: t, .. }
                    if t & tag::MT_MASK == MigrateType::Movable as u32 =>
                {
                    movable += order.pages()
                }
                _ => {}
            }
        }
        let pages = block.len();
        let alike = if mt == MigrateType::Movable {
            movable
        } else if fb == MigrateType::Movable {
            pages - free - movable
        } else {
            0
        };
        // A movable claim must not leave a superpageblock clean with memory
        // that cannot move still in it.
        let keeps_taint = pages - free - movable > 0 && self.last_taint(block.start, mt);
        if (free + alike >= pages / 2 || !self.mobility().grouping) && !keeps_taint {
            self.move_block_free_lists(block.start, mt);
            self.buddy.policy_mut().stats.claims_partial += 1;
            return self.smallest(order, mt, mt);
        }
        self.buddy.policy_mut().stats.claims_refused += 1;
        None
    }

    /// spec 02 §5.4 `__rmqueue_steal`: the smallest fallback block, split
    /// with its remainders left on the fallback type's lists.
    pub(crate) fn steal(&mut self, order: Order, mt: MigrateType) -> Option<Pfn> {
        for cur in order.get()..=self.buddy.max_order().get() {
            let cur = Order::new(cur)?;
            if let Found::Type(fb) = self.find_fallback(cur, mt, false) {
                // From the roomiest fallback chunk: steals gather in the
                // chunks a later claim takes whole, rather than one frame in
                // each full chunk.
                let head = self.buddy.roomiest_free(cur, list_of(fb))?;
                self.buddy.alloc_at(head, order).ok()?;
                self.buddy.set_tag(head, mt as u32);
                let fragmenting = cur < self.pageblock_order();
                let s = &mut self.buddy.policy_mut().stats;
                s.steals += 1;
                s.fragmenting += u64::from(fragmenting);
                return Some(head);
            }
        }
        None
    }

    /// Where an unmovable or reclaimable request falls back first (not
    /// Linux's rule, which looks at block sizes only): it claims a
    /// pageblock of a fallback type that shares a region (a maximum-order
    /// block) with a pageblock of its own type, whatever that pageblock
    /// holds. A region with one unmovable frame can never be a free
    /// maximum-order block, so memory that cannot move, put beside memory
    /// that cannot move, keeps other regions whole; the claimed
    /// pageblock's movable frames are still movable, and as they are freed
    /// its memory serves the request's type. Neither NOFRAGMENT nor the
    /// half rule (spec 02 §5.3) holds this claim back: both guard regions
    /// that are not pinned yet (the lab's `mixed-churn` scenario compares
    /// the two: `docs/results.md`).
    pub(crate) fn claim_pinned_neighbour(&mut self, order: Order, mt: MigrateType) -> Option<Pfn> {
        let (head, cur, fb) = self.pinned_neighbour(order, mt)?;
        if cur >= self.pageblock_order() {
            return self.try_claim(head, cur, order, mt, fb);
        }
        let block = self.mobility().blocks.block_range(head);
        self.move_block_free_lists(block.start, mt);
        let s = &mut self.buddy.policy_mut().stats;
        s.claims_partial += 1;
        s.fragmenting += 1;
        self.smallest(order, mt, mt)
    }

    /// The pageblock [`MobileZone::claim_pinned_neighbour`] takes: of a
    /// fallback type, wholly inside the zone, in a region that holds a
    /// pageblock of type `mt`, with a free block of at least `min`; the one
    /// with the most free memory, and its largest free block. At most
    /// [`PAIR_SCAN`] mixed regions are looked at.
    fn pinned_neighbour(&self, min: Order, mt: MigrateType) -> Option<(Pfn, Order, MigrateType)> {
        if !self.mobility().grouping
            || !matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
        {
            return None;
        }
        let blocks = &self.mobility().blocks;
        let mut best: Option<(u64, Pfn, Order, MigrateType)> = None;
        for region in blocks.mixed_regions().take(PAIR_SCAN) {
            if !blocks
                .region_starts(region)
                .any(|p| blocks.get(p) == Some(mt))
            {
                continue;
            }
            for start in blocks.region_starts(region) {
                let Some(fb) = blocks.get(start).filter(|t| fallbacks(mt).contains(t)) else {
                    continue;
                };
                let block = blocks.block_range(start);
                if !self.span().contains_range(&block) {
                    continue;
                }
                let (free, big) = self.buddy.free_room(block, list_of(fb));
                if let Some((head, o)) = big
                    && o >= min
                    && best.is_none_or(|b| free > b.0)
                {
                    best = Some((free, head, o, fb));
                }
            }
        }
        best.map(|(_, head, o, fb)| (head, o, fb))
    }

    /// Sets the type of every pageblock in `range` (no list changes).
    pub(crate) fn retype_span(&mut self, range: PfnRange, mt: MigrateType) {
        let step = self.mobility().blocks.pages();
        let mut p = range.start.align_down(self.pageblock_order());
        while p < range.end {
            self.buddy.policy_mut().blocks.set(p, mt);
            p = p + step;
        }
    }

    /// Retypes `pfn`'s pageblock to `mt` and moves its free memory to `mt`'s
    /// lists (`move_freepages_block`). Returns the free frames moved.
    /// Refused for `Isolate` and `HighAtomic` (use `isolate_block` and
    /// `reserve_highatomic`), and for blocks that are isolated or reserved.
    pub fn set_block_type(&mut self, pfn: Pfn, mt: MigrateType) -> Result<u64, BlockError> {
        if !self.span().contains(pfn) {
            return Err(BlockError::OutOfRange);
        }
        // Isolation and the highatomic reserve have their own operations,
        // which keep their accounting.
        if matches!(mt, MigrateType::Isolate | MigrateType::HighAtomic)
            || self.mobility().blocks.is_isolated(pfn)
        {
            return Err(BlockError::BadType);
        }
        if self.mobility().blocks.get(pfn) == Some(MigrateType::HighAtomic) {
            return Err(BlockError::BadType);
        }
        let block = self.mobility().blocks.block_range(pfn);
        if !self.span().contains_range(&block) {
            return Err(BlockError::PartialBlock);
        }
        Ok(self.move_block_free_lists(block.start, mt))
    }

    /// Sets the type bits of the block at `start` and moves its free memory
    /// to the list of its new effective type (a free block larger than the
    /// pageblock is carved first). Returns the frames moved.
    pub(crate) fn move_block_free_lists(&mut self, start: Pfn, mt: MigrateType) -> u64 {
        if mt != MigrateType::Isolate {
            self.buddy.policy_mut().blocks.set(start, mt);
        }
        let eff = self.mobility().blocks.get(start).unwrap_or(mt);
        let block = self.mobility().blocks.block_range(start);
        self.buddy.move_free_range(block, list_of(eff))
    }
}
