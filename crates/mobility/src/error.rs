//! Mobility errors. A failing operation changes nothing.

use core::fmt;

use pageframe_buddy::Pfn;

/// Why a pageblock operation was refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BlockError {
    /// The frame lies outside the zone.
    OutOfRange,
    /// The pageblock is not wholly inside the zone.
    PartialBlock,
    /// Isolation would trap unmovable (or pinned) allocated memory.
    Unmovable {
        /// The first offending allocated block.
        pfn: Pfn,
    },
    /// The pageblock is already isolated.
    AlreadyIsolated,
    /// The pageblock is not isolated.
    NotIsolated,
    /// The type cannot be set this way (`Isolate` and `HighAtomic` have
    /// their own operations), or the block is isolated or reserved.
    BadType,
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl core::error::Error for BlockError {}
