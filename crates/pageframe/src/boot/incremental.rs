//! A machine that gathers its memory one range at a time, through `&self`,
//! before any zone exists: for kernels whose framework hands RAM to the
//! frame allocator range by range rather than as a memory map (OSTD's
//! `GlobalFrameAllocator::add_free_memory`). The ranges are kept until
//! the machine is first needed; then a [`Plan`] lays the zones out over
//! them, carves the metadata from them (inside the window the kernel has
//! mapped) and builds the machine in place. Ranges handed over later are
//! onlined in the zones whose spans hold them.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering};

use pageframe_types::{Pfn, PfnRange, PhysAddr};

use super::{Builder, FrameRanges, Plan, PlanError};
use crate::debug::NoHooks;
use crate::error::SetupError;
use crate::gfp::Gfp;
use crate::lock::{Mutex, RawMutex, SpinLock};
use crate::machine::{Machine, MachineConfig};

/// Why [`Incremental::add`] refused a range (nothing was taken).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AddError {
    /// Some of it was handed over before.
    Overlap(PfnRange),
    /// More disjoint ranges than the machine gathers before it is built.
    TooManyRanges,
    /// Handed over after the machine was built, outside the zones it was
    /// built with: the caller keeps it.
    NotCovered(SetupError),
    /// The range reaches beyond the physical address width of the
    /// machine's configuration ([`MachineConfig::phys_bits`]): a kernel
    /// could not map those frames, so none of it is taken.
    AddressWidth {
        /// The first frame of the range beyond the width.
        pfn: Pfn,
    },
}

impl core::fmt::Display for AddError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AddError::Overlap(r) => write!(f, "{r:?} was handed over before"),
            AddError::TooManyRanges => f.write_str("more disjoint ranges than the set holds"),
            AddError::NotCovered(e) => write!(f, "no zone holds the range: {e}"),
            AddError::AddressWidth { pfn } => {
                write!(f, "frame {pfn} lies beyond the physical address width")
            }
        }
    }
}

impl core::error::Error for AddError {}

/// The ranges handed over: before the build, and since.
struct Gathered<const N: usize> {
    ranges: FrameRanges<N>,
    /// Every range handed over after the build, as a check on overlaps.
    late: FrameRanges<N>,
}

/// A machine built from memory handed over range by range (at most `N`
/// disjoint ranges before the build), whose zones take the lock `R`.
///
/// ```
/// use pageframe::boot::Incremental;
/// use pageframe::{Gfp, MachineConfig, NodeId, Order, Pfn, PfnRange, PhysAddr};
/// # let ram = std::alloc::Layout::from_size_align(64 << 20, 4096).unwrap();
/// # let base = unsafe { std::alloc::alloc_zeroed(ram) } as u64;
/// # static BASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// # BASE.store(base, std::sync::atomic::Ordering::Relaxed);
/// // How the kernel reaches physical memory (its direct map).
/// fn virt(pa: PhysAddr) -> *mut u8 {
/// #   let phys_offset = BASE.load(std::sync::atomic::Ordering::Relaxed);
///     (phys_offset + pa.get()) as *mut u8
/// }
/// // The first 4 GiB are mapped at boot: metadata is carved there.
/// const WINDOW: PfnRange = PfnRange::new(Pfn(0), Pfn(1 << 20));
/// static FRAMES: Incremental<16> = Incremental::new(MachineConfig::SINGLE_NODE, WINDOW, virt);
/// // The framework hands RAM over as it finds it...
/// // SAFETY: usable RAM, mapped at `virt`, given up to the allocator.
/// unsafe {
///     FRAMES.add(PfnRange::new(Pfn(0x100), Pfn(0x2000))).unwrap();
///     FRAMES.add(PfnRange::new(Pfn(0x2100), Pfn(0x4000))).unwrap();
/// }
/// // ...and the first allocation builds the machine over what it has.
/// let m = FRAMES.machine().unwrap();
/// let frame = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
/// assert!(m.inspect().free_pages() > 0x3000);
/// m.free(frame).unwrap();
/// ```
pub struct Incremental<const N: usize = 128, R: RawMutex + 'static = SpinLock> {
    config: MachineConfig,
    window: PfnRange,
    virt: fn(PhysAddr) -> *mut u8,
    cpus: Option<fn() -> u32>,
    gathered: Mutex<SpinLock, Gathered<N>>,
    machine: AtomicPtr<Machine<'static, (R, NoHooks)>>,
    /// Shares the machine between threads as `&Machine`: `Sync` only if
    /// the machine is (an `AtomicPtr` alone would always be).
    _shares: PhantomData<&'static Machine<'static, (R, NoHooks)>>,
}

