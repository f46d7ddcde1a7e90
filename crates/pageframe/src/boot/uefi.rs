//! UEFI: the memory map after `ExitBootServices`, as `uefi-raw`
//! descriptors.

use uefi_raw::table::boot::{MemoryDescriptor, MemoryType};

use super::{FrameRanges, MapError};

/// What the kernel may use once boot services have exited: conventional
/// memory and the boot services' code and data. Loader memory (where the
/// kernel image and its boot data usually are), runtime services, ACPI,
/// MMIO, persistent and unusable memory stay out.
fn usable(ty: MemoryType) -> bool {
    matches!(
        ty,
        MemoryType::CONVENTIONAL | MemoryType::BOOT_SERVICES_CODE | MemoryType::BOOT_SERVICES_DATA
    )
}

impl<const N: usize> FrameRanges<N> {
    /// The usable descriptors (see above), less every other descriptor.
    /// Pass the descriptors themselves: a firmware's descriptor stride may
    /// exceed `size_of::<MemoryDescriptor>()`, which the `uefi` crate's
    /// memory-map iterator takes care of.
    ///
    /// ```
    /// use uefi_raw::table::boot::{MemoryDescriptor, MemoryType};
    /// use pageframe::boot::FrameRanges;
    ///
    /// let d = |ty, phys_start, page_count| MemoryDescriptor { ty, phys_start, page_count, ..MemoryDescriptor::default() };
    /// let map = [
    ///     d(MemoryType::CONVENTIONAL, 0x1000, 0x9f),
    ///     d(MemoryType::LOADER_CODE, 0x10_0000, 0x100),
    ///     d(MemoryType::BOOT_SERVICES_DATA, 0x20_0000, 0x7e00),
    ///     d(MemoryType::RUNTIME_SERVICES_DATA, 0x800_0000, 0x10),
    /// ];
    /// let ram = FrameRanges::<128>::from_uefi(&map).unwrap();
    /// assert_eq!(ram.frames(), 0x9f + 0x7e00);
    /// ```
    pub fn from_uefi<'d, I>(descriptors: I) -> Result<Self, MapError>
    where
        I: IntoIterator<Item = &'d MemoryDescriptor>,
        I::IntoIter: Clone,
    {
        Self::from_entries(descriptors.into_iter().map(|d| {
            (
                d.phys_start,
                d.page_count.saturating_mul(4096),
                usable(d.ty),
            )
        }))
    }
}
