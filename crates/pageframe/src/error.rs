//! Facade errors.

use core::fmt;

pub use pageframe_buddy::{FreeError, InitError, RangeError, ValidateError};

/// Why an allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// No eligible zone had a free block of the order within its watermarks.
    OutOfMemory,
    /// The order exceeds the maximum order.
    OrderTooLarge,
    /// The GFP flags combine incompatible bits (two zone selectors, movable
    /// and reclaimable at once).
    InvalidGfp,
    /// No zone the GFP flags allow exists on the node.
    NoEligibleZone,
    /// `alloc_at`: the frame lies outside the zone, is misaligned, in a hole
    /// or not free.
    Unavailable,
}

impl From<pageframe_buddy::AllocError> for AllocError {
    fn from(e: pageframe_buddy::AllocError) -> Self {
        use pageframe_buddy::AllocError as B;
        match e {
            B::OutOfMemory => AllocError::OutOfMemory,
            B::OrderTooLarge => AllocError::OrderTooLarge,
            B::OutOfRange | B::Misaligned | B::Hole | B::Busy => AllocError::Unavailable,
        }
    }
}

/// Why a zone could not join a node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum NodeError {
    /// The node already has a zone of that kind.
    DuplicateZone,
    /// The zone's span overlaps another zone's.
    OverlappingSpan,
}

macro_rules! display_via_debug {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
        impl core::error::Error for $t {}
    )*};
}
display_via_debug!(AllocError, NodeError);
