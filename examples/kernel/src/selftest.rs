//! The self-test: take every free frame, write each frame's number into it,
//! verify them all, free them in random order and check the allocator is
//! back where it started (`validate()` and per-order free counts).

use crate::bringup::{KernelMachine, NODE};
use crate::memmap::{PAGE_SIZE, RangeSet};
use crate::permutation::Permutation;
use crate::snapshot::Snapshot;
use crate::time::{Cycles, Instant, TscRate};
use alloc::vec::Vec;
use core::fmt;
use pageframe::{AllocError, FreeError, Gfp, Order, Pfn, ZoneKind, zone::ValidateError};

/// A check that failed.
#[derive(Debug)]
pub enum SelftestError {
    /// The heap could not hold the frame bitmap.
    NoBitmap,
    /// An allocation failed with something other than running out.
    Alloc(AllocError),
    /// A frame was handed out twice.
    Duplicate(Pfn),
    /// A frame outside the RAM given to the allocator was handed out.
    NotManaged(Pfn),
    /// A frame did not hold what was written to it.
    Corrupt {
        /// The frame.
        pfn: Pfn,
        /// Its first and last words.
        found: (u64, u64),
    },
    /// Allocating stopped before the free count said it should.
    Count {
        /// Free frames before.
        expected: u64,
        /// Frames obtained.
        got: u64,
    },
    /// Free pages left after taking everything.
    Leftover(u64),
    /// An allocation succeeded with nothing free.
    AllocWhenEmpty(Pfn),
    /// A valid free was refused.
    Free(Pfn, FreeError),
    /// A double free was accepted.
    DoubleFreeAccepted(Pfn),
    /// The allocator's invariants broke.
    Validate(ValidateError),
    /// Counts differ from the start: zone, order (`None`: free pages),
    /// before, after.
    NotRestored(ZoneKind, Option<usize>, u64, u64),
}

impl fmt::Display for SelftestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRestored(zone, Some(o), a, b) => {
                write!(
                    f,
                    "zone {zone:?} order {o}: {a} free blocks before, {b} after"
                )
            }
            Self::NotRestored(zone, None, a, b) => {
                write!(f, "zone {zone:?}: {a} free pages before, {b} after")
            }
            Self::NoBitmap => write!(f, "no heap memory for the frame bitmap"),
            Self::Alloc(e) => write!(f, "allocation failed: {e}"),
            Self::Duplicate(p) => write!(f, "frame {:#x} handed out twice", p.get()),
            Self::NotManaged(p) => write!(f, "frame {:#x} was never handed over", p.get()),
            Self::Corrupt { pfn, found } => write!(
                f,
                "frame {:#x} holds {:#x}/{:#x}, not its number",
                pfn.get(),
                found.0,
                found.1
            ),
            Self::Count { expected, got } => {
                write!(f, "{got} frames allocated, {expected} were free")
            }
            Self::Leftover(n) => write!(f, "{n} frames still free after taking all"),
            Self::AllocWhenEmpty(p) => {
                write!(
                    f,
                    "allocation of {:#x} succeeded with nothing free",
                    p.get()
                )
            }
            Self::Free(p, e) => write!(f, "free of {:#x} refused: {e}", p.get()),
            Self::DoubleFreeAccepted(p) => write!(f, "double free of {:#x} accepted", p.get()),
            Self::Validate(e) => write!(f, "validate: {e}"),
        }
    }
}

impl From<ValidateError> for SelftestError {
    fn from(e: ValidateError) -> Self {
        Self::Validate(e)
    }
}

/// One bit per frame number below `len`.
struct FrameBitmap {
    words: Vec<u64>,
}

impl FrameBitmap {
    fn new(frames: u64) -> Option<Self> {
        let n = frames.div_ceil(64) as usize;
        let mut words = Vec::new();
        words.try_reserve_exact(n).ok()?;
        words.resize(n, 0);
        Some(Self { words })
    }

    /// Sets the bit; returns its previous value. Out of range counts as set.
    fn set(&mut self, pfn: Pfn) -> bool {
        let i = pfn.get();
        match self.words.get_mut((i / 64) as usize) {
            Some(w) => {
                let old = *w & (1 << (i % 64)) != 0;
                *w |= 1 << (i % 64);
                old
            }
            None => true,
        }
    }

    /// Clears the bit; returns its previous value.
    fn clear(&mut self, pfn: Pfn) -> bool {
        let i = pfn.get();
        match self.words.get_mut((i / 64) as usize) {
            Some(w) => {
                let old = *w & (1 << (i % 64)) != 0;
                *w &= !(1 << (i % 64));
                old
            }
            None => false,
        }
    }

