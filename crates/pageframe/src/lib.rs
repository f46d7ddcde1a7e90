//! # pageframe
//!
//! A Linux-class physical page-frame allocator for Rust kernels: hand it your
//! firmware memory map, get 4 KiB..4 MiB frames back, with zones, watermarks
//! and GFP flags as Linux has them. This crate is the facade a kernel depends
//! on; the mechanism lives in [`pageframe_buddy`].
//!
//! * No heap: metadata (16 bytes a frame) lives in memory you hand over,
//!   usually carved from the RAM being managed.
//! * `&self` everywhere: each zone has its own spin lock.
//! * Typed errors: a bad free ([`FreeError`]) or an impossible request
//!   ([`AllocError`]) changes nothing.
//!
//! A kernel sets it up from its memory map like this (the metadata would be
//! carved from RAM reached through the kernel's direct map):
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe::{Gfp, Node, Order, PfnRange, PhysAddr, Zone, ZoneKind};
//!
//! // Usable RAM from the firmware map (byte addresses, as firmware gives them).
//! let usable = [(0x10_0000u64, 0x7ffd_f000u64), (0x1_0000_0000, 0x1_8000_0000)];
//! let four_gib = PhysAddr::new(1 << 32).pfn_down();
//! let dma32 = PfnRange::new(PhysAddr::new(0x10_0000).pfn_down(), four_gib);
//! let normal = PfnRange::new(four_gib, PhysAddr::new(0x1_8000_0000).pfn_down());
//!
//! # let mut m1 = vec![MaybeUninit::uninit(); Zone::metadata_bytes(dma32)];
//! # let mut m2 = vec![MaybeUninit::uninit(); Zone::metadata_bytes(normal)];
//! # let (meta_dma32, meta_normal): (&mut [MaybeUninit<u8>], &mut [MaybeUninit<u8>]) = (&mut m1, &mut m2);
//! let mut node = Node::new();
//! node.add_zone(Zone::new(ZoneKind::Dma32, dma32, meta_dma32).unwrap()).unwrap();
//! node.add_zone(Zone::new(ZoneKind::Normal, normal, meta_normal).unwrap()).unwrap();
//! for (start, end) in usable {
//!     node.add_free_range(PfnRange::from_addrs(PhysAddr::new(start), PhysAddr::new(end))).unwrap();
//! }
//!
//! // Ordinary allocations come from Normal first, DMA32 ones only from below 4 GiB.
//! let frame = node.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
//! assert!(frame >= four_gib);
//! let low = node.alloc(Gfp::KERNEL | Gfp::DMA32, Order::new(9).unwrap()).unwrap();
//! assert!(low < four_gib);
//! node.free(frame, Order::ZERO).unwrap();
//! node.free(low, Order::new(9).unwrap()).unwrap();
//! assert!(node.free(low, Order::new(9).unwrap()).is_err()); // double free: refused
//! node.validate().unwrap();
//! print!("{}", node.buddyinfo());
//! ```
//!
//! With the `x86_64` feature, [`x86_64::FrameAdapter`] implements that
//! crate's `FrameAllocator`/`FrameDeallocator` traits for page-table code.
#![no_std]

#[cfg(feature = "std")]
extern crate std;

pub mod cache;
mod compact_driver;
mod compactor;
mod deferral;
mod error;
mod gfp;
mod kcompactd_node;
mod machine;
mod node;
mod numa_stats;
mod slow_path;
mod thp;
mod topology;
mod watermark;
#[cfg(feature = "x86_64")]
pub mod x86_64;
mod zone;
mod zone_layout;
mod zonelist;

pub use compact_driver::CompactDriver;
pub use compactor::{Clock, CompactRun, CompactWork, Compactor, NoClock, ZoneTarget};
pub use deferral::{Deferral, DeferralState, MAX_DEFER_SHIFT};
pub use error::{AllocError, FreeError, InitError, NodeError, RangeError, ValidateError};
pub use gfp::{AllocFlags, Gfp, Mark};
pub use kcompactd_node::{EXTFRAG_THRESHOLD, KcompactdReport, Suitability, suitability};
pub use machine::{Allocation, Machine, MachineError};
pub use node::{BuddyInfo, Node};
pub use numa_stats::NodeStats;
pub use pageframe_buddy::{
    self as buddy, BlockInfo, Order, PAGE_SIZE, Pfn, PfnRange, PhysAddr, Stats,
};
pub use pageframe_compact::{
    self as compact, CompactResult, CompactState, Migrator, Priority as CompactPriority,
};
pub use pageframe_mobility::{self as mobility, FallbackStats, MigrateType, MobilityConfig};
pub use pageframe_pcp as pcp;
pub use slow_path::{MAX_COMPACT_RETRIES, MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX, SlowRequest};
pub use thp::{DefragAction, NodePolicy, ThpDefrag, ThpPolicy};
pub use topology::{
    LOCAL_DISTANCE, MAX_NUMNODES, NodeId, REMOTE_DISTANCE, Topology, TopologyError,
};
pub use watermark::{
    DEFAULT_WATERMARK_SCALE_FACTOR, LOWMEM_RESERVE_RATIO, Watermarks, default_min_free_kbytes,
    watermark_ok,
};
pub use zone::{NR_ZONE_KINDS, PageTypeInfo, Zone, ZoneKind};
pub use zone_layout::{DMA_LIMIT, DMA32_LIMIT, ZoneLayout};
pub use zonelist::{NodeMask, NodeOrder, ZoneRef, Zonelist, ZonelistKind, build_node_orders};
