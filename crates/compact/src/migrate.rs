//! Migrating a batch (spec 03 §10.4, §12): destinations come from the free
//! scanner's blocks (`compaction_alloc`, split on demand), the kernel moves
//! the blocks in batches ([`FrameMover::migrate_batch`]: one TLB flush for
//! many), and the allocator's books follow: each destination takes its
//! source's tag, each source is freed (and captured if it completes the
//! requested block, §8).

use core::ops::Range;

use pageframe_buddy::{BlockInfo, Order, Pfn};
use pageframe_mobility::{MigrateType, MobileZone, tag as mtag};

use crate::access::locked;
use crate::engine::Run;
use crate::isolated::FreePages;
use crate::moves::fits_batch;
use crate::{FrameMover, MigrateError, MigrateMode, Move, ZoneLock, tag};

/// How a batch went.
#[derive(Default)]
pub(crate) struct Batch {
    /// Some source did not move.
    pub failed: bool,
    /// A destination could not be found (Linux `-ENOMEM`).
    pub no_memory: bool,
}

/// How one pass went.
#[derive(Default)]
struct Pass {
    /// Some move said `Again`: worth another pass.
    again: bool,
    /// A destination could not be found: the batch stops.
    no_memory: bool,
}

/// Passes over the whole batch in async mode (spec 03 §12): all of them for
/// an async run, a first round for the blocking modes...
const ASYNC_PASSES: usize = 10;
const SYNC_FIRST_PASSES: usize = 3;
/// ...which then retry each remaining block alone in their own mode.
const SYNC_PASSES: usize = 7;

