//! The zone itself: the `Zone` type (a `MobileZone` behind the kernel's
//! lock, its watermarks, the ownership bytes, the order-0 stripes, the
//! per-CPU caches and compaction state) and the zone's allocation and free
//! paths. The public face is [`crate::zone`], which gathers this with the
//! reports a zone and a machine give of their zones.

use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicU8, AtomicU32, Ordering::Relaxed};

use pageframe_types::atomic::AtomicU64;

use pageframe_buddy::{
    BlockInfo, FreeError, InitError, Order, Pfn, PfnRange, Prefetch, RangeError, Stats,
};
use pageframe_compact::CompactState;
use pageframe_mobility::{FallbackStats, MobileZone, MobilityConfig, Watermarks, ZoneMarks};
use pageframe_pcp::{PcpSet, ZoneFlags};
use pageframe_types::MigrateType;

use crate::debug::owner_record::Owners;
use crate::debug::vmstat::{CpuCounters, ZoneCounters};
use crate::debug::{Event, Hooks, NoHooks};
use crate::error::AllocError;
use crate::frame_state::{FrameStates, State, StatesPrefetch};
use crate::gfp::{AllocFlags, Gfp};
use crate::lock::{Mutex, RawMutex, SpinLock};
use crate::node_id::NodeId;
use crate::pageblock_pool::PageblockPool;
use crate::stripe::Stripes;
use crate::zone_kind::ZoneRef;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind};
use pageframe_pcp::CpuId;

/// The zone lock, held.
pub(crate) type ZoneGuard<'g, 'a, R> = lock_api::MutexGuard<'g, R, ZoneInner<'a>>;

/// What the zone lock protects.
pub(crate) struct ZoneInner<'a> {
    pub buddy: MobileZone<'a>,
    pub wmark: Watermarks,
    /// Frames withheld from requests whose highest usable zone is the index.
    pub lowmem_reserve: [u64; NR_ZONE_KINDS],
    pub watermark_failures: u64,
    /// Order-0 allocations through the lock (for the stripes' recheck).
    pub small_allocs: u32,
}

/// Where the lines a free of a frame reads first lie (its ownership byte,
/// and its chunk's entry and bitmap word in the core), copied out of the
/// zone: a loop that frees a batch starts loading the next block's while
/// it frees this one, so that their misses overlap the work instead of
/// following one another.
#[derive(Clone, Copy)]
pub(crate) struct FramePrefetch {
    states: StatesPrefetch,
    core: Prefetch,
}

impl FramePrefetch {
    /// Starts loading the lines of the block at `pfn`, a frame of the
    /// zone's span (another frame's hint names some other address, a
    /// wasted load at most).
    #[inline(always)]
    pub(crate) fn frame(&self, pfn: Pfn) {
        self.states.frame(pfn);
        self.core.frame(pfn);
    }
}

/// A zone of a [`crate::Machine`]: a buddy allocator grouped by mobility
/// ([`MobileZone`]) with watermarks behind a lock of type `R`, one
/// ownership byte per frame, optional per-CPU caches, and its compaction
/// state. Read it through the accessors here; allocate and free through the
/// machine.
///
/// Size: a few KiB (the free-list heads); a machine keeps its zones in place.
pub struct Zone<'a, R: RawMutex = SpinLock> {
    kind: ZoneKind,
    node: NodeId,
    span: PfnRange,
    pub(crate) inner: Mutex<R, ZoneInner<'a>>,
    pub(crate) states: FrameStates<'a>,
    /// Order-0 stripes: reservations served without the zone lock.
    pub(crate) stripes: Stripes<'a, R>,
    /// Free blocks of the pageblock order kept off the free lists.
    pub(crate) pool: &'a PageblockPool,
    pub(crate) pcp: Option<PcpSet<'a, 'a>>,
    /// Free frames after the last zone operation, and copies of the
    /// watermarks and lowmem reserves: the cached path's lock-free
    /// watermark check reads them.
    free_hint: AtomicU64,
    /// `[mark][highest]`: the mark plus the lowmem reserve held against a
    /// requester whose highest zone is `highest`.
    threshold_hint: [[AtomicU64; NR_ZONE_KINDS]; 3],
    /// Zone flags the per-CPU caches read without the lock.
    pcp_flags: AtomicU8,
    /// Operations in progress that may hold isolation marks or busy frames
    /// in the zone (compaction, contiguous ranges, reporting): while none
    /// is, [`Zone::validate`] finds none.
    busy: AtomicU32,
    /// Per-zone compaction state (cached scanners, deferral, counters).
    pub(crate) compact: CompactState,
    /// The smallest range holding every CMA area inside the span (empty:
    /// none): the per-CPU free path sends non-movable frees inside it to
    /// the zone (kept to one range so that a zone stays small: it is built
    /// on the kernel's stack).
    cma_span: PfnRange,
    /// Counters of callers without a CPU (feature `vmstat`; empty
    /// without).
    pub(crate) vm_shared: ZoneCounters,
    /// Owner records (feature `page-owner`; empty without).
    pub(crate) owners: Owners<'a>,
    /// Counters of each CPU with a cache, beside the caches.
    pub(crate) vm_cpus: CpuCounters<'a>,
    /// Where the core's metadata of a frame lies: a free's hint before
    /// the lock, and [`Zone::prefetcher`]'s.
    core_lines: Prefetch,
}

