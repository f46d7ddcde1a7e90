#![doc = include_str!("../README.md")]
//!
//! ## Memory a kernel hands over
//!
//! | what | bytes | where from |
//! |---|---|---|
//! | the machine | `size_of::<Machine>()`, about 35 KiB (46 with feature `vmstat`) | a static, or carved from RAM |
//! | each zone's metadata | [`Machine::zone_metadata_bytes`]: about 3.4 a frame of the zone's span (2.3 for the buddy core: a 2-byte word, two bits and a 41-byte record a 2 MiB chunk; 1 ownership byte), 1 a pageblock, and under 20 KiB a zone (list heads and counts, the order-0 stripes) | carved from RAM, then left out of the free ranges |
//! | per-CPU caches | [`Machine::pcp_bytes`]: for each CPU and zone, a record of about 3.1 KiB (its homes' bitmaps, four regions each, and its stack of foreign frames) and 16 a slot, `(batch << 5) + 2` slots: 2 018 (31.5 KiB) for a zone of 1 GiB or more, whatever its size, fewer for a smaller one | carved from RAM after the memory is handed over |
//! | owner records (feature `page-owner`) | 24 a frame of each zone's span, inside [`Machine::zone_metadata_bytes`] | with the zone's metadata |
//! | counters (feature `vmstat`) | 192 a zone, and 192 a CPU a zone inside [`Machine::pcp_bytes`] | the machine, and with the caches |
//!
//! ## Why safe code cannot break it
//!
//! Every path that changes a zone goes through the machine, which keeps
//! one authority on ownership per frame: the core's metadata under the zone
//! lock, and the ownership byte the lock-free paths change by
//! compare-and-swap. Nothing hands out the free lists: a zone can be read,
//! not written, from outside.
//!
//! ```compile_fail,E0624
//! # fn f(m: &pageframe::Machine<'static>) {
//! let z = m.node(pageframe::NodeId::ZERO).unwrap().zone(pageframe::ZoneKind::Normal).unwrap();
//! // Private: no `&mut` access to a zone's free lists from outside.
//! z.with_zone(|mz| mz.free(pageframe::Pfn(0), pageframe::Order::ZERO));
//! # }
//! ```
//!
//! ```compile_fail,E0596
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
//! ```compile_fail,E0624
//! # fn f(m: &pageframe::Machine<'static>, c: &mut pageframe::CpuCache<'_, 'static>) {
//! let z = m.node(pageframe::NodeId::ZERO).unwrap().zone(pageframe::ZoneKind::Normal).unwrap();
//! let _ = z.alloc_cached(c, pageframe::Gfp::KERNEL, pageframe::Order::ZERO);
//! # }
//! ```
//!
//! Turning frame numbers into memory is the one trust boundary, and it is
//! `unsafe` (see `paging::FrameAdapter::new`, feature `x86_64`):
//!
//! ```compile_fail,E0133
//! # fn f(m: &pageframe::Machine<'static>) {
//! let _ = pageframe::paging::FrameAdapter::new(m, pageframe::NodeId::ZERO, pageframe::Gfp::KERNEL);
//! # }
//! ```
//!
//! ## Inside: five layers
//!
//! The crate's files are layered, and each imports only from its own
//! layer and those below, so the crate reads from the bottom up and a
//! lower file never depends on how a higher one uses it (`cargo xtask
//! layers` checks this against its table in `xtask/src/layers.rs`):
//!
//! 1. **values and hooks**: blocks, errors, ids and their bounds, GFP
//!    flags, locks, the ownership byte, the [`debug::Hooks`] and
//!    [`Migrator`] traits, and the state a zone or the machine embeds
//!    (counters, owner records, CMA areas);
//! 2. **the zone and its per-CPU caches**: [`zone::Zone`], its order-0
//!    stripes, the zone side of the per-CPU protocol;
//! 3. **the machine**: [`Machine`], nodes, zonelists, the allocation and
//!    free calls ([`CpuCache`], the slow path with direct compaction,
//!    allocation from any context) and the knobs ([`tune`]);
//! 4. **services built on it**: contiguous ranges and CMA ([`contig`]),
//!    memory [`hotplug`], background compaction, free page [`reporting`],
//!    partial frees, the `x86_64` adapters and [`boot`];
//! 5. **debugging tools**: [`debug::Inspect`] and the reports it gives.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", test, loom))]
extern crate std;

