//! Every mark one call puts on a block, against every transition the
//! block can go through: who clears the mark or carries it. The table is
//! docs/block-state.md; each test here is one of its cells, named
//! `<mark>_<transition>` (the poison row is in poison.rs, next to the
//! simulated memory it needs).
//!
//! Most cells put the transition inside the kernel's `Migrator::isolate`:
//! the moment a contiguous allocation has the block marked and its
//! pageblock isolated, when the kernel (or the owner's thread) splits,
//! frees or caches it instead of handing it over.

mod common;

use std::cell::RefCell;
use std::collections::HashMap;

use common::*;
use pageframe::compact::{MigrateError, MigrateMode};
use pageframe::{
    Block, ContigError, CpuCache, CpuId, Gfp, Machine, Migrator, NodeId, Order, Pfn, PfnRange,
    ZoneKind,
};
use pageframe_compact::tag::MASK as COMPACTOR_MARKS;

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

type Hook<'c> = Box<dyn FnMut(Block) -> Option<Block> + 'c>;

/// A kernel that holds movable blocks and moves them when asked, except
/// that `on_isolate` decides what it does with a block asked for: hand it
/// over (`Some`) or keep, split, free or cache it (`None`). `on_drain`
/// is its cache drain.
struct Kernel<'c> {
    blocks: HashMap<Pfn, Block>,
    on_isolate: Hook<'c>,
    on_drain: Box<dyn FnMut() + 'c>,
    asked: u32,
    /// Runs `validate()` inside `migrate` and `migrated`, mid-move.
    check: Option<&'c Machine<'static>>,
}

impl<'c> Kernel<'c> {
    fn new(on_isolate: impl FnMut(Block) -> Option<Block> + 'c) -> Self {
        Kernel {
            blocks: HashMap::new(),
            on_isolate: Box::new(on_isolate),
            on_drain: Box::new(|| {}),
            asked: 0,
            check: None,
        }
    }

    fn draining(mut self, on_drain: impl FnMut() + 'c) -> Self {
        self.on_drain = Box::new(on_drain);
        self
    }

    fn keep(mut self, b: Block) -> Self {
        self.blocks.insert(b.pfn(), b);
        self
    }
}

impl Migrator for Kernel<'_> {
    fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<Block> {
        let b = self.blocks.remove(&pfn)?;
        self.asked += 1;
        (self.on_isolate)(b)
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        if let Some(m) = self.check {
            m.validate().unwrap();
        }
        Ok(())
    }
    fn putback(&mut self, b: Block) {
        self.blocks.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        if let Some(m) = self.check {
            m.validate().unwrap();
        }
        self.blocks.insert(b.pfn(), b);
    }
    fn drain_caches(&mut self) {
        (self.on_drain)()
    }
}

/// One Normal zone of 16 pageblocks, all free.
fn machine() -> &'static Machine<'static> {
    one_zone(16 * PB)
}

/// [`machine`] with a per-CPU cache for one CPU.
fn cached() -> &'static Machine<'static> {
    let m = one_zone(16 * PB);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    m
}

/// The pageblock around `p`.
fn pageblock(p: Pfn) -> PfnRange {
    let s = p.align_down(Order::HUGE_2M);
    PfnRange::new(s, s + PB)
}

/// The tag the core keeps for the block at `head` (`None`: no block).
fn tag(m: &Machine<'static>, head: Pfn) -> Option<u32> {
    m.inspect()
        .zone_of(head)
        .unwrap()
        .inspect(|mz| mz.tag(head))
}

/// Whether a compactor's mark is on the block at `head`.
fn marked(m: &Machine<'static>, head: Pfn) -> bool {
    tag(m, head).is_some_and(|t| t & COMPACTOR_MARKS != 0)
}

fn isolated(m: &Machine<'static>, p: Pfn) -> bool {
    m.inspect()
        .zone_of(p)
        .unwrap()
        .inspect(|mz| mz.mobility().pageblocks().is_isolated(p))
}

