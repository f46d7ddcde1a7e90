//! Contiguous allocation of any number of frames (Linux `alloc_contig_range`
//! and `alloc_contig_pages`, spec 03 §1(d)): isolate the pageblocks of a
//! range, migrate its movable allocations out through the kernel's
//! [`Migrator`], and take the range once it is free. Not limited to powers
//! of two, nor to the buddy core's largest order: a 1 GiB page is a range
//! of 262,144 frames aligned to 1 GiB.
//!
//! The caller gets a [`Segment`] that owns the range; inside the zone the
//! range is held as the largest aligned blocks that tile it, each an
//! ordinary allocated block. [`Machine::free_segment`] gives it all back.

use pageframe_buddy::{BlockInfo, FreeError, MAX_PFN, Order, Pfn, PfnRange};
use pageframe_compact::{MigrateMode, evacuate_range};
use pageframe_mobility::{BlockError, Blocker, MigrateType};
use pageframe_types::unwind::OnUnwind;

use crate::block::{RawError, Refused, Segment};
use crate::error::ContigError;

// CMA: contiguous allocation from areas set aside for it.
pub use crate::block::CmaBuffer;
pub use crate::cma_area::{CmaId, CmaStats, MAX_CMA_AREAS};
use crate::compaction::{Guarded, Locked};
#[cfg(feature = "vmstat")]
use crate::debug::vmstat::MachineCounters;
use crate::debug::{Caller, Event, Hooks};
use crate::frame_state::State;
use crate::gfp::Gfp;
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::migrator::Migrator;
use crate::node_id::NodeId;
use crate::zone_core::{Holding, Zone};

/// Zones with at most this many aligned candidates have them all costed
/// (see [`Machine::alloc_contig`]).
pub(crate) const RANKED: usize = 64;

