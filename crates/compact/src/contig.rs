//! Emptying a fixed range for a contiguous allocation or an offline (spec 03
//! §1(d), Linux `__alloc_contig_migrate_range`): the caller has isolated the
//! range's pageblocks, so nothing new lands there and every frame freed there
//! stays out of circulation; this moves every movable allocation inside the
//! range to memory outside it through the kernel's [`Migrator`], with the
//! same protocol as compaction, until the range is wholly free.

use core::fmt;

use pageframe_buddy::{BlockInfo, Order, Pfn, PfnRange};
use pageframe_mobility::{AllocMode, Blocker, MigrateType, tag as mtag};

use crate::access::locked;
use crate::{MigrateError, MigrateMode, Migrator, ZoneLock, tag};

/// Sources taken per critical section.
const BATCH: usize = 32;
/// Passes over the range while a block refuses with `Again` or is held by a
/// compactor (Linux retries `-EAGAIN` a bounded number of times). Blocks
/// the kernel keeps ([`Migrator::isolate`] says no) get one more pass
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
        /// The block's first frame.
        pfn: Pfn,
    },
    /// The block at `pfn` was still busy after [`EVACUATE_PASSES`] passes
    /// (the kernel kept answering `Again`, a compactor held it, or a
    /// per-CPU cache kept it).
    Busy {
        /// The block's first frame.
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
pub fn evacuate_range<Z: ZoneLock + ?Sized, M: Migrator + ?Sized>(
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
            let mut moving = Moving {
                zone,
                mig: &mut *mig,
                batch,
                n,
                at: 0,
                confirmed: false,
                dst: None,
                moved: false,
            };
            while moving.at < n {
                let s = moving.batch[moving.at];
                let r = moving.move_one(mode);
                moving.at += 1;
                match r? {
                    Moved::Yes => {
                        out.moved += s.order.pages();
                        moving_on = true;
                    }
                    Moved::Again => {
                        retry = true;
                        moving_on = true;
                    }
                    Moved::Kept => {
                        retry = true;
                        kept += 1;
                    }
                    Moved::Refused => {
                        refused.get_or_insert(s.pfn);
                        retry = true;
                    }
                }
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
        if n == BATCH {
            next = Some(p);
            break;
        }
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

enum Moved {
    Yes,
    /// The kernel's migrate said `Again`.
    Again,
    /// The kernel kept the block (`isolate` said no).
    Kept,
    Refused,
}

/// A batch being moved: the sources `collect` marked, and where the move
/// of `batch[at]` stands. Whatever ends the batch early (an error, or a
/// panic in the kernel's migrator), dropping it unmarks the sources not yet
/// moved and gives back the one in flight: its destination to the zone,
/// itself to the kernel if the kernel had isolated it.
struct Moving<'m, Z: ZoneLock + ?Sized, M: Migrator + ?Sized> {
    zone: &'m Z,
    mig: &'m mut M,
    batch: [Src; BATCH],
    n: usize,
    /// The source in hand; those before it are done with.
    at: usize,
    /// The kernel isolated `batch[at]`.
    confirmed: bool,
    /// `batch[at]`'s destination, taken from the zone.
    dst: Option<Pfn>,
    /// `batch[at]` moved and the kernel is hearing of it: its source goes
    /// back to the zone whatever the kernel does.
    moved: bool,
}

impl<Z: ZoneLock + ?Sized, M: Migrator + ?Sized> Moving<'_, Z, M> {
    /// `batch[at]` through the migration protocol; its isolation mark is
    /// gone on return, whatever happened.
    fn move_one(&mut self, mode: MigrateMode) -> Result<Moved, EvacuateError> {
        let s = self.batch[self.at];
        self.confirmed = false;
        self.dst = None;
        let zone = self.zone;
        let unmark = |z: &mut pageframe_mobility::MobileZone<'_>| {
            z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
        };
        if !self.mig.isolate(s.pfn, s.order, s.tag) {
            locked(zone, unmark);
            return Ok(Moved::Kept);
        }
        self.confirmed = true;
        let dst = locked(zone, |z| {
            let d = z
                .alloc(s.order, MigrateType::Movable, AllocMode::empty())
                .ok()?;
            z.set_tag_bits(d, tag::TARGET, tag::TARGET);
            Some(d)
        })
        .flatten();
        let Some(dst) = dst else {
            self.confirmed = false;
            locked(zone, unmark);
            self.mig.putback(s.pfn, s.order);
            return Err(EvacuateError::NoMemory);
        };
        self.dst = Some(dst);
        let r = self.mig.migrate(s.pfn, dst, s.order, mode);
        self.dst = None;
        self.confirmed = false;
        match r {
            Ok(()) => {
                locked(zone, |z| {
                    z.set_tag_bits(dst, !mtag::RESERVED, s.tag & tag::CARRIED)
                });
                // The kernel settles its books before the source goes back
                // (as compaction does).
                self.moved = true;
                self.mig.migrated(s.pfn, dst, s.order);
                self.moved = false;
                locked(zone, |z| {
                    // The source lies in an isolated pageblock: it joins the
                    // isolate lists, out of circulation.
                    let _ = z.free(s.pfn, s.order);
                });
                Ok(Moved::Yes)
            }
            Err(e) => {
                locked(zone, |z| {
                    let _ = z.free(dst, s.order);
                    unmark(z);
                });
                self.mig.putback(s.pfn, s.order);
                Ok(if e == MigrateError::Again {
                    Moved::Again
                } else {
                    Moved::Refused
                })
            }
        }
    }
}

impl<Z: ZoneLock + ?Sized, M: Migrator + ?Sized> Drop for Moving<'_, Z, M> {
    fn drop(&mut self) {
        let in_hand = self.at < self.n && (self.confirmed || self.dst.is_some());
        let (dst, rest) = (self.dst.take(), self.at..self.n);
        // A source whose move the kernel was hearing of is freed, not
        // unmarked: the kernel holds its new block.
        let moved = self.moved && self.at < self.n;
        let batch = self.batch;
        let _ = locked(self.zone, |z| {
            if let Some(d) = dst {
                let _ = z.free(d, batch[rest.start].order);
            }
            if moved {
                let s = batch[rest.start];
                let _ = z.free(s.pfn, s.order);
            }
            for s in &batch[rest.start + usize::from(moved)..rest.end] {
                z.set_tag_bits(s.pfn, tag::ISOLATED, 0);
            }
        });
        if in_hand && self.confirmed {
            let s = batch[self.at];
            self.mig.putback(s.pfn, s.order);
        }
    }
}
