//! The planner: from usable frames (and, on NUMA machines, which node
//! each range belongs to) to a [`Machine`] built in memory carved from
//! those frames.
//!
//! [`Plan::new`] decides, without touching memory: each node's zones
//! ([`ZoneLayout`]: DMA32 below 4 GiB, Normal above; no ISA DMA zone),
//! where each zone's metadata goes (the top of the zone's own frames, so
//! that it is node-local; anywhere on the node if the zone cannot hold it),
//! where the machine itself goes, and what is left to hand over.
//! [`Plan::build`] then writes the machine a [`Builder`] describes there,
//! adds the zones and hands the rest over: the kernel only says where its
//! direct map puts physical memory.

use core::mem::{MaybeUninit, size_of};

use pageframe_types::{PAGE_SIZE, Pfn, PfnRange, PhysAddr};

use super::{Builder, FrameRanges, MapError};
use crate::error::SetupError;
use crate::lock::Platform;
use crate::machine::{Machine, MachineConfig};
use crate::node_id::MAX_NUMNODES;
use crate::node_id::NodeId;
use crate::zone_core::Zone;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind};
use crate::zone_layout::ZoneLayout;

/// Why a plan could not be made or built.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PlanError {
    /// No usable frame (on any node the affinity names).
    NoMemory,
    /// A node named by the affinity ranges is not in the topology.
    NoSuchNode(NodeId),
    /// Two nodes' frames interleave inside one zone window, so their zones
    /// of that kind would overlap.
    Interleaved(NodeId, ZoneKind),
    /// No range of usable frames holds this many bytes of metadata.
    NoRoom {
        /// Bytes wanted in one piece.
        bytes: usize,
    },
    /// The frame set ran out of ranges while carving.
    Map(MapError),
    /// The machine refused a zone or a range (a bug in the plan, or a
    /// physical-to-virtual function that broke its promise).
    Setup(SetupError),
    /// The virtual address given for the machine is not aligned for it.
    Misaligned,
    /// The builder describes a machine of another configuration than the
    /// one the plan was made for.
    OtherConfig,
}

impl core::fmt::Display for PlanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlanError::NoMemory => f.write_str("no usable memory"),
            PlanError::NoSuchNode(n) => write!(f, "{n} is not part of the topology"),
            PlanError::Interleaved(n, k) => {
                write!(f, "the {k} zone of {n} would overlap another node's")
            }
            PlanError::NoRoom { bytes } => write!(f, "no usable range holds {bytes} bytes"),
            PlanError::Map(e) => write!(f, "frame set: {e}"),
            PlanError::Setup(e) => write!(f, "machine: {e}"),
            PlanError::Misaligned => f.write_str("the machine's address is misaligned"),
            PlanError::OtherConfig => f.write_str("the builder's configuration is not the plan's"),
        }
    }
}

impl core::error::Error for PlanError {}

impl From<MapError> for PlanError {
    fn from(e: MapError) -> Self {
        PlanError::Map(e)
    }
}

impl From<SetupError> for PlanError {
    fn from(e: SetupError) -> Self {
        PlanError::Setup(e)
    }
}

/// One zone of a plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PlannedZone {
    /// Its node.
    pub node: NodeId,
    /// Its kind.
    pub kind: ZoneKind,
    /// Its span, holes included.
    pub span: PfnRange,
    /// The frames carved for its metadata.
    pub metadata: PfnRange,
    /// The metadata bytes it needs (from the start of `metadata`).
    pub metadata_bytes: usize,
}

/// Most zones a plan holds.
const MAX_ZONES: usize = MAX_NUMNODES * NR_ZONE_KINDS;

/// A machine's layout, decided before any memory is written.
#[derive(Clone, Debug)]
pub struct Plan<const N: usize = 128> {
    config: MachineConfig,
    zones: [Option<PlannedZone>; MAX_ZONES],
    machine: PfnRange,
    free: FrameRanges<N>,
}

/// Frames holding `bytes`.
fn frames_for(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(PAGE_SIZE)
}

