//! The allocator: a machine of NUMA nodes (spec 01 §3.4-3.6, §9;
//! docs/rules/01-buddy.md). It owns every zone, builds each node's
//! zonelists, keeps the tunables, and is the one place allocations and
//! frees go through; the slow path ([`crate::slow_path`]), kcompactd
//! ([`crate::kcompactd`]) and the per-CPU handle ([`crate::CpuCache`]) are
//! methods on it.
//!
//! A machine is built in place (about 35 KiB; the large per-zone state
//! lives in the zones' metadata), so a kernel with a small boot stack can
//! have one: [`crate::boot::Builder`] writes it into memory the caller
//! owns (a static, or memory carved from RAM), field by field. What a
//! kernel calls on every path is here; the knobs are on
//! [`crate::tune::Tunables`] and the reading and debugging calls on
//! [`crate::debug::Inspect`].

use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU32,
    Ordering::{Acquire, Relaxed},
};

use pageframe_types::atomic::AtomicU64;

use pageframe_buddy::{FreeError, Order, PAGE_SHIFT, PAGE_SIZE, Pfn, PfnRange, ValidateError};
use pageframe_compact::{DEFAULT_EXTFRAG_THRESHOLD, DEFAULT_PROACTIVENESS, Deferral};
use pageframe_mobility::{
    DEFAULT_WATERMARK_SCALE_FACTOR, LOWMEM_RESERVE_RATIO, MobilityConfig, Placement, Watermarks,
    default_min_free_kbytes,
};

use crate::block::{Block, Call, MachineId, RawError, Refused};
use crate::cache::Traced;
use crate::debug::owner_record::{OwnerSeq, Owners};
use crate::debug::vmstat::{MachineCounters, Refilled, ZoneCounters};
use crate::debug::{Caller, Event, Hooks, NoHooks};
use crate::error::{AllocError, PinError, SetupError};
use crate::gfp::{AllocFlags, Gfp};
use crate::lock::{Mutex, Platform, RawMutex, SpinLock};
use crate::node::Node;
use crate::node_id::{MAX_NUMNODES, NodeId};
use crate::numa::Topology;
use crate::numa_stats::NodeStats;
use crate::thp::ThpPolicy;
use crate::zone_core::Zone;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind, ZoneRef};
use crate::zonelist::{NodeMask, NodeOrder, Zonelist, ZonelistKind, build_node_orders};
use pageframe_pcp::CpuId;

/// What [`Machine::alloc_fast`]'s out-of-line body returns: the block's
/// head word, or why there is none. Two scalars come back in two
/// registers; a `Result` of a block (or of a word and an error) comes back
/// through memory, and a caller that then reads the whole block at once
/// right after the callee's separate stores stalls (the stores cannot be
/// forwarded to the wider load).
#[derive(Clone, Copy)]
struct Headed {
    head: u64,
    error: Option<AllocError>,
}

/// How a machine is built: its nodes, how its zones group memory, and how
/// far physical addresses reach.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MachineConfig {
    /// The nodes and their distances.
    pub topology: Topology,
    /// Every zone's mobility choices (maximum order, pageblock order,
    /// grouping).
    pub mobility: MobilityConfig,
    /// Bits of a physical address: memory at or above `2^phys_bits` bytes
    /// is refused ([`SetupError::AddressWidth`]), so every frame handed out
    /// can be mapped. Default: the target's architectural limit
    /// ([`MachineConfig::TARGET_PHYS_BITS`]).
    pub phys_bits: u8,
}

impl MachineConfig {
    /// The largest physical address width of the target architecture: 52
    /// bits on x86-64 and AArch64, 56 on RISC-V 64 (Sv57), 34 on RISC-V 32
    /// (Sv32), 64 elsewhere.
    pub const TARGET_PHYS_BITS: u8 = if cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
        52
    } else if cfg!(target_arch = "riscv64") {
        56
    } else if cfg!(target_arch = "riscv32") {
        34
    } else {
        64
    };

    /// One node, Linux's mobility defaults, the target's address width.
    pub const SINGLE_NODE: MachineConfig = MachineConfig::new(Topology::SINGLE);

    /// `topology` with Linux's mobility defaults and the target's address
    /// width.
    pub const fn new(topology: Topology) -> MachineConfig {
        MachineConfig {
            topology,
            mobility: MobilityConfig::DEFAULT,
            phys_bits: Self::TARGET_PHYS_BITS,
        }
    }

    /// The first frame number beyond the address width.
    pub const fn pfn_limit(&self) -> Pfn {
        let bits = if self.phys_bits > 64 {
            64
        } else {
            self.phys_bits
        };
        if bits <= PAGE_SHIFT as u8 {
            Pfn(0)
        } else {
            Pfn(1 << (bits - PAGE_SHIFT as u8))
        }
    }
}

/// The run-time tunables' values (atomics: read on allocation paths,
/// written rarely); [`crate::tune::Tunables`] sets and reads them.
pub(crate) struct Knobs {
    /// `vm.min_free_kbytes` as set, read once `min_free_kbytes_set` is.
    pub(crate) min_free_kbytes: AtomicU64,
    /// Whether `vm.min_free_kbytes` was set (else computed from memory).
    pub(crate) min_free_kbytes_set: AtomicBool,
    pub(crate) watermark_scale_factor: AtomicU32,
    pub(crate) extfrag_threshold: AtomicU32,
    pub(crate) proactiveness: AtomicU8,
    pub(crate) thp: AtomicU8,
    pub(crate) defrag_mode: AtomicBool,
    /// `Placement` as its index in `Placement::ALL`.
    pub(crate) placement: AtomicU8,
}

