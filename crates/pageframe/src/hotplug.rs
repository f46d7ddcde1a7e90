//! Memory hot-add: zones that arrive at run time (Linux `add_memory` and
//! `online_pages`, with `memmap_on_memory`).
//!
//! A machine's zonelists and frame index are read without locks on every
//! allocation and free, so they never change after set-up. What may arrive
//! later is therefore declared at set-up, as firmware declares it (ACPI
//! SRAT marks memory ranges hot-pluggable): [`Machine::declare_hotplug`]
//! names a node, a zone kind and the range a zone of that kind may later
//! cover. The slot is listed in the zonelists from then on and skipped
//! while empty. [`Machine::hot_add_zone`] fills it at run time, through
//! `&self`, while other CPUs allocate: the zone is written first, then
//! published by one release store (see `node.rs`), so a CPU sees either no
//! zone or the whole zone. Its frames are holes until
//! [`Machine::add_free_range`] hands them over (onlines them);
//! [`Machine::offline_range`] takes them out again.
//!
//! The zone's metadata comes from the caller, or from the new memory
//! itself ([`crate::debug::Inspect::memmap_on_memory`] says which leading frames to map
//! for it and which frames to online), so a machine never sets metadata
//! aside for memory it does not have yet.
//!
//! Limits: one zone per declared (node, kind), and a zone's span does not
//! grow once added (Linux grows zone spans section by section; declare the
//! whole range and online its parts with [`Machine::add_free_range`] as
//! they arrive). Hot-added zones have no per-CPU caches
//! ([`Machine::enable_pcp`] sizes the zones present when it runs): their
//! allocations and frees go to the zone directly. Offlining migrates into
//! the range's own zone, so a zone holding data cannot be emptied whole.

use core::mem::MaybeUninit;

use pageframe_buddy::{PAGE_SIZE, PfnRange};

use crate::error::SetupError;
use crate::lock::Platform;
use crate::machine::Machine;
use crate::node_id::NodeId;
use crate::zone_core::Zone;
use crate::zone_kind::ZoneKind;

/// How a hot-added range holds its own metadata
/// ([`crate::debug::Inspect::memmap_on_memory`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MemmapOnMemory {
    /// The leading frames the kernel maps and passes to
    /// [`Machine::hot_add_zone`] as metadata (whole pageblocks; they stay
    /// holes of the zone).
    pub metadata: PfnRange,
    /// The rest, to hand over with [`Machine::add_free_range`].
    pub online: PfnRange,
}

impl MemmapOnMemory {
    /// Bytes of metadata the leading frames hold.
    pub fn metadata_bytes(&self) -> u64 {
        self.metadata.len() * PAGE_SIZE
    }
}

/// # Memory hotplug
///
/// Ranges taken offline and brought online, and zones that arrive at run
/// time.
impl<'a, P: Platform> Machine<'a, P> {
    /// Declares, at set-up, that node `node` may get a zone of `kind` over
    /// (part of) `range` at run time. Checked before anything changes: the
    /// node exists, has no zone of that kind and no range declared for it,
    /// and `range` is not empty and meets no zone or other declared range.
    /// Movable is the usual kind: memory hot-added as Movable can be taken
    /// offline again, since nothing unmovable lands in it.
    pub fn declare_hotplug(
        &mut self,
        node: NodeId,
        kind: ZoneKind,
        range: PfnRange,
    ) -> Result<(), SetupError> {
        if !self.topology().contains(node) {
            return Err(SetupError::NoSuchNode(node));
        }
        if range.is_empty() {
            return Err(pageframe_buddy::RangeError::Empty.into());
        }
        self.check_width(range)?;
        if self.hotplug[node.index()][kind.index()].is_some()
            || self.node(node).and_then(|n| n.zone(kind)).is_some()
        {
            return Err(SetupError::DuplicateZone(node, kind));
        }
        if self.overlaps(range) {
            return Err(SetupError::OverlappingSpan(node, kind));
        }
        self.hotplug[node.index()][kind.index()] = Some(range);
        self.build_zonelists();
        Ok(())
    }

