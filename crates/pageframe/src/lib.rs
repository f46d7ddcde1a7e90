//! # pageframe
//!
//! A Linux-class physical page-frame allocator for Rust kernels: hand it
//! your firmware memory map, get 4 KiB..4 MiB blocks back, with NUMA nodes,
//! zones, watermarks and GFP flags as Linux has them, grouping by mobility
//! against fragmentation, compaction with real page migration, and
//! self-tuning per-CPU caches. [`Machine`] is the allocator; the crates
//! below it (`pageframe-buddy`, `-mobility`, `-compact`, `-pcp`) hold the
//! mechanisms and rules, re-exported here.
//!
//! * No heap: every byte of metadata lives in memory you hand over,
//!   usually carved from the RAM being managed (sizes below), and the
//!   machine itself is written in place ([`Machine::new_in`]).
//! * Sound from safe code: no sequence of safe calls hands a frame to two
//!   owners or loses one. An allocation returns a [`Block`] (or a
//!   [`Segment`], a [`CmaBuffer`]) that owns its frames and is consumed by
//!   the free that gives it back; freeing by number is `unsafe`
//!   ([`Machine::block_from_raw`]), and checked even then.
//! * Typed errors, no panics: bad input gets an error and changes nothing.
//! * The lock is yours: [`Machine`] takes any [`lock::RawMutex`]; use one
//!   that disables interrupts if you allocate in interrupt handlers.
//!
//! ## Which call for which need
//!
//! | need | call | may it compact or reclaim? |
//! |---|---|---|
//! | a block on a CPU that holds its handle (the fast path: per-CPU caches for orders 0..=3 and 9) | [`CpuCache::alloc`] | no |
//! | a block without a CPU handle (boot, an interrupt that finds the handle busy) | [`Machine::alloc`] | no |
//! | a block worth waiting for (high orders): compaction and reclaim as the GFP flags allow | [`Machine::alloc_slow`] | yes, through your [`SlowPathHooks`] |
//! | a transparent huge page under the THP policy ([`Machine::set_thp_policy`]) | [`Machine::alloc_thp`] | as the policy says |
//! | give a block back | [`CpuCache::free`], or [`Machine::free`] without a handle | no |
//! | frames for page tables through the `x86_64` crate (feature `x86_64`) | [`x86_64::FrameAdapter`] | no |
//! | background compaction, one thread or timer per node | [`Machine::kcompactd_tick`] | yes |
//! | an exact number of contiguous frames (DMA buffers, 1 GiB pages), or a given range | [`Machine::alloc_contig`], [`Machine::alloc_contig_range`] | migrates movable memory out of the range |
//! | a driver's reserved area that serves movable memory meanwhile | [`Machine::add_cma_area`], [`Machine::cma_alloc`] | migrates movable memory out of the area |
//! | memory hotplug: take a range offline, bring it (back) online, a zone that arrives at run time | [`Machine::offline_range`], [`Machine::add_free_range`], [`Machine::declare_hotplug`] + [`Machine::hot_add_zone`] | offline migrates |
//! | tell the hypervisor which memory is free (virtio-balloon page reporting) | [`Machine::report_free_pages`] | no |
//!
//! ## Memory a kernel hands over
//!
//! | what | bytes | where from |
//! |---|---|---|
//! | the machine | `size_of::<Machine>()`, about 35 KiB | a static, or carved from RAM |
//! | each zone's metadata | [`Machine::zone_metadata_bytes`]: about 5.3 a frame of the zone's span (4.3 for the buddy core: a 4-byte word, two bits and a 44-byte record a 2 MiB chunk; 1 ownership byte), 1 a pageblock, and under 20 KiB a zone (list heads and counts, the order-0 stripes) | carved from RAM, then left out of the free ranges |
//! | per-CPU caches | [`Machine::pcp_bytes`]: 16 a cacheable frame (up to 1/8 of each zone shared by its node's CPUs) | carved from RAM after the memory is handed over |
//!
//! ## A kernel sets it up like this
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, PfnRange, PhysAddr, ZoneKind};
//! use pageframe::pcp::CpuId;
//!
//! // Usable RAM from the firmware map (byte addresses, as firmware gives them).
//! let usable = [(0x10_0000u64, 0x7ffd_f000u64), (0x1_0000_0000, 0x1_8000_0000)];
//! let four_gib = PhysAddr::new(1 << 32).pfn_down();
//! let dma32 = PfnRange::new(PhysAddr::new(0x10_0000).pfn_down(), four_gib);
//! let normal = PfnRange::new(four_gib, PhysAddr::new(0x1_8000_0000).pfn_down());
//! # fn carve(bytes: usize) -> &'static mut [MaybeUninit<u8>] {
//! #     Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice())
//! # }
//!
//! // The machine is written in place: a static or carved memory in a kernel.
//! let slot: &'static mut MaybeUninit<Machine<'static>> = Box::leak(Box::new_uninit());
//! let machine = Machine::new_in(slot, MachineConfig::SINGLE_NODE);
//! let node = NodeId::ZERO;
//! // `carve` stands for taking bytes from RAM the kernel then leaves out.
//! machine.add_zone(node, ZoneKind::Dma32, dma32, carve(machine.zone_metadata_bytes(dma32))).unwrap();
//! machine.add_zone(node, ZoneKind::Normal, normal, carve(machine.zone_metadata_bytes(normal))).unwrap();
//! for (start, end) in usable {
//!     machine.add_free_range(PfnRange::from_addrs(PhysAddr::new(start), PhysAddr::new(end))).unwrap();
//! }
//! // Per-CPU caches for two CPUs, sized from the memory now managed.
//! let pcp = machine.pcp_bytes(2).unwrap();
//! machine.enable_pcp(2, carve(pcp)).unwrap();
//! let machine: &'static Machine<'static> = machine; // shared from here on
//!
//! // Ordinary allocations come from Normal first, DMA32 ones from below 4 GiB.
//! let mut cpu0 = machine.cpu(CpuId(0), node).unwrap(); // kept in CPU 0's per-CPU area
//! let frame = cpu0.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
//! assert!(frame.pfn() >= four_gib && frame.zone() == ZoneKind::Normal);
//! let low = machine.alloc(node, Gfp::KERNEL | Gfp::DMA32, Order::new(9).unwrap()).unwrap();
//! assert!(low.pfn() < four_gib);
//! cpu0.free(frame).unwrap(); // the block is consumed: no double free compiles
//! machine.free(low).unwrap();
//! machine.validate().unwrap();
//! print!("{}", machine.buddyinfo());
//! ```
//!
//! With the `x86_64` feature, [`x86_64::FrameAdapter`] implements that
//! crate's `FrameAllocator`/`FrameDeallocator` traits for page-table code.
//!
//! ## Why safe code cannot break it
//!
//! Every path that changes a zone goes through the machine, which keeps
//! one authority on ownership per frame: the core's metadata under the zone
//! lock, and the ownership byte the lock-free paths change by
//! compare-and-swap. Nothing hands out the free lists: a zone can be read,
//! not written, from outside.
//!
//! ```compile_fail
//! # fn f(m: &pageframe::Machine<'static>) {
//! let z = m.node(pageframe::NodeId::ZERO).unwrap().zone(pageframe::ZoneKind::Normal).unwrap();
//! // Private: no `&mut` access to a zone's free lists from outside.
//! z.with_zone(|mz| mz.free(pageframe::Pfn(0), pageframe::Order::ZERO));
//! # }
//! ```
//!
//! ```compile_fail
//! # fn f(m: &pageframe::Machine<'static>) {
//! let z = m.node(pageframe::NodeId::ZERO).unwrap().zone(pageframe::ZoneKind::Normal).unwrap();
//! // `inspect` lends the zone read-only: freeing through it does not compile.
//! z.inspect(|mz| mz.free(pageframe::Pfn(0), pageframe::Order::ZERO));
//! # }
//! ```
//!
//! A per-CPU cache is reached only through the CPU's handle, which holds
//! the caches of every zone itself: there is no call that takes one zone's
//! cache and another zone.
//!
//! ```compile_fail
//! # fn f(m: &pageframe::Machine<'static>, c: &mut pageframe::CpuCache<'_, 'static>) {
//! let z = m.node(pageframe::NodeId::ZERO).unwrap().zone(pageframe::ZoneKind::Normal).unwrap();
//! let _ = z.alloc_cached(c, pageframe::Gfp::KERNEL, pageframe::Order::ZERO);
//! # }
//! ```
//!
//! Turning frame numbers into memory is the one trust boundary, and it is
//! `unsafe` (see [`x86_64::FrameAdapter::new`]):
//!
//! ```compile_fail
//! # fn f(m: &pageframe::Machine<'static>) {
//! let _ = pageframe::x86_64::FrameAdapter::new(m, pageframe::NodeId::ZERO, pageframe::Gfp::KERNEL);
//! # }
//! ```
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", test, loom))]
extern crate std;

