#![doc = include_str!("../README.md")]
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs, clippy::undocumented_unsafe_blocks)]

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pageframe::boot::{AddError, Incremental};
use pageframe::compact::NoMigration;
use pageframe::debug::Inspect;
use pageframe::zone::ValidateError;
use pageframe::{
    Block, CpuCache, CpuId, FreeError, Gfp, Machine, MachineConfig, NodeId, Order, PAGE_SIZE, Pfn,
    PfnRange, PhysAddr, RawError,
};

/// Disjoint ranges gathered before the machine is built (OSTD hands over
/// one per usable memory-map region, less the early allocator's).
pub const RANGES: usize = 64;

/// CPUs whose handles the allocator keeps for its local calls
/// ([`FrameAllocator::alloc_frames_local`]); the others' calls claim their
/// caches call by call.
pub const LOCAL_CPUS: usize = 64;

/// One CPU's kept handle, on cache lines of its own.
#[repr(align(128))]
struct Local(UnsafeCell<Option<CpuCache<'static, 'static>>>);

// SAFETY: a slot is reached only by `FrameAllocator::local`, whose callers
// run on that slot's CPU with interrupts and preemption off for the whole
// call (the `# Safety` of the local calls): one reference at a time.
unsafe impl Sync for Local {}

/// How a call reaches its CPU's cache.
enum Via<'h> {
    /// The cache of the CPU of this number, claimed for the call
    /// ([`Machine::alloc_on`]).
    Claim(u32),
    /// The CPU's kept handle: no claim.
    Local(&'h mut CpuCache<'static, 'static>),
}

/// The most frames the paths for a few frames take (a run's most: one
/// bitmap word of a cache's home).
const SMALL: u64 = 64;

/// The order of a block of `frames` frames (a power of two); `None` for any
/// other count.
#[inline(always)]
fn whole_block(frames: u64) -> Option<Order> {
    match frames.is_power_of_two() {
        true => Order::new(frames.trailing_zeros() as u8),
        false => None,
    }
}

/// pageframe behind the range contract of OSTD's frame allocator: any
/// size and alignment in pages, any part of an allocation given back in
/// any order and in several calls, memory handed over range by range
/// before any zone exists, everything through `&self` from any CPU.
pub struct FrameAllocator {
    frames: Incremental<RANGES>,
    /// The CPU the caller runs on, for the per-CPU caches.
    current_cpu: fn() -> u32,
    /// Per CPU: its handle, claimed at its first local call and kept.
    locals: [Local; LOCAL_CPUS],
    refused_adds: AtomicU64,
    refused_frees: AtomicU64,
    failed_allocs: AtomicU64,
    adopted: AtomicU64,
}

/// Why [`FrameAllocator::dealloc`] gave nothing back.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DeallocError {
    /// The address or size is not a whole number of frames.
    Misaligned,
    /// The frames run past the last frame number: no allocation is that
    /// large.
    Overflow,
    /// No memory was ever handed over (no machine to give it to).
    NoMachine,
    /// A frame of the range is not allocated (never added, free already,
    /// a hole): pageframe's answer, naming the frame.
    Refused(RawError),
}

/// What the allocator refused since boot (each refusal left its state
/// unchanged), and the frames it adopted.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Counters {
    /// Ranges [`FrameAllocator::add_free_memory`] did not take.
    pub refused_adds: u64,
    /// Ranges [`FrameAllocator::dealloc`] did not free.
    pub refused_frees: u64,
    /// Allocations that found no memory (or an impossible layout).
    pub failed_allocs: u64,
    /// Frames given back that the allocator never had, taken as memory
    /// handed over (OSTD frees its early boot allocator's frames this way).
    pub adopted_frames: u64,
}

impl FrameAllocator {
    /// An allocator that carves its metadata from memory handed over
    /// inside `window` (frames the kernel maps at `virt` when the first
    /// allocation comes), without per-CPU caches.
    pub const fn new(window: PfnRange, virt: fn(PhysAddr) -> *mut u8) -> Self {
        FrameAllocator::over(
            Incremental::new(MachineConfig::SINGLE_NODE, window, virt),
            cpu_zero,
        )
    }

    /// The allocator over `frames`, its calls on `current_cpu()`'s cache.
    const fn over(frames: Incremental<RANGES>, current_cpu: fn() -> u32) -> Self {
        FrameAllocator {
            frames,
            current_cpu,
            locals: [const { Local(UnsafeCell::new(None)) }; LOCAL_CPUS],
            refused_adds: AtomicU64::new(0),
            refused_frees: AtomicU64::new(0),
            failed_allocs: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
        }
    }