impl<'a, R: RawMutex> Zone<'a, R> {
    /// Metadata bytes a zone over `span` built with `config` needs, all of
    /// it: the buddy core's (a 2-byte word and two bits a frame, 40 bytes a
    /// 2 MiB chunk, see `pageframe_buddy`), the mobility layer's byte a
    /// pageblock, one ownership byte a frame, and the lists, counts and
    /// order-0 stripes. For the default configuration and a span of `F`
    /// frames (rounded out to whole max-order blocks): between
    /// `13/4 F + 42 F/512` and `13/4 F + 43 F/512 + 20 KiB`, under 4 bytes
    /// a frame from 128 MiB up (the `page-owner` feature's records come on
    /// top). 0 for a span no zone can have (empty, or too large).
    pub const fn metadata_bytes(span: PfnRange, config: MobilityConfig) -> usize {
        let m = MobileZone::metadata_bytes(span, config);
        if m == 0 {
            0
        } else {
            // Saturating, as the layers below: on a 32-bit target a large
            // span's parts exceed `usize`, and no buffer then suffices.
            m.saturating_add(Stripes::<R>::bytes(span, config.core().chunk_order))
                .saturating_add(PageblockPool::bytes())
                .saturating_add(FrameStates::bytes(span))
                .saturating_add(Owners::bytes(span))
        }
    }

