//! The zone compaction loop (`compact_zone`, spec 03 §5) and its finish
//! test (`compact_finished`, §5.1).

use core::ops::Range;
use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::{Order, Pfn};
use pageframe_mobility::{MigrateType, MobileZone, Placement, fallbacks};

use crate::access::locked;
use crate::control::{CompactOutcome, CompactRequest, RunKind, RunStats};
use crate::isolated::{FreePages, SOURCE_CAP, Sources};
use crate::migrate_scan::Isolate;
use crate::skip::reset_skip_hints;
use crate::state::UNSET;
use crate::suitable::suit_allocation_order;
use crate::{CompactResult, CompactState, CompactStats, FrameMover, MigrateMode, Move, ZoneLock};

/// One run's working state (`compact_control`, spec 03 §3.3).
pub(crate) struct Run<'r, Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> {
    pub zone: &'r Z,
    pub state: &'r CompactState,
    pub mig: &'r mut M,
    pub req: CompactRequest,
    /// The zone's span `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Pageblock order and size.
    pub pb: u8,
    pub pb_pages: u64,
    /// The scanners' cursors.
    pub migrate_pfn: u64,
    pub free_pfn: u64,
    pub whole_zone: bool,
    /// The free scanner's sampling stride (see `isolate_freepages`).
    pub free_stride: u64,
    /// Log2 of a superpageblock's frames, when targets keep to the
    /// migrate scanner's superpageblock first (see `isolate_freepages`).
    pub region_shift: Option<u8>,
    /// The end of the superpageblock the local free cursor scans, whether
    /// it does (the superpageblock is tainted), and the cursor.
    pub local_end: u64,
    pub local_on: bool,
    pub local_free: u64,
    /// Scan the rest of the current pageblock even past a full batch.
    pub finish_pageblock: bool,
    pub sources: Sources,
    /// Frames isolated as sources and not yet given a destination.
    pub nr_migratepages: u64,
    pub free: FreePages,
    /// Frames held in `free`.
    pub nr_freepages: u64,
    pub stats: RunStats,
    pub captured: Option<Pfn>,
    pub contended: bool,
    /// The moves of the batch being migrated: `moves[i]` is source `i`'s
    /// (`migrate_batch`).
    pub moves: [Move; SOURCE_CAP],
    /// A batch is being migrated: its moves are not settled yet.
    pub migrating: bool,
    /// The moves the kernel is making now (`moves[range]`).
    pub in_flight: Option<Range<usize>>,
}

/// A run ends in [`Run::finish`], which leaves it holding nothing; a run
/// dropped holding something is one a panic in the kernel's migrator cut
/// short, and gives everything back (see [`Run::give_back`]).
impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Drop for Run<'_, Z, M> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Run<'_, Z, M> {
    /// First frame of `pfn`'s pageblock.
    #[inline]
    pub fn block_start(&self, pfn: u64) -> u64 {
        pfn & !(self.pb_pages - 1)
    }

    /// First frame after `pfn`'s pageblock (`pageblock_end_pfn`).
    #[inline]
    pub fn block_end(&self, pfn: u64) -> u64 {
        self.block_start(pfn) + self.pb_pages
    }

    /// Whether the scanners met (same pageblock or crossed).
    #[inline]
    pub fn scanners_met(&self) -> bool {
        self.free_pfn >> self.pb <= self.migrate_pfn >> self.pb
    }

    /// The last pageblock's first frame: where a fresh free scan starts.
    fn free_start(&self) -> u64 {
        self.block_start(self.end - 1)
    }

    /// Starting positions (spec 03 §5): the zone's ends for a whole-zone
    /// run, else the cached positions, clamped into the zone.
    fn init_positions(&mut self) {
        let st = self.state;
        let sync = usize::from(self.req.mode != MigrateMode::Async);
        let free_start = self.free_start();
        let mut free = st.cached_free.load(Relaxed);
        if free < self.start || free >= self.end {
            free = free_start;
            st.cached_free.store(free, Relaxed);
        }
        let mut migrate = st.cached_migrate[sync].load(Relaxed);
        if migrate < self.start || migrate >= self.end {
            migrate = self.start;
            st.cached_migrate[0].store(migrate, Relaxed);
            st.cached_migrate[1].store(migrate, Relaxed);
        }
        // Keep the other cache entry valid too: updates only ever raise it.
        for c in &st.cached_migrate {
            let v = c.load(Relaxed);
            if v < self.start || v >= self.end {
                c.store(self.start, Relaxed);
            }
        }
        if self.whole_zone {
            self.migrate_pfn = self.start;
            self.free_pfn = free_start;
        } else {
            self.migrate_pfn = migrate;
            self.free_pfn = free;
            let init = st.init_migrate.load(Relaxed);
            let init = if init == UNSET { self.start } else { init };
            if migrate <= init {
                self.whole_zone = true;
            }
        }
    }

    /// `compact_finished` (spec 03 §5.1).
    fn finished(&mut self) -> CompactResult {
        if self.scanners_met() {
            self.state
                .reset_cached_positions(self.start, self.free_start());
            if self.req.is_direct() {
                self.state.blockskip_flush.store(true, Relaxed);
            }
            return if self.whole_zone {
                CompactResult::Complete
            } else {
                CompactResult::PartialSkipped
            };
        }
        if self.contended {
            return CompactResult::Contended;
        }
        if self.req.kind == RunKind::Proactive {
            let low = self.req.proactive_low;
            let score = locked(self.zone, |z| crate::proactive::fragmentation_score(z));
            return match score {
                None => CompactResult::Contended,
                Some(s) if s > low => CompactResult::Continue,
                Some(_) => CompactResult::Success,
            };
        }
        let Some(order) = self.req.order else {
            return CompactResult::Continue;
        };
        // Always finish a pageblock before stopping.
        if self.migrate_pfn & (self.pb_pages - 1) != 0 {
            return CompactResult::Continue;
        }
        let mt = self.req.migratetype;
        let found = locked(self.zone, |z| suitable_page_exists(z, order, mt));
        match found {
            None => CompactResult::Contended,
            Some(true) => CompactResult::Success,
            Some(false) => CompactResult::Continue,
        }
    }
}