/// The allocator: several nodes, each with up to one zone of each kind.
/// Build it with [`crate::boot::Builder`], add zones with
/// [`Machine::add_zone`] and memory with [`Machine::add_free_range`];
/// afterwards every method takes `&self` and the machine can be shared
/// across CPUs. `P` is what the kernel supplies ([`Platform`]): the lock
/// every zone takes ([`crate::lock`]) and the hooks it reports to
/// ([`crate::debug`]); by default a spin lock and no hooks.
///
/// See the crate docs for which allocation path serves which need.
pub struct Machine<'a, P: Platform = (SpinLock, NoHooks)> {
    /// Which machine its blocks belong to.
    pub(crate) id: MachineId,
    /// The first frame beyond the physical address width.
    pfn_limit: Pfn,
    topology: Topology,
    mobility: MobilityConfig,
    nodes: [Node<'a, P::Lock>; MAX_NUMNODES],
    orders: [NodeOrder; MAX_NUMNODES],
    /// `[node][Fallback, NoFallback]`.
    zonelists: [[Zonelist; 2]; MAX_NUMNODES],
    /// `[node][Fallback, NoFallback][highest]`: the first zone a request
    /// would try (the fast path's zone, found without walking the list).
    first: [[[Option<ZoneRef>; NR_ZONE_KINDS]; 2]; MAX_NUMNODES],
    /// Every zone's span, for finding the zone of a frame.
    index: ZoneIndex,
    /// Per node: its DMA32 zone has memory, so Normal requests first try
    /// without fragmenting fallbacks (spec 01 §9).
    nofrag: [AtomicBool; MAX_NUMNODES],
    /// The node-aware policy's machine-wide back-off after a request failed
    /// on every node.
    pub(crate) global_defer: Deferral,
    pub(crate) knobs: Knobs,
    /// CPUs with per-CPU caches (0: none).
    pub(crate) cpus: u32,
    /// `[node][kind]`: the range a zone may be hot-added over at run time
    /// (declared at set-up, see [`crate::hotplug`]).
    pub(crate) hotplug: [[Option<PfnRange>; NR_ZONE_KINDS]; MAX_NUMNODES],
    /// CMA areas, in the order they were added.
    pub(crate) cma: [Option<crate::cma_area::CmaArea>; crate::cma_area::MAX_CMA_AREAS],
    /// The kernel's hooks ([`crate::debug`]).
    pub(crate) hooks: P::Hooks,
    /// Fault injection ([`crate::debug::fail`]).
    #[cfg(feature = "fail-alloc")]
    fail: crate::debug::fail::FailPageAlloc,
    /// Counters of rare events (feature `vmstat`; empty without).
    pub(crate) vm: MachineCounters,
    /// The next owner record's sequence number (feature `page-owner`;
    /// empty without).
    pub(crate) owner_seq: OwnerSeq,
    /// Blocks found written while free ([`crate::debug::Poisoning`]).
    pub(crate) uaf_reports: AtomicU64,
    /// Held by every call that changes which memory the machine manages
    /// (hand-over, hot-add, offline) or the watermarks derived from it:
    /// each checks and commits under it, so a call that another CPU's beats
    /// is refused with nothing changed, and watermarks are computed from
    /// one state at a time. Taken before any zone lock.
    setup: Mutex<P::Lock, ()>,
}

/// Proof that the caller holds the machine's set-up lock.
pub(crate) struct SetupGuard<'g, R: RawMutex> {
    _held: lock_api::MutexGuard<'g, R, ()>,
}

/// # Set-up
///
/// An empty machine, its zones and the memory they manage. Set-up takes
/// `&mut self`; afterwards the machine is shared.
impl<'a, P: Platform> Machine<'a, P> {
    /// Writes an empty machine (every node of `config.topology`, no zones)
    /// into `slot` and returns it, field by field: nothing larger than a
    /// few hundred bytes is built on the stack, so this works on a 16 KiB
    /// boot stack. [`crate::boot::Builder`] is the way in.
    pub(crate) fn write_in(
        slot: &mut MaybeUninit<Self>,
        config: MachineConfig,
        hooks: P::Hooks,
    ) -> &mut Self {
        let p = slot.as_mut_ptr();
        // SAFETY: `p` points to `slot`, exclusively borrowed, writable and
        // aligned for a `Machine`. Every field is written exactly once
        // through a raw place (no reference to uninitialised memory is
        // made); nodes are written by `Node::init_at`, which leaves only
        // zone payloads uninitialised, guarded by their slot states.
        // After the writes every field is initialised, so `assume_init_mut`
        // is sound.
        unsafe {
            addr_of_mut!((*p).id).write(MachineId::next());
            addr_of_mut!((*p).pfn_limit).write(config.pfn_limit());
            addr_of_mut!((*p).topology).write(config.topology);
            addr_of_mut!((*p).mobility).write(config.mobility);
            for i in 0..MAX_NUMNODES {
                let id = NodeId::new(i).unwrap_or(NodeId::ZERO);
                Node::init_at(addr_of_mut!((*p).nodes[i]), id);
            }
            addr_of_mut!((*p).orders).write([NodeOrder::EMPTY; MAX_NUMNODES]);
            addr_of_mut!((*p).zonelists).write([[Zonelist::EMPTY; 2]; MAX_NUMNODES]);
            addr_of_mut!((*p).first).write([[[None; NR_ZONE_KINDS]; 2]; MAX_NUMNODES]);
            addr_of_mut!((*p).index).write(ZoneIndex::EMPTY);
            addr_of_mut!((*p).nofrag).write([const { AtomicBool::new(false) }; MAX_NUMNODES]);
            addr_of_mut!((*p).global_defer).write(Deferral::new());
            addr_of_mut!((*p).knobs).write(Knobs {
                min_free_kbytes: AtomicU64::new(0),
                min_free_kbytes_set: AtomicBool::new(false),
                watermark_scale_factor: AtomicU32::new(DEFAULT_WATERMARK_SCALE_FACTOR),
                extfrag_threshold: AtomicU32::new(DEFAULT_EXTFRAG_THRESHOLD),
                proactiveness: AtomicU8::new(DEFAULT_PROACTIVENESS),
                thp: AtomicU8::new(ThpPolicy::default().encode()),
                defrag_mode: AtomicBool::new(true),
                placement: AtomicU8::new(placement_index(Placement::Superpageblock)),
            });
            addr_of_mut!((*p).cpus).write(0);
            addr_of_mut!((*p).hotplug).write([[None; NR_ZONE_KINDS]; MAX_NUMNODES]);
            addr_of_mut!((*p).cma).write([const { None }; crate::cma_area::MAX_CMA_AREAS]);
            addr_of_mut!((*p).hooks).write(hooks);
            #[cfg(feature = "fail-alloc")]
            addr_of_mut!((*p).fail).write(crate::debug::fail::FailPageAlloc::new());
            addr_of_mut!((*p).vm).write(MachineCounters::new());
            addr_of_mut!((*p).owner_seq).write(OwnerSeq::new());
            addr_of_mut!((*p).uaf_reports).write(AtomicU64::new(0));
            addr_of_mut!((*p).setup).write(Mutex::new(()));
            slot.assume_init_mut()
        }
    }