impl<const N: usize> Plan<N> {
    /// Plans a machine of `config` over `usable`. `affinity` names the node
    /// of each range of physical memory (ACPI SRAT memory affinity); with
    /// none, every frame is node 0's. Usable frames no affinity range
    /// covers are left out.
    pub fn new(
        usable: &FrameRanges<N>,
        affinity: &[(NodeId, PfnRange)],
        config: MachineConfig,
    ) -> Result<Self, PlanError> {
        Self::new_within(
            usable,
            affinity,
            config,
            PfnRange::new(Pfn::new(0), Pfn::new(u64::MAX)),
        )
    }

    /// [`Plan::new`], carving the metadata and the machine only inside
    /// `writable`: for a kernel whose early page tables map part of memory
    /// (PVH and Multiboot boot tables map the first 4 GiB), so that
    /// [`Plan::build`] runs before the kernel's own direct map exists, and
    /// that map's page tables come from the machine. Still node-local where
    /// the window allows: the zone's frames first, then its node's, then
    /// any.
    pub fn new_within(
        usable: &FrameRanges<N>,
        affinity: &[(NodeId, PfnRange)],
        config: MachineConfig,
        writable: PfnRange,
    ) -> Result<Self, PlanError> {
        let mut free = usable.clone();
        if !affinity.is_empty() {
            let mut covered = FrameRanges::<N>::new();
            for &(node, r) in affinity {
                if !config.topology.contains(node) {
                    return Err(PlanError::NoSuchNode(node));
                }
                covered.insert(r)?;
            }
            let mut out = FrameRanges::<N>::new();
            for r in covered.ranges() {
                for piece in usable.clipped(*r).ranges() {
                    out.insert(*piece)?;
                }
            }
            free = out;
        }
        if free.frames() == 0 {
            return Err(PlanError::NoMemory);
        }
        // Memory the kernel could not map is refused, not planned.
        let limit = config.pfn_limit();
        if let Some(beyond) = free.ranges().iter().find(|r| r.end > limit) {
            return Err(PlanError::Setup(SetupError::AddressWidth {
                pfn: beyond.start.max(limit),
            }));
        }
        // Zone spans come from the frames before anything is carved.
        let all = free.clone();
        let node_frames = |node: NodeId| -> Result<FrameRanges<N>, PlanError> {
            if affinity.is_empty() {
                return Ok(if node == NodeId::ZERO {
                    all.clone()
                } else {
                    FrameRanges::new()
                });
            }
            let mut mine = FrameRanges::<N>::new();
            for &(_, r) in affinity.iter().filter(|a| a.0 == node) {
                for piece in all.clipped(r).ranges() {
                    mine.insert(*piece)?;
                }
            }
            Ok(mine)
        };
        let mut zones = [None; MAX_ZONES];
        let mut count = 0;
        for node in config.topology.nodes() {
            let mine = node_frames(node)?;
            let (Some(first), Some(last)) = (mine.ranges().first(), mine.ranges().last()) else {
                continue;
            };
            let layout = ZoneLayout::new(PfnRange::new(first.start, last.end), false, None);
            for (kind, window) in layout.zones() {
                let inside = mine.clipped(window);
                let (Some(a), Some(b)) = (inside.ranges().first(), inside.ranges().last()) else {
                    continue;
                };
                let span = PfnRange::new(a.start, b.end);
                let overlaps = zones
                    .iter()
                    .flatten()
                    .any(|z: &PlannedZone| z.kind == kind && !z.span.intersect(&span).is_empty());
                if overlaps {
                    return Err(PlanError::Interleaved(node, kind));
                }
                let metadata_bytes =
                    Zone::<crate::lock::SpinLock>::metadata_bytes(span, config.mobility);
                let want = frames_for(metadata_bytes);
                // Node-local: from the zone's own frames, else the node's.
                let metadata = free
                    .take_top(want, span.intersect(&writable))
                    .or_else(|| {
                        let (f, l) = (mine.ranges().first()?, mine.ranges().last()?);
                        let node = PfnRange::new(f.start, l.end);
                        free.take_top(want, node.intersect(&writable))
                    })
                    .or_else(|| free.take_top(want, writable))
                    .ok_or(PlanError::NoRoom {
                        bytes: metadata_bytes,
                    })?;
                zones[count] = Some(PlannedZone {
                    node,
                    kind,
                    span,
                    metadata,
                    metadata_bytes,
                });
                count += 1;
            }
        }
        if count == 0 {
            return Err(PlanError::NoMemory);
        }
        let bytes = size_of::<Machine<'static>>();
        let machine = free
            .take_top(frames_for(bytes), writable)
            .ok_or(PlanError::NoRoom { bytes })?;
        if free.frames() == 0 {
            return Err(PlanError::NoMemory);
        }
        // Memory the kernel could not map is refused, not planned.
        let limit = config.pfn_limit();
        if let Some(beyond) = free.ranges().iter().find(|r| r.end > limit) {
            return Err(PlanError::Setup(SetupError::AddressWidth {
                pfn: beyond.start.max(limit),
            }));
        }
        Ok(Plan {
            config,
            zones,
            machine,
            free,
        })
    }