/// Whether a block of `order` or more is free on `mt`'s lists, on CMA for a
/// movable request, or on a fallback list from which `mt` would claim it
/// (spec 03 §5.1, `find_suitable_fallback` with claiming).
fn suitable_page_exists(z: &MobileZone<'_>, order: Order, mt: MigrateType) -> bool {
    let max = z.buddy().max_order().get();
    let pb = z.pageblock_order().get();
    (order.get()..=max).filter_map(Order::new).any(|o| {
        if z.free_blocks_of(o, mt) > 0 {
            return true;
        }
        if mt == MigrateType::Movable && z.free_blocks_of(o, MigrateType::Cma) > 0 {
            return true;
        }
        // spec 02 §5.3 should_try_claim_block: claiming pays off for big
        // blocks, and always for unmovable and reclaimable requests.
        let claims = o.get() >= pb / 2
            || matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
            || !z.mobility().grouping();
        claims && fallbacks(mt).iter().any(|&f| z.free_blocks_of(o, f) > 0)
    })
}

/// The superpageblock size, when a run's targets keep to the migrate
/// scanner's superpageblock first: under `Placement::Superpageblock`, in a
/// zone of several superpageblocks some of which are tainted.
fn local_regions(z: &MobileZone<'_>) -> Option<u8> {
    let spb = z.mobility().pageblocks().superpageblocks();
    (z.placement() == Placement::Superpageblock && spb.len() > 1 && spb.tainted() > 0)
        .then(|| spb.shift())
}

