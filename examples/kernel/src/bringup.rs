//! Bringing the memory system up, in the only order that works:
//!
//! 1. the DMA32 zone, from RAM below 4 GiB (reachable through the boot
//!    tables), so it can feed
//! 2. the kernel's own page tables (direct map of all RAM), which make RAM
//!    above 4 GiB reachable, so that
//! 3. the Normal zone can carve its metadata from its own RAM;
//! 4. the kernel heap, whose pages come from the allocator.

use crate::acpi::Platform;
use crate::boot::BootInfo;
use crate::heap::{self, HeapInitError};
use crate::irq_lock::IrqLock;
use crate::memmap::{CapacityError, PAGE_SIZE, PhysRange, RangeSet};
use crate::paging::{self, DirectMap, MapError};
use crate::time::{Cycles, Instant};
use crate::zones;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};
use pageframe::boot::{Builder, Plan, PlanError, PlannedZone};
use pageframe::{
    Gfp, Machine, MachineConfig, NodeId, Pfn, PfnRange, SetupError, ZoneKind, topology::Topology,
};

/// The kernel's allocator: a [`Machine`] whose zones take the
/// interrupt-safe lock (and, built with the `debug` feature, report to the
/// kernel's hooks).
pub type KernelMachine = Machine<'static, (IrqLock, KernelHooks)>;

/// The hooks the kernel's machine reports to.
#[cfg(feature = "debug")]
pub type KernelHooks = &'static crate::debug::KernelHooks;
/// The hooks the kernel's machine reports to: none.
#[cfg(not(feature = "debug"))]
pub type KernelHooks = pageframe::debug::NoHooks;

#[cfg(feature = "debug")]
fn hooks() -> KernelHooks {
    &crate::debug::HOOKS
}

#[cfg(not(feature = "debug"))]
fn hooks() -> KernelHooks {
    pageframe::debug::NoHooks
}

/// The bootstrap CPU's node (the first the SRAT names, or the only one),
/// where the kernel's own allocations go.
pub const NODE: NodeId = NodeId::ZERO;

/// Bring-up runs once (a plan is built once).
static BROUGHT_UP: AtomicBool = AtomicBool::new(false);

/// The memory system, up.
pub struct Memory {
    /// The allocator, shared by everything once set up.
    pub machine: &'static KernelMachine,
    /// Exactly the frames handed to the allocator.
    pub managed: RangeSet,
    /// What each zone's set-up did (`None`: no RAM in its window).
    pub zones: [Option<PlannedZone>; MAX_ZONES],
    /// Bytes of the per-CPU caches' memory, and where it lies.
    pub pcp: (usize, PhysRange),
    /// The direct map.
    pub map: DirectMap,
    /// Time spent building the direct map.
    pub map_cycles: Cycles,
    /// Time spent planning and building the machine (zones created, RAM
    /// handed over).
    pub init_cycles: Cycles,
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
    pub fn zones(&self) -> impl Iterator<Item = &PlannedZone> {
        self.zones.iter().flatten()
    }

    /// Time creating zones and handing RAM over.
    pub fn allocator_init(&self) -> Cycles {
        self.init_cycles
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
    /// The planner could not lay the machine out or build it.
    Plan(PlanError),
    /// The machine refused the per-CPU caches.
    Pcp(SetupError),
    /// The SRAT names more nodes than the machine takes.
    Nodes(usize),
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
            Self::Plan(e) => write!(f, "plan: {e}"),
            Self::Pcp(e) => write!(f, "per-CPU caches: {e}"),
            Self::Nodes(n) => write!(f, "{n} NUMA nodes: too many"),
            Self::Hotplug(e) => write!(f, "hotplug range: {e}"),
            Self::Map(e) => write!(f, "direct map: {e}"),
            Self::Heap(e) => write!(f, "kernel heap: {e}"),
        }
    }
}

/// Zones reported: two per node (DMA32, Normal).
const MAX_ZONES: usize = 2 * crate::acpi::MAX_NODES;

/// The first 4 GiB, which the boot tables identity-map: where the plan
/// carves the machine and its metadata, so that it is built before this
/// kernel's direct map, whose page tables then come from it.
const BOOT_MAPPED: PfnRange = PfnRange::new(Pfn::new(0), Pfn::new(1 << 20));

