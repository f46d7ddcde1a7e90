//! Zonelists: for each node, the zones an allocation may use, in the order
//! it tries them (spec 01 §3.6). `FALLBACK` lists every node with memory in
//! preference order, each node's zones from the highest down (node-major);
//! `NOFALLBACK` lists only the node's own zones (`__GFP_THISNODE`).

use crate::node_id::{MAX_NUMNODES, NodeId};
use crate::numa::Topology;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind, ZoneRef};

/// A set of nodes, one bit each.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct NodeMask(u8);

impl NodeMask {
    /// No node.
    pub const EMPTY: NodeMask = NodeMask(0);

    /// The set plus `node`.
    pub const fn with(self, node: NodeId) -> NodeMask {
        NodeMask(self.0 | (1 << node.index()))
    }

    /// Whether `node` is in the set.
    pub const fn contains(self, node: NodeId) -> bool {
        self.0 & (1 << node.index()) != 0
    }

    /// The nodes in the set, in id order.
    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..MAX_NUMNODES)
            .filter_map(NodeId::new)
            .filter(move |&n| self.contains(n))
    }
}

/// Nodes in preference order for one local node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NodeOrder {
    nodes: [NodeId; MAX_NUMNODES],
    len: u8,
}

impl NodeOrder {
    /// An empty order.
    pub const EMPTY: NodeOrder = NodeOrder {
        nodes: [NodeId::ZERO; MAX_NUMNODES],
        len: 0,
    };

    /// The nodes, most preferred first.
    pub fn as_slice(&self) -> &[NodeId] {
        &self.nodes[..self.len as usize]
    }

    fn push(&mut self, n: NodeId) {
        self.nodes[self.len as usize] = n;
        self.len += 1;
    }
}

/// The node orders of every node, built together as Linux builds all
/// zonelists in one pass: the load that rotates ties is shared, so nodes at
/// equal distance take turns being second choice (spec 01 §3.6).
pub fn build_node_orders(topo: &Topology, memory: NodeMask) -> [NodeOrder; MAX_NUMNODES] {
    let mut load = [0u32; MAX_NUMNODES];
    let mut out = [NodeOrder::EMPTY; MAX_NUMNODES];
    for local in topo.nodes() {
        let mut used = NodeMask::EMPTY;
        let mut prev = local;
        while let Some(n) = find_next_best_node(topo, memory, local, used, &load) {
            used = used.with(n);
            // A new distance group: charge the node so the next local node
            // with the same candidates picks another one first.
            if topo.distance(local, n) != topo.distance(local, prev) {
                load[n.index()] += 1;
            }
            out[local.index()].push(n);
            prev = n;
        }
    }
    out
}

/// `find_next_best_node`: the local node first (if it has memory), then the
/// unused memory node minimising `(distance + (n < local) + has_cpus) *
/// MAX_NUMNODES + load[n]`, the lowest id winning ties.
fn find_next_best_node(
    topo: &Topology,
    memory: NodeMask,
    local: NodeId,
    used: NodeMask,
    load: &[u32; MAX_NUMNODES],
) -> Option<NodeId> {
    if memory.contains(local) && !used.contains(local) {
        return Some(local);
    }
    let mut best: Option<(u32, NodeId)> = None;
    for n in topo
        .nodes()
        .filter(|&n| memory.contains(n) && !used.contains(n))
    {
        let mut val = u32::from(topo.distance(local, n));
        // Prefer the next node up over one below us.
        val += u32::from(n < local);
        // Prefer nodes without CPUs: their memory has no local users.
        val += u32::from(topo.has_cpus(n));
        val = val * MAX_NUMNODES as u32 + load[n.index()];
        if best.is_none_or(|(b, _)| val < b) {
            best = Some((val, n));
        }
    }
    best.map(|(_, n)| n)
}

/// Which of a node's two zonelists.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ZonelistKind {
    /// All nodes in preference order.
    Fallback,
    /// The node's own zones only (`__GFP_THISNODE`).
    NoFallback,
}

const MAX_ZONEREFS: usize = MAX_NUMNODES * NR_ZONE_KINDS;

/// A zonelist: zones in the order an allocation tries them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Zonelist {
    refs: [ZoneRef; MAX_ZONEREFS],
    len: u8,
}

impl Default for Zonelist {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Zonelist {
    /// A zonelist without zones.
    pub const EMPTY: Zonelist = Zonelist {
        refs: [ZoneRef {
            node: NodeId::ZERO,
            kind: ZoneKind::Dma,
        }; MAX_ZONEREFS],
        len: 0,
    };

    /// The zonelist over `nodes` in that order, each node's zones for which
    /// `populated(node, kind)` holds from the highest kind down.
    pub fn build(nodes: &[NodeId], populated: impl Fn(NodeId, ZoneKind) -> bool) -> Zonelist {
        let mut z = Zonelist::EMPTY;
        for &n in nodes.iter().take(MAX_NUMNODES) {
            for kind in ZoneKind::ALL.into_iter().rev() {
                if populated(n, kind) {
                    z.refs[z.len as usize] = ZoneRef { node: n, kind };
                    z.len += 1;
                }
            }
        }
        z
    }

    /// Every entry.
    pub fn as_slice(&self) -> &[ZoneRef] {
        &self.refs[..self.len as usize]
    }

    /// The entries a request whose highest usable zone is `highest` may use
    /// (`for_next_zone_zonelist_nodemask` without a node mask).
    pub fn eligible(&self, highest: ZoneKind) -> impl Iterator<Item = ZoneRef> + Clone + '_ {
        self.as_slice()
            .iter()
            .copied()
            .filter(move |r| r.kind <= highest)
    }

    /// The distinct nodes, in list order.
    pub fn nodes(&self) -> NodeOrder {
        let mut o = NodeOrder::EMPTY;
        let mut seen = NodeMask::EMPTY;
        for r in self.as_slice() {
            if !seen.contains(r.node) {
                seen = seen.with(r.node);
                o.push(r.node);
            }
        }
        o
    }
}
