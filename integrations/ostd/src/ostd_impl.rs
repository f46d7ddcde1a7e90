//! The OSTD trait on top: every call with local interrupts off (an
//! interrupt handler that allocates must not find this CPU holding a zone
//! lock).

use core::alloc::Layout;
use core::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use ostd::cpu::{CpuSet, PinCurrentCpu};
use ostd::mm::{Paddr, frame::GlobalFrameAllocator};
use pageframe::{PAGE_SIZE, Pfn, PfnRange, PhysAddr};

use crate::FrameAllocator;

/// Where OSTD maps all physical memory on x86-64 with 4-level paging
/// (`LINEAR_MAPPING_BASE_VADDR`; its boot page table maps the first 4 GiB
/// there, the kernel page table all of it).
pub const OSTD_LINEAR_MAPPING: u64 = 0xffff_8000_0000_0000;

fn linear(pa: PhysAddr) -> *mut u8 {
    (OSTD_LINEAR_MAPPING + pa.get()) as *mut u8
}

/// CPUs OSTD brings up (known before its frame allocator is first used).
fn cpus() -> u32 {
    ostd::cpu::num_cpus() as u32
}

/// The CPU running the call (interrupts are off for its length, so it
/// cannot move).
fn current_cpu() -> u32 {
    u32::from(ostd::cpu::CpuId::current_racy())
}

impl FrameAllocator {
    /// The allocator for an OSTD kernel: metadata (and the per-CPU caches'
    /// memory) carved from the first 4 GiB, which OSTD's boot page table
    /// maps when the first frame is allocated; a per-CPU cache for each
    /// CPU OSTD brings up.
    pub const fn for_ostd() -> Self {
        FrameAllocator::with_pcp(
            PfnRange::new(Pfn::new(0), Pfn::new(1 << 20)),
            linear,
            cpus,
            current_cpu,
        )
    }

    /// A second allocator in an OSTD kernel, over memory it is handed once
    /// the kernel runs (OSTD's kernel page table then maps all of it):
    /// metadata carved inside `window`.
    pub const fn for_ostd_in(window: PfnRange) -> Self {
        FrameAllocator::with_pcp(window, linear, cpus, current_cpu)
    }
}

/// The allocator whose kept handles the inter-processor call of
/// [`FrameAllocator::drain_caches`] drains (one drain at a time).
static DRAINING: AtomicPtr<FrameAllocator> = AtomicPtr::new(core::ptr::null_mut());
static DRAIN_BUSY: AtomicBool = AtomicBool::new(false);

/// Run on every CPU by [`FrameAllocator::drain_caches`], in interrupt
/// context.
fn drain_kept() {
    let a = DRAINING.load(Ordering::Acquire);
    // SAFETY: `drain_caches` stores a `&'static FrameAllocator` there and
    // waits for this call on every CPU before clearing it.
    let Some(a) = (unsafe { a.as_ref() }) else {
        return;
    };
    // SAFETY: an interrupt handler runs on its CPU with interrupts off,
    // and it cannot have interrupted a local call of this CPU (those run
    // with interrupts off): nothing else reaches this CPU's handle now.
    unsafe { a.drain_local(current_cpu()) };
}

impl FrameAllocator {
    /// [`FrameAllocator::dealloc_local`] for a caller that keeps no error
    /// (each refusal is counted): `false` when refused. Out of line, with
    /// its answer in a register, so that each call on its hit path is its
    /// last step (see `CpuCache::free_raw_or`) and the path saves no
    /// register; inline in a caller that turns its interrupts back on
    /// after it, the caller would save registers for its rare paths' calls.
    ///
    /// # Safety
    ///
    /// As for [`FrameAllocator::dealloc_local`].
    #[inline(never)]
    unsafe fn dealloc_local_counted(&self, cpu: u32, addr: PhysAddr, size: u64) -> bool {
        let Ok((pfn, frames)) = self.frames_of(addr, size) else {
            return false;
        };
        // SAFETY: the caller's promises, passed on.
        unsafe { self.dealloc_frames_local_or(cpu, pfn, frames, drop) }.is_ok()
    }

    /// Empties every CPU's cache into the zones, as Linux's
    /// `drain_all_pages`: each CPU drains its own kept handle in an
    /// inter-processor call, so no CPU waits on another's allocation.
    /// Waits for every CPU: call it with interrupts on, never from an
    /// interrupt handler or an allocation.
    pub fn drain_caches(&'static self) {
        while DRAIN_BUSY
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        DRAINING.store(core::ptr::from_ref(self).cast_mut(), Ordering::Release);
        ostd::smp::inter_processor_call(&CpuSet::new_full(), drain_kept).wait();
        DRAINING.store(core::ptr::null_mut(), Ordering::Release);
        DRAIN_BUSY.store(false, Ordering::Release);
    }
}

impl GlobalFrameAllocator for FrameAllocator {
    fn alloc(&self, layout: Layout) -> Option<Paddr> {
        let irq = ostd::irq::disable_local();
        let cpu = u32::from(irq.current_cpu());
        let (size, align) = (layout.size() as u64, layout.align() as u64);
        // One frame, the common case, told in one compare: a size of 1 to
        // 4096 bytes (zero wraps past it) at an alignment of at most 4096
        // (a power of two: less than 4096 after the subtraction), so the
        // two numbers' bits together stay below 4096.
        let p = if (size.wrapping_sub(1) | (align - 1)) < PAGE_SIZE {
            // SAFETY: interrupts are off for the call, so it cannot move to
            // another CPU or be re-entered on this one; `cpu` is OSTD's own
            // number of the CPU, as `current_cpu` gives it. The local
            // call's hit, inline.
            unsafe { self.alloc_frames_local(cpu, 1, 1) }
        } else {
            let frames = size.div_ceil(PAGE_SIZE);
            // SAFETY: as above.
            unsafe { self.alloc_general(cpu, frames, (align / PAGE_SIZE).max(1)) }
        };
        // Every frame this allocator hands out lies below `MAX_PFN`, so the
        // product is its address (`Pfn::addr` saturates, a compare more).
        p.map(|p| (p.get() * PAGE_SIZE) as Paddr)
    }

    fn dealloc(&self, addr: Paddr, size: usize) {
        let irq = ostd::irq::disable_local();
        let cpu = u32::from(irq.current_cpu());
        // SAFETY: OSTD gives back only memory this allocator handed out,
        // each frame once (the trait's contract); interrupts are off and
        // `cpu` is this CPU's number, as for `alloc`. A refusal is counted.
        unsafe { self.dealloc_local_counted(cpu, PhysAddr::new(addr as u64), size as u64) };
    }

    fn add_free_memory(&self, addr: Paddr, size: usize) {
        let _irq = ostd::irq::disable_local();
        // SAFETY: OSTD hands over usable RAM no one else uses, each range
        // once (the trait's contract), and maps the first 4 GiB linearly
        // from boot. A refusal is counted.
        let _ = unsafe {
            FrameAllocator::add_free_memory(self, PhysAddr::new(addr as u64), size as u64)
        };
    }
}
