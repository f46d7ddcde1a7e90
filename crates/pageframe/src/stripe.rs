//! Order-0 stripes: how one zone serves several CPUs at once without a
//! per-CPU cache (issue 16).
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
//! offline, and whenever the machine reports or checks itself.

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, Ordering::Relaxed};

use pageframe_buddy::{Order, Pfn, Reservation};
use pageframe_mobility::MigrateType;

use crate::lock::{Mutex, RawMutex};

/// Stripes per zone.
pub const STRIPES: usize = 4;

/// The basic types a stripe holds a reservation for.
const TYPES: usize = 3;

/// One stripe's reservations, one per basic type.
pub(crate) type Held = [Option<Reservation>; TYPES];

/// A zone's stripes: the locked reservations (in the zone's metadata: they
/// are about 2 KiB) and, readable without a lock, which chunk each holds.
pub(crate) struct Stripes<'a, R: RawMutex> {
    locks: &'a [Mutex<R, Held>],
    /// `chunk index + 1` of each stripe's reservation per type (0: none).
    chunks: [[AtomicU32; TYPES]; STRIPES],
    /// log2 of a chunk's frames, and the zone's first frame.
    shift: u8,
    base: Pfn,
}

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

/// A hint for the stripe to try first: the caller's stack address, which
/// differs between threads of execution and stays put within one.
#[inline]
fn hint() -> usize {
    let here = 0u8;
    let a = core::ptr::addr_of!(here) as usize >> 12;
    (a.wrapping_mul(0x9e37_79b9_7f4a_7c15_u64 as usize) >> (usize::BITS - 8)) % STRIPES
}

impl<'a, R: RawMutex> Stripes<'a, R> {
    /// Bytes of metadata the stripes need from a buffer at any address.
    pub(crate) const fn bytes() -> usize {
        match pageframe_types::carve::bytes_for::<Mutex<R, Held>>(STRIPES) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// Empty stripes whose locks live at the front of `mem`, for a zone
    /// whose first frame is `base` and chunks hold `2^shift` frames.
    pub(crate) fn carve(
        mem: &'a mut [MaybeUninit<u8>],
        base: Pfn,
        shift: Order,
    ) -> Option<(Self, &'a mut [MaybeUninit<u8>])> {
        let (locks, rest) =
            pageframe_types::carve::carve_init(mem, STRIPES, |_| Mutex::new([None, None, None]))?;
        Some((
            Stripes {
                locks,
                chunks: [const { [const { AtomicU32::new(0) }; TYPES] }; STRIPES],
                shift: shift.get(),
                base,
            },
            rest,
        ))
    }

    #[inline]
    fn id(&self, pfn: Pfn) -> u32 {
        ((pfn.get() - self.base.get()) >> self.shift) as u32 + 1
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
        let h = hint();
        let (s, mut held) = (0..STRIPES)
            .map(|i| (h + i) % STRIPES)
            .find_map(|s| self.locks[s].try_lock().map(|g| (s, g)))?;
        if let Some(p) = held[t].as_mut().and_then(Reservation::alloc) {
            mark(p);
            return Some(p);
        }
        let old = held[t].take();
        self.chunks[s][t].store(0, Relaxed);
        let mut r = refill(old)?;
        let p = r.alloc();
        self.chunks[s][t].store(self.id(r.chunk_start()), Relaxed);
        held[t] = Some(r);
        if let Some(p) = p {
            mark(p);
        }
        p
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
        let id = self.id(pfn);
        for (s, row) in self.chunks.iter().enumerate() {
            for (t, c) in row.iter().enumerate() {
                if c.load(Relaxed) != id {
                    continue;
                }
                let mut held = self.locks[s].lock();
                // Given back meanwhile (the zone has the chunk again), or a
                // frame allocated before the chunk was reserved (the zone
                // keeps it for the reservation's return): the zone path.
                let r = held[t].as_mut().filter(|r| r.handed_out(pfn))?;
                return Some(take().map(|()| {
                    let back = r.free(pfn);
                    debug_assert!(back, "an owned frame of the chunk is the stripe's");
                }));
            }
        }
        None
    }

    /// Whether a stripe holds the chunk of `pfn` (for naming errors).
    pub(crate) fn holds(&self, pfn: Pfn) -> bool {
        let id = self.id(pfn);
        self.chunks.iter().flatten().any(|c| c.load(Relaxed) == id)
    }

    /// Takes every reservation out (each under its stripe's lock) and
    /// hands it to `give_back`. Returns how many.
    pub(crate) fn release(&self, mut give_back: impl FnMut(Reservation)) -> usize {
        let mut n = 0;
        for (s, lock) in self.locks.iter().enumerate() {
            let mut held = lock.lock();
            for (t, slot) in held.iter_mut().enumerate() {
                if let Some(r) = slot.take() {
                    self.chunks[s][t].store(0, Relaxed);
                    give_back(r);
                    n += 1;
                }
            }
        }
        n
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
