//! The per-CPU page caches in front of a zone ([`pageframe_pcp`], spec 04,
//! docs/rules/04-pcp.md): the zone side of their protocol (refill and spill
//! under one lock acquisition each) and the cached allocation and free
//! paths, which never take the zone lock on a hit.
//!
//! A zone owns its caches: the slots live in memory handed to
//! [`crate::Machine::enable_pcp`], and a CPU reaches them only through the
//! handle [`crate::Machine::cpu`] gives out, which claims that CPU's cache
//! of every zone at once. A cache of one zone can therefore never be used
//! with another zone. Frees through a cache are checked against the
//! ownership bytes ([`crate::frame_state`]) by compare-and-swap, so a
//! double free, a free of the wrong order or a free racing another CPU's
//! free of the same frame gets a typed error and changes nothing.

use core::mem::MaybeUninit;

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange};
use pageframe_mobility::MigrateType;
use pageframe_pcp::{
    CpuId, HomeFree, LocalPcp, PcpConfig, PcpSet, PcpSizing, PcpSlot, PcpZone, PerCpuPages,
    RefillSink, Slot, SpillBatch, ZoneFlags, ZoneGeometry, pcp_list_type,
};

use crate::block::ZoneMeta;
use crate::debug::vmstat::{CpuCounters, Refilled, ZoneCounters};
use crate::debug::{Event, Hooks, NoHooks};
use crate::error::{AllocError, PcpSetupError};
use crate::frame_state::FrameStates;
use crate::gfp::{AllocFlags, Gfp};
use crate::lock::{Platform, RawMutex};
use crate::zone_core::Zone;
use crate::zone_kind::{MAX_ZONES, ZoneKind, ZoneRef};
use pageframe_types::carve;

/// A zone, this CPU's claimed cache of it, and what every block of the
/// zone carries ([`crate::Block::zone_meta`]).
pub(crate) type Claimed<'m, 'a, R> = (&'m Zone<'a, R>, LocalPcp<'a, 'a>, ZoneMeta);

/// One CPU's claimed caches, by zone index ([`ZoneRef::index`]), each with
/// its zone. The cache of the zone a kernel's ordinary request tries first
/// is kept apart, at a fixed place: a hit path finds it without an index to
/// scale or a second option to test.
pub(crate) struct Locals<'m, 'a, R: RawMutex> {
    /// The claimed cache of zone `first_i`.
    first: Option<Claimed<'m, 'a, R>>,
    /// The zone index of `first`; `usize::MAX` without one.
    first_i: usize,
    /// Every other zone's claimed cache, by zone index.
    by_zone: [Option<Claimed<'m, 'a, R>>; MAX_ZONES],
    /// The CPU whose caches they are.
    pub(crate) cpu: CpuId,
}

/// Where a request's first zone's claimed cache is in [`Locals`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Preferred {
    /// No cache of that zone.
    None,
    /// [`Locals::first`].
    First,
    /// Another zone's, by zone index.
    At(u8),
}

impl<'m, 'a, R: RawMutex> Locals<'m, 'a, R> {
    /// No cache claimed yet, for CPU `cpu`.
    pub(crate) fn new(cpu: CpuId) -> Self {
        Locals {
            first: None,
            first_i: usize::MAX,
            by_zone: core::array::from_fn(|_| None),
            cpu,
        }
    }

    /// Keeps `c`, the claimed cache of the zone of index `i`, apart as the
    /// first if `first`.
    pub(crate) fn insert(&mut self, i: usize, c: Claimed<'m, 'a, R>, first: bool) {
        if first {
            self.first = Some(c);
            self.first_i = i;
        } else {
            self.by_zone[i % MAX_ZONES] = Some(c);
        }
    }

    /// Where the claimed cache of the zone of index `i` is.
    pub(crate) fn preferred(&self, i: usize) -> Preferred {
        const { assert!(MAX_ZONES <= 256) };
        if i == self.first_i {
            Preferred::First
        } else if self.by_zone.get(i).is_some_and(Option::is_some) {
            Preferred::At(i as u8)
        } else {
            Preferred::None
        }
    }

