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
        match self {
            BlockError::OutOfRange => f.write_str("the frame lies outside the zone"),
            BlockError::PartialBlock => f.write_str("the pageblock is not wholly inside the zone"),
            BlockError::Unmovable { pfn } => {
                write!(
                    f,
                    "the unmovable or pinned block at {pfn} cannot be isolated"
                )
            }
            BlockError::AlreadyIsolated => f.write_str("the pageblock is already isolated"),
            BlockError::NotIsolated => f.write_str("the pageblock is not isolated"),
            BlockError::BadType => f.write_str("the pageblock type cannot be changed this way"),
        }
    }
}

impl core::error::Error for BlockError {}
