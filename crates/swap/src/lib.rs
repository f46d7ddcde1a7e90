#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(any(feature = "std", loom))]
extern crate std;

mod alloc;
mod cluster;
mod config;
mod continuation;
mod device;
mod discard;
mod error;
mod huge;
mod lists;
mod map;
mod percpu;
mod refcount;
mod scan;
mod slot;
mod stats;
mod sync;
mod validate;

pub use cluster::{ClusterFlag, ClusterSnapshot};
pub use config::{DeviceFlags, MthpSearch, SwapConfig};
pub use device::SwapDevice;
pub use discard::Discard;
pub use error::{AllocError, FallbackReason, InitError, SwapError, ValidateError};
pub use huge::{SwapinDecision, SwapinPolicy, VmaFlags};
pub use map::{CONT_MAX, MAP_BAD, MAP_MAX, MAX_CONT_LEVELS, MapFlags, SlotState};
pub use percpu::{CpuStats, SwapCpu};
pub use slot::{
    ClusterIndex, DEFAULT_CLUSTER_ORDER, MAX_CLUSTER_ORDER, MAX_ORDERS, MIN_CLUSTER_ORDER, Order,
    Slot,
};
pub use stats::DeviceStats;
