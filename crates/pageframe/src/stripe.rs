//! Order-0 stripes: how one zone serves several CPUs at once without a
//! per-CPU cache.
//!
//! A zone has [`STRIPES`] stripes, each a lock of the kernel's type and, per
//! basic migratetype, one [`Reservation`]: the free frames of one chunk (a
//! pageblock) that the core handed over (`pageframe_buddy::Reservation`,
//! LLFree's per-core reservation). An order-0 allocation takes a stripe by
//! `try_lock` (starting from a hint: the caller's stack address, so each
//! thread of execution tends to keep its own stripe) and takes the lowest
//! free frame of its reservation: a bit scan on the stripe's own cache
//! lines, no zone lock. A free of a frame whose chunk a stripe holds goes
//! back to that stripe under its lock; any other free takes the zone lock
//! as before. When a reservation runs out, the stripe gives it back and
//! reserves the next chunk under the zone lock: the fullest chunk that
//! fits, as for any small request, so the fragmentation behaviour of the
//! core is kept. Two CPUs allocating and freeing order-0 frames then share
//! no lock and no cache line.
//!
//! The ownership byte of every frame still decides who may free it (by
//! compare-and-swap under the stripe's lock); frames a stripe holds free
//! are not counted free by the zone (as frames in a per-CPU cache are
//! not). Lock order: a stripe's lock, then the zone's. Stripes are given
//! back (`Zone::release_stripes`) before a range is isolated or taken
//! offline, before a contiguous search, and whenever the machine reports
//! or checks itself. An order-0 request the stripes do not serve (reserve
//! access, a per-CPU cache's refill) that finds its type's lists empty
//! takes the type's reservations back from the stripes free at once
//! before it falls back: a stripe holding the type's free frames must not
//! make the zone claim another pageblock.

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use pageframe_buddy::{Order, Pfn, PfnRange, Reservation};
use pageframe_mobility::MigrateType;

use crate::lock::{Mutex, RawMutex};

/// Stripes per zone.
pub const STRIPES: usize = 8;

/// A stripe reserves a chunk only if a sixty-fourth of it is free (8
/// frames of a 2 MiB chunk), and never for a single frame. A reservation
/// costs about two allocations under the zone lock (taking the chunk,
/// giving it back empty) and then serves each of its frames without that
/// lock, so it pays from a few frames on; a chunk with fewer, a hole or
/// two in a busy chunk, is filled one frame at a time through the zone,
/// which picks the same chunk (fullest first) either way.
pub const fn min_free(chunk: Order) -> u32 {
    let n = (1u32 << chunk.get()) / 64;
    if n < 2 { 2 } else { n }
}

/// After a refill found no chunk worth reserving, the stripes rest until
/// the zone's lock has served this many order-0 allocations of the type,
/// or one of them fell back (and may have claimed a pageblock).
pub(crate) const RECHECK: u32 = 64;

/// The basic types a stripe holds a reservation for.
const TYPES: usize = 3;

/// One stripe's reservations, one per basic type.
pub(crate) type Held = [Option<Reservation>; TYPES];

/// A stripe on cache lines of its own: two CPUs on two stripes must not
/// write to one line (128 bytes: adjacent-line prefetchers pair lines).
#[repr(align(128))]
pub(crate) struct Stripe<R: RawMutex>(Mutex<R, Held>);

impl<R: RawMutex> core::ops::Deref for Stripe<R> {
    type Target = Mutex<R, Held>;
    #[inline]
    fn deref(&self) -> &Mutex<R, Held> {
        &self.0
    }
}

/// A zone's stripes: the locked reservations and, readable without a
/// lock, which stripe holds each chunk (both in the zone's metadata: about
/// 4 KiB, and a byte a chunk).
pub(crate) struct Stripes<'a, R: RawMutex> {
    locks: &'a [Stripe<R>],
    /// Per chunk: `stripe * TYPES + type + 1` of the reservation that
    /// holds it, 0 for none. Written under the stripe's lock.
    owner: &'a [AtomicU8],
    /// Per type: whether the zone had a chunk worth reserving when it last
    /// looked (a stripe's refill, an order-0 fallback, or every
    /// [`RECHECK`]th order-0 allocation through the zone): when not,
    /// allocations skip the stripes and take the zone's lock once instead
    /// of twice.
    worth: [AtomicBool; TYPES],
    /// Per type: how many stripes hold a reservation of it (written under
    /// the stripe's lock; read as a hint, so that a request about to fall
    /// back tries no stripe lock when none holds its type).
    holding: [AtomicU8; TYPES],
    /// log2 of a chunk's frames, and the first frame of chunk 0.
    shift: u8,
    base: Pfn,
}

impl<R: RawMutex> Stripes<'_, R> {
    /// The fewest free frames of a chunk worth reserving in this zone.
    #[inline]
    pub(crate) fn min_free(&self) -> u32 {
        min_free(Order::new_truncated(self.shift))
    }
}

