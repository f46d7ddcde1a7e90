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
    /// The chunk order is above the maximum order or
    /// [`crate::MAX_CHUNK_ORDER`].
    BadChunkOrder,
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
    /// A range holds only part of an allocated block: the block starts in
    /// it but reaches past its end.
    PartOfBlock {
        /// Head of the block.
        head: Pfn,
        /// The block's order.
        order: Order,
    },
    /// The block was allocated with another order.
    WrongOrder {
        /// The order it was allocated with.
        allocated: Order,
    },
    /// The block is held by the allocator for an operation in progress (a
    /// migration moving it, a contiguous range being gathered): its owner
    /// cannot free it now. Layers above the core return it; retry after
    /// the operation completes (a migrated block's owner frees the new
    /// frame it was told about).
    Busy,
    /// The memory belongs to another allocator (a block of another
    /// machine, a reservation of another zone).
    Foreign,
    /// A block of one frame has no halves to split into.
    SingleFrame,
}

/// A broken invariant found by `validate()` (a bug, never bad input).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ValidateError {
    /// Which structure breaks it ("free lists", "frame words",
    /// "ownership bytes", ...).
    pub structure: &'static str,
    /// Which rule broke.
    pub rule: &'static str,
    /// Where, if a frame is involved.
    pub pfn: Option<Pfn>,
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::EmptySpan => f.write_str("the zone span holds no frame"),
            InitError::SpanTooLarge => {
                f.write_str("the zone span has more frames than a zone can index")
            }
            InitError::BadMaxOrder => f.write_str("the maximum order is above the supported limit"),
            InitError::BadChunkOrder => {
                f.write_str("the chunk order is above the maximum order or the supported limit")
            }
            InitError::MetadataTooSmall { needed, given } => {
                write!(
                    f,
                    "metadata buffer too small: {given} bytes given, {needed} needed"
                )
            }
        }
    }
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangeError::Empty => f.write_str("the range holds no frame"),
            RangeError::OutOfSpan => f.write_str("the range reaches outside the zone"),
            RangeError::Overlap { pfn } => write!(f, "frame {pfn} was already handed over"),
            RangeError::Hole { pfn } => write!(f, "frame {pfn} is a hole"),
            RangeError::Busy { pfn } => write!(f, "frame {pfn} is not in the required state"),
            RangeError::NotBlockAligned { pfn } => {
                write!(
                    f,
                    "the range does not tile into whole blocks at frame {pfn}"
                )
            }
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllocError::OutOfMemory => "no free block of the order",
            AllocError::OrderTooLarge => "the order is above the zone's maximum order",
            AllocError::OutOfRange => "the frame lies outside the zone",
            AllocError::Misaligned => "the frame is not aligned to the order",
            AllocError::Hole => "the frame is a hole",
            AllocError::Busy => "part of the block is not free",
        })
    }
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::OrderTooLarge => f.write_str("the order is above the zone's maximum order"),
            FreeError::OutOfRange => f.write_str("the frame lies outside every zone"),
            FreeError::Misaligned => f.write_str("the frame is not aligned to the order"),
            FreeError::Hole => f.write_str("the frame is a hole, never handed to the allocator"),
            FreeError::AlreadyFree => f.write_str("the block is already free (double free)"),
            FreeError::NotBlockHead { head, order } => {
                write!(
                    f,
                    "the frame lies inside the order-{order} block at {head}, not at its head"
                )
            }
            FreeError::PartOfBlock { head, order } => {
                write!(
                    f,
                    "the range holds only part of the order-{order} block at {head}"
                )
            }
            FreeError::WrongOrder { allocated } => {
                write!(f, "the block was allocated with order {allocated}")
            }
            FreeError::Busy => f.write_str("the block is being migrated or gathered; retry later"),
            FreeError::Foreign => f.write_str("the memory belongs to another allocator"),
            FreeError::SingleFrame => f.write_str("a block of one frame cannot be split"),
        }
    }
}

impl fmt::Display for ValidateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pfn {
            Some(p) => write!(f, "{} broken at frame {p}: {}", self.structure, self.rule),
            None => write!(f, "{} broken: {}", self.structure, self.rule),
        }
    }
}

impl core::error::Error for InitError {}
impl core::error::Error for RangeError {}
impl core::error::Error for AllocError {}
impl core::error::Error for FreeError {}
impl core::error::Error for ValidateError {}
