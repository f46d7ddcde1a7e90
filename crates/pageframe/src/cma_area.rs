//! A CMA area's identity, its state and what it reports. The machine
//! embeds the areas' state and a [`crate::contig::CmaBuffer`] names its area, so
//! these live at the bottom of the facade; setting areas up and taking
//! buffers from them is `cma.rs`, a service on the machine.

use pageframe_buddy::PfnRange;
use pageframe_types::atomic::AtomicU64;

/// Most CMA areas a machine keeps.
pub const MAX_CMA_AREAS: usize = 8;

/// A CMA area of a machine.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmaId(pub u8);

/// One area's state: its range and counters.
pub(crate) struct CmaArea {
    pub(crate) range: PfnRange,
    pub(crate) held: AtomicU64,
    pub(crate) allocs: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) moved: AtomicU64,
}

/// What an area holds and has done.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CmaStats {
    /// The area.
    pub range: PfnRange,
    /// Frames held by contiguous requests ([`crate::Machine::cma_alloc`]).
    pub held: u64,
    /// Free frames in the area.
    pub free: u64,
    /// Frames of ordinary movable allocations in the area.
    pub movable: u64,
    /// Contiguous requests served.
    pub allocs: u64,
    /// Contiguous requests that failed.
    pub failures: u64,
    /// Frames migrated out of the area by contiguous requests.
    pub moved: u64,
}
