//! # pageframe-buddy
//!
//! The binary buddy allocator core of pageframe: physical frames handed out
//! as naturally aligned blocks of `2^order` frames (orders 0..=10 by default),
//! split on allocation and merged on free, as Linux's page allocator does
//! (spec 01). It is mechanism only: which free list a block goes to and
//! whether blocks of different lists may merge is asked of a [`MergePolicy`]
//! (the mobility crate supplies migratetypes that way).
//!
//! ## How memory is kept
//!
//! The zone is cut into *chunks* of `2^c` frames (`c` = 9 by default, a 2
//! MiB pageblock on x86-64; see [`BuddyConfig::chunk_order`]).
//!
//! * Free blocks of at least the chunk order are linked on per-order,
//!   per-list free lists by chunk index, split and merged as Linux does.
//! * Below the chunk order a chunk keeps one free bit per frame (512 bits,
//!   one cache line) and a count of its free blocks per order: a free block
//!   is a maximal aligned run of set bits, so splitting and merging are bit
//!   operations inside one line, and freeing a frame touches no other
//!   frame's metadata. When every frame of a chunk is free it becomes a free
//!   block of the chunk order on the free lists.
//! * A small request is served from a chunk of its list whose largest
//!   free block is the smallest that suffices (best fit per chunk), and
//!   among those from the **fullest** (chunks are filed by largest free
//!   block and by fill in 32 buckets, so the choice is two bit scans). This
//!   is the one place the core departs from Linux's LIFO free lists, on
//!   purpose: LIFO lists hand out frames of every pageblock alike after
//!   random frees, so no pageblock ever drains and 2 MiB blocks vanish
//!   under churn; filling busy chunks first lets sparse chunks drain into
//!   whole 2 MiB blocks without compaction (the idea behind LLFree,
//!   ATC'23). Inside a chunk, the smallest sufficient block at the lowest
//!   address is taken (best fit, ascending addresses as `expand` gives).
//!
//! Metadata is about 4.3 bytes a frame: 4 for a per-frame word (order and
//! tag of allocated blocks, written when a chunk is first split), two bits
//! (free and reported bitmaps) and 44 bytes a chunk.
//!
//! * No heap: all of it lives in a buffer the caller hands over, sized by
//!   [`BuddyZone::metadata_bytes`]; setting up 64 GiB writes one record per
//!   chunk.
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
mod bits;
mod chunk;
mod error;
mod frame;
mod free;
mod free_area;
mod large;
#[cfg(feature = "std")]
pub mod model;
mod partial;
mod policy;
mod report;
mod reservation;
mod reserve;
mod split;
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
pub use reservation::Reservation;
pub use stats::{BuddyInfo, Stats};
pub use walk::{Walk, WalkItem};
pub use zone::{BlockInfo, BuddyConfig, BuddyZone};
