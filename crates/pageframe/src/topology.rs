//! The NUMA topology: node identities, which nodes have CPUs, and the
//! distance table the zonelists are ordered by (spec 01 §3.4, §3.6).

// The topology itself, a node, what it counts, and the orders its
// allocations fall back in.
pub use crate::node::Node;
pub use crate::node_id::MAX_NUMNODES;
pub use crate::numa::{LOCAL_DISTANCE, REMOTE_DISTANCE, Topology, TopologyError};
pub use crate::numa_stats::NodeStats;
pub use crate::zone_kind::ZoneRef;
pub use crate::zonelist::{NodeMask, NodeOrder, Zonelist, ZonelistKind, build_node_orders};