    /// Metadata bytes a zone over `span` of this machine needs (see
    /// [`Zone::metadata_bytes`]); 0 for a span no zone can have.
    pub fn zone_metadata_bytes(&self, span: PfnRange) -> usize {
        Zone::<P::Lock>::metadata_bytes(span, self.mobility)
    }

    /// Adds the zone `kind` to node `node` over `span`, every frame a hole
    /// until handed over with [`Machine::add_free_range`]. `meta` holds at
    /// least [`Machine::zone_metadata_bytes`] bytes, typically carved from
    /// the RAM being managed (and then left out of the free ranges).
    /// Checked before anything changes: the node exists, has no zone of
    /// that kind, and no zone of any node overlaps `span`.
    pub fn add_zone(
        &mut self,
        node: NodeId,
        kind: ZoneKind,
        span: PfnRange,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<&Zone<'a, P::Lock>, SetupError> {
        if !self.topology.contains(node) {
            return Err(SetupError::NoSuchNode(node));
        }
        self.check_width(span)?;
        if self.nodes[node.index()].zone(kind).is_some()
            || self.hotplug[node.index()][kind.index()].is_some()
        {
            return Err(SetupError::DuplicateZone(node, kind));
        }
        if self.overlaps(span) {
            return Err(SetupError::OverlappingSpan(node, kind));
        }
        let mobility = self.mobility;
        let placement = self.fallback_placement();
        self.nodes[node.index()]
            .slot_mut(kind)
            .fill_with(|slot| Zone::write_in(slot, kind, node, span, mobility, meta))?;
        if let Some(z) = self.nodes[node.index()].zone(kind) {
            z.with_zone(|m| m.set_placement(placement));
        }
        self.build_zonelists();
        self.recompute_watermarks();
        self.nodes[node.index()]
            .zone(kind)
            .ok_or(SetupError::DuplicateZone(node, kind))
    }

    /// Hands usable RAM over, split across the zones whose spans it meets.
    /// Every frame must fall in some zone's span and never have been handed
    /// over: checked before any zone changes (all or nothing, also when
    /// another CPU hands memory over at the same time). Watermarks are
    /// recomputed. The frames are numbers to the allocator, which never
    /// reads them, and writes them only when poisoning asks, once they are
    /// its own.
    pub fn add_free_range(&self, range: PfnRange) -> Result<(), SetupError> {
        let setup = self.setup();
        self.add_free_range_locked(&setup, range)
    }

    /// [`Machine::add_free_range`] under the set-up lock.
    pub(crate) fn add_free_range_locked(
        &self,
        setup: &SetupGuard<'_, P::Lock>,
        range: PfnRange,
    ) -> Result<(), SetupError> {
        if range.is_empty() {
            return Err(pageframe_buddy::RangeError::Empty.into());
        }
        self.check_width(range)?;
        let covered: u64 = self
            .all_zones()
            .map(|z| z.span().intersect(&range).len())
            .sum();
        if covered != range.len() {
            return Err(pageframe_buddy::RangeError::OutOfSpan.into());
        }
        // Every zone's part is checked, and then taken, under the set-up
        // lock: no other hand-over can take a frame in between, so every
        // zone takes its part, and the poisoning writes only frames that
        // are about to be the allocator's.
        for z in self.all_zones() {
            let part = z.span().intersect(&range);
            if !part.is_empty() {
                z.check_add_range(part)?;
            }
        }
        self.poison_free(range);
        for z in self.all_zones() {
            let part = z.span().intersect(&range);
            if !part.is_empty() {
                let r = z.add_free_range(part);
                debug_assert!(r.is_ok(), "checked above under the set-up lock: {r:?}");
                r?;
            }
        }
        self.recompute_watermarks_locked(setup);
        Ok(())
    }

    /// Takes the set-up lock (see the field).
    pub(crate) fn setup(&self) -> SetupGuard<'_, P::Lock> {
        SetupGuard {
            _held: self.setup.lock(),
        }
    }

    /// Whether `span` lies below the physical address width.
    pub(crate) fn check_width(&self, span: PfnRange) -> Result<(), SetupError> {
        if span.end > self.pfn_limit {
            return Err(SetupError::AddressWidth {
                pfn: span.start.max(self.pfn_limit),
            });
        }
        Ok(())
    }

    /// Whether `span` meets a zone's span or a hotpluggable range.
    pub(crate) fn overlaps(&self, span: PfnRange) -> bool {
        self.all_zones()
            .map(Zone::span)
            .chain(self.hotplug.iter().flatten().flatten().copied())
            .any(|s| !s.intersect(&span).is_empty())
    }

    /// Rebuilds the node orders and zonelists from the zones present and
    /// the slots declared hotpluggable (listed before their zone arrives,
    /// so that a hot-add never changes them: readers skip an empty slot).
    pub(crate) fn build_zonelists(&mut self) {
        let populated = |node: NodeId, kind: ZoneKind| {
            self.nodes[node.index()].zone(kind).is_some()
                || self.hotplug[node.index()][kind.index()].is_some()
        };
        let memory = self
            .topology
            .nodes()
            .filter(|&n| ZoneKind::ALL.into_iter().any(|k| populated(n, k)))
            .fold(NodeMask::EMPTY, NodeMask::with);
        self.orders = build_node_orders(&self.topology, memory);
        for n in self.topology.nodes() {
            self.zonelists[n.index()] = [
                Zonelist::build(self.orders[n.index()].as_slice(), populated),
                Zonelist::build(&[n], populated),
            ];
            for (l, list) in self.zonelists[n.index()].iter().enumerate() {
                for k in ZoneKind::ALL {
                    self.first[n.index()][l][k.index()] = list.eligible(k).next();
                }
            }
        }
        let mut index = ZoneIndex::EMPTY;
        for z in self.all_zones() {
            index.push(z.span(), z.zone_ref());
        }
        for node in self.topology.nodes() {
            for kind in ZoneKind::ALL {
                if let Some(span) = self.hotplug[node.index()][kind.index()] {
                    index.push(span, ZoneRef { node, kind });
                }
            }
        }
        self.index = index;
    }
}

/// # Nodes and zones
///
/// The topology, the nodes and zones, and the order in which a request
/// tries them.
impl<'a, P: Platform> Machine<'a, P> {
    /// See [`crate::debug::Inspect::topology`].
    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    /// See [`crate::debug::Inspect::mobility_config`].
    pub(crate) fn mobility_config(&self) -> MobilityConfig {
        self.mobility
    }

