//! Ranges of pageblocks for contiguous allocation and memory offlining
//! (spec 02 §8, Linux `start_isolate_page_range`): isolate every pageblock a
//! range touches, check what blocks it, take its frames once they are all
//! free, and undo.

use pageframe_buddy::{BlockInfo, Pfn, PfnRange, RangeError};

use crate::zone::MobileZone;
use crate::{BlockError, MigrateType, tag};

/// What stands in the way of taking a range.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Blocker {
    /// A frame that was never handed over (firmware hole).
    Hole,
    /// An allocated block that is not movable.
    Unmovable,
    /// A movable block its owner pinned.
    Pinned,
}

impl Blocker {
    /// What `info` is to a range that must be emptied by migration: `None`
    /// for free frames and movable, unpinned allocations (the kernel can
    /// move those), else why not.
    pub fn of(info: &BlockInfo) -> Option<Blocker> {
        match *info {
            BlockInfo::Hole => Some(Blocker::Hole),
            BlockInfo::Free { .. } => None,
            BlockInfo::Allocated { tag: t, .. } if t & tag::PINNED != 0 => Some(Blocker::Pinned),
            BlockInfo::Allocated { tag: t, .. }
                if t & tag::MT_MASK != MigrateType::Movable as u32 =>
            {
                Some(Blocker::Unmovable)
            }
            BlockInfo::Allocated { .. } => None,
        }
    }
}

impl MobileZone<'_> {
    /// The pageblocks `range` touches, as one range of whole pageblocks.
    pub fn pageblock_span(&self, range: PfnRange) -> PfnRange {
        let pb = self.pageblock_order();
        let end = range
            .end
            .get()
            .checked_add(pb.pages() - 1)
            .map_or(Pfn(u64::MAX).align_down(pb), |e| Pfn(e).align_down(pb));
        PfnRange::new(range.start.align_down(pb), end)
    }

    /// The first frame of `range` that no migration can free: a hole, or an
    /// allocated block that is unmovable or pinned. Movable allocations
    /// (which the kernel may migrate away) and free frames pass.
    pub fn range_blocker(&self, range: PfnRange) -> Option<(Pfn, Blocker)> {
        self.range_usage(range).err()
    }

    /// What taking `range` would cost: the frames of movable allocations
    /// that meet it (each would be migrated once), or the first blocker
    /// (see [`MobileZone::range_blocker`]).
    pub fn range_usage(&self, range: PfnRange) -> Result<u64, (Pfn, Blocker)> {
        if !self.span().contains_range(&range) {
            return Err((range.start, Blocker::Hole));
        }
        let mut used = 0;
        for (p, info) in self.buddy.walk(range) {
            if let Some(why) = Blocker::of(&info) {
                return Err((p, why));
            }
            if let BlockInfo::Allocated { order, .. } = info {
                used += order.pages();
            }
        }
        Ok(used)
    }

    /// Isolates every pageblock `range` touches (spec 02 §8): their free
    /// memory leaves circulation, and frames freed in them later stay out of
    /// it, so that once the movable allocations inside `range` have been
    /// migrated away the whole range is free. Only `range` itself is checked
    /// for unmovable memory (the parts of the edge pageblocks outside it may
    /// hold anything). All or nothing: on error no pageblock stays isolated.
    pub fn isolate_range(&mut self, range: PfnRange) -> Result<(), BlockError> {
        if range.is_empty() || !self.span().contains_range(&range) {
            return Err(BlockError::OutOfRange);
        }
        let blocks = self.pageblock_span(range);
        if !self.span().contains_range(&blocks) {
            return Err(BlockError::PartialBlock);
        }
        if let Some((pfn, why)) = self.range_blocker(range) {
            return Err(match why {
                Blocker::Hole => BlockError::OutOfRange,
                Blocker::Unmovable | Blocker::Pinned => BlockError::Unmovable { pfn },
            });
        }
        let step = self.pageblock_order().pages();
        let mut p = blocks.start;
        while p < blocks.end {
            if self.mobility().blocks.is_isolated(p) {
                // Somebody else's range (a concurrent contiguous allocation
                // or offline): give back what this call isolated.
                self.unisolate_blocks(PfnRange::new(blocks.start, p));
                return Err(BlockError::AlreadyIsolated);
            }
            self.isolate_unchecked(p);
            p = p + step;
        }
        Ok(())
    }

    /// Undoes [`MobileZone::isolate_range`] for the same `range`.
    pub fn unisolate_range(&mut self, range: PfnRange) -> Result<(), BlockError> {
        if range.is_empty() || !self.span().contains_range(&range) {
            return Err(BlockError::OutOfRange);
        }
        let blocks = self.pageblock_span(range);
        let step = self.pageblock_order().pages();
        let mut p = blocks.start;
        while p < blocks.end {
            if !self.mobility().blocks.is_isolated(p) {
                return Err(BlockError::NotIsolated);
            }
            p = p + step;
        }
        self.unisolate_blocks(blocks);
        Ok(())
    }

    fn unisolate_blocks(&mut self, blocks: PfnRange) {
        let step = self.pageblock_order().pages();
        let mut p = blocks.start;
        while p < blocks.end {
            let _ = self.unisolate_block(p);
            p = p + step;
        }
    }

    /// Takes the frames of `range`, tiled by allocated blocks (as
    /// [`MobileZone::take_free_range`] leaves it), out of the zone: they
    /// become holes until handed over again (memory offline). Pageblocks
    /// wholly inside it go back to the type memory starts with (Linux
    /// onlines memory movable), keeping their isolate bit: memory that is
    /// gone taints no superpageblock.
    pub fn remove_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.buddy.remove_range(range)?;
        let initial = if self.mobility().grouping {
            MigrateType::Movable
        } else {
            MigrateType::Unmovable
        };
        let pb = self.pageblock_order();
        let mut p = range.start.align_up(pb);
        while p + pb.pages() <= range.end {
            let m = self.buddy.policy_mut();
            let base = m.blocks.base(p);
            if base.is_some_and(|t| t.is_mergeable() || t == MigrateType::HighAtomic) {
                if base == Some(MigrateType::HighAtomic) {
                    m.reserved_highatomic = m.reserved_highatomic.saturating_sub(pb.pages());
                }
                let isolated = m.blocks.is_isolated(p);
                m.blocks.set(p, initial);
                m.blocks.set_isolated(p, isolated);
            }
            p = p + pb.pages();
        }
        Ok(())
    }

    /// Takes every frame of `range`, which must all be free, as allocated
    /// blocks of type `mt` (the largest aligned blocks that tile it: a
    /// range of `n` frames is at most `2·log2(n)` blocks). Fails, changing
    /// nothing, naming the first frame that is not free.
    pub fn take_free_range(&mut self, range: PfnRange, mt: MigrateType) -> Result<(), RangeError> {
        self.buddy.reserve_range(range)?;
        let mut p = range.start;
        while p < range.end {
            match self.buddy.block_at(p) {
                Some(BlockInfo::Allocated { head, order, .. }) if head == p => {
                    self.buddy.set_tag(p, mt as u32);
                    p = p + order.pages();
                }
                // reserve_range tiled the range with allocated blocks.
                _ => p = p + 1,
            }
        }
        Ok(())
    }
}
