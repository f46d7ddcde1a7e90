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
use crate::irq_lock::IrqLock;
use crate::memmap::{CapacityError, PAGE_SIZE, PhysRange, RangeSet};
use crate::paging::{self, DirectMap, MapError};
use crate::time::{Cycles, Instant};
use crate::zones::{self, ZoneSetup, ZoneSetupError};
use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};
use pageframe::{Gfp, Machine, MachineConfig, NodeId, Pfn, PfnRange, SetupError, ZoneKind};

/// The kernel's allocator: a [`Machine`] whose zones take the
/// interrupt-safe lock.
pub type KernelMachine = Machine<'static, IrqLock>;

/// The machine's only node (this kernel reads no NUMA tables).
pub const NODE: NodeId = NodeId::ZERO;

/// CPUs with per-CPU page caches: the boot CPU and the one `smp` starts.
pub const CPUS: u32 = 2;

/// Where the machine lives: a static, written in place by
/// [`Machine::new_in`] (the machine is too large for a boot stack).
struct MachineSlot(UnsafeCell<MaybeUninit<KernelMachine>>);

// SAFETY: the slot is handed out once (`SLOT_TAKEN`), as an exclusive
// reference; afterwards only that reference reaches it.
unsafe impl Sync for MachineSlot {}

static SLOT: MachineSlot = MachineSlot(UnsafeCell::new(MaybeUninit::uninit()));
static SLOT_TAKEN: AtomicBool = AtomicBool::new(false);

/// The slot, the first time only.
fn machine_slot() -> Option<&'static mut MaybeUninit<KernelMachine>> {
    if SLOT_TAKEN.swap(true, Ordering::AcqRel) {
        return None;
    }
    // SAFETY: the first and only call gets here, so this is the only
    // reference to the slot.
    Some(unsafe { &mut *SLOT.0.get() })
}

/// Zone kinds the kernel creates, low to high.
const KINDS: [ZoneKind; 2] = [ZoneKind::Dma32, ZoneKind::Normal];

/// The memory system, up.
pub struct Memory {
    /// The allocator, shared by everything once set up.
    pub machine: &'static KernelMachine,
    /// Exactly the frames handed to the allocator.
    pub managed: RangeSet,
    /// What each zone's set-up did (`None`: no RAM in its window).
    pub zones: [Option<ZoneSetup>; 2],
    /// Bytes of the per-CPU caches' memory, and where it lies.
    pub pcp: (usize, PhysRange),
    /// The direct map.
    pub map: DirectMap,
    /// Time spent building the direct map.
    pub map_cycles: Cycles,
    /// Bytes of the small-object heap.
    pub small_heap: usize,
    /// RAM kept out of the zones for the hot-add demo, declared
    /// hotpluggable.
    pub hotplug: Option<PfnRange>,
}

impl Memory {
    /// One past the highest frame number of any zone.
    pub fn pfn_end(&self) -> u64 {
        let hot = self.hotplug.map_or(0, |r| r.end.get());
        self.zones()
            .map(|s| s.span.end.get())
            .max()
            .unwrap_or(0)
            .max(hot)
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
    /// Bring-up ran twice.
    Again,
    /// The memory map did not fit the kernel's range sets.
    Ranges(CapacityError),
    /// No usable RAM below 4 GiB: nothing to build page tables from.
    NoLowMemory,
    /// A zone could not be built.
    Zone(ZoneSetupError),
    /// No room, or not enough, for the per-CPU caches.
    PcpMemory { needed: usize, carved: usize },
    /// The machine refused the per-CPU caches.
    Pcp(SetupError),
    /// The hot-add range could not be declared.
    Hotplug(SetupError),
    /// The direct map could not be built.
    Map(MapError),
    /// The heap could not start.
    Heap(HeapInitError),
}

impl fmt::Display for BringUpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Again => write!(f, "bring-up ran twice"),
            Self::Ranges(_) => write!(f, "memory map has too many ranges"),
            Self::NoLowMemory => write!(f, "no usable RAM below 4 GiB"),
            Self::Zone(e) => write!(f, "{e}"),
            Self::PcpMemory { needed, carved } => {
                write!(f, "per-CPU caches need {needed} bytes, {carved} carved")
            }
            Self::Pcp(e) => write!(f, "per-CPU caches: {e}"),
            Self::Hotplug(e) => write!(f, "hotplug range: {e}"),
            Self::Map(e) => write!(f, "direct map: {e}"),
            Self::Heap(e) => write!(f, "kernel heap: {e}"),
        }
    }
}

/// An upper bound of what [`Machine::pcp_bytes`] will ask for over
/// `frames` frames: a cache may hold 1/8 of its zone (16 bytes a slot),
/// plus head-room and a few KiB per CPU and zone. The unused part is
/// handed to the allocator afterwards.
fn pcp_estimate(frames: u64, cpus: u32) -> u64 {
    frames / 8 * 16 * 3 / 2 + u64::from(cpus) * KINDS.len() as u64 * (16 << 10)
}

