//! A zone: one buddy allocator over an address-range class (spec 01 §3.3,
//! docs/rules/01-buddy.md §3), grouped by mobility, with its watermarks
//! and lowmem reserve behind the kernel's lock, the per-frame ownership
//! bytes the lock-free paths use, its per-CPU caches and its compaction
//! state.
//!
//! Zones live inside a [`crate::Machine`]; everything that changes a zone
//! goes through the machine, so the public surface here is read-only.

// The zone, what it shows of itself (and what a node and the machine show
// of their zones), and the set-up and validation errors that name one.
pub use crate::fragmap::{
    FragmentationMap, MAP_LEGEND, MAP_WIDTH, SUPERPAGEBLOCK_LEGEND, SuperpageblockMap,
};
pub use crate::node::BuddyInfo;
pub use crate::pageblock_pool::{PAGEBLOCKS_PER_SLOT, POOL_SLOTS};
pub use crate::zone_core::{PageTypeInfo, Zone};
pub use crate::zone_layout::{DMA_LIMIT, DMA32_LIMIT, ZoneLayout};
pub use pageframe_buddy::{BlockInfo, InitError, RangeError, Stats, ValidateError};
pub use pageframe_mobility::{
    BlockError, Blocker, FallbackStats, Mark, MobileZone, MobilityConfig, PageblockUse,
    ReserveAccess, SuperpageblockCounts, SuperpageblockUse, Superpageblocks, Watermarks,
};
pub use pageframe_types::{MAX_PFN, MigrateType};
