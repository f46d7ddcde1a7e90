//! A NUMA node's identity (spec 01 §3.4).

use core::fmt;

use crate::topology::MAX_NUMNODES;

/// A node's identity: an index below [`MAX_NUMNODES`](crate::topology::MAX_NUMNODES).
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