fn pinned(m: &Machine<'static>, head: Pfn) -> bool {
    m.inspect()
        .zone_of(head)
        .unwrap()
        .inspect(|mz| mz.is_pinned(head))
}

/// Every frame an ordinary request can get now, given back: none lies in
/// `range`.
fn none_handed_out_from(m: &Machine<'static>, range: PfnRange) {
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
        assert!(!range.contains(b.pfn()), "{:?} handed out", b.pfn());
        all.push(b);
    }
    for b in all {
        m.free(b).unwrap();
    }
}

fn cache_count(c: &mut CpuCache<'_, 'static>) -> u32 {
    c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count
}

// ---- the compactor's mark ----

/// Split while marked: the mark stays with the head the compactor knows
/// and goes with it; the upper half never has it.
#[test]
fn compaction_mark_split() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let (p, range) = (b.pfn(), pageblock(b.pfn()));
    let halves = RefCell::new(Vec::new());
    let mut k = Kernel::new(|b| {
        assert!(marked(m, b.pfn()));
        let (lo, hi) = m.split(b).unwrap();
        assert!(!marked(m, hi.pfn()), "the upper half starts unmarked");
        halves.borrow_mut().extend([lo, hi]);
        None
    })
    .keep(b);
    let r = m.alloc_contig_range(range, &mut k);
    assert!(matches!(r, Err(ContigError::Busy { .. })), "{r:?}");
    assert!(!marked(m, p));
    m.validate().unwrap();
    for h in halves.borrow_mut().drain(..) {
        m.free(h).unwrap();
    }
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

/// The same through compaction's migrate scanner.
#[test]
fn compaction_mark_split_by_compaction() {
    let m = machine();
    let halves = RefCell::new(Vec::new());
    let mut k = Kernel::new(|b| {
        let (lo, hi) = m.split(b).unwrap();
        halves.borrow_mut().extend([lo, hi]);
        None
    });
    // Order-1 blocks, one in four pairs kept: compaction wants to move them.
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE | Gfp::MEMALLOC, o(1)) {
        all.push(b);
    }
    for b in all {
        if b.pfn().get() % 8 == 0 {
            k.blocks.insert(b.pfn(), b);
        } else {
            m.free(b).unwrap();
        }
    }
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(k.asked > 0, "compaction asked for blocks");
    m.validate().unwrap();
    let left: Vec<Block> = halves
        .borrow_mut()
        .drain(..)
        .chain(k.blocks.drain().map(|(_, b)| b))
        .collect();
    for b in left {
        m.free(b).unwrap();
    }
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// Part of a marked block freed: the part kept is the head's, and the
/// compactor unmarks it.
#[test]
fn compaction_mark_partial_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let (p, range) = (b.pfn(), pageblock(b.pfn()));
    let mut k = Kernel::new(|b| {
        assert!(marked(m, b.pfn()));
        let (p, _) = b.into_raw();
        // SAFETY: the block is the kernel's, held as this number only.
        unsafe { m.free_raw(PfnRange::new(p + 2, p + 8)) }.unwrap();
        None
    })
    .keep(b);
    assert!(m.alloc_contig_range(range, &mut k).is_err());
    assert!(!marked(m, p), "the part kept is unmarked");
    m.validate().unwrap();
    // SAFETY: the two frames kept are still the kernel's.
    let kept = unsafe { m.block_from_raw(p, o(1)) }.unwrap();
    m.free(kept).unwrap();
    m.validate().unwrap();
}

/// Moved: the source is freed with its mark, the destination gets the
/// block's own bits but no mark.
#[test]
fn compaction_mark_migration() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(Some).keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    let (&dst, _) = k.blocks.iter().next().unwrap();
    assert!(!range.contains(dst));
    assert!(!marked(m, dst));
    m.validate().unwrap();
    m.free_segment(seg).unwrap();
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
}