    /// [`FrameAllocator::new`] with per-CPU caches for `cpus()` CPUs (asked
    /// at the first allocation, see [`Incremental::with_pcp`]), each call
    /// going through the cache of `current_cpu()` (claimed for the call:
    /// [`Machine::alloc_on`]).
    pub const fn with_pcp(
        window: PfnRange,
        virt: fn(PhysAddr) -> *mut u8,
        cpus: fn() -> u32,
        current_cpu: fn() -> u32,
    ) -> Self {
        FrameAllocator::over(
            Incremental::new(MachineConfig::SINGLE_NODE, window, virt).with_pcp(cpus),
            current_cpu,
        )
    }

    /// `frames` frames aligned to `align` frames (a power of two): the
    /// first frame, or `None` when there is no such memory (or the layout
    /// is impossible: no frame, an alignment not a power of two). Up to
    /// a maximal buddy block, a block of the next power of two whose frames
    /// past `frames` go straight back (through the local calls, a count
    /// that is no power of two comes first as a run of single frames from
    /// the CPU's cache or the zone: [`CpuCache::alloc_run_raw`]); beyond,
    /// a contiguous range.
    pub fn alloc_frames(&self, frames: u64, align: u64) -> Option<Pfn> {
        self.counted_alloc(frames, align, Via::Claim((self.current_cpu)()))
    }