/// Brings the memory system up from the boot information.
/// With `hotplug`, the top 256 MiB of RAM above 4.5 GiB are kept out of
/// the zones and declared hotpluggable (see `hot_add.rs`).
pub fn bring_up(info: &BootInfo, kernel: PhysRange, hotplug: bool) -> Result<Memory, BringUpError> {
    let ram = info.memmap.ram().map_err(BringUpError::Ranges)?;
    let mut usable =
        zones::usable_ram(&ram, kernel, info.boot_ranges()).map_err(BringUpError::Ranges)?;
    let machine = Machine::new_in(
        machine_slot().ok_or(BringUpError::Again)?,
        MachineConfig::SINGLE_NODE,
    );
    let later = match hotplug {
        true => withhold_dimm(&mut usable)?,
        false => None,
    };
    let mut setups = [None, None];
    // Zone spans come from the usable RAM before anything is carved, so
    // that what is carved and later given back lies inside a zone.
    let spans = usable.clone();
    // The per-CPU caches' memory: carved now (their size depends on the
    // memory handed over, so an upper bound), trimmed once they exist.
    let frames: u64 = usable.ranges().map(|r| r.len() / PAGE_SIZE).sum();
    let estimate = pcp_estimate(frames, CPUS);
    let pcp_region = usable
        .take_top(estimate, PhysRange::new(0, u64::MAX))
        .ok_or(BringUpError::PcpMemory {
            needed: estimate as usize,
            carved: 0,
        })?;

    // SAFETY: usable RAM below 4 GiB is identity-mapped by the boot tables
    // and by the direct map that replaces them, and nothing else uses it.
    let setup = unsafe { zones::build_zone(machine, KINDS[0], &mut usable, &spans) }
        .map_err(BringUpError::Zone)?
        .ok_or(BringUpError::NoLowMemory)?;
    setups[0] = Some(setup);

    let start = Instant::now();
    // SAFETY: every frame handed to the machine is RAM that only its
    // owners use (`usable` excludes the kernel, boot data and metadata).
    let mut frames =
        unsafe { pageframe::x86_64::FrameAdapter::new(&*machine, NODE, Gfp::KERNEL | Gfp::DMA32) };
    // SAFETY: `ram` holds everything the kernel touches (image, stack,
    // metadata, heap); the adapter hands out unused frames below 4 GiB.
    let map = unsafe { paging::build_and_switch(&ram, kernel, &mut frames) }
        .map_err(BringUpError::Map)?;
    let map_cycles = start.elapsed();

    // SAFETY: RAM above 4 GiB is identity-mapped by the direct map now.
    let normal = unsafe { zones::build_zone(machine, KINDS[1], &mut usable, &spans) };
    setups[1] = normal.map_err(BringUpError::Zone)?;

    // Per-CPU caches for every CPU, in the carved region; what they do not
    // need goes to the allocator.
    let needed = machine.pcp_bytes(CPUS).map_err(BringUpError::Pcp)?;
    let carved = pcp_region.len() as usize;
    if needed > carved {
        return Err(BringUpError::PcpMemory { needed, carved });
    }
    // SAFETY: the region was usable RAM, carved out before any of it was
    // handed over, so nothing else uses it; the direct map covers it.
    let pcp_mem: &'static mut [MaybeUninit<u8>] = unsafe {
        core::slice::from_raw_parts_mut(pcp_region.start as *mut MaybeUninit<u8>, needed)
    };
    machine
        .enable_pcp(CPUS, pcp_mem)
        .map_err(BringUpError::Pcp)?;
    let used_end = (pcp_region.start + needed as u64).next_multiple_of(PAGE_SIZE);
    let pcp = (needed, PhysRange::new(pcp_region.start, used_end));
    if used_end < pcp_region.end {
        let rest = PfnRange::new(
            Pfn::new(used_end / PAGE_SIZE),
            Pfn::new(pcp_region.end / PAGE_SIZE),
        );
        machine.add_free_range(rest).map_err(BringUpError::Pcp)?;
        usable
            .insert(PhysRange::new(used_end, pcp_region.end))
            .map_err(BringUpError::Ranges)?;
    }

    if let Some(r) = later {
        machine
            .declare_hotplug(NODE, ZoneKind::Movable, r)
            .map_err(BringUpError::Hotplug)?;
    }
    let machine: &'static KernelMachine = machine;
    let small_heap = heap::init(machine).map_err(BringUpError::Heap)?;
    Ok(Memory {
        machine,
        managed: usable,
        zones: setups,
        pcp,
        map,
        map_cycles,
        small_heap,
        hotplug: later,
    })
}

/// Bytes kept out for the hot-add demo.
const DIMM: u64 = 256 << 20;

/// Removes the top 256 MiB (2 MiB-aligned) of the highest usable range from
/// `usable` when it lies above 4.5 GiB, as frames.
fn withhold_dimm(usable: &mut RangeSet) -> Result<Option<PfnRange>, BringUpError> {
    let Some(top) = usable.ranges().last() else {
        return Ok(None);
    };
    let end = top.end / (2 << 20) * (2 << 20);
    if end < (9 << 29) || end - DIMM < top.start.max(4 << 30) {
        return Ok(None);
    }
    let dimm = PhysRange::new(end - DIMM, end);
    usable.remove(dimm).map_err(BringUpError::Ranges)?;
    Ok(Some(PfnRange::new(
        Pfn::new(dimm.start / PAGE_SIZE),
        Pfn::new(dimm.end / PAGE_SIZE),
    )))
}
