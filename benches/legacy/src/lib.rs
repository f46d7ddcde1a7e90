//! # pageframe-legacy-buddy
//!
//! The pageframe buddy core as it was at commit 089880f, before blocks
//! below a pageblock moved into per-chunk bitmaps: every free block on a
//! LIFO free list with Linux's tail heuristic, 16 bytes of metadata a
//! frame. Kept unchanged (its `model` module left out) as a peer for the
//! benchmarks and the lab, so that the old default runs side by side with
//! the current core in one process. Not part of the allocator; not
//! published.
#![no_std]
#![allow(missing_docs, clippy::undocumented_unsafe_blocks)]

mod alloc;
mod error;
mod frame;
mod free;
mod free_area;
mod policy;
mod report;
mod reserve;
mod stats;
mod validate;
mod walk;
mod zone;

pub use error::{AllocError, FreeError, InitError, RangeError, ValidateError};
pub use pageframe_types::{
    AlignedBlocks, COSTLY_ORDER, DEFAULT_MAX_ORDER, MAX_PFN, ORDER_LIMIT, Order, PAGE_SHIFT,
    PAGE_SIZE, Pfn, PfnRange, PhysAddr,
};
pub use policy::{ListId, MAX_LISTS, MergePolicy, SingleList};
pub use stats::{BuddyInfo, Stats};
pub use walk::{Walk, WalkItem};
pub use zone::{BlockInfo, BuddyConfig, BuddyZone};

/// Bytes of metadata per frame.
pub const METADATA_BYTES_PER_FRAME: usize = core::mem::size_of::<frame::Frame>();
