#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

mod contig;
mod error;
mod fallback;
pub mod fragindex;
mod fragmap;
mod highatomic;
mod isolate;
mod migratetype;
mod pageblock;
mod pagetypeinfo;
mod placement;
mod policy;
mod reporting;
mod stats;
mod superpageblock;
mod validate;
mod watermark;
mod zone;

pub use contig::Blocker;
pub use error::BlockError;
pub use fragmap::{PageblockUse, SuperpageblockCounts, SuperpageblockUse};
pub use migratetype::{MIGRATE_TYPES, MigrateType, PCP_TYPES, fallbacks, list_of, type_of_list};
pub use pageblock::Pageblocks;
pub use pagetypeinfo::PageTypeInfo;
pub use placement::Placement;
pub use policy::Mobility;
pub use stats::FallbackStats;
pub use superpageblock::{DEFAULT_SUPERPAGEBLOCK_SHIFT, MAX_SUPERPAGEBLOCK_SHIFT, Superpageblocks};
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
    /// The bits this layer owns (the low four); `MobileZone::set_tag_bits`
    /// leaves them alone.
    pub const RESERVED: u32 = 0xf;
    /// The bits the buddy core keeps (below `pageframe_buddy::TAG_BITS`);
    /// `MobileZone::set_tag_bits` refuses a value with a bit above them.
    pub const KEPT: u32 = (1 << pageframe_buddy::TAG_BITS) - 1;
}
