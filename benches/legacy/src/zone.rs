//! The buddy zone: a span of frames with holes, its metadata and free lists.

use core::mem::MaybeUninit;

use crate::error::{InitError, RangeError};
use crate::frame::{Frame, FrameTable, Idx, State};
use crate::free_area::FreeAreas;
use crate::policy::{ListId, MergePolicy, SingleList};
use crate::stats::Stats;
use crate::{ORDER_LIMIT, Order, Pfn, PfnRange};

/// Build-time choices of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuddyConfig {
    /// Largest block order (Linux `MAX_PAGE_ORDER`, default 10).
    pub max_order: Order,
}

impl Default for BuddyConfig {
    fn default() -> Self {
        BuddyConfig {
            max_order: Order::DEFAULT_MAX,
        }
    }
}

/// What a frame belongs to, as seen from outside.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BlockInfo {
    /// The frame is not managed (firmware hole, never handed over).
    Hole,
    /// The frame lies in a free block.
    Free {
        /// The block's first frame.
        head: Pfn,
        /// The block's order.
        order: Order,
        /// The list it is on.
        list: ListId,
    },
    /// The frame lies in an allocated block.
    Allocated {
        /// The block's first frame.
        head: Pfn,
        /// The block's order.
        order: Order,
        /// The tag the layers above keep on the block (see [`BuddyZone::tag`]).
        tag: u32,
    },
}

/// A binary buddy allocator over one zone (spec 01 §4-6): free lists per
/// order, each order holding [`crate::MAX_LISTS`] lists whose meaning the
/// policy `P` gives.
///
/// Metadata (16 bytes a frame) lives in the buffer handed to [`BuddyZone::new`].
/// It is written lazily: a free max-order block is described by its first
/// frame alone until it is first split, so setting up a zone costs time in
/// proportion to its max-order blocks, not its frames.
pub struct BuddyZone<'a, P: MergePolicy = SingleList> {
    pub(crate) span: PfnRange,
    /// Frame number of metadata index 0: the span's start rounded down to
    /// max-order alignment, so buddies of in-zone blocks always have metadata.
    pub(crate) base: Pfn,
    pub(crate) frames: FrameTable<'a>,
    pub(crate) areas: FreeAreas<'a>,
    pub(crate) max_order: u8,
    pub(crate) managed: u64,
    pub(crate) stats: Stats,
    pub(crate) policy: P,
}

impl<'a, P: MergePolicy> BuddyZone<'a, P> {
    /// Metadata bytes a zone over `span` with `config` needs (the buffer may
    /// start at any address). 0 for an invalid span or config.
    pub const fn metadata_bytes(span: PfnRange, config: BuddyConfig) -> usize {
        match Self::table_frames(span, config) {
            Some(n) => {
                FrameTable::bytes(n, config.max_order.get()).saturating_add(FreeAreas::bytes())
            }
            None => 0,
        }
    }

    const fn table_frames(span: PfnRange, config: BuddyConfig) -> Option<u64> {
        // A span reaching past the last frame an address can name is no
        // memory at all.
        if span.is_empty()
            || config.max_order.get() > ORDER_LIMIT
            || span.end.get() > crate::MAX_PFN
        {
            return None;
        }
        let lo = span.start.align_down(config.max_order).get();
        let hi = span.end.align_up(config.max_order).get();
        let n = hi - lo;
        if n >= Idx::MAX as u64 { None } else { Some(n) }
    }

    /// A zone over `span` whose frames are all holes until handed over with
    /// [`BuddyZone::add_free_range`]. `meta` must hold at least
    /// [`BuddyZone::metadata_bytes`] bytes; the zone borrows it for its life.
    pub fn new(
        span: PfnRange,
        config: BuddyConfig,
        meta: &'a mut [MaybeUninit<u8>],
        policy: P,
    ) -> Result<Self, InitError> {
        if config.max_order.get() > ORDER_LIMIT {
            return Err(InitError::BadMaxOrder);
        }
        if span.is_empty() {
            return Err(InitError::EmptySpan);
        }
        let frames = Self::table_frames(span, config).ok_or(InitError::SpanTooLarge)?;
        let needed = Self::metadata_bytes(span, config);
        let given = meta.len();
        let too_small = InitError::MetadataTooSmall { needed, given };
        if given < needed {
            return Err(too_small);
        }
        // Only max-order heads are written: each stands for its whole block.
        let (table, rest) = FrameTable::carve(
            meta,
            frames as usize,
            config.max_order.get(),
            Frame::with_state(State::Hole),
        )
        .ok_or(too_small)?;
        let (areas, _) = FreeAreas::carve(rest).ok_or(too_small)?;
        Ok(BuddyZone {
            span,
            base: span.start.align_down(config.max_order),
            frames: table,
            areas,
            max_order: config.max_order.get(),
            managed: 0,
            stats: Stats::default(),
            policy,
        })
    }

    /// The zone's span (holes included).
    pub fn span(&self) -> PfnRange {
        self.span
    }

    /// The largest block order.
    pub fn max_order(&self) -> Order {
        Order::new_truncated(self.max_order)
    }