/// Whether the move of a source is still to be tried: never tried, or the
/// kernel said `Again`.
fn pending(m: &Move) -> bool {
    matches!(m.outcome(), None | Some(Err(MigrateError::Again)))
}

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Run<'_, Z, M> {
    /// `migrate_pages` on the isolated sources; every source not moved is
    /// put back before returning. `moves[i]` is the move of source `i`.
    pub fn migrate_batch(&mut self) -> Batch {
        let n = self.sources.len();
        for (m, s) in self.moves.iter_mut().zip(self.sources.as_slice()) {
            *m = Move::new(s.pfn, s.pfn, s.order);
        }
        self.migrating = true;
        let mut out = Batch::default();
        let passes = if self.req.is_async() {
            ASYNC_PASSES
        } else {
            SYNC_FIRST_PASSES
        };
        for _ in 0..passes {
            let p = self.pass(0..n, MigrateMode::Async);
            if p.no_memory {
                out.no_memory = true;
                break;
            }
            if !p.again {
                break;
            }
        }
        if !out.no_memory && !self.req.is_async() {
            'alone: for i in 0..n {
                for _ in 0..SYNC_PASSES {
                    if !pending(&self.moves[i]) {
                        break;
                    }
                    if self.pass(i..i + 1, self.req.mode).no_memory {
                        out.no_memory = true;
                        break 'alone;
                    }
                }
            }
        }
        out.failed = self.moves[..n].iter().any(|m| !m.moved());
        self.settle_batch();
        out
    }

    /// One pass over the sources `range`: each still pending gets a
    /// destination, and each run of them goes to the kernel as one batch
    /// (spec 03 §12: without a destination the unmap phase stops, and what
    /// has one is moved).
    fn pass(&mut self, range: Range<usize>, mode: MigrateMode) -> Pass {
        let mut out = Pass::default();
        let mut i = range.start;
        while i < range.end {
            if !pending(&self.moves[i]) {
                i += 1;
                continue;
            }
            let mut j = i;
            let mut frames = 0;
            while j < range.end && pending(&self.moves[j]) {
                let (src, order) = (self.moves[j].src(), self.moves[j].order());
                if !fits_batch(frames, order) {
                    break;
                }
                frames += order.pages();
                let Some(dst) = self.compaction_alloc(order) else {
                    out.no_memory = true;
                    break;
                };
                self.moves[j] = Move::new(src, dst, order);
                j += 1;
            }
            if j > i {
                // Until the kernel answers, the destinations are in flight:
                // a panic gives back those not moved (see `give_back`).
                self.in_flight = Some(i..j);
                self.mig.migrate_batch(&mut self.moves[i..j], mode);
                self.in_flight = None;
                out.again |= self.resolve(i..j);
            }
            if out.no_memory {
                break;
            }
            i = j;
        }
        out
    }

    /// After the kernel's answer on `moves[range]`: the destinations of the
    /// moves not made go back; a move without an outcome counts as `Busy`.
    /// Returns whether some move said `Again`.
    fn resolve(&mut self, range: Range<usize>) -> bool {
        let mut again = false;
        for k in range {
            let m = self.moves[k];
            match m.outcome() {
                Some(Ok(())) => {}
                r => {
                    self.compaction_free(m.dst(), m.order());
                    let e = r.map_or(MigrateError::Busy, |r| {
                        r.err().unwrap_or(MigrateError::Busy)
                    });
                    again |= e == MigrateError::Again;
                    self.moves[k].set(Err(e));
                }
            }
        }
        again
    }

    /// The end of a batch (or of a run a panic cuts short): the moves made
    /// go into the books (one lock hold for all: the kernel may not free a
    /// destination before `migrated`, so this can wait), the sources that
    /// did not move go back to the kernel.
    pub(crate) fn settle_batch(&mut self) {
        if !core::mem::replace(&mut self.migrating, false) {
            return;
        }
        let n = self.sources.len();
        // The destinations take their sources' tags while `moves[i]` is
        // still source `i`'s move.
        let (sources, moves) = (self.sources.as_slice(), &self.moves[..n]);
        let tagged = locked(self.zone, |z| {
            for (s, m) in sources.iter().zip(moves) {
                if m.moved() {
                    z.set_tag_bits(m.dst(), !mtag::RESERVED, s.tag & tag::CARRIED);
                }
            }
        });
        // The moved sources leave the list (whatever the kernel's
        // `migrated` does, they are never put back), and their moves go to
        // the front of `moves`.
        let moves = &self.moves;
        let mut i = 0;
        self.sources.retain(|_| {
            let keep = !moves[i].moved();
            i += 1;
            keep
        });
        let mut k = 0;
        for i in 0..n {
            if self.moves[i].moved() {
                self.moves[k] = self.moves[i];
                k += 1;
            }
        }
        if tagged.is_some() {
            self.finish_moves(k);
        }
        let left = self.sources.len();
        self.putback(0..left);
        self.nr_migratepages = 0;
    }
    /// A panic in the kernel's migrator unwinds through the run: what it
    /// holds goes back as if the calls had failed. The destinations of the
    /// batch in flight whose moves the kernel did not report made are
    /// freed, the batch's moves made go into the books, the other sources go
    /// back to the kernel (those it had isolated through `putback`), the
    /// isolated free blocks to the zone.
    pub(crate) fn give_back(&mut self) {
        if let Some(r) = self.in_flight.take() {
            self.resolve(r);
        }
        self.settle_batch();
        if !self.sources.is_empty() {
            let n = self.sources.len();
            self.putback(0..n);
        }
        self.release_freepages();
    }

    /// `compaction_alloc` (spec 03 §10.4): the smallest isolated free block
    /// that fits, split down to `order`; runs the free scanner once if none
    /// fits.
    fn compaction_alloc(&mut self, order: Order) -> Option<Pfn> {
        let mut scanned = false;
        loop {
            if let Some((p, o)) = self.free.take(order) {
                if o > order {
                    let need = usize::from(o.get() - order.get());
                    let zone = self.zone;
                    let free = &mut self.free;
                    let split = free.has_room(need)
                        && locked(zone, |z| split_isolated(z, p, o, order, free)).unwrap_or(false);
                    if !split {
                        self.free.push(p, o);
                        return None;
                    }
                }
                self.nr_freepages -= order.pages().min(self.nr_freepages);
                self.nr_migratepages -= order.pages().min(self.nr_migratepages);
                return Some(p);
            }
            if scanned || self.contended {
                return None;
            }
            scanned = true;
            self.isolate_freepages();
        }
    }

    /// `compaction_free`: a destination that was not used goes back to the
    /// isolated free blocks.
    fn compaction_free(&mut self, dst: Pfn, order: Order) {
        self.nr_migratepages += order.pages();
        if self.free.push(dst, order) {
            self.nr_freepages += order.pages();
        } else {
            let _ = locked(self.zone, |z| z.free(dst, order));
        }
    }

    /// The books after a batch's moves (`moves[..k]`, each made; their
    /// destinations already tagged): the kernel hears of them, then each
    /// source is freed and, for a direct compactor, captured if it completes
    /// a block of the requested order. The kernel settles its books (a
    /// reverse map by frame) before any source goes back: a source handed
    /// out again first would meet the old owner's entry. A panic in
    /// `migrated_batch` still frees the sources.
    fn finish_moves(&mut self, k: usize) {
        let done = &self.moves[..k];
        let mut back = SourcesBack {
            zone: self.zone,
            done,
            capture: if self.req.capture {
                self.req.order.map(|k| {
                    (
                        k,
                        self.req.migratetype,
                        Order::new(self.pb).unwrap_or_default(),
                    )
                })
            } else {
                None
            },
            captured: self.captured,
            moved: 0,
            freed: false,
        };
        if !done.is_empty() {
            self.mig.migrated_batch(done);
        }
        back.free();
        self.captured = back.captured;
        self.stats.migrated += back.moved;
    }

    /// Gives the sources at `range` back: unmarks them and tells the kernel
    /// about those it isolated.
    pub fn putback(&mut self, range: Range<usize>) {
        let zone = self.zone;
        let list = &self.sources.as_slice()[range];
        let _ = locked(zone, |z| {
            for s in list {
                z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
            }
        });
        for s in list {
            if s.confirmed {
                self.mig.putback(s.pfn, s.order);
            }
            self.stats.failed += s.order.pages();
        }
        self.sources.clear();
    }

    /// `release_freepages`: isolated free blocks not used go back to the
    /// free lists; the free cursor cache may rise to the highest of them.
    pub fn release_freepages(&mut self) {
        if self.free.len() == 0 {
            return;
        }
        let zone = self.zone;
        let free = &mut self.free;
        let highest = locked(zone, |z| {
            let mut highest = None;
            for (p, o) in free.drain() {
                if z.free(p, o).is_ok() {
                    highest = highest.max(Some(p.get()));
                }
            }
            highest
        })
        .flatten();
        self.nr_freepages = 0;
        if let Some(h) = highest {
            let b = self.block_start(h);
            self.state
                .cached_free
                .fetch_max(b, core::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Splits the isolated free block `(p, from)` so that `(p, to)` serves as a
/// destination and the upper pieces stay isolated in `free`. The buddy core
/// has no split for allocated blocks, so the block goes back to the free
/// lists and is re-taken piece by piece under the same lock hold.
fn split_isolated(
    z: &mut MobileZone<'_>,
    p: Pfn,
    from: Order,
    to: Order,
    free: &mut FreePages,
) -> bool {
    if z.free(p, from).is_err() || z.alloc_at(p, to, MigrateType::Movable).is_err() {
        return false;
    }
    z.set_tag_bits(p, tag::TARGET, tag::TARGET);
    for j in to.get()..from.get() {
        let Some(o) = Order::new(j) else { continue };
        let q = p + o.pages();
        if z.take_free_block(q, MigrateType::Movable) == Ok(o) {
            z.set_tag_bits(q, tag::TARGET, tag::TARGET);
            free.push(q, o);
        }
    }
    true
}

/// `compaction_capture` (spec 03 §8) after freeing `freed`: if it now lies in
/// a free block of at least `order` on a list the requester may use, take
/// the `order`-aligned block around it.
fn capture(
    z: &mut MobileZone<'_>,
    freed: Pfn,
    order: Order,
    mt: MigrateType,
    pb: Order,
) -> Option<Pfn> {
    let Some(BlockInfo::Free {
        order: got, list, ..
    }) = z.buddy().block_at(freed)
    else {
        return None;
    };
    let list = pageframe_mobility::type_of_list(list);
    // Never from CMA or isolated memory, nor (here, unlike Linux) from the
    // highatomic reserve; and a small non-movable request does not take a
    // piece of a movable pageblock (it would pollute it).
    if got < order
        || matches!(
            list,
            MigrateType::Cma | MigrateType::Isolate | MigrateType::HighAtomic
        )
        || (order < pb && list == MigrateType::Movable && mt != MigrateType::Movable)
    {
        return None;
    }
    let at = freed.align_down(order);
    z.alloc_at(at, order, mt).ok().map(|()| at)
}

/// The moved sources of a batch on their way back to the zone: freed by
/// [`SourcesBack::free`], or when dropped by a panic in the kernel's
/// `migrated`.
struct SourcesBack<'a, Z: ZoneLock + ?Sized> {
    zone: &'a Z,
    done: &'a [Move],
    /// A direct compactor's request: order, migratetype, pageblock order.
    capture: Option<(Order, MigrateType, Order)>,
    captured: Option<Pfn>,
    moved: u64,
    freed: bool,
}

impl<Z: ZoneLock + ?Sized> SourcesBack<'_, Z> {
    fn free(&mut self) {
        if core::mem::replace(&mut self.freed, true) {
            return;
        }
        let (done, capture_req) = (self.done, self.capture);
        let (mut moved, mut captured) = (0, self.captured);
        let _ = locked(self.zone, |z| {
            for m in done {
                if z.free(m.src(), m.order()).is_err() {
                    // The kernel broke the protocol and freed the source.
                    continue;
                }
                moved += m.order().pages();
                if captured.is_none()
                    && let Some((k, mt, pb)) = capture_req
                {
                    captured = capture(z, m.src(), k, mt, pb);
                }
            }
        });
        self.moved = moved;
        self.captured = captured;
    }
}

impl<Z: ZoneLock + ?Sized> Drop for SourcesBack<'_, Z> {
    fn drop(&mut self) {
        self.free();
    }
}
