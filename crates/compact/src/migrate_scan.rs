//! The migrate scanner (spec 03 §9): from the zone's low end upward, it
//! isolates movable in-use blocks, one pageblock per lock hold, a batch at
//! a time (see [`Run::batch_frames`]).

use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::{BlockInfo, Pfn};
use pageframe_mobility::{MigrateType, MobileZone, tag as mtag};

use crate::access::locked;
use crate::control::RunKind;
use crate::engine::Run;
use crate::isolated::Source;
use crate::{COMPACT_CLUSTER_MAX, FrameMover, MIGRATE_BATCH_MAX, ZoneLock, tag};

/// What `isolate_migratepages` found.
pub(crate) enum Isolate {
    /// Stop the run (a checkpoint asked, or the lock refused).
    Abort,
    /// Nothing isolated before reaching the free scanner.
    None,
    /// A batch is ready to migrate.
    Success,
}

/// How one pageblock went.
enum BlockScan {
    /// Not scanned (skip hint, unsuitable type): go to the next block.
    Skipped,
    /// Scanned up to (not including) this frame.
    Scanned(u64),
}

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Run<'_, Z, M> {
    /// Frames a batch isolates before it is migrated. Linux stops at
    /// `COMPACT_CLUSTER_MAX` (spec 03 §9.3), which matters to a run that
    /// can end before its pageblock is done: a direct compactor that may
    /// capture a block smaller than a pageblock (§8), a proactive run that
    /// reaches its score (§5.1). Any other run finishes each pageblock it
    /// starts (§5.1), so its batch takes the rest of the pageblock, up to
    /// the migration batch's `MIGRATE_BATCH_MAX` (§12): the same moves in
    /// fewer batches, each one TLB flush for the kernel.
    pub fn batch_frames(&self) -> u64 {
        let early_end = self.req.kind == RunKind::Proactive
            || (self.req.capture && self.req.order.is_some_and(|k| k.get() < self.pb));
        if early_end {
            COMPACT_CLUSTER_MAX
        } else {
            MIGRATE_BATCH_MAX
        }
    }

    /// `isolate_migratepages` (spec 03 §9.1): finds the next pageblock worth
    /// scanning below the free scanner and isolates a batch from it.
    pub fn isolate_migratepages(&mut self) -> Isolate {
        let mut low = self.migrate_pfn;
        let mut block_end = self.block_end(low);
        let first_new = self.sources.len();
        while block_end <= self.free_pfn && block_end <= self.end {
            // The local free scanner met this scanner inside its
            // superpageblock (see `isolate_freepages`): the rest of it
            // holds what was just moved there; go on in the next one,
            // giving back the destinations left behind (they would lie
            // below this scanner).
            if self.local_on && low < self.local_end && self.local_free >> self.pb <= low >> self.pb
            {
                low = self.local_end;
                block_end = self.block_end(low);
                self.release_freepages();
                continue;
            }
            if self.mig.checkpoint(Pfn(low), Pfn(self.free_pfn)) {
                self.migrate_pfn = low;
                return Isolate::Abort;
            }
            let zone = self.zone;
            match locked(zone, |z| self.scan_block(z, low, block_end)) {
                None => {
                    self.migrate_pfn = low;
                    return Isolate::Abort;
                }
                Some(BlockScan::Skipped) => {
                    low = block_end;
                    block_end += self.pb_pages;
                }
                Some(BlockScan::Scanned(next)) => {
                    low = next;
                    break;
                }
            }
        }
        self.migrate_pfn = low;
        if !self.confirm_isolation(first_new) {
            return Isolate::Abort;
        }
        if self.sources.is_empty() {
            Isolate::None
        } else {
            Isolate::Success
        }
    }

    /// Asks the kernel to isolate the blocks the scanner just marked
    /// (outside the zone lock); refused ones are unmarked. `false` if the
    /// lock refused.
    fn confirm_isolation(&mut self, first: usize) -> bool {
        let mut refused = [false; crate::isolated::SOURCE_CAP];
        let mut any = false;
        for (i, r) in refused
            .iter_mut()
            .enumerate()
            .take(self.sources.len())
            .skip(first)
        {
            let s = self.sources.as_slice()[i];
            if self.mig.isolate(s.pfn, s.order, s.tag) {
                self.sources.confirm(i);
            } else {
                *r = true;
                any = true;
            }
        }
        if !any {
            return true;
        }
        let zone = self.zone;
        let sources = &self.sources;
        let ok = locked(zone, |z| {
            for (i, s) in sources.as_slice().iter().enumerate() {
                if refused[i] {
                    z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
                }
            }
        });
        let mut i = 0;
        let mut dropped = 0u64;
        self.sources.retain(|s| {
            let keep = !refused[i];
            i += 1;
            if !keep {
                dropped += s.order.pages();
            }
            keep
        });
        self.stats.isolate_refused += refused.iter().filter(|&&r| r).count() as u64;
        self.nr_migratepages -= dropped.min(self.nr_migratepages);
        ok.is_some()
    }

    /// One pageblock under the lock: skip hint, suitability, then isolation.
    fn scan_block(&mut self, z: &mut MobileZone<'_>, low: u64, end: u64) -> BlockScan {
        let at_start = low & (self.pb_pages - 1) == 0;
        if at_start && !self.req.ignore_skip_hint && z.mobility().pageblocks().skip(Pfn(low)) {
            return BlockScan::Skipped;
        }
        if !self.suitable_source(z, self.block_start(low).max(self.start)) {
            self.update_cached_migrate(end);
            return BlockScan::Skipped;
        }
        BlockScan::Scanned(self.isolate_block(z, low, end))
    }

    /// `suitable_migration_source` (spec 03 §9.1).
    fn suitable_source(&self, z: &MobileZone<'_>, first: u64) -> bool {
        if let Some(BlockInfo::Allocated { order, .. }) = z.buddy().block_at(Pfn(first))
            && order.get() >= self.pb
        {
            return false;
        }
        if !(self.req.is_async() && self.req.is_direct()) {
            return true;
        }
        // spec 03 §14.3: async direct compaction for a request of one type
        // stays out of other types' pageblocks.
        let block = z.block_type(Pfn(first));
        if self.req.migratetype == MigrateType::Movable {
            matches!(block, Some(MigrateType::Movable | MigrateType::Cma))
        } else {
            block == Some(self.req.migratetype)
        }
    }

    /// `update_cached_migrate` (spec 03 §6.2): the next run starts after the
    /// pageblock that holds frame `end - 1`; async runs only move the async
    /// entry.
    pub fn update_cached_migrate(&self, end: u64) {
        let p = self.block_end(end - 1);
        self.state.cached_migrate[0].fetch_max(p, Relaxed);
        if !self.req.is_async() {
            self.state.cached_migrate[1].fetch_max(p, Relaxed);
        }
    }

    /// `isolate_migratepages_block` (spec 03 §9.3) over `[low, end)` inside
    /// one pageblock. Returns where the scan stopped.
    fn isolate_block(&mut self, z: &mut MobileZone<'_>, low: u64, end: u64) -> u64 {
        let block = Pfn(self.block_start(low));
        let at_start = low & (self.pb_pages - 1) == 0;
        let ignore_skip = self.req.ignore_skip_hint;
        let mut skip_updated = false;
        // Async direct compaction gives up an order-aligned chunk at the
        // first frame it cannot isolate: the chunk could not become free.
        let chunk = match self.req.order {
            Some(k) if self.req.is_direct() && self.req.is_async() => Some(k.pages()),
            _ => None,
        };
        let mut next_skip = chunk.map_or(0, |c| (low & !(c - 1)) + c);
        let mut chunk_first = self.sources.len();
        let mut nr_isolated = 0u64;
        let batch = self.batch_frames();
        let mut pfn = low;
        while pfn < end {
            if let Some(c) = chunk
                && pfn >= next_skip
            {
                if nr_isolated > 0 {
                    break;
                }
                next_skip = (pfn & !(c - 1)) + c;
                chunk_first = self.sources.len();
            }
            let (failed, next) = match z.buddy().block_at(Pfn(pfn)) {
                None => break,
                Some(BlockInfo::Hole) => (false, pfn + 1),
                Some(BlockInfo::Free { head, order, .. }) => (false, head.get() + order.pages()),
                Some(BlockInfo::Allocated {
                    head,
                    order,
                    tag: t,
                }) => {
                    let next = head.get() + order.pages();
                    let too_big = order.get() >= self.pb
                        || (order.get() > 0 && self.req.order.is_some_and(|k| order >= k));
                    let movable = t & mtag::MT_MASK == MigrateType::Movable as u32
                        && t & mtag::PINNED == 0
                        && t & tag::MASK == 0;
                    if head.get() < pfn || too_big || !movable {
                        (true, next)
                    } else {
                        if at_start && !skip_updated {
                            skip_updated = true;
                            // The first isolation claims the block: if another
                            // compactor already marked it, leave it to them.
                            if !ignore_skip {
                                let was = z.mobility().pageblocks().skip(block);
                                if !was {
                                    z.pageblocks_mut().set_skip(block, true);
                                } else if !self.finish_pageblock {
                                    pfn = end;
                                    break;
                                }
                            }
                        }
                        if !self.sources.push(Source {
                            pfn: head,
                            order,
                            tag: t,
                            confirmed: false,
                        }) {
                            break;
                        }
                        z.set_tag_bits(head, tag::ISOLATED, tag::ISOLATED);
                        self.nr_migratepages += order.pages();
                        nr_isolated += order.pages();
                        self.stats.isolated_source += order.pages();
                        pfn = next;
                        if self.sources.is_full()
                            || (self.nr_migratepages >= batch && !self.finish_pageblock)
                        {
                            break;
                        }
                        continue;
                    }
                }
            };
            pfn = next.max(pfn + 1);
            if failed && let Some(c) = chunk {
                // Put back what this chunk isolated and jump past it.
                if nr_isolated > 0 {
                    for s in &self.sources.as_slice()[chunk_first..] {
                        z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
                    }
                    self.sources.truncate(chunk_first);
                    self.nr_migratepages -= nr_isolated.min(self.nr_migratepages);
                    self.stats.isolated_source -= nr_isolated.min(self.stats.isolated_source);
                    nr_isolated = 0;
                }
                if pfn < next_skip {
                    pfn = next_skip;
                }
                next_skip += c;
                chunk_first = self.sources.len();
            }
        }
        let pfn = pfn.min(end);
        self.stats.migrate_scanned += pfn - low;
        if pfn == end && (nr_isolated == 0 || self.finish_pageblock) {
            if at_start && !skip_updated && !ignore_skip {
                z.pageblocks_mut().set_skip(block, true);
            }
            self.update_cached_migrate(end);
        }
        pfn
    }
}
