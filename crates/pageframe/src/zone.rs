//! A zone: one buddy allocator over an address-range class, its watermarks,
//! behind one spin lock (spec 01 §3.3).

use core::fmt;
use core::mem::MaybeUninit;

use pageframe_buddy::{
    FreeError, InitError, Order, Pfn, PfnRange, RangeError, Stats, ValidateError,
};
use pageframe_mobility::{AllocMode, FallbackStats, MigrateType, MobileZone, MobilityConfig};
use spin::Mutex;

use crate::error::AllocError;
use crate::gfp::{AllocFlags, Gfp};
use crate::watermark::{
    DEFAULT_WATERMARK_SCALE_FACTOR, Watermarks, default_min_free_kbytes, watermark_ok,
};

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

pub(crate) struct ZoneInner<'a> {
    pub buddy: MobileZone<'a>,
    pub wmark: Watermarks,
    /// Frames withheld from requests whose highest usable zone is the index.
    pub lowmem_reserve: [u64; NR_ZONE_KINDS],
    pub watermark_failures: u64,
}

/// A zone: a buddy allocator grouped by mobility ([`MobileZone`]) with
/// watermarks, behind a spin lock. All methods take `&self`, so a zone (or
/// the [`crate::Node`] holding it) can be shared.
pub struct Zone<'a> {
    kind: ZoneKind,
    span: PfnRange,
    pub(crate) inner: Mutex<ZoneInner<'a>>,
    /// Per-frame states for the per-CPU cache path (see [`crate::cache`]);
    /// `None` until [`Zone::with_frame_states`].
    pub(crate) states: Option<crate::cache::FrameStates<'a>>,
    /// Zone flags the per-CPU caches read without the lock.
    pub(crate) pcp_flags: core::sync::atomic::AtomicU8,
}

impl<'a> Zone<'a> {
    /// Metadata bytes a zone over `span` needs: 16 a frame (the span rounded
    /// to 4 MiB) plus one a pageblock, plus alignment slack.
    pub const fn metadata_bytes(span: PfnRange) -> usize {
        Self::metadata_bytes_with(span, MOBILITY_DEFAULT)
    }

    /// The same for a zone built with `config`.
    pub const fn metadata_bytes_with(span: PfnRange, config: MobilityConfig) -> usize {
        MobileZone::metadata_bytes(span, config)
    }

    /// A zone of `kind` over `span`, with every frame a hole until handed
    /// over with [`Zone::add_free_range`]. `meta` is the metadata buffer, at
    /// least [`Zone::metadata_bytes`] long, typically carved from the RAM the
    /// zone will manage (and then left out of the free ranges).
    pub fn new(
        kind: ZoneKind,
        span: PfnRange,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Zone<'a>, InitError> {
        Self::with_config(kind, span, MOBILITY_DEFAULT, meta)
    }

    /// A zone with explicit mobility choices (pageblock order, grouping).
    pub fn with_config(
        kind: ZoneKind,
        span: PfnRange,
        config: MobilityConfig,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Zone<'a>, InitError> {
        let buddy = MobileZone::new(span, config, meta)?;
        Ok(Zone {
            kind,
            span,
            inner: Mutex::new(ZoneInner {
                buddy,
                wmark: Watermarks::default(),
                lowmem_reserve: [0; NR_ZONE_KINDS],
                watermark_failures: 0,
            }),
            states: None,
            pcp_flags: core::sync::atomic::AtomicU8::new(0),
        })
    }

    /// The zone's kind.
    pub fn kind(&self) -> ZoneKind {
        self.kind
    }

    /// The span, holes included.
    pub fn span(&self) -> PfnRange {
        self.span
    }

    /// Hands usable frames over. The watermarks are recomputed as if this
    /// zone were alone; a [`crate::Node`] recomputes them over all its zones.
    pub fn add_free_range(&self, range: PfnRange) -> Result<(), RangeError> {
        let mut z = self.inner.lock();
        z.buddy.add_free_range(range)?;
        let managed = z.buddy.buddy().managed_pages();
        let pages_min = default_min_free_kbytes(managed * 4) / 4;
        z.wmark = Watermarks::compute(pages_min, managed, DEFAULT_WATERMARK_SCALE_FACTOR);
        Ok(())
    }

    /// Allocates `2^order` frames: first against the low watermark, then
    /// against the min watermark with the reserve access `gfp` grants (there
    /// is no reclaim to wait for). The zone ignores zone-selector bits; the
    /// mobility bits choose the migratetype.
    #[inline]
    pub fn alloc(&self, gfp: Gfp, order: Order) -> Result<Pfn, AllocError> {
        if !gfp.is_valid() {
            return Err(AllocError::InvalidGfp);
        }
        self.try_alloc(gfp, order, AllocFlags::fast(gfp), self.kind)
            .or_else(|_| self.try_alloc(gfp, order, AllocFlags::slow(gfp, order), self.kind))
    }

