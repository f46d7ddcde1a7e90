//! The machine as a reader sees it: its structure (nodes, zones,
//! zonelists), its counts, Linux's `/proc` reports, and the debugging
//! tools, all through [`Inspect`], which [`Machine::inspect`] lends. The
//! calls that allocate, free and set up stay on [`Machine`] itself.

use pageframe_buddy::{Order, Pfn, PfnRange};
use pageframe_mobility::MobilityConfig;

use crate::cma_area::{CmaId, CmaStats};
use crate::debug::MachineBuddyInfo;
use crate::debug::NoHooks;
use crate::gfp::Gfp;
use crate::hotplug::MemmapOnMemory;
use crate::lock::{Platform, SpinLock};
use crate::machine::Machine;
use crate::node::Node;
use crate::node_id::NodeId;
use crate::numa::Topology;
use crate::numa_stats::NodeStats;
use crate::zone_core::Zone;
use crate::zone_kind::ZoneKind;
use crate::zone_kind::ZoneRef;
use crate::zonelist::{Zonelist, ZonelistKind};

/// A read-only view of a machine: what it is made of, what it counts,
/// its reports, and the debugging tools ([`Machine::inspect`]). Nothing
/// here allocates or frees; the tools change only what they are for
/// (fault injection's settings). Free to make and to copy: it borrows the
/// machine, and what it returns borrows the machine too, not the view.
pub struct Inspect<'m, 'a, P: Platform = (SpinLock, NoHooks)> {
    machine: &'m Machine<'a, P>,
}

impl<P: Platform> Clone for Inspect<'_, '_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Platform> Copy for Inspect<'_, '_, P> {}

impl<'a, P: Platform> Machine<'a, P> {
    /// Reading the machine ([`crate::debug::Inspect`]): nodes and zones,
    /// free and managed frames, counters, `/proc`-style reports, the
    /// hooks, owner records and fault injection.
    #[inline]
    pub fn inspect(&self) -> Inspect<'_, 'a, P> {
        Inspect { machine: self }
    }
}

/// # Structure
///
/// Nodes, zones, the order in which requests try them, and what was
/// declared for later (hot-add, CMA).
impl<'m, 'a, P: Platform> Inspect<'m, 'a, P> {
    /// The machine's topology.
    #[inline]
    pub fn topology(self) -> &'m Topology {
        self.machine.topology()
    }

    /// The zones' mobility configuration.
    #[inline]
    pub fn mobility_config(self) -> MobilityConfig {
        self.machine.mobility_config()
    }

    /// Node `id` (memoryless nodes too), if it is one of the topology's.
    #[inline]
    pub fn node(self, id: NodeId) -> Option<&'m Node<'a, P::Lock>> {
        self.machine.node(id)
    }

    /// The topology's nodes, in id order.
    #[inline]
    pub fn nodes(self) -> impl Iterator<Item = &'m Node<'a, P::Lock>> + 'm {
        self.machine.nodes()
    }

    /// Every zone of every node.
    #[inline]
    pub fn all_zones(self) -> impl Iterator<Item = &'m Zone<'a, P::Lock>> + 'm {
        self.machine.all_zones()
    }

    /// The zone a zonelist entry names.
    #[inline]
    pub fn zone(self, r: ZoneRef) -> Option<&'m Zone<'a, P::Lock>> {
        self.machine.zone(r)
    }

    /// The zone whose span holds `pfn`.
    #[inline]
    pub fn zone_of(self, pfn: Pfn) -> Option<&'m Zone<'a, P::Lock>> {
        self.machine.zone_of(pfn)
    }

    /// The node whose zones hold `pfn`.
    #[inline]
    pub fn node_of(self, pfn: Pfn) -> Option<NodeId> {
        self.machine.node_of(pfn)
    }

    /// Node `id`'s preference order (empty for an unknown node).
    #[inline]
    pub fn node_order(self, id: NodeId) -> &'m [NodeId] {
        self.machine.node_order(id)
    }

    /// One of node `id`'s zonelists (empty for an unknown node).
    #[inline]
    pub fn zonelist(self, id: NodeId, kind: ZonelistKind) -> &'m Zonelist {
        self.machine.zonelist(id, kind)
    }

    /// The zonelist a request from `local` with `gfp` walks: NOFALLBACK for
    /// `__GFP_THISNODE`, FALLBACK otherwise.
    #[inline]
    pub fn zonelist_for(self, local: NodeId, gfp: Gfp) -> &'m Zonelist {
        self.machine.zonelist_for(local, gfp)
    }

    /// CPUs with per-CPU caches (0 when none were set up).
    #[inline]
    pub fn pcp_cpus(self) -> u32 {
        self.machine.pcp_cpus()
    }

    /// The range declared hotpluggable for `node`'s zone of `kind`.
    #[inline]
    pub fn hotplug_range(self, node: NodeId, kind: ZoneKind) -> Option<PfnRange> {
        self.machine.hotplug_range(node, kind)
    }

    /// Plans a hot-add whose metadata lives in the added memory (Linux
    /// `memmap_on_memory`): the frames from the start of `span` up to the
    /// first pageblock boundary past those that hold its
    /// [`Machine::zone_metadata_bytes`], and the frames left to online.
    /// `None` when `span` is empty, too large for a zone, or would hold
    /// nothing but its metadata.
    #[inline]
    pub fn memmap_on_memory(self, span: PfnRange) -> Option<MemmapOnMemory> {
        self.machine.memmap_on_memory(span)
    }

    /// The area holding `pfn`.
    #[inline]
    pub fn cma_of(self, pfn: Pfn) -> Option<CmaId> {
        self.machine.cma_of(pfn)
    }
}