    /// See [`crate::debug::Inspect::node`].
    pub(crate) fn node(&self, id: NodeId) -> Option<&Node<'a, P::Lock>> {
        self.topology.contains(id).then(|| &self.nodes[id.index()])
    }

    /// See [`crate::debug::Inspect::nodes`].
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Node<'a, P::Lock>> + '_ {
        self.topology.nodes().map(|n| &self.nodes[n.index()])
    }

    pub(crate) fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node<'a, P::Lock>> {
        let n = self.topology.nr_nodes();
        self.nodes.iter_mut().take(n)
    }

    /// See [`crate::debug::Inspect::all_zones`].
    pub(crate) fn all_zones(&self) -> impl Iterator<Item = &Zone<'a, P::Lock>> + '_ {
        self.nodes().flat_map(|n| n.zones())
    }

    /// See [`crate::debug::Inspect::zone`].
    pub(crate) fn zone(&self, r: ZoneRef) -> Option<&Zone<'a, P::Lock>> {
        self.node(r.node)?.zone(r.kind)
    }

    /// See [`crate::debug::Inspect::zone_of`].
    #[inline]
    pub(crate) fn zone_of(&self, pfn: Pfn) -> Option<&Zone<'a, P::Lock>> {
        // A hot-added zone may span less than its declared range.
        self.zone(self.index.find(pfn)?)
            .filter(|z| z.span().contains(pfn))
    }

    /// Which zone holds `pfn`.
    #[inline]
    pub(crate) fn zone_ref_of(&self, pfn: Pfn) -> Option<ZoneRef> {
        self.index.find(pfn)
    }

    /// The first zone a request from `local` with `gfp` tries, and its
    /// highest usable zone; `None` for an invalid request or one no zone
    /// can serve.
    #[inline]
    pub(crate) fn preferred(&self, local: NodeId, gfp: Gfp) -> Option<(ZoneRef, ZoneKind)> {
        let highest = gfp.request_zone()?;
        let r = self.first_zone(local, zonelist_of(gfp), highest)?;
        Some((r, highest))
    }

    /// The first zone of `local`'s zonelist `list` (0: every node, 1:
    /// `THISNODE`) for requests whose highest zone is `highest`.
    #[inline]
    pub(crate) fn first_zone(
        &self,
        local: NodeId,
        list: usize,
        highest: ZoneKind,
    ) -> Option<ZoneRef> {
        (*self.first.get(local.index())?.get(list)?)[highest.index()]
    }

    /// See [`crate::debug::Inspect::node_of`].
    pub(crate) fn node_of(&self, pfn: Pfn) -> Option<NodeId> {
        self.zone_of(pfn).map(Zone::node)
    }

    /// See [`crate::debug::Inspect::node_order`].
    pub(crate) fn node_order(&self, id: NodeId) -> &[NodeId] {
        match self.topology.contains(id) {
            true => self.orders[id.index()].as_slice(),
            false => &[],
        }
    }

    /// See [`crate::debug::Inspect::zonelist`].
    pub(crate) fn zonelist(&self, id: NodeId, kind: ZonelistKind) -> &Zonelist {
        const EMPTY: Zonelist = Zonelist::EMPTY;
        if !self.topology.contains(id) {
            return &EMPTY;
        }
        let i = match kind {
            ZonelistKind::Fallback => 0,
            ZonelistKind::NoFallback => 1,
        };
        &self.zonelists[id.index()][i]
    }

    /// See [`crate::debug::Inspect::zonelist_for`].
    pub(crate) fn zonelist_for(&self, local: NodeId, gfp: Gfp) -> &Zonelist {
        let kind = if gfp.contains(Gfp::THISNODE) {
            ZonelistKind::NoFallback
        } else {
            ZonelistKind::Fallback
        };
        self.zonelist(local, kind)
    }

    // ---- tunables ----
}

/// # The tunables in force
///
/// What the allocation paths read of the knobs [`crate::tune::Tunables`]
/// sets, and the watermarks derived from them.
impl<'a, P: Platform> Machine<'a, P> {
    /// See [`crate::tune::Tunables::min_free_kbytes`].
    pub(crate) fn min_free_kbytes(&self) -> u64 {
        if self.knobs.min_free_kbytes_set.load(Acquire) {
            self.knobs.min_free_kbytes.load(Relaxed)
        } else {
            default_min_free_kbytes(self.lowmem_pages().saturating_mul(PAGE_SIZE / 1024))
        }
    }

    /// `vm.compaction_proactiveness`.
    #[inline]
    pub(crate) fn proactiveness(&self) -> u8 {
        self.knobs.proactiveness.load(Relaxed)
    }

    /// `vm.extfrag_threshold`.
    #[inline]
    pub(crate) fn extfrag_threshold(&self) -> u32 {
        self.knobs.extfrag_threshold.load(Relaxed)
    }

    /// The huge-page policy in force.
    #[inline]
    pub(crate) fn thp_policy(&self) -> ThpPolicy {
        ThpPolicy::decode(self.knobs.thp.load(Relaxed))
    }

    /// `vm.defrag_mode`.
    #[inline]
    pub(crate) fn defrag_mode(&self) -> bool {
        self.knobs.defrag_mode.load(Relaxed)
    }

    /// Where fallbacks for memory that cannot move go.
    #[inline]
    pub(crate) fn fallback_placement(&self) -> Placement {
        let i = usize::from(self.knobs.placement.load(Relaxed));
        Placement::ALL.get(i).copied().unwrap_or_default()
    }

    /// The slow path's flags (`gfp_to_alloc_flags`), with NOFRAGMENT under
    /// `defrag_mode`.
    pub(crate) fn slow_flags(&self, gfp: Gfp, order: Order) -> AllocFlags {
        let f = AllocFlags::slow(gfp, order);
        if self.defrag_mode() && !f.contains(AllocFlags::NO_WATERMARKS) {
            f | AllocFlags::NOFRAGMENT
        } else {
            f
        }
    }

    fn lowmem_pages(&self) -> u64 {
        self.all_zones()
            .filter(|z| z.kind() != ZoneKind::Movable)
            .map(|z| z.managed_pages())
            .sum()
    }

