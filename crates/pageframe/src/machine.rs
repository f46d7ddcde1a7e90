//! A machine of several nodes (spec 01 §3.4-3.6): each [`Node`] with an
//! id, the distance table, each node's FALLBACK and NOFALLBACK zonelists,
//! and the per-node state of the slow path (compaction deferral, kcompactd,
//! statistics). The walk over a zonelist is [`Machine::alloc`]; the slow
//! path with compaction is in [`crate::slow_path`].

use core::fmt;

use pageframe_buddy::{FreeError, Order, Pfn, ValidateError};
use pageframe_compact::CompactState;

use crate::deferral::{Deferral, DeferralState};
use crate::error::AllocError;
use crate::gfp::{AllocFlags, Gfp};
use crate::kcompactd_node::KcompactdState;
use crate::node::Node;
use crate::numa_stats::{NodeCounters, NodeStats};
use crate::topology::{MAX_NUMNODES, NodeId, Topology};
use crate::zone::{NR_ZONE_KINDS, Zone, ZoneKind};
use crate::zonelist::{NodeMask, NodeOrder, ZoneRef, Zonelist, ZonelistKind, build_node_orders};

/// Why a node could not join a machine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MachineError {
    /// The id is not one of the topology's nodes.
    NodeOutOfRange,
    /// The machine already has a node with that id.
    DuplicateNode,
    /// One of the node's zones overlaps a zone of another node.
    OverlappingSpan,
    /// The node has no zone.
    NoZones,
}

impl fmt::Display for MachineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl core::error::Error for MachineError {}

/// Where an allocation came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Allocation {
    /// The node that served it.
    pub node: NodeId,
    /// The zone kind on that node.
    pub zone: ZoneKind,
    /// The first frame.
    pub pfn: Pfn,
}

/// The slow path's state of one node (spec 01 §3.4: kcompactd state; spec
/// 03 §3.1: per-zone deferral).
#[derive(Default)]
pub(crate) struct NodeState {
    /// Per-zone compaction state (spec 03 §3.1: cached scanner positions,
    /// deferral), by zone kind.
    pub zone_compact: [CompactState; NR_ZONE_KINDS],
    /// The node-aware policy's deferral of the node as a whole.
    pub node_defer: Deferral,
    pub kcompactd: KcompactdState,
    pub stats: NodeCounters,
}

/// Several nodes and their zonelists. Build it with [`Machine::new`] and
/// [`Machine::add_node`]; afterwards every method takes `&self`.
pub struct Machine<'a> {
    topology: Topology,
    nodes: [Option<Node<'a>>; MAX_NUMNODES],
    orders: [NodeOrder; MAX_NUMNODES],
    /// `[node][Fallback, NoFallback]`.
    zonelists: [[Zonelist; 2]; MAX_NUMNODES],
    pub(crate) state: [NodeState; MAX_NUMNODES],
    /// The node-aware policy's machine-wide back-off after a request failed
    /// on every node.
    pub(crate) global_defer: Deferral,
}

