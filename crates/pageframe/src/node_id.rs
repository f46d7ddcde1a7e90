//! The identities of NUMA nodes (spec 01 §3.4), and how many nodes and
//! CPUs a machine can have. The bounds live beside the identity they
//! bound, at the bottom of the facade, because every per-node and per-CPU
//! table and every error that names a count is sized by them.

use core::fmt;

/// Most nodes a [`crate::topology::Topology`] (and so a
/// [`crate::Machine`]) can describe. Fixed so that every per-node table is
/// an array: no heap.
pub const MAX_NUMNODES: usize = 8;

/// Most CPUs a machine's per-CPU caches can be set up for.
pub const MAX_CPUS: usize = 4096;

/// A node's identity: an index below [`MAX_NUMNODES`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct NodeId(pub(crate) u8);

impl NodeId {
    /// Node 0.
    pub const ZERO: NodeId = NodeId(0);

    /// Node `n`, or `None` if `n >= MAX_NUMNODES`.
    pub const fn new(n: usize) -> Option<NodeId> {
        if n < MAX_NUMNODES {
            Some(NodeId(n as u8))
        } else {
            None
        }
    }

    /// The node's index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}
