//! # pageframe-buddy
//!
//! The binary buddy allocator core of pageframe: physical frames handed out
//! as naturally aligned blocks of `2^order` frames (orders 0..=10 by default),
//! split on allocation and merged on free, as Linux's page allocator does
//! (spec 01). It is mechanism only: which free list a block goes to and
//! whether blocks of different lists may merge is asked of a [`MergePolicy`]
//! (the mobility crate supplies migratetypes that way).
//!
//! * No heap: per-frame metadata (16 bytes a frame) lives in a buffer the
//!   caller hands over, sized by [`BuddyZone::metadata_bytes`]; it is written
//!   lazily, so setting up 64 GiB costs one write per 4 MiB block.
//! * Frames are numbers ([`Pfn`]), never dereferenced: the allocator runs on a
//!   host over simulated memory exactly as in a kernel.
//! * Every free is checked: double frees, wrong orders, misaligned frames,
//!   frames out of range or in holes get a [`FreeError`] and change nothing.
//! * [`BuddyZone::validate`] walks all invariants.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe_buddy::{BuddyConfig, BuddyZone, FreeError, ListId, Order, Pfn, PfnRange, SingleList};
//!
//! // A zone spanning 64 MiB at 16 MiB, with a firmware hole in the middle.
//! let span = PfnRange::new(Pfn::new(0x1000), Pfn::new(0x5000));
//! let config = BuddyConfig::default();
//! let mut meta = vec![MaybeUninit::uninit(); BuddyZone::<SingleList>::metadata_bytes(span, config)];
//! let mut zone = BuddyZone::new(span, config, &mut meta, SingleList).unwrap();
//! zone.add_free_range(PfnRange::new(Pfn::new(0x1000), Pfn::new(0x2f00))).unwrap();
//! zone.add_free_range(PfnRange::new(Pfn::new(0x3000), Pfn::new(0x5000))).unwrap();
//!
//! let order = Order::new(9).unwrap();            // 2 MiB
//! let pfn = zone.alloc(order, ListId::DEFAULT).unwrap();
//! assert!(pfn.is_aligned(order));
//! assert_eq!(zone.free(pfn, Order::ZERO), Err(FreeError::WrongOrder { allocated: order }));
//! zone.free(pfn, order).unwrap();
//! assert_eq!(zone.free(pfn, order), Err(FreeError::AlreadyFree));
//! zone.validate().unwrap();
//! println!("{}", zone.buddyinfo());
//! ```
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod alloc;
mod error;
mod frame;
mod free;
mod free_area;
#[cfg(feature = "std")]
pub mod model;
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