    /// A zone with every frame a hole until handed over. `meta` must hold
    /// [`Zone::metadata_bytes`] bytes.
    pub(crate) fn new(
        kind: ZoneKind,
        node: NodeId,
        span: PfnRange,
        config: MobilityConfig,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, InitError> {
        let mut slot = MaybeUninit::uninit();
        Self::write_in(&mut slot, kind, node, span, config, meta)?;
        // SAFETY: `write_in` returned Ok, so it wrote every field.
        Ok(unsafe { slot.assume_init() })
    }

    /// [`Zone::new`] written into `slot` field by field, so that setting up
    /// a zone keeps no copies of it on a small boot stack (a debug build
    /// made several). On `Ok` every field of `slot` is written; on `Err`
    /// none is.
    pub(crate) fn write_in(
        slot: &mut MaybeUninit<Self>,
        kind: ZoneKind,
        node: NodeId,
        span: PfnRange,
        config: MobilityConfig,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<(), InitError> {
        let needed = Self::metadata_bytes(span, config);
        let given = meta.len();
        if needed == 0 {
            return Err(if span.is_empty() {
                InitError::EmptySpan
            } else {
                InitError::SpanTooLarge
            });
        }
        if given < needed {
            return Err(InitError::MetadataTooSmall { needed, given });
        }
        let too_small = InitError::MetadataTooSmall { needed, given };
        let (core, rest) = meta.split_at_mut(MobileZone::metadata_bytes(span, config));
        let chunk = config.core().chunk_order;
        let (owners, rest) = Owners::carve(span, rest).ok_or(too_small)?;
        let (stripes, rest) = Stripes::carve(rest, span, chunk).ok_or(too_small)?;
        let (pool, states) = PageblockPool::carve(rest, config.pageblock_order).ok_or(too_small)?;
        let states = FrameStates::new(span, states).ok_or(too_small)?;
        let buddy = MobileZone::new(span, config, core)?;
        let core_lines = buddy.buddy().prefetch();
        let p = slot.as_mut_ptr();
        // SAFETY: `p` points to `slot`, valid for writes of a `Zone`; each
        // write targets one field through a raw place, creating no
        // reference to uninitialised memory. Nothing can fail from here on,
        // so either every field is written or (above) none.
        unsafe {
            addr_of_mut!((*p).kind).write(kind);
            addr_of_mut!((*p).node).write(node);
            addr_of_mut!((*p).span).write(span);
            addr_of_mut!((*p).inner).write(Mutex::new(ZoneInner {
                buddy,
                wmark: Watermarks::default(),
                lowmem_reserve: [0; NR_ZONE_KINDS],
                watermark_failures: 0,
                small_allocs: 0,
            }));
            addr_of_mut!((*p).states).write(states);
            addr_of_mut!((*p).stripes).write(stripes);
            addr_of_mut!((*p).pool).write(pool);
            addr_of_mut!((*p).pcp).write(None);
            addr_of_mut!((*p).free_hint).write(AtomicU64::new(0));
            addr_of_mut!((*p).threshold_hint)
                .write([const { [const { AtomicU64::new(0) }; NR_ZONE_KINDS] }; 3]);
            addr_of_mut!((*p).pcp_flags).write(AtomicU8::new(0));
            addr_of_mut!((*p).busy).write(AtomicU32::new(0));
            addr_of_mut!((*p).compact).write(CompactState::new());
            addr_of_mut!((*p).cma_span).write(PfnRange::new(Pfn(0), Pfn(0)));
            addr_of_mut!((*p).vm_shared).write(ZoneCounters::new());
            addr_of_mut!((*p).owners).write(owners);
            addr_of_mut!((*p).vm_cpus).write(CpuCounters::NONE);
            addr_of_mut!((*p).core_lines).write(core_lines);
        }
        Ok(())
    }

    /// The lines a free of a block reads first, for starting to load them
    /// ahead: see [`FramePrefetch`].
    #[inline(always)]
    pub(crate) fn prefetcher(&self) -> FramePrefetch {
        FramePrefetch {
            states: self.states.prefetcher(),
            core: self.core_lines,
        }
    }

    /// The counters `cpu` bumps: its own when it has a cache of this zone,
    /// the shared ones otherwise.
    #[inline]
    pub(crate) fn vm(&self, cpu: Option<CpuId>) -> &ZoneCounters {
        self.vm_cpus.get(cpu).unwrap_or(&self.vm_shared)
    }

    /// Counts an operation that may leave isolation marks or busy frames in
    /// the zone while it runs, until the guard drops (on unwinding too).
    pub(crate) fn hold(&self) -> Holding<'_> {
        self.busy.fetch_add(1, Relaxed);
        Holding(&self.busy)
    }

    /// Records a CMA area inside the span (set-up).
    pub(crate) fn add_cma(&mut self, range: PfnRange) {
        self.cma_span = if self.cma_span.is_empty() {
            range
        } else {
            PfnRange::new(
                self.cma_span.start.min(range.start),
                self.cma_span.end.max(range.end),
            )
        };
    }

    /// Whether `pfn` may lie in a CMA area: true for every frame of one
    /// (and for frames between two areas, which then take the zone path).
    #[inline]
    pub(crate) fn in_cma(&self, pfn: Pfn) -> bool {
        self.cma_span.contains(pfn)
    }

    /// Whether a frame of `range` may lie in a CMA area (see
    /// [`Zone::in_cma`]).
    #[inline]
    pub(crate) fn range_in_cma(&self, range: PfnRange) -> bool {
        !range.intersect(&self.cma_span).is_empty()
    }

    /// The zone's kind.
    pub fn kind(&self) -> ZoneKind {
        self.kind
    }

    /// The node the zone belongs to.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The zone's place in the machine: its node and kind.
    pub(crate) fn zone_ref(&self) -> ZoneRef {
        ZoneRef {
            node: self.node,
            kind: self.kind,
        }
    }

    /// The span, holes included.
    pub fn span(&self) -> PfnRange {
        self.span
    }

    /// Hands usable frames over (the machine checks the range first).
    pub(crate) fn add_free_range(&self, range: PfnRange) -> Result<(), RangeError> {
        let mut z = self.inner.lock();
        z.buddy.add_free_range(range)?;
        self.after_zone_op(&z);
        Ok(())
    }

    /// Whether [`Zone::add_free_range`] would take `range`.
    pub(crate) fn check_add_range(&self, range: PfnRange) -> Result<(), RangeError> {
        self.inner.lock().buddy.buddy().check_add_range(range)
    }

    /// Sets the watermarks and lowmem reserves (the machine computes them).
    pub(crate) fn set_watermarks(&self, w: Watermarks, reserve: [u64; NR_ZONE_KINDS]) {
        let mut z = self.inner.lock();
        z.wmark = w;
        z.lowmem_reserve = reserve;
        for (row, mark) in self.threshold_hint.iter().zip([w.min, w.low, w.high]) {
            for (h, r) in row.iter().zip(reserve) {
                h.store(mark.saturating_add(r), Relaxed);
            }
        }
        self.after_zone_op(&z);
    }

    /// The marks a requester whose highest zone is `highest` is held to.
    pub(crate) fn marks(&self, highest: ZoneKind) -> ZoneMarks {
        let z = self.inner.lock();
        ZoneMarks {
            wmark: z.wmark,
            reserve: z.lowmem_reserve[highest.index()],
        }
    }

    /// One attempt under one lock acquisition (`rmqueue` after the
    /// watermark check, spec 01 §6.3-6.4, §7.4): the check against the mark
    /// `flags` select, with the reserve access they grant, for a requester
    /// whose highest usable zone is `highest`; then the free lists of the
    /// type `gfp` selects, with fallback as `flags` allow. A high-order
    /// atomic success reserves its pageblock (spec 02 §7).
    #[inline]
    pub(crate) fn try_alloc<H: Hooks>(
        &self,
        hooks: &H,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        // Without hooks, the function a machine without them always had
        // (one argument fewer on the hottest call).
        if H::TRACE {
            self.try_alloc_with(hooks, gfp, order, flags, highest)
        } else {
            self.try_alloc_untraced(gfp, order, flags, highest)
        }
    }

    #[inline]
    fn try_alloc_untraced(
        &self,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        self.try_alloc_with(&NoHooks, gfp, order, flags, highest)
    }

    #[inline]
    fn try_alloc_with<H: Hooks>(
        &self,
        hooks: &H,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        if let Some(p) = self.pool_alloc(gfp, order, flags, highest) {
            return Ok(p);
        }
        // Order 0 from a stripe's reservation (`stripe.rs`), lock-free for
        // the zone; requests with reserve access, zones with CMA areas (whose
        // rule of use needs the zone's counts) and watermark trouble take
        // the zone path.
        if self.striped(order, flags, highest) {
            let mt = gfp.migratetype();
            let got = self.stripes.alloc(
                mt,
                |old| {
                    let mut z = self.inner.lock();
                    if let Some(old) = old {
                        let r = z.buddy.unreserve(old);
                        debug_assert!(r.is_ok(), "a stripe's reservation is the zone's");
                    }
                    let r = z.buddy.reserve(mt, self.stripes.min_free());
                    self.after_zone_op(&z);
                    r
                },
                |p| self.states.set_allocated(p, Order::ZERO, mt),
            );
            if let Some(p) = got {
                return Ok(p);
            }
        }
        match self.try_alloc_locked(hooks, gfp, order, flags, highest) {
            Err(AllocError::OutOfMemory) => self.alloc_unstriped(hooks, gfp, order, flags, highest),
            r => r,
        }
    }

    /// [`Zone::try_alloc_with`] after the zone found nothing: frames the
    /// stripes and the pageblock pool hold free are not the zone's, so they
    /// go back and the zone is tried once more. Out of line, so that the
    /// common path's call of [`Zone::try_alloc_locked`] is its only one.
    #[cold]
    #[inline(never)]
    fn alloc_unstriped<H: Hooks>(
        &self,
        hooks: &H,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        if self.release_stripes() + self.release_pool() == 0 {
            return Err(AllocError::OutOfMemory);
        }
        self.try_alloc_locked(hooks, gfp, order, flags, highest)
    }

    /// A block of the pageblock order from the pool
    /// (`pageblock_pool.rs`), marked allocated, for a request a per-CPU
    /// cache would serve; `None`, nothing changed, otherwise. Never waits.
    #[inline(always)]
    pub(crate) fn pool_alloc(
        &self,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Option<Pfn> {
        if !self.pool.serves(order) || !self.cache_may_serve(order, flags, highest) {
            return None;
        }
        let mt = gfp.migratetype();
        let p = self.pool.take(mt)?;
        self.states.set_allocated(p, order, mt);
        Some(p)
    }

    /// Whether a request may take its frame from the order-0 stripes.
    #[inline(always)]
    pub(crate) fn striped(&self, order: Order, flags: AllocFlags, highest: ZoneKind) -> bool {
        order == Order::ZERO
            && self.cma_span.is_empty()
            && !flags.intersects(AllocFlags::RESERVES)
            && (flags.contains(AllocFlags::NO_WATERMARKS)
                || self.watermark_fast(order, flags, highest))
    }

    /// [`Zone::try_alloc`] under the zone lock, without the stripes.
    #[inline]
    fn try_alloc_locked<H: Hooks>(
        &self,
        hooks: &H,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        self.alloc_locked(self.inner.lock(), hooks, gfp, order, flags, highest)
    }

    /// [`Zone::try_alloc_locked`] with the lock `z` already taken.
    #[inline(always)]
    pub(crate) fn alloc_locked<H: Hooks>(
        &self,
        mut z: ZoneGuard<'_, 'a, R>,
        hooks: &H,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        if order > z.buddy.buddy().max_order() {
            return Err(AllocError::OrderTooLarge);
        }
        let mark = z.wmark.get(flags.mark());
        let reserve = z.lowmem_reserve[highest.index()];
        if !z
            .buddy
            .watermark_ok(order, mark, reserve, flags.access(gfp))
        {
            z.watermark_failures += 1;
            return Err(AllocError::OutOfMemory);
        }
        let mt = gfp.migratetype();
        let falls_back = self.unstripe_before_fallback(&mut z, order, mt);
        let before = H::TRACE.then(|| z.buddy.stats());
        let p = z
            .buddy
            .alloc(order, mt, flags.mode(gfp))
            .map_err(AllocError::from)?;
        if let Some(before) = before {
            self.trace_fallback(hooks, &before, &z.buddy.stats(), mt, order);
        }
        if flags.contains(AllocFlags::HIGHATOMIC) {
            z.buddy.reserve_highatomic(p, order);
        }
        if order == Order::ZERO {
            // Now and then: whether the stripes may reserve again.
            z.small_allocs = z.small_allocs.wrapping_add(1);
            // After a fallback (which may have claimed a pageblock for
            // `mt`) the stripes may have a chunk again at once.
            if falls_back || z.small_allocs.is_multiple_of(crate::stripe::RECHECK) {
                let worth = z.buddy.reservable(mt, self.stripes.min_free());
                self.stripes.set_worth(mt, worth);
            }
        }
        self.states.set_allocated(p, order, mt);
        self.after_zone_op(&z);
        Ok(p)
    }

    /// A request the stripes and the pool do not serve (reserve access, a
    /// per-CPU refill, a stripe busy or out of chunks, an order the pool
    /// does not hold) that finds its type's lists without a block of its
    /// order would claim another pageblock while the stripes (order 0) or
    /// the pool may hold the type's free frames: those come back first
    /// (from each stripe free at once; the zone's lock is held, which
    /// comes after a stripe's). Returns whether the request still falls
    /// back.
    #[inline(always)]
    pub(crate) fn unstripe_before_fallback(
        &self,
        z: &mut ZoneInner<'a>,
        order: Order,
        mt: MigrateType,
    ) -> bool {
        (order == Order::ZERO || self.pool.holds_any())
            && z.buddy.would_fall_back(order, mt)
            && self.unstripe_type(z, order, mt)
    }

    #[cold]
    #[inline(never)]
    fn unstripe_type(&self, z: &mut ZoneInner<'a>, order: Order, mt: MigrateType) -> bool {
        let mut n = self.unpool_locked(z, 0, Some(mt));
        if order == Order::ZERO {
            n += self.stripes.try_release_type(mt, |r| {
                let r = z.buddy.unreserve(r);
                debug_assert!(r.is_ok(), "a stripe's reservation is the zone's");
            });
        }
        n == 0 || z.buddy.would_fall_back(order, mt)
    }

    /// Reports a fallback the core took between two snapshots of its
    /// counters (spec 02 §5: a claim or a steal).
    #[cold]
    pub(crate) fn trace_fallback<H: Hooks>(
        &self,
        hooks: &H,
        before: &FallbackStats,
        after: &FallbackStats,
        wanted: MigrateType,
        order: Order,
    ) {
        let claims = |s: &FallbackStats| s.claims_whole + s.claims_partial;
        let claimed = claims(after) != claims(before);
        if claimed || after.steals != before.steals {
            hooks.event(&Event::Fallback {
                zone: self.zone_ref(),
                wanted,
                order,
                claimed,
            });
        }
    }

    /// Frees a live allocation: the ownership byte by compare-and-swap, then
    /// the core, in one critical section. Bad input gets a [`FreeError`]
    /// and changes nothing.
    pub(crate) fn free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if !self.span.contains(pfn) {
            return Err(FreeError::OutOfRange);
        }
        // A block of the pageblock order goes to the pool if it has room.
        if self.pool.serves(order)
            && let Some(slot) = self.pool.room()
            && self.pool_free(slot, pfn, order)
        {
            return Ok(());
        }
        // A frame of a chunk a stripe holds goes back to that stripe.
        if order == Order::ZERO
            && let Some(r) = self
                .stripes
                .free(pfn, || self.states.take_for_free(pfn, order).map(|_| ()))
            && r.is_ok()
        {
            return Ok(());
        }
        // The core's lines load while the lock and the ownership byte are
        // dealt with.
        self.core_lines.frame(pfn);
        let mut z = self.inner.lock();
        let r = self.free_locked(&mut z, pfn, order);
        if r.is_ok() {
            self.after_zone_op(&z);
        }
        r
    }

    /// A free into `slot` of the pageblock pool: `true` when the block
    /// went there (a live unpinned allocation of `order`, its byte now
    /// cached), `false` with nothing changed otherwise (the zone's path
    /// decides).
    #[inline]
    fn pool_free(&self, slot: &crate::sync::AtomicU64, pfn: Pfn, order: Order) -> bool {
        let Ok(mt) = self.states.take_for_cache(pfn, order) else {
            return false;
        };
        // A non-movable block of a CMA area must not reach a slot that
        // serves non-movable requests (as for a per-CPU cache).
        if (mt == MigrateType::Movable || !self.in_cma(pfn)) && self.pool.put(slot, pfn, mt) {
            return true;
        }
        self.states.set_allocated(pfn, order, mt);
        false
    }

    /// [`Zone::free`] with the lock taken, of a block no stripe holds (the
    /// caller checks: a stripe's frame goes back through the stripe, whose
    /// lock comes first); the caller updates the zone's hints afterwards
    /// ([`Zone::after_zone_op`]). Inline in each caller: left to the
    /// compiler, a program that also frees ranges (`Machine::free_raw`)
    /// gets it out of line, 19 instructions more a free of the zone's.
    #[inline(always)]
    pub(crate) fn free_locked(
        &self,
        z: &mut ZoneGuard<'_, 'a, R>,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        // The ownership byte decides who frees, by compare-and-swap (a
        // per-CPU cache frees without this lock). A live allocation of this
        // order is one the core holds allocated with that order, so the
        // core's free then succeeds.
        match self.states.take_for_free(pfn, order) {
            Ok(_) => {
                // SAFETY: the byte said "allocated with this order" and this
                // CAS made us its one freer; a live allocation's byte is set
                // only for a block the core holds allocated at that head
                // with that order (`set_allocated`), so the core's own
                // checks would pass (debug builds assert it).
                unsafe { z.buddy.free_unchecked(pfn, order) };
                Ok(())
            }
            Err(e) => Err(self.refusal(z, pfn, order, e)),
        }
    }

    /// Splits a live allocation into two of one order less: the ownership
    /// byte by compare-and-swap (so a racing free, cache free or isolation
    /// of the block either wins or sees the halves), then the core, in one
    /// critical section. Returns the upper half's head. Bad input gets a
    /// [`FreeError`] and changes nothing.
    pub(crate) fn split(&self, pfn: Pfn, order: Order) -> Result<Pfn, FreeError> {
        if !self.span.contains(pfn) {
            return Err(FreeError::OutOfRange);
        }
        self.split_locked(&mut self.inner.lock(), pfn, order)
    }

    /// [`Zone::split`] with the lock taken.
    pub(crate) fn split_locked(
        &self,
        z: &mut ZoneGuard<'_, 'a, R>,
        pfn: Pfn,
        order: Order,
    ) -> Result<Pfn, FreeError> {
        let mt = match self.states.take_for_split(pfn, order) {
            Ok(mt) => mt,
            Err(FreeError::SingleFrame) => return Err(FreeError::SingleFrame),
            Err(e) => return Err(self.refusal(z, pfn, order, e)),
        };
        match z.buddy.split_allocated(pfn, order) {
            Ok(upper) => {
                self.owners.split(pfn, upper, order);
                // The upper half's byte is the lower half's (pinned if the
                // block was).
                self.states.mirror(pfn, upper);
                Ok(upper)
            }
            Err(e) => {
                // The byte said "allocated with this order", so the core
                // agrees; should it not, the block is still the caller's.
                let pinned = self.states.is_pinned(pfn);
                self.states.set_allocated_as(pfn, order, mt, pinned);
                Err(e)
            }
        }
    }

    /// Why `(pfn, order)` is not a live allocation, given the ownership
    /// byte's answer `e`: the core's structural errors (order, alignment,
    /// hole, tail, wrong order, free) come first; a block the core holds
    /// allocated but nobody owns here is the allocator's, mid-operation. A
    /// frame a stripe holds is free or allocated as its byte says (the core
    /// cannot tell: busy).
    fn refusal(&self, z: &ZoneInner<'_>, pfn: Pfn, order: Order, e: FreeError) -> FreeError {
        let striped = self.stripes.holds(pfn);
        match z.buddy.buddy().would_free(pfn, order) {
            Err(FreeError::Busy) if striped => {}
            Err(core) => return core,
            Ok(()) => {}
        }
        match (e, self.states.get(pfn)) {
            (FreeError::AlreadyFree, State::Free) if !striped => FreeError::Busy,
            (e, _) => e,
        }
    }

    /// Whether `pfn` heads a live allocation of `order` (for a kernel's
    /// number turned back into a block): the reason it does not.
    #[inline]
    pub(crate) fn check_live(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        if !self.span.contains(pfn) {
            return Err(FreeError::OutOfRange);
        }
        match self.states.get(pfn) {
            State::Allocated(o, _) if o == order => Ok(()),
            s => Err(self.not_live(pfn, order, s)),
        }
    }

    /// Why `(pfn, order)`, whose ownership byte says `s`, is no live
    /// allocation (see [`Zone::refusal`]).
    #[cold]
    fn not_live(&self, pfn: Pfn, order: Order, s: State) -> FreeError {
        self.not_live_locked(&self.inner.lock(), pfn, order, s)
    }

    /// [`Zone::not_live`] with the lock taken.
    #[cold]
    fn not_live_locked(&self, z: &ZoneInner<'_>, pfn: Pfn, order: Order, s: State) -> FreeError {
        let e = match s {
            State::Allocated(o, _) => FreeError::WrongOrder { allocated: o },
            State::Isolated(_) | State::MovedOut(_) => FreeError::Busy,
            State::Cached(_) | State::Free => FreeError::AlreadyFree,
        };
        self.refusal(z, pfn, order, e)
    }

    /// [`Zone::check_live`] with the lock taken.
    pub(crate) fn check_live_locked(
        &self,
        z: &ZoneInner<'_>,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        if !self.span.contains(pfn) {
            return Err(FreeError::OutOfRange);
        }
        match self.states.get(pfn) {
            State::Allocated(o, _) if o == order => Ok(()),
            s => Err(self.not_live_locked(z, pfn, order, s)),
        }
    }