/// Runs compaction on one zone (`compact_zone`, spec 03 §5): migrates
/// movable blocks from the bottom of the zone into free frames at the top
/// until the request is satisfied, the scanners meet, or the run is aborted.
///
/// `state` is the zone's [`CompactState`]; `migrator` moves the blocks.
/// Deferral is the caller's business (see [`crate::try_to_compact_pages`]).
/// The zone lock is taken per pageblock scanned and per block migrated,
/// never across a `migrator` call.
pub fn compact_zone<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
    zone: &Z,
    state: &CompactState,
    migrator: &mut M,
    req: &CompactRequest,
) -> CompactOutcome {
    let Some((span, pb, max_order, region_shift)) = locked(zone, |z| {
        (
            z.span(),
            z.pageblock_order(),
            z.buddy().max_order(),
            local_regions(z),
        )
    }) else {
        return CompactOutcome::early(CompactResult::Contended);
    };
    if let Some(order) = req.order {
        if order > max_order {
            return CompactOutcome::early(CompactResult::Skipped);
        }
        let mark = req.marks.get(req.mark);
        let suit = locked(zone, |z| {
            suit_allocation_order(
                z,
                order,
                mark,
                &req.marks,
                req.extfrag_threshold,
                req.is_async(),
                req.migratetype == MigrateType::Movable,
            )
        });
        match suit {
            None => return CompactOutcome::early(CompactResult::Contended),
            Some(CompactResult::Continue) => {}
            Some(r) => return CompactOutcome::early(r),
        }
        if state.compaction_restarting(order) {
            reset_skip_hints(zone, state);
        }
    }
    let mut run = Run {
        zone,
        state,
        mig: migrator,
        req: *req,
        start: span.start.get(),
        end: span.end.get(),
        pb: pb.get(),
        pb_pages: pb.pages(),
        migrate_pfn: 0,
        free_pfn: 0,
        whole_zone: req.whole_zone,
        free_stride: if req.mode == MigrateMode::Async {
            crate::COMPACT_CLUSTER_MAX
        } else {
            1
        },
        region_shift,
        local_end: 0,
        local_on: false,
        local_free: 0,
        finish_pageblock: false,
        sources: Sources::new(),
        nr_migratepages: 0,
        free: FreePages::new(),
        nr_freepages: 0,
        stats: RunStats::default(),
        captured: None,
        contended: false,
        moves: [Move::new(Pfn(0), Pfn(0), Order::ZERO); SOURCE_CAP],
        migrating: false,
        in_flight: None,
    };
    run.init_positions();
    let result = run.main_loop();
    run.finish(result)
}

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Run<'_, Z, M> {
    fn main_loop(&mut self) -> CompactResult {
        let sync = self.req.mode != MigrateMode::Async;
        let st = self.state;
        let mut update_cached =
            !sync && st.cached_migrate[0].load(Relaxed) == st.cached_migrate[1].load(Relaxed);
        let mut last_migrated: Option<u64> = None;
        loop {
            let r = self.finished();
            if r != CompactResult::Continue {
                return r;
            }
            // A block we already migrated from is rescanned in full.
            self.finish_pageblock = last_migrated
                .is_some_and(|l| self.block_start(l) == self.block_start(self.migrate_pfn));
            loop {
                match self.isolate_migratepages() {
                    Isolate::Abort => {
                        self.contended = true;
                        return CompactResult::Contended;
                    }
                    Isolate::None => {
                        if update_cached {
                            st.cached_migrate[1].store(st.cached_migrate[0].load(Relaxed), Relaxed);
                        }
                        break;
                    }
                    Isolate::Success => {
                        update_cached = false;
                        last_migrated = Some(self.block_start(self.migrate_pfn - 1));
                    }
                }
                let batch = self.migrate_batch();
                if batch.failed || batch.no_memory {
                    if batch.no_memory && !self.scanners_met() {
                        return CompactResult::Contended;
                    }
                    // Finish the block in one more pass so it can be marked
                    // skip after a full scan (spec 03 §5 rescan).
                    if self.migrate_pfn & (self.pb_pages - 1) != 0
                        && !self.req.ignore_skip_hint
                        && !self.finish_pageblock
                        && self.req.mode < MigrateMode::Sync
                    {
                        self.finish_pageblock = true;
                        continue;
                    }
                }
                break;
            }
            if self.captured.is_some() {
                return CompactResult::Success;
            }
            if let (Some(order), Some(l)) = (self.req.order, last_migrated)
                && order > Order::ZERO
                && l < self.migrate_pfn & !(order.pages() - 1)
            {
                self.mig.drain_caches();
                last_migrated = None;
            }
        }
    }

    /// The run's epilogue: give back what is still isolated, account. A
    /// captured block makes the run a success whatever stopped it, so the
    /// caller always receives it (`compact_zone_order`).
    fn finish(mut self, result: CompactResult) -> CompactOutcome {
        let result = if self.captured.is_some() {
            CompactResult::Success
        } else {
            result
        };
        if !self.sources.is_empty() {
            let n = self.sources.len();
            self.putback(0..n);
        }
        self.release_freepages();
        let s = &self.stats;
        let daemon = matches!(self.req.kind, RunKind::Kcompactd | RunKind::Proactive);
        let stats = CompactStats {
            migrate_scanned: s.migrate_scanned,
            free_scanned: s.free_scanned,
            isolated: s.isolated_source + s.isolated_free,
            daemon_migrate_scanned: if daemon { s.migrate_scanned } else { 0 },
            daemon_free_scanned: if daemon { s.free_scanned } else { 0 },
            migrate_success: s.migrated,
            migrate_fail: s.failed,
            runs: 1,
            captured: u64::from(self.captured.is_some()),
            ..CompactStats::default()
        };
        self.state.account(&stats);
        CompactOutcome {
            result,
            captured: self.captured,
            stats: self.stats,
        }
    }
}
