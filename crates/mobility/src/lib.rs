//! # pageframe-mobility
//!
//! Grouping pages by mobility on top of the [`pageframe_buddy`] core, as
//! Linux does to fight external fragmentation (spec 02): memory is tagged in
//! pageblocks (2 MiB by default) with a migratetype, each type has its own
//! free lists, and when a type runs dry it falls back to another, preferably
//! by claiming a whole pageblock so types stay apart. One rule is ours,
//! not Linux's: an unmovable or reclaimable request that falls back looks
//! first beside a pageblock of its type, in the same maximum-order block
//! (4 MiB by default), so what cannot move gathers in blocks that are
//! pinned already (`fallback.rs`). Also here: the
//! highatomic reserve, pageblock isolation (of single blocks and of ranges,
//! for contiguous allocation), and the fragmentation indices.
//!
//! The buddy core stays mechanism only: [`Mobility`] is the policy it asks
//! which list a freed block goes to and whether blocks of two types merge.
//!
//! ```
//! use core::mem::MaybeUninit;
//! use pageframe_buddy::{Order, Pfn, PfnRange};
//! use pageframe_mobility::{AllocMode, MigrateType, MobileZone, MobilityConfig};
//!
//! let span = PfnRange::new(Pfn::new(0), Pfn::new(16 * 512)); // 16 pageblocks
//! let config = MobilityConfig::default();
//! let mut meta = vec![MaybeUninit::uninit(); MobileZone::metadata_bytes(span, config)];
//! let mut zone = MobileZone::new(span, config, &mut meta).unwrap();
//! zone.add_free_range(span).unwrap();                 // every block starts Movable
//!
//! // An unmovable request claims a whole pageblock rather than polluting one.
//! let k = zone.alloc(Order::ZERO, MigrateType::Unmovable, AllocMode::empty()).unwrap();
//! assert_eq!(zone.block_type(k), Some(MigrateType::Unmovable));
//! assert_eq!(zone.stats().claims_whole, 1);
//! // Further unmovable requests come from that block.
//! let k2 = zone.alloc(Order::ZERO, MigrateType::Unmovable, AllocMode::empty()).unwrap();
//! assert_eq!(zone.block_type(k2), Some(MigrateType::Unmovable));
//! zone.free(k, Order::ZERO).unwrap();
//! zone.free(k2, Order::ZERO).unwrap();
//! zone.validate().unwrap();
//! print!("{}", zone.pagetypeinfo(&"zone Normal"));
//! ```
#![no_std]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

mod contig;
mod error;
mod fallback;
pub mod fragindex;
mod fragmap;
mod highatomic;
mod isolate;
mod migratetype;
#[cfg(feature = "std")]
pub mod model;
mod pageblock;
mod policy;
mod report;
mod reporting;
mod stats;
mod validate;
mod watermark;
mod zone;

pub use contig::Blocker;
pub use error::BlockError;
pub use fragmap::PageblockUse;
pub use migratetype::{MIGRATE_TYPES, MigrateType, PCP_TYPES, fallbacks, list_of, type_of_list};
pub use pageblock::Pageblocks;
pub use policy::Mobility;
pub use report::PageTypeInfo;
pub use stats::FallbackStats;
pub use watermark::{
    DEFAULT_WATERMARK_SCALE_FACTOR, LOWMEM_RESERVE_RATIO, MAX_DEFAULT_MIN_FREE_KBYTES,
    MAX_WATERMARK_SCALE_FACTOR, Mark, ReserveAccess, Watermarks, ZoneMarks,
    default_min_free_kbytes,
};
pub use zone::{AllocMode, MobileZone, MobilityConfig};

/// What the mobility layer keeps in an allocated block's tag word
/// (`BuddyZone::tag`).
pub mod tag {
    /// Low three bits: the migratetype the block was allocated as.
    pub const MT_MASK: u32 = 0b111;
    /// The owner pinned the block: it cannot move for now (compaction and
    /// isolation treat it as unmovable).
    pub const PINNED: u32 = 1 << 3;
    /// The bits this layer owns; `MobileZone::set_tag_bits` leaves them alone.
    pub const RESERVED: u32 = 0xff;
}
