//! Device configuration (spec 05 §2, §3.2 flags, §11).

use crate::error::InitError;
use crate::slot::{DEFAULT_CLUSTER_ORDER, MAX_CLUSTER_ORDER, MIN_CLUSTER_ORDER, Order};

bitflags::bitflags! {
    /// Device properties that change allocation (spec 05 §3.2 `flags`).
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
    pub struct DeviceFlags: u8 {
        /// A block device (not a swap file on a filesystem): only such a
        /// device may hold entries of order > 0 (spec 05 §5.4, first line).
        const BLOCK_DEVICE = 1 << 0;
        /// Discard clusters when they become free (`SWP_PAGE_DISCARD`): a
        /// freed cluster waits on the discard list until [`crate::Discard`]
        /// has run for it (spec 05 §7).
        const PAGE_DISCARD = 1 << 1;
    }
}

/// How hard an mTHP (0 < order < cluster order) allocation searches before
/// it falls back to base slots.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum MthpSearch {
    /// Linux 6.18 (spec 05 §5.4): NONFULL clusters of the order, one FREE
    /// cluster, one FRAG cluster of the order, then give up. An order-k
    /// entry only ever lands in a cluster dedicated to order k.
    Linux,
    /// As `Linux`, then every FRAG cluster of the order, then an aligned free
    /// run in a cluster of any other order ("mTHP stealing", the mirror of
    /// the order-0 stealing Linux does). Never fails while an aligned run of
    /// free slots exists in an allocatable cluster, at the price of a scan
    /// on the fallback path only.
    Exhaustive,
}

/// Configuration of one swap device.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct SwapConfig {
    /// Slots including the header slot 0 (Linux `max`). Slots past the last
    /// whole cluster are marked bad so every cluster has the full size.
    pub slots: u32,
    /// log2 of the slots per cluster (9: 512 slots, one 2 MiB page).
    pub cluster_order: u8,
    /// Device properties.
    pub flags: DeviceFlags,
    /// Search policy for mTHP orders.
    pub mthp_search: MthpSearch,
}

impl SwapConfig {
    /// A block device of `slots` slots (header included) with 512-slot
    /// clusters, no discard and the Linux mTHP search.
    pub const fn new(slots: u32) -> Self {
        SwapConfig {
            slots,
            cluster_order: DEFAULT_CLUSTER_ORDER,
            flags: DeviceFlags::BLOCK_DEVICE,
            mthp_search: MthpSearch::Linux,
        }
    }

    /// The same configuration with another cluster order.
    pub const fn with_cluster_order(mut self, order: u8) -> Self {
        self.cluster_order = order;
        self
    }

    /// The same configuration with other device flags.
    pub const fn with_flags(mut self, flags: DeviceFlags) -> Self {
        self.flags = flags;
        self
    }

    /// The same configuration with another mTHP search policy.
    pub const fn with_mthp_search(mut self, search: MthpSearch) -> Self {
        self.mthp_search = search;
        self
    }

    /// Slots per cluster.
    pub const fn cluster_slots(&self) -> u32 {
        1 << self.cluster_order
    }

    /// The order of a whole cluster (the PMD order).
    pub const fn huge_order(&self) -> Order {
        match Order::new(self.cluster_order) {
            Some(o) => o,
            None => Order::ZERO,
        }
    }

    /// Number of clusters (the last one padded with bad slots).
    pub const fn nr_clusters(&self) -> u32 {
        let cs = self.cluster_slots() as u64;
        (self.slots as u64).div_ceil(cs) as u32
    }

    /// Checks the configuration.
    pub const fn check(&self) -> Result<(), InitError> {
        // Scans work on eight count bytes at a time: clusters of 8+ slots.
        if self.cluster_order < MIN_CLUSTER_ORDER || self.cluster_order > MAX_CLUSTER_ORDER {
            return Err(InitError::BadClusterOrder);
        }
        // The header plus at least one usable slot; the padded size must
        // still fit in a u32 offset.
        if self.slots < 2 {
            return Err(InitError::TooFewSlots);
        }
        let padded = self.nr_clusters() as u64 * self.cluster_slots() as u64;
        if padded > u32::MAX as u64 {
            return Err(InitError::TooManySlots);
        }
        Ok(())
    }
}
