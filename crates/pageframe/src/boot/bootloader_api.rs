//! `bootloader_api` (the `bootloader` crate's BIOS and UEFI loaders): its
//! `BootInfo::memory_regions`.

use bootloader_api::info::{MemoryRegion, MemoryRegionKind};

use super::{FrameRanges, MapError};

impl<const N: usize> FrameRanges<N> {
    /// The `Usable` regions, less every other region (the loader's page
    /// tables and boot info, firmware entries it passes through).
    ///
    /// ```
    /// use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
    /// use pageframe::boot::FrameRanges;
    ///
    /// let regions = [
    ///     MemoryRegion { start: 0x1000, end: 0x9f000, kind: MemoryRegionKind::Usable },
    ///     MemoryRegion { start: 0x10_0000, end: 0x40_0000, kind: MemoryRegionKind::Bootloader },
    ///     MemoryRegion { start: 0x40_0000, end: 0x800_0000, kind: MemoryRegionKind::Usable },
    /// ];
    /// // In a kernel: FrameRanges::<128>::from_bootloader_api(&boot_info.memory_regions)
    /// let ram = FrameRanges::<128>::from_bootloader_api(&regions).unwrap();
    /// assert_eq!(ram.frames(), 0x9e + 0x7c00);
    /// ```
    pub fn from_bootloader_api(regions: &[MemoryRegion]) -> Result<Self, MapError> {
        Self::from_entries(regions.iter().map(|r| {
            (
                r.start,
                r.end.wrapping_sub(r.start),
                r.kind == MemoryRegionKind::Usable,
            )
        }))
    }
}