    /// Frame numbers whose bit is set, ascending.
    fn iter(&self) -> impl Iterator<Item = Pfn> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| Pfn::new(i as u64 * 64 + b))
        })
    }
}

/// What the self-test measured.
#[derive(Debug, Clone, Copy)]
pub struct SelftestReport {
    /// Frames allocated (all that were free).
    pub frames: u64,
    /// Of those, frames at or above 4 GiB.
    pub frames_above_4g: u64,
    /// Lowest and highest frame handed out.
    pub lowest: Pfn,
    /// Highest frame handed out.
    pub highest: Pfn,
    /// Allocating them one by one (order 0).
    pub alloc: Cycles,
    /// Writing each frame's number.
    pub write: Cycles,
    /// Reading them back.
    pub verify: Cycles,
    /// Freeing them in random order.
    pub free: Cycles,
    /// The random order's seed.
    pub seed: u64,
    /// Ordinary requests that failed and were served from the reserves
    /// instead ([`First::Ordinary`]).
    pub retried: u64,
}

/// What each allocation of the fill asks for first.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum First {
    /// The reserves straight away (`__GFP_MEMALLOC`).
    Reserves,
    /// An ordinary request, and the reserves when it fails: a failure
    /// (injected, or the watermark reached) is handled, not fatal.
    #[cfg_attr(not(feature = "debug"), allow(dead_code))]
    Ordinary,
}

/// The self-test takes every free frame, reserves included: MEMALLOC is
/// the GFP bit that ignores watermarks (spec 01 §8.3, ALLOC_NO_WATERMARKS).
const TAKE_ALL: Gfp = Gfp::KERNEL.union(Gfp::MEMALLOC);
/// Frames at or above this number are above 4 GiB.
const PFN_4G: u64 = (1 << 32) / PAGE_SIZE;
/// Written into a frame's last word, xored with its number.
const TAIL_MAGIC: u64 = 0xa5a5_5a5a_f00d_cafe;

/// Runs the self-test over `machine`, whose free frames must all lie in
/// `managed` (the RAM handed over) and below frame number `pfn_end`.
pub fn run(
    machine: &KernelMachine,
    managed: &RangeSet,
    pfn_end: u64,
    seed: u64,
) -> Result<SelftestReport, SelftestError> {
    run_with(machine, managed, pfn_end, seed, First::Reserves)
}

