//! CMA areas (Linux's contiguous memory allocator, spec 02 §8): ranges set
//! aside at set-up whose pageblocks are typed CMA. Until a driver needs
//! them they serve movable allocations (`ALLOC_CMA`: after the request's
//! own lists, or first while CMA holds more than half the zone's free
//! memory); a contiguous request on the area takes them back, migrating the
//! movable memory out ([`Machine::cma_alloc`], built on
//! [`Machine::alloc_contig_range`]). Unmovable memory never lands there, so
//! such a request only waits on the kernel's migrator.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_types::atomic::AtomicU64;

use pageframe_buddy::{BlockInfo, FreeError, Pfn, PfnRange};
use pageframe_mobility::MigrateType;

use crate::block::{Call, CmaBuffer, Refused};
use crate::cma_area::{CmaArea, CmaId, CmaStats, MAX_CMA_AREAS};
use crate::debug::Caller;
use crate::error::ContigError;
use crate::lock::Platform;
use crate::machine::Machine;
use crate::migrator::Migrator;

/// # CMA areas
///
/// Areas reserved for drivers' contiguous buffers that serve movable
/// allocations meanwhile (spec 03 §1(d)).
impl<'a, P: Platform> Machine<'a, P> {
    /// Sets `range` aside as a CMA area (at set-up, after the memory was
    /// handed over): whole pageblocks of one zone, every frame free. Its
    /// pageblocks become CMA: movable allocations may use them, nothing
    /// else does.
    ///
    /// ```
    /// # use pageframe::{Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind, compact::{MigrateError, MigrateMode}};
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + (1 << 16)));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// # use std::collections::HashMap;
    /// # #[derive(Default)]
    /// # struct Kernel(HashMap<Pfn, pageframe::Block>);
    /// # impl Migrator for Kernel {
    /// #     fn isolate(&mut self, p: Pfn, _: Order) -> Option<pageframe::Block> { self.0.remove(&p) }
    /// #     fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> { Ok(()) }
    /// #     fn putback(&mut self, b: pageframe::Block) { self.0.insert(b.pfn(), b); }
    /// #     fn migrated(&mut self, b: pageframe::Block, _: Pfn) { self.0.insert(b.pfn(), b); }
    /// # }
    /// // The kernel keeps its user pages and moves them when asked (see
    /// // [`Migrator`]: it copies frames and switches mappings).
    /// let mut kernel = Kernel::default();
    /// // 64 MiB for a camera's buffers, set aside at boot.
    /// let area = PfnRange::new(Pfn((1 << 20) + (1 << 15)), Pfn((1 << 20) + (1 << 15) + (1 << 14)));
    /// let cam = m.add_cma_area(area).unwrap();
    /// // Meanwhile user pages may live there...
    /// for _ in 0..40_000 {
    ///     let page = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO).unwrap();
    ///     kernel.0.insert(page.pfn(), page);
    /// }
    /// assert!(m.inspect().cma_stats(cam).unwrap().movable > 0);
    /// // ...until the driver takes 16 MiB back: they migrate out.
    /// let buf = m.cma_alloc(cam, 1 << 12, 1 << 9, &mut kernel).unwrap();
    /// assert!(area.contains_range(&buf.range()));
    /// assert!(kernel.0.keys().all(|p| !buf.range().contains(*p)));
    /// let s = m.inspect().cma_stats(cam).unwrap();
    /// assert_eq!((s.held, s.allocs), (1 << 12, 1));
    /// m.cma_release(buf).unwrap();
    /// ```
    pub fn add_cma_area(&mut self, range: PfnRange) -> Result<CmaId, ContigError> {
        let pb = self.mobility_config().pageblock_order;
        if range.is_empty() || !range.start.is_aligned(pb) || !range.end.is_aligned(pb) {
            return Err(ContigError::Invalid);
        }
        let n = self.cma.iter().take_while(|a| a.is_some()).count();
        if n == MAX_CMA_AREAS {
            return Err(ContigError::Invalid);
        }
        if let Some(a) = self
            .cma
            .iter()
            .flatten()
            .find(|a| !a.range.intersect(&range).is_empty())
        {
            return Err(ContigError::Overlap {
                pfn: a.range.intersect(&range).start,
            });
        }
        let z = self
            .zone_of(range.start)
            .ok_or(ContigError::OutOfRange { pfn: range.start })?;
        if !z.span().contains_range(&range) {
            return Err(ContigError::OutOfRange {
                pfn: z.span().end.max(range.start),
            });
        }
        z.with_zone(|m| {
            if let Some((p, info)) = m
                .buddy()
                .walk(range)
                .find(|(_, i)| !matches!(i, BlockInfo::Free { .. }))
            {
                return Err(match info {
                    BlockInfo::Hole => ContigError::Blocked {
                        pfn: p,
                        why: pageframe_mobility::Blocker::Hole,
                    },
                    _ => ContigError::Busy { pfn: p },
                });
            }
            // Every pageblock is checked before any is retyped: one that is
            // isolated or a highatomic reserve keeps its type, and then so
            // does every other.
            let blocks = m.mobility().pageblocks();
            let mut p = range.start;
            while p < range.end {
                if blocks.is_isolated(p) {
                    return Err(ContigError::Isolated { pfn: p });
                }
                if blocks.get(p) == Some(MigrateType::HighAtomic) {
                    return Err(ContigError::Busy { pfn: p });
                }
                p = p + pb.pages();
            }
            let mut p = range.start;
            while p < range.end {
                let r = m.set_block_type(p, MigrateType::Cma);
                debug_assert!(r.is_ok(), "checked above under the same lock: {r:?}");
                r.map_err(|_| ContigError::Busy { pfn: p })?;
                p = p + pb.pages();
            }
            Ok(())
        })?;
        for node in self.nodes_mut() {
            for zone in node.zones_mut() {
                if zone.span().contains_range(&range) {
                    zone.add_cma(range);
                }
            }
        }
        self.cma[n] = Some(CmaArea {
            range,
            held: AtomicU64::new(0),
            allocs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            moved: AtomicU64::new(0),
        });
        Ok(CmaId(n as u8))
    }

    fn cma_area(&self, id: CmaId) -> Option<&CmaArea> {
        self.cma.get(usize::from(id.0))?.as_ref()
    }

    /// See [`crate::debug::Inspect::cma_of`].
    pub(crate) fn cma_of(&self, pfn: Pfn) -> Option<CmaId> {
        self.cma
            .iter()
            .map_while(Option::as_ref)
            .position(|a| a.range.contains(pfn))
            .map(|i| CmaId(i as u8))
    }

    /// `frames` contiguous frames aligned to `align` frames from area `id`
    /// (`cma_alloc`): the movable memory in the way migrates out through
    /// `migrator` (see [`Machine::alloc_contig_range`]).
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn cma_alloc<M: Migrator + ?Sized>(
        &self,
        id: CmaId,
        frames: u64,
        align: u64,
        migrator: &mut M,
    ) -> Result<CmaBuffer, ContigError> {
        let area = self.cma_area(id).ok_or(ContigError::Invalid)?;
        if frames == 0 || !align.is_power_of_two() {
            return Err(ContigError::Invalid);
        }
        let z = self
            .zone_of(area.range.start)
            .ok_or(ContigError::OutOfRange {
                pfn: area.range.start,
            })?;
        let r = self.contig_in(z, area.range, frames, align, migrator, Caller::here());
        #[cfg(feature = "vmstat")]
        crate::debug::vmstat::MachineCounters::outcome(&self.vm.cma_success, &self.vm.cma_fail, &r);
        match r {
            Ok(a) => {
                area.allocs.fetch_add(1, Relaxed);
                area.held.fetch_add(a.len(), Relaxed);
                area.moved.fetch_add(a.moved(), Relaxed);
                Ok(CmaBuffer::new(id, a))
            }
            Err(e) => {
                area.failures.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    /// Gives back a buffer [`Machine::cma_alloc`] handed out
    /// (`cma_release`). A buffer of another machine is refused and handed
    /// back, the counters unchanged.
    pub fn cma_release(&self, buffer: CmaBuffer) -> Result<(), Refused<CmaBuffer>> {
        let (id, segment) = buffer.into_parts();
        let (Some(area), true) = (self.cma_area(id), segment.machine() == self.id) else {
            return Err(Refused::by(
                Call::Release,
                CmaBuffer::new(id, segment),
                FreeError::Foreign,
            ));
        };
        let len = segment.len();
        match self.free_segment(segment) {
            Ok(()) => {
                area.held.fetch_sub(len, Relaxed);
                Ok(())
            }
            Err(r) => {
                let why = r.reason();
                Err(Refused::by(
                    Call::Release,
                    CmaBuffer::new(id, r.into_inner()),
                    why,
                ))
            }
        }
    }

    /// See [`crate::debug::Inspect::cma_stats`].
    pub(crate) fn cma_stats(&self, id: CmaId) -> Option<CmaStats> {
        let a = self.cma_area(id)?;
        let z = self.zone_of(a.range.start)?;
        let (free, used) = z.inspect(|m| {
            m.buddy()
                .walk(a.range)
                .fold((0, 0), |(f, u), (p, info)| match info {
                    BlockInfo::Free { head, order, .. } => (
                        f + (head + order.pages()).min(a.range.end).get() - p.get(),
                        u,
                    ),
                    BlockInfo::Allocated { head, order, .. } => (
                        f,
                        u + (head + order.pages()).min(a.range.end).get() - p.get(),
                    ),
                    BlockInfo::Hole => (f, u),
                })
        });
        let held = a.held.load(Relaxed);
        Some(CmaStats {
            range: a.range,
            held,
            free,
            movable: used.saturating_sub(held),
            allocs: a.allocs.load(Relaxed),
            failures: a.failures.load(Relaxed),
            moved: a.moved.load(Relaxed),
        })
    }
}
