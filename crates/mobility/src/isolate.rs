//! Isolating a pageblock: its free memory leaves circulation (spec 02 §8),
//! for offlining, contiguous allocation and compaction.

use pageframe_buddy::{BlockInfo, Pfn};

use crate::zone::MobileZone;
use crate::{BlockError, Blocker, MigrateType};

impl MobileZone<'_> {
    /// Isolates `pfn`'s pageblock: sets its isolate bit (keeping its type)
    /// and moves its free memory to the isolate lists, where nothing
    /// allocates from and nothing counts as free. Frames freed inside it
    /// later land there too. Refused, changing nothing, if the block is
    /// already isolated, not wholly in the zone, or holds allocated memory
    /// that is not movable (or is pinned).
    pub fn isolate_block(&mut self, pfn: Pfn) -> Result<(), BlockError> {
        if !self.span().contains(pfn) {
            return Err(BlockError::OutOfRange);
        }
        let block = self.mobility().blocks.block_range(pfn);
        if !self.span().contains_range(&block) {
            return Err(BlockError::PartialBlock);
        }
        if self.mobility().blocks.is_isolated(pfn) {
            return Err(BlockError::AlreadyIsolated);
        }
        let unmovable = self.buddy.walk(block).find_map(|(_, info)| match info {
            BlockInfo::Allocated { head, .. } if Blocker::of(&info).is_some() => Some(head),
            _ => None,
        });
        if let Some(pfn) = unmovable {
            return Err(BlockError::Unmovable { pfn });
        }
        self.isolate_unchecked(block.start);
        Ok(())
    }

    /// Sets the isolate bit of the pageblock at `start` and moves its free
    /// memory to the isolate lists (the caller checked the block).
    pub(crate) fn isolate_unchecked(&mut self, start: Pfn) {
        self.buddy.policy_mut().blocks.set_isolated(start, true);
        self.move_block_free_lists(start, MigrateType::Isolate);
    }

    /// Undoes [`MobileZone::isolate_block`]: the free memory goes back to
    /// the block's own type and merges with its free buddies there.
    pub fn unisolate_block(&mut self, pfn: Pfn) -> Result<(), BlockError> {
        if !self.span().contains(pfn) {
            return Err(BlockError::OutOfRange);
        }
        if !self.mobility().blocks.is_isolated(pfn) {
            return Err(BlockError::NotIsolated);
        }
        let block = self.mobility().blocks.block_range(pfn);
        self.buddy
            .policy_mut()
            .blocks
            .set_isolated(block.start, false);
        let base = self
            .mobility()
            .blocks
            .base(block.start)
            .unwrap_or(MigrateType::Movable);
        self.move_block_free_lists(block.start, base);
        Ok(())
    }
}
