//! Contiguous allocation: exact ranges of any length, 1 GiB pages, what
//! blocks a range, and conservation (no frame lost or doubled, every
//! owner's data where the migrator says it is).

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::CpuId;
use pageframe::{
    ContigError, FreeError, Gfp, Machine, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode},
    zone::Blocker,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

/// Allocates movable blocks until `frac` of the machine is in use, each
/// kept by the kernel `w` with a word a frame; returns where they are.
fn fill_movable(m: &Machine<'static>, w: &mut Words, frac: f64, seed: u64) -> Vec<(Pfn, Order)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let target = (m.inspect().managed_pages() as f64 * frac) as u64;
    let mut live = Vec::new();
    let mut used = 0;
    while used < target {
        let order = mixed_order(&mut rng);
        let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, order) else {
            break;
        };
        used += order.pages();
        live.push((a.pfn(), order));
        keep_words(w, a);
    }
    live
}

/// `w` keeps `b`, with a word in each of its frames.
fn keep_words(w: &mut Words, b: pageframe::Block) {
    let (p, order) = (b.pfn(), b.order());
    w.blocks.insert(p, b);
    for i in 0..order.pages() {
        w.word.insert(p.get() + i, (p.get() + i) ^ 0x77);
    }
}

/// The range's number turned back into a segment, for a range no owner
/// holds: the error.
fn raw_range(m: &Machine<'static>, range: PfnRange) -> Result<PfnRange, pageframe::RawError> {
    // SAFETY: the callers pass ranges that are not tiled by live
    // allocations: the call must refuse them.
    unsafe { m.segment_from_raw(range) }.map(pageframe::Segment::into_raw)
}

/// Mostly small blocks, a few 2 MiB ones.
fn mixed_order(rng: &mut SmallRng) -> Order {
    o([0, 0, 0, 0, 0, 0, 1, 2, 3, 9][rng.gen_range(0..10)])
}

/// Every word is at one frame, and the owners are exactly `owners`.
fn words_intact(w: &Words, frames: u64) {
    let owners: HashSet<u64> = w.word.values().map(|v| v ^ 0x77).collect();
    assert_eq!(owners.len() as u64, frames, "every owner's word once");
    assert_eq!(w.word.len() as u64, frames);
}

fn in_range(p: Pfn, r: PfnRange) -> bool {
    r.contains(p)
}

#[test]
fn an_odd_sized_range_on_free_memory() {
    let m = one_zone(64 * PB);
    let managed = m.inspect().managed_pages();
    let base = 4 * GIB;
    // 3000 frames, starting mid-pageblock: not a power of two, not aligned.
    let range = r(base + 700, base + 3700);
    let mut w = Words::default();
    let a = m.alloc_contig_range(range, &mut w).unwrap();
    assert_eq!(a.range(), range);
    assert_eq!(a.moved(), 0);
    assert_eq!((a.node(), a.zone()), (NodeId::ZERO, ZoneKind::Normal));
    assert_eq!(
        m.inspect().free_pages(),
        managed - 3000,
        "exactly the range is taken"
    );
    m.validate().unwrap();
    // The rest of the edge pageblocks serves ordinary requests again.
    let mut got = Vec::new();
    while let Ok(x) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        assert!(
            !in_range(x.pfn(), range),
            "a frame of the range handed out twice"
        );
        got.push(x);
    }
    assert_eq!(got.len() as u64, managed - 3000 - min_reserve(m));
    for b in got {
        m.free(b).unwrap();
    }
    // A range that is not tiled by live allocations: refused, naming the
    // first frame at fault, unchanged.
    let before = m.inspect().free_pages();
    let err = |p: u64, why| Err(pageframe::RawError { pfn: Pfn(p), why });
    assert_eq!(
        raw_range(m, r(base + 600, base + 3700)),
        err(base + 600, FreeError::AlreadyFree)
    );
    assert!(matches!(
        raw_range(m, r(base + 701, base + 3700)),
        Err(pageframe::RawError { pfn, why: FreeError::NotBlockHead { head, .. } })
            if pfn == Pfn(base + 701) && head == Pfn(base + 700)
    ));
    assert_eq!(m.inspect().free_pages(), before);
    m.free_segment(a).unwrap();
    assert_eq!(m.inspect().free_pages(), managed);
    assert_eq!(
        raw_range(m, range),
        err(base + 700, FreeError::AlreadyFree),
        "a freed segment's range is nobody's"
    );
    m.validate().unwrap();
}