/// Freed while marked: the free clears the core's word, mark and all;
/// the frames join the isolated pageblock's free memory and the range is
/// taken.
#[test]
fn compaction_mark_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let (p, range) = (b.pfn(), pageblock(b.pfn()));
    let mut k = Kernel::new(|b| {
        assert!(marked(m, b.pfn()));
        m.free(b).unwrap();
        None
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.validate().unwrap();
    m.free_segment(seg).unwrap();
    // The next block there carries nothing.
    let again = m
        .alloc_contig_range(PfnRange::new(p, p + 4), &mut k)
        .unwrap();
    assert!(!marked(m, p));
    m.free_segment(again).unwrap();
}

/// Freed into a CPU's cache while marked: the core still holds the block
/// (marked) while it is cached; the compactor unmarks its head, so the
/// cache's next owner gets it unmarked.
#[test]
fn compaction_mark_cache() {
    let m = cached();
    let cpu = RefCell::new(m.cpu(CpuId(0), NodeId::ZERO).unwrap());
    let b = cpu.borrow_mut().alloc(MOVABLE, Order::ZERO).unwrap();
    let (p, range) = (b.pfn(), pageblock(b.pfn()));
    let mut k = Kernel::new(|b| {
        assert!(marked(m, b.pfn()));
        cpu.borrow_mut().free(b).unwrap();
        assert!(marked(m, p), "cached: still the core's allocation");
        None
    })
    .keep(b);
    // No drain: the cached frame stays allocated in the core.
    let r = m.alloc_contig_range(range, &mut k);
    assert!(matches!(r, Err(ContigError::Busy { .. })), "{r:?}");
    m.validate().unwrap();
    let next = cpu.borrow_mut().alloc(MOVABLE, Order::ZERO).unwrap();
    assert_eq!(next.pfn(), p, "the cache's last frame comes first");
    assert!(!marked(m, p));
    cpu.borrow_mut().free(next).unwrap();
    m.validate().unwrap();
}

/// Freed into a cache and drained while marked: the drain frees it into
/// the core, which clears the word; the range is taken.
#[test]
fn compaction_mark_drain() {
    let m = cached();
    let cpu = RefCell::new(m.cpu(CpuId(0), NodeId::ZERO).unwrap());
    let b = cpu.borrow_mut().alloc(MOVABLE, Order::ZERO).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(|b| {
        assert!(marked(m, b.pfn()));
        let mut c = cpu.borrow_mut();
        c.free(b).unwrap();
        c.drain();
        None
    })
    .draining(|| {
        cpu.borrow_mut().drain();
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.validate().unwrap();
    m.free_segment(seg).unwrap();
}

// ---- pageblock isolation ----

/// A block split inside an isolated pageblock: the halves are blocks of
/// their own there; the operation ends, and with it the isolation.
#[test]
fn isolation_split() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let range = pageblock(b.pfn());
    let halves = RefCell::new(Vec::new());
    let mut k = Kernel::new(|b| {
        assert!(isolated(m, b.pfn()));
        let (lo, hi) = m.split(b).unwrap();
        halves.borrow_mut().extend([lo, hi]);
        None
    })
    .keep(b);
    assert!(m.alloc_contig_range(range, &mut k).is_err());
    assert!(
        !isolated(m, range.start),
        "isolation ends with the operation"
    );
    m.validate().unwrap();
    for h in halves.borrow_mut().drain(..) {
        m.free(h).unwrap();
    }
}

/// Part of a block freed inside an isolated pageblock: the frames go to
/// the isolated lists, out of every allocation's reach, and the operation
/// takes them.
#[test]
fn isolation_partial_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(|b| {
        let (p, _) = b.into_raw();
        // SAFETY: the block is the kernel's, held as this number only.
        unsafe { m.free_raw(PfnRange::new(p + 3, p + 8)) }.unwrap();
        none_handed_out_from(m, range);
        // SAFETY: the rest is still the kernel's.
        unsafe { m.free_raw(PfnRange::new(p, p + 3)) }.unwrap();
        none_handed_out_from(m, range);
        None
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    assert_eq!(seg.range(), range);
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

/// Blocks moved out of an isolated range never land in another isolated
/// range: a second contiguous allocation, made while the first waits on
/// the kernel, keeps its range, and the first moves its block elsewhere.
#[test]
fn isolation_migration() {
    let m = machine();
    let a = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let ra = pageblock(a.pfn());
    // The other range: a free pageblock far from the first.
    let rb = PfnRange::new(Pfn(4 * GIB + 8 * PB), Pfn(4 * GIB + 9 * PB));
    assert!(ra.intersect(&rb).is_empty());
    let inner = RefCell::new(None);
    let mut k = Kernel::new(|b| {
        if inner.borrow().is_none() {
            let mut other = Kernel::new(Some);
            *inner.borrow_mut() = Some(m.alloc_contig_range(rb, &mut other).unwrap());
        }
        Some(b)
    })
    .keep(a);
    let seg = m.alloc_contig_range(ra, &mut k).unwrap();
    let other = inner.borrow_mut().take().unwrap();
    for &p in k.blocks.keys() {
        assert!(!ra.contains(p) && !rb.contains(p), "{p:?}");
    }
    m.validate().unwrap();
    m.free_segment(seg).unwrap();
    m.free_segment(other).unwrap();
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
}

/// A block freed inside an isolated pageblock: isolated free memory,
/// nobody's until the operation takes it.
#[test]
fn isolation_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(|b| {
        m.free(b).unwrap();
        none_handed_out_from(m, range);
        None
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

/// A frame freed into a CPU's cache while its pageblock is isolated: the
/// cache holds it (it takes no lock to learn the pageblock's type) until a
/// drain; the operation drains through the kernel before each pass, and
/// takes the range.
#[test]
fn isolation_cache() {
    let m = cached();
    let cpu = RefCell::new(m.cpu(CpuId(0), NodeId::ZERO).unwrap());
    let b = cpu.borrow_mut().alloc(MOVABLE, Order::ZERO).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(|b| {
        let mut c = cpu.borrow_mut();
        let before = cache_count(&mut c);
        c.free(b).unwrap();
        assert_eq!(cache_count(&mut c), before + 1, "in the cache");
        None
    })
    .draining(|| {
        cpu.borrow_mut().drain();
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    assert_eq!(seg.range(), range);
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

/// A cache drained while a pageblock is isolated: its frames there go to
/// the isolated lists, not to ordinary requests.
#[test]
fn isolation_drain() {
    let m = cached();
    let cpu = RefCell::new(m.cpu(CpuId(0), NodeId::ZERO).unwrap());
    let b = cpu.borrow_mut().alloc(MOVABLE, Order::ZERO).unwrap();
    let range = pageblock(b.pfn());
    let mut k = Kernel::new(|b| {
        let mut c = cpu.borrow_mut();
        c.free(b).unwrap();
        assert!(c.drain() > 0);
        drop(c);
        none_handed_out_from(m, range);
        None
    })
    .keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

// ---- the reported mark (free page reporting) ----

/// Every free block of the zone reported.
fn report_all(m: &Machine<'static>) {
    m.report_free_pages(Order::ZERO, |_| true);
    let (free, reported) = m.inspect().reported_pages(Order::ZERO);
    assert_eq!(free, reported);
}

fn unreported(m: &Machine<'static>) -> u64 {
    let (free, reported) = m.inspect().reported_pages(Order::ZERO);
    free - reported
}

/// An allocation splits a reported free block: the pieces left free go on
/// the lists anew, unreported (the host may have taken the block back:
/// they are offered again).
#[test]
fn reported_split() {
    let m = machine();
    report_all(m);
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(unreported(m), 1023, "the rest of the order-10 block");
    let s = m.report_free_pages(Order::ZERO, |_| true);
    assert_eq!(s.pages, 1023);
    m.free(a).unwrap();
    m.validate().unwrap();
}

/// Frames freed from part of a block are unreported.
#[test]
fn reported_partial_free() {
    let m = machine();
    let (p, _) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(3)).unwrap().into_raw();
    report_all(m);
    // SAFETY: the block is ours, held as this number only.
    unsafe { m.free_raw(PfnRange::new(p + 4, p + 8)) }.unwrap();
    assert_eq!(unreported(m), 4);
    // SAFETY: the rest is still ours.
    unsafe { m.free_raw(PfnRange::new(p, p + 4)) }.unwrap();
    m.validate().unwrap();
}

/// A migration's destination leaves the lists (allocated, so no longer
/// reported) and its source comes back unreported.
#[test]
fn reported_migration() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let range = pageblock(b.pfn());
    report_all(m);
    let free = m.inspect().free_pages();
    let mut k = Kernel::new(Some).keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    // The range's free frames left with the segment; the destination's
    // four came off reported memory; the source's four are in the segment.
    assert_eq!(m.inspect().free_pages(), free - (PB - 4) - 4);
    m.free_segment(seg).unwrap();
    // The source came back with the range: the next pass offers all of it.
    let mut offered = 0;
    m.report_free_pages(Order::ZERO, |batch| {
        for &(q, o) in batch {
            offered += PfnRange::new(q, q + o.pages()).intersect(&range).len();
        }
        true
    });
    assert_eq!(offered, PB, "the range back, unreported");
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
    m.validate().unwrap();
}

/// A freed block is unreported, and so is the reported memory it merges
/// with.
#[test]
fn reported_free() {
    let m = machine();
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    report_all(m);
    m.free(a).unwrap();
    assert_eq!(unreported(m), 1024, "merged back into an order-10 block");
    m.validate().unwrap();
}

/// A cache's refill takes memory off the lists (no longer reported); a
/// frame freed into a cache is not on the lists, and no pass offers it.
#[test]
fn reported_cache() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let a = c.alloc(MOVABLE, Order::ZERO).unwrap();
    report_all(m);
    let p = a.pfn();
    c.free(a).unwrap();
    let mut offered = false;
    m.report_free_pages(Order::ZERO, |batch| {
        offered |= batch
            .iter()
            .any(|&(q, o)| PfnRange::new(q, q + o.pages()).contains(p));
        true
    });
    assert!(!offered, "a cached frame is no free block");
    drop(c);
    m.validate().unwrap();
}

/// Frames a drain gives back go on the lists anew: unreported.
#[test]
fn reported_drain() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let a = c.alloc(MOVABLE, Order::ZERO).unwrap();
    c.free(a).unwrap();
    report_all(m);
    let n = c.drain();
    assert!(n > 0);
    assert!(unreported(m) >= n, "the drained frames, merged");
    m.validate().unwrap();
}

// ---- the owner's pin ----

/// Both halves of a pinned block are pinned, each unpinned on its own.
#[test]
fn pinned_split() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    m.set_pinned(&b, true).unwrap();
    let (lo, hi) = m.split(b).unwrap();
    assert!(pinned(m, lo.pfn()) && pinned(m, hi.pfn()));
    m.validate().unwrap();
    m.set_pinned(&hi, false).unwrap();
    assert!(pinned(m, lo.pfn()) && !pinned(m, hi.pfn()));
    m.free(lo).unwrap();
    m.free(hi).unwrap();
    m.validate().unwrap();
}

/// Part of a pinned block freed: the frames kept stay pinned, those freed
/// are pinned no more.
#[test]
fn pinned_partial_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    m.set_pinned(&b, true).unwrap();
    let (p, _) = b.into_raw();
    // SAFETY: the block is ours, held as this number only.
    unsafe { m.free_raw(PfnRange::new(p + 2, p + 4)) }.unwrap();
    assert!(pinned(m, p));
    m.validate().unwrap();
    let again = m
        .alloc_contig_range(PfnRange::new(p + 2, p + 4), &mut Kernel::new(Some))
        .unwrap();
    assert!(!pinned(m, p + 2));
    m.free_segment(again).unwrap();
    // SAFETY: the two frames kept are still ours.
    let kept = unsafe { m.block_from_raw(p, o(1)) }.unwrap();
    m.free(kept).unwrap();
    m.validate().unwrap();
}

/// A pinned block does not move: isolation names it, and compaction
/// leaves it where it is.
#[test]
fn pinned_migration() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let p = b.pfn();
    m.set_pinned(&b, true).unwrap();
    let mut k = Kernel::new(Some).keep(b);
    assert_eq!(
        m.alloc_contig_range(pageblock(p), &mut k)
            .map(|s| s.range()),
        Err(ContigError::Blocked {
            pfn: p,
            why: pageframe::zone::Blocker::Pinned
        })
    );
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(k.blocks.contains_key(&p) && k.asked == 0);
    m.validate().unwrap();
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
}

/// A freed pinned block's pin ends with it.
#[test]
fn pinned_free() {
    let m = machine();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let p = b.pfn();
    m.set_pinned(&b, true).unwrap();
    m.free(b).unwrap();
    let again = m
        .alloc_contig_range(PfnRange::new(p, p + 4), &mut Kernel::new(Some))
        .unwrap();
    assert!(!pinned(m, p));
    m.free_segment(again).unwrap();
    m.validate().unwrap();
}

/// A pinned block freed through a CPU's cache goes to the zone, whose free
/// ends the pin: the cache never hands a pinned frame to its next owner.
#[test]
fn pinned_cache() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc(MOVABLE, Order::ZERO).unwrap();
    let p = b.pfn();
    m.set_pinned(&b, true).unwrap();
    let before = cache_count(&mut c);
    c.free(b).unwrap();
    assert_eq!(cache_count(&mut c), before, "not cached");
    m.validate().unwrap();
    // Whoever gets the frame next gets it unpinned, and it can move.
    let mut got = Vec::new();
    while let Ok(b) = c.alloc(MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
        if b.pfn() == p {
            assert!(!pinned(m, p));
        }
        got.push(b);
    }
    assert!(got.iter().any(|b| b.pfn() == p));
    for b in got {
        c.free(b).unwrap();
    }
    m.validate().unwrap();
}

/// Nothing pinned is in a cache, so a drain has no pin to carry: it gives
/// back only what was cached before the pinned block was freed.
#[test]
fn pinned_drain() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc(MOVABLE, Order::ZERO).unwrap();
    let cached_before = u64::from(cache_count(&mut c));
    m.set_pinned(&b, true).unwrap();
    c.free(b).unwrap();
    assert_eq!(c.drain(), cached_before);
    m.validate().unwrap();
}

// ---- the owner record ----

fn seq_of(m: &Machine<'static>, p: Pfn) -> (u64, bool) {
    let o = m.inspect().owner_of(p).unwrap();
    (o.owner.seq, o.live)
}

/// Both halves keep the block's record.
#[test]
fn owner_split() {
    let m = machine();
    let b = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(2), 7).unwrap();
    let (s, _) = seq_of(m, b.pfn());
    let (lo, hi) = m.split(b).unwrap();
    for h in [&lo, &hi] {
        let got = m.inspect().owner_of(h.pfn()).unwrap();
        assert_eq!(
            (got.pfn, got.order, got.owner.tag, got.owner.seq),
            (h.pfn(), o(1), 7, s)
        );
    }
    m.free(lo).unwrap();
    m.free(hi).unwrap();
}

