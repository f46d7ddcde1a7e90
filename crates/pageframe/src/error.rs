//! The facade's errors. Every failing call leaves the machine as it was.

use core::fmt;

pub use pageframe_buddy::FreeError;
use pageframe_buddy::{InitError, RangeError};
use pageframe_pcp::PcpError;

use pageframe_buddy::Pfn;
use pageframe_compact::EvacuateError;
use pageframe_mobility::Blocker;

use crate::node_id::{MAX_CPUS, NodeId};
use crate::numa::TopologyError;
use crate::zone_kind::ZoneKind;

/// Why an allocation failed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AllocError {
    /// No eligible zone had a free block of the order within its
    /// watermarks (after compaction and reclaim, where the path tries them).
    OutOfMemory,
    /// The order exceeds the zones' maximum order.
    OrderTooLarge,
    /// The GFP flags combine incompatible bits (two zone selectors, movable
    /// and reclaimable at once), or ask [`crate::Machine::try_alloc`] for
    /// what it never does (reclaim, reserves).
    InvalidGfp,
    /// No zone the GFP flags allow exists for the requesting node.
    NoEligibleZone,
    /// The node is not one of the machine's topology.
    NoSuchNode,
    /// [`crate::Machine::try_alloc`] would have had to wait for a lock
    /// (a zone's, held by another CPU or by code this call interrupted),
    /// and no zone could serve without one: nothing changed. Retry later,
    /// or from a context that may wait.
    Busy,
}

impl From<pageframe_buddy::AllocError> for AllocError {
    fn from(e: pageframe_buddy::AllocError) -> Self {
        use pageframe_buddy::AllocError as B;
        match e {
            B::OrderTooLarge => AllocError::OrderTooLarge,
            B::OutOfMemory | B::OutOfRange | B::Misaligned | B::Hole | B::Busy => {
                AllocError::OutOfMemory
            }
        }
    }
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllocError::OutOfMemory => {
                "out of memory: no eligible zone has a free block of the order"
            }
            AllocError::OrderTooLarge => "the order is above the zones' maximum order",
            AllocError::InvalidGfp => "the GFP flags combine incompatible bits",
            AllocError::NoEligibleZone => "no zone the GFP flags allow exists for this node",
            AllocError::NoSuchNode => "the node is not part of the machine's topology",
            AllocError::Busy => "a lock the call may not wait for was held",
        })
    }
}

impl core::error::Error for AllocError {}

/// Why setting a machine up (adding a zone, memory, per-CPU caches) failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SetupError {
    /// The node is not one of the topology's nodes.
    NoSuchNode(NodeId),
    /// The node already has a zone of that kind.
    DuplicateZone(NodeId, ZoneKind),
    /// The zone's span overlaps a zone already present.
    OverlappingSpan(NodeId, ZoneKind),
    /// The zone could not be created (span, configuration, metadata size).
    Zone(InitError),
    /// Memory could not be handed over (outside every zone, already handed
    /// over, empty).
    Range(RangeError),
    /// Per-CPU caches: no CPU, more than [`crate::pcp::MAX_CPUS`], already
    /// enabled, or no zone with memory to size them for.
    Pcp(PcpSetupError),
    /// A hot-add outside the node's hotpluggable range for that zone kind
    /// (none was declared with [`crate::Machine::declare_hotplug`], or the
    /// span reaches past it).
    NotHotpluggable(NodeId, ZoneKind),
    /// Memory at or beyond the physical address width
    /// ([`crate::MachineConfig::phys_bits`]): a frame there could not be
    /// mapped by the kernel it is handed to.
    AddressWidth {
        /// The first frame beyond the width.
        pfn: Pfn,
    },
}

/// Why the per-CPU caches could not be set up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PcpSetupError {
    /// Zero CPUs, or more than [`crate::pcp::MAX_CPUS`].
    CpuCount,
    /// The caches are already set up.
    AlreadyEnabled,
    /// No zone has memory yet: the caches are sized from the memory handed
    /// over, so they are set up after it.
    NoMemory,
    /// The memory is smaller than [`crate::Machine::pcp_bytes`] said.
    MemoryTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// The cache crate refused the sizing (a zone too small to cache).
    Sizing(PcpError),
    /// [`crate::Machine::enable_pcp_in_place`] found no free memory of
    /// this many bytes in one piece for the caches.
    NoRoom {
        /// Bytes needed.
        needed: usize,
    },
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::NoSuchNode(n) => write!(f, "{n} is not part of the topology"),
            SetupError::DuplicateZone(n, k) => write!(f, "{n} already has a {k} zone"),
            SetupError::OverlappingSpan(n, k) => {
                write!(f, "the {k} zone of {n} overlaps a zone already present")
            }
            SetupError::Zone(e) => write!(f, "zone: {e}"),
            SetupError::Range(e) => write!(f, "memory range: {e}"),
            SetupError::Pcp(e) => write!(f, "per-CPU caches: {e}"),
            SetupError::NotHotpluggable(n, k) => {
                write!(f, "no hotpluggable {k} range of {n} holds the span")
            }
            SetupError::AddressWidth { pfn } => {
                write!(f, "frame {pfn} lies beyond the physical address width")
            }
        }
    }
}

