//! The kernel heap, fed by the page allocator.
//!
//! Requests of a page or more go straight to `pageframe` as one block of
//! the smallest order that fits (blocks are naturally aligned, so any
//! alignment up to the block size is met). Smaller requests come from a
//! first-fit list heap living in one block taken from the allocator at
//! start-up. Requests larger than the largest block (4 MiB) are contiguous
//! ranges of exactly the frames they need (`alloc_contig`). Before [`init`] every request fails (returns null).

use crate::bringup::{KernelMachine, NODE};
use crate::memmap::PAGE_SIZE;
use core::alloc::{GlobalAlloc, Layout};
use core::ptr::null_mut;
use linked_list_allocator::Heap;
use pageframe::{Gfp, Order, Pfn, compact::NoMigration};
use spin::{Mutex, Once};

/// Order of the block behind the small-object heap (64 KiB).
const SMALL_HEAP_ORDER: u8 = 4;

/// The global allocator.
pub struct KernelHeap {
    machine: Once<&'static KernelMachine>,
    small: Mutex<Heap>,
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap {
    machine: Once::new(),
    small: Mutex::new(Heap::empty()),
};

/// Why the heap could not start.
#[derive(Debug, Clone, Copy)]
pub struct HeapInitError(pub pageframe::AllocError);

impl core::fmt::Display for HeapInitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "no block for the small-object heap: {}", self.0)
    }
}

/// Starts the heap over `machine`; returns the small heap's size in bytes.
pub fn init(machine: &'static KernelMachine) -> Result<usize, HeapInitError> {
    let order = Order::new(SMALL_HEAP_ORDER).expect("order 4 is valid");
    // Never freed: the heap lives as long as the kernel.
    let (pfn, _) = machine
        .alloc(NODE, Gfp::KERNEL, order)
        .map_err(HeapInitError)?
        .into_raw();
    let bytes = (order.pages() * PAGE_SIZE) as usize;
    // SAFETY: a block just allocated for the heap alone, mapped at its
    // physical address (the direct map covers all RAM), never freed.
    unsafe { HEAP.small.lock().init(pfn.addr().get() as *mut u8, bytes) };
    HEAP.machine.call_once(|| machine);
    Ok(bytes)
}

/// Where a request is served.
enum Route {
    /// Below a page: the small-object heap.
    Small,
    /// A block of this order from the page allocator.
    Pages(Order),
    /// Larger than any block: a contiguous range of this many frames,
    /// aligned to this many frames (`alloc_contig`).
    Range(u64, u64),
}

fn route(layout: Layout) -> Route {
    let bytes = layout.size().max(layout.align()) as u64;
    if bytes < PAGE_SIZE {
        return Route::Small;
    }
    match Order::for_pages(bytes.div_ceil(PAGE_SIZE)) {
        Some(order) if order <= Order::DEFAULT_MAX => Route::Pages(order),
        _ => Route::Range(
            (layout.size() as u64).div_ceil(PAGE_SIZE),
            (layout.align() as u64).div_ceil(PAGE_SIZE).max(1),
        ),
    }
}

// SAFETY: blocks are exclusive to their requester until freed; the small
// heap is behind a lock; alignment is met (see the module comment).
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match route(layout) {
            Route::Range(frames, align) => match self.machine.get() {
                // The heap moves nothing: candidates with movable pages are
                // passed over. The range is kept as its address until
                // `dealloc` (a pointer is all `GlobalAlloc` keeps).
                // Below 4 GiB first: large long-lived buffers (the modes'
                // reverse maps) stay out of the Normal zone's 1 GiB ranges.
                Some(machine) => machine
                    .alloc_contig(
                        NODE,
                        Gfp::KERNEL | Gfp::DMA32,
                        frames,
                        align,
                        &mut NoMigration,
                    )
                    .or_else(|_| {
                        machine.alloc_contig(NODE, Gfp::KERNEL, frames, align, &mut NoMigration)
                    })
                    .map_or(null_mut(), |a| a.into_raw().start.addr().get() as *mut u8),
                None => null_mut(),
            },
            Route::Pages(order) => match self.machine.get() {
                Some(machine) => machine
                    .alloc(NODE, Gfp::KERNEL, order)
                    .map_or(null_mut(), |a| a.into_raw().0.addr().get() as *mut u8),
                None => null_mut(),
            },
            Route::Small => self
                .small
                .lock()
                .allocate_first_fit(layout)
                .map_or(null_mut(), |p| p.as_ptr()),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match route(layout) {
            Route::Range(frames, _) => {
                let machine = self
                    .machine
                    .get()
                    .expect("a range was allocated, so init ran");
                let start = Pfn::new(ptr as u64 / PAGE_SIZE);
                let range = pageframe::PfnRange::new(start, start + frames);
                // SAFETY: `GlobalAlloc::dealloc`'s contract: `ptr` came from
                // `alloc` with this layout, i.e. this range, and is not used
                // again.
                let freed = unsafe { machine.segment_from_raw(range) }
                    .map_err(|e| e.why)
                    .and_then(|s| machine.free_segment(s).map_err(|e| e.reason()));
                if let Err(e) = freed {
                    panic!("heap: freeing range {range:?}: {e:?}");
                }
            }
            Route::Pages(order) => {
                let machine = self
                    .machine
                    .get()
                    .expect("a page block was allocated, so init ran");
                let pfn = Pfn::new(ptr as u64 / PAGE_SIZE);
                // SAFETY: as for ranges: this block came from `alloc`.
                let freed = unsafe { machine.block_from_raw(pfn, order) }
                    .map_err(|e| e.why)
                    .and_then(|b| machine.free(b).map_err(|e| e.reason()));
                if let Err(e) = freed {
                    panic!("heap: freeing block {pfn:?} order {order:?}: {e:?}");
                }
            }
            // SAFETY: `ptr` came from this heap with this layout (caller).
            Route::Small => unsafe {
                self.small
                    .lock()
                    .deallocate(core::ptr::NonNull::new_unchecked(ptr), layout)
            },
        }
    }
}