    /// [`FrameAllocator::alloc_frames`] on CPU `cpu`, the caller's, through
    /// the handle this allocator keeps for it (claimed at the CPU's first
    /// local call): no claim per call, the cost of a per-CPU array. The
    /// caller names its CPU (a kernel knows it under the guard that pins
    /// it: OSTD's `DisabledLocalIrqGuard::current_cpu`), which spares the
    /// call to `current_cpu`. A CPU beyond [`LOCAL_CPUS`], or one whose
    /// caches a drain holds for a moment at its first call, takes the
    /// claimed path.
    ///
    /// # Safety
    ///
    /// The caller runs on CPU `cpu`, the number `current_cpu()` gives that
    /// CPU, with preemption and every interrupt that may call into this
    /// allocator off for the whole call (OSTD's `disable_local`, Linux's
    /// `local_lock`), and `current_cpu` names each CPU by one number for
    /// the allocator's life: so no two calls reach one CPU's handle at
    /// once.
    #[inline]
    pub unsafe fn alloc_frames_local(&self, cpu: u32, frames: u64, align: u64) -> Option<Pfn> {
        // One frame, the common case, straight from a handle kept already;
        // everything else (and a CPU's first call) out of line, so that
        // this path needs no stack frame of its own.
        if frames == 1 && align <= 1 {
            // SAFETY: the caller's promise, passed on.
            if let Some(h) = unsafe { self.kept(cpu) } {
                if let Ok(b) = h.alloc(Gfp::KERNEL, Order::ZERO) {
                    return Some(b.into_raw().0);
                }
                self.failed_allocs.fetch_add(1, Relaxed);
                return None;
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.alloc_general(cpu, frames, align) }
    }

    /// [`FrameAllocator::alloc_frames_local`] of anything but one frame
    /// through a kept handle.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::alloc_frames_local`].
    #[inline(never)]
    unsafe fn alloc_general(&self, cpu: u32, frames: u64, align: u64) -> Option<Pfn> {
        // A few frames through a kept handle, the next most common case: a
        // block of their order for a power of two the caches hold (up to
        // the costly order), else a run of single frames from the cache's
        // home, with no look-up of the machine or its order limits on the
        // way. What they refuse goes the general way below.
        if (2..=SMALL).contains(&frames)
            // SAFETY: the caller's promise, passed on.
            && let Some(h) = unsafe { self.kept(cpu) }
        {
            let got = match whole_block(frames) {
                Some(order) if align <= frames && !order.is_costly() => {
                    h.alloc(Gfp::KERNEL, order).ok().map(|b| b.into_raw().0)
                }
                _ if align <= 1 => h.alloc_run_raw(Gfp::KERNEL, frames),
                _ => None,
            };
            if got.is_some() {
                return got;
            }
        }
        // SAFETY: the caller's promise, passed on.
        match unsafe { self.local(cpu) } {
            Some(h) => self.counted_alloc(frames, align, Via::Local(h)),
            None => self.counted_alloc(frames, align, Via::Claim(cpu)),
        }
    }

    /// Empties the kept handle's caches of CPU `cpu`, the caller's, into the
    /// zones (frames cached there are not free in the zones' counts);
    /// nothing without a kept handle. Returns the frames given back.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::alloc_frames_local`].
    pub unsafe fn drain_local(&self, cpu: u32) -> u64 {
        // SAFETY: the caller's promise, passed on.
        match unsafe { self.slot(cpu) } {
            Some(Some(h)) => h.drain(),
            _ => 0,
        }
    }

    /// CPU `cpu`'s slot (its kept handle, if its first local call claimed
    /// one); `None` beyond [`LOCAL_CPUS`].
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::alloc_frames_local`]; the reference is
    /// dropped before the call returns.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn slot(&self, cpu: u32) -> Option<&mut Option<CpuCache<'static, 'static>>> {
        let slot = self.locals.get(cpu as usize)?;
        // SAFETY: only calls running on this slot's CPU reach it, one at a
        // time with interrupts and preemption off (the caller's promise),
        // and a call drops the reference before it returns.
        Some(unsafe { &mut *slot.0.get() })
    }

    /// This CPU's kept handle, if its first local call claimed it.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::slot`].
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn kept(&self, cpu: u32) -> Option<&mut CpuCache<'static, 'static>> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.slot(cpu) }?.as_mut()
    }

    /// This CPU's kept handle, claimed at its first local call. `None`
    /// before the machine is built, beyond [`LOCAL_CPUS`], or while a
    /// drain holds the CPU's unowned caches for a moment (the next call
    /// claims them).
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::slot`].
    #[allow(clippy::mut_from_ref)]
    unsafe fn local(&self, cpu: u32) -> Option<&mut CpuCache<'static, 'static>> {
        // SAFETY: the caller's promise, passed on.
        let h = unsafe { self.slot(cpu) }?;
        if h.is_none() {
            *h = self.claim(cpu);
        }
        h.as_mut()
    }

    /// CPU `cpu`'s handle, at its first local call.
    #[cold]
    #[inline(never)]
    fn claim(&self, cpu: u32) -> Option<CpuCache<'static, 'static>> {
        self.frames
            .machine()
            .ok()?
            .cpu(CpuId(cpu), NodeId::ZERO)
            .ok()
    }

    #[inline(always)]
    fn counted_alloc(&self, frames: u64, align: u64, via: Via<'_>) -> Option<Pfn> {
        let got = self.try_alloc(frames, align, via);
        if got.is_none() {
            self.failed_allocs.fetch_add(1, Relaxed);
        }
        got
    }

    #[inline(always)]
    fn try_alloc(&self, frames: u64, align: u64, via: Via<'_>) -> Option<Pfn> {
        if frames == 0 || !align.is_power_of_two() {
            return None;
        }
        let m = self.frames.machine().ok()?;
        // Checked: past 2^63 frames the power of two does not exist (a
        // wrapped one would be a single frame).
        let want = frames.checked_next_power_of_two()?.max(align);
        let max = m.inspect().mobility_config().buddy.max_order;
        if want > max.pages() {
            return Self::alloc_range(m, frames, align);
        }
        let order = Order::new(want.trailing_zeros() as u8)?;
        if want > frames {
            return self.alloc_part(m, frames, align, order, via);
        }
        Some(self.alloc_block(m, order, via)?.into_raw().0)
    }

    /// A block of `order` through `via`.
    #[inline(always)]
    fn alloc_block(&self, m: &Machine<'static>, order: Order, via: Via<'_>) -> Option<Block> {
        match via {
            Via::Local(h) => h.alloc(Gfp::KERNEL, order),
            Via::Claim(cpu) => m.alloc_on(CpuId(cpu), NodeId::ZERO, Gfp::KERNEL, order),
        }
        .ok()
    }

    /// `frames` fewer than the block of `order` holds (a count that is no
    /// power of two, or an alignment past it): a run of single frames
    /// through the handle (its cache or the zone: no block to split), else
    /// the block with the frames past `frames` given back.
    #[cold]
    fn alloc_part(
        &self,
        m: &Machine<'static>,
        frames: u64,
        align: u64,
        order: Order,
        mut via: Via<'_>,
    ) -> Option<Pfn> {
        if align <= 1
            && let Via::Local(h) = &mut via
            && let Some(p) = h.alloc_run_raw(Gfp::KERNEL, frames)
        {
            return Some(p);
        }
        let (pfn, order) = self.alloc_block(m, order, via)?.into_raw();
        // SAFETY: the block was allocated just above and is held only as
        // this number; its frames past `frames` are not handed to anyone.
        let spare = unsafe { m.free_raw(PfnRange::new(pfn + frames, pfn + order.pages())) };
        debug_assert!(spare.is_ok(), "{spare:?}");
        Some(pfn)
    }

    /// More frames than a buddy block: a contiguous range.
    #[cold]
    fn alloc_range(m: &Machine<'static>, frames: u64, align: u64) -> Option<Pfn> {
        let seg = m
            .alloc_contig(NodeId::ZERO, Gfp::KERNEL, frames, align, &mut NoMigration)
            .ok()?;
        Some(seg.into_raw().start)
    }

    /// Gives back `frames` frames from `pfn`: any part of one or more
    /// allocations (see [`Machine::free_raw`]). Frames the allocator never
    /// had (holes of its zones, handed over neither before the build nor
    /// since) are taken as memory handed over, as OSTD retires its early
    /// boot allocator by freeing that allocator's frames. Anything else
    /// (a frame free already, a range mixing allocated frames with others)
    /// is refused, with nothing freed.
    ///
    /// # Safety
    ///
    /// The frames are the caller's: allocated by this allocator and not
    /// freed since, or usable RAM the allocator never had that the caller
    /// gives up; in both cases no longer used.
    pub unsafe fn dealloc_frames(&self, pfn: Pfn, frames: u64) -> Result<(), DeallocError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.counted_dealloc(pfn, frames, Via::Claim((self.current_cpu)())) }
    }

    /// [`FrameAllocator::dealloc_frames`] through the handle this allocator
    /// keeps for the calling CPU (see
    /// [`FrameAllocator::alloc_frames_local`]).
    ///
    /// # Safety
    ///
    /// Both promises: [`FrameAllocator::dealloc_frames`]'s for the frames,
    /// [`FrameAllocator::alloc_frames_local`]'s for the CPU.
    #[inline]
    pub unsafe fn dealloc_frames_local(
        &self,
        cpu: u32,
        pfn: Pfn,
        frames: u64,
    ) -> Result<(), DeallocError> {
        // SAFETY: the caller's promises, passed on.
        unsafe { self.dealloc_frames_local_or(cpu, pfn, frames, |e| e) }
    }

    /// [`FrameAllocator::dealloc_frames_local`] whose refusal `err` turns
    /// into the caller's error: a caller that keeps none (OSTD's `dealloc`,
    /// which counts refusals only) gets its answer in a register, where a
    /// [`DeallocError`] comes back through memory.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames_local`].
    #[inline(always)]
    unsafe fn dealloc_frames_local_or<E>(
        &self,
        cpu: u32,
        pfn: Pfn,
        frames: u64,
        err: impl FnOnce(DeallocError) -> E,
    ) -> Result<(), E> {
        // One frame, the common case, straight to a kept handle, on a path
        // of its own where the order is a constant. Anything else (a
        // larger block goes to the handle there too), anything the handle
        // refuses (changing nothing) and a CPU's first call take the
        // general path, out of line.
        if frames == 1
            // SAFETY: the caller's promise, passed on.
            && let Some(h) = unsafe { self.kept(cpu) }
        {
            // SAFETY: the caller's promise: the frame is its own, allocated
            // by this allocator, held as a number only. The refusal changed
            // nothing; the general path decides, through the same handle,
            // in the free's out-of-line part.
            return unsafe {
                h.free_raw_or(pfn, Order::ZERO, |h, e| {
                    self.counted_dealloc(e.pfn, 1, Via::Local(h)).map_err(err)
                })
            };
        }
        // SAFETY: the caller's promises, passed on.
        unsafe { self.dealloc_general(cpu, pfn, frames, err) }
    }

    /// [`FrameAllocator::dealloc_frames_local_or`] of anything but one
    /// frame through a kept handle: a few frames straight to it, anything
    /// else (and what it refuses) the general path. Out of line, with the
    /// caller's error: its call is the caller's last step.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames_local`].
    #[inline(never)]
    unsafe fn dealloc_general<E>(
        &self,
        cpu: u32,
        pfn: Pfn,
        frames: u64,
        err: impl FnOnce(DeallocError) -> E,
    ) -> Result<(), E> {
        // A few frames back through a kept handle, as they came: a block
        // of a cached order, or a range (a run, or what the general way
        // handed out for it, which the range free takes too). A refusal
        // changes nothing, and the general way below decides (and counts
        // it).
        if (2..=SMALL).contains(&frames)
            // SAFETY: the caller's promise, passed on.
            && let Some(h) = unsafe { self.kept(cpu) }
        {
            // SAFETY: the caller's promise: the frames are its own,
            // allocated by this allocator, held as numbers only.
            let freed = unsafe {
                match whole_block(frames) {
                    Some(order) if !order.is_costly() => h.free_raw(pfn, order).is_ok(),
                    _ => h.free_range_raw(PfnRange::new(pfn, pfn + frames)).is_ok(),
                }
            };
            if freed {
                return Ok(());
            }
        }
        // SAFETY: the caller's promises, passed on.
        unsafe {
            match self.local(cpu) {
                Some(h) => self.counted_dealloc(pfn, frames, Via::Local(h)),
                None => self.counted_dealloc(pfn, frames, Via::Claim(cpu)),
            }
        }
        .map_err(err)
    }

    /// A dealloc, counted when refused.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames`].
    #[inline(always)]
    unsafe fn counted_dealloc(
        &self,
        pfn: Pfn,
        frames: u64,
        via: Via<'_>,
    ) -> Result<(), DeallocError> {
        // SAFETY: the caller's promise, passed on.
        let r = unsafe { self.try_dealloc(pfn, frames, via) };
        if r.is_err() {
            self.refused_frees.fetch_add(1, Relaxed);
        }
        r
    }

    /// [`FrameAllocator::dealloc_frames`] without the count.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames`].
    #[inline(always)]
    unsafe fn try_dealloc(
        &self,
        pfn: Pfn,
        frames: u64,
        mut via: Via<'_>,
    ) -> Result<(), DeallocError> {
        let m = self.frames.built().ok_or(DeallocError::NoMachine)?;
        // A whole block (the common case: a frame, or a power of two that
        // came out as one block) goes back through this CPU's cache; a
        // number that is no such block changes nothing there, and the
        // general path below decides.
        if let Some(order) = whole_block(frames) {
            let freed = match &mut via {
                // SAFETY: the caller's promise: the frames are its own,
                // allocated by this allocator, held as numbers only.
                Via::Local(h) => unsafe { h.free_raw(pfn, order) }.is_ok(),
                // SAFETY: as above.
                Via::Claim(cpu) => unsafe { m.block_from_raw(pfn, order) }
                    .map(|b| {
                        m.free_on(CpuId(*cpu), b)
                            .map_err(|refused| {
                                // Back as the caller's number.
                                let _ = refused.into_inner().into_raw();
                            })
                            .is_ok()
                    })
                    .unwrap_or(false),
            };
            if freed {
                return Ok(());
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.dealloc_range(m, pfn, frames, via) }
    }

    /// [`FrameAllocator::dealloc_frames`] of anything but a whole block:
    /// parts of allocations, frames never handed over.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames`].
    #[cold]
    unsafe fn dealloc_range(
        &self,
        m: &Machine<'static>,
        pfn: Pfn,
        frames: u64,
        via: Via<'_>,
    ) -> Result<(), DeallocError> {
        let end = pfn
            .checked_add(frames)
            .filter(|e| e.get() <= pageframe::zone::MAX_PFN)
            .ok_or(DeallocError::Overflow)?;
        let range = PfnRange::new(pfn, end);
        // SAFETY: the caller's promise, passed on (a run of single frames
        // goes back through the handle's cache, anything else as through
        // the machine).
        let freed = unsafe {
            match via {
                Via::Local(h) => h.free_range_raw(range),
                Via::Claim(_) => m.free_raw(range),
            }
        };
        match freed {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.why, FreeError::Hole | FreeError::OutOfRange) => {
                // SAFETY: the caller gives the range up; `add` takes it only
                // if no frame of it was ever handed over (every frame a
                // hole of a zone, none in a range gathered or added).
                unsafe { self.frames.add(range) }.map_err(|_| DeallocError::Refused(e))?;
                self.adopted.fetch_add(frames, Relaxed);
                Ok(())
            }
            Err(e) => Err(DeallocError::Refused(e)),
        }
    }

    /// [`FrameAllocator::dealloc_frames`] by address and size in bytes.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_frames`].
    pub unsafe fn dealloc(&self, addr: PhysAddr, size: u64) -> Result<(), DeallocError> {
        let (pfn, frames) = self.frames_of(addr, size)?;
        // SAFETY: the caller's promise, passed on.
        unsafe { self.dealloc_frames(pfn, frames) }
    }

    /// [`FrameAllocator::dealloc`] on CPU `cpu`, the caller's, through the
    /// handle this allocator keeps for it (see
    /// [`FrameAllocator::alloc_frames_local`]).
    ///
    /// # Safety
    ///
    /// Both promises: [`FrameAllocator::dealloc_frames`]'s for the frames,
    /// [`FrameAllocator::alloc_frames_local`]'s for the CPU.
    #[inline]
    pub unsafe fn dealloc_local(
        &self,
        cpu: u32,
        addr: PhysAddr,
        size: u64,
    ) -> Result<(), DeallocError> {
        let (pfn, frames) = self.frames_of(addr, size)?;
        // SAFETY: the caller's promises, passed on.
        unsafe { self.dealloc_frames_local(cpu, pfn, frames) }
    }

    /// The frames `[addr, addr + size)` names, or a refusal (counted) when
    /// it is no whole number of frames.
    #[inline(always)]
    fn frames_of(&self, addr: PhysAddr, size: u64) -> Result<(Pfn, u64), DeallocError> {
        if !addr.get().is_multiple_of(PAGE_SIZE) || !size.is_multiple_of(PAGE_SIZE) {
            self.refused_frees.fetch_add(1, Relaxed);
            return Err(DeallocError::Misaligned);
        }
        Ok((addr.pfn_down(), size / PAGE_SIZE))
    }

    /// Hands `[addr, addr + size)` over (whole frames inside it), counting
    /// refusals: see [`Incremental::add`]. A range that reaches beyond the
    /// physical address width, or whose end overflows 64 bits, is refused
    /// whole ([`AddError::AddressWidth`]).
    ///
    /// # Safety
    ///
    /// Usable RAM the caller gives up to the allocator, mapped at `virt`
    /// inside the window whenever an allocation may come.
    pub unsafe fn add_free_memory(&self, addr: PhysAddr, size: u64) -> Result<(), AddError> {
        let r = match addr.get().checked_add(size) {
            Some(end) => {
                let end = PhysAddr::new(end).pfn_down().max(addr.pfn_up());
                // SAFETY: the caller's promise, passed on.
                unsafe { self.frames.add(PfnRange::new(addr.pfn_up(), end)) }
            }
            // Past the end of a 64-bit address space, so beyond any width.
            None => Err(AddError::AddressWidth {
                pfn: addr.pfn_up().max(PhysAddr::new(u64::MAX).pfn_down()),
            }),
        };
        if r.is_err() {
            self.refused_adds.fetch_add(1, Relaxed);
        }
        r
    }

    /// The machine's reports (`buddyinfo`, free and managed frames, the
    /// debugging tools), once the first allocation has built it. A view
    /// that cannot allocate: every block of the machine is this
    /// allocator's, so that a free it is told to make (OSTD's `dealloc`
    /// is safe to call, and OSTD answers for its own frames only) can
    /// never reach a block held by anyone else.
    pub fn inspect(&self) -> Option<Inspect<'_, 'static>> {
        self.frames.built().map(Machine::inspect)
    }

    /// Checks the machine's books ([`Machine::validate`]); `Ok` before
    /// the first allocation has built it.
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.frames.built().map_or(Ok(()), Machine::validate)
    }

    /// The machine itself, once the first allocation has built it.
    ///
    /// # Safety
    ///
    /// The caller takes nothing of the machine for its own and frees
    /// nothing through it: no block, number or contiguous range comes out
    /// (a CPU's handle may drain its caches). Every frame of the machine
    /// then stays free or this allocator's, which its frees rely on: they
    /// take their caller's word for whose frames they are, and OSTD's
    /// `dealloc`, which any code may call, passes that word on.
    pub unsafe fn machine(&self) -> Option<&Machine<'static>> {
        self.frames.built()
    }

    /// What was refused since boot, and the frames adopted.
    pub fn counters(&self) -> Counters {
        Counters {
            refused_adds: self.refused_adds.load(Relaxed),
            refused_frees: self.refused_frees.load(Relaxed),
            failed_allocs: self.failed_allocs.load(Relaxed),
            adopted_frames: self.adopted.load(Relaxed),
        }
    }
}

/// The CPU of an allocator without per-CPU caches.
fn cpu_zero() -> u32 {
    0
}

#[cfg(feature = "ostd")]
mod ostd_impl;
#[cfg(feature = "ostd")]
pub use ostd_impl::OSTD_LINEAR_MAPPING;
