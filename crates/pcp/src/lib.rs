//! `pageframe-pcp`: per-CPU page lists with a self-tuning `high`, after
//! Linux's `per_cpu_pages` and the 6.7 "PCP high auto-tuning" series
//! (spec 04).
//!
//! Each (zone, CPU) pair owns a small cache of free blocks of orders 0..=3
//! (and the pageblock order) per migratetype, so most allocations and frees
//! never touch the zone lock. The cache refills from the zone in batches and
//! spills back in batches; its threshold `high` grows while the CPU keeps
//! refilling, shrinks on free streaks and under zone pressure, and decays by
//! 1/8 per tick when idle.
//!
//! * [`PerCpuPages`]: one cache; the algorithm (alloc §4, free §5, decay §6,
//!   drain §7). Single-threaded: every method takes `&mut self`.
//! * [`PcpZone`]: what the zone provides (batch take / batch give back under
//!   one lock acquisition each, pressure flags). The facade implements it.
//! * [`PcpSlot`], [`PcpSet`], [`LocalPcp`]: ownership and remote requests.
//!   The fast path is a relaxed load of the mailbox plus list operations: no
//!   lock, no atomic read-modify-write. See [`percpu`] for the contract.
//! * [`PcpSizing`], [`PcpConfig`]: `batch`, `high_min`, `high_max` (§3).
//!
//! No heap: the lists live in caller-provided [`Slot`] memory.
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", test))]
extern crate std;

mod alloc;
mod decay;
mod error;
mod free;
mod lists;
mod pcp;
pub mod percpu;
mod sizing;
mod spill;
mod stats;
mod sync;
#[cfg(any(feature = "std", test))]
pub mod testing;
mod types;
mod zone;

pub use error::{AllocMiss, PcpError};
pub use free::FreeOutcome;
pub use lists::Slot;
pub use pcp::{PcpFlags, PerCpuPages};
pub use percpu::{CpuLocal, DrainTicket, LocalPcp, PcpSet, PcpSlot};
pub use sizing::{
    DEFAULT_SCALE_MAX, MAX_SCALE_MAX, PcpConfig, PcpSizing, ZoneGeometry, zone_batchsize,
};
pub use stats::PcpStats;
pub use types::{
    COSTLY_ORDER, CpuId, ListIndex, MigrateType, NR_LOWORDER_LISTS, NR_PCP_LISTS, Order,
    PCP_LIST_TYPES, PCP_TYPES, Pfn, pcp_list_type,
};
pub use zone::{PcpZone, RefillSink, SpillBatch, ZoneFlags};