    /// Gives every stripe's reservation back to the zone (before a range is
    /// isolated, or to count and check the zone). Must not be called with
    /// the zone lock held (a stripe's lock comes first). Returns how many.
    pub(crate) fn release_stripes(&self) -> usize {
        self.stripes.release(|r| {
            let mut z = self.inner.lock();
            let r = z.buddy.unreserve(r);
            debug_assert!(r.is_ok(), "a stripe's reservation is the zone's");
            self.after_zone_op(&z);
        })
    }

    /// Gives every block of the pageblock pool back to the free lists
    /// (where it merges as any free would). Returns how many.
    pub(crate) fn release_pool(&self) -> usize {
        self.release_pool_from(0)
    }

    /// Gives the blocks of the pool's slots from `from` on back to the
    /// free lists. Returns how many.
    fn release_pool_from(&self, from: usize) -> usize {
        if !self.pool.holds_any() {
            return 0;
        }
        let mut z = self.inner.lock();
        let n = self.unpool_locked(&mut z, from, None);
        self.after_zone_op(&z);
        n
    }

    /// [`Zone::release_pool`] with the lock taken, of the slots from `from`
    /// on and the blocks of type `only` if given; the caller updates the
    /// zone's hints.
    fn unpool_locked(
        &self,
        z: &mut ZoneInner<'a>,
        from: usize,
        only: Option<MigrateType>,
    ) -> usize {
        let order = self.pool.order();
        self.pool.drain(from, only, |p| {
            self.states.set_free(p);
            // SAFETY: a pooled block is the pool's alone (its byte went from
            // allocated to cached by compare-and-swap, and the slot's
            // compare-and-swap took it out for this call only) and
            // allocated in the core with the pool's order.
            unsafe { z.buddy.free_unchecked(p, order) };
        })
    }

