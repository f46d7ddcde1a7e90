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

use crate::lock::RawMutex;
use crate::{Gfp, Machine, NodeId};

/// Hands out 4 KiB and 2 MiB frames from a [`Machine`] with fixed GFP
/// flags, for a task on one node.
pub struct FrameAdapter<'m, 'a, R: RawMutex> {
    machine: &'m Machine<'a, R>,
    node: NodeId,
    gfp: Gfp,
    rejected_frees: u64,
}

impl<'m, 'a, R: RawMutex> FrameAdapter<'m, 'a, R> {
    /// An adapter allocating from `machine` for `node` with `gfp`.
    ///
    /// # Safety
    ///
    /// Every frame handed to `machine` ([`Machine::add_free_range`]) must be
    /// RAM that nothing but the allocator's owners uses, for as long as the
    /// adapter lives: the `FrameAllocator` contract the adapter implements
    /// promises unused frames to page-table code, which writes them.
    pub unsafe fn new(machine: &'m Machine<'a, R>, node: NodeId, gfp: Gfp) -> Self {
        FrameAdapter {
            machine,
            node,
            gfp,
            rejected_frees: 0,
        }
    }

    /// Frees the traits could not report as errors (frame not allocated, or
    /// of another size): counted here, state unchanged.
    pub fn rejected_frees(&self) -> u64 {
        self.rejected_frees
    }

    fn alloc<S: PageSize>(&mut self, order: Order) -> Option<PhysFrame<S>> {
        let a = self.machine.alloc(self.node, self.gfp, order).ok()?;
        match PhysFrame::from_start_address(X86PhysAddr::new(a.pfn.addr().get())) {
            Ok(f) => Some(f),
            Err(_) => {
                // Not reachable (blocks are naturally aligned), but a frame
                // the trait cannot express goes back rather than leaking.
                let _ = self.machine.free(a.pfn, order);
                None
            }
        }
    }

    fn free<S: PageSize>(&mut self, frame: PhysFrame<S>, order: Order) {
        let pfn = Pfn::new(frame.start_address().as_u64() >> PAGE_SHIFT);
        if self.machine.free(pfn, order).is_err() {
            self.rejected_frees += 1;
        }
    }
}

// SAFETY: the machine hands each frame to one owner until it is freed (its
// checked free refuses anything else), and `FrameAdapter::new`'s contract
// makes every frame it manages unused RAM.
unsafe impl<R: RawMutex> FrameAllocator<Size4KiB> for FrameAdapter<'_, '_, R> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        self.alloc(Order::ZERO)
    }
}

// SAFETY: as for 4 KiB frames; an order-9 block is 2 MiB and naturally aligned.
unsafe impl<R: RawMutex> FrameAllocator<Size2MiB> for FrameAdapter<'_, '_, R> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size2MiB>> {
        self.alloc(Order::HUGE_2M)
    }
}

impl<R: RawMutex> FrameDeallocator<Size4KiB> for FrameAdapter<'_, '_, R> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size4KiB>) {
        self.free(frame, Order::ZERO);
    }
}

impl<R: RawMutex> FrameDeallocator<Size2MiB> for FrameAdapter<'_, '_, R> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size2MiB>) {
        self.free(frame, Order::HUGE_2M);
    }
}
