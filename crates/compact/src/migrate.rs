//! Migrating a batch (spec 03 §10.4, §12): destinations come from the free
//! scanner's blocks (`compaction_alloc`, split on demand), the kernel moves
//! each block, and the allocator's books follow: the destination takes the
//! source's tag, the source is freed (and captured if it completes the
//! requested block, §8).

use core::ops::Range;

use pageframe_buddy::{BlockInfo, Order, Pfn};
use pageframe_mobility::{MigrateType, MobileZone, tag as mtag};

use crate::access::locked;
use crate::engine::Run;
use crate::isolated::{FreePages, NO_SOURCE, SOURCE_CAP, Source};
use crate::{MigrateError, MigrateMode, Migrator, ZoneLock, tag};

/// How a batch went.
#[derive(Default)]
pub(crate) struct Batch {
    /// Some source did not move.
    pub failed: bool,
    /// A destination could not be found (Linux `-ENOMEM`).
    pub no_memory: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Pending,
    Done,
    Failed,
}

/// The batch being migrated: each source's fate and, once moved, its
/// destination.
pub(crate) struct BatchState {
    fate: [Fate; SOURCE_CAP],
    dsts: [Pfn; SOURCE_CAP],
}

impl BatchState {
    fn new() -> Self {
        BatchState {
            fate: [Fate::Pending; SOURCE_CAP],
            dsts: [Pfn(0); SOURCE_CAP],
        }
    }
}

enum Step {
    Done,
    Again,
    Failed,
    NoMemory,
}

/// Passes over the whole batch in async mode (spec 03 §12): all of them for
/// an async run, a first round for the blocking modes...
const ASYNC_PASSES: usize = 10;
const SYNC_FIRST_PASSES: usize = 3;
/// ...which then retry each remaining block alone in their own mode.
const SYNC_PASSES: usize = 7;

impl<Z: ZoneLock + ?Sized, M: Migrator + ?Sized> Run<'_, Z, M> {
    /// `migrate_pages` on the isolated sources; every source not moved is
    /// put back before returning.
    pub fn migrate_batch(&mut self) -> Batch {
        let n = self.sources.len();
        self.batch = Some(BatchState::new());
        let mut out = Batch::default();
        let passes = if self.req.is_async() {
            ASYNC_PASSES
        } else {
            SYNC_FIRST_PASSES
        };
        'batch: for _ in 0..passes {
            let mut again = false;
            for i in 0..n {
                if self.fate(i) != Fate::Pending {
                    continue;
                }
                match self.migrate_one(i, MigrateMode::Async) {
                    Step::Done => self.set_fate(i, Fate::Done),
                    Step::Failed => self.set_fate(i, Fate::Failed),
                    Step::Again => again = true,
                    Step::NoMemory => {
                        out.no_memory = true;
                        break 'batch;
                    }
                }
            }
            if !again {
                break;
            }
        }
        if !out.no_memory && !self.req.is_async() {
            'alone: for i in 0..n {
                for _ in 0..SYNC_PASSES {
                    if self.fate(i) != Fate::Pending {
                        break;
                    }
                    match self.migrate_one(i, self.req.mode) {
                        Step::Done => self.set_fate(i, Fate::Done),
                        Step::Failed => self.set_fate(i, Fate::Failed),
                        Step::Again => {}
                        Step::NoMemory => {
                            out.no_memory = true;
                            break 'alone;
                        }
                    }
                }
            }
        }
        out.failed = (0..n).any(|i| self.fate(i) != Fate::Done);
        self.settle_batch();
        out
    }

    fn fate(&self, i: usize) -> Fate {
        self.batch.as_ref().map_or(Fate::Pending, |b| b.fate[i])
    }

    fn set_fate(&mut self, i: usize, f: Fate) {
        if let Some(b) = self.batch.as_mut() {
            b.fate[i] = f;
        }
    }

    /// The end of a batch (or of a run a panic cuts short): the moves done
    /// go into the books (one lock hold for all: the kernel may not free a
    /// destination before `migrated`, so this can wait), the sources that
    /// did not move go back to the kernel.
    pub(crate) fn settle_batch(&mut self) {
        let Some(b) = self.batch.take() else {
            return;
        };
        // The moved sources leave the list first: whatever the kernel's
        // `migrated` does, they are never put back.
        let mut done = [(NO_SOURCE, Pfn(0)); SOURCE_CAP];
        let mut k = 0;
        for (i, s) in self.sources.as_slice().iter().enumerate() {
            if b.fate[i] == Fate::Done {
                done[k] = (*s, b.dsts[i]);
                k += 1;
            }
        }
        let mut i = 0;
        self.sources.retain(|_| {
            let keep = b.fate[i] != Fate::Done;
            i += 1;
            keep
        });
        self.finish_moves(&done[..k]);
        let left = self.sources.len();
        self.putback(0..left);
        self.nr_migratepages = 0;
    }

    fn migrate_one(&mut self, i: usize, mode: MigrateMode) -> Step {
        let s = self.sources.as_slice()[i];
        let Some(dst) = self.compaction_alloc(s.order) else {
            return Step::NoMemory;
        };
        // Until the kernel answers, the destination is in flight: a panic
        // gives it back (see `Run`'s `Drop`).
        self.in_flight = Some((dst, s.order));
        let r = self.mig.migrate(s.pfn, dst, s.order, mode);
        self.in_flight = None;
        match r {
            Ok(()) => {
                if let Some(b) = self.batch.as_mut() {
                    b.dsts[i] = dst;
                }
                Step::Done
            }
            Err(e) => {
                self.compaction_free(dst, s.order);
                if e == MigrateError::Again {
                    Step::Again
                } else {
                    Step::Failed
                }
            }
        }
    }

    /// A panic in the kernel's migrator unwinds through the run: what it
    /// holds goes back as if the calls had failed. The destination of the
    /// move in flight is freed, the batch's finished moves go into the
    /// books, the other sources go back to the kernel (those it had
    /// isolated through `putback`), the isolated free blocks to the zone.
    pub(crate) fn give_back(&mut self) {
        if let Some((dst, order)) = self.in_flight.take() {
            self.compaction_free(dst, order);
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

    /// The books after the batch's successful moves (`done`: source, its
    /// destination): each destination becomes the owner's block (the
    /// source's kernel tag bits, isolation bits clear), the kernel hears of
    /// each move, then each source is freed and, for a direct compactor,
    /// captured if it completes a block of the requested order. The kernel
    /// settles its books (a reverse map by frame) before any source goes
    /// back: a source handed out again first would meet the old owner's
    /// entry. A panic in `migrated` still frees the sources.
    fn finish_moves(&mut self, done: &[(Source, Pfn)]) {
        let zone = self.zone;
        let tagged = locked(zone, |z| {
            for (s, dst) in done {
                z.set_tag_bits(*dst, !mtag::RESERVED, s.tag & tag::CARRIED);
            }
        });
        if tagged.is_none() {
            return;
        }
        let mut back = SourcesBack {
            zone,
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
        for (s, dst) in done {
            self.mig.migrated(s.pfn, *dst, s.order);
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
    done: &'a [(Source, Pfn)],
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
            for (s, _) in done {
                if z.free(s.pfn, s.order).is_err() {
                    // The kernel broke the protocol and freed the source.
                    continue;
                }
                moved += s.order.pages();
                if captured.is_none()
                    && let Some((k, mt, pb)) = capture_req
                {
                    captured = capture(z, s.pfn, k, mt, pb);
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