/// Frames the watermark check keeps back from an ordinary allocation.
fn min_reserve(m: &Machine<'static>) -> u64 {
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    z.watermarks().min
}

#[test]
fn movable_memory_moves_out_and_keeps_its_data() {
    let m = one_zone(256 * PB); // 512 MiB
    let mut w = Words::default();
    let live = fill_movable(m, &mut w, 0.5, 1);
    let frames: u64 = live.iter().map(|(_, o)| o.pages()).sum();
    let base = 4 * GIB;
    let range = r(base + 5 * PB + 11, base + 5 * PB + 11 + 40_000);
    let inside: u64 = live
        .iter()
        .filter(|(p, o)| *p + o.pages() > range.start && *p < range.end)
        .map(|(_, o)| o.pages())
        .sum();
    assert!(inside > 10_000, "the test needs allocations in the range");
    let free_before = m.inspect().free_pages();
    let a = m.alloc_contig_range(range, &mut w).unwrap();
    assert_eq!(a.moved(), inside, "each allocation in the range moved once");
    assert_eq!(m.inspect().free_pages(), free_before - range.len());
    words_intact(&w, frames);
    assert!(
        w.word.keys().all(|&k| !range.contains(Pfn(k))),
        "nobody's data is left in the range"
    );
    assert!(
        w.blocks.keys().all(|&p| !range.contains(p)),
        "the kernel holds the moved blocks' new places"
    );
    m.validate().unwrap();
    m.free_segment(a).unwrap();
    assert_eq!(m.inspect().free_pages(), free_before);
    m.validate().unwrap();
}

#[test]
fn unmovable_and_pinned_memory_block_with_their_pfn() {
    let m = one_zone(64 * PB);
    let mut w = Words::default();
    let base = 4 * GIB;
    let kb = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let k = kb.pfn();
    let around = r(k.get().saturating_sub(100).max(base), k.get() + 100);
    let before = m.inspect().free_pages();
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Blocked {
            pfn: k,
            why: Blocker::Unmovable
        })
    );
    assert_eq!(m.inspect().free_pages(), before, "nothing changed");
    m.validate().unwrap();
    // Pinned movable memory blocks too, and so does a refusing migrator.
    let mvb = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap();
    let mv = mvb.pfn();
    m.set_pinned(&mvb, true).unwrap();
    let around = r(mv.get() - 50, mv.get() + 60);
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Blocked {
            pfn: mv,
            why: Blocker::Pinned
        })
    );
    m.set_pinned(&mvb, false).unwrap();
    // The kernel keeps it from now on, and lets it move.
    w.keep(mvb);
    w.refuse = true;
    let before = m.inspect().free_pages();
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Refused { pfn: mv })
    );
    assert_eq!(m.inspect().free_pages(), before, "isolation undone");
    m.validate().unwrap();
    // The same range works once the migrator cooperates.
    w.refuse = false;
    let a = m.alloc_contig_range(around, &mut w).unwrap();
    assert_eq!(a.moved(), 4);
    // The kernel's record followed the move: it holds the new block, and
    // the old number belongs to the range.
    let (&now, b) = w.blocks.iter().next().unwrap();
    assert!(!around.contains(now) && b.order() == o(2));
    // SAFETY: the old number is a piece of the segment, not the caller's
    // block of order 2: the call must refuse it.
    assert!(unsafe { m.block_from_raw(mv, o(2)) }.is_err());
    m.free_segment(a).unwrap();
    m.free(kb).unwrap();
    w.free_all(m);
    m.validate().unwrap();
}