/// The part kept keeps the record; the part freed names it as last owner.
#[test]
fn owner_partial_free() {
    let m = machine();
    let b = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(2), 7).unwrap();
    let (s, _) = seq_of(m, b.pfn());
    let (p, _) = b.into_raw();
    // SAFETY: the block is ours, held as this number only.
    unsafe { m.free_raw(PfnRange::new(p + 2, p + 4)) }.unwrap();
    assert_eq!(seq_of(m, p), (s, true));
    assert_eq!(seq_of(m, p + 3), (s, false));
    // SAFETY: the rest is still ours.
    unsafe { m.free_raw(PfnRange::new(p, p + 2)) }.unwrap();
}

/// The record moves with the block; the frames left name it as their last
/// owner.
#[test]
fn owner_migration() {
    let m = machine();
    let b = m.alloc_tagged(NodeId::ZERO, MOVABLE, o(2), 7).unwrap();
    let (src, range) = (b.pfn(), pageblock(b.pfn()));
    let (s, _) = seq_of(m, src);
    let mut k = Kernel::new(Some).keep(b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    let (&dst, _) = k.blocks.iter().next().unwrap();
    assert_eq!(seq_of(m, dst), (s, true));
    assert_eq!(m.inspect().owner_of(dst).unwrap().owner.tag, 7);
    m.free_segment(seg).unwrap();
    assert_eq!(
        seq_of(m, src),
        (seq_of(m, range.start).0, false),
        "the segment's now"
    );
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
}

/// A freed block's frames name it as their last owner.
#[test]
fn owner_free() {
    let m = machine();
    let b = m.alloc_tagged(NodeId::ZERO, Gfp::KERNEL, o(2), 7).unwrap();
    let p = b.pfn();
    let (s, _) = seq_of(m, p);
    m.free(b).unwrap();
    assert_eq!(seq_of(m, p + 1), (s, false));
}

/// A cached frame is not live (its last owner is named); the cache's next
/// owner gets a record of its own.
#[test]
fn owner_cache() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc_tagged(Gfp::KERNEL, Order::ZERO, 7).unwrap();
    let p = b.pfn();
    let (s, _) = seq_of(m, p);
    c.free(b).unwrap();
    assert_eq!(seq_of(m, p), (s, false));
    let next = c.alloc_tagged(Gfp::KERNEL, Order::ZERO, 8).unwrap();
    assert_eq!(next.pfn(), p);
    assert_eq!(seq_of(m, p), (s + 1, true));
    assert_eq!(m.inspect().owner_of(p).unwrap().owner.tag, 8);
    c.free(next).unwrap();
}