    /// Uses `slots` slots of the pageblock pool for good (at most
    /// [`crate::zone::POOL_SLOTS`]), the blocks of the others back to the
    /// free lists.
    pub(crate) fn set_pool_slots(&self, slots: usize) {
        self.pool.fix_len(slots);
        self.release_pool_from(slots);
    }

    /// Sizes the pageblock pool for `managed` frames, unless the tunable
    /// fixed it (with the watermarks, whenever memory comes or goes).
    pub(crate) fn fit_pool(&self, managed: u64) {
        if !self.pool.fixed() {
            let slots = self.pool.slots_for(managed);
            self.pool.set_len(slots);
            self.release_pool_from(slots);
        }
    }

    /// Slots of the pageblock pool in use.
    pub(crate) fn pool_slots(&self) -> usize {
        self.pool.len()
    }

    /// Free frames the zone's pageblock pool holds (counted in
    /// [`Zone::free_pages`], not in the counts watermarks are checked
    /// against).
    pub fn pooled_frames(&self) -> u64 {
        self.pool.held_frames()
    }

    /// Free frames the zone's stripes hold (counted in
    /// [`Zone::free_pages`], but not in the counts watermarks are checked
    /// against: like frames in per-CPU caches, they are not the zone's to
    /// hand to others).
    pub fn stripe_frames(&self) -> u64 {
        self.stripes.held_frames()
    }

