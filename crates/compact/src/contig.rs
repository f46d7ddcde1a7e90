//! Emptying a fixed range for a contiguous allocation or an offline (spec 03
//! §1(d), Linux `__alloc_contig_migrate_range`): the caller has isolated the
//! range's pageblocks, so nothing new lands there and every frame freed there
//! stays out of circulation; this moves every movable allocation inside the
//! range to memory outside it through the kernel's [`FrameMover`], with the
//! same protocol as compaction, until the range is wholly free.

use core::fmt;

use pageframe_buddy::{BlockInfo, Order, Pfn, PfnRange};
use pageframe_mobility::{AllocMode, Blocker, MigrateType, tag as mtag};

use crate::access::locked;
use crate::moves::fits_batch;
use crate::{FrameMover, MigrateError, MigrateMode, Move, ZoneLock, tag};

/// Sources taken per critical section.
const BATCH: usize = 32;
/// Passes over the range while a block refuses with `Again` or is held by a
/// compactor (Linux retries `-EAGAIN` a bounded number of times). Blocks
/// the kernel keeps ([`FrameMover::isolate`] says no) get one more pass
/// after a drain, and more only while each pass leaves fewer of them.
pub const EVACUATE_PASSES: u32 = 10;

/// Why a range could not be emptied. The range's allocations are where they
/// were or have moved out intact; nothing is lost.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EvacuateError {
    /// The block at `pfn` cannot move: unmovable, pinned, or a hole.
    Blocked {
        /// The first frame of the blocking block inside the range.
        pfn: Pfn,
        /// What it is.
        why: Blocker,
    },
    /// The kernel refused to move the block at `pfn` (`Pinned` or `Busy`
    /// from the migrator, or `isolate` said no for every pass).
    Refused {
        /// The first frame of the block inside the range.
        pfn: Pfn,
    },
    /// The block at `pfn` was still busy after [`EVACUATE_PASSES`] passes
    /// (the kernel kept answering `Again`, a compactor held it, or a
    /// per-CPU cache kept it).
    Busy {
        /// The first frame of the block inside the range.
        pfn: Pfn,
    },
    /// No destination outside the range was free.
    NoMemory,
    /// The zone lock refused (see [`ZoneLock`]).
    Contended,
}

impl fmt::Display for EvacuateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvacuateError::Blocked { pfn, why } => write!(f, "{why:?} memory at {pfn}"),
            EvacuateError::Refused { pfn } => {
                write!(f, "the kernel did not move the block at {pfn}")
            }
            EvacuateError::Busy { pfn } => write!(f, "the block at {pfn} stayed busy"),
            EvacuateError::NoMemory => f.write_str("no free memory outside the range to move into"),
            EvacuateError::Contended => f.write_str("the zone lock refused"),
        }
    }
}

impl core::error::Error for EvacuateError {}

/// What an evacuation did.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct Evacuated {
    /// Frames moved out of the range.
    pub moved: u64,
    /// Passes over the range.
    pub passes: u32,
}

#[derive(Clone, Copy)]
struct Src {
    pfn: Pfn,
    order: Order,
    tag: u32,
}

/// Moves every movable allocation of `range` out of it, in `mode`. The
/// caller must have isolated the pageblocks `range` touches
/// ([`pageframe_mobility::MobileZone::isolate_range`]) and keeps them
/// isolated until it has taken the range or given up. The migrator's
/// `drain_caches` is called first, so that frames parked in per-CPU caches
/// reach the (isolated) free lists.
///
/// Destinations are ordinary movable allocations of the zone (never inside
/// isolated pageblocks), made without a watermark check: the range's frames
/// come back as it empties, so the zone's free memory is unchanged at the
/// end.
pub fn evacuate_range<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized>(
    zone: &Z,
    range: PfnRange,
    mig: &mut M,
    mode: MigrateMode,
) -> Result<Evacuated, EvacuateError> {
    mig.drain_caches();
    let mut out = Evacuated::default();
    let mut refused: Option<Pfn> = None;
    // Blocks the kernel kept in the previous pass.
    let mut kept_before = usize::MAX;
    while out.passes < EVACUATE_PASSES {
        out.passes += 1;
        let mut retry = false;
        // Whether this pass can be worth repeating for a reason other than
        // kept blocks: a move happened, said `Again`, or a compactor held
        // a block.
        let mut moving_on = false;
        let mut kept = 0usize;
        let mut from = range.start;
        loop {
            let mut batch = [Src {
                pfn: Pfn(0),
                order: Order::ZERO,
                tag: 0,
            }; BATCH];
            let (n, next, held) = locked(zone, |z| collect(z, range, from, &mut batch))
                .ok_or(EvacuateError::Contended)??;
            retry |= held;
            moving_on |= held;
            let t = Moving::new(zone, &mut *mig, batch, n).run(mode);
            out.moved += t.moved;
            moving_on |= t.moved > 0 || t.again;
            retry |= t.again || t.kept > 0 || t.refused.is_some();
            kept += t.kept;
            if let Some(p) = t.refused {
                // A block may begin before the range: name its first frame
                // inside it, as `Blocked` and `Busy` do.
                refused.get_or_insert(p.max(range.start));
            }
            if t.no_memory {
                return Err(EvacuateError::NoMemory);
            }
            match next {
                Some(p) => from = p,
                None => break,
            }
        }
        if !retry {
            return Ok(out);
        }
        if refused.is_some() {
            // Pinned or not migratable: another pass will not change that.
            break;
        }
        if !moving_on && kept >= kept_before {
            // Only blocks the kernel keeps, no fewer than a drain ago: they
            // are in use, not on their way back.
            break;
        }
        kept_before = kept;
        // Caches may have refilled from frames freed meanwhile.
        mig.drain_caches();
    }
    // Name what is still there.
    let left = locked(zone, |z| {
        z.buddy().walk(range).find_map(|(p, info)| match info {
            BlockInfo::Allocated { .. } => Some(p),
            _ => None,
        })
    })
    .ok_or(EvacuateError::Contended)?;
    match (refused, left) {
        (_, None) => Ok(out),
        (Some(p), _) => Err(EvacuateError::Refused { pfn: p }),
        (None, Some(p)) => Err(EvacuateError::Busy { pfn: p }),
    }
}