impl<'a> Machine<'a> {
    /// A machine with `topology`'s nodes, none of them populated yet.
    pub fn new(topology: Topology) -> Machine<'a> {
        Machine {
            topology,
            nodes: core::array::from_fn(|_| None),
            orders: [NodeOrder::EMPTY; MAX_NUMNODES],
            zonelists: [[Zonelist::EMPTY; 2]; MAX_NUMNODES],
            state: core::array::from_fn(|_| NodeState::default()),
            global_defer: Deferral::new(),
        }
    }

    /// Adds node `id` with its zones, and rebuilds every zonelist (spec 01
    /// §3.6). Checked before anything changes.
    pub fn add_node(&mut self, id: NodeId, node: Node<'a>) -> Result<(), MachineError> {
        if !self.topology.contains(id) {
            return Err(MachineError::NodeOutOfRange);
        }
        if self.nodes[id.index()].is_some() {
            return Err(MachineError::DuplicateNode);
        }
        if node.zones().next().is_none() {
            return Err(MachineError::NoZones);
        }
        for other in self.nodes.iter().flatten() {
            for z in node.zones() {
                if other
                    .zones()
                    .any(|o| !o.span().intersect(&z.span()).is_empty())
                {
                    return Err(MachineError::OverlappingSpan);
                }
            }
        }
        self.nodes[id.index()] = Some(node);
        self.build_zonelists();
        Ok(())
    }

    /// Rebuilds the node orders and zonelists from the nodes present.
    fn build_zonelists(&mut self) {
        let memory = self
            .topology
            .nodes()
            .filter(|n| self.nodes[n.index()].is_some())
            .fold(NodeMask::EMPTY, NodeMask::with);
        self.orders = build_node_orders(&self.topology, memory);
        for n in self.topology.nodes() {
            let populated = |node: NodeId, kind: ZoneKind| {
                self.nodes[node.index()]
                    .as_ref()
                    .is_some_and(|x| x.zone(kind).is_some())
            };
            self.zonelists[n.index()] = [
                Zonelist::build(self.orders[n.index()].as_slice(), populated),
                Zonelist::build(&[n], populated),
            ];
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Node `id`, if present.
    pub fn node(&self, id: NodeId) -> Option<&Node<'a>> {
        self.nodes.get(id.index())?.as_ref()
    }

    /// The nodes present, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node<'a>)> + '_ {
        self.topology
            .nodes()
            .filter_map(|n| Some((n, self.nodes[n.index()].as_ref()?)))
    }

    /// The zone a zonelist entry names.
    pub fn zone(&self, r: ZoneRef) -> Option<&Zone<'a>> {
        self.node(r.node)?.zone(r.kind)
    }

    /// Node `id`'s preference order (empty if `id` is not a node).
    pub fn node_order(&self, id: NodeId) -> &[NodeId] {
        self.orders.get(id.index()).map_or(&[], |o| o.as_slice())
    }

    /// One of node `id`'s zonelists (empty if `id` is not a node).
    pub fn zonelist(&self, id: NodeId, kind: ZonelistKind) -> &Zonelist {
        const EMPTY: Zonelist = Zonelist::EMPTY;
        let i = match kind {
            ZonelistKind::Fallback => 0,
            ZonelistKind::NoFallback => 1,
        };
        self.zonelists.get(id.index()).map_or(&EMPTY, |z| &z[i])
    }

    /// The zonelist a request from `local` with `gfp` walks:
    /// NOFALLBACK for `__GFP_THISNODE`, FALLBACK otherwise.
    pub fn zonelist_for(&self, local: NodeId, gfp: Gfp) -> &Zonelist {
        let kind = if gfp.contains(Gfp::THISNODE) {
            ZonelistKind::NoFallback
        } else {
            ZonelistKind::Fallback
        };
        self.zonelist(local, kind)
    }

    /// The node whose zones hold `pfn`.
    pub fn node_of(&self, pfn: Pfn) -> Option<NodeId> {
        self.nodes()
            .find(|(_, n)| n.zone_of(pfn).is_some())
            .map(|(id, _)| id)
    }

    /// Allocates `2^order` frames for a task on `local` without compaction:
    /// the zonelist `gfp` selects (spec 01 §3.6) against the low watermarks,
    /// first without fragmenting fallbacks on the local node when its DMA32
    /// zone backs Normal (spec 01 §9, spec 02 §5.5), then against the min
    /// watermarks with the reserve access `gfp` grants (spec 01 §8.3).
    /// `__GFP_THISNODE` never leaves `local`.
    pub fn alloc(&self, local: NodeId, gfp: Gfp, order: Order) -> Result<Allocation, AllocError> {
        let (list, highest) = self.prepare(local, gfp)?;
        let refs = list.as_slice().iter().copied();
        self.freelist(
            local,
            refs.clone(),
            gfp,
            order,
            self.fast_flags(local, gfp, list),
        )
        .or_else(|e| match e {
            AllocError::OrderTooLarge => Err(e),
            _ => self.freelist(local, refs, gfp, order, AllocFlags::slow(gfp, order)),
        })
        .inspect(|a| debug_assert!(a.zone <= highest))
    }

    /// Checks the request and picks its zonelist and highest zone.
    pub(crate) fn prepare(
        &self,
        local: NodeId,
        gfp: Gfp,
    ) -> Result<(&Zonelist, ZoneKind), AllocError> {
        if !gfp.is_valid() {
            return Err(AllocError::InvalidGfp);
        }
        let highest = gfp.highest_zone().ok_or(AllocError::InvalidGfp)?;
        if self.node(local).is_none() {
            return Err(AllocError::NoEligibleZone);
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
    pub(crate) fn fast_flags(&self, local: NodeId, gfp: Gfp, list: &Zonelist) -> AllocFlags {
        let fast = AllocFlags::fast(gfp);
        let Some(highest) = gfp.highest_zone() else {
            return fast;
        };
        let preferred = list.eligible(highest).next();
        let dma32 = self
            .node(local)
            .and_then(|n| n.zone(ZoneKind::Dma32))
            .is_some_and(|z| z.managed_pages() > 0);
        if preferred.is_some_and(|r| r.node == local && r.kind == ZoneKind::Normal) && dma32 {
            fast | AllocFlags::NOFRAGMENT
        } else {
            fast
        }
    }

    /// `get_page_from_freelist` (spec 01 §9) over `refs`: the first eligible
    /// zone that passes its watermark and has a block. A NOFRAGMENT pass
    /// reaching another node's zone drops NOFRAGMENT and starts over
    /// (locality beats fragmentation), and a failed NOFRAGMENT pass is
    /// retried without it.
    pub(crate) fn freelist(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        mut flags: AllocFlags,
    ) -> Result<Allocation, AllocError> {
        let highest = gfp.highest_zone().ok_or(AllocError::InvalidGfp)?;
        let mut last = AllocError::NoEligibleZone;
        'retry: loop {
            for r in refs.clone().filter(|r| r.kind <= highest) {
                if flags.contains(AllocFlags::NOFRAGMENT) && r.node != local {
                    flags.remove(AllocFlags::NOFRAGMENT);
                    continue 'retry;
                }
                let Some(z) = self.zone(r) else { continue };
                match z.try_alloc(gfp, order, flags, highest) {
                    Ok(pfn) => {
                        return Ok(Allocation {
                            node: r.node,
                            zone: r.kind,
                            pfn,
                        });
                    }
                    Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
                    Err(e) => last = e,
                }
            }
            if flags.contains(AllocFlags::NOFRAGMENT) {
                flags.remove(AllocFlags::NOFRAGMENT);
                continue;
            }
            return Err(last);
        }
    }

    /// Frees a block into the node and zone that hold it.
    pub fn free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let id = self.node_of(pfn).ok_or(FreeError::OutOfRange)?;
        self.nodes[id.index()]
            .as_ref()
            .ok_or(FreeError::OutOfRange)?
            .free(pfn, order)
    }

    /// Free frames over all nodes.
    pub fn free_pages(&self) -> u64 {
        self.nodes().map(|(_, n)| n.free_pages()).sum()
    }

    /// Checks every zone of every node.
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.nodes().try_for_each(|(_, n)| n.validate())
    }

    /// Node `id`'s counters (zero for a node outside the machine).
    pub fn stats(&self, id: NodeId) -> NodeStats {
        self.state
            .get(id.index())
            .map_or_else(NodeStats::default, |s| s.stats.snapshot())
    }

    /// All nodes' counters added up.
    pub fn total_stats(&self) -> NodeStats {
        let mut t = NodeStats::default();
        for n in self.topology.nodes() {
            t += self.stats(n);
        }
        t
    }

    pub(crate) fn count(&self, id: NodeId, s: NodeStats) {
        if let Some(st) = self.state.get(id.index()) {
            st.stats.add(&s);
        }
    }

    /// The compaction deferral of zone `kind` on node `id` (spec 03 §7).
    pub fn zone_deferral(&self, id: NodeId, kind: ZoneKind) -> DeferralState {
        self.state
            .get(id.index())
            .map_or_else(DeferralState::default, |s| {
                let (considered, shift, order_failed) = s.zone_compact[kind.index()].deferral();
                DeferralState {
                    considered,
                    shift,
                    order_failed,
                }
            })
    }

    /// Zone `kind` of node `id`'s compaction state, if the zone exists.
    pub fn compact_state(&self, id: NodeId, kind: ZoneKind) -> Option<&CompactState> {
        self.node(id)?.zone(kind)?;
        Some(&self.state[id.index()].zone_compact[kind.index()])
    }

    /// The node-aware policy's deferral of node `id`.
    pub fn node_deferral(&self, id: NodeId) -> DeferralState {
        self.state
            .get(id.index())
            .map_or_else(DeferralState::default, |s| s.node_defer.state())
    }

    /// The node-aware policy's machine-wide back-off.
    pub fn global_deferral(&self) -> DeferralState {
        self.global_defer.state()
    }

    /// Node `id`'s fragmentation score (spec 03 §4.4): each zone's share of
    /// free memory not in huge-page-sized blocks, weighted by the zone's
    /// size, so small zones barely count. 0..=100; `None` for a missing node.
    pub fn fragmentation_score(&self, id: NodeId) -> Option<u32> {
        let node = self.node(id)?;
        let node_pages: u64 = node.managed_pages();
        let mut total = 0u64;
        for z in node.zones() {
            let (present, score) = z.with_zone(|m| {
                let o = m.pageblock_order().min(m.buddy().max_order());
                (m.buddy().managed_pages(), u64::from(m.extfrag_percent(o)))
            });
            total += present * score / (node_pages + 1);
        }
        Some(total.min(100) as u32)
    }
}