#[test]
fn bad_requests_get_typed_errors() {
    let m = two_zones(8 * PB, 8 * PB);
    let mut w = Words::default();
    let before = m.inspect().free_pages();
    let out = |p: u64| ContigError::OutOfRange { pfn: Pfn(p) };
    let cases = [
        (r(4 * GIB, 4 * GIB), ContigError::Invalid),
        (r(10, 20), out(10)),
        (r(4 * GIB - 10, 4 * GIB + 10), out(4 * GIB)),
        (r(100 * GIB, 100 * GIB + 1), out(100 * GIB)),
        (r(u64::MAX - 1, u64::MAX), out(u64::MAX - 1)),
    ];
    for (range, e) in cases {
        assert_eq!(
            m.alloc_contig_range(range, &mut w).map(|s| s.range()),
            Err(e),
            "{range:?}"
        );
    }
    // A range reaching into the hole past the handed-over memory.
    let hole = r(4 * GIB + 8 * PB - 10, 4 * GIB + 8 * PB + 10);
    assert_eq!(
        m.alloc_contig_range(hole, &mut w).map(|s| s.range()),
        Err(ContigError::Blocked {
            pfn: Pfn(4 * GIB + 8 * PB),
            why: Blocker::Hole
        })
    );
    let g = Gfp::KERNEL;
    let contig = |node, frames, align, w: &mut Words| {
        m.alloc_contig(node, g, frames, align, w).map(|s| s.range())
    };
    for (frames, align) in [(0, 1), (1, 3), (u64::MAX, 1), (1, 1 << 63)] {
        assert_eq!(
            contig(NodeId::ZERO, frames, align, &mut w),
            Err(ContigError::Invalid),
            "{frames} aligned to {align}"
        );
    }
    assert_eq!(contig(n(7), 1, 1, &mut w), Err(ContigError::Invalid));
    assert_eq!(
        contig(NodeId::ZERO, 100 * GIB, 1, &mut w),
        Err(ContigError::NotFound)
    );
    let err = |p: u64| {
        Err(pageframe::RawError {
            pfn: Pfn(p),
            why: FreeError::OutOfRange,
        })
    };
    assert_eq!(raw_range(m, r(5, 5)), err(5));
    assert_eq!(raw_range(m, r(u64::MAX - 2, u64::MAX)), err(u64::MAX - 2));
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
}

#[test]
fn overlapping_requests_exclude_each_other() {
    let m = one_zone(64 * PB);
    let mut w = Words::default();
    let base = 4 * GIB;
    let a = m
        .alloc_contig_range(r(base + 100, base + 900), &mut w)
        .unwrap();
    // Overlapping: the frames are taken (unmovable now).
    assert!(matches!(
        m.alloc_contig_range(r(base + 800, base + 1000), &mut w).map(|s| s.range()),
        Err(ContigError::Blocked { pfn, why: Blocker::Unmovable }) if pfn.get() >= base + 800
    ));
    m.free_segment(a).unwrap();
    m.validate().unwrap();
}

/// A migrator whose caches are the machine's per-CPU caches.
struct Draining<'m> {
    words: Words,
    machine: &'m Machine<'static>,
    drains: u32,
}

impl Migrator for Draining<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<pageframe::Block> {
        self.words.isolate(pfn, order)
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, m: MigrateMode) -> Result<(), MigrateError> {
        self.words.migrate(s, d, o, m)
    }
    fn putback(&mut self, b: pageframe::Block) {
        self.words.putback(b)
    }
    fn migrated(&mut self, b: pageframe::Block, from: Pfn) {
        self.words.migrated(b, from)
    }
    fn drain_caches(&mut self) {
        self.drains += 1;
        self.machine.drain_pcp(None, |_| std::thread::yield_now());
    }
}