/// Under the lock: marks up to [`BATCH`] movable blocks of `range` from
/// `from` on as isolated sources. Returns how many, where to go on (`None`
/// at the end of the range), and whether some block was held by a
/// compactor (to look at again in the next pass).
fn collect(
    z: &mut pageframe_mobility::MobileZone<'_>,
    range: PfnRange,
    from: Pfn,
    batch: &mut [Src; BATCH],
) -> Result<(usize, Option<Pfn>, bool), EvacuateError> {
    let mut n = 0;
    let mut frames = 0;
    let mut held = false;
    let mut next = None;
    for (p, info) in z.buddy().walk(PfnRange::new(from, range.end)) {
        if let Some(why) = Blocker::of(&info) {
            return Err(EvacuateError::Blocked { pfn: p, why });
        }
        let BlockInfo::Allocated {
            head,
            order,
            tag: t,
        } = info
        else {
            continue;
        };
        if t & tag::MASK != 0 {
            // A compactor's source or destination: it moves or comes back;
            // look again next pass.
            held = true;
            continue;
        }
        if n == BATCH || !fits_batch(frames, order) {
            next = Some(p);
            break;
        }
        frames += order.pages();
        batch[n] = Src {
            pfn: head,
            order,
            tag: t,
        };
        n += 1;
    }
    for s in &batch[..n] {
        z.set_tag_bits(s.pfn, tag::ISOLATED, tag::ISOLATED);
    }
    Ok((n, next, held))
}

/// How a batch of sources went.
#[derive(Default)]
struct Tally {
    /// Frames moved.
    moved: u64,
    /// Some move said `Again`.
    again: bool,
    /// Blocks the kernel kept (`isolate` said no).
    kept: usize,
    /// The first block whose move the kernel refused.
    refused: Option<Pfn>,
    /// A destination could not be found.
    no_memory: bool,
}

/// Where a source of the batch stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Marked by `collect` only: the kernel was not asked, or kept it.
    Marked,
    /// The kernel isolated it: it gets the block back unless it moves.
    Isolated,
    /// Its move failed: unmarked, its destination given back; the kernel
    /// is still to get it back.
    Failed,
    /// Done with: moved, or unmarked and given back.
    Done,
}

/// A batch being moved: the sources `collect` marked and their moves, made
/// by the kernel in one [`FrameMover::migrate_batch`]. Whatever ends the batch
/// early (a panic in the kernel's migrator), dropping it finishes what
/// [`Moving::run`] would have: moves the kernel reported made go into the
/// books, destinations of the others go back to the zone, sources not
/// moved are unmarked and given back to the kernel if it had isolated them.
struct Moving<'m, Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> {
    zone: &'m Z,
    mig: &'m mut M,
    batch: [Src; BATCH],
    n: usize,
    stage: [Stage; BATCH],
    /// `moves[k]` is the move of source `of[k]`.
    moves: [Move; BATCH],
    of: [usize; BATCH],
    m: usize,
}

impl<'m, Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Moving<'m, Z, M> {
    fn new(zone: &'m Z, mig: &'m mut M, batch: [Src; BATCH], n: usize) -> Self {
        Moving {
            zone,
            mig,
            batch,
            n,
            stage: [Stage::Marked; BATCH],
            moves: [Move::new(Pfn(0), Pfn(0), Order::ZERO); BATCH],
            of: [0; BATCH],
            m: 0,
        }
    }