    /// One attempt under one lock acquisition: the watermark check for a
    /// requester whose highest usable zone is `highest`, then the free lists
    /// of the migratetype `gfp` selects, with fallback as `flags` allow
    /// (`rmqueue`, spec 01 §6.3-6.4). A high-order atomic success reserves
    /// its pageblock for later ones (spec 02 §7).
    #[inline]
    pub fn try_alloc(
        &self,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        let mut z = self.inner.lock();
        let mark = z.wmark.get(flags.mark());
        let reserve = z.lowmem_reserve[highest.index()];
        let zone = &z.buddy;
        if order > zone.buddy().max_order() {
            return Err(AllocError::OrderTooLarge);
        }
        let reserves = flags.intersects(AllocFlags::RESERVES);
        let mut free = zone.free_pages();
        if !reserves {
            // spec 01 §7.4: the highatomic reserve is not for everyone.
            free -= zone.free_pages_of(MigrateType::HighAtomic).min(free);
        }
        let ok = watermark_ok(free, order.get(), mark, reserve, flags, |o| {
            let types: &[MigrateType] =
                if flags.intersects(AllocFlags::HIGHATOMIC | AllocFlags::OOM) {
                    &[
                        MigrateType::Unmovable,
                        MigrateType::Movable,
                        MigrateType::Reclaimable,
                        MigrateType::HighAtomic,
                    ]
                } else {
                    &[
                        MigrateType::Unmovable,
                        MigrateType::Movable,
                        MigrateType::Reclaimable,
                    ]
                };
            (o..=zone.buddy().max_order().get())
                .filter_map(Order::new)
                .any(|k| types.iter().any(|&t| zone.free_blocks_of(k, t) > 0))
        });
        if !ok {
            z.watermark_failures += 1;
            return Err(AllocError::OutOfMemory);
        }
        let mut mode = AllocMode::empty();
        mode.set(
            AllocMode::NOFRAGMENT,
            flags.contains(AllocFlags::NOFRAGMENT),
        );
        mode.set(
            AllocMode::HIGHATOMIC,
            flags.contains(AllocFlags::HIGHATOMIC),
        );
        mode.set(
            AllocMode::RESERVES,
            flags.intersects(AllocFlags::NON_BLOCK | AllocFlags::OOM),
        );
        let p = z
            .buddy
            .alloc(order, gfp.migratetype(), mode)
            .map_err(AllocError::from)?;
        if flags.contains(AllocFlags::HIGHATOMIC) {
            z.buddy.reserve_highatomic(p, order);
        }
        self.after_zone_op(&z);
        if let Some(st) = &self.states {
            st.set_allocated(p, order, gfp.migratetype());
        }
        Ok(p)
    }

    /// Frees a block; bad input gets a [`FreeError`] and changes nothing.
    #[inline]
    pub fn free(&self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let mut z = self.inner.lock();
        if let Some(st) = &self.states {
            // A block sitting in a per-CPU cache is free as far as its owner
            // is concerned: freeing it again is a double free.
            st.check_not_cached(pfn)?;
        }
        z.buddy.free(pfn, order)?;
        self.after_zone_op(&z);
        if let Some(st) = &self.states {
            st.set_free(pfn, order);
        }
        Ok(())
    }

    /// Free frames.
    pub fn free_pages(&self) -> u64 {
        self.inner.lock().buddy.free_pages()
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

    /// Checks every invariant of the zone.
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.inner.lock().buddy.validate()
    }

    /// Runs `f` on the mobility zone under the lock (diagnostics, and the
    /// layers that drive the free lists directly: compaction, isolation).
    pub fn with_zone<R>(&self, f: impl FnOnce(&mut MobileZone<'a>) -> R) -> R {
        f(&mut self.inner.lock().buddy)
    }
}

impl fmt::Display for Zone<'_> {
    /// One `/proc/buddyinfo` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z = self.inner.lock();
        write!(f, "{}", z.buddy.buddy().buddyinfo_named(self.kind.name()))
    }
}

/// A zone's `/proc/pagetypeinfo` section; see [`Zone::pagetypeinfo`].
pub struct PageTypeInfo<'z, 'a>(&'z Zone<'a>);

impl fmt::Display for PageTypeInfo<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let z = self.0.inner.lock();
        write!(f, "{}", z.buddy.pagetypeinfo(self.0.kind.name()))
    }
}

impl<'a> Zone<'a> {
    /// Free blocks per order per migratetype and pageblocks per type.
    pub fn pagetypeinfo(&self) -> PageTypeInfo<'_, 'a> {
        PageTypeInfo(self)
    }
}

/// The mobility configuration zones get by default.
const MOBILITY_DEFAULT: MobilityConfig = MobilityConfig::DEFAULT;