#[test]
fn frames_in_per_cpu_caches_come_back_through_the_migrators_drain() {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB, 4 * GIB + 64 * PB);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &'static Machine<'static> = m;
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let mut held = Vec::new();
    for _ in 0..600 {
        held.push(cpu.alloc(MOVABLE, Order::ZERO).unwrap());
    }
    let lo = held.iter().map(|b| b.pfn()).min().unwrap().get();
    let hi = held.iter().map(|b| b.pfn()).max().unwrap().get() + 1;
    for b in held {
        cpu.free(b).unwrap();
    }
    assert!(
        cpu.cache_info(NodeId::ZERO, ZoneKind::Normal)
            .unwrap()
            .count
            > 0
    );
    drop(cpu);
    let range = r(lo, hi);
    // A migrator that does not drain: the cached frames stay busy.
    let mut plain = Words::default();
    assert!(matches!(
        m.alloc_contig_range(range, &mut plain).map(|s| s.range()),
        Err(ContigError::Busy { .. })
    ));
    m.validate().unwrap();
    let mut d = Draining {
        words: Words::default(),
        machine: m,
        drains: 0,
    };
    let seg = m.alloc_contig_range(range, &mut d).unwrap();
    assert!(d.drains > 0);
    m.free_segment(seg).unwrap();
    m.drain_pcp(None, |_| {});
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    m.validate().unwrap();
}

/// A kernel whose blocks are all in use (it hands none over), and which
/// gives one back to the allocator at each drain of its caches, while it
/// has any in `returning`.
struct Keeping<'m> {
    machine: &'m Machine<'static>,
    returning: Vec<pageframe::Block>,
    drains: u32,
    asked: u32,
}

impl Migrator for Keeping<'_> {
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<pageframe::Block> {
        self.asked += 1;
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        unreachable!("nothing was handed over")
    }
    fn putback(&mut self, _: pageframe::Block) {
        unreachable!("nothing was handed over")
    }
    fn migrated(&mut self, _: pageframe::Block, _: Pfn) {
        unreachable!("nothing was handed over")
    }
    fn drain_caches(&mut self) {
        self.drains += 1;
        if let Some(b) = self.returning.pop() {
            self.machine.free(b).unwrap();
        }
    }
}

#[test]
fn blocks_the_kernel_keeps_end_the_attempt_after_one_more_drain() {
    let m = one_zone(64 * PB);
    let base = 4 * GIB;
    let range = r(base + 3 * PB, base + 4 * PB);
    // Five order-0 blocks inside the range, everything else free.
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO) {
        all.push(b);
    }
    let mut inside = Vec::new();
    for b in all {
        let p = b.pfn();
        if inside.len() < 5 && range.contains(p) && (p.get() - range.start.get()).is_multiple_of(97)
        {
            inside.push(b);
        } else {
            m.free(b).unwrap();
        }
    }
    assert_eq!(inside.len(), 5);
    let first = inside.iter().map(|b| b.pfn()).min().unwrap();
    // Kept, and none on its way back: the first pass and one after a
    // drain, then `Busy` naming the first.
    let mut k = Keeping {
        machine: m,
        returning: Vec::new(),
        drains: 0,
        asked: 0,
    };
    assert_eq!(
        m.alloc_contig_range(range, &mut k).map(|s| s.range()),
        Err(ContigError::Busy { pfn: first })
    );
    assert_eq!((k.drains, k.asked), (2, 10));
    m.validate().unwrap();
    // The same blocks coming back one a drain: fewer each pass, so the
    // passes go on until the range is free.
    let mut k = Keeping {
        machine: m,
        returning: inside,
        drains: 0,
        asked: 0,
    };
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    assert_eq!(k.drains, 5);
    assert_eq!(k.asked, 4 + 3 + 2 + 1);
    m.free_segment(seg).unwrap();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    m.validate().unwrap();
}