    /// The migration protocol for the whole batch: the kernel isolates each
    /// source, each gets a destination, the kernel makes the moves in one
    /// call, and the books follow. Every mark is gone on return.
    fn run(mut self, mode: MigrateMode) -> Tally {
        let mut t = Tally::default();
        for i in 0..self.n {
            let s = self.batch[i];
            if self.mig.isolate(s.pfn, s.order, s.tag) {
                self.stage[i] = Stage::Isolated;
            } else {
                t.kept += 1;
            }
        }
        let zone = self.zone;
        let (batch, stage, moves, of) = (&self.batch, &self.stage, &mut self.moves, &mut self.of);
        let mut m = 0;
        let mut no_memory = false;
        locked(zone, |z| {
            for (i, s) in batch.iter().enumerate().take(self.n) {
                if stage[i] != Stage::Isolated {
                    continue;
                }
                let Ok(d) = z.alloc(s.order, MigrateType::Movable, AllocMode::empty()) else {
                    // spec 03 §12: without a destination the batch stops;
                    // what has one still moves.
                    no_memory = true;
                    break;
                };
                z.set_tag_bits(d, tag::TARGET, tag::TARGET);
                moves[m] = Move::new(s.pfn, d, s.order);
                of[m] = i;
                m += 1;
            }
        });
        t.no_memory = no_memory;
        self.m = m;
        if m > 0 {
            self.mig.migrate_batch(&mut self.moves[..m], mode);
        }
        let f = self.finish();
        Tally {
            moved: f.moved,
            again: f.again,
            refused: f.refused,
            ..t
        }
    }

    /// Settles the batch (see [`Moving`]). Each source's stage moves on
    /// before the kernel hears of it, so that finishing again (after a
    /// panic in the kernel's `putback` or `migrated_batch`) goes on where
    /// it stopped, and finishing a settled batch does nothing.
    fn finish(&mut self) -> Tally {
        let mut t = Tally::default();
        let zone = self.zone;
        let m = self.m;
        let made = |mv: &Move| mv.moved();
        let (batch, stage, moves, of) = (&self.batch, &mut self.stage, &self.moves, &self.of);
        let _ = locked(zone, |z| {
            for (mv, &i) in moves[..m].iter().zip(of) {
                if stage[i] != Stage::Isolated {
                    continue;
                }
                if made(mv) {
                    z.set_tag_bits(mv.dst(), !mtag::RESERVED, batch[i].tag & tag::CARRIED);
                } else {
                    let _ = z.free(mv.dst(), mv.order());
                    z.set_tag_bits(mv.src(), tag::ISOLATED, 0);
                    stage[i] = Stage::Failed;
                }
            }
        });
        // The sources whose moves failed go back to the kernel.
        for k in 0..m {
            let (mv, i) = (self.moves[k], self.of[k]);
            if self.stage[i] != Stage::Failed {
                continue;
            }
            self.stage[i] = Stage::Done;
            match mv.outcome() {
                Some(Err(MigrateError::Again)) => t.again = true,
                _ => {
                    t.refused.get_or_insert(mv.src());
                }
            }
            self.mig.putback(mv.src(), mv.order());
        }
        // The moves made: the kernel settles its books (as compaction
        // does) before their sources go back to the zone, where they join
        // the isolate lists, out of circulation.
        let mut d = 0;
        for k in 0..m {
            let i = self.of[k];
            if self.stage[i] == Stage::Isolated && made(&self.moves[k]) {
                self.stage[i] = Stage::Done;
                self.moves[d] = self.moves[k];
                t.moved += self.moves[d].order().pages();
                d += 1;
            }
        }
        self.m = 0;
        if d > 0 {
            let back = FreeSources {
                zone,
                moves: &self.moves[..d],
            };
            self.mig.migrated_batch(&self.moves[..d]);
            drop(back);
        }
        // Sources that never had a destination: unmarked, and given back
        // to the kernel if it isolated them.
        let (batch, stage) = (&self.batch, &self.stage);
        let _ = locked(zone, |z| {
            for (s, st) in batch.iter().zip(stage).take(self.n) {
                if *st != Stage::Done {
                    z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
                }
            }
        });
        for i in 0..self.n {
            let st = core::mem::replace(&mut self.stage[i], Stage::Done);
            if st == Stage::Isolated {
                let s = self.batch[i];
                self.mig.putback(s.pfn, s.order);
            }
        }
        t
    }
}

impl<Z: ZoneLock + ?Sized, M: FrameMover + ?Sized> Drop for Moving<'_, Z, M> {
    fn drop(&mut self) {
        // Only a panic in the kernel's migrator leaves a batch unfinished.
        let _ = self.finish();
    }
}

/// The sources of moves made, freed into the zone when dropped: after the
/// kernel's `migrated_batch` returns, or when it panics.
struct FreeSources<'a, Z: ZoneLock + ?Sized> {
    zone: &'a Z,
    moves: &'a [Move],
}

impl<Z: ZoneLock + ?Sized> Drop for FreeSources<'_, Z> {
    fn drop(&mut self) {
        let moves = self.moves;
        let _ = locked(self.zone, |z| {
            for mv in moves {
                // An error: the kernel broke the protocol and freed it.
                let _ = z.free(mv.src(), mv.order());
            }
        });
    }
}
