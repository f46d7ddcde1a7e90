//! Limine: the entries of its memory-map response.

use limine::memory_map::{Entry, EntryType};

use super::{FrameRanges, MapError};

impl<const N: usize> FrameRanges<N> {
    /// The `USABLE` entries, less every other entry. Bootloader-reclaimable
    /// memory stays out: hand it over with [`FrameRanges::add_usable`] once
    /// the kernel no longer needs what Limine left there.
    ///
    /// ```
    /// use limine::memory_map::{Entry, EntryType};
    /// use pageframe::boot::FrameRanges;
    ///
    /// let e = |base, length, entry_type| Entry { base, length, entry_type };
    /// let map = [
    ///     &e(0x1000, 0x9e000, EntryType::USABLE),
    ///     &e(0x10_0000, 0x7ee_0000, EntryType::USABLE),
    ///     &e(0x7fe_0000, 0x2_0000, EntryType::ACPI_RECLAIMABLE),
    /// ];
    /// // In a kernel: FrameRanges::<128>::from_limine(MEMORY_MAP_REQUEST.get_response().unwrap().entries())
    /// let ram = FrameRanges::<128>::from_limine(&map).unwrap();
    /// assert_eq!(ram.ranges().len(), 2);
    /// ```
    pub fn from_limine(entries: &[&Entry]) -> Result<Self, MapError> {
        Self::from_entries(
            entries
                .iter()
                .map(|e| (e.base, e.length, e.entry_type == EntryType::USABLE)),
        )
    }
}