    /// Updates the values the lock-free paths read, after a zone operation.
    #[inline]
    pub(crate) fn after_zone_op(&self, z: &ZoneInner<'_>) {
        let free = z.buddy.free_pages();
        self.free_hint.store(free, Relaxed);
        if self.pcp.is_some() {
            let below = free < z.wmark.high;
            self.pcp_flags.store(
                if below {
                    ZoneFlags::BELOW_HIGH.bits()
                } else {
                    0
                },
                Relaxed,
            );
        }
    }

    /// The cached path's watermark check: free frames after the last zone
    /// operation above `mark` (a racy read, as Linux's `zone_watermark_fast`
    /// reads its counter).
    #[inline]
    pub(crate) fn free_hint(&self) -> u64 {
        self.free_hint.load(Relaxed)
    }

    /// The mark `flags` select plus the reserve held against `highest`,
    /// read without the lock (racy copies kept by `set_watermarks`).
    #[inline]
    pub(crate) fn fast_threshold(&self, flags: AllocFlags, highest: ZoneKind) -> u64 {
        self.threshold_hint[flags.mark() as usize][highest.index()].load(Relaxed)
    }

    #[inline]
    pub(crate) fn pcp_flags(&self) -> ZoneFlags {
        ZoneFlags::from_bits_truncate(self.pcp_flags.load(Relaxed))
    }

