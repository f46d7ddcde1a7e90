#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

mod alloc;
mod bits;
mod chunk;
mod error;
mod frame;
mod free;
mod free_area;
mod large;
mod partial_chunks;
mod policy;
mod prefetch;
mod reporting;
mod reservation;
mod reserve;
mod room;
mod run;
mod split;
mod split_page;
mod stats;
mod validate;
mod walk;
mod zone;

pub use chunk::MAX_CHUNK_ORDER;
pub use error::{AllocError, FreeError, InitError, RangeError, ValidateError};
pub use frame::TAG_BITS;
pub use pageframe_types::{
    AlignedBlocks, COSTLY_ORDER, DEFAULT_MAX_ORDER, MAX_PFN, ORDER_LIMIT, Order, PAGE_SHIFT,
    PAGE_SIZE, Pfn, PfnRange, PhysAddr,
};
pub use policy::{ListId, MAX_LISTS, MergePolicy, SingleList};
pub use prefetch::Prefetch;
pub use reservation::Reservation;
pub use room::Room;
pub use run::MAX_RUN;
pub use stats::{BuddyInfo, Stats};
pub use walk::{Walk, WalkItem};
pub use zone::{BlockInfo, BuddyConfig, BuddyZone};
