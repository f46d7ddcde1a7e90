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
use pageframe_compact::Migrator;
use pageframe_mobility::MigrateType;

use crate::contig::{ContigAllocation, ContigError};
use crate::lock::RawMutex;
use crate::machine::Machine;

/// Most CMA areas a machine keeps.
pub const MAX_CMA_AREAS: usize = 8;

/// A CMA area of a machine.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CmaId(pub u8);

/// One area's state: its range and counters.
pub(crate) struct CmaArea {
    range: PfnRange,
    held: AtomicU64,
    allocs: AtomicU64,
    failures: AtomicU64,
    moved: AtomicU64,
}

/// What an area holds and has done.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CmaStats {
    /// The area.
    pub range: PfnRange,
    /// Frames held by contiguous requests ([`Machine::cma_alloc`]).
    pub held: u64,
    /// Free frames in the area.
    pub free: u64,
    /// Frames of ordinary movable allocations in the area.
    pub movable: u64,
    /// Contiguous requests served.
    pub allocs: u64,
    /// Contiguous requests that failed.
    pub failures: u64,
    /// Frames migrated out of the area by contiguous requests.
    pub moved: u64,
}

impl<'a, R: RawMutex> Machine<'a, R> {
    /// Sets `range` aside as a CMA area (at set-up, after the memory was
    /// handed over): whole pageblocks of one zone, every frame free. Its
    /// pageblocks become CMA: movable allocations may use them, nothing
    /// else does.
    ///
    /// ```
    /// # use pageframe::{Machine, MachineConfig, NodeId, ZoneKind, Gfp, Pfn, PfnRange, Migrator, MigrateMode, MigrateError, Order};
    /// # let mut m: Box<Machine<'static>> = Machine::new_boxed(MachineConfig::SINGLE_NODE);
    /// # let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + (1 << 16)));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// struct Kernel; // copies frames and switches mappings
    /// impl Migrator for Kernel {
    ///     fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
    ///         Ok(())
    ///     }
    /// }
    /// // 64 MiB for a camera's buffers, set aside at boot.
    /// let area = PfnRange::new(Pfn((1 << 20) + (1 << 15)), Pfn((1 << 20) + (1 << 15) + (1 << 14)));
    /// let cam = m.add_cma_area(area).unwrap();
    /// // Meanwhile user pages may live there...
    /// let mut pages = Vec::new();
    /// while let Ok(a) = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO) {
    ///     pages.push(a.pfn);
    ///     if pages.len() == 40_000 { break; }
    /// }
    /// assert!(m.cma_stats(cam).unwrap().movable > 0);
    /// // ...until the driver takes 16 MiB back: they migrate out.
    /// let buf = m.cma_alloc(cam, 1 << 12, 1 << 9, &mut Kernel).unwrap();
    /// assert!(area.contains_range(&buf.range));
    /// let s = m.cma_stats(cam).unwrap();
    /// assert_eq!((s.held, s.allocs), (1 << 12, 1));
    /// m.cma_release(cam, buf.range).unwrap();
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
        if self
            .cma
            .iter()
            .flatten()
            .any(|a| !a.range.intersect(&range).is_empty())
        {
            return Err(ContigError::Isolated);
        }
        let z = self.zone_of(range.start).ok_or(ContigError::OutOfRange)?;
        if !z.span().contains_range(&range) {
            return Err(ContigError::OutOfRange);
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
            let mut p = range.start;
            while p < range.end {
                m.set_block_type(p, MigrateType::Cma)
                    .map_err(|_| ContigError::Busy { pfn: p })?;
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

    /// The area holding `pfn`.
    pub fn cma_of(&self, pfn: Pfn) -> Option<CmaId> {
        self.cma
            .iter()
            .map_while(Option::as_ref)
            .position(|a| a.range.contains(pfn))
            .map(|i| CmaId(i as u8))
    }

    /// `frames` contiguous frames aligned to `align` frames from area `id`
    /// (`cma_alloc`): the movable memory in the way migrates out through
    /// `migrator` (see [`Machine::alloc_contig_range`]).
    pub fn cma_alloc<M: Migrator + ?Sized>(
        &self,
        id: CmaId,
        frames: u64,
        align: u64,
        migrator: &mut M,
    ) -> Result<ContigAllocation, ContigError> {
        let area = self.cma_area(id).ok_or(ContigError::Invalid)?;
        if frames == 0 || !align.is_power_of_two() {
            return Err(ContigError::Invalid);
        }
        let z = self
            .zone_of(area.range.start)
            .ok_or(ContigError::OutOfRange)?;
        match self.contig_in(z, area.range, frames, align, migrator) {
            Ok(a) => {
                area.allocs.fetch_add(1, Relaxed);
                area.held.fetch_add(a.range.len(), Relaxed);
                area.moved.fetch_add(a.moved, Relaxed);
                Ok(a)
            }
            Err(e) => {
                area.failures.fetch_add(1, Relaxed);
                Err(e)
            }
        }
    }

    /// Gives back a range [`Machine::cma_alloc`] handed out from area `id`
    /// (`cma_release`); see [`Machine::free_contig_range`].
    pub fn cma_release(&self, id: CmaId, range: PfnRange) -> Result<(), FreeError> {
        let area = self.cma_area(id).ok_or(FreeError::OutOfRange)?;
        if !area.range.contains_range(&range) {
            return Err(FreeError::OutOfRange);
        }
        self.free_contig_range(range)?;
        area.held.fetch_sub(range.len(), Relaxed);
        Ok(())
    }

    /// Area `id`'s range and counters.
    pub fn cma_stats(&self, id: CmaId) -> Option<CmaStats> {
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
