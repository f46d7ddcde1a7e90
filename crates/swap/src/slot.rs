//! Slot offsets, orders and cluster indices (spec 05 §3.1, §2).

use core::fmt;

/// Largest supported cluster order: clusters of up to 4096 slots (a 16 MiB
/// huge page with 4 KiB base pages). Linux uses 9 (`HPAGE_PMD_NR` = 512).
pub const MAX_CLUSTER_ORDER: u8 = 12;

/// Smallest supported cluster order: clusters of 8 slots.
pub const MIN_CLUSTER_ORDER: u8 = 3;

/// Number of allocation orders a device can have (`SWAP_NR_ORDERS` for the
/// largest supported cluster).
pub const MAX_ORDERS: usize = MAX_CLUSTER_ORDER as usize + 1;

/// Default cluster order: 512 slots, the number of 4 KiB pages in a 2 MiB
/// page (spec 05 §2 `SWAPFILE_CLUSTER` with THP swap).
pub const DEFAULT_CLUSTER_ORDER: u8 = 9;

/// Offset of a page-sized slot on a swap device (the offset half of a swap
/// entry). Slot 0 is the device header and is never handed out (spec 05 §2
/// `SWAP_ENTRY_INVALID`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Slot(u32);

impl Slot {
    /// The header slot, permanently bad.
    pub const HEADER: Slot = Slot(0);

    /// A slot at `offset`.
    pub const fn new(offset: u32) -> Self {
        Slot(offset)
    }

    /// The offset as a number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// Whether the slot is aligned to `2^order` slots.
    pub const fn is_aligned(self, order: Order) -> bool {
        self.0 & ((1u32 << order.get()) - 1) == 0
    }

    /// The slot `n` slots after this one, if it fits in a `u32`.
    pub const fn checked_add(self, n: u32) -> Option<Slot> {
        match self.0.checked_add(n) {
            Some(v) => Some(Slot(v)),
            None => None,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slot {:#x}", self.0)
    }
}

/// Allocation order: an entry of order `k` covers `2^k` naturally aligned
/// slots (order 0: one base page; the cluster order: one PMD-sized THP).
/// The shared vocabulary type; the device refuses orders above its cluster
/// order with a typed error.
pub use pageframe_types::Order;

/// Index of a cluster (slot offset divided by the cluster size).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct ClusterIndex(u32);

impl ClusterIndex {
    /// Cluster number `index`.
    pub const fn new(index: u32) -> Self {
        ClusterIndex(index)
    }

    /// The index as a number.
    pub const fn get(self) -> u32 {
        self.0
    }

    pub(crate) const fn as_usize(self) -> usize {
        self.0 as usize
    }
}