    #[inline]
    pub(crate) fn get(&mut self, r: ZoneRef) -> Option<&mut LocalPcp<'a, 'a>> {
        Some(&mut self.entry(r)?.1)
    }

    #[inline]
    pub(crate) fn entry(&mut self, r: ZoneRef) -> Option<&mut Claimed<'m, 'a, R>> {
        self.at(r.index())
    }

    /// The claimed cache of the zone of index `i` ([`ZoneRef::index`]).
    #[inline(always)]
    pub(crate) fn at(&mut self, i: usize) -> Option<&mut Claimed<'m, 'a, R>> {
        if i == self.first_i {
            return self.first.as_mut();
        }
        // Zone indices are below `MAX_ZONES`, a power of two: the mask
        // changes none and spares the hit paths a bounds check.
        const { assert!(MAX_ZONES.is_power_of_two()) };
        self.by_zone[i % MAX_ZONES].as_mut()
    }

    /// The claimed cache `p` names.
    #[inline(always)]
    pub(crate) fn of(&mut self, p: Preferred) -> Option<&mut Claimed<'m, 'a, R>> {
        match p {
            Preferred::First => self.first.as_mut(),
            Preferred::At(i) => self.by_zone[usize::from(i) % MAX_ZONES].as_mut(),
            Preferred::None => None,
        }
    }

    /// The first zone's claimed cache.
    #[inline(always)]
    pub(crate) fn first(&mut self) -> Option<&mut Claimed<'m, 'a, R>> {
        self.first.as_mut()
    }
}

/// Orders the per-CPU caches hold: 0..=3 and the pageblock order (spec 04
/// §2.2).
pub(crate) fn cached_order(order: Order) -> bool {
    order.get() <= pageframe_pcp::COSTLY_ORDER || order == Order::HUGE_2M
}

impl<'a, R: RawMutex> Zone<'a, R> {
    /// The sizing the zone's caches get for `cpus` CPUs on its node, with
    /// `vm.percpu_pagelist_high_fraction` at `fraction` (0: auto-tuned).
    fn pcp_sizing(&self, cpus: u32, fraction: u32) -> Result<PcpSizing, PcpSetupError> {
        PcpSizing::for_zone(ZoneGeometry {
            managed_pages: self.managed_pages(),
            low_wmark: self.watermarks().low,
            page_size: pageframe_buddy::PAGE_SIZE,
            local_cpus: cpus.max(1),
            high_fraction: fraction,
        })
        .map_err(PcpSetupError::Sizing)
    }

    /// New sizing for every CPU's cache of this zone (`pageset_update`,
    /// spec 04 §2.3): each owner applies it at its next operation.
    pub(crate) fn update_pcp_sizing(
        &self,
        local_cpus: u32,
        fraction: u32,
    ) -> Result<(), PcpSetupError> {
        if let Some(set) = &self.pcp {
            set.update_sizing(self.pcp_sizing(local_cpus, fraction)?);
        }
        Ok(())
    }

    /// The caches' configuration: order-0 lists keep to a few home chunks, so
    /// the caches keep the zone's fullest-first placement (see
    /// `PcpConfig::with_home`).
    fn pcp_config(&self) -> Result<PcpConfig, PcpSetupError> {
        let chunk = self.inner.lock().buddy.buddy().chunk_order();
        PcpConfig::X86_64
            .with_home(chunk)
            .map_err(PcpSetupError::Sizing)
    }

    /// Bytes [`Zone::enable_pcp`] needs for `cpus` caches of which
    /// `local_cpus` are on the zone's node.
    pub(crate) fn pcp_bytes(&self, cpus: u32, local_cpus: u32) -> Result<usize, PcpSetupError> {
        let slots = self
            .pcp_sizing(local_cpus, 0)?
            .suggested_slots(self.pcp_config()?);
        let per_cpu = carve::bytes_for::<Slot>(slots).ok_or(PcpSetupError::CpuCount)?;
        // The counters are zero-sized without the `vmstat` feature: no
        // bytes.
        let per_cpu = carve::bytes_for::<ZoneCounters>(1)
            .and_then(|c| per_cpu.checked_add(c))
            .ok_or(PcpSetupError::CpuCount)?;
        carve::bytes_for::<PcpSlot<'static>>(cpus as usize)
            .and_then(|b| per_cpu.checked_mul(cpus as usize)?.checked_add(b))
            .ok_or(PcpSetupError::CpuCount)
    }

