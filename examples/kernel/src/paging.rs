//! The kernel's own page tables: a direct map of all RAM at its physical
//! address, 2 MiB pages where alignment allows, 4 KiB pages at the edges.
//!
//! The boot stub's tables only cover 4 GiB; these cover every RAM range the
//! firmware reports, including RAM above 4 GiB. Page 0 is left unmapped so a
//! null dereference faults. Only the kernel image stays executable.
//! Table frames come from the page allocator through the facade's
//! `FrameAllocator` adapter; they must be DMA32 frames while the boot tables
//! are live, since only the first 4 GiB is reachable until the switch.

use crate::memmap::{PAGE_SIZE, PhysRange, RangeSet};
use x86_64::registers::control::{Cr3, Cr3Flags};
use x86_64::structures::paging::mapper::{MapToError, MapperFlush};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageSize, PageTable, PageTableFlags, PhysFrame,
    Size2MiB, Size4KiB,
};
use x86_64::{PhysAddr, VirtAddr};

/// What the direct map holds, for the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct DirectMap {
    /// 2 MiB mappings.
    pub huge_pages: u64,
    /// 4 KiB mappings.
    pub small_pages: u64,
    /// Page-table frames taken from the allocator.
    pub table_frames: u64,
    /// The new level-4 table's physical address.
    pub root: u64,
}

/// Why the direct map could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The frame allocator ran dry.
    OutOfFrames,
    /// A page was already mapped (overlapping RAM ranges: a bug).
    AlreadyMapped(u64),
}

impl core::fmt::Display for MapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfFrames => write!(f, "out of frames for page tables"),
            Self::AlreadyMapped(a) => write!(f, "{a:#x} mapped twice"),
        }
    }
}

/// Converts the x86_64 crate's error for a mapping at `addr`.
fn map_error<S: PageSize>(addr: u64) -> impl FnOnce(MapToError<S>) -> MapError {
    move |e| match e {
        MapToError::FrameAllocationFailed => MapError::OutOfFrames,
        MapToError::ParentEntryHugePage | MapToError::PageAlreadyMapped(_) => {
            MapError::AlreadyMapped(addr)
        }
    }
}

/// Counts the frames it hands out, to report the tables' cost.
struct Counting<'a, A> {
    inner: &'a mut A,
    count: u64,
}

// SAFETY: forwards to an allocator that upholds the trait's contract.
unsafe impl<A: FrameAllocator<Size4KiB>> FrameAllocator<Size4KiB> for Counting<'_, A> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        let f = self.inner.allocate_frame()?;
        self.count += 1;
        Some(f)
    }
}

/// Builds the direct map of `ram` and switches CR3 to it.
///
/// # Safety
/// `ram` must include every physical address the kernel touches from now on
/// (image, stack, allocator metadata, boot copies), and `frames` must hand
/// out unused frames below 4 GiB.
pub unsafe fn build_and_switch<A: FrameAllocator<Size4KiB>>(
    ram: &RangeSet,
    kernel: PhysRange,
    frames: &mut A,
) -> Result<DirectMap, MapError> {
    let mut frames = Counting {
        inner: frames,
        count: 0,
    };
    let root = frames.allocate_frame().ok_or(MapError::OutOfFrames)?;
    let root_ptr = root.start_address().as_u64() as *mut PageTable;
    // SAFETY: a fresh frame from the allocator, identity-mapped below 4 GiB;
    // nothing else references it.
    let l4 = unsafe {
        root_ptr.write(PageTable::new());
        &mut *root_ptr
    };
    // SAFETY: physical memory is reachable at offset 0 (identity) for every
    // table frame: they all come from below 4 GiB, which the boot tables map.
    let mut mapper = unsafe { OffsetPageTable::new(l4, VirtAddr::new(0)) };
    let mut map = DirectMap {
        root: root.start_address().as_u64(),
        ..DirectMap::default()
    };

    let base = PageTableFlags::PRESENT | PageTableFlags::WRITABLE;
    let flags_for = |start: u64, len: u64| {
        let range = PhysRange::new(start, start + len);
        if range.intersect(&kernel).is_empty() {
            base | PageTableFlags::NO_EXECUTE
        } else {
            base
        }
    };
    for r in ram.ranges() {
        // Page 0 stays unmapped: null dereferences fault.
        let mut addr = r.start.max(PAGE_SIZE);
        while addr < r.end {
            let huge = Size2MiB::SIZE;
            if addr % huge == 0 && r.end - addr >= huge {
                let page = Page::<Size2MiB>::containing_address(VirtAddr::new(addr));
                let frame = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(addr));
                // SAFETY: the page maps RAM to its own address in tables that
                // are not live yet; no existing reference is affected.
                let flush: MapperFlush<Size2MiB> =
                    unsafe { mapper.map_to(page, frame, flags_for(addr, huge), &mut frames) }
                        .map_err(map_error(addr))?;
                flush.ignore();
                map.huge_pages += 1;
                addr += huge;
            } else {
                let page = Page::<Size4KiB>::containing_address(VirtAddr::new(addr));
                let frame = PhysFrame::<Size4KiB>::containing_address(PhysAddr::new(addr));
                // SAFETY: as above.
                let flush =
                    unsafe { mapper.map_to(page, frame, flags_for(addr, PAGE_SIZE), &mut frames) }
                        .map_err(map_error(addr))?;
                flush.ignore();
                map.small_pages += 1;
                addr += PAGE_SIZE;
            }
        }
    }
    map.table_frames = frames.count;
    // SAFETY: the new tables map all RAM at the same addresses as the boot
    // tables did (caller's contract), so every live reference stays valid.
    unsafe { Cr3::write(root, Cr3Flags::empty()) };
    Ok(map)
}