const _: () = assert!(STRIPES * TYPES < u8::MAX as usize);

/// The index of a basic type (`None` for the others).
#[inline]
fn type_index(mt: MigrateType) -> Option<usize> {
    match mt {
        MigrateType::Unmovable => Some(0),
        MigrateType::Movable => Some(1),
        MigrateType::Reclaimable => Some(2),
        _ => None,
    }
}

/// A number in `0..256` from the caller's stack address, which differs
/// between threads of execution and stays put within one: where a
/// lock-free structure of the zone shared by all CPUs (a stripe, a slot
/// of the pageblock pool) lets a caller look first, so that two CPUs at
/// work at once tend to stay on lines of their own.
#[inline]
pub(crate) fn caller_hint() -> usize {
    let here = 0u8;
    let a = core::ptr::addr_of!(here) as usize >> 12;
    a.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize) >> (usize::BITS - 8)
}

/// The stripe to try first (see [`caller_hint`]).
#[inline]
fn hint() -> usize {
    caller_hint() % STRIPES
}

impl<'a, R: RawMutex> Stripes<'a, R> {
    /// Bytes of metadata the stripes of a zone over `span` with chunks of
    /// `2^shift` frames need from a buffer at any address.
    pub(crate) const fn bytes(span: PfnRange, shift: Order) -> usize {
        let chunks =
            (span.end.align_up(shift).get() - span.start.align_down(shift).get()) >> shift.get();
        match (
            pageframe_types::carve::bytes_for::<Stripe<R>>(STRIPES),
            pageframe_types::carve::bytes_for::<AtomicU8>(chunks as usize),
        ) {
            (Some(a), Some(b)) => a.saturating_add(b),
            _ => usize::MAX,
        }
    }

    /// Empty stripes at the front of `mem`, for a zone over `span` whose
    /// chunks hold `2^shift` frames.
    pub(crate) fn carve(
        mem: &'a mut [MaybeUninit<u8>],
        span: PfnRange,
        shift: Order,
    ) -> Option<(Self, &'a mut [MaybeUninit<u8>])> {
        let base = span.start.align_down(shift);
        let chunks = ((span.end.align_up(shift).get() - base.get()) >> shift.get()) as usize;
        let (locks, rest) = pageframe_types::carve::carve_init(mem, STRIPES, |_| {
            Stripe(Mutex::new([None, None, None]))
        })?;
        let (owner, rest) = pageframe_types::carve::carve_init(rest, chunks, |_| AtomicU8::new(0))?;
        Some((
            Stripes {
                locks,
                owner,
                worth: [const { AtomicBool::new(true) }; TYPES],
                holding: [const { AtomicU8::new(0) }; TYPES],
                shift: shift.get(),
                base,
            },
            rest,
        ))
    }

    /// The owner byte of `pfn`'s chunk.
    #[inline]
    fn owner(&self, pfn: Pfn) -> Option<&AtomicU8> {
        let k = pfn.get().checked_sub(self.base.get())? >> self.shift;
        self.owner.get(usize::try_from(k).ok()?)
    }

    /// Records, under stripe `s`'s lock, that its reservation of type `t`
    /// holds the chunk at `start`.
    #[inline]
    fn hold(&self, start: Pfn, s: usize, t: usize) {
        if let Some(o) = self.owner(start) {
            o.store((s * TYPES + t + 1) as u8, Relaxed);
        }
        self.holding[t].fetch_add(1, Relaxed);
    }

    /// Records, under its stripe's lock, that a reservation of type `t`
    /// gave the chunk at `start` back.
    #[inline]
    fn unhold(&self, start: Pfn, t: usize) {
        if let Some(o) = self.owner(start) {
            o.store(0, Relaxed);
        }
        self.holding[t].fetch_sub(1, Relaxed);
    }

    /// An order-0 frame of type `mt` from a free stripe's reservation, or
    /// from a new reservation `refill` makes (under the zone lock) when the
    /// stripe's ran out; `None` when no stripe is free or nothing could be
    /// reserved (the caller then takes the zone path). `mark` records the
    /// frame as allocated (the ownership byte), under the stripe's lock.
    #[inline]
    pub(crate) fn alloc(
        &self,
        mt: MigrateType,
        refill: impl FnOnce(Option<Reservation>) -> Option<Reservation>,
        mark: impl FnOnce(Pfn),
    ) -> Option<Pfn> {
        let t = type_index(mt)?;
        if !self.worth[t].load(Relaxed) {
            return None;
        }
        let h = hint();
        let (s, mut held) = (0..STRIPES)
            .map(|i| (h + i) % STRIPES)
            .find_map(|s| self.locks[s].try_lock().map(|g| (s, g)))?;
        if let Some(p) = held[t].as_mut().and_then(Reservation::alloc) {
            mark(p);
            return Some(p);
        }
        let old = held[t].take();
        if let Some(o) = &old {
            self.unhold(o.chunk_start(), t);
        }
        let Some(mut r) = refill(old) else {
            self.worth[t].store(false, Relaxed);
            return None;
        };
        let p = r.alloc();
        self.hold(r.chunk_start(), s, t);
        held[t] = Some(r);
        if let Some(p) = p {
            mark(p);
        }
        p
    }