    /// Builds the zone's caches for `cpus` CPUs from the front of `mem`;
    /// returns the rest.
    pub(crate) fn enable_pcp(
        &mut self,
        cpus: u32,
        local_cpus: u32,
        mem: &'a mut [MaybeUninit<u8>],
    ) -> Result<&'a mut [MaybeUninit<u8>], PcpSetupError> {
        if self.pcp.is_some() {
            return Err(PcpSetupError::AlreadyEnabled);
        }
        let needed = self.pcp_bytes(cpus, local_cpus)?;
        let given = mem.len();
        let too_small = PcpSetupError::MemoryTooSmall { needed, given };
        let sizing = self.pcp_sizing(local_cpus, 0)?;
        let config = self.pcp_config()?;
        let n = sizing.suggested_slots(config);
        let (array, mut rest) = carve::carve::<PcpSlot<'a>>(mem, cpus as usize).ok_or(too_small)?;
        for slot in array.iter_mut() {
            let (lists, r) = carve::carve_init(rest, n, |_| Slot::EMPTY).ok_or(too_small)?;
            rest = r;
            let cache = PerCpuPages::new(lists, sizing, config).map_err(PcpSetupError::Sizing)?;
            slot.write(PcpSlot::new(cache));
        }
        let (counters, rest) = CpuCounters::carve(rest, cpus as usize).ok_or(too_small)?;
        self.vm_cpus = counters;
        // SAFETY: the loop above wrote every element (an early return leaves
        // the memory unused and the zone without caches).
        let slots: &'a [PcpSlot<'a>] = unsafe { carve::assume_init(array) };
        self.pcp = Some(PcpSet::new(slots));
        Ok(rest)
    }

    /// The lock-free watermark check of the cached path (Linux's
    /// `zone_watermark_fast` shortcut): after taking the block, the free
    /// frames counted at the last zone operation stay above the mark and
    /// the reserve held against this requester. A racy read: a cache refill
    /// rechecks under the lock.
    #[inline]
    pub(crate) fn watermark_fast(
        &self,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> bool {
        self.free_hint().saturating_sub(order.pages() - 1) > self.fast_threshold(flags, highest)
    }

    /// Whether a request of `order` with `flags` may be served from a
    /// cache (a CPU's, or the zone's pageblock pool): an ordinary one (no reserve access: those go to the zone,
    /// where the reserves are) that leaves the zone above its mark.
    #[inline(always)]
    pub(crate) fn cache_may_serve(
        &self,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> bool {
        !flags.intersects(AllocFlags::RESERVES | AllocFlags::NO_WATERMARKS)
            && self.watermark_fast(order, flags, highest)
    }

    /// A block from this CPU's cache (refilled from the zone if empty), or
    /// `None` when the request is not one the cache serves or the cache and
    /// its refill come back empty.
    #[inline(always)]
    pub(crate) fn cache_hit<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Option<Pfn> {
        if !(cached_order(order) && self.cache_may_serve(order, flags, highest)) {
            return None;
        }
        self.take_cached(hooks, local, order, gfp.migratetype())
    }

    /// [`Zone::cache_hit`] of an order-0 request that this CPU's cache
    /// serves as it is, from its hot frames or its home, with no call on
    /// the way (a caller's hit path then needs no stack frame): `None`,
    /// nothing changed, when both are empty, a remote request waits, or
    /// the request is not one the cache serves; the caller then takes
    /// [`Zone::cache_hit`].
    #[inline(always)]
    pub(crate) fn cache_home_hit<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        gfp: Gfp,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Option<Pfn> {
        if flags.intersects(AllocFlags::RESERVES | AllocFlags::NO_WATERMARKS) {
            return None;
        }
        let mt = gfp.migratetype();
        // spec 04 §5.7: a hot frame first, with no watermark check (it is
        // not the zone's free memory, and handing it out takes none of
        // it); then the home, if the zone stays above its mark.
        let p = local.alloc_hit(mt, || self.watermark_fast(Order::ZERO, flags, highest))?;
        self.states.set_allocated(p, Order::ZERO, mt);
        self.vm(hooks.cpu).pcp_hit();
        Some(p)
    }

    /// A block of `order` off this CPU's own list (refilled from the zone
    /// if empty), marked allocated: it came off our list, so it is ours.
    #[inline(always)]
    fn take_cached<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        order: Order,
        mt: MigrateType,
    ) -> Option<Pfn> {
        let p = local.alloc(&hooks.on(self), order, mt).ok()?;
        self.states.set_allocated(p, order, mt);
        if !hooks.refilled.seen() {
            self.vm(hooks.cpu).pcp_hit();
        }
        Some(p)
    }

    /// `n` contiguous frames (2..=64) from this CPU's cache's home
    /// ([`LocalPcp::alloc_run`]), or else from the zone as one run
    /// ([`Zone::alloc_frame_run`]), each marked an order-0 allocation:
    /// `None` (nothing taken) for a request the cache would not serve (see
    /// [`Zone::cache_hit`]; the watermark is checked for the power of two
    /// holding `n`) or when neither has such a run.
    #[inline]
    pub(crate) fn cache_run<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        gfp: Gfp,
        n: u32,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Option<Pfn> {
        let order = Order::new(n.checked_next_power_of_two()?.trailing_zeros() as u8)?;
        if !self.cache_may_serve(order, flags, highest) {
            return None;
        }
        let mt = gfp.migratetype();
        let Some(p) = local.alloc_run(&hooks.on(self), n, mt) else {
            return self.alloc_frame_run(gfp, n);
        };
        self.states.set_allocated_run(p, n as usize, mt);
        for _ in 0..n {
            self.vm(hooks.cpu).pcp_hit();
        }
        Some(p)
    }

    /// Frees the `n` contiguous order-0 allocations from `pfn` (1..=64)
    /// through this CPU's cache, as [`Zone::free_cached`] of each would:
    /// their ownership bytes go to cached first, all or none. `false`
    /// (nothing changed) when one of them is no unpinned order-0
    /// allocation of the first one's type (a run of mixed types goes back
    /// frame by frame), or is a non-movable frame of a CMA area, and for a
    /// run of several frames that the cache's home does not take whole:
    /// the caller's general path decides. `taken` sees the run once all of
    /// it is the caller's to free and before any of it reaches the cache
    /// (the poisoning hook; a run the home refuses has been seen by then).
    /// Inline at its one caller: the run's free makes one call, the cache's.
    #[inline(always)]
    pub(crate) fn free_run_cached<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        pfn: Pfn,
        n: u32,
        taken: impl FnOnce(PfnRange),
    ) -> Result<bool, FreeError> {
        if !(1..=64).contains(&n) {
            return Ok(false);
        }
        let run = PfnRange::new(pfn, pfn + u64::from(n));
        let Some(mt) = self.states.take_run_for_cache(pfn, n as usize) else {
            return Ok(false);
        };
        // A CMA area's frames stay out of the caches' other lists.
        if mt != MigrateType::Movable
            && self.range_in_cma(run)
            && (pfn.get()..run.end.get()).any(|f| self.in_cma(Pfn(f)))
        {
            self.states.give_back_run(pfn, n as usize, mt);
            return Ok(false);
        }
        taken(run);
        let list = pcp_list_type(mt).unwrap_or(MigrateType::Movable);
        if local.free_run(&hooks.on(self), pfn, n, list).is_some() {
            for _ in 0..n {
                self.vm(hooks.cpu).pcp_free();
            }
            return Ok(true);
        }
        if n > 1 {
            // Outside the home: the zone takes the run back in one step
            // (`Machine::free_raw`), where the cache would hold each frame
            // alone on a list and spill each alone.
            self.states.give_back_run(pfn, n as usize, mt);
            return Ok(false);
        }
        self.cache_taken(hooks, local, pfn, Order::ZERO, mt)?;
        Ok(true)
    }

    /// Allocates through this CPU's cache when the order is cached and the
    /// request ordinary (no reserve access: those go to the zone, where the
    /// reserves are); a miss or an empty refill falls back to the zone.
    /// A request that may ignore the watermarks which the zone cannot
    /// serve takes what this CPU's cache holds (Linux serves it from the
    /// cache first, spec 04 §4.1): no frame parked in the caller's own
    /// cache is out of its reach.
    #[inline]
    pub(crate) fn alloc_cached<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        if let Some(p) = self.cache_hit(hooks, local, gfp, order, flags, highest) {
            return Ok(p);
        }
        match self.try_alloc(hooks.hooks, gfp, order, flags, highest) {
            Err(e) if flags.contains(AllocFlags::NO_WATERMARKS) && cached_order(order) => self
                .take_cached(hooks, local, order, gfp.migratetype())
                .ok_or(e),
            r => r,
        }
    }

    /// Frees through this CPU's cache; the cache spills to the zone in
    /// batches. The ownership byte goes from allocated to cached by
    /// compare-and-swap first: anything else (a double free, a wrong order,
    /// a free racing another, a block being migrated, a frame that is no
    /// allocation) takes the zone path, which names the problem precisely
    /// and changes nothing.
    #[inline(always)]
    pub(crate) fn free_cached<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        if !cached_order(order) {
            return self.free(pfn, order);
        }
        let Ok(mt) = self.states.take_for_cache(pfn, order) else {
            return self.free(pfn, order);
        };
        // A non-movable block of a CMA area (a contiguous range freed piece
        // by piece) must not reach a list that serves non-movable requests:
        // it bypasses the cache, and the zone files it on the CMA lists.
        if mt != MigrateType::Movable && self.in_cma(pfn) {
            self.states.set_allocated(pfn, order, mt);
            return self.free(pfn, order);
        }
        self.cache_taken(hooks, local, pfn, order, mt)
    }

    /// The order-0 free [`Zone::free_cached`] makes, as far as it goes with
    /// no call on the way (a caller's hit path then needs no stack frame):
    /// [`CacheFree::Hit`] when the frame went hot or back to the home of
    /// its list in this CPU's cache; [`CacheFree::Foreign`] when it is the cache's
    /// now but lies outside the home (the caller goes on with
    /// [`Zone::cache_foreign`]); [`CacheFree::Miss`], nothing changed,
    /// otherwise (the caller then takes [`Zone::free_cached`]).
    #[inline(always)]
    pub(crate) fn cache_home_free<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        pfn: Pfn,
    ) -> CacheFree {
        let Some(claim) = self.states.cache_claim(pfn, Order::ZERO) else {
            return CacheFree::Miss;
        };
        let mt = claim.mt;
        // A non-movable frame of a CMA area bypasses the cache (see
        // `free_cached`).
        if (mt != MigrateType::Movable && self.in_cma(pfn)) || !claim.take() {
            return CacheFree::Miss;
        }
        let list = pcp_list_type(mt).unwrap_or(MigrateType::Movable);
        match local.free_hit(&hooks.on(self), pfn, list) {
            HomeFree::Hit => {
                self.vm(hooks.cpu).pcp_free();
                CacheFree::Hit
            }
            HomeFree::Foreign => CacheFree::Foreign(mt),
            HomeFree::Other => {
                // A spill due or a remote request: the block goes back to
                // its owner's state unchanged, for the general path.
                self.states.set_allocated(pfn, Order::ZERO, mt);
                CacheFree::Miss
            }
        }
    }

    /// The rest of an order-0 free [`Zone::cache_home_free`] found outside
    /// its home ([`CacheFree::Foreign`]): onto this CPU's foreign list.
    #[inline(always)]
    pub(crate) fn cache_foreign<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        pfn: Pfn,
        mt: MigrateType,
    ) -> Result<(), FreeError> {
        let cached = local.free_foreign(&hooks.on(self), pfn).is_ok();
        self.settle_cached(hooks, cached, pfn, Order::ZERO, mt)
    }

    /// The rest of [`Zone::free_cached`] once the block's ownership byte
    /// says cached: onto this CPU's list for `mt`, or to the zone.
    #[inline(always)]
    pub(crate) fn cache_taken<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        local: &mut LocalPcp<'a, 'a>,
        pfn: Pfn,
        order: Order,
        mt: MigrateType,
    ) -> Result<(), FreeError> {
        let list = pcp_list_type(mt).unwrap_or(MigrateType::Movable);
        let cached = local.free(&hooks.on(self), pfn, order, list).is_ok();
        self.settle_cached(hooks, cached, pfn, order, mt)
    }

    /// A block marked cached after its cache took it (`cached`) or not: the
    /// count of the free, or the block back to its owner's state and freed
    /// to the zone (the cache's memory was full; the block is still ours
    /// alone).
    #[inline(always)]
    fn settle_cached<H: Hooks>(
        &self,
        hooks: &Traced<'_, H>,
        cached: bool,
        pfn: Pfn,
        order: Order,
        mt: MigrateType,
    ) -> Result<(), FreeError> {
        if !cached {
            self.states.set_allocated(pfn, order, mt);
            return self.free(pfn, order);
        }
        self.vm(hooks.cpu).pcp_free();
        Ok(())
    }
}

