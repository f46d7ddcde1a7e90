//! The buddy zone: a span of frames with holes, its metadata and free lists.

use core::mem::MaybeUninit;

use pageframe_types::carve;

use crate::bits;
use crate::chunk::{Chunk, ChunkTable, MAX_CHUNK_ORDER, Mode};
use crate::error::{InitError, RangeError};
use crate::frame::{FrameWords, Idx, Kind, TAG_MASK, Word};
use crate::free_area::FreeAreas;
use crate::partial_chunks::PartialIndex;
use crate::policy::{ListId, MAX_LISTS, MergePolicy, SingleList};
use crate::stats::Stats;
use crate::{ORDER_LIMIT, Order, Pfn, PfnRange};

/// Build-time choices of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuddyConfig {
    /// Largest block order (Linux `MAX_PAGE_ORDER`, default 10).
    pub max_order: Order,
    /// Order of the core's chunks (at most [`MAX_CHUNK_ORDER`] and
    /// `max_order`): blocks below it are kept in per-chunk bitmaps and
    /// served from the fullest chunk (see the crate docs). A policy's
    /// [`MergePolicy::list_for`] must name one list for all frames of a
    /// chunk (the mobility layer uses its pageblock order, or 9 if larger).
    pub chunk_order: Order,
}

impl BuddyConfig {
    /// Maximum order `max_order`, chunks of order `min(9, max_order)`.
    pub const fn new(max_order: Order) -> BuddyConfig {
        let c = if max_order.get() < MAX_CHUNK_ORDER {
            max_order
        } else {
            Order::new_truncated(MAX_CHUNK_ORDER)
        };
        BuddyConfig {
            max_order,
            chunk_order: c,
        }
    }
}

impl Default for BuddyConfig {
    fn default() -> Self {
        BuddyConfig::new(Order::DEFAULT_MAX)
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

/// Free blocks below the chunk order and their frames, per list (the
/// counterpart of the large lists' lengths and page counts). The block
/// counts live in the zone's metadata.
pub(crate) struct SubCounts<'a> {
    blocks: &'a mut [OrderCounts; MAX_LISTS],
    pages: &'a mut [u64; MAX_LISTS],
    /// The sum of `pages`.
    total: u64,
}

/// One list's counts of free blocks per order below the chunk order, with
/// room for every order a masked index names (no bounds check).
type OrderCounts = [u64; SUB_ORDERS];
const SUB_ORDERS: usize = (MAX_CHUNK_ORDER as usize + 1).next_power_of_two();

impl SubCounts<'_> {
    /// Free blocks of `order` on list `l`.
    #[inline]
    pub fn blocks(&self, l: usize, order: u8) -> u64 {
        self.blocks[l & (MAX_LISTS - 1)][order as usize & (SUB_ORDERS - 1)]
    }

    /// Free frames in small blocks on list `l`.
    #[inline]
    pub fn pages(&self, l: usize) -> u64 {
        self.pages[l & (MAX_LISTS - 1)]
    }

    /// Free frames in small blocks on every list.
    #[inline]
    pub fn total(&self) -> u64 {
        self.total
    }

    #[inline]
    pub fn add_pages(&mut self, l: usize, n: u64) {
        self.pages[l & (MAX_LISTS - 1)] += n;
        self.total += n;
    }

    #[inline]
    pub fn sub_pages(&mut self, l: usize, n: u64) {
        self.pages[l & (MAX_LISTS - 1)] -= n;
        self.total -= n;
    }

    #[inline]
    pub fn blocks_mut(&mut self, l: usize, order: u8) -> &mut u64 {
        &mut self.blocks[l & (MAX_LISTS - 1)][order as usize & (SUB_ORDERS - 1)]
    }
}

/// A binary buddy allocator over one zone (spec 01 §4-6): free blocks per
/// order, each order holding [`crate::MAX_LISTS`] lists whose meaning the
/// policy `P` gives.
///
/// Blocks of at least the chunk order are linked on free lists; smaller
/// ones live in the free bitmap of their chunk, and a request for one is
/// served from the fullest chunk that can (see the crate docs). Metadata
/// (about 4.3 bytes a frame at the default chunk order) lives in the buffer
/// handed to [`BuddyZone::new`] and is written lazily: setting up a zone
/// writes one record per chunk, and a chunk's per-frame words are written
/// when it is first split.
pub struct BuddyZone<'a, P: MergePolicy = SingleList> {
    pub(crate) span: PfnRange,
    /// Frame number of table index 0: the span's start rounded down to
    /// max-order alignment, so buddies of in-zone blocks always have metadata.
    pub(crate) base: Pfn,
    pub(crate) chunks: ChunkTable<'a>,
    /// Free bitmaps of the chunks, `words(c)` words each.
    pub(crate) fbits: &'a mut [u64],
    /// Reported bitmaps of the chunks (free page reporting below the chunk
    /// order), same shape.
    pub(crate) rbits: &'a mut [u64],
    pub(crate) frames: FrameWords<'a>,
    pub(crate) areas: FreeAreas<'a>,
    pub(crate) partial: PartialIndex<'a>,
    pub(crate) sub: SubCounts<'a>,
    /// Chunk order.
    pub(crate) c: u8,
    /// Bitmap words a chunk has (`bits::words(c)`).
    pub(crate) wpc: u8,
    pub(crate) max_order: u8,
    pub(crate) managed: u64,
    /// Frames freed into reserved chunks, waiting for their reservations.
    pub(crate) reserved_free: u64,
    pub(crate) stats: Stats,
    pub(crate) policy: P,
}

