//! # pageframe-swap
//!
//! The swap-slot allocator of pageframe, after Linux's `mm/swapfile.c`
//! (spec 05): a swap device of page-sized slots grouped into clusters of 512
//! (the pages of one 2 MiB huge page), so that a THP can be swapped out into
//! one whole free cluster and read back in one piece, and multi-size THPs
//! (mTHP) into aligned runs of clusters dedicated to their order.
//!
//! * No heap: the count bytes, cluster states and list links live in memory
//!   the caller hands over, sized by [`SwapDevice::metadata_bytes`];
//!   continuation storage for counts above 62 is optional
//!   ([`SwapDevice::continuation_bytes`]).
//! * Shared by all CPUs: one lock per cluster, one for the cluster lists
//!   taken only when a cluster changes list, and a [`SwapCpu`] per CPU
//!   passed by `&mut` that remembers the CPU's current cluster per order.
//! * Huge entries ([`SwapDevice::alloc_huge`]) stay one unit until
//!   [`SwapDevice::split_huge`]; [`SwapinPolicy`] decides whether a fault
//!   reads one back whole.
//! * Every operation is checked: bad input gets a [`SwapError`] and changes
//!   nothing; [`SwapDevice::validate`] walks the invariants of spec 05 §12.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe_swap::{Order, SlotState, SwapConfig, SwapCpu, SwapDevice, SwapError};
//!
//! let cfg = SwapConfig::new(4 * 512); // 8 MiB of swap, four clusters
//! let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)];
//! let mut dev = SwapDevice::new(cfg, &mut meta, None).unwrap();
//! let mut cpu = SwapCpu::new();
//!
//! // A 2 MiB THP goes out as one whole cluster...
//! let huge = dev.alloc_huge(&mut cpu).unwrap();
//! assert!(huge.is_aligned(dev.huge_order()) && dev.is_huge(huge).unwrap());
//! dev.duplicate(huge, dev.huge_order()).unwrap(); // the PMD swap entry
//! dev.put_cache(huge, dev.huge_order()).unwrap(); // folio written and freed
//! // ...and cannot be freed piecemeal until it is split.
//! assert_eq!(dev.put_map(huge, Order::ZERO), Err(SwapError::HugeEntry));
//! assert_eq!(dev.put_map(huge, dev.huge_order()), Ok(512));
//!
//! // A base page.
//! let s = dev.alloc(&mut cpu, Order::ZERO).unwrap();
//! assert_eq!(dev.slot_state(s), Ok(SlotState::InUse { map_count: 0, cached: true }));
//! dev.free(s, Order::ZERO).unwrap();
//! assert_eq!(dev.free(s, Order::ZERO), Err(SwapError::NotInUse(s)));
//! dev.validate().unwrap();
//! ```
#![no_std]
#![deny(missing_docs)]

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
mod memory;
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