/// # Counts
///
/// Free and managed frames, per-node counters, and what the background
/// services (reporting, compaction) see.
impl<'m, 'a, P: Platform> Inspect<'m, 'a, P> {
    /// Free frames over all nodes (not counting per-CPU caches).
    #[inline]
    pub fn free_pages(self) -> u64 {
        self.machine.free_pages()
    }

    /// Managed frames over all nodes.
    #[inline]
    pub fn managed_pages(self) -> u64 {
        self.machine.managed_pages()
    }

    /// Free frames the order-0 stripes of every zone hold (part of
    /// [`Inspect::free_pages`]).
    #[inline]
    pub fn stripe_frames(self) -> u64 {
        self.machine.stripe_frames()
    }

    /// Calls `f` with every free block on the zones' free lists (first
    /// frame and order), zone by zone in frame order, each zone under its
    /// lock: keep `f` short, and do not allocate or free from it. Frames in
    /// per-CPU caches and the order-0 stripes are not on the lists: drain
    /// them first ([`Machine::drain_pcp`], [`Machine::drain_stripes`]) to
    /// see all free memory (to poison it before switching poisoning on,
    /// say).
    ///
    /// ```
    /// # use pageframe::{Machine, MachineConfig, NodeId, Pfn, PfnRange, ZoneKind};
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x10_0000), Pfn(0x10_4000));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// let mut frames = 0;
    /// m.inspect().for_each_free_block(|_pfn, order| frames += order.pages());
    /// assert_eq!(frames, m.inspect().free_pages());
    /// ```
    #[inline]
    pub fn for_each_free_block(self, f: impl FnMut(Pfn, Order)) {
        self.machine.for_each_free_block(f)
    }

    /// Node `id`'s counters (zero for a node outside the topology).
    #[inline]
    pub fn stats(self, id: NodeId) -> NodeStats {
        self.machine.stats(id)
    }

    /// All nodes' counters added up.
    #[inline]
    pub fn total_stats(self) -> NodeStats {
        self.machine.total_stats()
    }

    /// The node-aware policy's machine-wide back-off of remote compaction.
    #[inline]
    pub fn global_deferral(self) -> pageframe_compact::DeferralState {
        self.machine.global_deferral()
    }

    /// Area `id`'s range and counters.
    #[inline]
    pub fn cma_stats(self, id: CmaId) -> Option<CmaStats> {
        self.machine.cma_stats(id)
    }

    /// Frames in free blocks of at least `min` order over every zone, and
    /// how many of them are reported.
    #[inline]
    pub fn reported_pages(self, min: Order) -> (u64, u64) {
        self.machine.reported_pages(min)
    }

    /// Node `id`'s fragmentation score (spec 03 §4.4): each zone's share of
    /// free memory outside huge-page-sized blocks, weighted by the zone's
    /// size. 0..=100; `None` for a node without memory.
    #[inline]
    pub fn fragmentation_score(self, id: NodeId) -> Option<u32> {
        self.machine.fragmentation_score(id)
    }
}

