//! The NUMA topology a machine is built for: how many nodes, the distance
//! table the zonelists are ordered by, and which nodes have CPUs (spec 01
//! §3.4, §3.6). A plain value, checked when it is made, that everything
//! above reads; the public path is [`crate::topology`].

use core::fmt;

use crate::node_id::{MAX_NUMNODES, NodeId};

/// The distance of a node to itself (ACPI SLIT convention).
pub const LOCAL_DISTANCE: u8 = 10;
/// The default distance between two different nodes.
pub const REMOTE_DISTANCE: u8 = 20;

/// Why a topology was refused.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum TopologyError {
    /// No node, or more than [`MAX_NUMNODES`].
    NodeCount,
    /// A node id at or beyond the topology's node count.
    NodeOutOfRange,
    /// A node's distance to itself must be [`LOCAL_DISTANCE`].
    LocalDistance,
    /// Two different nodes must be further apart than [`LOCAL_DISTANCE`].
    RemoteTooClose,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::NodeCount => {
                write!(f, "a topology has 1..={MAX_NUMNODES} nodes")
            }
            TopologyError::NodeOutOfRange => f.write_str("the node is not part of the topology"),
            TopologyError::LocalDistance => {
                write!(f, "a node's distance to itself must be {LOCAL_DISTANCE}")
            }
            TopologyError::RemoteTooClose => {
                write!(f, "two nodes must be further apart than {LOCAL_DISTANCE}")
            }
        }
    }
}

impl core::error::Error for TopologyError {}

/// Nodes `0..n`, the distance from each to each, and which have CPUs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Topology {
    nodes: u8,
    distance: [[u8; MAX_NUMNODES]; MAX_NUMNODES],
    /// Bit `n`: node `n` has CPUs (spec 01 §3.6 prefers headless nodes on
    /// ties, so this changes the order).
    cpus: u8,
}

impl Topology {
    /// One node with CPUs.
    pub const SINGLE: Topology = match Topology::uniform(1) {
        Ok(t) => t,
        Err(_) => panic!("one node is a valid topology"),
    };

    /// `n` nodes, all with CPUs, each [`REMOTE_DISTANCE`] from the others.
    pub const fn uniform(n: usize) -> Result<Topology, TopologyError> {
        if n == 0 || n > MAX_NUMNODES {
            return Err(TopologyError::NodeCount);
        }
        let mut distance = [[REMOTE_DISTANCE; MAX_NUMNODES]; MAX_NUMNODES];
        let mut i = 0;
        while i < MAX_NUMNODES {
            distance[i][i] = LOCAL_DISTANCE;
            i += 1;
        }
        Ok(Topology {
            nodes: n as u8,
            distance,
            cpus: ((1u16 << n) - 1) as u8,
        })
    }

    /// `n` nodes with the distances `d(from, to)` (a SLIT table; it need not
    /// be symmetric), all with CPUs. Checked before anything is built.
    pub fn from_fn(n: usize, d: impl Fn(usize, usize) -> u8) -> Result<Topology, TopologyError> {
        let mut t = Topology::uniform(n)?;
        for from in 0..n {
            for to in 0..n {
                Self::check(from, to, d(from, to))?;
            }
        }
        for from in 0..n {
            for to in 0..n {
                t.distance[from][to] = d(from, to);
            }
        }
        Ok(t)
    }

    fn check(from: usize, to: usize, d: u8) -> Result<(), TopologyError> {
        match (from == to, d) {
            (true, LOCAL_DISTANCE) => Ok(()),
            (true, _) => Err(TopologyError::LocalDistance),
            (false, d) if d <= LOCAL_DISTANCE => Err(TopologyError::RemoteTooClose),
            (false, _) => Ok(()),
        }
    }

    /// Sets the distance from `from` to `to` (one direction).
    pub fn set_distance(&mut self, from: NodeId, to: NodeId, d: u8) -> Result<(), TopologyError> {
        self.check_node(from)?;
        self.check_node(to)?;
        Self::check(from.index(), to.index(), d)?;
        self.distance[from.index()][to.index()] = d;
        Ok(())
    }

    /// Marks a node as having CPUs or not (a memory-only node).
    pub fn set_has_cpus(&mut self, node: NodeId, cpus: bool) -> Result<(), TopologyError> {
        self.check_node(node)?;
        let bit = 1u8 << node.index();
        if cpus {
            self.cpus |= bit;
        } else {
            self.cpus &= !bit;
        }
        Ok(())
    }

    fn check_node(&self, node: NodeId) -> Result<(), TopologyError> {
        if node.index() < self.nr_nodes() {
            Ok(())
        } else {
            Err(TopologyError::NodeOutOfRange)
        }
    }

    /// Number of nodes.
    pub const fn nr_nodes(&self) -> usize {
        self.nodes as usize
    }

    /// Whether `node` is one of this topology's nodes.
    pub const fn contains(&self, node: NodeId) -> bool {
        node.index() < self.nr_nodes()
    }

    /// The nodes, in id order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + use<> {
        (0..self.nodes).map(NodeId)
    }

    /// The distance from `from` to `to`; `u8::MAX` for a node outside the
    /// topology (never preferred).
    pub const fn distance(&self, from: NodeId, to: NodeId) -> u8 {
        if self.contains(from) && self.contains(to) {
            self.distance[from.index()][to.index()]
        } else {
            u8::MAX
        }
    }

    /// Whether `node` has CPUs.
    pub const fn has_cpus(&self, node: NodeId) -> bool {
        self.contains(node) && self.cpus & (1 << node.index()) != 0
    }
}