/// A failed candidate is not tried again through any later candidate that
/// holds the same kept blocks: a zone with a block in use every 64 frames
/// and one free stretch at its end costs a few drains a candidate, not one
/// attempt per block in use.
#[test]
fn first_fit_skips_past_every_block_a_failed_candidate_kept() {
    let m = one_zone(64 * PB);
    let base = 4 * GIB;
    let span = r(base, base + 64 * PB);
    let mut all = Vec::new();
    while let Ok(b) = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO) {
        all.push(b);
    }
    let free_from = span.end.get() - 2 * PB;
    let mut kept = Vec::new();
    for b in all {
        if b.pfn().get().is_multiple_of(64) && b.pfn().get() < free_from {
            kept.push(b);
        } else {
            m.free(b).unwrap();
        }
    }
    let mut k = Keeping {
        machine: m,
        returning: Vec::new(),
        drains: 0,
        asked: 0,
    };
    let seg = m
        .alloc_contig(NodeId::ZERO, MOVABLE, 1000, 1, &mut k)
        .unwrap();
    assert!(
        seg.range().start.get() >= free_from - 64,
        "{:?}",
        seg.range()
    );
    // 1000-frame candidates that skip past all they found kept (the last
    // at most 64 frames before a candidate's end): two drains each, and
    // one for the candidate that succeeds.
    let candidates = (free_from - base) / (1000 - 64) + 1;
    assert!(
        u64::from(k.drains) <= 2 * candidates + 1,
        "{} drains for {candidates} candidates",
        k.drains
    );
    m.free_segment(seg).unwrap();
    for b in kept {
        m.free(b).unwrap();
    }
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    m.validate().unwrap();
}

/// The size users have: a 4 GiB guest two-thirds full after mixed churn (a
/// little unmovable memory among movable), then a 1 GiB page. (Fuller than
/// that, the free memory outside any 1 GiB range cannot hold what the range
/// holds.)
#[test]
fn one_gib_pages_after_churn_in_a_4_gib_guest() {
    let frames = if cfg!(miri) { 64 * PB } else { 4 * GIB };
    let giant = if cfg!(miri) { 8 * PB } else { GIB };
    let m = one_zone(frames);
    let managed = m.inspect().managed_pages();
    let mut w = Words::default();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut live = fill_movable(m, &mut w, 0.75, 7);
    let mut kernel = Vec::new();
    // Churn: free and allocate at random, a few unmovable among them.
    for _ in 0..(frames / 8) {
        if rng.gen_bool(0.5) && !live.is_empty() {
            let i = rng.gen_range(0..live.len());
            let (p, order) = live.swap_remove(i);
            for k in 0..order.pages() {
                w.word.remove(&(p.get() + k));
            }
            m.free(w.blocks.remove(&p).unwrap()).unwrap();
        } else if rng.gen_bool(0.02) {
            if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
                kernel.push(a);
            }
        } else {
            let order = mixed_order(&mut rng);
            if let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, order) {
                live.push((a.pfn(), order));
                keep_words(&mut w, a);
            }
        }
    }
    let live_frames: u64 = live.iter().map(|(_, o)| o.pages()).sum();
    words_intact(&w, live_frames);
    let used = managed - m.inspect().free_pages();
    assert!(used * 100 / managed >= 60, "the guest is full: {used}");
    let a = m
        .alloc_contig(NodeId::ZERO, MOVABLE, giant, giant, &mut w)
        .unwrap();
    assert_eq!(a.len(), giant);
    assert_eq!(a.start().get() % giant, 0, "aligned");
    words_intact(&w, live_frames);
    assert!(w.word.keys().all(|&k| !a.range().contains(Pfn(k))));
    assert!(w.blocks.keys().all(|&p| !a.range().contains(p)));
    assert!(kernel.iter().all(|b| !a.range().contains(b.pfn())));
    m.validate().unwrap();
    m.free_segment(a).unwrap();
    for b in kernel {
        m.free(b).unwrap();
    }
    w.free_all(m);
    assert_eq!(m.inspect().free_pages(), managed);
    m.validate().unwrap();
}