/// How far [`Zone::cache_home_free`] took an order-0 free.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CacheFree {
    /// Back in its home: done.
    Hit,
    /// Marked cached, of this type, but outside its home: for
    /// [`Zone::cache_foreign`].
    Foreign(MigrateType),
    /// Nothing changed.
    Miss,
}

/// The machine's hooks as one CPU's caches report to them (`cpu`: `None`
/// when a cache is drained by another CPU): made for one operation, or
/// kept by a CPU's handle for all of its own.
pub(crate) struct Traced<'h, H: Hooks> {
    pub hooks: &'h H,
    pub cpu: Option<CpuId>,
    /// Whether the current operation refilled a cache (its block was no
    /// hit); a handle clears it as each operation starts.
    pub refilled: Refilled,
}

impl<'h, H: Hooks> Traced<'h, H> {
    /// `zone` as the caches reach it, reporting refills and spills.
    #[inline]
    pub(crate) fn on<'t, 'z, 'a, R: RawMutex>(
        &'t self,
        zone: &'z Zone<'a, R>,
    ) -> TracedZone<'t, 'z, 'a, 'h, (R, H)> {
        TracedZone { zone, traced: self }
    }
}

/// A zone with the hooks its caches report to (static: with
/// [`crate::debug::NoHooks`] and no counters it is the zone). `P` is the
/// zone's lock and the hooks as a pair, whatever platform type the
/// machine was named with.
pub(crate) struct TracedZone<'t, 'z, 'a, 'h, P: Platform> {
    zone: &'z Zone<'a, P::Lock>,
    traced: &'t Traced<'h, P::Hooks>,
}

