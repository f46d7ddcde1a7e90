//! # pageframe-types
//!
//! The words every pageframe crate speaks, defined once: [`Pfn`] (a frame
//! number), [`PhysAddr`] (a byte address, used only at the edges),
//! [`PfnRange`] (a half-open run of frames), [`Order`] (a block of `2^order`
//! naturally aligned frames) and [`MigrateType`] (the mobility class of a
//! pageblock or an allocation). The other crates re-export them, so a kernel
//! never converts between look-alike types.
//!
//! Every function here is total: none panics, whatever number it is given.
//! Arithmetic that could leave the `u64` range saturates or returns `None`
//! (each function says which).
//!
//! ```
//! use pageframe_types::{MigrateType, Order, Pfn, PfnRange, PhysAddr};
//!
//! let range = PfnRange::from_addrs(PhysAddr::new(0x10_0800), PhysAddr::new(0x40_0000));
//! assert_eq!(range.start, Pfn::new(0x101)); // partial frames are left out
//! let huge = Order::HUGE_2M;
//! assert_eq!(huge.pages(), 512);
//! assert!(Pfn::new(0x200).is_aligned(huge));
//! // Tiling a range with aligned blocks, largest first:
//! let blocks: Vec<_> = PfnRange::new(Pfn::new(0x1ff), Pfn::new(0x401))
//!     .blocks(Order::DEFAULT_MAX)
//!     .map(|(p, o)| (p.get(), o.get()))
//!     .collect();
//! assert_eq!(blocks, [(0x1ff, 0), (0x200, 9), (0x400, 0)]);
//! assert_eq!(MigrateType::from_value(1), Some(MigrateType::Movable));
//! ```
#![no_std]
#![deny(missing_docs)]

pub mod atomic;
pub mod carve;
mod migratetype;
mod order;
mod pfn;
pub mod unwind;

pub use migratetype::{MIGRATE_TYPES, MigrateType, PCP_TYPES};
pub use order::{COSTLY_ORDER, DEFAULT_MAX_ORDER, ORDER_LIMIT, Order};
pub use pfn::{AlignedBlocks, MAX_PFN, PAGE_SHIFT, PAGE_SIZE, Pfn, PfnRange, PhysAddr};