    /// See [`crate::debug::Inspect::hotplug_range`].
    pub(crate) fn hotplug_range(&self, node: NodeId, kind: ZoneKind) -> Option<PfnRange> {
        self.topology()
            .contains(node)
            .then(|| self.hotplug[node.index()][kind.index()])
            .flatten()
    }

    /// Hot-adds `node`'s zone of `kind` over `span`, inside the range
    /// declared for it, while the machine is in use: every frame a hole
    /// until [`Machine::add_free_range`] onlines it. `meta` holds at least
    /// [`Machine::zone_metadata_bytes`] bytes (see
    /// [`crate::debug::Inspect::memmap_on_memory`] to carve it from `span` itself).
    /// Watermarks are recomputed. Checked before anything changes: the node
    /// exists, the span lies in the declared range, and the slot is empty
    /// ([`SetupError::DuplicateZone`] also when another hot-add of the same
    /// slot wins a race).
    ///
    /// ```
    /// # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// let boot = PfnRange::new(Pfn(0x1000), Pfn(0x20000));
    /// let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(boot)].into_boxed_slice());
    /// m.add_zone(NodeId::ZERO, ZoneKind::Normal, boot, meta).unwrap();
    /// m.add_free_range(boot).unwrap();
    /// // Firmware says up to 1 GiB more may arrive above the boot memory.
    /// let possible = PfnRange::new(Pfn(0x100000), Pfn(0x140000));
    /// m.declare_hotplug(NodeId::ZERO, ZoneKind::Movable, possible).unwrap();
    ///
    /// // At run time (`&self`), 256 MiB arrive: its first frames hold its
    /// // metadata (the kernel maps them; here, a buffer stands in).
    /// let dimm = PfnRange::new(Pfn(0x100000), Pfn(0x110000));
    /// let plan = m.inspect().memmap_on_memory(dimm).unwrap();
    /// let meta = Box::leak(vec![MaybeUninit::uninit(); plan.metadata_bytes() as usize].into_boxed_slice());
    /// let zone = m.hot_add_zone(NodeId::ZERO, ZoneKind::Movable, dimm, meta).unwrap();
    /// assert_eq!(zone.managed_pages(), 0);
    /// m.add_free_range(plan.online).unwrap();
    /// let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::new(9).unwrap()).unwrap();
    /// assert_eq!(a.zone(), ZoneKind::Movable);
    /// m.free(a).unwrap();
    /// ```
    pub fn hot_add_zone(
        &self,
        node: NodeId,
        kind: ZoneKind,
        span: PfnRange,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<&Zone<'a, P::Lock>, SetupError> {
        let n = self.node(node).ok_or(SetupError::NoSuchNode(node))?;
        let setup = self.setup();
        let declared = self.hotplug[node.index()][kind.index()]
            .ok_or(SetupError::NotHotpluggable(node, kind))?;
        if span.is_empty() {
            return Err(pageframe_buddy::RangeError::Empty.into());
        }
        if !declared.contains_range(&span) {
            return Err(SetupError::NotHotpluggable(node, kind));
        }
        if !n.slot(kind).is_empty() {
            return Err(SetupError::DuplicateZone(node, kind));
        }
        let zone = Zone::new(kind, node, span, self.mobility_config(), meta)?;
        zone.with_zone(|m| m.set_placement(self.fallback_placement()));
        let z = n
            .slot(kind)
            .fill_shared(zone)
            .ok_or(SetupError::DuplicateZone(node, kind))?;
        self.recompute_watermarks_locked(&setup);
        Ok(z)
    }

    /// See [`crate::debug::Inspect::memmap_on_memory`].
    pub(crate) fn memmap_on_memory(&self, span: PfnRange) -> Option<MemmapOnMemory> {
        let bytes = self.zone_metadata_bytes(span) as u64;
        if bytes == 0 {
            return None;
        }
        let pb = self.mobility_config().pageblock_order;
        let cut = span
            .start
            .checked_add(bytes.div_ceil(PAGE_SIZE))?
            .align_up(pb);
        if cut >= span.end {
            return None;
        }
        Some(MemmapOnMemory {
            metadata: PfnRange::new(span.start, cut),
            online: PfnRange::new(cut, span.end),
        })
    }
}
