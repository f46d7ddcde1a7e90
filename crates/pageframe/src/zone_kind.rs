//! The address-range classes of memory a zone belongs to (spec 01 §3.5),
//! and the reference to one zone of a machine, its node and its kind.

use core::fmt;

use crate::node_id::{MAX_NUMNODES, NodeId};

/// Address-range classes of memory, low to high (spec 01 §3.5). A zone's
/// index is its place in this order.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[repr(u8)]
pub enum ZoneKind {
    /// Below 16 MiB on x86 (legacy ISA DMA).
    Dma = 0,
    /// Below 4 GiB.
    Dma32 = 1,
    /// Everything else.
    Normal = 2,
    /// Only movable allocations (carved out by configuration).
    Movable = 3,
}

/// Number of zone kinds.
pub const NR_ZONE_KINDS: usize = 4;

impl ZoneKind {
    /// All kinds, low to high.
    pub const ALL: [ZoneKind; NR_ZONE_KINDS] = [
        ZoneKind::Dma,
        ZoneKind::Dma32,
        ZoneKind::Normal,
        ZoneKind::Movable,
    ];

    /// Linux's name for the zone.
    pub const fn name(self) -> &'static str {
        match self {
            ZoneKind::Dma => "DMA",
            ZoneKind::Dma32 => "DMA32",
            ZoneKind::Normal => "Normal",
            ZoneKind::Movable => "Movable",
        }
    }

    /// The zone's index.
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for ZoneKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A zone of a machine: its node and its kind. One entry of a zonelist,
/// and what a block records of the zone it came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ZoneRef {
    /// The zone's node.
    pub node: NodeId,
    /// The zone's kind on that node.
    pub kind: ZoneKind,
}

/// Zones a machine can have, `MAX_NUMNODES * NR_ZONE_KINDS`; a power of two
/// (so an index masked by it is in range without a check).
pub(crate) const MAX_ZONES: usize = MAX_NUMNODES * NR_ZONE_KINDS;
const _: () = assert!(MAX_ZONES.is_power_of_two() && NR_ZONE_KINDS.is_power_of_two());

impl ZoneRef {
    /// The zone's index among every zone a machine can have, below
    /// [`MAX_ZONES`].
    #[inline]
    pub(crate) fn index(self) -> usize {
        (self.node.index() * NR_ZONE_KINDS + self.kind.index()) % MAX_ZONES
    }

    /// The reference of index `i` (masked into range).
    #[inline]
    pub(crate) fn from_index(i: u8) -> ZoneRef {
        let i = usize::from(i) % MAX_ZONES;
        ZoneRef {
            node: NodeId((i / NR_ZONE_KINDS) as u8),
            kind: ZoneKind::ALL[i % NR_ZONE_KINDS],
        }
    }
}