/// The parts of a metadata buffer, in carving order.
const fn parts(frames: u64, c: u8) -> [usize; 7] {
    let chunks = (frames >> c) as usize;
    let words = chunks.saturating_mul(bits::words(c));
    let w = match carve::bytes_for::<u64>(words) {
        Some(b) => b,
        None => usize::MAX,
    };
    let s = match (
        carve::bytes_for::<OrderCounts>(MAX_LISTS),
        carve::bytes_for::<u64>(MAX_LISTS),
    ) {
        (Some(a), Some(b)) => a + b,
        _ => usize::MAX,
    };
    [
        ChunkTable::bytes(chunks),
        w,
        w,
        FrameWords::bytes(frames, c),
        FreeAreas::bytes(),
        PartialIndex::bytes(),
        s,
    ]
}

impl<'a, P: MergePolicy> BuddyZone<'a, P> {
    /// Metadata bytes a zone over `span` with `config` needs (the buffer may
    /// start at any address). 0 for an invalid span or config.
    pub const fn metadata_bytes(span: PfnRange, config: BuddyConfig) -> usize {
        match Self::table_frames(span, config) {
            Some(n) => {
                let p = parts(n, config.chunk_order.get());
                let mut sum = 0usize;
                let mut i = 0;
                while i < p.len() {
                    sum = sum.saturating_add(p[i]);
                    i += 1;
                }
                sum
            }
            None => 0,
        }
    }