impl fmt::Display for PcpSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PcpSetupError::CpuCount => {
                write!(f, "the CPU count must be 1..={MAX_CPUS}")
            }
            PcpSetupError::AlreadyEnabled => f.write_str("already enabled"),
            PcpSetupError::NoMemory => f.write_str("no memory handed over yet to size them from"),
            PcpSetupError::MemoryTooSmall { needed, given } => {
                write!(f, "memory too small: {given} bytes given, {needed} needed")
            }
            PcpSetupError::Sizing(e) => write!(f, "sizing: {e}"),
            PcpSetupError::NoRoom { needed } => {
                write!(f, "no free memory of {needed} bytes in one piece")
            }
        }
    }
}

impl core::error::Error for SetupError {}
impl core::error::Error for PcpSetupError {}

impl From<InitError> for SetupError {
    fn from(e: InitError) -> Self {
        SetupError::Zone(e)
    }
}

impl From<RangeError> for SetupError {
    fn from(e: RangeError) -> Self {
        SetupError::Range(e)
    }
}

impl From<PcpSetupError> for SetupError {
    fn from(e: PcpSetupError) -> Self {
        SetupError::Pcp(e)
    }
}

/// A tunable was given a value outside its range; nothing changed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ConfigError {
    /// `vm.min_free_kbytes` above the memory it would reserve.
    MinFreeKbytes(u64),
    /// `vm.watermark_scale_factor` outside 1..=3000.
    WatermarkScaleFactor(u32),
    /// `vm.compaction_proactiveness` above 100.
    Proactiveness(u32),
    /// `vm.extfrag_threshold` above 1000.
    ExtfragThreshold(u32),
    /// `vm.percpu_pagelist_high_fraction` in 1..=7 (0 or at least 8).
    PcpHighFraction(u32),
    /// More pageblock pool slots than a zone's pool has room for.
    PageblockPool(usize),
    /// A topology that cannot be built.
    Topology(TopologyError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MinFreeKbytes(v) => {
                write!(
                    f,
                    "min_free_kbytes {v} would reserve more than the machine has"
                )
            }
            ConfigError::WatermarkScaleFactor(v) => {
                write!(f, "watermark_scale_factor {v} is not in 1..=3000")
            }
            ConfigError::Proactiveness(v) => {
                write!(f, "compaction_proactiveness {v} is not in 0..=100")
            }
            ConfigError::ExtfragThreshold(v) => {
                write!(f, "extfrag_threshold {v} is not in 0..=1000")
            }
            ConfigError::PcpHighFraction(v) => {
                write!(
                    f,
                    "percpu_pagelist_high_fraction {v} is neither 0 nor at least 8"
                )
            }
            ConfigError::PageblockPool(v) => {
                write!(
                    f,
                    "a pageblock pool of {v} slots is more than a zone's pool has"
                )
            }
            ConfigError::Topology(e) => write!(f, "topology: {e}"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// Why pinning or unpinning a block failed; nothing changed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum PinError {
    /// The frame lies in no zone.
    OutOfRange,
    /// The frame is not the head of a live allocation (free, cached, a
    /// tail, or isolated for migration right now).
    NotAllocated,
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PinError::OutOfRange => "the frame lies outside every zone",
            PinError::NotAllocated => "the frame does not head a live allocation",
        })
    }
}

impl core::error::Error for PinError {}

/// Why a CPU's handle ([`crate::Machine::cpu`]) was not handed out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CpuError {
    /// The node is not one of the machine's topology.
    NoSuchNode(NodeId),
    /// The caches refused the claim: [`PcpError::Busy`] (the handle is
    /// out, or a drain on another CPU holds a cache for a moment: retry)
    /// or [`PcpError::NoSuchCpu`] (beyond the CPUs set up).
    Pcp(PcpError),
}

