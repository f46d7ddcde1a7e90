//! # pageframe-compact
//!
//! Memory compaction for the pageframe allocator (spec 03): it builds
//! high-order free blocks by moving movable allocations out of the low end
//! of a zone into free frames at the high end. Two scanners walk a zone
//! pageblock by pageblock, the migrate scanner upward isolating movable
//! in-use blocks and the free scanner downward isolating free blocks as
//! destinations, until they meet.
//!
//! The allocator never touches frame contents: moving a block (copying its
//! bytes, switching the page tables that map it) is the kernel's job, asked
//! through the [`Migrator`] trait, which may refuse (pinned, busy). The
//! crate drives the zone only through the public operations of
//! [`pageframe_mobility::MobileZone`], taken under the zone's lock through
//! [`ZoneLock`]; the lock is never held across a [`Migrator`] call.
//!
//! * [`compact_zone`]: one run on one zone (direct, kcompactd, proactive,
//!   whole-zone), with skip hints, cached scanner positions, async /
//!   sync-light / sync modes, ordered [`CompactResult`]s and capture of the
//!   requested block for a direct compactor.
//! * [`compaction_suitable`] and friends: whether a run is worth it.
//! * [`CompactState`]: the per-zone state (cached positions, deferral,
//!   counters), shareable between concurrent compactors.
//! * [`try_to_compact_pages`] and [`CompactRetry`]: the allocation slow
//!   path's direct compaction and its retry policy.
//! * [`evacuate_range`]: empties an isolated range for a contiguous
//!   allocation or an offline, with the same migration protocol.
//! * [`Kcompactd`]: the per-node background compactor, with proactive
//!   compaction driven by a `tick(now)` the kernel calls from a timer, and
//!   [`compact_memory`] for whole-node compaction on demand.
//!
//! ```
//! use core::cell::RefCell;
//! use core::mem::MaybeUninit;
//! use pageframe_buddy::{Order, Pfn, PfnRange};
//! use pageframe_compact::{compact_memory, CompactState, MigrateError, MigrateMode, Migrator, NodeZone, Watermarks, ZoneMarks};
//! use pageframe_mobility::{AllocMode, MigrateType, MobileZone, MobilityConfig};
//!
//! // A kernel-side migrator: here the "contents" are one word per frame.
//! struct Words(Vec<u64>);
//! impl Migrator for Words {
//!     fn migrate(&mut self, src: Pfn, dst: Pfn, order: Order, _: MigrateMode) -> Result<(), MigrateError> {
//!         for i in 0..order.pages() as usize {
//!             self.0[dst.get() as usize + i] = core::mem::take(&mut self.0[src.get() as usize + i]);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let span = PfnRange::new(Pfn::new(0), Pfn::new(8 * 512));
//! let config = MobilityConfig::default();
//! let mut meta = vec![MaybeUninit::uninit(); MobileZone::metadata_bytes(span, config)];
//! let mut zone = MobileZone::new(span, config, &mut meta).unwrap();
//! zone.add_free_range(span).unwrap();
//! // Fill with movable frames, then free three of every four.
//! let mut mem = Words(vec![0; 8 * 512]);
//! let frames: Vec<Pfn> = (0..8 * 512)
//!     .map(|_| zone.alloc(Order::ZERO, MigrateType::Movable, AllocMode::empty()).unwrap())
//!     .collect();
//! for &p in &frames {
//!     if p.get() % 4 != 0 {
//!         zone.free(p, Order::ZERO).unwrap();
//!     } else {
//!         mem.0[p.get() as usize] = p.get() + 1000; // the owner's data
//!     }
//! }
//! assert_eq!(zone.buddy().free_blocks(Order::HUGE_2M), 0);
//!
//! let zone = RefCell::new(zone);
//! let state = CompactState::new();
//! let marks = ZoneMarks { wmark: Watermarks::with_gap(16, 4), reserve: 0 };
//! compact_memory(&[NodeZone::new(&zone, &state, marks)], &mut mem);
//! let zone = zone.into_inner();
//! // Three quarters of the zone is free again, all in whole 2 MiB blocks...
//! assert_eq!(zone.free_pages(), 6 * 512);
//! assert_eq!(zone.extfrag_percent(Order::HUGE_2M), 0);
//! zone.validate().unwrap();
//! // ...and every owner's word moved with its frame.
//! assert_eq!(mem.0.iter().filter(|&&w| w >= 1000).count(), 8 * 128);
//! ```
#![no_std]
#![deny(missing_docs)]

#[cfg(any(feature = "std", loom))]
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
mod migrator;
#[cfg(feature = "std")]
pub mod model;
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
pub use migrator::{MigrateError, Migrator};
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
/// [`pageframe_mobility::tag`], whose low byte it leaves alone). Bits from
/// 10 up belong to the kernel: they travel with a block when it moves.
pub mod tag {
    /// The block was isolated by a compactor as a migration source: other
    /// compactors leave it alone until it is migrated or put back.
    pub const ISOLATED: u32 = 1 << 8;
    /// The block was a free block a compactor took as a migration
    /// destination; it is not the kernel's until a migration into it
    /// completes.
    pub const TARGET: u32 = 1 << 9;
    /// Both bits.
    pub const MASK: u32 = ISOLATED | TARGET;
    /// The bits a migration copies from source to destination: everything
    /// above the mobility byte except this crate's own bits.
    pub const CARRIED: u32 = !(pageframe_mobility::tag::RESERVED | MASK);
}
