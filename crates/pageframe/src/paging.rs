//! Adapters for the `x86_64` crate's frame allocator traits, so page-table
//! code (`OffsetPageTable::map_to` and friends) takes frames from a
//! [`Machine`].
//!
//! This is where frame numbers become memory: the `x86_64` crate's
//! `FrameAllocator` is an `unsafe` trait whose implementor promises that
//! every frame it returns is unused memory. The allocator guarantees that
//! it hands a frame to one owner at a time; that the frame is RAM nobody
//! else uses is what the kernel promised when it handed the memory over,
//! so building an adapter is the trust boundary ([`FrameAdapter::new`]).

use ::x86_64::PhysAddr as X86PhysAddr;
use ::x86_64::structures::paging::{
    FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size2MiB, Size4KiB,
};
use pageframe_buddy::{Order, PAGE_SHIFT, Pfn};

use crate::debug::NoHooks;
use crate::lock::{Platform, SpinLock};
use crate::{Gfp, Machine, NodeId};

/// Hands out 4 KiB and 2 MiB frames from a [`Machine`] with fixed GFP
/// flags, for a task on one node.
pub struct FrameAdapter<'m, 'a, P: Platform = (SpinLock, NoHooks)> {
    machine: &'m Machine<'a, P>,
    node: NodeId,
    gfp: Gfp,
    rejected_frees: u64,
}

impl<'m, 'a, P: Platform> FrameAdapter<'m, 'a, P> {
    /// An adapter allocating from `machine` for `node` with `gfp`.
    ///
    /// # Safety
    ///
    /// Every frame handed to `machine` ([`Machine::add_free_range`]) must be
    /// RAM that nothing but the allocator's owners uses, for as long as the
    /// adapter lives: the `FrameAllocator` contract the adapter implements
    /// promises unused frames to page-table code, which writes them.
    pub unsafe fn new(machine: &'m Machine<'a, P>, node: NodeId, gfp: Gfp) -> Self {
        FrameAdapter {
            machine,
            node,
            gfp,
            rejected_frees: 0,
        }
    }

    /// Frees the traits could not report as errors (a frame not allocated,
    /// or of another size): counted here, state unchanged.
    pub fn rejected_frees(&self) -> u64 {
        self.rejected_frees
    }

    fn alloc<S: PageSize>(&mut self, order: Order) -> Option<PhysFrame<S>> {
        let block = self.machine.alloc(self.node, self.gfp, order).ok()?;
        // A frame the `x86_64` crate cannot express (at or above 2^52
        // bytes) goes back to the machine rather than leaking or panicking.
        match X86PhysAddr::try_new(block.addr().get())
            .ok()
            .and_then(|a| PhysFrame::from_start_address(a).ok())
        {
            Some(f) => {
                // Page-table code keeps the frame as a number from here on.
                let _ = block.into_raw();
                Some(f)
            }
            None => {
                let _ = self.machine.free(block);
                None
            }
        }
    }

    /// # Safety
    ///
    /// `frame` is a frame this adapter handed out, unused from now on.
    unsafe fn free<S: PageSize>(&mut self, frame: PhysFrame<S>, order: Order) {
        let pfn = Pfn::new(frame.start_address().as_u64() >> PAGE_SHIFT);
        // SAFETY: the caller's promise (the trait's): the frame came from
        // this adapter's machine and nothing uses it any more.
        let freed = match unsafe { self.machine.block_from_raw(pfn, order) } {
            Ok(b) => self.machine.free(b).is_ok(),
            Err(_) => false,
        };
        if !freed {
            self.rejected_frees += 1;
        }
    }
}

// SAFETY: the machine hands each frame to one owner until it is freed (its
// checked free refuses anything else), and `FrameAdapter::new`'s contract
// makes every frame it manages unused RAM.
unsafe impl<P: Platform> FrameAllocator<Size4KiB> for FrameAdapter<'_, '_, P> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        self.alloc(Order::ZERO)
    }
}

// SAFETY: as for 4 KiB frames; an order-9 block is 2 MiB and naturally aligned.
unsafe impl<P: Platform> FrameAllocator<Size2MiB> for FrameAdapter<'_, '_, P> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size2MiB>> {
        self.alloc(Order::HUGE_2M)
    }
}

impl<P: Platform> FrameDeallocator<Size4KiB> for FrameAdapter<'_, '_, P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size4KiB>) {
        // SAFETY: the trait's contract: an unused frame this allocator
        // handed out.
        unsafe { self.free(frame, Order::ZERO) };
    }
}

impl<P: Platform> FrameDeallocator<Size2MiB> for FrameAdapter<'_, '_, P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size2MiB>) {
        // SAFETY: as for 4 KiB frames.
        unsafe { self.free(frame, Order::HUGE_2M) };
    }
}
