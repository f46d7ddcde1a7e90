//! A buddy zone grouped by mobility: the buddy core with the [`Mobility`]
//! policy, and the allocation path that uses it (spec 01 §6.3-6.4).

use core::mem::MaybeUninit;

use bitflags::bitflags;
use pageframe_buddy::{
    AllocError, BlockInfo, BuddyConfig, BuddyZone, FreeError, InitError, Order, Pfn, PfnRange,
    RangeError, Stats,
};

use crate::migratetype::list_of;
use crate::policy::Mobility;
use crate::stats::FallbackStats;
use crate::{MigrateType, Pageblocks, tag};

/// Build-time choices of a mobility zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MobilityConfig {
    /// The buddy core's choices (maximum order).
    pub buddy: BuddyConfig,
    /// Pageblock order (spec 02 §3: 9 on x86-64, a 2 MiB huge page).
    pub pageblock_order: Order,
    /// Group by mobility. Off, every request is treated as unmovable and
    /// fallback never happens (Linux on tiny systems; the lab's baseline).
    pub grouping: bool,
    /// Log2 of the frames of a superpageblock, the region a fallback for
    /// memory that cannot move keeps to ([`crate::Superpageblocks`]): 18,
    /// 1 GiB of 4 KiB frames. At least the maximum order (a zone with a
    /// smaller one is refused with `InitError::BadMaxOrder`), at most
    /// [`crate::MAX_SUPERPAGEBLOCK_SHIFT`].
    pub superpageblock_shift: u8,
}

impl MobilityConfig {
    /// Maximum order 10, 2 MiB pageblocks, grouping on (Linux).
    pub const DEFAULT: MobilityConfig = MobilityConfig {
        buddy: BuddyConfig::new(Order::DEFAULT_MAX),
        pageblock_order: Order::HUGE_2M,
        grouping: true,
        superpageblock_shift: crate::DEFAULT_SUPERPAGEBLOCK_SHIFT,
    };

    /// The buddy core's configuration under this one: its chunks are the
    /// pageblocks (or parts of them, above the core's largest chunk), so
    /// that a chunk's free memory has one type.
    pub const fn core(&self) -> BuddyConfig {
        let pb = self.pageblock_order.get();
        let c = if pb < pageframe_buddy::MAX_CHUNK_ORDER {
            pb
        } else {
            pageframe_buddy::MAX_CHUNK_ORDER
        };
        BuddyConfig {
            max_order: self.buddy.max_order,
            chunk_order: Order::new_truncated(c),
        }
    }
}

impl Default for MobilityConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

bitflags! {
    /// How an allocation may use fallbacks and reserves (the part of
    /// Linux's `ALLOC_*` flags that reaches the free lists).
    #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
    pub struct AllocMode: u8 {
        /// Do not claim below pageblock order and do not steal (spec 02 §5.5).
        const NOFRAGMENT = 1 << 0;
        /// Try the highatomic reserve first (high-order atomic request).
        const HIGHATOMIC = 1 << 1;
        /// May use the highatomic reserve as a last resort (non-blocking or
        /// OOM-victim requests, spec 01 §6.4).
        const RESERVES = 1 << 2;
        /// A movable request may use CMA pageblocks (`ALLOC_CMA`, spec 01
        /// §6.3).
        const CMA = 1 << 3;
    }
}

/// A buddy zone whose free lists are split by migratetype.
pub struct MobileZone<'a> {
    pub(crate) buddy: BuddyZone<'a, Mobility<'a>>,
}

impl<'a> MobileZone<'a> {
    /// Metadata bytes for `span`: the buddy core's (about 4.3 a frame,
    /// see `pageframe_buddy`) and one a pageblock (type, isolate and skip
    /// bits).
    pub const fn metadata_bytes(span: PfnRange, config: MobilityConfig) -> usize {
        let b = BuddyZone::<Mobility<'static>>::metadata_bytes(span, config.core());
        if b == 0 {
            0
        } else {
            b.saturating_add(Pageblocks::bytes(
                span,
                config.pageblock_order,
                config.buddy.max_order,
                config.superpageblock_shift,
            ))
        }
    }