    /// Runs `f` on the mobility zone under the lock (the machine's
    /// mechanisms: compaction, isolation).
    pub(crate) fn with_zone<T>(&self, f: impl FnOnce(&mut MobileZone<'a>) -> T) -> T {
        let mut z = self.inner.lock();
        let r = f(&mut z.buddy);
        self.after_zone_op(&z);
        r
    }

    /// Runs `f` on the mobility zone under the lock, read-only: for reports
    /// and tests (block types, pageblock pollution, indices).
    pub fn inspect<T>(&self, f: impl FnOnce(&MobileZone<'a>) -> T) -> T {
        f(&self.inner.lock().buddy)
    }

    /// Free frames (not counting those in per-CPU caches), those the
    /// order-0 stripes and the pageblock pool hold included.
    pub fn free_pages(&self) -> u64 {
        let held = self.stripes.held_frames() + self.pool.held_frames();
        let z = self.inner.lock();
        held + z.buddy.free_pages() + z.buddy.buddy().reserved_free_pages()
    }

    /// Frames handed over (free or allocated).
    pub fn managed_pages(&self) -> u64 {
        self.inner.lock().buddy.buddy().managed_pages()
    }

    /// Free blocks of `order` (all types).
    pub fn free_blocks(&self, order: Order) -> u64 {
        self.inner.lock().buddy.buddy().free_blocks(order)
    }

    /// The buddy layer's counters.
    pub fn stats(&self) -> Stats {
        self.inner.lock().buddy.buddy_stats()
    }

    /// The mobility layer's fallback counters.
    pub fn fallback_stats(&self) -> FallbackStats {
        self.inner.lock().buddy.stats()
    }

    /// Allocations refused by the watermark check.
    pub fn watermark_failures(&self) -> u64 {
        self.inner.lock().watermark_failures
    }

    /// Current watermarks.
    pub fn watermarks(&self) -> Watermarks {
        self.inner.lock().wmark
    }

    /// The lowmem reserve held against requesters whose highest zone is `kind`.
    pub fn lowmem_reserve(&self, kind: ZoneKind) -> u64 {
        self.inner.lock().lowmem_reserve[kind.index()]
    }

    /// The zone's compaction state (deferral, cached scanners, counters).
    pub fn compact_state(&self) -> &CompactState {
        &self.compact
    }

    /// Whether per-CPU caches serve this zone.
    pub fn has_pcp(&self) -> bool {
        self.pcp.is_some()
    }

    /// Checks every invariant of the zone: the core's and the mobility
    /// layer's (free lists, counts, pageblock hygiene), and that the
    /// ownership bytes agree with the core: every block they call
    /// allocated, cached or isolated is an allocated block of that order in
    /// the core, and, at rest (no compaction or cache refill running),
    /// every allocated block of the core has an owner here.
    pub fn validate(&self) -> Result<(), pageframe_buddy::ValidateError> {
        let z = self.inner.lock();
        z.buddy.validate()?;
        let bad = |structure, rule, pfn| pageframe_buddy::ValidateError {
            structure,
            rule,
            pfn: Some(pfn),
        };
        const OWNERSHIP: &str = "ownership bytes";
        // Read under the lock: an operation counted after this takes the
        // lock after it too, before it marks anything.
        let at_rest = self.busy.load(Relaxed) == 0;
        if at_rest {
            let blocks = z.buddy.mobility().pageblocks();
            let step = z.buddy.pageblock_order().pages();
            let mut p = self.span.start.align_down(z.buddy.pageblock_order());
            while p < self.span.end {
                if blocks.is_isolated(p) {
                    return Err(bad(
                        "pageblock isolation",
                        "pageblock left isolated by no operation",
                        p.max(self.span.start),
                    ));
                }
                p = p + step;
            }
        }
        for (p, info) in z.buddy.buddy().walk(self.span) {
            if at_rest
                && let BlockInfo::Allocated { head, tag, .. } = info
                && head == p
                && tag & pageframe_compact::tag::MASK != 0
            {
                return Err(bad(
                    "compaction marks",
                    "block left marked by a compactor that is gone",
                    p,
                ));
            }
            if at_rest && matches!(self.states.get(p), State::Isolated(_) | State::MovedOut(_)) {
                return Err(bad(OWNERSHIP, "frame left busy by no operation", p));
            }
            // The pin is in both books (a reserved chunk's frames read as
            // untagged: a stripe's frames are never pinned).
            if let BlockInfo::Allocated { head, tag, .. } = info
                && head == p
                && !z.buddy.buddy().is_reserved(p)
                && matches!(self.states.get(p), State::Allocated(..))
                && (tag & pageframe_mobility::tag::PINNED != 0) != self.states.is_pinned(p)
            {
                return Err(bad(
                    OWNERSHIP,
                    "pin in the core and in the ownership byte disagree",
                    p,
                ));
            }
            let (first_free, end) = match info {
                BlockInfo::Hole => (p, p + 1),
                BlockInfo::Free { head, order, .. } => (p, head + order.pages()),
                BlockInfo::Allocated {
                    head, order, tag, ..
                } => {
                    if head == p {
                        match self.states.get(p) {
                            State::Allocated(o, _) | State::Cached(o) | State::Isolated(o)
                                if o == order => {}
                            // A frame an order-0 stripe holds free.
                            State::Free if z.buddy.buddy().is_reserved(p) => {}
                            // A free block a compactor took as a migration
                            // destination: nobody's until a move into it;
                            // and a source whose contents moved, until the
                            // compactor frees it (books settled, or not
                            // yet). The marks check finds either if left.
                            State::Free if tag & pageframe_compact::tag::MASK != 0 => {}
                            State::MovedOut(o)
                                if o == order && tag & pageframe_compact::tag::ISOLATED != 0 => {}
                            State::Free => {
                                return Err(bad(OWNERSHIP, "allocated block without an owner", p));
                            }
                            _ => return Err(bad(OWNERSHIP, "ownership byte of another order", p)),
                        }
                    }
                    (p + 1, head + order.pages())
                }
            };
            let mut q = first_free;
            while q < end.min(self.span.end) {
                if self.states.get(q) != State::Free {
                    return Err(bad(
                        OWNERSHIP,
                        "ownership byte on a frame that heads no block",
                        q,
                    ));
                }
                q = q + 1;
            }
        }
        Ok(())
    }
}

/// See [`Zone::hold`].
pub(crate) struct Holding<'z>(&'z AtomicU32);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

impl<R: RawMutex> fmt::Display for Zone<'_, R> {
    /// One `/proc/buddyinfo` line: `Node N, zone <name> <free blocks per order>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z = self.inner.lock();
        let label = ZoneLabel(self.node, self.kind);
        write!(f, "{}", z.buddy.buddy().buddyinfo_labelled(&label))
    }
}

/// `Node 0, zone   Normal`: how Linux's reports name a zone.
struct ZoneLabel(NodeId, ZoneKind);

impl fmt::Display for ZoneLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Node {}, zone {:>8}", self.0.index(), self.1.name())
    }
}