    /// Recomputes every zone's watermarks and lowmem reserves
    /// (`__setup_per_zone_wmarks`, `setup_per_zone_lowmem_reserve`, spec 01
    /// §7.1, §7.3): the min reserve is shared between all zones of the
    /// machine in proportion to their size; Movable zones keep a small
    /// fixed min. Saturating arithmetic throughout.
    pub(crate) fn recompute_watermarks(&self) {
        let setup = self.setup();
        self.recompute_watermarks_locked(&setup);
    }

    /// [`Machine::recompute_watermarks`] under the set-up lock, so that the
    /// managed counts it reads do not change while it runs.
    pub(crate) fn recompute_watermarks_locked(&self, _setup: &SetupGuard<'_, P::Lock>) {
        let pages_min = self.min_free_kbytes() / (PAGE_SIZE / 1024);
        let lowmem = self.lowmem_pages().max(1);
        let factor = self.knobs.watermark_scale_factor.load(Relaxed);
        for node in self.nodes() {
            let dma32 = node
                .zone(ZoneKind::Dma32)
                .is_some_and(|z| z.managed_pages() > 0);
            self.nofrag[node.id().index()].store(dma32, Relaxed);
            let managed: [u64; NR_ZONE_KINDS] = core::array::from_fn(|i| {
                node.zone(ZoneKind::ALL[i]).map_or(0, |z| z.managed_pages())
            });
            for z in node.zones() {
                let i = z.kind().index();
                let m = managed[i];
                let share = mul_div(pages_min, m, lowmem);
                let mut w = Watermarks::compute(share, m, factor);
                if z.kind() == ZoneKind::Movable {
                    // spec 01 §7.1: movable zones keep a small fixed min.
                    let min = (m / 1024).clamp(32, 128);
                    w = Watermarks::with_gap(min, w.low - w.min);
                }
                let mut reserve = [0u64; NR_ZONE_KINDS];
                for (j, r) in reserve.iter_mut().enumerate().skip(i + 1) {
                    let upper: u64 = managed[i + 1..=j].iter().sum();
                    let ratio = LOWMEM_RESERVE_RATIO[i];
                    *r = if ratio == 0 || m == 0 {
                        0
                    } else {
                        upper / ratio
                    };
                }
                z.set_watermarks(w, reserve);
                z.fit_pool(m);
            }
        }
    }
}

/// # Allocate and free
///
/// Blocks without a CPU handle (the fast path is [`crate::CpuCache`]),
/// given back by the [`Block`] that owns them.
impl<'a, P: Platform> Machine<'a, P> {
    /// Allocates `2^order` frames for a task on `node` from the free lists,
    /// never compacting or reclaiming: the zonelist `gfp` selects (spec 01
    /// §3.6), first against the low watermarks (without fragmenting
    /// fallbacks while the local DMA32 zone backs Normal, spec 02 §5.5),
    /// then against the min watermarks with the reserve access `gfp` grants
    /// (spec 01 §8.3). `__GFP_THISNODE` never leaves `node`; a memoryless
    /// node allocates from the nearest nodes with memory.
    #[track_caller]
    pub fn alloc(&self, node: NodeId, gfp: Gfp, order: Order) -> Result<Block, AllocError> {
        self.traced(node, gfp, order, None, Caller::here(), || {
            self.alloc_fast(node, gfp, order, None)
        })
    }

