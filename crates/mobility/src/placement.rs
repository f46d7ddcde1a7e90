//! The placement policy (not in Linux): serve small allocations from the
//! fullest pageblock of their type that still has room. Sparse pageblocks
//! then only lose frames and drain into whole free 2 MiB blocks, without
//! compaction (the idea behind LLFree's "fill the fullest" choice).
//!
//! Each basic type has a target pageblock, filled by walking it from a
//! cursor; when it is full the next target is the fullest candidate of a
//! shortlist, rebuilt by one scan of the per-pageblock allocated counts.

use pageframe_buddy::{BlockInfo, Order, Pfn};

use crate::zone::MobileZone;
use crate::{MigrateType, PCP_TYPES};

/// Candidates kept per type between scans.
const SHORTLIST: usize = 64;
/// Orders the placement policy serves (the small, frequent ones).
const MAX_PLACED_ORDER: u8 = 3;

/// One type's candidates.
type Shortlist = [Pfn; SHORTLIST];

/// Per-type targets and shortlists. The shortlists (1.5 KiB) live in the
/// zone's metadata so that a zone stays small.
pub(crate) struct Targets<'a> {
    /// Current target: pageblock start and the cursor inside it.
    current: [Option<(Pfn, Pfn)>; PCP_TYPES],
    /// Candidate pageblock starts, fullest last (popped first).
    short: &'a mut [Shortlist; PCP_TYPES],
    short_len: [usize; PCP_TYPES],
    /// Placement allocations, shortlist scans.
    pub hits: u64,
    pub scans: u64,
}

impl<'a> Targets<'a> {
    /// Bytes [`Targets::carve`] needs from a buffer at any address.
    pub(crate) const fn bytes() -> usize {
        match pageframe_types::carve::bytes_for::<Shortlist>(PCP_TYPES) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// Empty targets whose shortlists live at the front of `mem`.
    pub(crate) fn carve(mem: &'a mut [core::mem::MaybeUninit<u8>]) -> Option<Targets<'a>> {
        let (short, _) =
            pageframe_types::carve::carve_init(mem, PCP_TYPES, |_| [Pfn(0); SHORTLIST])?;
        Some(Targets {
            current: [None; PCP_TYPES],
            short: short.try_into().ok()?,
            short_len: [0; PCP_TYPES],
            hits: 0,
            scans: 0,
        })
    }
}

impl MobileZone<'_> {
    /// A block of `order` for `mt` from its target pageblock, or `None` when
    /// the policy is off, the request is large, or no pageblock of the type
    /// has room (the ordinary free lists then decide).
    pub(crate) fn place(&mut self, order: Order, mt: MigrateType) -> Option<Pfn> {
        if !self.mobility().placement || order.get() > MAX_PLACED_ORDER || !mt.is_mergeable() {
            return None;
        }
        let t = mt as usize;
        // A bounded number of target changes per request.
        for _ in 0..4 {
            let (block, cursor) = match self.mobility().targets.current[t] {
                Some(c) => c,
                None => self.next_target(mt)?,
            };
            if let Some(p) = self.take_in_block(block, cursor, order, mt) {
                let targets = &mut self.buddy.policy_mut().targets;
                targets.current[t] = Some((block, p + order.pages()));
                targets.hits += 1;
                return Some(p);
            }
            self.buddy.policy_mut().targets.current[t] = None;
        }
        None
    }

    /// The first free block of at least `order` in `block` from `cursor` on,
    /// allocated; `None` if the rest of the block has none. Candidates come
    /// from the pageblock's allocated-frame bitmap; holes are skipped.
    fn take_in_block(
        &mut self,
        block: Pfn,
        cursor: Pfn,
        order: Order,
        mt: MigrateType,
    ) -> Option<Pfn> {
        if self.mobility().blocks.get(block) != Some(mt) {
            return None;
        }
        let end = block + self.mobility().blocks.pages();
        let mut from = cursor.max(block);
        // `find_unmarked` searches `from`'s own pageblock: stop at the end.
        while from < end
            && let Some(p) = self.mobility().blocks.find_unmarked(from, order)
        {
            if matches!(self.buddy.block_at(p), Some(BlockInfo::Free { order: fo, .. }) if fo >= order)
            {
                // `p` is aligned and inside a free block at least that large.
                self.alloc_at(p, order, mt).ok()?;
                return Some(p);
            }
            from = p + order.pages();
        }
        None
    }

    /// Pops the fullest shortlisted pageblock of type `mt` that has room,
    /// rescanning the counts when the shortlist runs dry.
    fn next_target(&mut self, mt: MigrateType) -> Option<(Pfn, Pfn)> {
        let t = mt as usize;
        for _ in 0..2 {
            while self.mobility().targets.short_len[t] > 0 {
                let targets = &mut self.buddy.policy_mut().targets;
                targets.short_len[t] -= 1;
                let b = targets.short[t][targets.short_len[t]];
                let blocks = &self.mobility().blocks;
                if blocks.get(b) == Some(mt) && u64::from(blocks.used(b)) < blocks.pages() {
                    self.buddy.policy_mut().targets.current[t] = Some((b, b));
                    return Some((b, b));
                }
            }
            self.rescan(mt);
            if self.mobility().targets.short_len[t] == 0 {
                return None;
            }
        }
        None
    }

    /// Fills the shortlist with the fullest pageblocks of type `mt` that are
    /// neither full nor empty (empty ones are what we try to keep), or, if
    /// there are none, with empty ones; fullest at the end.
    fn rescan(&mut self, mt: MigrateType) {
        let t = mt as usize;
        let span = self.span();
        let blocks = &self.mobility().blocks;
        let pages = blocks.pages();
        let mut best: [(u16, Pfn); SHORTLIST] = [(0, Pfn(0)); SHORTLIST];
        let mut n = 0usize;
        let mut any_empty: Option<Pfn> = None;
        for i in 0..blocks.len() {
            let b = blocks.block_start(i);
            if blocks.get(b) != Some(mt) || !span.contains(b) {
                continue;
            }
            let used = blocks.used(b);
            if u64::from(used) >= pages {
                continue;
            }
            if used == 0 {
                any_empty = any_empty.or(Some(b));
                continue;
            }
            // Keep the SHORTLIST fullest, sorted ascending by use.
            if n < SHORTLIST {
                best[n] = (used, b);
                n += 1;
                best[..n].sort_unstable_by_key(|e| e.0);
            } else if used > best[0].0 {
                best[0] = (used, b);
                best.sort_unstable_by_key(|e| e.0);
            }
        }
        let targets = &mut self.buddy.policy_mut().targets;
        targets.scans += 1;
        if n == 0 {
            if let Some(b) = any_empty {
                targets.short[t][0] = b;
                targets.short_len[t] = 1;
            } else {
                targets.short_len[t] = 0;
            }
            return;
        }
        for (k, e) in best[..n].iter().enumerate() {
            targets.short[t][k] = e.1;
        }
        targets.short_len[t] = n;
    }

    /// Allocations the placement policy served, and shortlist scans.
    pub fn placement_stats(&self) -> (u64, u64) {
        let t = &self.mobility().targets;
        (t.hits, t.scans)
    }
}