// The files that add to `Machine`, in the order its docs read (rustdoc
// lists impl blocks in the order of the modules): set-up, allocation and
// validation; a block that frees itself; the slow path; per-CPU caches;
// allocation from any context; contiguous ranges, CMA, hotplug;
// background compaction; reporting. Its
// two facets come after: `tune` (the knobs) and `debug` (reading the
// machine, and the debugging tools).
mod machine;

mod guard;

mod slow_path;

mod cpu;

mod nolock;

pub mod contig;

mod cma;

pub mod hotplug;

mod kcompactd;

pub mod reporting;

// Everything else.
mod block;
pub mod boot;
mod cache;
mod cma_area;
mod compaction;
pub mod debug;
mod error;
mod fragmap;
mod frame_run;
mod frame_state;
mod gfp;
pub mod lock;
#[cfg(all(test, loom))]
mod loom_model;
mod migrator;
mod node;
mod node_id;
mod numa;
mod numa_stats;
mod pageblock_pool;
#[cfg(feature = "x86_64")]
pub mod paging;
mod partial;
mod stripe;
mod sync;
mod thp;
pub mod topology;
pub mod tune;
pub mod zone;
mod zone_core;
mod zone_kind;
mod zone_layout;
mod zonelist;

pub use block::{Block, RawError, Refused, Segment};
pub use cpu::CpuCache;
pub use error::{AllocError, ConfigError, ContigError, FreeError, SetupError};
pub use gfp::Gfp;
pub use guard::BlockGuard;
pub use machine::{Machine, MachineConfig};
pub use migrator::Migrator;
pub use node_id::NodeId;
pub use pageframe_pcp::CpuId;
pub use pageframe_types::{Order, PAGE_SIZE, Pfn, PfnRange, PhysAddr};
pub use zone_kind::ZoneKind;

/// Compaction, migration and reclaim: what the slow path asks of the
/// kernel ([`compact::SlowPathHooks`]), what a [`Migrator`] is told, what
/// a run reports, and the deferral that keeps failing runs rare (spec 03).
pub mod compact {
    pub use crate::error::PinError;
    pub use crate::migrator::NoMigration;
    pub use crate::slow_path::{MAX_RECLAIM_RETRIES, SWAP_CLUSTER_MAX, SlowPathHooks};
    pub use pageframe_compact::{
        COMPACT_MAX_DEFER_SHIFT, CompactOutcome, CompactResult, CompactState, CompactStats,
        Deferral, DeferralState, MIGRATE_BATCH_MAX, MigrateError, MigrateMode, Move, TickReport,
    };
}

/// Per-CPU caches: their sizes, counters and set-up errors (spec 04). A
/// CPU reaches its caches through its [`CpuCache`] handle.
pub mod pcp {
    pub use crate::cpu::CacheInfo;
    pub use crate::error::{CpuError, PcpSetupError};
    pub use crate::node_id::MAX_CPUS;
    pub use pageframe_pcp::{HOT_FRAMES, PcpError, PcpStats};
}

/// Swap slots for 2 MiB pages swapped out and in whole (spec 05): the
/// `pageframe-swap` crate through the facade (feature `swap`), its
/// [`Order`] being the root's.
#[cfg(feature = "swap")]
pub mod swap {
    pub use pageframe_swap::{
        AllocError, CONT_MAX, ClusterFlag, ClusterIndex, ClusterSnapshot, CpuStats,
        DEFAULT_CLUSTER_ORDER, DeviceFlags, DeviceStats, Discard, FallbackReason, InitError,
        MAP_BAD, MAP_MAX, MAX_CLUSTER_ORDER, MAX_CONT_LEVELS, MAX_ORDERS, MIN_CLUSTER_ORDER,
        MapFlags, MthpSearch, Slot, SlotState, SwapConfig, SwapCpu, SwapDevice, SwapError,
        SwapinDecision, SwapinPolicy, ValidateError, VmaFlags,
    };
}