    /// Runs the allocation `f`, reporting its start and its outcome to the
    /// hooks (nothing with [`NoHooks`]).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn traced(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        cpu: Option<CpuId>,
        caller: Caller,
        f: impl FnOnce() -> Result<Block, AllocError>,
    ) -> Result<Block, AllocError> {
        if P::Hooks::TRACE {
            self.hooks.event(&Event::AllocStart { order, cpu });
        }
        let r = self.accounted(gfp, order, cpu, caller, true, f);
        if P::Hooks::TRACE {
            self.hooks.event(&match &r {
                Ok(b) => Event::Alloc {
                    pfn: b.pfn(),
                    order,
                    gfp,
                    cpu,
                },
                Err(e) => Event::AllocFail {
                    node,
                    order,
                    gfp,
                    error: *e,
                    cpu,
                },
            });
        }
        r
    }

    /// The allocation `f` with what every allocation gets besides trace
    /// events: fault injection, poisoning (its use-after-free report an
    /// event only with `events`), the owner record and the counters.
    #[inline(always)]
    pub(crate) fn accounted(
        &self,
        gfp: Gfp,
        order: Order,
        cpu: Option<CpuId>,
        caller: Caller,
        events: bool,
        f: impl FnOnce() -> Result<Block, AllocError>,
    ) -> Result<Block, AllocError> {
        let r = if self.injects_failure(gfp, order) {
            Err(AllocError::OutOfMemory)
        } else {
            f()
        };
        self.account_alloc(&r, order, cpu, caller, events);
        r
    }

    /// What [`Machine::accounted`] gives an allocation's outcome: the
    /// poisoning check, the owner record and the counters.
    #[inline(always)]
    fn account_alloc(
        &self,
        r: &Result<Block, AllocError>,
        order: Order,
        cpu: Option<CpuId>,
        caller: Caller,
        events: bool,
    ) {
        if let Ok(b) = r {
            self.poison_alloc(b, events);
        }
        // Without either tool the records and counters are empty, and the
        // zone is not even looked up.
        if Owners::KEPT || ZoneCounters::KEPT {
            match r {
                Ok(b) => {
                    if let Some(z) = self.zone(b.zone_ref()) {
                        z.owners.record(b.pfn(), order, caller, &self.owner_seq);
                        z.vm(cpu).alloc(order);
                    }
                }
                Err(_) => self.vm.alloc_failed(),
            }
        }
    }

    /// Whether fault injection fails a request of `order` now (never
    /// without the `fail-alloc` feature).
    #[inline(always)]
    pub(crate) fn injects_failure(&self, gfp: Gfp, order: Order) -> bool {
        #[cfg(feature = "fail-alloc")]
        return self.fail.should_fail(gfp, order);
        #[cfg(not(feature = "fail-alloc"))]
        {
            let _ = (gfp, order);
            false
        }
    }

    /// Reports each frame of a run a cache handed out as order-0
    /// allocations ([`crate::CpuCache::alloc_run_raw`]) to the hooks as an
    /// allocation of its own: trace events, poisoning, owner records and
    /// counters, as [`Machine::traced`] would for each.
    pub(crate) fn run_allocated(
        &self,
        gfp: Gfp,
        cpu: Option<CpuId>,
        caller: Caller,
        blocks: impl Iterator<Item = Block>,
    ) {
        let order = Order::ZERO;
        for b in blocks {
            if P::Hooks::TRACE {
                self.hooks.event(&Event::AllocStart { order, cpu });
                self.hooks.event(&Event::Alloc {
                    pfn: b.pfn(),
                    order,
                    gfp,
                    cpu,
                });
            }
            let r = Ok(b);
            self.account_alloc(&r, order, cpu, caller, true);
            if let Ok(b) = r {
                // Held as a number by the caller from now on.
                let _ = b.into_raw();
            }
        }
    }

    /// Counts a free of `zone` and reports it to the hooks.
    #[inline(always)]
    pub(crate) fn freed(
        &self,
        zone: &Zone<'a, P::Lock>,
        pfn: Pfn,
        order: Order,
        cpu: Option<CpuId>,
    ) {
        zone.vm(cpu).free(order);
        if P::Hooks::TRACE {
            self.hooks.event(&Event::Free { pfn, order, cpu });
        }
    }

    /// Counts frames of `zone` freed other than as one block (a segment,
    /// part of an allocation) and reports them to the hooks.
    pub(crate) fn freed_range(&self, zone: &Zone<'a, P::Lock>, range: PfnRange) {
        zone.vm(None).free_pages(range.len());
        if P::Hooks::TRACE {
            self.hooks.event(&Event::FreeRange { range });
        }
    }

    /// The hooks as a CPU's caches report to them.
    #[inline(always)]
    pub(crate) fn traced_cpu(&self, cpu: Option<CpuId>) -> Traced<'_, P::Hooks> {
        Traced {
            hooks: &self.hooks,
            cpu,
            refilled: Refilled::new(),
        }
    }

    /// See [`crate::debug::Inspect::hooks`].
    pub(crate) fn hooks(&self) -> &P::Hooks {
        &self.hooks
    }

    /// See [`crate::debug::Inspect::fail_page_alloc`].
    #[cfg(feature = "fail-alloc")]
    pub(crate) fn fail_page_alloc(&self) -> &crate::debug::fail::FailPageAlloc {
        &self.fail
    }

    /// [`Machine::alloc`], through this CPU's caches when `cpu` has them.
    #[inline(always)]
    pub(crate) fn alloc_fast(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        cpu: Option<&mut crate::cache::Locals<'_, 'a, P::Lock>>,
    ) -> Result<Block, AllocError> {
        match self.alloc_head(node, gfp, order, cpu) {
            Headed { error: None, head } => Ok(Block::from_head(head, self.id)),
            Headed { error: Some(e), .. } => Err(e),
        }
    }

    /// [`Machine::alloc_fast`]'s body: the allocated block's head word. Out
    /// of line: an allocation is one call at each site, not a copy of the
    /// zone's path.
    #[inline(never)]
    fn alloc_head(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        cpu: Option<&mut crate::cache::Locals<'_, 'a, P::Lock>>,
    ) -> Headed {
        match self.alloc_body(node, gfp, order, cpu) {
            Ok(head) => Headed { head, error: None },
            Err(e) => Headed {
                head: 0,
                error: Some(e),
            },
        }
    }

    /// [`Machine::alloc_head`] as a `Result`, so that its steps can use `?`.
    #[inline(always)]
    fn alloc_body(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        mut cpu: Option<&mut crate::cache::Locals<'_, 'a, P::Lock>>,
    ) -> Result<u64, AllocError> {
        // The common case first: the first zone of the zonelist serves at
        // the low watermark. (A cache hit was already tried by the caller.)
        if cpu.is_none()
            && let Some((r, highest)) = self.preferred(node, gfp)
            && let Some(z) = self.zone(r)
            && let Ok(pfn) = z.try_alloc(
                &self.hooks,
                gfp,
                order,
                self.fast_flags_at(node, gfp, r),
                highest,
            )
        {
            return Ok(Block::new(self.id, r, pfn, order).head());
        }
        let (list, highest) = self.prepare(node, gfp)?;
        let fast = self.fast_flags(node, gfp);
        let r = match self.freelist(
            node,
            list.eligible(highest),
            gfp,
            order,
            fast,
            cpu.as_deref_mut(),
        ) {
            Err(AllocError::OutOfMemory) => {
                let slow = self.slow_flags(gfp, order);
                match self.freelist(node, list.eligible(highest), gfp, order, slow, cpu) {
                    // defrag_mode kept NOFRAGMENT so far; with no reclaim or
                    // compaction to wait for, its last resort comes now.
                    Err(AllocError::OutOfMemory) if slow.contains(AllocFlags::NOFRAGMENT) => {
                        let last = slow - AllocFlags::NOFRAGMENT;
                        self.freelist(node, list.eligible(highest), gfp, order, last, None)
                    }
                    r => r,
                }
            }
            r => r,
        };
        r.map(Block::head)
    }

    /// Checks the request and picks its zonelist and highest zone.
    pub(crate) fn prepare(
        &self,
        local: NodeId,
        gfp: Gfp,
    ) -> Result<(&Zonelist, ZoneKind), AllocError> {
        let highest = gfp.request_zone().ok_or(AllocError::InvalidGfp)?;
        if !self.topology.contains(local) {
            return Err(AllocError::NoSuchNode);
        }
        let list = self.zonelist_for(local, gfp);
        if list.eligible(highest).next().is_none() {
            return Err(AllocError::NoEligibleZone);
        }
        Ok((list, highest))
    }

    /// The fast path's flags: the low watermark, and NOFRAGMENT when the
    /// preferred zone is the local Normal zone with a populated DMA32 zone
    /// below it (`alloc_flags_nofragment`, spec 01 §9).
    pub(crate) fn fast_flags(&self, local: NodeId, gfp: Gfp) -> AllocFlags {
        match self.preferred(local, gfp) {
            Some((r, _)) => self.fast_flags_at(local, gfp, r),
            None => AllocFlags::fast(gfp),
        }
    }

    /// [`Machine::fast_flags`] when the preferred zone `r` is known.
    #[inline]
    pub(crate) fn fast_flags_at(&self, local: NodeId, gfp: Gfp, r: ZoneRef) -> AllocFlags {
        let fast = AllocFlags::fast(gfp);
        let dma32 = self
            .nofrag
            .get(local.index())
            .is_some_and(|b| b.load(Relaxed));
        if self.defrag_mode() || (r.node == local && r.kind == ZoneKind::Normal && dma32) {
            fast | AllocFlags::NOFRAGMENT
        } else {
            fast
        }
    }

    /// `get_page_from_freelist` (spec 01 §9) over `refs`: the first zone
    /// that passes its watermark and has a block. Without `defrag_mode`, a
    /// NOFRAGMENT pass that reaches another node's zone drops NOFRAGMENT
    /// and starts over (locality beats fragmentation), and a failed
    /// NOFRAGMENT pass is retried without it; under `defrag_mode` the flag
    /// stays (the slow path drops it last).
    pub(crate) fn freelist(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        mut flags: AllocFlags,
        mut cpu: Option<&mut crate::cache::Locals<'_, 'a, P::Lock>>,
    ) -> Result<Block, AllocError> {
        let highest = gfp.request_zone().ok_or(AllocError::InvalidGfp)?;
        let mut last = AllocError::NoEligibleZone;
        let keep_nofragment = self.defrag_mode();
        'retry: loop {
            for r in refs.clone().filter(|r| r.kind <= highest) {
                if flags.contains(AllocFlags::NOFRAGMENT) && r.node != local && !keep_nofragment {
                    flags.remove(AllocFlags::NOFRAGMENT);
                    continue 'retry;
                }
                let Some(z) = self.zone(r) else { continue };
                let got = match cpu.as_deref_mut() {
                    Some(c) => {
                        let hooks = self.traced_cpu(Some(c.cpu));
                        match c.get(r) {
                            Some(l) => z.alloc_cached(&hooks, l, gfp, order, flags, highest),
                            None => z.try_alloc(&self.hooks, gfp, order, flags, highest),
                        }
                    }
                    None => z.try_alloc(&self.hooks, gfp, order, flags, highest),
                };
                match got {
                    Ok(pfn) => {
                        return Ok(Block::new(self.id, r, pfn, order));
                    }
                    Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
                    Err(e) => last = e,
                }
            }
            if flags.contains(AllocFlags::NOFRAGMENT) && !keep_nofragment {
                flags.remove(AllocFlags::NOFRAGMENT);
                continue;
            }
            return Err(last);
        }
    }

    /// Gives a block back. A block of another machine is refused and
    /// handed back, still allocated there ([`FreeError::Foreign`]).
    #[inline]
    pub fn free(&self, block: Block) -> Result<(), Refused<Block>> {
        let Some(z) = self.zone_of_block(&block) else {
            return Err(Refused::new(block, FreeError::Foreign));
        };
        self.poison_block_free(z, block.pfn(), block.order());
        match z.free(block.pfn(), block.order()) {
            Ok(()) => {
                self.freed(z, block.pfn(), block.order(), None);
                Ok(())
            }
            Err(e) => Err(Refused::new(block, e)),
        }
    }

    /// Splits `block` into its lower and upper halves, each a block of one
    /// order less that is freed on its own (Linux `split_page`, one level):
    /// a kernel that keeps part of an allocation frees the rest this way.
    /// Nothing moves and nothing is freed. Refused, and handed back
    /// unchanged: a block of one frame ([`FreeError::SingleFrame`]), of
    /// another machine ([`FreeError::Foreign`]), or one that compaction is
    /// moving right now ([`FreeError::Busy`]: retry).
    ///
    /// ```
    /// # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x1000), Pfn(0x5000));
    /// # let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// // Five frames wanted: take eight, keep four plus one, free three.
    /// let eight = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(3).unwrap()).unwrap();
    /// let (four, upper) = m.split(eight).unwrap();
    /// let (two, spare) = m.split(upper).unwrap();
    /// let (one, unused) = m.split(two).unwrap();
    /// m.free(spare).unwrap();
    /// m.free(unused).unwrap();
    /// assert_eq!((four.order().get(), one.pfn() - four.pfn()), (2, 4));
    /// # m.free(four).unwrap(); m.free(one).unwrap();
    /// ```
    pub fn split(&self, block: Block) -> Result<(Block, Block), Refused<Block>> {
        let Some(z) = self.zone_of_block(&block) else {
            return Err(Refused::by(Call::Split, block, FreeError::Foreign));
        };
        match z.split(block.pfn(), block.order()) {
            Ok(upper) => {
                let half = Order::new_truncated(block.order().get() - 1);
                let r = block.zone_ref();
                let (pfn, _) = block.into_raw();
                Ok((
                    Block::new(self.id, r, pfn, half),
                    Block::new(self.id, r, upper, half),
                ))
            }
            Err(e) => Err(Refused::by(Call::Split, block, e)),
        }
    }

    /// The zone holding `block`, if the block is this machine's.
    #[inline]
    pub(crate) fn zone_of_block(&self, block: &Block) -> Option<&Zone<'a, P::Lock>> {
        if block.machine() != self.id {
            return None;
        }
        // A block of this machine names one of its zones: no topology check.
        let r = block.zone_ref();
        self.nodes[r.node.index() % MAX_NUMNODES].zone(r.kind)
    }

    /// The block `(pfn, order)` as a [`Block`] again, from the number a
    /// kernel kept ([`Block::into_raw`], a page-table entry). A number
    /// that is not the head of a live allocation of `order` in this
    /// machine gets a [`RawError`] naming the frame and the problem.
    ///
    /// # Safety
    ///
    /// If `(pfn, order)` is a live allocation (the call then succeeds), it
    /// is the caller's: it came from this machine as a block the caller
    /// turned into this number, and from now on the caller neither uses
    /// the number as its own nor makes a second block of it (two blocks of
    /// one frame are two owners). A stale number, whose block was freed
    /// and handed to someone else since, passes the check and takes that
    /// owner's memory. Any other number is refused, with nothing changed.
    #[inline(always)]
    pub unsafe fn block_from_raw(&self, pfn: Pfn, order: Order) -> Result<Block, RawError> {
        // The common case, a live allocation, reads its byte and nothing
        // more; the reason for anything else is found out of line.
        if let Some(r) = self.zone_ref_of(pfn)
            && let Some(z) = self.zone(r)
            && z.states.allocated_at(pfn, order)
        {
            return Ok(Block::new(self.id, r, pfn, order));
        }
        self.block_from_raw_decoded(pfn, order)
    }

    /// [`Machine::block_from_raw`] by the decoded byte, with the reason
    /// when `(pfn, order)` is not a live allocation.
    #[cold]
    #[inline(never)]
    fn block_from_raw_decoded(&self, pfn: Pfn, order: Order) -> Result<Block, RawError> {
        let err = |why| RawError { pfn, why };
        let r = self.zone_ref_of(pfn).ok_or(err(FreeError::OutOfRange))?;
        let z = self.zone(r).ok_or(err(FreeError::OutOfRange))?;
        z.check_live(pfn, order).map_err(err)?;
        Ok(Block::new(self.id, r, pfn, order))
    }

    /// Pins (or unpins) `block`: a pinned block is treated as unmovable
    /// (compaction and isolation leave it alone), e.g. while a device reads
    /// it by DMA. `OutOfRange` for a block of another machine.
    pub fn set_pinned(&self, block: &Block, pinned: bool) -> Result<(), PinError> {
        let z = self.zone_of_block(block).ok_or(PinError::OutOfRange)?;
        let pfn = block.pfn();
        if !z.states.is_live_allocation(pfn) {
            return Err(PinError::NotAllocated);
        }
        // A frame an order-0 stripe handed out has its tag (where the pin
        // lives) written when the stripe gives its chunk back: do that now.
        if z.with_zone(|m| m.buddy().tag(pfn).is_none()) {
            z.release_stripes();
        }
        // The pin goes in the core's books and in the ownership byte, under
        // the zone lock: the lock-free free path reads the byte, and sends
        // a pinned block to the zone, whose free ends the pin.
        let done = z.with_zone(|m| {
            if !z.states.set_pinned(pfn, block.order(), pinned) {
                return false;
            }
            if m.set_pinned(pfn, pinned) {
                return true;
            }
            z.states.set_pinned(pfn, block.order(), !pinned);
            false
        });
        if done {
            Ok(())
        } else {
            Err(PinError::NotAllocated)
        }
    }

    // ---- reports ----
}