/// Brings the memory system up from the boot information, through the
/// allocator's planner (`pageframe::boot::Plan`). With `hotplug`, the top
/// 256 MiB of RAM above 4.5 GiB are kept out of the zones and declared
/// hotpluggable (see `hot_add.rs`).
pub fn bring_up(
    info: &BootInfo,
    kernel: PhysRange,
    hotplug: bool,
    platform: &Platform,
) -> Result<Memory, BringUpError> {
    if BROUGHT_UP.swap(true, Ordering::AcqRel) {
        return Err(BringUpError::Again);
    }
    let ram = info.memmap.ram().map_err(BringUpError::Ranges)?;
    let mut usable =
        zones::usable_ram(&ram, kernel, info.boot_ranges()).map_err(BringUpError::Ranges)?;
    let later = match hotplug {
        true => withhold_dimm(&mut usable)?,
        false => None,
    };

    // NUMA: the SRAT's memory ranges with their nodes, whole frames.
    let mut affinity = [(NODE, PfnRange::new(Pfn::new(0), Pfn::new(0))); crate::acpi::MAX_RANGES];
    let mut n = 0;
    for m in platform.memory() {
        let r = PfnRange::new(
            Pfn::new(m.base.div_ceil(PAGE_SIZE)),
            Pfn::new((m.base + m.len) / PAGE_SIZE),
        );
        if let Some(node) = NodeId::new(usize::from(m.node))
            && !r.is_empty()
        {
            affinity[n] = (node, r);
            n += 1;
        }
    }
    let config = if platform.nodes > 1 && n > 0 {
        let topology =
            Topology::uniform(platform.nodes).map_err(|_| BringUpError::Nodes(platform.nodes))?;
        MachineConfig::new(topology)
    } else {
        n = 0;
        MachineConfig::SINGLE_NODE
    };

    let machine = Builder::new(config).lock::<IrqLock>().hooks(hooks());
    let start = Instant::now();
    let plan = Plan::new_within(usable.frames(), &affinity[..n], config, BOOT_MAPPED)
        .map_err(BringUpError::Plan)?;
    // SAFETY: the plan carved the machine and every zone's metadata from
    // usable RAM below 4 GiB, which the boot tables (and the direct map that
    // replaces them) identity-map; `usable` excludes the kernel and the boot
    // data, so nothing else uses those frames. The plan is built once
    // (`BROUGHT_UP`).
    let machine: &'static mut KernelMachine =
        unsafe { plan.build(machine, |pa| pa.get() as *mut u8) }.map_err(BringUpError::Plan)?;
    let init_cycles = start.elapsed();
    let zones = core::array::from_fn(|i| plan.zones().nth(i).copied());
    if !plan
        .zones()
        .any(|z| z.node == NODE && z.kind == ZoneKind::Dma32)
    {
        return Err(BringUpError::NoLowMemory);
    }

    let start = Instant::now();
    // SAFETY: every frame handed to the machine is RAM that only its
    // owners use (the plan left the kernel, boot data and metadata out).
    let mut frames =
        unsafe { pageframe::paging::FrameAdapter::new(&*machine, NODE, Gfp::KERNEL | Gfp::DMA32) };
    // SAFETY: `ram` holds everything the kernel touches (image, stack,
    // metadata, heap); the adapter hands out unused frames below 4 GiB.
    let map = unsafe { paging::build_and_switch(&ram, kernel, &mut frames) }
        .map_err(BringUpError::Map)?;
    let map_cycles = start.elapsed();

    // Per-CPU caches for every CPU the MADT lists, their memory taken from
    // the machine itself (contiguous, below 4 GiB, never freed).
    let cpus = platform.apic_ids().len() as u32;
    let needed = machine.pcp_bytes(cpus).map_err(BringUpError::Pcp)?;
    // SAFETY: the direct map (identity) covers every frame below 4 GiB.
    let range = unsafe {
        machine.enable_pcp_in_place(cpus, Gfp::KERNEL | Gfp::DMA32, |pa| pa.get() as *mut u8)
    }
    .map_err(BringUpError::Pcp)?;
    let at = range.start.addr().get();
    let pcp = (needed, PhysRange::new(at, range.end.addr().get()));

    if let Some(r) = later {
        machine
            .declare_hotplug(NODE, ZoneKind::Movable, r)
            .map_err(BringUpError::Hotplug)?;
    }
    let machine: &'static KernelMachine = machine;
    let small_heap = heap::init(machine).map_err(BringUpError::Heap)?;
    Ok(Memory {
        machine,
        managed: RangeSet::from_frames(plan.free().clone()),
        zones,
        pcp,
        map,
        map_cycles,
        init_cycles,
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