impl From<PcpError> for CpuError {
    fn from(e: PcpError) -> Self {
        CpuError::Pcp(e)
    }
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuError::NoSuchNode(n) => write!(f, "{n} is not part of the topology"),
            CpuError::Pcp(e) => write!(f, "per-CPU caches: {e}"),
        }
    }
}

impl core::error::Error for CpuError {}

/// Why a contiguous allocation failed. The machine is as it was, except
/// that movable allocations may have moved out of the range (intact, with
/// the kernel told through its [`Migrator`](crate::Migrator)).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ContigError {
    /// No frames asked for, an alignment that is not a power of two, a
    /// size beyond the frame-number space, or (offlining, CMA) a range
    /// that is not whole pageblocks.
    Invalid,
    /// The frame lies in no zone, or the range leaves its zone there.
    OutOfRange {
        /// The first frame outside.
        pfn: Pfn,
    },
    /// The pageblock holding `pfn` reaches outside the zone (a zone edge
    /// that is not pageblock-aligned): it cannot be isolated, so no range
    /// that touches it can be taken.
    PartialPageblock {
        /// A frame of the range in that pageblock.
        pfn: Pfn,
    },
    /// Memory that cannot be migrated lies in the range.
    Blocked {
        /// The first frame of the blocking block inside the range.
        pfn: Pfn,
        /// Unmovable, pinned, or a hole.
        why: Blocker,
    },
    /// The pageblock holding `pfn` is isolated by another contiguous
    /// allocation or an offline in progress.
    Isolated {
        /// A frame of that pageblock.
        pfn: Pfn,
    },
    /// [`Machine::add_cma_area`](crate::Machine::add_cma_area): the range
    /// meets an area set aside before.
    Overlap {
        /// The first frame of the range in that area.
        pfn: Pfn,
    },
    /// [`Machine::offline_range`](crate::Machine::offline_range): the frame is not online (offline
    /// already, or a hole that never was).
    NotOnline {
        /// The first such frame.
        pfn: Pfn,
    },
    /// The kernel's migrator refused to move the block at `pfn` (pinned,
    /// or not migratable).
    Refused {
        /// The first frame of the block inside the range.
        pfn: Pfn,
    },
    /// The block at `pfn` stayed busy through every pass (held by a
    /// compactor, a per-CPU cache the migrator did not drain, or the
    /// migrator kept answering `Again`).
    Busy {
        /// The first frame of the block inside the range.
        pfn: Pfn,
    },
    /// No free memory outside the range to migrate into.
    NoMemory,
    /// [`Machine::alloc_contig`](crate::Machine::alloc_contig): no range of the allowed zones could be
    /// taken.
    NotFound,
}

impl fmt::Display for ContigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContigError::Invalid => {
                f.write_str("zero frames, a bad alignment, or an impossible size")
            }
            ContigError::OutOfRange { pfn } => {
                write!(f, "frame {pfn} lies outside the range's zone")
            }
            ContigError::PartialPageblock { pfn } => {
                write!(f, "the pageblock of frame {pfn} reaches outside its zone")
            }
            ContigError::Blocked { pfn, why } => {
                write!(f, "{why:?} memory at {pfn} blocks the range")
            }
            ContigError::Isolated { pfn } => {
                write!(
                    f,
                    "the pageblock of frame {pfn} is isolated by someone else"
                )
            }
            ContigError::Overlap { pfn } => {
                write!(f, "frame {pfn} lies in a CMA area set aside before")
            }
            ContigError::NotOnline { pfn } => write!(f, "frame {pfn} is not online"),
            ContigError::Refused { pfn } => {
                write!(f, "the kernel did not migrate the block at {pfn}")
            }
            ContigError::Busy { pfn } => write!(f, "the block at {pfn} stayed busy"),
            ContigError::NoMemory => {
                f.write_str("no free memory to migrate the range's frames into")
            }
            ContigError::NotFound => f.write_str("no range of the allowed zones could be taken"),
        }
    }
}

impl core::error::Error for ContigError {}

impl From<EvacuateError> for ContigError {
    fn from(e: EvacuateError) -> Self {
        match e {
            EvacuateError::Blocked { pfn, why } => ContigError::Blocked { pfn, why },
            EvacuateError::Refused { pfn } => ContigError::Refused { pfn },
            EvacuateError::Busy { pfn } => ContigError::Busy { pfn },
            EvacuateError::NoMemory => ContigError::NoMemory,
            // The machine's zone lock always takes the closure.
            EvacuateError::Contended => ContigError::NoMemory,
        }
    }
}