/// # Counting and checking
///
/// Free and managed frames, counters, and the walk that checks every
/// invariant.
impl<'a, P: Platform> Machine<'a, P> {
    /// See [`crate::debug::Inspect::for_each_free_block`].
    pub(crate) fn for_each_free_block(&self, mut f: impl FnMut(Pfn, Order)) {
        for z in self.all_zones() {
            z.inspect(|mz| {
                for (p, info) in mz.buddy().walk(z.span()) {
                    if let pageframe_buddy::BlockInfo::Free { head, order, .. } = info
                        && head == p
                    {
                        f(head, order);
                    }
                }
            });
        }
    }

    /// See [`crate::debug::Inspect::free_pages`].
    pub(crate) fn free_pages(&self) -> u64 {
        self.nodes().map(|n| n.free_pages()).sum()
    }

    /// See [`crate::debug::Inspect::managed_pages`].
    pub(crate) fn managed_pages(&self) -> u64 {
        self.nodes().map(|n| n.managed_pages()).sum()
    }

    /// Gives back every zone's order-0 stripe reservations (see
    /// [`Zone::stripe_frames`]) and the blocks of its pageblock pool (see
    /// [`Zone::pooled_frames`]): their free frames are on the zone's free
    /// lists again. [`Machine::alloc_contig_range`] and
    /// [`Machine::offline_range`] do it for their zone; a kernel calls it
    /// before it counts free blocks exactly (or suspends). Returns how many
    /// reservations and blocks came back.
    pub fn drain_stripes(&self) -> usize {
        self.all_zones()
            .map(|z| z.release_stripes() + z.release_pool())
            .sum()
    }

