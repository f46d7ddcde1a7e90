//! Which zones a node gets from its part of the memory map (spec 01 §3.5):
//! the node's frame range cut at the x86-64 zone boundaries (16 MiB for
//! DMA, 4 GiB for DMA32), with everything from a configured frame up
//! carved out as Movable (`movablecore=` / `kernelcore=`). Zones that would
//! be empty are left out, as Linux leaves unpopulated zones out of the
//! zonelists.

use pageframe_buddy::{Pfn, PfnRange, PhysAddr};

use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind};

/// The first frame above the DMA zone (16 MiB).
pub const DMA_LIMIT: Pfn = PhysAddr::new(16 << 20).pfn_down();
/// The first frame above the DMA32 zone (4 GiB).
pub const DMA32_LIMIT: Pfn = PhysAddr::new(1 << 32).pfn_down();

/// A node's zone spans, by kind.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneLayout {
    spans: [Option<PfnRange>; NR_ZONE_KINDS],
}

impl ZoneLayout {
    /// The layout of a node spanning `node`: DMA below [`DMA_LIMIT`] if
    /// `with_dma` (otherwise that memory joins DMA32), DMA32 below
    /// [`DMA32_LIMIT`], Normal above, and Movable from `movable_from` up
    /// (clamped to the node; the zones below it end there).
    pub fn new(node: PfnRange, with_dma: bool, movable_from: Option<Pfn>) -> ZoneLayout {
        let end = movable_from.map_or(node.end, |m| m.clamp(node.start, node.end));
        let below = |lo: Pfn, hi: Pfn| {
            let r = node.intersect(&PfnRange::new(lo, hi.min(end).max(lo)));
            (!r.is_empty()).then_some(r)
        };
        let dma_top = if with_dma { DMA_LIMIT } else { Pfn(0) };
        let mut spans = [None; NR_ZONE_KINDS];
        spans[ZoneKind::Dma.index()] = below(Pfn(0), dma_top);
        spans[ZoneKind::Dma32.index()] = below(dma_top, DMA32_LIMIT);
        spans[ZoneKind::Normal.index()] = below(DMA32_LIMIT, Pfn(u64::MAX));
        let movable = PfnRange::new(end, node.end);
        spans[ZoneKind::Movable.index()] = (!movable.is_empty()).then_some(movable);
        ZoneLayout { spans }
    }

    /// The span of `kind`, if the node has that zone.
    pub fn span(&self, kind: ZoneKind) -> Option<PfnRange> {
        self.spans[kind.index()]
    }

    /// The zones present, low to high.
    pub fn zones(&self) -> impl Iterator<Item = (ZoneKind, PfnRange)> + '_ {
        ZoneKind::ALL
            .into_iter()
            .filter_map(|k| Some((k, self.span(k)?)))
    }
}
