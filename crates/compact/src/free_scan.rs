//! The free scanner (spec 03 §10): from the zone's high end downward, it
//! takes free blocks off the free lists as migration destinations, one
//! pageblock per lock hold, stopping above the migrate scanner.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::{BlockInfo, Order, Pfn};
use pageframe_mobility::{MigrateType, MobileZone};

use crate::access::locked;
use crate::engine::Run;
use crate::{COMPACT_CLUSTER_MAX, FrameMover, ZoneLock, tag};

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Run<'_, Z, M> {
    /// `isolate_freepages` (spec 03 §10.1): isolates free blocks until they
    /// cover the pending sources, walking pageblocks downward from the free
    /// cursor but never into the migrate scanner's pageblock or below.
    ///
    /// Async runs probe pageblocks sparsely (stride 32) until one yields
    /// something. Linux restarts every call at the sparse stride and leans on
    /// its free-list search (`fast_isolate_freepages`) to find a good block
    /// first; the buddy core here offers no list walk, so instead a sparse
    /// probe that finds free memory is taken as the sign of a good block:
    /// the block is rescanned in full rather than marked skip after a
    /// sample, and the full stride carries over to the run's later calls.
    ///
    /// Where superpageblocks are told apart (some tainted) and the migrate
    /// scanner is in a tainted one, targets come first from that
    /// superpageblock, scanned from its top with a cursor of its own, and
    /// only then from the free scanner's place: the tainted region's
    /// movable memory stays in it, and its free memory gathers into whole
    /// pageblocks there, where memory that cannot move claims them (ours,
    /// after the superpageblock RFC, which defragments inside tainted
    /// regions). Clean regions pack upward as Linux packs a zone, so the
    /// lower ones empty out whole.
    pub fn isolate_freepages(&mut self) {
        if let Some(shift) = self.region_shift {
            let region_end = (((self.migrate_pfn >> shift) + 1) << shift).min(self.end);
            if self.free_pfn >= region_end {
                if self.local_end != region_end {
                    self.local_end = region_end;
                    self.local_free = self.block_start(region_end - 1);
                    let at = Pfn(self.migrate_pfn);
                    let tainted = locked(self.zone, |z| {
                        z.mobility()
                            .pageblocks()
                            .superpageblocks()
                            .is_tainted_at(at)
                    });
                    // A clean region's memory packs upward as Linux packs
                    // it: the regions below empty out whole.
                    self.local_on = tainted == Some(true);
                }
                if self.local_on {
                    self.local_free = self.scan_free_blocks(self.local_free, true);
                    if self.nr_freepages >= self.nr_migratepages || self.free.is_full() {
                        return;
                    }
                }
            }
        }
        self.free_pfn = self.scan_free_blocks(self.free_pfn, false);
    }

    /// The free scan of [`Run::isolate_freepages`] from `start` down to the
    /// migrate scanner, returning where it stopped. A `local` scan (inside
    /// one superpageblock) leaves the cached free position alone.
    fn scan_free_blocks(&mut self, start: u64, local: bool) -> u64 {
        let pb = self.pb_pages;
        let mut start = start;
        let mut blk = self.block_start(start);
        let mut blk_end = (blk + pb).min(self.end);
        // Never into the migrate scanner's pageblock or below (spec 03
        // §10.1): the one holding the last frame it scanned. A batch that
        // took the rest of a pageblock leaves the cursor on the next one,
        // which it has not scanned and which still serves as destination.
        let low_limit = self.block_end(self.migrate_pfn.max(self.start + 1) - 1);
        let mut stride = self.free_stride;
        while blk >= low_limit {
            // The kernel sees the free scanner's own place (never going
            // up), also while a local scan runs below it.
            let shown = if local { self.free_pfn } else { start };
            if self.mig.checkpoint(Pfn(self.migrate_pfn), Pfn(shown)) {
                self.contended = true;
                break;
            }
            let zone = self.zone;
            let scanned = locked(zone, |z| {
                if !self.suitable_target(z, blk.max(self.start))
                    || (!self.req.ignore_skip_hint && z.mobility().pageblocks().skip(Pfn(blk)))
                {
                    return None;
                }
                let n = self.isolate_freepages_block(z, &mut start, blk_end, stride);
                let sampled = stride > 1 && n > 0;
                if start >= blk_end && !sampled {
                    // spec 03 §6.1 update_pageblock_skip: the whole block was
                    // scanned; the next run's free scan starts below it.
                    z.pageblocks_mut().set_skip(Pfn(blk), true);
                    if !local {
                        self.state.cached_free.fetch_min(blk - pb, Relaxed);
                    }
                }
                Some(n)
            });
            let n = match scanned {
                None => {
                    self.contended = true;
                    break;
                }
                Some(None) => 0,
                Some(Some(n)) => {
                    let enough = self.nr_freepages >= self.nr_migratepages || self.free.is_full();
                    if stride > 1 && n > 0 {
                        // A productive sample: scan this block in full.
                        stride = 1;
                        self.free_stride = 1;
                        if start >= blk_end {
                            start = blk.max(self.start);
                        }
                        if enough {
                            break;
                        }
                        continue;
                    }
                    if enough {
                        if start >= blk_end {
                            // Restart at the next block down next time.
                            start = blk - pb;
                        }
                        break;
                    } else if start < blk_end {
                        // Isolation failed early (watermark): don't go on.
                        break;
                    }
                    n
                }
            };
            stride = if n > 0 {
                1
            } else {
                (stride * 2).min(COMPACT_CLUSTER_MAX)
            };
            self.free_stride = stride;
            blk_end = blk;
            blk -= pb;
            start = blk;
        }
        start
    }

    /// `suitable_migration_target` (spec 03 §10.1): not a block already free
    /// at the size being built, and (unless told otherwise) a movable or
    /// CMA pageblock. Isolated pageblocks never serve.
    fn suitable_target(&self, z: &MobileZone<'_>, first: u64) -> bool {
        if let Some(BlockInfo::Free { head, order, .. }) = z.buddy().block_at(Pfn(first))
            && head.get() == first
        {
            let limit = match self.req.order {
                Some(k) if k.get() > 0 => k.get(),
                _ => self.pb,
            };
            if order.get() >= limit {
                return false;
            }
        }
        let block = z.block_type(Pfn(first));
        if block == Some(MigrateType::Isolate) {
            return false;
        }
        self.req.ignore_block_suitable
            || matches!(block, Some(MigrateType::Movable | MigrateType::Cma))
    }

    /// `isolate_freepages_block` (spec 03 §10.2) over `[*start, end)` with
    /// `stride`, non-strict: returns the frames isolated and leaves `*start`
    /// where the scan stopped.
    ///
    /// Linux samples one frame every `stride` frames and takes it only if it
    /// heads a free block; it pairs that with a search of the free lists
    /// (`fast_isolate_freepages`) to find targets quickly. The buddy core
    /// here exposes no list walk, and single-frame samples miss every free
    /// block of a regular pattern (one in-use frame every fourth frame
    /// defeats a 32-frame stride), so each sample here is a window: the first
    /// free block starting in `[pfn, pfn + stride)`, found by walking the
    /// window block by block. With stride 1 this is Linux's scan exactly.
    fn isolate_freepages_block(
        &mut self,
        z: &mut MobileZone<'_>,
        start: &mut u64,
        end: u64,
        stride: u64,
    ) -> u64 {
        let from = *start;
        let mut pfn = from;
        let mut isolated = 0u64;
        let single_frames = self
            .sources
            .as_slice()
            .iter()
            .all(|s| s.order == Order::ZERO);
        // Free frames a normal request may count, kept up to date locally
        // (every isolation below takes exactly its frames off it).
        let mut free_now = z.usable_free_pages();
        'scan: while pfn < end {
            let window = (pfn + stride).min(end);
            let mut q = pfn;
            let mut found = None;
            while q < window {
                q = match z.buddy().block_at(Pfn(q)) {
                    None => break 'scan,
                    Some(BlockInfo::Free { head, order, list }) if head.get() == q => {
                        // A free block that reaches past this pageblock is
                        // larger than a pageblock: already what compaction
                        // builds (Linux's suitability rule never lets the
                        // scanner take one), and taking it would put
                        // destinations in pageblocks the skip hints may
                        // have ruled out.
                        if pageframe_mobility::type_of_list(list) != MigrateType::Isolate
                            && q + order.pages() <= end
                        {
                            found = Some((head, order));
                            break;
                        }
                        q + order.pages()
                    }
                    Some(BlockInfo::Free { head, order, .. })
                    | Some(BlockInfo::Allocated { head, order, .. }) => {
                        (head.get() + order.pages()).max(q + 1)
                    }
                    Some(BlockInfo::Hole) => q + 1,
                };
            }
            let Some((head, order)) = found else {
                pfn = q.max(window);
                continue;
            };
            // __isolate_free_page keeps the zone above min + 2^order.
            if free_now <= self.req.marks.wmark.min + order.pages() || self.free.is_full() {
                pfn = head.get();
                break;
            }
            if order > Order::ZERO
                && single_frames
                && z.block_type(head) == Some(MigrateType::Movable)
            {
                // Only single frames are wanted: take the block frame by
                // frame, no more than needed, instead of taking it whole and
                // splitting it later (Linux before 6.9 split isolated blocks
                // into single frames too).
                let end_of_block = head.get() + order.pages();
                let mut q = head.get();
                while q < end_of_block {
                    if free_now <= self.req.marks.wmark.min + 1 || self.free.is_full() {
                        pfn = q;
                        break 'scan;
                    }
                    if z.alloc_at(Pfn(q), Order::ZERO, MigrateType::Movable)
                        .is_err()
                    {
                        break;
                    }
                    free_now -= 1;
                    z.set_tag_bits(Pfn(q), tag::TARGET, tag::TARGET);
                    self.free.push(Pfn(q), Order::ZERO);
                    self.nr_freepages += 1;
                    self.stats.isolated_free += 1;
                    isolated += 1;
                    q += 1;
                    if self.nr_migratepages <= self.nr_freepages {
                        pfn = q;
                        break 'scan;
                    }
                }
                pfn = q.max(window);
                continue;
            }
            let Ok(got) = z.take_free_block(head, MigrateType::Movable) else {
                pfn = window;
                continue;
            };
            free_now -= got.pages().min(free_now);
            z.set_tag_bits(head, tag::TARGET, tag::TARGET);
            self.free.push(head, got);
            self.nr_freepages += got.pages();
            self.stats.isolated_free += got.pages();
            isolated += got.pages();
            pfn = (head.get() + got.pages()).max(window);
            if self.nr_migratepages <= self.nr_freepages {
                break;
            }
        }
        let pfn = pfn.min(end);
        self.stats.free_scanned += pfn - from;
        *start = pfn;
        isolated
    }
}