/// # Contiguous ranges
///
/// Any number of contiguous frames, a given range, or a 1 GiB page:
/// movable memory in the way migrates out through the kernel's
/// [`crate::Migrator`].
impl<'a, P: Platform> Machine<'a, P> {
    /// Allocates exactly the frames of `range` (`alloc_contig_range`): every
    /// pageblock it touches is isolated, the movable allocations inside it
    /// are migrated elsewhere through `migrator` (in [`MigrateMode::Sync`];
    /// its `drain_caches` is called so that frames parked in per-CPU caches
    /// come back, so implement it with [`Machine::drain_pcp`]), and the
    /// range is taken once free. The rest of the edge pageblocks goes back
    /// to circulation. Unmovable or pinned memory in the range is reported
    /// before anything moves.
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_contig_range<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
    ) -> Result<Segment, ContigError> {
        let r = self.contig_range(range, migrator, Caller::here());
        #[cfg(feature = "vmstat")]
        MachineCounters::outcome(&self.vm.contig_success, &self.vm.contig_fail, &r);
        r
    }

    /// [`Machine::alloc_contig_range`], uncounted (one attempt of a search).
    fn contig_range<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
        caller: Caller,
    ) -> Result<Segment, ContigError> {
        let (z, moved, _running) = self.empty_range(range, migrator)?;
        let _ = caller;
        z.with_zone(|m| {
            let taken = m.take_free_range(range, MigrateType::Unmovable);
            if taken.is_ok() {
                // One allocation: one owner record, in every block that
                // tiles it (a frame's record is never an older block's
                // while the range holds it).
                #[cfg(feature = "page-owner")]
                let owner = crate::debug::owner_record::Owner::of(caller, self.owner_seq.next());
                for (p, info) in m.buddy().walk(range) {
                    if let BlockInfo::Allocated { head, order, .. } = info
                        && head == p
                    {
                        #[cfg(feature = "page-owner")]
                        z.owners.set(p, order, owner);
                        z.states.set_allocated(p, order, MigrateType::Unmovable);
                    }
                }
            }
            let _ = m.unisolate_range(range);
            taken.map_err(|e| busy_at(e, range))
        })?;
        Ok(Segment::new(self.id, z.zone_ref(), range, moved))
    }

    /// Takes memory offline (Linux `offline_pages`): the range, whole
    /// pageblocks of one zone, is emptied as [`Machine::alloc_contig_range`]
    /// empties one (movable memory migrates out through `migrator`), then
    /// leaves the zone: its frames become holes, no longer managed, and the
    /// watermarks are recomputed. When the range cannot be emptied the
    /// error names what blocks it and nothing is lost (the range stays
    /// online). [`Machine::add_free_range`] brings it back online. Returns
    /// the frames migrated. Migration destinations come from the range's
    /// own zone, so a zone cannot be emptied whole while it holds data
    /// ([`ContigError::NoMemory`]).
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
    /// let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::new(9).unwrap()).unwrap();
    /// // 128 MiB of whole pageblocks, the user block among them, go offline.
    /// let start = a.pfn().align_down(Order::new(15).unwrap());
    /// let range = PfnRange::new(start, start + (1 << 15));
    /// kernel.0.insert(a.pfn(), a);
    /// let before = m.inspect().managed_pages();
    /// assert_eq!(m.offline_range(range, &mut kernel), Ok(512)); // the block moved out
    /// assert!(kernel.0.keys().all(|p| !range.contains(*p))); // and the kernel has its new place
    /// assert_eq!(m.inspect().managed_pages(), before - (1 << 15));
    /// m.add_free_range(range).unwrap(); // and back online
    /// assert_eq!(m.inspect().managed_pages(), before);
    /// ```
    pub fn offline_range<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
    ) -> Result<u64, ContigError> {
        let r = self.offline(range, migrator);
        #[cfg(feature = "vmstat")]
        MachineCounters::outcome(&self.vm.offline_success, &self.vm.offline_fail, &r);
        r
    }

    fn offline<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
    ) -> Result<u64, ContigError> {
        let pb = self.mobility_config().pageblock_order;
        if range.is_empty() || !range.start.is_aligned(pb) || !range.end.is_aligned(pb) {
            return Err(ContigError::Invalid);
        }
        let z = self
            .zone_of(range.start)
            .ok_or(ContigError::OutOfRange { pfn: range.start })?;
        if let Some((pfn, _)) = z.inspect(|m| {
            m.buddy()
                .walk(range.intersect(&z.span()))
                .find(|(_, i)| matches!(i, BlockInfo::Hole))
        }) {
            return Err(ContigError::NotOnline { pfn });
        }
        let (z, moved, _running) = self.empty_range(range, migrator)?;
        // The range leaves the zone and the watermarks follow under the
        // set-up lock, as a hand-over brings memory in.
        let setup = self.setup();
        z.with_zone(|m| {
            let r = m
                .take_free_range(range, MigrateType::Unmovable)
                .and_then(|()| m.remove_range(range));
            let _ = m.unisolate_range(range);
            r.map_err(|e| busy_at(e, range))
        })?;
        self.recompute_watermarks_locked(&setup);
        Ok(moved)
    }

    /// Empties `range` (whole pageblocks holding only free and movable
    /// memory) by migrating its movable memory out through `migrator`, and
    /// gives it back to the free lists: room made for a request that needs
    /// free memory there. Returns the frames moved.
    pub(crate) fn make_room<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
    ) -> Result<u64, ContigError> {
        let (z, moved, _running) = self.empty_range(range, migrator)?;
        z.with_zone(|m| {
            let _ = m.unisolate_range(range);
            m.note_room_made();
        });
        Ok(moved)
    }

    /// Isolates the pageblocks of `range` and migrates its movable memory
    /// out; on success the range is wholly free, its pageblocks still
    /// isolated, and the zone counts the operation until the returned guard
    /// drops. On error (or a panic in the migrator) nothing stays isolated.
    fn empty_range<M: Migrator + ?Sized>(
        &self,
        range: PfnRange,
        migrator: &mut M,
    ) -> Result<(&Zone<'a, P::Lock>, u64, Holding<'_>), ContigError> {
        if range.is_empty() {
            return Err(ContigError::Invalid);
        }
        let z = self
            .zone_of(range.start)
            .ok_or(ContigError::OutOfRange { pfn: range.start })?;
        if !z.span().contains_range(&range) {
            return Err(ContigError::OutOfRange {
                pfn: z.span().end.max(range.start),
            });
        }
        let running = z.hold();
        // Chunks the order-0 stripes hold read as unmovable, and blocks of
        // the pageblock pool as cached: give them back first (once more if
        // a stripe took one of the range meanwhile; once isolated, the
        // range's free memory is on no list a stripe takes).
        let mut tries = 0;
        loop {
            z.release_stripes();
            z.release_pool();
            tries += 1;
            let r = z.with_zone(|m| {
                if let Some((pfn, why)) = m.range_blocker(range) {
                    return Err(ContigError::Blocked { pfn, why });
                }
                m.isolate_range(range).map_err(|e| match e {
                    BlockError::AlreadyIsolated => ContigError::Isolated {
                        pfn: first_isolated(m, range),
                    },
                    BlockError::Unmovable { pfn } => ContigError::Blocked {
                        pfn,
                        why: Blocker::Unmovable,
                    },
                    BlockError::PartialBlock => {
                        let pb = m.pageblock_span(range);
                        let span = m.span();
                        ContigError::PartialPageblock {
                            pfn: if pb.start < span.start {
                                range.start
                            } else {
                                Pfn(range.end.get() - 1)
                            },
                        }
                    }
                    _ => ContigError::OutOfRange { pfn: range.start },
                })
            });
            // A frame free in a CPU's cache reads as an allocation of its
            // type to the core (unmovable for most): it is free memory the
            // kernel's drain gives back, not memory in the way (Linux's
            // isolation passes over frames with no reference for the same
            // reason, and drains the caches after).
            let cached = |pfn| matches!(z.states.get(pfn), State::Cached(_));
            let r = match r {
                Err(ContigError::Blocked { pfn, .. }) if cached(pfn) && tries < 3 => {
                    migrator.drain_caches();
                    continue;
                }
                Err(ContigError::Blocked { pfn, .. }) if cached(pfn) => {
                    Err(ContigError::Busy { pfn })
                }
                r => r,
            };
            match r {
                Err(ContigError::Blocked { pfn, .. }) if tries < 3 && z.stripes.holds(pfn) => {}
                r => {
                    if P::Hooks::TRACE {
                        self.hooks.event(&Event::Isolate {
                            range,
                            ok: r.is_ok(),
                        });
                    }
                    break r;
                }
            }
        }?;
        // The range stays isolated until the caller takes it; a panic in
        // the kernel's migrator gives it back.
        let undo = OnUnwind::new(|| {
            let _ = z.with_zone(|m| m.unisolate_range(range));
        });
        let mut guarded = Guarded::new(migrator, self);
        let r = evacuate_range(&Locked(z), range, &mut guarded, MigrateMode::Sync);
        undo.disarm();
        match r {
            Ok(e) => Ok((z, e.moved, running)),
            Err(e) => {
                let _ = z.with_zone(|m| m.unisolate_range(range));
                Err(e.into())
            }
        }
    }

    /// Allocates `frames` contiguous frames aligned to `align` frames (a
    /// power of two) for a task on `node` (`alloc_contig_pages`): the zones
    /// `gfp` allows are searched in zonelist order, low to high inside each,
    /// for a range holding only free and movable memory, which
    /// [`Machine::alloc_contig_range`] then takes: in a zone of at most
    /// 64 aligned candidates, the candidate with the fewest movable
    /// frames first; otherwise the first that works. A 1 GiB page on
    /// x86-64 is `alloc_contig(node, gfp, 1 << 18, 1 << 18, migrator)`.
    ///
    /// ```
    /// # use pageframe::{Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind, compact::{MigrateError, MigrateMode}};
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(1 << 20), Pfn(2 << 20));
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
    /// // 3000 frames (12 MiB less 288 KiB) for a DMA buffer, 2 MiB aligned...
    /// let buf = m.alloc_contig(NodeId::ZERO, Gfp::KERNEL, 3000, 512, &mut kernel).unwrap();
    /// assert_eq!(buf.len(), 3000);
    /// // ...and a 1 GiB page.
    /// let giant = m.alloc_contig(NodeId::ZERO, Gfp::KERNEL, 1 << 18, 1 << 18, &mut kernel).unwrap();
    /// assert_eq!(giant.start().get() % (1 << 18), 0);
    /// m.free_segment(buf).unwrap();
    /// m.free_segment(giant).unwrap();
    /// assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    /// ```
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_contig<M: Migrator + ?Sized>(
        &self,
        node: NodeId,
        gfp: Gfp,
        frames: u64,
        align: u64,
        migrator: &mut M,
    ) -> Result<Segment, ContigError> {
        let r = self.contig(node, gfp, frames, align, migrator, Caller::here());
        #[cfg(feature = "vmstat")]
        MachineCounters::outcome(&self.vm.contig_success, &self.vm.contig_fail, &r);
        r
    }

    fn contig<M: Migrator + ?Sized>(
        &self,
        node: NodeId,
        gfp: Gfp,
        frames: u64,
        align: u64,
        migrator: &mut M,
        caller: Caller,
    ) -> Result<Segment, ContigError> {
        if frames == 0 || frames > MAX_PFN || !align.is_power_of_two() || align > MAX_PFN {
            return Err(ContigError::Invalid);
        }
        let (list, highest) = self.prepare(node, gfp).map_err(|_| ContigError::Invalid)?;
        let mut last = ContigError::NotFound;
        for r in list.eligible(highest) {
            let Some(z) = self.zone(r) else { continue };
            match self.contig_in(z, z.span(), frames, align, migrator, caller) {
                Ok(a) => return Ok(a),
                Err(ContigError::Invalid) => return Err(ContigError::Invalid),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The part `within` of one zone. When it holds at most [`RANKED`]
    /// aligned candidates (large alignments, such as 1 GiB pages), every
    /// candidate is costed and the cheapest are tried first, so that the
    /// fewest frames move; otherwise first fit, skipping past whatever
    /// blocks a candidate.
    pub(crate) fn contig_in<M: Migrator + ?Sized>(
        &self,
        z: &Zone<'a, P::Lock>,
        within: PfnRange,
        frames: u64,
        align: u64,
        migrator: &mut M,
        caller: Caller,
    ) -> Result<Segment, ContigError> {
        let span = z.span();
        let area = within.intersect(&span);
        if frames > area.len() {
            return Err(ContigError::NotFound);
        }
        let first = align_up(area.start.get(), align).ok_or(ContigError::NotFound)?;
        // Frames the order-0 stripes and the pageblock pool hold are free
        // but read as taken to the search: give them back first, or it
        // passes over their chunks.
        z.release_stripes();
        z.release_pool();
        let candidate = |start: u64| {
            let end = start.checked_add(frames).filter(|&e| e <= area.end.get())?;
            Some(PfnRange::new(Pfn(start), Pfn(end)))
        };
        // One short critical section per look: the movable frames a
        // candidate holds, or where it is blocked.
        let cost = |cand: PfnRange| {
            z.inspect(|m| {
                if !span.contains_range(&m.pageblock_span(cand)) {
                    return Err(cand.start);
                }
                m.range_usage(cand).map_err(|(p, _)| p)
            })
        };
        let count = area.end.get().saturating_sub(first) / align;
        if count <= RANKED as u64 {
            let mut ranked = [(0u64, 0u64); RANKED];
            let mut n = 0;
            let mut start = first;
            while let Some(cand) = candidate(start) {
                if let Ok(c) = cost(cand) {
                    ranked[n] = (c, start);
                    n += 1;
                }
                start = match start.checked_add(align) {
                    Some(s) if n < RANKED => s,
                    _ => break,
                };
            }
            ranked[..n].sort_unstable();
            for &(_, start) in &ranked[..n] {
                let cand = candidate(start).ok_or(ContigError::NotFound)?;
                match self.contig_range(cand, migrator, caller) {
                    Ok(a) => return Ok(a),
                    Err(ContigError::NoMemory) => return Err(ContigError::NoMemory),
                    Err(_) => {}
                }
            }
            return Err(ContigError::NotFound);
        }
        let mut start = first;
        while let Some(cand) = candidate(start) {
            let skip_to = match cost(cand) {
                Err(p) => Some(p),
                Ok(_) => match self.contig_range(cand, migrator, caller) {
                    Ok(a) => return Ok(a),
                    Err(ContigError::Blocked { pfn, .. } | ContigError::Refused { pfn }) => {
                        Some(pfn)
                    }
                    // Every allocation still in the candidate was tried and
                    // stayed: any later candidate holding one of them fails
                    // the same way.
                    Err(ContigError::Busy { pfn }) => {
                        Some(z.inspect(|m| last_in_use(m, cand)).unwrap_or(pfn))
                    }
                    Err(ContigError::NoMemory) => return Err(ContigError::NoMemory),
                    Err(_) => None,
                },
            };
            // Past the blocking frame, or to the next candidate.
            let next = match skip_to {
                Some(p) if p.get() >= start => p.get() + 1,
                _ => start + 1,
            };
            start = match align_up(next, align) {
                Some(s) => s,
                None => break,
            };
        }
        Err(ContigError::NotFound)
    }

    /// Gives a segment back ([`Machine::alloc_contig`],
    /// [`Machine::alloc_contig_range`], or one made from its range by
    /// [`Machine::segment_from_raw`]). A segment of another machine is
    /// refused and handed back.
    pub fn free_segment(&self, segment: Segment) -> Result<(), Refused<Segment>> {
        let range = segment.range();
        let z = match self.zone_of(range.start) {
            Some(z) if segment.machine() == self.id => z,
            _ => return Err(Refused::new(segment, FreeError::Foreign)),
        };
        self.poison_range_free(z, range);
        match z.free_range(range) {
            Ok(()) => {
                self.freed_range(z, range);
                Ok(())
            }
            Err(e) => Err(Refused::new(segment, e.why)),
        }
    }

    /// The range a kernel kept as numbers ([`Segment::into_raw`], a
    /// page-table entry of a 1 GiB page) as a [`Segment`] again. A range
    /// that is not tiled by live allocations wholly inside it (in one zone
    /// of this machine) gets a [`RawError`] naming the first frame at
    /// fault and why.
    ///
    /// # Safety
    ///
    /// If the range is tiled by live allocations (the call then succeeds),
    /// they are the caller's: they came from this machine as allocations
    /// the caller turned into this range, and from now on the caller
    /// neither uses the range as its own nor makes a second segment or
    /// block of any of it. Any other range is refused, with nothing
    /// changed.
    pub unsafe fn segment_from_raw(&self, range: PfnRange) -> Result<Segment, RawError> {
        let err = |pfn, why| RawError { pfn, why };
        if range.is_empty() {
            return Err(err(range.start, FreeError::OutOfRange));
        }
        let r = self
            .zone_ref_of(range.start)
            .ok_or(err(range.start, FreeError::OutOfRange))?;
        let z = self
            .zone(r)
            .ok_or(err(range.start, FreeError::OutOfRange))?;
        if !z.span().contains_range(&range) {
            return Err(err(z.span().end, FreeError::OutOfRange));
        }
        z.check_range(range)?;
        Ok(Segment::new(self.id, r, range, 0))
    }
}

impl<R: RawMutex> Zone<'_, R> {
    /// Whether `range` is tiled by live allocations wholly inside it: the
    /// first frame at fault and why.
    pub(crate) fn check_range(&self, range: PfnRange) -> Result<(), RawError> {
        let z = self.inner.lock();
        self.check_tiling(&z, range)
    }

    fn check_tiling(
        &self,
        z: &crate::zone_core::ZoneInner<'_>,
        range: PfnRange,
    ) -> Result<(), RawError> {
        let err = |pfn, why| RawError { pfn, why };
        for (p, info) in z.buddy.buddy().walk(range) {
            match info {
                BlockInfo::Allocated { head, order, .. }
                    if head == p && head + order.pages() <= range.end =>
                {
                    match self.states.get(p) {
                        State::Allocated(o, _) if o == order => {}
                        State::Allocated(o, _) => {
                            return Err(err(p, FreeError::WrongOrder { allocated: o }));
                        }
                        State::Isolated(_) | State::MovedOut(_) => {
                            return Err(err(p, FreeError::Busy));
                        }
                        State::Cached(_) | State::Free => {
                            return Err(err(p, FreeError::AlreadyFree));
                        }
                    }
                }
                // Its head in the range, its end past it.
                BlockInfo::Allocated { head, order, .. } if head == p => {
                    return Err(err(p, FreeError::PartOfBlock { head, order }));
                }
                BlockInfo::Allocated { head, order, .. } => {
                    return Err(err(p, FreeError::NotBlockHead { head, order }));
                }
                BlockInfo::Free { .. } => return Err(err(p, FreeError::AlreadyFree)),
                BlockInfo::Hole => return Err(err(p, FreeError::Hole)),
            }
        }
        Ok(())
    }

    /// See [`Machine::free_segment`]: under the lock, every block of
    /// `range` is checked to be a live allocation inside it, claimed in the
    /// ownership bytes (a free racing it, which only an `unsafe` number can
    /// make, makes the whole call fail, undone), then freed.
    pub(crate) fn free_range(&self, range: PfnRange) -> Result<(), RawError> {
        let mut z = self.inner.lock();
        self.check_tiling(&z, range)?;
        // Claim every block (lock-free cache frees may race).
        let mut failed: Option<(Pfn, FreeError)> = None;
        for (p, info) in z.buddy.buddy().walk(range) {
            if let BlockInfo::Allocated { order, .. } = info
                && let Err(e) = self.states.take_for_range(p, order)
            {
                failed = Some((p, e));
                break;
            }
        }
        if let Some((at, e)) = failed {
            for (p, info) in z.buddy.buddy().walk(PfnRange::new(range.start, at)) {
                if let BlockInfo::Allocated { order, .. } = info {
                    let mt = z.buddy.allocated_type(p).unwrap_or(MigrateType::Unmovable);
                    self.states
                        .set_allocated_as(p, order, mt, z.buddy.is_pinned(p));
                }
            }
            return Err(RawError { pfn: at, why: e });
        }
        let mut p = range.start;
        while p < range.end {
            let order = match z.buddy.buddy().block_at(p) {
                Some(BlockInfo::Allocated { order, .. }) => order,
                _ => Order::ZERO,
            };
            let r = z.buddy.free(p, order);
            debug_assert!(r.is_ok(), "checked above under the same lock");
            self.states.set_free(p);
            p = p + order.pages();
        }
        self.after_zone_op(&z);
        Ok(())
    }
}

/// The last frame of the last allocation inside `range`, if any.
fn last_in_use(m: &pageframe_mobility::MobileZone<'_>, range: PfnRange) -> Option<Pfn> {
    m.buddy()
        .walk(range)
        .filter_map(|(_, info)| match info {
            BlockInfo::Allocated { head, order, .. } => Some(head + (order.pages() - 1)),
            _ => None,
        })
        .last()
}

/// The first frame of an isolated pageblock that `range` touches (`range`'s
/// start if none is: a race that ended meanwhile).
fn first_isolated(m: &pageframe_mobility::MobileZone<'_>, range: PfnRange) -> Pfn {
    let blocks = m.mobility().pageblocks();
    let span = m.pageblock_span(range);
    let step = m.pageblock_order().pages();
    let mut p = span.start;
    while p < span.end {
        if blocks.is_isolated(p) {
            return p.max(range.start);
        }
        p = p + step;
    }
    range.start
}

/// The frame a failed take names (a frame still in use: `Busy`).
fn busy_at(e: pageframe_buddy::RangeError, range: PfnRange) -> ContigError {
    use pageframe_buddy::RangeError as E;
    ContigError::Busy {
        pfn: match e {
            E::Busy { pfn } | E::Hole { pfn } | E::NotBlockAligned { pfn } => pfn,
            _ => range.start,
        },
    }
}

fn align_up(v: u64, align: u64) -> Option<u64> {
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}
