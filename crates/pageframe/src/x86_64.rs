//! Adapters for the `x86_64` crate's frame allocator traits, so page-table
//! code (`OffsetPageTable::map_to` and friends) takes frames from a node.

use ::x86_64::PhysAddr as X86PhysAddr;
use ::x86_64::structures::paging::{
    FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size2MiB, Size4KiB,
};
use pageframe_buddy::{Order, PAGE_SHIFT, Pfn};

use crate::{Gfp, Node};

/// Hands out 4 KiB and 2 MiB frames from a [`Node`] with fixed GFP flags.
pub struct FrameAdapter<'n, 'a> {
    node: &'n Node<'a>,
    gfp: Gfp,
    rejected_frees: u64,
}

impl<'n, 'a> FrameAdapter<'n, 'a> {
    /// An adapter allocating from `node` with `gfp`.
    pub fn new(node: &'n Node<'a>, gfp: Gfp) -> Self {
        FrameAdapter {
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
        let pfn = self.node.alloc(self.gfp, order).ok()?;
        PhysFrame::from_start_address(X86PhysAddr::new(pfn.addr().get())).ok()
    }

    fn free<S: PageSize>(&mut self, frame: PhysFrame<S>, order: Order) {
        let pfn = Pfn::new(frame.start_address().as_u64() >> PAGE_SHIFT);
        if self.node.free(pfn, order).is_err() {
            self.rejected_frees += 1;
        }
    }
}

// SAFETY: the trait requires that returned frames are unused. The node hands
// out each frame only while it is free in its buddy lists and marks it
// allocated under the zone lock before returning it, so no frame is returned
// twice until it has been freed.
unsafe impl FrameAllocator<Size4KiB> for FrameAdapter<'_, '_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        self.alloc(Order::ZERO)
    }
}

// SAFETY: as for 4 KiB frames; an order-9 block is 2 MiB and naturally aligned.
unsafe impl FrameAllocator<Size2MiB> for FrameAdapter<'_, '_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size2MiB>> {
        self.alloc(Order::HUGE_2M)
    }
}

impl FrameDeallocator<Size4KiB> for FrameAdapter<'_, '_> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size4KiB>) {
        self.free(frame, Order::ZERO);
    }
}

impl FrameDeallocator<Size2MiB> for FrameAdapter<'_, '_> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size2MiB>) {
        self.free(frame, Order::HUGE_2M);
    }
}