    const fn table_frames(span: PfnRange, config: BuddyConfig) -> Option<u64> {
        // A span reaching past the last frame an address can name is no
        // memory at all.
        if span.is_empty()
            || config.max_order.get() > ORDER_LIMIT
            || config.chunk_order.get() > config.max_order.get()
            || config.chunk_order.get() > MAX_CHUNK_ORDER
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
        if config.chunk_order > config.max_order || config.chunk_order.get() > MAX_CHUNK_ORDER {
            return Err(InitError::BadChunkOrder);
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
        let c = config.chunk_order.get();
        let nchunks = (frames >> c) as usize;
        let nwords = nchunks * bits::words(c);
        let (chunks, rest) = ChunkTable::carve(meta, nchunks).ok_or(too_small)?;
        let (fbits, rest) = carve::carve_init(rest, nwords, |_| 0u64).ok_or(too_small)?;
        let (rbits, rest) = carve::carve_init(rest, nwords, |_| 0u64).ok_or(too_small)?;
        let (frames, rest) = FrameWords::carve(rest, frames as usize, c).ok_or(too_small)?;
        let (areas, rest) = FreeAreas::carve(rest).ok_or(too_small)?;
        let (partial, rest) = PartialIndex::carve(rest).ok_or(too_small)?;
        let (blocks, rest) =
            carve::carve_init(rest, MAX_LISTS, |_| [0u64; SUB_ORDERS]).ok_or(too_small)?;
        let (pages, _) = carve::carve_init(rest, MAX_LISTS, |_| 0u64).ok_or(too_small)?;
        let sub = SubCounts {
            blocks: blocks.try_into().map_err(|_| too_small)?,
            pages: pages.try_into().map_err(|_| too_small)?,
            total: 0,
        };
        Ok(BuddyZone {
            span,
            base: span.start.align_down(config.max_order),
            chunks,
            fbits,
            rbits,
            frames,
            areas,
            partial,
            sub,
            c,
            wpc: bits::words(c) as u8,
            max_order: config.max_order.get(),
            managed: 0,
            reserved_free: 0,
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

    /// The chunk order (see [`BuddyConfig::chunk_order`]).
    pub fn chunk_order(&self) -> Order {
        Order::new_truncated(self.c)
    }

    /// A generation of the free lists of blocks of at least the chunk
    /// order: it changes whenever such a block goes onto a list (a free, a
    /// merge, a split's upper half, a move between lists, memory handed
    /// over). While it stays the same, no list has gained a block of that
    /// size, so a search for one that failed would fail again.
    pub fn large_generation(&self) -> u64 {
        self.areas.pushes()
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

    /// The chunk holding frame `i`.
    #[inline]
    pub(crate) fn chunk_of(&self, i: Idx) -> Idx {
        i >> self.c
    }

    /// The first frame of chunk `k`.
    #[inline]
    pub(crate) fn first(&self, k: Idx) -> Idx {
        k << self.c
    }

    /// Frame `i`'s bit number inside its chunk.
    #[inline]
    pub(crate) fn bit(&self, i: Idx) -> u32 {
        i & ((1 << self.c) - 1)
    }

    /// Chunk `k`'s free bitmap.
    #[inline]
    pub(crate) fn words(&self, k: Idx) -> &[u64] {
        let n = self.wpc as usize;
        &self.fbits[k as usize * n..(k as usize + 1) * n]
    }

    #[inline]
    pub(crate) fn words_mut(&mut self, k: Idx) -> &mut [u64] {
        let n = self.wpc as usize;
        &mut self.fbits[k as usize * n..(k as usize + 1) * n]
    }

    /// Chunk `k`'s reported bitmap.
    #[inline]
    pub(crate) fn rwords(&self, k: Idx) -> &[u64] {
        let n = self.wpc as usize;
        &self.rbits[k as usize * n..(k as usize + 1) * n]
    }

    #[inline]
    pub(crate) fn rwords_mut(&mut self, k: Idx) -> &mut [u64] {
        let n = self.wpc as usize;
        &mut self.rbits[k as usize * n..(k as usize + 1) * n]
    }

    /// Whether frame `i` is free in its split chunk.
    #[inline]
    pub(crate) fn is_free_bit(&self, i: Idx) -> bool {
        bits::all_set(self.words(self.chunk_of(i)), self.bit(i), 0)
    }

    /// What the frame `pfn` belongs to; `None` outside the zone's span.
    pub fn block_at(&self, pfn: Pfn) -> Option<BlockInfo> {
        if !self.span.contains(pfn) {
            return None;
        }
        let i = self.idx(pfn);
        let k = self.chunk_of(i);
        let ch = &self.chunks[k];
        Some(match ch.mode {
            Mode::Hole => BlockInfo::Hole,
            Mode::Split => self.split_block_at(k, i),
            Mode::Reserved => self.reserved_block_at(i),
            _ => match self.large_containing(k) {
                Some(h) => {
                    let hc = &self.chunks[h];
                    let head = self.pfn(self.first(h));
                    let order = Order::new_truncated(hc.order);
                    if hc.mode == Mode::FreeHead {
                        BlockInfo::Free {
                            head,
                            order,
                            list: ListId::from_stored(hc.list),
                        }
                    } else {
                        BlockInfo::Allocated {
                            head,
                            order,
                            tag: hc.tag,
                        }
                    }
                }
                None => BlockInfo::Hole,
            },
        })
    }

    /// [`BuddyZone::block_at`] for frame `i` of split chunk `k`.
    fn split_block_at(&self, k: Idx, i: Idx) -> BlockInfo {
        let x = self.bit(i);
        let w = self.words(k);
        if bits::all_set(w, x, 0) {
            let o = bits::maximal_order_at(w, self.c, x);
            return BlockInfo::Free {
                head: self.pfn(i & !((1 << o) - 1)),
                order: Order::new_truncated(o),
                list: ListId::from_stored(self.chunks[k].list),
            };
        }
        match self.alloc_head_of(i) {
            Some((h, word)) => BlockInfo::Allocated {
                head: self.pfn(h),
                order: Order::new_truncated(word.order()),
                tag: word.tag(),
            },
            None => BlockInfo::Hole,
        }
    }

    /// The allocated block of a split chunk holding the not-free frame `i`:
    /// its head and the head's word; `None` for a hole.
    pub(crate) fn alloc_head_of(&self, i: Idx) -> Option<(Idx, Word)> {
        let w = self.frames.get(i);
        match w.kind() {
            Kind::Hole | Kind::Reserved => None,
            Kind::Head => Some((i, w)),
            Kind::Tail => (1..self.c).find_map(|o| {
                let h = i & !((1 << o) - 1);
                let hw = self.frames.get(h);
                (hw.kind() == Kind::Head && hw.order() >= o && h + (1 << hw.order()) > i)
                    .then_some((h, hw))
            }),
        }
    }

    /// Hands the frames of `range` to the allocator (usable RAM from the
    /// memory map). Each block goes to the list the policy names. Whole free
    /// chunks cost one metadata write each.
    ///
    /// Errors (state unchanged): an empty range, a range outside the span, or
    /// a frame that was already handed over.
    pub fn add_free_range(&mut self, range: PfnRange) -> Result<(), RangeError> {
        self.check_add_range(range)?;
        let chunk = Order::new_truncated(self.c);
        // Boot memory goes to the tail of the lists (spec 01 §5.1,
        // FPI_TO_TAIL), so recently freed memory is reused first.
        let saved = self.stats;
        let mut s = range.start.align_down(chunk);
        while s < range.end {
            let part = range.intersect(&PfnRange::new(s, s + chunk.pages()));
            let k = self.chunk_of(self.idx(s));
            if part.len() == chunk.pages() {
                let list = self.policy.list_for(s);
                self.large_insert(k, self.c, list, true, true);
            } else {
                if self.chunks[k].mode == Mode::Hole {
                    self.make_split_holes(k);
                }
                for (p, o) in part.blocks(chunk) {
                    let i = self.idx(p);
                    self.free_in(k, self.bit(i), o.get(), true);
                }
            }
            s = s + chunk.pages();
        }
        self.stats = saved;
        self.managed += range.len();
        Ok(())
    }

    /// Whether [`BuddyZone::add_free_range`] would accept `range`: non-empty,
    /// inside the span, and every frame still a hole.
    pub fn check_add_range(&self, range: PfnRange) -> Result<(), RangeError> {
        if range.is_empty() {
            return Err(RangeError::Empty);
        }
        if !self.span.contains_range(&range) {
            return Err(RangeError::OutOfSpan);
        }
        let chunk = Order::new_truncated(self.c);
        let mut s = range.start.align_down(chunk);
        while s < range.end {
            let part = range.intersect(&PfnRange::new(s, s + chunk.pages()));
            let k = self.chunk_of(self.idx(s));
            match self.chunks[k].mode {
                Mode::Hole => {}
                Mode::Split => {
                    if let Some(p) = (part.start.get()..part.end.get()).find(|&p| {
                        let i = self.idx(Pfn(p));
                        self.is_free_bit(i) || self.frames.get(i).kind() != Kind::Hole
                    }) {
                        return Err(RangeError::Overlap { pfn: Pfn(p) });
                    }
                }
                _ => return Err(RangeError::Overlap { pfn: part.start }),
            }
            s = s + chunk.pages();
        }
        Ok(())
    }

    /// Turns the all-hole chunk `k` into a split chunk of holes.
    pub(crate) fn make_split_holes(&mut self, k: Idx) {
        let first = self.first(k);
        self.frames.init_chunk(first);
        for i in first..first + (1 << self.c) {
            self.frames.set(i, Word::HOLE);
        }
        self.words_mut(k).fill(0);
        self.rwords_mut(k).fill(0);
        let list = self.policy.list_for(self.pfn(first)).get();
        self.chunks[k] = Chunk {
            mode: Mode::Split,
            list,
            ..Chunk::HOLE
        };
    }

    /// The opaque tag word kept on an allocated block's head (0 when
    /// allocated; the low 24 bits are kept). Layers above use it, e.g. to
    /// mark movable blocks.
    pub fn tag(&self, head: Pfn) -> Option<u32> {
        self.alloc_head(head).map(|(_, t)| t)
    }

    /// Sets the tag of an allocated block's head (bits above the low 24 are
    /// dropped); `false` (nothing written) if `head` is not the head of an
    /// allocated block.
    pub fn set_tag(&mut self, head: Pfn, tag: u32) -> bool {
        let Some((order, _)) = self.alloc_head(head) else {
            return false;
        };
        let tag = tag & TAG_MASK;
        let i = self.idx(head);
        let k = self.chunk_of(i);
        if matches!(self.chunks[k].mode, Mode::Split | Mode::Reserved) {
            self.frames.set(i, Word::head(order, tag));
        } else {
            self.chunks[k].tag = tag;
        }
        true
    }

    /// `(order, tag)` of the allocated block headed by `head`.
    fn alloc_head(&self, head: Pfn) -> Option<(u8, u32)> {
        if !self.span.contains(head) {
            return None;
        }
        let i = self.idx(head);
        let k = self.chunk_of(i);
        let ch = &self.chunks[k];
        match ch.mode {
            // A reserved chunk's blocks from before the reservation keep
            // their tags (a pin, say); its reserved frames have none.
            Mode::Split | Mode::Reserved if !self.is_free_bit(i) => {
                let w = self.frames.get(i);
                (w.kind() == Kind::Head).then_some((w.order(), w.tag()))
            }
            Mode::AllocHead if i == self.first(k) => Some((ch.order, ch.tag)),
            _ => None,
        }
    }
}
