#![doc = include_str!("../README.md")]
#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(any(test, loom))]
extern crate std;

mod access;
mod contig;
mod control;
mod defer;
mod direct;
mod engine;
mod free_scan;
mod isolated;
mod kcompactd;
mod migrate;
mod migrate_scan;
mod mover;
mod moves;
mod proactive;
mod result;
mod skip;
mod state;
mod suitable;
mod sync;

pub use access::ZoneLock;
pub use contig::{EVACUATE_PASSES, EvacuateError, Evacuated, evacuate_range};
pub use control::{CompactOutcome, CompactRequest, RunKind, RunStats};
pub use defer::{Deferral, DeferralState};
pub use direct::{CompactRetry, DirectOutcome, try_to_compact_pages};
pub use engine::compact_zone;
pub use kcompactd::{
    Kcompactd, KcompactdStats, KcompactdWake, ProactivenessError, TickReport, compact_memory,
};
pub use mover::{FrameMover, MigrateError};
pub use moves::{MIGRATE_BATCH_MAX, Move};
pub use pageframe_mobility::{Mark, ReserveAccess, Watermarks, ZoneMarks};
pub use proactive::{Thresholds, fragmentation_score, node_score, thresholds, weighted_score};
pub use result::{CompactResult, MigrateMode, Priority};
pub use skip::reset_isolation_suitable;
pub use state::{CompactState, CompactStats, NodeZone};
pub use suitable::{compact_gap, compaction_suitable, suit_allocation_order};

/// Maximum base pages isolated per migrate batch (spec 03 §2,
/// `COMPACT_CLUSTER_MAX`).
pub const COMPACT_CLUSTER_MAX: u64 = 32;
/// Deferral stops doubling here: at most `2^6 = 64` skipped attempts (spec
/// 03 §2, §7).
pub const COMPACT_MAX_DEFER_SHIFT: u8 = 6;
/// Period of kcompactd's proactive check, in milliseconds (spec 03 §2).
pub const HPAGE_FRAG_CHECK_INTERVAL_MS: u64 = 500;
/// Default `vm.extfrag_threshold` (spec 03 §13).
pub const DEFAULT_EXTFRAG_THRESHOLD: u32 = 500;
/// Default `vm.compaction_proactiveness` (spec 03 §11.3).
pub const DEFAULT_PROACTIVENESS: u8 = 20;
/// Retries after successful compaction before giving up (spec 01 §10.2).
pub const MAX_COMPACT_RETRIES: u32 = 16;

/// The tag bits this crate keeps on allocated blocks (on top of
/// [`pageframe_mobility::tag`], whose low four bits it leaves alone). Bits
/// 6 up to those the buddy core keeps ([`pageframe_mobility::tag::KEPT`],
/// four bits) belong to the kernel: they travel with a block when it moves.
pub mod tag {
    /// The block was isolated by a compactor as a migration source: other
    /// compactors leave it alone until it is migrated or put back.
    pub const ISOLATED: u32 = 1 << 4;
    /// The block was a free block a compactor took as a migration
    /// destination; it is not the kernel's until a migration into it
    /// completes.
    pub const TARGET: u32 = 1 << 5;
    /// Both bits.
    pub const MASK: u32 = ISOLATED | TARGET;
    /// The bits a migration copies from source to destination: every kept
    /// bit above the mobility byte except this crate's own bits.
    pub const CARRIED: u32 =
        pageframe_mobility::tag::KEPT & !(pageframe_mobility::tag::RESERVED | MASK);
}