/// Memory offline and online: 256 MiB of a zone full of movable memory goes
/// offline (its memory moves out, each block once), comes back online, and
/// nothing is lost on the way.
#[test]
fn offline_and_online_256_mib_with_movable_memory() {
    let frames = if cfg!(miri) { 64 * PB } else { GIB };
    let m = one_zone(frames);
    let managed = m.inspect().managed_pages();
    let mut w = Words::default();
    let live = fill_movable(m, &mut w, 0.5, 11);
    let words: u64 = live.iter().map(|(_, o)| o.pages()).sum();
    let base = 4 * GIB;
    let range = r(base + frames / 4, base + frames / 2);
    let inside: u64 = live
        .iter()
        .filter(|(p, o)| *p + o.pages() > range.start && *p < range.end)
        .map(|(_, o)| o.pages())
        .sum();
    let free_before = m.inspect().free_pages();
    let moved = m.offline_range(range, &mut w).unwrap();
    assert_eq!(moved, inside, "each allocation in the range moved once");
    assert_eq!(m.inspect().managed_pages(), managed - range.len());
    // The range's free frames left with it, and its allocations took as
    // many free frames outside as they hold.
    assert_eq!(m.inspect().free_pages(), free_before - range.len());
    words_intact(&w, words);
    assert!(w.word.keys().all(|&k| !range.contains(Pfn(k))));
    m.validate().unwrap();
    // Offline memory is nobody's: not allocatable, no block's, not
    // offlined twice.
    // SAFETY: offline memory is no live allocation: refused.
    let r0 = unsafe { m.block_from_raw(range.start, Order::ZERO) };
    assert_eq!(
        r0.map(pageframe::Block::into_raw),
        Err(pageframe::RawError {
            pfn: range.start,
            why: FreeError::Hole
        })
    );
    assert_eq!(
        m.offline_range(range, &mut w),
        Err(ContigError::NotOnline { pfn: range.start })
    );
    let mut got = Vec::new();
    while let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO) {
        assert!(!range.contains(a.pfn()));
        got.push(a);
    }
    assert!(!got.is_empty());
    for b in got {
        m.free(b).unwrap();
    }
    // Online again: every frame back, the zone as before.
    let full = m.inspect().free_pages();
    m.add_free_range(range).unwrap();
    assert_eq!(m.inspect().free_pages(), full + range.len());
    assert!(m.add_free_range(range).is_err(), "online twice");
    assert_eq!(m.inspect().managed_pages(), managed);
    m.validate().unwrap();
    let mut served = 0;
    // MEMALLOC: past the watermarks, every frame.
    while let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
        served += u64::from(range.contains(a.pfn()));
        let _ = a.into_raw(); // kept to the end of the test
    }
    assert_eq!(served, range.len(), "the onlined memory serves, all of it");
    m.validate().unwrap();
}

#[test]
fn offline_refuses_what_it_cannot_empty_and_keeps_everything() {
    let m = one_zone(64 * PB);
    let managed = m.inspect().managed_pages();
    let mut w = Words::default();
    let base = 4 * GIB;
    assert_eq!(
        m.offline_range(r(base + 1, base + PB), &mut w),
        Err(ContigError::Invalid),
        "not whole pageblocks"
    );
    let kblock = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let k = kblock.pfn();
    let kb = k.get() / PB * PB;
    let free = m.inspect().free_pages();
    assert_eq!(
        m.offline_range(r(kb, kb + 4 * PB), &mut w),
        Err(ContigError::Blocked {
            pfn: k,
            why: Blocker::Unmovable
        })
    );
    let mvb = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let mv = mvb.pfn();
    w.keep(mvb);
    let mb = mv.get() / PB * PB;
    w.refuse = true;
    if !r(mb, mb + PB).contains(k) {
        assert_eq!(
            m.offline_range(r(mb, mb + PB), &mut w),
            Err(ContigError::Refused { pfn: mv })
        );
    }
    assert_eq!(m.inspect().managed_pages(), managed);
    assert_eq!(m.inspect().free_pages(), free - 8);
    m.validate().unwrap();
    m.free(kblock).unwrap();
    w.free_all(m);
    assert_eq!(m.inspect().free_pages(), managed);
}

