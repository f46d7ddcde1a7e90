//! Contiguous allocation: exact ranges of any length, 1 GiB pages, what
//! blocks a range, and conservation (no frame lost or doubled, every
//! owner's data where the migrator says it is).

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::pcp::CpuId;
use pageframe::{
    Blocker, ContigError, FreeError, Gfp, Machine, MigrateError, MigrateMode, Migrator, NodeId,
    Order, Pfn, PfnRange, ZoneKind,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

/// Allocates movable frames until `frac` of the machine is in use, each
/// with a word; returns them.
fn fill_movable(m: &Machine<'static>, w: &mut Words, frac: f64, seed: u64) -> Vec<(Pfn, Order)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let target = (m.managed_pages() as f64 * frac) as u64;
    let mut live = Vec::new();
    let mut used = 0;
    while used < target {
        let order = mixed_order(&mut rng);
        let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, order) else {
            break;
        };
        for i in 0..order.pages() {
            w.word.insert(a.pfn.get() + i, (a.pfn.get() + i) ^ 0x77);
        }
        used += order.pages();
        live.push((a.pfn, order));
    }
    live
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
    let managed = m.managed_pages();
    let base = 4 * GIB;
    // 3000 frames, starting mid-pageblock: not a power of two, not aligned.
    let range = r(base + 700, base + 3700);
    let mut w = Words::default();
    let a = m.alloc_contig_range(range, &mut w).unwrap();
    assert_eq!(a.range, range);
    assert_eq!(a.moved, 0);
    assert_eq!((a.node, a.zone), (NodeId::ZERO, ZoneKind::Normal));
    assert_eq!(m.free_pages(), managed - 3000, "exactly the range is taken");
    m.validate().unwrap();
    // The rest of the edge pageblocks serves ordinary requests again.
    let mut got = HashSet::new();
    while let Ok(x) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        assert!(
            !in_range(x.pfn, range),
            "a frame of the range handed out twice"
        );
        got.insert(x.pfn);
    }
    assert_eq!(got.len() as u64, managed - 3000 - min_reserve(m));
    for p in got {
        m.free(p, Order::ZERO).unwrap();
    }
    // A range that is not tiled by live allocations: refused, unchanged.
    let before = m.free_pages();
    assert_eq!(
        m.free_contig_range(r(base + 600, base + 3700)),
        Err(FreeError::AlreadyFree)
    );
    assert_eq!(
        m.free_contig_range(r(base + 701, base + 3700)),
        Err(FreeError::Misaligned)
    );
    assert_eq!(m.free_pages(), before);
    m.free_contig_range(range).unwrap();
    assert_eq!(m.free_pages(), managed);
    assert_eq!(
        m.free_contig_range(range),
        Err(FreeError::AlreadyFree),
        "double free"
    );
    m.validate().unwrap();
}

/// Frames the watermark check keeps back from an ordinary allocation.
fn min_reserve(m: &Machine<'static>) -> u64 {
    let z = m
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
    let free_before = m.free_pages();
    let a = m.alloc_contig_range(range, &mut w).unwrap();
    assert_eq!(a.moved, inside, "each allocation in the range moved once");
    assert_eq!(m.free_pages(), free_before - range.len());
    words_intact(&w, frames);
    assert!(
        w.word.keys().all(|&k| !range.contains(Pfn(k))),
        "nobody's data is left in the range"
    );
    m.validate().unwrap();
    m.free_contig_range(range).unwrap();
    assert_eq!(m.free_pages(), free_before);
    m.validate().unwrap();
}

#[test]
fn unmovable_and_pinned_memory_block_with_their_pfn() {
    let m = one_zone(64 * PB);
    let mut w = Words::default();
    let base = 4 * GIB;
    let k = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap().pfn;
    let around = r(k.get().saturating_sub(100).max(base), k.get() + 100);
    let before = m.free_pages();
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Blocked {
            pfn: k,
            why: Blocker::Unmovable
        })
    );
    assert_eq!(m.free_pages(), before, "nothing changed");
    m.validate().unwrap();
    // Pinned movable memory blocks too, and so does a refusing migrator.
    let mv = m.alloc(NodeId::ZERO, MOVABLE, o(2)).unwrap().pfn;
    m.set_pinned(mv, true).unwrap();
    let around = r(mv.get() - 50, mv.get() + 60);
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Blocked {
            pfn: mv,
            why: Blocker::Pinned
        })
    );
    m.set_pinned(mv, false).unwrap();
    w.refuse = true;
    let before = m.free_pages();
    assert_eq!(
        m.alloc_contig_range(around, &mut w),
        Err(ContigError::Refused { pfn: mv })
    );
    assert_eq!(m.free_pages(), before, "isolation undone");
    m.validate().unwrap();
    // The same range works once the migrator cooperates.
    w.refuse = false;
    let a = m.alloc_contig_range(around, &mut w).unwrap();
    assert_eq!(a.moved, 4);
    assert!(
        matches!(m.free(mv, o(2)), Err(FreeError::WrongOrder { .. })),
        "the old place belongs to the range now"
    );
    m.free_contig_range(around).unwrap();
    m.validate().unwrap();
}

