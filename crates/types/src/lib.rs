#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]

pub mod atomic;
pub mod carve;
mod migratetype;
mod order;
mod pfn;
pub mod prefetch;
pub mod run;
pub mod unwind;

pub use migratetype::{MIGRATE_TYPES, MigrateType, PCP_TYPES};
pub use order::{COSTLY_ORDER, DEFAULT_MAX_ORDER, ORDER_LIMIT, Order};
pub use pfn::{AlignedBlocks, MAX_PFN, PAGE_SHIFT, PAGE_SIZE, Pfn, PfnRange, PhysAddr};