mod block;
pub mod boot;
mod cache;
mod cma;
mod compaction;
mod contig;
mod cpu;
mod error;
mod fragmap;
mod frame_state;
mod gfp;
mod hotplug;
mod kcompactd;
pub mod lock;
#[cfg(all(test, loom))]
mod loom_model;
mod machine;
mod migrator;
#[cfg(feature = "std")]
pub mod model;
mod node;
mod numa_stats;
mod reporting;
mod slow_path;
mod stripe;
mod sync;
mod thp;
mod topology;
pub mod waits;
#[cfg(feature = "x86_64")]
pub mod x86_64;
mod zone;
mod zone_layout;
mod zonelist;

pub use block::{Block, BlockGuard, CmaBuffer, RawError, Refused, Segment};
pub use cma::{CmaId, CmaStats, MAX_CMA_AREAS};
pub use contig::{ContigError, RANKED};
pub use cpu::{CacheInfo, CpuCache, MAX_CPUS};
pub use error::{
    AllocError, BlockError, ConfigError, FreeError, InitError, PcpSetupError, PinError, RangeError,
    SetupError, ValidateError,
};
pub use fragmap::{FragmentationMap, MAP_LEGEND, MAP_WIDTH};
pub use gfp::{AllocFlags, Gfp};
pub use hotplug::MemmapOnMemory;
pub use machine::{Machine, MachineBuddyInfo, MachineConfig};
pub use migrator::{Migrator, NoMigration};
pub use node::{BuddyInfo, Node};
pub use numa_stats::NodeStats;
pub use pageframe_buddy::{self as buddy, BlockInfo, PAGE_SIZE, Stats};
pub use pageframe_compact::{
    self as compact, CompactOutcome, CompactResult, CompactState, CompactStats, Deferral,
    DeferralState, MigrateError, MigrateMode, TickReport,
};
pub use pageframe_mobility::{
    self as mobility, Blocker, FallbackStats, Mark, MobileZone, MobilityConfig, PageblockUse,
    ReserveAccess, Watermarks,
};
pub use pageframe_pcp as pcp;
pub use pageframe_types::{MAX_PFN, MigrateType, Order, Pfn, PfnRange, PhysAddr};
pub use reporting::{REPORTING_CAPACITY, ReportStats};
pub use slow_path::{MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX, SlowPathHooks};
pub use thp::{DefragAction, NodePolicy, ThpDefrag, ThpPolicy};
pub use topology::{
    LOCAL_DISTANCE, MAX_NUMNODES, NodeId, REMOTE_DISTANCE, Topology, TopologyError,
};
pub use zone::{NR_ZONE_KINDS, PageTypeInfo, Zone, ZoneKind};
pub use zone_layout::{DMA_LIMIT, DMA32_LIMIT, ZoneLayout};
pub use zonelist::{NodeMask, NodeOrder, ZoneRef, Zonelist, ZonelistKind, build_node_orders};
