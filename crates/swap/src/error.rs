//! Typed errors. A failing operation leaves the device unchanged.

use core::fmt;

use crate::slot::Slot;

/// Why a device could not be set up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum InitError {
    /// The cluster order is below [`crate::MIN_CLUSTER_ORDER`] or above
    /// [`crate::MAX_CLUSTER_ORDER`].
    BadClusterOrder,
    /// Fewer than two slots (the header and one usable slot).
    TooFewSlots,
    /// The device rounded up to whole clusters does not fit 32-bit offsets.
    TooManySlots,
    /// The metadata buffer is smaller than [`crate::SwapDevice::metadata_bytes`].
    MetadataTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
}

/// Why an operation on swap entries was refused. The state is unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SwapError {
    /// The order is above the device's cluster order.
    BadOrder,
    /// The slot (or the end of the entry) lies past the device.
    OutOfRange,
    /// The slot is not aligned to the entry's order.
    Misaligned,
    /// A slot of the entry is the header or a bad slot.
    BadSlot(Slot),
    /// A slot of the entry is free (e.g. a double free).
    NotInUse(Slot),
    /// Dropping a map reference from a slot whose map count is 0 (only the
    /// swap cache holds it).
    CountUnderflow(Slot),
    /// A map reference would need a continuation digit and no continuation
    /// storage is left (or the top digit is full).
    CountOverflow(Slot),
    /// Dropping the swap-cache reference of a slot that has none.
    NoCache(Slot),
    /// Claiming the swap cache for a slot that already has it (a concurrent
    /// swap-in won; Linux's `-EEXIST`).
    CacheExists(Slot),
    /// `free` of an entry some slot of which still has map references.
    StillMapped(Slot),
    /// The operation covers part of a huge (unsplit) cluster: a huge entry
    /// is one unit until [`crate::SwapDevice::split_huge`].
    HugeEntry,
    /// `split_huge` / huge swap-in of an entry that is not huge.
    NotHuge,
}

impl fmt::Display for SwapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwapError::BadOrder => f.write_str("order above the cluster order"),
            SwapError::OutOfRange => f.write_str("slot past the end of the device"),
            SwapError::Misaligned => f.write_str("slot not aligned to the order"),
            SwapError::BadSlot(s) => write!(f, "{s} is bad or the header"),
            SwapError::NotInUse(s) => write!(f, "{s} is free"),
            SwapError::CountUnderflow(s) => write!(f, "{s} has no map reference to drop"),
            SwapError::CountOverflow(s) => {
                write!(f, "{s}: count overflow (no continuation storage)")
            }
            SwapError::NoCache(s) => write!(f, "{s} is not in the swap cache"),
            SwapError::CacheExists(s) => write!(f, "{s} is already in the swap cache"),
            SwapError::StillMapped(s) => write!(f, "{s} still has map references"),
            SwapError::HugeEntry => f.write_str("partial operation on an unsplit huge entry"),
            SwapError::NotHuge => f.write_str("entry is not huge"),
        }
    }
}

/// Why an allocation fell back (order > 0: the caller splits the folio and
/// allocates base slots) or failed (order 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum FallbackReason {
    /// Order > 0 on a device that is not a block device (spec 05 §5.4).
    NotBlockDevice,
    /// A huge entry needs an entirely free cluster and there is none.
    NoFreeCluster,
    /// An mTHP entry found no aligned run of free slots it may use.
    NoAlignedRun,
    /// Nothing free now, but freed clusters wait for discard: run
    /// [`crate::SwapDevice::run_discards`] and retry.
    DiscardPending,
    /// Order 0: no free slot at all.
    DeviceFull,
}

impl FallbackReason {
    /// Number of reasons (for counter arrays).
    pub const COUNT: usize = 5;

    /// All reasons, in counter-array order.
    pub const ALL: [FallbackReason; Self::COUNT] = [
        FallbackReason::NotBlockDevice,
        FallbackReason::NoFreeCluster,
        FallbackReason::NoAlignedRun,
        FallbackReason::DiscardPending,
        FallbackReason::DeviceFull,
    ];

    /// Position in counter arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            FallbackReason::NotBlockDevice => "not-block-device",
            FallbackReason::NoFreeCluster => "no-free-cluster",
            FallbackReason::NoAlignedRun => "no-aligned-run",
            FallbackReason::DiscardPending => "discard-pending",
            FallbackReason::DeviceFull => "device-full",
        }
    }
}

/// Why an allocation returned no entry.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AllocError {
    /// The order is above the device's cluster order.
    BadOrder,
    /// No entry of the order could be had (see the reason).
    NoSpace(FallbackReason),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::BadOrder => f.write_str("order above the cluster order"),
            AllocError::NoSpace(r) => write!(f, "no swap space: {}", r.name()),
        }
    }
}

/// A broken invariant found by [`crate::SwapDevice::validate`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ValidateError {
    /// Spec 05 §12.1: the cluster's count differs from its non-zero bytes.
    CountMismatch {
        /// Cluster index.
        cluster: u32,
        /// Recorded count.
        count: u32,
        /// Non-zero bytes found.
        actual: u32,
    },
    /// Spec 05 §12.2: the flag disagrees with list membership.
    ListMismatch {
        /// Cluster index.
        cluster: u32,
    },
    /// A list's links are inconsistent (bad prev/next or length).
    BrokenList,
    /// Spec 05 §12.2: FREE with count, order or continuation pages left.
    DirtyFree {
        /// Cluster index.
        cluster: u32,
    },
    /// Spec 05 §12.2: FULL without a full count, or full count not FULL.
    FullMismatch {
        /// Cluster index.
        cluster: u32,
    },
    /// A cluster is off every list (NONE) while no one holds it.
    Orphan {
        /// Cluster index.
        cluster: u32,
    },
    /// A huge cluster is not one uniform whole-cluster entry.
    BadHuge {
        /// Cluster index.
        cluster: u32,
    },
    /// Header or padding slot not marked bad.
    BadSlotLost,
    /// Spec 05 §12.8: a continuation flag or digit is inconsistent.
    Continuation {
        /// Slot.
        slot: Slot,
    },
    /// A free slot lies before the cluster's scan hint.
    HintPastFree {
        /// Cluster index.
        cluster: u32,
    },
    /// Continuation pages attached plus free differ from the pool size.
    PoolLeak,
}

#[cfg(feature = "std")]
impl std::error::Error for SwapError {}
#[cfg(feature = "std")]
impl std::error::Error for AllocError {}