/// # Reports
///
/// `/proc/buddyinfo`, `/proc/zoneinfo` and `/proc/vmstat`, in Linux's text
/// or as counters.
impl<'m, 'a, P: Platform> Inspect<'m, 'a, P> {
    /// `/proc/buddyinfo` for the whole machine: one line a zone.
    #[inline]
    pub fn buddyinfo(self) -> MachineBuddyInfo<'m, 'a, P> {
        MachineBuddyInfo(self.machine)
    }

    /// `/proc/zoneinfo`: every zone's watermarks, sizes, protection, free
    /// blocks by order and type, and per-CPU caches, as text.
    ///
    /// ```
    /// # use pageframe::{Machine, MachineConfig, NodeId, Pfn, PfnRange, ZoneKind};
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x10_0000), Pfn(0x10_4000));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// let text = m.inspect().zoneinfo().to_string();
    /// assert!(text.starts_with("Node 0, zone   Normal\n  pages free     16384\n"));
    /// ```
    #[inline]
    pub fn zoneinfo(self) -> crate::debug::ZoneInfo<'m, 'a, P> {
        crate::debug::ZoneInfo(self.machine)
    }

    /// The machine's counters as `/proc/vmstat` shows them
    /// ([`crate::debug::vmstat`], feature `vmstat`).
    #[cfg(feature = "vmstat")]
    #[inline]
    pub fn vmstat(self) -> crate::debug::vmstat::VmStat {
        self.machine.vmstat()
    }

    /// Node `id`'s counters: its zones' and its slow paths' (failures,
    /// contiguous ranges and CMA are the machine's: 0 here).
    #[cfg(feature = "vmstat")]
    #[inline]
    pub fn node_vmstat(self, id: NodeId) -> crate::debug::vmstat::VmStat {
        self.machine.node_vmstat(id)
    }
}

/// # Debugging tools
///
/// The kernel's hooks, poisoning's reports, fault injection and the owner
/// records ([`crate::debug`]).
impl<'m, 'a, P: Platform> Inspect<'m, 'a, P> {
    /// The machine's hooks ([`crate::debug`]).
    #[inline]
    pub fn hooks(self) -> &'m P::Hooks {
        self.machine.hooks()
    }

    /// Blocks handed out that were found written while free
    /// ([`crate::debug::Poisoning::POISON`]).
    #[inline]
    pub fn use_after_free_reports(self) -> u64 {
        self.machine.use_after_free_reports()
    }

    /// Fault injection: which allocations to fail on purpose
    /// ([`crate::debug::fail`], feature `fail-alloc`).
    #[cfg(feature = "fail-alloc")]
    #[inline]
    pub fn fail_page_alloc(self) -> &'m crate::debug::fail::FailPageAlloc {
        self.machine.fail_page_alloc()
    }

    /// The sequence number the next allocation's owner record gets: blocks
    /// with a number at or above a value read earlier were allocated since.
    #[cfg(feature = "page-owner")]
    #[inline]
    pub fn owner_seq(self) -> u64 {
        self.machine.owner_seq.get()
    }

    /// The block holding `pfn` and its owner (`live`), or, for a free
    /// frame, the last block that started there (`live: false`). `None`
    /// for a frame outside every zone or never allocated.
    #[cfg(feature = "page-owner")]
    #[inline]
    pub fn owner_of(self, pfn: Pfn) -> Option<crate::debug::owner::OwnedBlock> {
        self.machine.owner_of(pfn)
    }

    /// Calls `f` with every block allocated now that has an owner record,
    /// zone by zone in frame order. A contiguous range (or CMA buffer) is
    /// listed as the blocks that tile it, each with the range's record.
    #[cfg(feature = "page-owner")]
    #[inline]
    pub fn for_each_owned(self, f: impl FnMut(crate::debug::owner::OwnedBlock)) {
        self.machine.for_each_owned(f)
    }

    /// The live blocks grouped by owner tag, largest first, as text
    /// ([`crate::debug::owner`]).
    #[cfg(feature = "page-owner")]
    #[inline]
    pub fn page_owners(self) -> crate::debug::owner::OwnerDump<'m, 'a, P> {
        crate::debug::owner::OwnerDump(self.machine)
    }
}