    /// [`Stripes::alloc`] for a caller that must not wait: a frame from
    /// the reservation of the first stripe free at once that has one,
    /// never a new reservation (that takes the zone lock); `None`
    /// otherwise, with nothing changed.
    pub(crate) fn try_alloc(&self, mt: MigrateType, mark: impl FnOnce(Pfn)) -> Option<Pfn> {
        let t = type_index(mt)?;
        let h = hint();
        let mut mark = Some(mark);
        (0..STRIPES).find_map(|i| {
            let mut held = self.locks[(h + i) % STRIPES].try_lock()?;
            let p = held[t].as_mut().and_then(Reservation::alloc)?;
            // Under the stripe's lock, as `alloc` marks.
            if let Some(mark) = mark.take() {
                mark(p);
            }
            Some(p)
        })
    }

    /// Gives the order-0 frame `pfn` back to the stripe whose reservation
    /// holds its chunk, if one does: `take` (the ownership check, under
    /// the stripe's lock) decides whether it may be freed. `None` when no
    /// stripe holds the chunk (the caller takes the zone path).
    #[inline]
    pub(crate) fn free<E>(
        &self,
        pfn: Pfn,
        take: impl FnOnce() -> Result<(), E>,
    ) -> Option<Result<(), E>> {
        let who = self.owner(pfn)?.load(Relaxed);
        if who == 0 {
            return None;
        }
        let (s, t) = ((who as usize - 1) / TYPES, (who as usize - 1) % TYPES);
        let mut held = self.locks.get(s)?.lock();
        // Given back meanwhile (the zone has the chunk again), or a frame
        // allocated before the chunk was reserved (the zone keeps it for
        // the reservation's return): the zone path.
        let r = held[t].as_mut().filter(|r| r.handed_out(pfn))?;
        Some(take().map(|()| {
            let back = r.free(pfn);
            debug_assert!(back, "an owned frame of the chunk is the stripe's");
        }))
    }

    /// Records whether the zone has a chunk of `mt` worth reserving.
    #[inline]
    pub(crate) fn set_worth(&self, mt: MigrateType, worth: bool) {
        if let Some(t) = type_index(mt)
            && self.worth[t].load(Relaxed) != worth
        {
            self.worth[t].store(worth, Relaxed);
        }
    }

    /// Whether a stripe holds the chunk of `pfn` (for naming errors).
    pub(crate) fn holds(&self, pfn: Pfn) -> bool {
        self.owner(pfn).is_some_and(|o| o.load(Relaxed) != 0)
    }

    /// Takes every reservation out (each under its stripe's lock) and
    /// hands it to `give_back`. Returns how many.
    pub(crate) fn release(&self, mut give_back: impl FnMut(Reservation)) -> usize {
        let mut n = 0;
        for lock in self.locks.iter() {
            let mut held = lock.lock();
            for t in 0..TYPES {
                n += usize::from(self.take_out(&mut held, t, &mut give_back));
            }
        }
        n
    }

    /// Takes out the reservations of type `mt` of every stripe whose lock
    /// is free at once and hands each to `give_back`; returns how many.
    /// Never waits, so a caller may hold the zone's lock (which comes
    /// after a stripe's): a stripe busy meanwhile keeps its reservation.
    pub(crate) fn try_release_type(
        &self,
        mt: MigrateType,
        mut give_back: impl FnMut(Reservation),
    ) -> usize {
        let Some(t) = type_index(mt) else {
            return 0;
        };
        let mut n = 0;
        for lock in self.locks.iter() {
            if self.holding[t].load(Relaxed) == 0 {
                break;
            }
            if let Some(mut held) = lock.try_lock() {
                n += usize::from(self.take_out(&mut held, t, &mut give_back));
            }
        }
        n
    }

    /// Takes the reservation of type `t` out of a stripe's `held` (its
    /// lock taken) and hands it to `give_back`; whether there was one.
    fn take_out(&self, held: &mut Held, t: usize, give_back: &mut impl FnMut(Reservation)) -> bool {
        let Some(r) = held[t].take() else {
            return false;
        };
        self.unhold(r.chunk_start(), t);
        give_back(r);
        true
    }

    /// Free frames the stripes hold.
    pub(crate) fn held_frames(&self) -> u64 {
        self.locks
            .iter()
            .map(|l| {
                l.lock()
                    .iter()
                    .flatten()
                    .map(|r| u64::from(r.free_frames()))
                    .sum::<u64>()
            })
            .sum()
    }
}