    /// A zone over `span`, all frames holes until handed over. Every
    /// pageblock starts Movable (Unmovable with grouping off), as at boot.
    pub fn new(
        span: PfnRange,
        config: MobilityConfig,
        meta: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, InitError> {
        if config.pageblock_order > config.buddy.max_order
            || config.superpageblock_shift < config.buddy.max_order.get()
            || config.superpageblock_shift > crate::MAX_SUPERPAGEBLOCK_SHIFT
        {
            return Err(InitError::BadMaxOrder);
        }
        let needed = Self::metadata_bytes(span, config);
        let given = meta.len();
        let buddy_bytes = BuddyZone::<Mobility<'static>>::metadata_bytes(span, config.core());
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
        let (frames, bits) = meta.split_at_mut(buddy_bytes);
        let initial = if config.grouping {
            MigrateType::Movable
        } else {
            MigrateType::Unmovable
        };
        let blocks = Pageblocks::new(
            span,
            config.pageblock_order,
            config.buddy.max_order,
            config.superpageblock_shift,
            bits,
            initial,
        )
        .ok_or(InitError::MetadataTooSmall { needed, given })?;
        let policy = Mobility {
            blocks,
            grouping: config.grouping,
            placement: crate::Placement::default(),
            reserved_highatomic: 0,
            stats: FallbackStats::default(),
            futile: [None; 2],
        };
        Ok(MobileZone {
            buddy: BuddyZone::new(span, config.core(), frames, policy)?,
        })
    }

    /// The buddy core underneath (read-only: mutation goes through the
    /// mobility operations so the free-list hygiene rule holds).
    pub fn buddy(&self) -> &BuddyZone<'a, Mobility<'a>> {
        &self.buddy
    }

    /// The mobility state.
    pub fn mobility(&self) -> &Mobility<'a> {
        self.buddy.policy()
    }