/// [`run`], each allocation of the fill asking for `first` first.
pub fn run_with(
    machine: &KernelMachine,
    managed: &RangeSet,
    pfn_end: u64,
    seed: u64,
    first: First,
) -> Result<SelftestReport, SelftestError> {
    // The bitmap comes from the heap, hence from the allocator: take it
    // before recording the initial state.
    let mut taken = FrameBitmap::new(pfn_end).ok_or(SelftestError::NoBitmap)?;
    machine.validate()?;
    let before = Snapshot::take(machine);
    let order0 = Order::ZERO;

    // 1. Take every free frame.
    let (mut frames, mut above, mut lowest, mut highest) =
        (0u64, 0u64, Pfn::new(u64::MAX), Pfn::new(0));
    let mut retried = 0;
    let start = Instant::now();
    loop {
        let got = match first {
            First::Reserves => machine.alloc(NODE, TAKE_ALL, order0),
            First::Ordinary => match machine.alloc(NODE, Gfp::KERNEL, order0) {
                Err(AllocError::OutOfMemory) => {
                    retried += 1;
                    machine.alloc(NODE, TAKE_ALL, order0)
                }
                r => r,
            },
        };
        // Each frame is kept as its number in the bitmap (as a page table
        // would keep it): the block is given up here, made again to free.
        let pfn = match got.map(|a| a.into_raw().0) {
            Ok(pfn) => pfn,
            Err(AllocError::OutOfMemory) => break,
            Err(e) => return Err(SelftestError::Alloc(e)),
        };
        if !managed.contains(pfn.addr().get()) {
            return Err(SelftestError::NotManaged(pfn));
        }
        if taken.set(pfn) {
            return Err(SelftestError::Duplicate(pfn));
        }
        frames += 1;
        above += u64::from(pfn.get() >= PFN_4G);
        lowest = lowest.min(pfn);
        highest = highest.max(pfn);
    }
    let alloc = start.elapsed();
    if frames != before.free_pages() {
        return Err(SelftestError::Count {
            expected: before.free_pages(),
            got: frames,
        });
    }
    let left = Snapshot::take(machine).free_pages();
    if left != 0 {
        return Err(SelftestError::Leftover(left));
    }
    if let Ok(b) = machine.alloc(NODE, TAKE_ALL, order0) {
        return Err(SelftestError::AllocWhenEmpty(b.into_raw().0));
    }

    // 2. Write each frame's number into its first word (and a variant into
    //    its last), through the direct map; 3. read them all back.
    let start = Instant::now();
    for pfn in taken.iter() {
        let p = pfn.addr().get() as *mut u64;
        // SAFETY: the frame is allocated to this test alone and the direct
        // map covers it; both words lie inside the frame.
        unsafe {
            p.write_volatile(pfn.get());
            p.add(511).write_volatile(pfn.get() ^ TAIL_MAGIC);
        }
    }
    let write = start.elapsed();
    let start = Instant::now();
    for pfn in taken.iter() {
        let p = pfn.addr().get() as *const u64;
        // SAFETY: as above.
        let found = unsafe { (p.read_volatile(), p.add(511).read_volatile()) };
        if found != (pfn.get(), pfn.get() ^ TAIL_MAGIC) {
            return Err(SelftestError::Corrupt { pfn, found });
        }
    }
    let verify = start.elapsed();

    // 4. Free in random order; the first free is repeated (its number made
    //    a block again) to check that a double free is refused and changes
    //    nothing.
    let permutation = Permutation::new(pfn_end, seed);
    let mut checked_double = false;
    let start = Instant::now();
    for pfn in permutation.iter().map(Pfn::new) {
        if !taken.clear(pfn) {
            continue;
        }
        // SAFETY: the bitmap held the frame as this test's alone, and the
        // bit is clear now: the number is used for nothing else.
        let block = unsafe { machine.block_from_raw(pfn, order0) }
            .map_err(|e| SelftestError::Free(pfn, e.why))?;
        machine
            .free(block)
            .map_err(|e| SelftestError::Free(pfn, e.reason()))?;
        if !checked_double {
            checked_double = true;
            let mid = Snapshot::take(machine);
            // SAFETY: a number freed just above and not handed out since:
            // the call must refuse it (the double free this checks).
            if let Ok(twice) = unsafe { machine.block_from_raw(pfn, order0) } {
                let _ = twice.into_raw();
                return Err(SelftestError::DoubleFreeAccepted(pfn));
            }
            if let Some((zone, order, a, b)) = mid.first_difference(&Snapshot::take(machine)) {
                return Err(SelftestError::NotRestored(zone, order, a, b));
            }
        }
    }
    let free = start.elapsed();

    // 5. Back to the initial state.
    machine.validate()?;
    if let Some((zone, order, a, b)) = before.first_difference(&Snapshot::take(machine)) {
        return Err(SelftestError::NotRestored(zone, order, a, b));
    }
    Ok(SelftestReport {
        frames,
        frames_above_4g: above,
        lowest,
        highest,
        alloc,
        write,
        verify,
        free,
        seed,
        retried,
    })
}

impl SelftestReport {
    /// Prints the report lines (stable prefixes the boot test reads).
    pub fn print(&self, rate: &TscRate) {
        let per = |c: Cycles| c.0 / self.frames.max(1);
        crate::println!(
            "selftest: allocated {} frames ({} MiB), {} above 4 GiB, pfn {:#x}..={:#x}",
            self.frames,
            (self.frames * PAGE_SIZE) >> 20,
            self.frames_above_4g,
            self.lowest.get(),
            self.highest.get()
        );
        crate::println!(
            "selftest: alloc order-0 until empty: {} cycles/op with bookkeeping ({})",
            per(self.alloc),
            rate.duration(self.alloc)
        );
        crate::println!(
            "selftest: wrote {} frames ({}), verified ({})",
            self.frames,
            rate.duration(self.write),
            rate.duration(self.verify)
        );
        crate::println!(
            "selftest: free order-0 all in random order (seed {:#x}): {} cycles/op with the permutation walk ({})",
            self.seed,
            per(self.free),
            rate.duration(self.free)
        );
        if self.retried > 0 {
            crate::println!(
                "selftest: {} ordinary requests failed and were served from the reserves",
                self.retried
            );
        }
        crate::println!("selftest: double free refused, state unchanged");
        crate::println!("selftest: validate ok, free counts per order equal to the initial state");
    }
}