/// A range that holds only part of a block is named as that, with the
/// block's real head; a range that starts inside one names its head.
#[test]
fn a_range_that_cuts_a_block_says_so() {
    let m = one_zone(4 * PB);
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(3)).unwrap();
    let p = b.pfn();
    let before = m.inspect().free_pages();
    let cut = |s: Pfn, e: Pfn| raw_range(m, PfnRange::new(s, e));
    assert_eq!(
        cut(p, p + 4),
        Err(pageframe::RawError {
            pfn: p,
            why: FreeError::PartOfBlock {
                head: p,
                order: o(3)
            }
        }),
        "the lower half"
    );
    assert_eq!(
        cut(p + 4, p + 8),
        Err(pageframe::RawError {
            pfn: p + 4,
            why: FreeError::NotBlockHead {
                head: p,
                order: o(3)
            }
        }),
        "the upper half"
    );
    assert_eq!(m.inspect().free_pages(), before);
    assert!(
        FreeError::PartOfBlock {
            head: p,
            order: o(3)
        }
        .to_string()
        .contains("only part of the order-3 block")
    );
    m.free(b).unwrap();
    m.validate().unwrap();
}

/// A frame parked free in a CPU's cache is no unmovable memory: offlining
/// its pageblock drains the caches through the migrator and goes on; with
/// a migrator that drains nothing, the frame is named busy.
#[test]
fn a_frame_free_in_a_cpu_cache_does_not_block_an_offline() {
    let m = one_zone(64 * PB);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &Machine<'static> = m;
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let a = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    let p = a.pfn();
    c.free(a).unwrap();
    assert!(c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count > 0);
    let pb = r(p.get() / PB * PB, p.get() / PB * PB + PB);
    let managed = m.inspect().managed_pages();
    let busy = m.offline_range(pb, &mut pageframe::compact::NoMigration);
    assert!(
        matches!(busy, Err(ContigError::Busy { pfn }) if pb.contains(pfn)),
        "{busy:?}"
    );
    assert_eq!(m.inspect().managed_pages(), managed);
    m.validate().unwrap();

    /// A kernel whose drain empties this CPU's caches.
    struct Draining<'c, 'm>(&'c mut pageframe::CpuCache<'m, 'static>);
    impl pageframe::Migrator for Draining<'_, '_> {
        fn isolate(&mut self, _: Pfn, _: Order) -> Option<pageframe::Block> {
            None
        }
        fn migrate(
            &mut self,
            _: Pfn,
            _: Pfn,
            _: Order,
            _: pageframe::compact::MigrateMode,
        ) -> Result<(), pageframe::compact::MigrateError> {
            Err(pageframe::compact::MigrateError::Busy)
        }
        fn putback(&mut self, b: pageframe::Block) {
            let _ = b.into_raw();
        }
        fn migrated(&mut self, b: pageframe::Block, _: Pfn) {
            let _ = b.into_raw();
        }
        fn drain_caches(&mut self) {
            self.0.drain();
        }
    }
    assert_eq!(m.offline_range(pb, &mut Draining(&mut c)), Ok(0));
    assert_eq!(m.inspect().managed_pages(), managed - PB);
    m.validate().unwrap();
    m.add_free_range(pb).unwrap();
    drop(c);
    m.drain_pcp(None, |_| {});
    assert_eq!(m.inspect().free_pages(), managed);
}

/// A range that begins inside a block names frames of its own: a refused
/// block that starts before the range is named by the range's first frame.
#[test]
fn a_refused_block_starting_before_the_range_is_named_inside_it() {
    let m = one_zone(64 * PB);
    let mut w = Words::default();
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(9)).unwrap();
    let head = b.pfn();
    w.keep(b);
    w.refuse = true;
    let inside = r(head.get() + 1, head.get() + 2);
    let before = m.inspect().free_pages();
    assert_eq!(
        m.alloc_contig_range(inside, &mut w),
        Err(ContigError::Refused { pfn: inside.start })
    );
    assert_eq!(m.inspect().free_pages(), before, "nothing changed");
    m.validate().unwrap();
    w.refuse = false;
    let seg = m.alloc_contig_range(inside, &mut w).unwrap();
    assert_eq!(seg.range(), inside);
    m.free_segment(seg).unwrap();
    w.free_all(m);
    m.validate().unwrap();
}