/// A drain writes no record: the frames keep naming their last owner.
#[test]
fn owner_drain() {
    let m = cached();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let b = c.alloc_tagged(Gfp::KERNEL, Order::ZERO, 7).unwrap();
    let p = b.pfn();
    let (s, _) = seq_of(m, p);
    c.free(b).unwrap();
    assert!(c.drain() > 0);
    assert_eq!(seq_of(m, p), (s, false));
    assert_eq!(m.inspect().owner_of(p).unwrap().owner.tag, 7);
}

// ---- the checker ----

/// `validate()` in the middle of a move (the destination taken, then the
/// source's contents moved and the books settled, before the compactor
/// frees the source) finds the marks and bytes of a move in progress, not
/// a broken invariant.
#[test]
fn validate_holds_in_the_middle_of_a_move() {
    let m = machine();
    let mut k = Kernel::new(Some);
    k.check = Some(m);
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let range = pageblock(b.pfn());
    k.blocks.insert(b.pfn(), b);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.free_segment(seg).unwrap();
    // And compaction, whose free scanner holds destinations for a while.
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
        all.push(b);
    }
    for b in all {
        if b.pfn().get() % 4 == 0 {
            k.blocks.insert(b.pfn(), b);
        } else {
            m.free(b).unwrap();
        }
    }
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(k.asked > 0);
    m.validate().unwrap();
    k.blocks.drain().for_each(|(_, b)| m.free(b).unwrap());
}