    /// The configuration the plan was made for: [`Plan::build`] takes a
    /// [`Builder`] of it.
    pub fn config(&self) -> &MachineConfig {
        &self.config
    }

    /// The zones, node by node, low to high.
    pub fn zones(&self) -> impl Iterator<Item = &PlannedZone> + '_ {
        self.zones.iter().flatten()
    }

    /// The frames carved for the machine itself.
    pub fn machine_frames(&self) -> PfnRange {
        self.machine
    }

    /// The frames [`Plan::build`] hands over.
    pub fn free(&self) -> &FrameRanges<N> {
        &self.free
    }

    /// Frames carved for metadata and the machine (never handed over).
    pub fn carved_frames(&self) -> u64 {
        self.machine.len() + self.zones().map(|z| z.metadata.len()).sum::<u64>()
    }

    /// Writes the machine `machine` describes into its carved frames, adds
    /// every zone with its carved metadata and hands the free frames over.
    /// `virt` gives the virtual address at which the kernel maps a
    /// physical address. The builder's configuration must be the plan's
    /// ([`PlanError::OtherConfig`] otherwise: the zones were laid out for
    /// it). The plan carved whole frames for a machine without hooks:
    /// hooks that do not fit in what is left of the last one (a reference
    /// always does) get [`PlanError::NoRoom`].
    ///
    /// # Safety
    ///
    /// For the rest of the program (`'a`), every carved frame
    /// ([`Plan::machine_frames`] and each zone's `metadata`) must be mapped
    /// writable at `virt` of its address, contiguously within each range,
    /// and used by nothing else; the frames handed over are numbers to the
    /// allocator, which never touches them. Call it once per plan.
    pub unsafe fn build<'a, P: Platform>(
        &self,
        machine: Builder<P>,
        virt: impl Fn(PhysAddr) -> *mut u8,
    ) -> Result<&'a mut Machine<'a, P>, PlanError> {
        if *machine.config() != self.config {
            return Err(PlanError::OtherConfig);
        }
        let bytes = size_of::<Machine<'a, P>>();
        if bytes as u64 > self.machine.len() * PAGE_SIZE {
            return Err(PlanError::NoRoom { bytes });
        }
        let slot = virt(self.machine.start.addr()).cast::<MaybeUninit<Machine<'a, P>>>();
        if !slot.is_aligned() {
            return Err(PlanError::Misaligned);
        }
        // SAFETY: the caller guarantees the machine's frames are mapped
        // writable at `slot`, contiguously, for `'a`, and used by nothing
        // else; they hold `bytes` (checked above), and the pointer is
        // aligned (checked above).
        let machine = machine.build_in(unsafe { &mut *slot });
        for z in self.zones() {
            // SAFETY: as above, for the zone's carved metadata frames, which
            // hold at least `metadata_bytes` bytes.
            let meta = unsafe {
                core::slice::from_raw_parts_mut(
                    virt(z.metadata.start.addr()).cast::<MaybeUninit<u8>>(),
                    z.metadata_bytes,
                )
            };
            machine.add_zone(z.node, z.kind, z.span, meta)?;
        }
        for r in self.free.ranges() {
            machine.add_free_range(*r)?;
        }
        Ok(machine)
    }
}