    /// Frames handed over with `add_free_range` (Linux's managed pages).
    pub fn managed_pages(&self) -> u64 {
        self.managed
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The policy, mutably (e.g. to retype pageblocks).
    pub fn policy_mut(&mut self) -> &mut P {
        &mut self.policy
    }

    #[inline]
    pub(crate) fn idx(&self, pfn: Pfn) -> Idx {
        (pfn - self.base) as Idx
    }

    #[inline]
    pub(crate) fn pfn(&self, i: Idx) -> Pfn {
        self.base + i as u64
    }

    #[inline]
    pub(crate) fn span_head(&self, i: Idx) -> Idx {
        i & !((1 << self.max_order) - 1)
    }

    /// Frame `i`'s metadata, honouring lazy init: a frame of a max-order
    /// block that was never split reads as the head says (a hole, or a tail).
    #[inline]
    pub(crate) fn view(&self, i: Idx) -> Frame {
        self.frames.get(i)
    }

    /// Writes every frame of the max-order block headed by `h` so that its
    /// frames may be read and split individually.
    pub(crate) fn init_span(&mut self, h: Idx) {
        self.frames.init_block(h);
    }

    /// Sets a frame's state and order, keeping its flags.
    #[inline]
    pub(crate) fn set(&mut self, i: Idx, state: State, order: u8) {
        let f = self.frames.get_mut(i);
        f.state = state;
        f.order = order;
    }

    /// The block frame `i` lies in: `(head index, head metadata)`, or `None`
    /// for a hole.
    pub(crate) fn containing(&self, i: Idx) -> Option<(Idx, Frame)> {
        let f = self.view(i);
        match f.state {
            State::Hole => None,
            State::FreeHead | State::AllocHead => Some((i, f)),
            State::Tail => (1..=self.max_order).find_map(|o| {
                let h = i & !((1 << o) - 1);
                let hf = self.view(h);
                let head = matches!(hf.state, State::FreeHead | State::AllocHead);
                (head && hf.order >= o && h + (1 << hf.order) > i).then_some((h, hf))
            }),
        }
    }

    /// What the frame `pfn` belongs to; `None` outside the zone's span.
    pub fn block_at(&self, pfn: Pfn) -> Option<BlockInfo> {
        if !self.span.contains(pfn) {
            return None;
        }
        Some(match self.containing(self.idx(pfn)) {
            None => BlockInfo::Hole,
            Some((h, f)) if f.state == State::FreeHead => BlockInfo::Free {
                head: self.pfn(h),
                order: Order::new_truncated(f.order),
                list: ListId::from_stored(f.list),
            },
            Some((h, f)) => BlockInfo::Allocated {
                head: self.pfn(h),
                order: Order::new_truncated(f.order),
                tag: f.tag,
            },
        })
    }

    /// Hands the frames of `range` to the allocator (usable RAM from the
    /// memory map). Each block goes to the list the policy names. Whole free
    /// max-order blocks cost one metadata write each.
    ///
    /// Errors (state unchanged): an empty range, a range outside the span, or
    /// a frame that was already handed over.
    pub fn add_free_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_add_range(range)?;
        let max = Order::new_truncated(self.max_order);
        let maxpages = max.pages();
        // Then apply. Boot memory goes to the tail of the lists (spec 01 §5.1,
        // FPI_TO_TAIL), so recently freed memory is reused first.
        let saved = self.stats;
        let mut h = range.start.align_down(max);
        while h < range.end {
            let part = range.intersect(&PfnRange::new(h, h + maxpages));
            let hi = self.idx(h);
            if part.len() == maxpages && !self.frames.is_init(hi) {
                self.set(hi, State::FreeHead, self.max_order);
                let list = self.policy.list_for(h);
                self.areas
                    .push(&mut self.frames, hi, self.max_order, list, true);
            } else {
                self.init_span(hi);
                for (p, o) in part.blocks(max) {
                    let i = self.idx(p);
                    for t in i + 1..i + (1 << o.get()) {
                        self.set(t, State::Tail, 0);
                    }
                    self.set(i, State::AllocHead, o.get());
                    let list = self.policy.list_for(p);
                    self.free_block(i, o.get(), list, true);
                }
            }
            h = h + maxpages;
        }
        self.stats = saved;
        self.managed += range.len();
        Ok(())
    }

    /// Whether [`BuddyZone::add_free_range`] would accept `range`: non-empty,
    /// inside the span, and every frame still a hole. Costs one read per
    /// untouched max-order block.
    pub fn check_add_range(&self, range: PfnRange) -> Result<(), RangeError> {
        if range.is_empty() {
            return Err(RangeError::Empty);
        }
        if !self.span.contains_range(&range) {
            return Err(RangeError::OutOfSpan);
        }
        let max = Order::new_truncated(self.max_order);
        let mut h = range.start.align_down(max);
        while h < range.end {
            let part = range.intersect(&PfnRange::new(h, h + max.pages()));
            let head = self.frames.get(self.idx(h));
            if !self.frames.is_init(self.idx(h)) {
                if head.state != State::Hole {
                    return Err(RangeError::Overlap { pfn: part.start });
                }
            } else if let Some(p) = (part.start.get()..part.end.get())
                .find(|&p| self.view(self.idx(Pfn(p))).state != State::Hole)
            {
                return Err(RangeError::Overlap { pfn: Pfn(p) });
            }
            h = h + max.pages();
        }
        Ok(())
    }

    /// The opaque tag word kept on an allocated block's head (0 when
    /// allocated). Layers above use it, e.g. to mark movable blocks.
    pub fn tag(&self, head: Pfn) -> Option<u32> {
        self.alloc_head(head).map(|i| self.frames.get(i).tag)
    }

    /// Sets the tag of an allocated block's head; `false` (nothing written)
    /// if `head` is not the head of an allocated block.
    pub fn set_tag(&mut self, head: Pfn, tag: u32) -> bool {
        match self.alloc_head(head) {
            Some(i) => {
                self.frames.get_mut(i).tag = tag;
                true
            }
            None => false,
        }
    }

    fn alloc_head(&self, head: Pfn) -> Option<Idx> {
        if !self.span.contains(head) {
            return None;
        }
        let i = self.idx(head);
        (self.view(i).state == State::AllocHead).then_some(i)
    }
}
