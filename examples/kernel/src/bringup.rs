//! Bringing the memory system up, in the only order that works:
//!
//! 1. the DMA32 zone, from RAM below 4 GiB (reachable through the boot
//!    tables), so it can feed
//! 2. the kernel's own page tables (direct map of all RAM), which make RAM
//!    above 4 GiB reachable, so that
//! 3. the Normal zone can carve its metadata from its own RAM;
//! 4. the kernel heap, whose pages come from the allocator.

use crate::boot::BootInfo;
use crate::heap::{self, HeapInitError};
use crate::memmap::{CapacityError, PhysRange, RangeSet};
use crate::paging::{self, DirectMap, MapError};
use crate::time::{Cycles, Instant};
use crate::zones::{self, ZoneSetup, ZoneSetupError};
use core::fmt;
use pageframe::{Gfp, Node, NodeError, ZoneKind};
use spin::Once;

/// The node, shared by everything once set up.
static NODE: Once<Node<'static>> = Once::new();

/// Zone kinds the kernel creates, low to high.
const KINDS: [ZoneKind; 2] = [ZoneKind::Dma32, ZoneKind::Normal];

/// The memory system, up.
pub struct Memory {
    /// The node with all zones.
    pub node: &'static Node<'static>,
    /// Exactly the frames handed to the allocator.
    pub managed: RangeSet,
    /// What each zone's set-up did (`None`: no RAM in its window).
    pub zones: [Option<ZoneSetup>; 2],
    /// The direct map.
    pub map: DirectMap,
    /// Time spent building the direct map.
    pub map_cycles: Cycles,
    /// Bytes of the small-object heap.
    pub small_heap: usize,
}

impl Memory {
    /// One past the highest frame number of any zone.
    pub fn pfn_end(&self) -> u64 {
        self.zones().map(|s| s.span.end.get()).max().unwrap_or(0)
    }

    /// The zones set up.
    pub fn zones(&self) -> impl Iterator<Item = &ZoneSetup> {
        self.zones.iter().flatten()
    }

    /// Time creating zones and handing RAM over, over all zones.
    pub fn allocator_init(&self) -> Cycles {
        self.zones().fold(Cycles(0), |sum, s| sum.plus(s.cycles))
    }
}

/// Why bring-up failed.
#[derive(Debug)]
pub enum BringUpError {
    /// The memory map did not fit the kernel's range sets.
    Ranges(CapacityError),
    /// No usable RAM below 4 GiB: nothing to build page tables from.
    NoLowMemory,
    /// A zone could not be built.
    Zone(ZoneSetupError),
    /// The node refused a zone.
    Node(NodeError),
    /// The direct map could not be built.
    Map(MapError),
    /// The heap could not start.
    Heap(HeapInitError),
}

impl fmt::Display for BringUpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ranges(_) => write!(f, "memory map has too many ranges"),
            Self::NoLowMemory => write!(f, "no usable RAM below 4 GiB"),
            Self::Zone(e) => write!(f, "{e}"),
            Self::Node(e) => write!(f, "adding a zone: {e}"),
            Self::Map(e) => write!(f, "direct map: {e}"),
            Self::Heap(e) => write!(f, "kernel heap: {e}"),
        }
    }
}

/// Brings the memory system up from the boot information.
pub fn bring_up(info: &BootInfo, kernel: PhysRange) -> Result<Memory, BringUpError> {
    let ram = info.memmap.ram().map_err(BringUpError::Ranges)?;
    let mut usable =
        zones::usable_ram(&ram, kernel, info.boot_ranges()).map_err(BringUpError::Ranges)?;
    let mut node = Node::new();
    let mut setups = [None, None];

    // SAFETY: usable RAM below 4 GiB is identity-mapped by the boot tables
    // and by the direct map that replaces them, and nothing else uses it.
    let (zone, setup) = unsafe { zones::build_zone(KINDS[0], &mut usable) }
        .map_err(BringUpError::Zone)?
        .ok_or(BringUpError::NoLowMemory)?;
    node.add_zone(zone).map_err(BringUpError::Node)?;
    setups[0] = Some(setup);

    let start = Instant::now();
    let mut frames = pageframe::x86_64::FrameAdapter::new(&node, Gfp::KERNEL | Gfp::DMA32);
    // SAFETY: `ram` holds everything the kernel touches (image, stack,
    // metadata, heap); the adapter hands out unused frames below 4 GiB.
    let map = unsafe { paging::build_and_switch(&ram, kernel, &mut frames) }
        .map_err(BringUpError::Map)?;
    let map_cycles = start.elapsed();

    // SAFETY: RAM above 4 GiB is identity-mapped by the direct map now.
    let normal = unsafe { zones::build_zone(KINDS[1], &mut usable) };
    if let Some((zone, setup)) = normal.map_err(BringUpError::Zone)? {
        node.add_zone(zone).map_err(BringUpError::Node)?;
        setups[1] = Some(setup);
    }

    let node: &'static Node<'static> = NODE.call_once(|| node);
    let small_heap = heap::init(node).map_err(BringUpError::Heap)?;
    Ok(Memory {
        node,
        managed: usable,
        zones: setups,
        map,
        map_cycles,
        small_heap,
    })
}
