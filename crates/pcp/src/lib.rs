#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

mod alloc;
mod decay;
mod error;
mod foreign;
mod free;
mod home;
mod hot;
mod lists;
mod pcp;
pub mod percpu;
mod sizing;
mod spill;
mod stats;
mod sync;
mod types;
mod zone;

pub use error::{AllocMiss, PcpError};
pub use foreign::FOREIGN_FRAMES;
pub use free::{FreeOutcome, HomeFree};
pub use home::{HOME_REGIONS, MAX_HOME_ORDER};
pub use hot::HOT_FRAMES;
pub use lists::Slot;
pub use pcp::{PcpFlags, PerCpuPages};
pub use percpu::{DrainTicket, LocalPcp, PcpSet, PcpSlot};
pub use sizing::{
    DEFAULT_SCALE_MAX, MAX_SCALE_MAX, PcpConfig, PcpSizing, ZoneGeometry, zone_batchsize,
};
pub use stats::PcpStats;
pub use types::{
    COSTLY_ORDER, CpuId, ListIndex, MigrateType, NR_LOWORDER_LISTS, NR_PCP_LISTS, Order,
    PCP_LIST_TYPES, PCP_TYPES, Pfn, pcp_list_type,
};
pub use zone::{PcpZone, RefillSink, SpillBatch, ZoneFlags};