impl<P: Platform> PcpZone for TracedZone<'_, '_, '_, '_, P> {
    #[inline]
    fn refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        let t = self.traced;
        self.zone.refill_traced(t.hooks, order, mt, sink);
        t.refilled.note();
        self.zone.vm(t.cpu).pcp_refill(sink.taken() as u64);
        if P::Hooks::TRACE {
            t.hooks.event(&Event::PcpRefill {
                zone: self.zone.zone_ref(),
                cpu: t.cpu,
                order,
                blocks: sink.taken() as u64,
            });
        }
    }

    #[inline]
    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let t = self.traced;
        self.zone.spill(batch);
        self.zone.vm(t.cpu).pcp_spill(batch.pages());
        if P::Hooks::TRACE {
            t.hooks.event(&Event::PcpSpill {
                zone: self.zone.zone_ref(),
                cpu: t.cpu,
                pages: batch.pages(),
            });
        }
    }

    #[inline]
    fn flags(&self) -> ZoneFlags {
        self.zone.flags()
    }

    #[inline]
    fn recheck_below_high(&self) {
        self.zone.recheck_below_high()
    }
}

impl<'a, R: RawMutex> Zone<'a, R> {
    /// `rmqueue_bulk` reporting fallbacks to `hooks`.
    fn refill_traced<H: Hooks>(
        &self,
        hooks: &H,
        order: Order,
        mt: MigrateType,
        sink: &mut RefillSink<'_, '_>,
    ) {
        self.refill_locked(self.inner.lock(), hooks, order, mt, sink)
    }