impl<const N: usize, R: RawMutex + 'static> Incremental<N, R> {
    /// A machine of `config` that carves its metadata inside `window` (the
    /// frames the kernel maps at `virt` when the machine is first needed)
    /// and writes it through `virt`.
    pub const fn new(
        config: MachineConfig,
        window: PfnRange,
        virt: fn(PhysAddr) -> *mut u8,
    ) -> Self {
        Incremental {
            config,
            window,
            virt,
            cpus: None,
            gathered: Mutex::const_new(
                <SpinLock as lock_api::RawMutex>::INIT,
                Gathered {
                    ranges: FrameRanges::new(),
                    late: FrameRanges::new(),
                },
            ),
            machine: AtomicPtr::new(core::ptr::null_mut()),
            _shares: PhantomData,
        }
    }

    /// With per-CPU caches for `cpus()` CPUs (asked at the build), their
    /// memory taken from the machine inside the window
    /// ([`Machine::enable_pcp_in_place`]): from any memory when every range
    /// gathered lies in the window, else from below 4 GiB (or 16 MiB) when
    /// the window holds all of it; with neither, or should the caches not
    /// fit, the machine runs without them.
    pub const fn with_pcp(mut self, cpus: fn() -> u32) -> Self {
        self.cpus = Some(cpus);
        self
    }

    /// Hands `range` over. Before the machine is built it is gathered;
    /// after, it is onlined in the zones whose spans hold it. Refused,
    /// with nothing taken: a range that meets one handed over before, one
    /// more disjoint range than `N` before the build, one beyond the
    /// physical address width (checked here, before and after the build:
    /// the plan would refuse to build over it), or after the build a range
    /// outside the zones built.
    ///
    /// # Safety
    ///
    /// The frames of `range` are usable RAM that the caller gives up to the
    /// allocator for good (unless refused); those inside the window are
    /// mapped writable at `virt` whenever the machine may be built, and
    /// the machine may carve its metadata from them.
    pub unsafe fn add(&self, range: PfnRange) -> Result<(), AddError> {
        if range.is_empty() {
            return Ok(());
        }
        let limit = self.config.pfn_limit();
        if range.end > limit {
            return Err(AddError::AddressWidth {
                pfn: range.start.max(limit),
            });
        }
        let mut g = self.gathered.lock();
        let meets =
            |set: &FrameRanges<N>| set.ranges().iter().any(|r| !r.intersect(&range).is_empty());
        if meets(&g.ranges) || meets(&g.late) {
            return Err(AddError::Overlap(range));
        }
        match self.built() {
            None => g.ranges.insert(range).map_err(|_| AddError::TooManyRanges),
            Some(m) => {
                // Checked all or nothing by the machine; recorded after.
                m.add_free_range(range).map_err(AddError::NotCovered)?;
                // A full record only weakens the overlap check (the
                // machine's own check still refuses frames it holds).
                let _ = g.late.insert(range);
                Ok(())
            }
        }
    }

    /// The machine, built over the ranges gathered so far the first time it
    /// is asked for. Fails (and may be asked again after more memory is
    /// added) when the plan does: no memory yet, no room for metadata
    /// inside the window. The machine lives in memory handed over for
    /// good, so it outlives `self` (`'static`).
    #[inline]
    pub fn machine(&self) -> Result<&'static Machine<'static, (R, NoHooks)>, PlanError> {
        match self.built() {
            Some(m) => Ok(m),
            None => self.build(),
        }
    }

    /// The first [`Incremental::machine`]: builds the machine (once).
    #[cold]
    #[inline(never)]
    fn build(&self) -> Result<&'static Machine<'static, (R, NoHooks)>, PlanError> {
        let g = self.gathered.lock();
        if let Some(m) = self.built() {
            return Ok(m);
        }
        let plan = Plan::new_within(&g.ranges, &[], self.config, self.window)?;
        // SAFETY: every carved frame was handed over by `add`, whose caller
        // promised it usable RAM given up to the allocator and mapped
        // writable at `virt` when the machine may be built (the plan
        // carves only inside the window); the plan is built once, under
        // the lock, and the machine lives as long as `self` (`'static`
        // memory).
        let m = unsafe { plan.build(Builder::new(self.config).lock::<R>(), self.virt) }?;
        if let Some(cpus) = self.cpus
            && let Some(gfp) = self.pcp_gfp(&g.ranges)
        {
            // SAFETY: `pcp_gfp` names only frames inside the window, which
            // the caller of `add` maps at `virt` for good. A refusal
            // leaves the machine without caches, which is allowed.
            let _ = unsafe { m.enable_pcp_in_place(cpus(), gfp, self.virt) };
        }
        self.machine.store(m, Ordering::Release);
        Ok(m)
    }

    /// Allocation flags whose every frame, among those `gathered`, lies in
    /// the window.
    fn pcp_gfp(&self, gathered: &FrameRanges<N>) -> Option<Gfp> {
        let all_inside = gathered
            .ranges()
            .iter()
            .all(|r| self.window.contains_range(r));
        let below = |limit: u64| {
            self.window
                .contains_range(&PfnRange::new(Pfn::new(0), Pfn::new(limit)))
        };
        if all_inside {
            Some(Gfp::KERNEL)
        } else if below(1 << 20) {
            Some(Gfp::KERNEL | Gfp::DMA32)
        } else if below(1 << 12) {
            Some(Gfp::KERNEL | Gfp::DMA)
        } else {
            None
        }
    }

    /// The machine if it is built.
    #[inline]
    pub fn built(&self) -> Option<&'static Machine<'static, (R, NoHooks)>> {
        let p = self.machine.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored once, from the
        // `&'static mut Machine` the plan built, and is never written
        // again; the machine is only shared from then on.
        unsafe { p.as_ref() }
    }

    /// Frames gathered before the build (or handed over after it).
    pub fn gathered_frames(&self) -> u64 {
        let g = self.gathered.lock();
        g.ranges.frames() + g.late.frames()
    }
}