    /// Mutable access to the pageblock bitmap's hint bits for compaction.
    pub fn pageblocks_mut(&mut self) -> &mut Pageblocks<'a> {
        self.buddy.policy_mut().pageblocks_mut()
    }

    /// The zone's span.
    pub fn span(&self) -> PfnRange {
        self.buddy.span()
    }

    /// Pageblock order.
    pub fn pageblock_order(&self) -> Order {
        self.mobility().blocks.order()
    }

    /// Hands usable frames over; they go to their pageblocks' lists.
    pub fn add_free_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.buddy.add_free_range(range)
    }

    /// Up to `max` more order-0 frames for a request of type `mt` from the
    /// chunk of `pfn`, an order-0 frame just allocated for one, while that
    /// chunk is on `mt`'s own list (a claim may have just put it there; a
    /// steal leaves it on another's, and nothing more is taken): see
    /// `BuddyZone::alloc_run`. Each frame is tagged with `mt`, as
    /// [`MobileZone::alloc`] tags it.
    pub fn alloc_run(
        &mut self,
        pfn: Pfn,
        mt: MigrateType,
        max: usize,
        take: impl FnMut(Pfn, u64) -> u64,
    ) -> usize {
        let mt = if self.mobility().grouping {
            mt
        } else {
            MigrateType::Unmovable
        };
        if !mt.is_mergeable() {
            return 0;
        }
        self.buddy.alloc_run(pfn, list_of(mt), max, mt as u32, take)
    }

    /// `n` contiguous frames (1..=64) of type `mt`'s own list, each an
    /// order-0 allocation tagged with `mt`, from one bitmap word of the
    /// chunk a block holding `n` would come from (`BuddyZone::alloc_frame_run`):
    /// no fallback to another type's lists and no CMA frames, so `None`
    /// (nothing changed) sends the caller to its block path, which has
    /// both.
    pub fn alloc_frame_run(&mut self, mt: MigrateType, n: u32) -> Option<Pfn> {
        let mt = if self.mobility().grouping {
            mt
        } else {
            MigrateType::Unmovable
        };
        if !mt.is_mergeable() {
            return None;
        }
        self.buddy.alloc_frame_run(list_of(mt), n, mt as u32)
    }

    /// Frees `n` order-0 allocations from `first`, all in one bitmap word
    /// of a chunk, at once (`BuddyZone::free_frame_run`): the same errors
    /// as a free of each, nothing changed on one.
    pub fn free_frame_run(&mut self, first: Pfn, n: u32) -> Result<(), FreeError> {
        self.buddy.free_frame_run(first, n)
    }

    /// Allocates `2^order` frames for a request of type `mt`: its own lists
    /// first, then claiming a fallback block, then stealing one (spec 02
    /// §5.2), with the highatomic reserve as `mode` allows. The block's tag
    /// records `mt` (see [`tag`]).
    #[inline]
    pub fn alloc(
        &mut self,
        order: Order,
        mt: MigrateType,
        mode: AllocMode,
    ) -> Result<Pfn, AllocError> {
        if order > self.buddy.max_order() {
            return Err(AllocError::OrderTooLarge);
        }
        let mt = if self.mobility().grouping {
            mt
        } else {
            MigrateType::Unmovable
        };
        // Every path of `rmqueue` tags the block with `mt`.
        match self.rmqueue(order, mt, mode) {
            Some(p) => Ok(p),
            None => {
                self.buddy.policy_mut().stats.failures += 1;
                Err(AllocError::OutOfMemory)
            }
        }
    }

    fn rmqueue(&mut self, order: Order, mt: MigrateType, mode: AllocMode) -> Option<Pfn> {
        // spec 01 §6.4: highatomic first for those who may reserve it.
        if mode.contains(AllocMode::HIGHATOMIC)
            && let Some(p) = self.smallest(order, MigrateType::HighAtomic, mt)
        {
            self.buddy.policy_mut().stats.highatomic_used += 1;
            return Some(p);
        }
        if !matches!(
            mt,
            MigrateType::Unmovable | MigrateType::Movable | MigrateType::Reclaimable
        ) {
            return self.smallest(order, mt, mt);
        }
        let cma = mode.contains(AllocMode::CMA) && mt == MigrateType::Movable;
        if cma && let Some(p) = self.cma_first(order) {
            return Some(p);
        }
        if let Some(p) = self.smallest(order, mt, mt) {
            self.buddy.policy_mut().stats.own += 1;
            return Some(p);
        }
        if cma && let Some(p) = self.cma_any(order) {
            return Some(p);
        }
        if let Some(p) = self.fallback(order, mt, mode) {
            return Some(p);
        }
        if mode.intersects(AllocMode::RESERVES | AllocMode::HIGHATOMIC) {
            let p = self.smallest(order, MigrateType::HighAtomic, mt)?;
            self.buddy.policy_mut().stats.highatomic_used += 1;
            return Some(p);
        }
        None
    }

    /// spec 01 §6.3 step 1: while CMA holds more than half the free memory,
    /// movable requests take from it first (so that it is used, and
    /// ordinary memory is left for the requests that cannot). Out of line:
    /// zones without CMA never get here with memory in it.
    #[cold]
    #[inline(never)]
    fn cma_first(&mut self, order: Order) -> Option<Pfn> {
        if self.free_pages_of(MigrateType::Cma) > self.free_pages() / 2 {
            return self.cma_any(order);
        }
        None
    }

    /// spec 01 §6.3 step 3: a movable request's own lists are empty: CMA.
    #[cold]
    #[inline(never)]
    fn cma_any(&mut self, order: Order) -> Option<Pfn> {
        let p = self.smallest(order, MigrateType::Cma, MigrateType::Movable)?;
        self.buddy.policy_mut().stats.cma += 1;
        Some(p)
    }

    /// `__rmqueue_smallest`: the smallest sufficient block on `from`'s
    /// lists, tagged as an allocation of type `mt`.
    pub(crate) fn smallest(
        &mut self,
        order: Order,
        from: MigrateType,
        mt: MigrateType,
    ) -> Option<Pfn> {
        self.buddy
            .alloc_tagged(order, list_of(from), mt as u32)
            .ok()
    }

    /// Frees a block. Blocks above pageblock order are freed pageblock by
    /// pageblock so each piece reaches its own block's list (spec 01 §5.2).
    pub fn free(&mut self, pfn: Pfn, order: Order) -> Result<(), FreeError> {
        let pb = self.pageblock_order();
        if order > pb {
            self.buddy.free_in_pieces(pfn, order, pb)
        } else {
            self.buddy.free(pfn, order)
        }
    }

    /// Splits an allocated block into its two halves
    /// (`BuddyZone::split_allocated`): returns the upper half's head. Both
    /// halves keep this layer's bits of the tag (the type, the pin: each
    /// frame keeps what it was). The bits a layer above set with
    /// [`MobileZone::set_tag_bits`] mark the block by its head (a
    /// compactor's mark on a block it moves): they stay with the lower
    /// half, whose head that is, and the upper half starts without them,
    /// since whoever set them will clear them at that head only.
    pub fn split_allocated(&mut self, pfn: Pfn, order: Order) -> Result<Pfn, FreeError> {
        self.buddy.split_allocated_masked(pfn, order, tag::RESERVED)
    }

    /// Reserves one chunk's free frames of type `mt` for order-0
    /// allocations outside the zone lock (`BuddyZone::reserve`, which also
    /// says what `min_free` is for); the frames
    /// allocated from it carry `mt` as their tag once it is given back.
    /// `None` for a type other than the three basic ones, or when `mt`'s
    /// own lists are empty (no fallback: the caller's zone path has it).
    pub fn reserve(
        &mut self,
        mt: MigrateType,
        min_free: u32,
    ) -> Option<pageframe_buddy::Reservation> {
        let mt = if self.mobility().grouping {
            mt
        } else {
            MigrateType::Unmovable
        };
        if !mt.is_mergeable() {
            return None;
        }
        self.buddy.reserve(list_of(mt), mt as u32, min_free)
    }

    /// Whether an allocation of `order` and `mt` finds nothing on its own
    /// type's lists and would fall back to another type's (spec 01 §6.3);
    /// never without grouping, which has no fallback.
    #[inline]
    pub fn would_fall_back(&self, order: Order, mt: MigrateType) -> bool {
        self.mobility().grouping
            && mt.is_mergeable()
            && if order == Order::ZERO {
                self.free_pages_of(mt) == 0
            } else {
                !self.buddy.has_block_in(order, list_of(mt))
            }
    }

    /// Whether [`MobileZone::reserve`] of `mt` would succeed now.
    pub fn reservable(&self, mt: MigrateType, min_free: u32) -> bool {
        let mt = if self.mobility().grouping {
            mt
        } else {
            MigrateType::Unmovable
        };
        mt.is_mergeable() && self.buddy.reservable(list_of(mt), min_free)
    }

    /// Gives a reservation back (`BuddyZone::unreserve`).
    #[allow(clippy::result_large_err)] // see `BuddyZone::unreserve`
    pub fn unreserve(
        &mut self,
        r: pageframe_buddy::Reservation,
    ) -> Result<(), pageframe_buddy::Reservation> {
        self.buddy.unreserve(r)
    }

    /// [`MobileZone::free`] without the core's checks, for a caller that
    /// keeps its own record of live allocations (see
    /// `BuddyZone::free_unchecked`).
    ///
    /// # Safety
    ///
    /// `pfn` must head a live block this zone allocated with exactly
    /// `order`.
    #[inline(always)]
    pub unsafe fn free_unchecked(&mut self, pfn: Pfn, order: Order) {
        if order > self.pageblock_order() {
            self.free_above_pageblock(pfn, order);
        } else {
            // SAFETY: the caller's contract is the core's.
            unsafe { self.buddy.free_unchecked(pfn, order) }
        }
    }

    /// A live block above the pageblock order, freed a pageblock at a
    /// time. Out of line: the order-0 free inlines the rest of
    /// [`MobileZone::free_unchecked`] without this branch's registers.
    #[inline(never)]
    fn free_above_pageblock(&mut self, pfn: Pfn, order: Order) {
        let r = self
            .buddy
            .free_in_pieces(pfn, order, self.pageblock_order());
        debug_assert!(r.is_ok(), "a live block frees");
    }

    /// The migratetype of `pfn`'s pageblock (`Isolate` if isolated).
    pub fn block_type(&self, pfn: Pfn) -> Option<MigrateType> {
        if !self.span().contains(pfn) {
            return None;
        }
        self.mobility().blocks.get(pfn)
    }

    /// The type an allocated block was requested as, from its tag.
    pub fn allocated_type(&self, head: Pfn) -> Option<MigrateType> {
        self.buddy
            .tag(head)
            .and_then(|t| MigrateType::from_value((t & tag::MT_MASK) as u8))
    }

    /// Takes the free block headed by `head` off the free lists as an
    /// allocation of type `mt` (compaction's free scanner,
    /// `__isolate_free_page`): blocks of at least half a pageblock retype
    /// their mergeable pageblocks to `mt`, as Linux does for movable. Returns
    /// the block's order.
    pub fn take_free_block(&mut self, head: Pfn, mt: MigrateType) -> Result<Order, AllocError> {
        let order = self.buddy.take_free_block(head)?;
        self.buddy.set_tag(head, mt as u32);
        let pb = self.pageblock_order();
        if order.get() + 1 >= pb.get() {
            let end = head + order.pages();
            let mut p = head.align_down(pb);
            while p < end {
                // Retype with the block's other free memory (hygiene).
                if self
                    .mobility()
                    .blocks
                    .get(p)
                    .is_some_and(MigrateType::is_mergeable)
                    && mt.is_mergeable()
                    && !(self.last_taint(p, mt) && self.holds_unmovable(p))
                {
                    self.move_block_free_lists(p, mt);
                }
                p = p + pb.pages();
            }
        }
        Ok(order)
    }

    /// Allocates the specific block at `pfn` as type `mt` (contiguous
    /// allocation, compaction capture), ignoring types and fallback.
    pub fn alloc_at(&mut self, pfn: Pfn, order: Order, mt: MigrateType) -> Result<(), AllocError> {
        self.buddy.alloc_at(pfn, order)?;
        self.buddy.set_tag(pfn, mt as u32);
        Ok(())
    }

    /// The tag word of an allocated block (see [`tag`] for the bits this
    /// layer uses; bits 4 up to [`tag::KEPT`] are free for layers above).
    pub fn tag(&self, head: Pfn) -> Option<u32> {
        self.buddy.tag(head)
    }

    /// Sets the bits of an allocated block's tag selected by `mask` (the
    /// low four bits belong to this layer: change it through its operations;
    /// bits above [`tag::KEPT`] are not kept). `false`, changing nothing,
    /// if `head` is not an allocated block's head or `value` sets a bit of
    /// `mask` above [`tag::KEPT`].
    pub fn set_tag_bits(&mut self, head: Pfn, mask: u32, value: u32) -> bool {
        let mask = mask & !tag::RESERVED;
        if value & mask & !tag::KEPT != 0 {
            return false;
        }
        let mask = mask & tag::KEPT;
        match self.buddy.tag(head) {
            Some(t) => self.buddy.set_tag(head, (t & !mask) | (value & mask)),
            None => false,
        }
    }

    /// Pins or unpins an allocated block: a pinned block is treated as
    /// unmovable (isolation refuses it, compaction skips it). `false`,
    /// changing nothing, if `head` is not an allocated block's head.
    pub fn set_pinned(&mut self, head: Pfn, pinned: bool) -> bool {
        let Some(t) = self.buddy.tag(head) else {
            return false;
        };
        let t = if pinned {
            t | tag::PINNED
        } else {
            t & !tag::PINNED
        };
        self.buddy.set_tag(head, t)
    }

    /// Whether an allocated block is pinned.
    pub fn is_pinned(&self, head: Pfn) -> bool {
        self.buddy.tag(head).is_some_and(|t| t & tag::PINNED != 0)
    }

    /// Free frames that can be allocated (isolated lists excluded, spec 02
    /// §11.9).
    pub fn free_pages(&self) -> u64 {
        self.buddy.free_pages() - self.buddy.free_pages_in(list_of(MigrateType::Isolate))
    }

    /// Free frames on one type's lists.
    pub fn free_pages_of(&self, mt: MigrateType) -> u64 {
        self.buddy.free_pages_in(list_of(mt))
    }

    /// Free blocks of `order` on `mt`'s list.
    pub fn free_blocks_of(&self, order: Order, mt: MigrateType) -> u64 {
        self.buddy.free_blocks_in(order, list_of(mt))
    }

    /// The fallback counters.
    pub fn stats(&self) -> FallbackStats {
        self.mobility().stats
    }

    /// The buddy core's counters.
    pub fn buddy_stats(&self) -> Stats {
        self.buddy.stats()
    }

    /// Frames of memory (free or allocated) in pageblocks of each type.
    pub fn pageblocks_by_type(&self) -> [u64; crate::MIGRATE_TYPES] {
        self.mobility().blocks.count_by_type()
    }

    /// Free blocks per order over all lists (the input of the indices).
    pub fn nr_free(&self) -> [u64; pageframe_buddy::ORDER_LIMIT as usize + 1] {
        let mut n = [0u64; pageframe_buddy::ORDER_LIMIT as usize + 1];
        for (o, slot) in n
            .iter_mut()
            .enumerate()
            .take(self.buddy.max_order().get() as usize + 1)
        {
            *slot = self
                .buddy
                .free_blocks(Order::new(o as u8).unwrap_or_default());
        }
        n
    }

    /// Pageblocks that hold at least one allocated block of a type other
    /// than movable (the lab's "pollution" numerator).
    pub fn polluted_pageblocks(&self) -> u64 {
        let b = &self.mobility().blocks;
        (0..b.len())
            .filter(|&i| {
                let start = b.block_start(i);
                self.buddy.walk(PfnRange::new(start, start + b.pages())).any(|(_, info)| {
                    matches!(info, BlockInfo::Allocated { tag: t, .. } if (t & tag::MT_MASK) != MigrateType::Movable as u32)
                })
            })
            .count() as u64
    }
}