    /// [`Zone::refill_traced`] with the lock `z` already taken.
    pub(crate) fn refill_locked<H: Hooks>(
        &self,
        mut z: crate::zone_core::ZoneGuard<'_, 'a, R>,
        hooks: &H,
        order: Order,
        mt: MigrateType,
        sink: &mut RefillSink<'_, '_>,
    ) {
        // The movable list holds CMA frames too (Linux's pcp lists do).
        let mode = if mt == MigrateType::Movable {
            pageframe_mobility::AllocMode::CMA
        } else {
            pageframe_mobility::AllocMode::empty()
        };
        let _ = self.unstripe_before_fallback(&mut z, order, mt);
        let mut line = None;
        let chunk = u32::from(z.buddy.buddy().chunk_order().get());
        let before = H::TRACE.then(|| z.buddy.stats());
        while z.buddy.free_pages() > z.wmark.low.saturating_add(order.pages()) {
            let extra = sink.remaining() == 0;
            if extra && line.is_none() {
                break;
            }
            let Ok(p) = z.buddy.alloc(order, mt, mode) else {
                break;
            };
            self.states.set_cached(p, order);
            let pushed = if !extra {
                sink.push(p)
            } else if self.states.line_of(p) == line {
                sink.push_extra(p)
            } else {
                Err(p)
            };
            if let Err(back) = pushed {
                self.states.set_free(back);
                // SAFETY: `back` was allocated with `order` just above and
                // is nobody else's.
                unsafe { z.buddy.free_unchecked(back, order) };
                break;
            }
            if order == Order::ZERO {
                let mut last = p;
                if !extra {
                    // The rest of the refill from the same chunk, as one
                    // run of the core's (one refile, not one a frame).
                    let room = z.buddy.free_pages().saturating_sub(z.wmark.low + 1);
                    let want = sink.remaining().min(room as usize);
                    let states = &self.states;
                    z.buddy.alloc_run(p, mt, want, |base, bits| {
                        cached_word(states, base, sink.push_word(base, bits), &mut last)
                    });
                    if sink.remaining() == 0
                        && let Some(lines) = self.states.line_frames(last)
                    {
                        // The rest of its line of ownership bytes in this
                        // chunk, a word at a time: the frames after `last`
                        // are the ones the next refill from this chunk
                        // would take.
                        z.buddy
                            .alloc_run(last, mt, lines.len() as usize, |base, bits| {
                                let got =
                                    sink.push_extra_word(base, bits & frames_mask(base, lines));
                                cached_word(states, base, got, &mut last)
                            });
                        // A line that ends in this chunk is whole: no
                        // frame-by-frame search for the rest.
                        if (lines.end.get() - 1) >> chunk == last.get() >> chunk {
                            break;
                        }
                    }
                }
                line = self.states.line_of(last);
            }
        }
        if let Some(before) = before {
            self.trace_fallback(hooks, &before, &z.buddy.stats(), mt, order);
        }
        self.after_zone_op(&z);
    }
}

