//! Turning the firmware memory map into usable RAM for the allocator's
//! planner.
//!
//! Usable RAM is the map's RAM minus low memory (below 1 MiB: real-mode
//! structures and the boot data), the kernel image and the boot data. The
//! planner (`pageframe::boot::Plan`, in `bringup.rs`) makes the zones of it
//! (DMA32 below 4 GiB, Normal above, as the map dictates), each spanning its
//! usable RAM with holes, and carves their metadata. Nothing is sized for
//! one machine: metadata scales with the span the map reports.

use crate::memmap::{CapacityError, PAGE_SIZE, PhysRange, RangeSet};

/// Everything below this address stays out of the allocator.
pub const LOW_MEMORY_END: u64 = 1 << 20;

/// Usable RAM: `ram` without low memory, the kernel image and the boot
/// data, in whole pages (a partly reserved page is reserved).
pub fn usable_ram(
    ram: &RangeSet,
    kernel: PhysRange,
    boot_data: &[PhysRange],
) -> Result<RangeSet, CapacityError> {
    let mut usable = ram.clone();
    usable.remove(PhysRange::new(0, LOW_MEMORY_END))?;
    for r in core::iter::once(&kernel).chain(boot_data) {
        usable.remove(PhysRange::new(
            r.start / PAGE_SIZE * PAGE_SIZE,
            r.end.next_multiple_of(PAGE_SIZE),
        ))?;
    }
    Ok(usable)
}