#[test]
fn bad_requests_get_typed_errors() {
    let m = two_zones(8 * PB, 8 * PB);
    let mut w = Words::default();
    let before = m.free_pages();
    let cases = [
        (r(4 * GIB, 4 * GIB), ContigError::Invalid),
        (r(10, 20), ContigError::OutOfRange),
        (r(4 * GIB - 10, 4 * GIB + 10), ContigError::OutOfRange),
        (r(100 * GIB, 100 * GIB + 1), ContigError::OutOfRange),
        (r(u64::MAX - 1, u64::MAX), ContigError::OutOfRange),
    ];
    for (range, e) in cases {
        assert_eq!(m.alloc_contig_range(range, &mut w), Err(e), "{range:?}");
    }
    // A range reaching into the hole past the handed-over memory.
    let hole = r(4 * GIB + 8 * PB - 10, 4 * GIB + 8 * PB + 10);
    assert_eq!(
        m.alloc_contig_range(hole, &mut w),
        Err(ContigError::Blocked {
            pfn: Pfn(4 * GIB + 8 * PB),
            why: Blocker::Hole
        })
    );
    let g = Gfp::KERNEL;
    assert_eq!(
        m.alloc_contig(NodeId::ZERO, g, 0, 1, &mut w),
        Err(ContigError::Invalid)
    );
    assert_eq!(
        m.alloc_contig(NodeId::ZERO, g, 1, 3, &mut w),
        Err(ContigError::Invalid)
    );
    assert_eq!(
        m.alloc_contig(n(7), g, 1, 1, &mut w),
        Err(ContigError::Invalid)
    );
    assert_eq!(
        m.alloc_contig(NodeId::ZERO, g, u64::MAX, 1, &mut w),
        Err(ContigError::NotFound)
    );
    assert_eq!(
        m.alloc_contig(NodeId::ZERO, g, 1, 1 << 63, &mut w),
        Err(ContigError::NotFound)
    );
    assert_eq!(m.free_contig_range(r(5, 5)), Err(FreeError::OutOfRange));
    assert_eq!(
        m.free_contig_range(r(u64::MAX - 2, u64::MAX)),
        Err(FreeError::OutOfRange)
    );
    assert_eq!(m.free_pages(), before);
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
        m.alloc_contig_range(r(base + 800, base + 1000), &mut w),
        Err(ContigError::Blocked { pfn, why: Blocker::Unmovable }) if pfn.get() >= base + 800
    ));
    m.free_contig_range(a.range).unwrap();
    m.validate().unwrap();
}

/// A migrator whose caches are the machine's per-CPU caches.
struct Draining<'m> {
    words: Words,
    machine: &'m Machine<'static>,
    drains: u32,
}