    /// See [`crate::debug::Inspect::stripe_frames`].
    pub(crate) fn stripe_frames(&self) -> u64 {
        self.all_zones().map(|z| z.stripe_frames()).sum()
    }

    /// Checks every zone of every node (see [`Zone::validate`]).
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.nodes().try_for_each(|n| n.validate())
    }

    /// See [`crate::debug::Inspect::stats`].
    pub(crate) fn stats(&self, id: NodeId) -> NodeStats {
        self.node(id).map_or_else(NodeStats::default, Node::stats)
    }

    /// See [`crate::debug::Inspect::total_stats`].
    pub(crate) fn total_stats(&self) -> NodeStats {
        let mut t = NodeStats::default();
        for n in self.nodes() {
            t += n.stats();
        }
        t
    }

    /// See [`crate::debug::Inspect::global_deferral`].
    pub(crate) fn global_deferral(&self) -> pageframe_compact::DeferralState {
        self.global_defer.state()
    }

    pub(crate) fn count(&self, id: NodeId, s: NodeStats) {
        if let Some(n) = self.node(id) {
            n.counters.add(&s);
        }
    }
}

/// Every zone's span, sorted, for the zone of a frame in a few compares.
#[derive(Clone, Copy)]
struct ZoneIndex {
    spans: [(u64, u64); MAX_NUMNODES * NR_ZONE_KINDS],
    refs: [ZoneRef; MAX_NUMNODES * NR_ZONE_KINDS],
    len: usize,
}

impl ZoneIndex {
    const EMPTY: ZoneIndex = ZoneIndex {
        spans: [(0, 0); MAX_NUMNODES * NR_ZONE_KINDS],
        refs: [ZoneRef {
            node: NodeId::ZERO,
            kind: ZoneKind::Dma,
        }; MAX_NUMNODES * NR_ZONE_KINDS],
        len: 0,
    };

    fn push(&mut self, span: PfnRange, r: ZoneRef) {
        if self.len < self.spans.len() {
            self.spans[self.len] = (span.start.get(), span.end.get());
            self.refs[self.len] = r;
            self.len += 1;
        }
    }

    #[inline]
    fn find(&self, pfn: Pfn) -> Option<ZoneRef> {
        let p = pfn.get();
        let i = self.spans[..self.len]
            .iter()
            .position(|&(s, e)| p >= s && p < e)?;
        Some(self.refs[i])
    }
}

/// `a * b / c` in 128 bits, saturating.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    let q = u128::from(a) * u128::from(b) / u128::from(c.max(1));
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// `placement`'s index in [`Placement::ALL`] (how the tunable stores it).
pub(crate) const fn placement_index(placement: Placement) -> u8 {
    match placement {
        Placement::Linux => 0,
        Placement::Neighbour => 1,
        Placement::Superpageblock => 2,
    }
}

/// Which of a node's two zonelists `gfp` walks (the index
/// [`Machine::first_zone`] takes): 1 for `THISNODE`, else 0.
#[inline(always)]
pub(crate) fn zonelist_of(gfp: Gfp) -> usize {
    usize::from(gfp.contains(Gfp::THISNODE))
}