/// Marks the frames of a refill's word cached (bit `b` of `got`: frame
/// `base + b`), moves `last` to the highest of them, and returns `got`.
#[inline]
fn cached_word(states: &FrameStates<'_>, base: Pfn, got: u64, last: &mut Pfn) -> u64 {
    states.set_cached_bits(base, got);
    if got != 0 {
        *last = base + u64::from(63 - got.leading_zeros());
    }
    got
}

/// The bits of a word of frames from `base` (aligned to 64) that lie in
/// `range`.
fn frames_mask(base: Pfn, range: PfnRange) -> u64 {
    let lo = range.start.get().saturating_sub(base.get()).min(64);
    let hi = range.end.get().saturating_sub(base.get()).min(64);
    let below = |n: u64| if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    below(hi) & !below(lo)
}

impl<R: RawMutex> PcpZone for Zone<'_, R> {
    /// `rmqueue_bulk`: one lock acquisition; stops at the low watermark.
    /// An order-0 refill goes on to the end of the cache line that holds
    /// its last frame's ownership byte (small requests take the lowest free
    /// frames of a chunk, so the next frames are that line's): otherwise
    /// the next CPU's refill starts on that line, and the two CPUs' allocs
    /// and frees, each writing its frame's byte, make it bounce between
    /// them (the two-CPU rows of `cargo bench -p pageframe-benches --bench
    /// machine` show the difference).
    fn refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        self.refill_traced(&NoHooks, order, mt, sink)
    }

    /// `free_pcppages_bulk`: one lock acquisition; the core re-reads each
    /// block's pageblock type (spec 04 §5.1).
    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let mut z = self.inner.lock();
        // The foreign list holds frames freed outside the home, in no
        // order: the next one's lines load while this one is freed. (A
        // home gives its frames back in address order, sharing lines.)
        let ahead = self.prefetcher();
        while let Some((pfn, order)) = batch.next() {
            if let Some(p) = batch.peek_foreign() {
                ahead.frame(p);
            }
            self.states.set_free(pfn);
            // SAFETY: a cached block is this cache's alone (its byte went
            // from allocated to cached by compare-and-swap, or it came from
            // a refill) and allocated in the core with `order`. The checked
            // free could not tell it from a frame a stripe holds free.
            unsafe { z.buddy.free_unchecked(pfn, order) };
        }
        self.after_zone_op(&z);
    }

    fn flags(&self) -> ZoneFlags {
        self.pcp_flags()
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use std::collections::HashSet;
    use std::vec::Vec;

    use crate::CpuId;
    use crate::zone_kind::ZoneRef;
    use crate::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};

    /// The frames of `cpu`'s first refill: one allocation, then as many as
    /// the cache then held.
    fn first_refill(m: &'static Machine<'static>, cpu: u32) -> Vec<Pfn> {
        let mut c = m.cpu(CpuId(cpu), NodeId::ZERO).unwrap();
        let gfp = Gfp::KERNEL | Gfp::MOVABLE;
        let mut got = std::vec![c.alloc(gfp, Order::ZERO).unwrap().into_raw().0];
        let n = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count;
        got.extend((0..n).map(|_| c.alloc(gfp, Order::ZERO).unwrap().into_raw().0));
        assert_eq!(
            c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count,
            0
        );
        got
    }

    #[test]
    fn a_word_of_frames_masked_to_a_range() {
        let r = |a: u64, b: u64| PfnRange::new(Pfn(a), Pfn(b));
        assert_eq!(super::frames_mask(Pfn(64), r(64, 128)), u64::MAX);
        assert_eq!(super::frames_mask(Pfn(64), r(0, 1000)), u64::MAX);
        assert_eq!(super::frames_mask(Pfn(64), r(71, 135)), u64::MAX << 7);
        assert_eq!(super::frames_mask(Pfn(128), r(71, 135)), 0x7f);
        assert_eq!(super::frames_mask(Pfn(128), r(130, 132)), 0b1100);
        assert_eq!(super::frames_mask(Pfn(0), r(64, 128)), 0);
        assert_eq!(super::frames_mask(Pfn(192), r(64, 128)), 0);
    }

    #[test]
    fn two_cpus_refills_share_no_line_of_ownership_bytes() {
        let m: &'static mut Machine<'static> = std::boxed::Box::leak(
            crate::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed(),
        );
        // An odd start, so that lines do not follow 64-frame alignment.
        let span = PfnRange::new(Pfn(0x10_0007), Pfn(0x10_0007 + 16384));
        let meta = std::boxed::Box::leak(std::boxed::Box::new_uninit_slice(
            m.zone_metadata_bytes(span),
        ));
        m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
            .unwrap();
        m.add_free_range(span).unwrap();
        let pcp = std::boxed::Box::leak(std::boxed::Box::new_uninit_slice(m.pcp_bytes(2).unwrap()));
        m.enable_pcp(2, pcp).unwrap();
        let m: &'static Machine<'static> = m;
        let z = m
            .zone(ZoneRef {
                node: NodeId::ZERO,
                kind: ZoneKind::Normal,
            })
            .unwrap();
        let lines = |frames: &[Pfn]| -> HashSet<usize> {
            frames
                .iter()
                .map(|&p| z.states.line_of(p).unwrap())
                .collect()
        };
        let (a, b) = (first_refill(m, 0), first_refill(m, 1));
        assert!(a.len() > 1 && b.len() > 1);
        let shared: Vec<_> = lines(&a).intersection(&lines(&b)).copied().collect();
        assert!(
            shared.is_empty(),
            "lines {shared:?} hold frames of both caches"
        );
    }
}