impl Migrator for Draining<'_> {
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, m: MigrateMode) -> Result<(), MigrateError> {
        self.words.migrate(s, d, o, m)
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
        held.push(cpu.alloc(MOVABLE, Order::ZERO).unwrap().pfn);
    }
    let lo = held.iter().min().unwrap().get();
    let hi = held.iter().max().unwrap().get() + 1;
    for p in held {
        cpu.free(p, Order::ZERO).unwrap();
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
        m.alloc_contig_range(range, &mut plain),
        Err(ContigError::Busy { .. })
    ));
    m.validate().unwrap();
    let mut d = Draining {
        words: Words::default(),
        machine: m,
        drains: 0,
    };
    m.alloc_contig_range(range, &mut d).unwrap();
    assert!(d.drains > 0);
    m.free_contig_range(range).unwrap();
    m.drain_pcp(None, |_| {});
    assert_eq!(m.free_pages(), m.managed_pages());
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
    let managed = m.managed_pages();
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
            m.free(p, order).unwrap();
        } else if rng.gen_bool(0.02) {
            if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
                kernel.push(a.pfn);
            }
        } else {
            let order = mixed_order(&mut rng);
            if let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, order) {
                for k in 0..order.pages() {
                    w.word.insert(a.pfn.get() + k, (a.pfn.get() + k) ^ 0x77);
                }
                live.push((a.pfn, order));
            }
        }
    }
    let live_frames: u64 = live.iter().map(|(_, o)| o.pages()).sum();
    words_intact(&w, live_frames);
    let used = managed - m.free_pages();
    assert!(used * 100 / managed >= 60, "the guest is full: {used}");
    let a = m
        .alloc_contig(NodeId::ZERO, MOVABLE, giant, giant, &mut w)
        .unwrap();
    assert_eq!(a.range.len(), giant);
    assert_eq!(a.range.start.get() % giant, 0, "aligned");
    words_intact(&w, live_frames);
    assert!(w.word.keys().all(|&k| !a.range.contains(Pfn(k))));
    assert!(kernel.iter().all(|p| !a.range.contains(*p)));
    m.validate().unwrap();
    m.free_contig_range(a.range).unwrap();
    m.validate().unwrap();
}

/// Memory offline and online: 256 MiB of a zone full of movable memory goes
/// offline (its memory moves out, each block once), comes back online, and
/// nothing is lost on the way.
#[test]
fn offline_and_online_256_mib_with_movable_memory() {
    let frames = if cfg!(miri) { 64 * PB } else { GIB };
    let m = one_zone(frames);
    let managed = m.managed_pages();
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
    let free_before = m.free_pages();
    let moved = m.offline_range(range, &mut w).unwrap();
    assert_eq!(moved, inside, "each allocation in the range moved once");
    assert_eq!(m.managed_pages(), managed - range.len());
    // The range's free frames left with it, and its allocations took as
    // many free frames outside as they hold.
    assert_eq!(m.free_pages(), free_before - range.len());
    words_intact(&w, words);
    assert!(w.word.keys().all(|&k| !range.contains(Pfn(k))));
    m.validate().unwrap();
    // Offline memory is nobody's: not allocatable, not freeable, not
    // offlined twice.
    assert_eq!(m.free(range.start, Order::ZERO), Err(FreeError::Hole));
    assert!(matches!(
        m.offline_range(range, &mut w),
        Err(ContigError::Blocked {
            why: Blocker::Hole,
            ..
        })
    ));
    let mut got = 0u64;
    while let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE, Order::ZERO) {
        assert!(!range.contains(a.pfn));
        got += 1;
    }
    assert!(got > 0);
    // Online again: every frame back, the zone as before.
    let full = m.free_pages();
    m.add_free_range(range).unwrap();
    assert_eq!(m.free_pages(), full + range.len());
    assert!(m.add_free_range(range).is_err(), "online twice");
    assert_eq!(m.managed_pages(), managed);
    m.validate().unwrap();
    let mut served = 0;
    // MEMALLOC: past the watermarks, every frame.
    while let Ok(a) = m.alloc(NodeId::ZERO, MOVABLE | Gfp::MEMALLOC, Order::ZERO) {
        served += u64::from(range.contains(a.pfn));
    }
    assert_eq!(served, range.len(), "the onlined memory serves, all of it");
    m.validate().unwrap();
}

#[test]
fn offline_refuses_what_it_cannot_empty_and_keeps_everything() {
    let m = one_zone(64 * PB);
    let managed = m.managed_pages();
    let mut w = Words::default();
    let base = 4 * GIB;
    assert_eq!(
        m.offline_range(r(base + 1, base + PB), &mut w),
        Err(ContigError::Invalid),
        "not whole pageblocks"
    );
    let k = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap().pfn;
    let kb = k.get() / PB * PB;
    let free = m.free_pages();
    assert_eq!(
        m.offline_range(r(kb, kb + 4 * PB), &mut w),
        Err(ContigError::Blocked {
            pfn: k,
            why: Blocker::Unmovable
        })
    );
    let mv = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap().pfn;
    let mb = mv.get() / PB * PB;
    w.refuse = true;
    if !r(mb, mb + PB).contains(k) {
        assert_eq!(
            m.offline_range(r(mb, mb + PB), &mut w),
            Err(ContigError::Refused { pfn: mv })
        );
    }
    assert_eq!(m.managed_pages(), managed);
    assert_eq!(m.free_pages(), free - 8);
    m.validate().unwrap();
}
