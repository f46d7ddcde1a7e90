//! Typed errors. Every failing operation leaves the allocator unchanged.

use core::fmt;

use crate::{Order, Pfn};

/// Why a zone could not be created.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InitError {
    /// The span holds no frame.
    EmptySpan,
    /// The span (rounded out to max-order alignment) has more frames than a
    /// zone indexes (`u32::MAX - 1`).
    SpanTooLarge,
    /// The configured maximum order is above [`crate::ORDER_LIMIT`].
    BadMaxOrder,
    /// The metadata buffer is smaller than [`crate::BuddyZone::metadata_bytes`].
    MetadataTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
}

/// Why a range could not be handed over, reserved or released.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RangeError {
    /// The range holds no frame.
    Empty,
    /// Part of the range lies outside the zone's span.
    OutOfSpan,
    /// A frame of the range was already handed over (overlapping regions).
    Overlap {
        /// First offending frame.
        pfn: Pfn,
    },
    /// A frame of the range is a hole (never handed over).
    Hole {
        /// First offending frame.
        pfn: Pfn,
    },
    /// A frame of the range is not free (reserve) or not allocated (release).
    Busy {
        /// First offending frame.
        pfn: Pfn,
    },
    /// The range does not tile into whole allocated blocks (release).
    NotBlockAligned {
        /// First frame where the tiling breaks.
        pfn: Pfn,
    },
}

/// Why an allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// No free block of the order (or larger) on the requested list.
    OutOfMemory,
    /// The order exceeds the zone's maximum order.
    OrderTooLarge,
    /// `alloc_at`: the frame lies outside the zone.
    OutOfRange,
    /// `alloc_at`: the frame is not aligned to the order.
    Misaligned,
    /// `alloc_at`: the frame is a hole.
    Hole,
    /// `alloc_at`: part of the block is not free.
    Busy,
}

/// Why a free was refused. The state is unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FreeError {
    /// The order exceeds the zone's maximum order.
    OrderTooLarge,
    /// The frame lies outside the zone's span.
    OutOfRange,
    /// The frame is not aligned to the order.
    Misaligned,
    /// The frame is in a hole: never managed by this zone.
    Hole,
    /// The frame is already free (double free).
    AlreadyFree,
    /// The frame lies inside an allocated block but is not its head.
    NotBlockHead {
        /// Head of the block that contains the frame.
        head: Pfn,
        /// That block's order.
        order: Order,
    },
    /// The block was allocated with another order.
    WrongOrder {
        /// The order it was allocated with.
        allocated: Order,
    },
}

/// A broken invariant found by `validate()` (a bug, never bad input).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ValidateError {
    /// Which rule broke.
    pub rule: &'static str,
    /// Where, if a frame is involved.
    pub pfn: Option<Pfn>,
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
display_via_debug!(InitError, RangeError, AllocError, FreeError, ValidateError);
