//! Multiboot2 (GRUB): the areas of its memory-map tag.

use multiboot2::{MemoryArea, MemoryAreaType};

use super::{FrameRanges, MapError};

impl<const N: usize> FrameRanges<N> {
    /// The `Available` areas, less every other area (reserved, ACPI,
    /// hibernation, defective RAM).
    ///
    /// ```
    /// use multiboot2::{MemoryArea, MemoryAreaType};
    /// use pageframe::boot::FrameRanges;
    ///
    /// let map = [
    ///     MemoryArea::new(0, 0x9fc00, MemoryAreaType::Available),
    ///     MemoryArea::new(0x10_0000, 0x7ef_0000, MemoryAreaType::Available),
    ///     MemoryArea::new(0x200_0000, 0x1000, MemoryAreaType::Defective),
    /// ];
    /// // In a kernel: FrameRanges::<128>::from_multiboot2(boot_info.memory_map_tag().unwrap().memory_areas())
    /// let ram = FrameRanges::<128>::from_multiboot2(&map).unwrap();
    /// assert_eq!(ram.ranges().len(), 3, "the bad frame splits the range");
    /// ```
    pub fn from_multiboot2(areas: &[MemoryArea]) -> Result<Self, MapError> {
        Self::from_entries(areas.iter().map(|a| {
            (
                a.start_address(),
                a.size(),
                a.typ() == MemoryAreaType::Available,
            )
        }))
    }
}