/// A zone's `/proc/pagetypeinfo` section; see [`Zone::pagetypeinfo`].
pub struct PageTypeInfo<'z, 'a, R: RawMutex>(&'z Zone<'a, R>);

impl<R: RawMutex> fmt::Display for PageTypeInfo<'_, '_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z = self.0.inner.lock();
        let label = ZoneLabel(self.0.node, self.0.kind);
        write!(f, "{}", z.buddy.pagetypeinfo(&label))
    }
}

impl<'a, R: RawMutex> Zone<'a, R> {
    /// Free blocks per order per migratetype and pageblocks per type.
    pub fn pagetypeinfo(&self) -> PageTypeInfo<'_, 'a, R> {
        PageTypeInfo(self)
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use crate::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};

    /// Two pageblocks: small enough for Miri to validate it a few times.
    fn machine() -> &'static Machine<'static> {
        let m: &'static mut Machine<'static> = std::boxed::Box::leak(
            crate::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed(),
        );
        let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + 1024));
        let meta = std::boxed::Box::leak(std::boxed::Box::new_uninit_slice(
            m.zone_metadata_bytes(span),
        ));
        m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
            .unwrap();
        m.add_free_range(span).unwrap();
        m
    }

    /// A huge page through the pageblock pool and back to the free lists
    /// (the unchecked free of a pooled block, under Miri too).
    #[test]
    fn a_pooled_huge_page_goes_back_to_the_lists_whole() {
        let m = machine();
        let z = m.zone_of(Pfn(1 << 20)).unwrap();
        m.tunables().set_min_free_kbytes(0);
        m.tunables().set_pageblock_pool(1).unwrap();
        let pb = Order::new(9).unwrap();
        let b = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, pb).unwrap();
        let p = b.pfn();
        m.free(b).unwrap();
        assert_eq!(z.pooled_frames(), 512);
        m.validate().unwrap();
        assert_eq!(z.release_pool(), 1);
        assert_eq!(z.free_blocks(Order::new(10).unwrap()), 1);
        assert_eq!(z.states.get(p), crate::frame_state::State::Free);
        m.validate().unwrap();
    }

    /// What an operation leaves behind when the kernel code it called
    /// panics and nothing gives it back: `validate` names it, and accepts
    /// it while an operation is counted in progress.
    #[test]
    fn validate_reports_isolation_and_busy_frames_no_operation_holds() {
        let m = machine();
        let z = m.zone_of(Pfn(1 << 20)).unwrap();
        let range = PfnRange::new(Pfn((1 << 20) + 512), Pfn((1 << 20) + 1024));
        z.with_zone(|mz| mz.isolate_range(range)).unwrap();
        let e = m.validate().unwrap_err();
        assert_eq!(
            (e.structure, e.rule, e.pfn),
            (
                "pageblock isolation",
                "pageblock left isolated by no operation",
                Some(range.start)
            )
        );
        assert_eq!(
            std::format!("{e}"),
            std::format!(
                "pageblock isolation broken at frame {}: pageblock left isolated by no operation",
                range.start
            )
        );
        {
            let _running = z.hold();
            m.validate().unwrap();
        }
        z.with_zone(|mz| mz.unisolate_range(range)).unwrap();
        m.validate().unwrap();

        let b = m
            .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .unwrap();
        // Out of the order-0 stripe's reservation, so that the core shows
        // the block with its tag (a reserved chunk reads as untagged).
        m.drain_stripes();
        assert!(z.states.isolate(b.pfn(), Order::ZERO));
        let e = m.validate().unwrap_err();
        assert_eq!(
            (e.structure, e.rule, e.pfn),
            (
                "ownership bytes",
                "frame left busy by no operation",
                Some(b.pfn())
            )
        );
        z.states.putback(b.pfn(), Order::ZERO);
        z.with_zone(|mz| {
            mz.set_tag_bits(
                b.pfn(),
                pageframe_compact::tag::ISOLATED,
                pageframe_compact::tag::ISOLATED,
            )
        });
        let e = m.validate().unwrap_err();
        assert_eq!(
            (e.structure, e.rule),
            (
                "compaction marks",
                "block left marked by a compactor that is gone"
            )
        );
        z.with_zone(|mz| mz.set_tag_bits(b.pfn(), pageframe_compact::tag::ISOLATED, 0));
        m.validate().unwrap();
        m.free(b).unwrap();
    }
}

#[cfg(test)]
mod metadata {
    use super::Zone;
    use crate::lock::SpinLock;
    use pageframe_buddy::{Pfn, PfnRange};
    use pageframe_mobility::MobilityConfig;

    /// The formula [`Zone::metadata_bytes`] documents, for a span of
    /// `frames` frames that is whole max-order blocks: its least and most.
    fn formula(frames: u64) -> (u64, u64) {
        let per_frame = frames * 13 / 4;
        let pageblocks = frames / 512;
        (
            per_frame + 42 * pageblocks,
            per_frame + 43 * pageblocks + 20 * 1024,
        )
    }

    #[test]
    fn a_zone_costs_what_the_documented_formula_says_and_at_most_4_bytes_a_frame() {
        for mib in [128u64, 1024, 4096, 65536, 1 << 20] {
            let frames = mib << 8;
            let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + frames));
            let bytes = Zone::<SpinLock>::metadata_bytes(span, MobilityConfig::DEFAULT) as u64;
            // The page-owner records are a debugging tool's, on top (0
            // without the feature).
            let bytes = bytes - crate::debug::owner_record::Owners::bytes(span) as u64;
            let (least, most) = formula(frames);
            assert!(
                (least..=most).contains(&bytes),
                "{mib} MiB: {bytes} bytes, formula {least}..={most}"
            );
            assert!(bytes <= 4 * frames, "{mib} MiB: {bytes} bytes");
        }
    }
}
