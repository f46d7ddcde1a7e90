//! The address-range classes of memory a zone belongs to (spec 01 §3.5).

use core::fmt;

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
