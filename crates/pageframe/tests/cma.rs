//! CMA areas: movable memory uses them, nothing else does, and contiguous
//! requests take them back by migrating the movable memory out.

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::{
    ContigError, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, ZoneKind, contig::CmaId,
};

/// One Normal zone of `blocks` pageblocks at 4 GiB, all free, and a CMA
/// area of `cma` pageblocks starting `at` pageblocks in.
fn with_cma(blocks: u64, at: u64, cma: u64) -> (&'static Machine<'static>, CmaId) {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let base = 4 * GIB;
    let span = r(base, base + blocks * PB);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    let id = m
        .add_cma_area(r(base + at * PB, base + (at + cma) * PB))
        .unwrap();
    (m, id)
}

#[test]
fn only_movable_memory_lands_in_the_area_and_a_contiguous_request_takes_it_back() {
    let (m, id) = with_cma(256, 64, 32);
    let area = m.inspect().cma_stats(id).unwrap().range;
    assert_eq!(m.inspect().cma_of(area.start), Some(id));
    assert_eq!(m.inspect().cma_of(Pfn(area.start.get() - 1)), None);
    // Unmovable memory never lands in the area, even when the zone runs dry.
    let mut kernel = Vec::new();
    while let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        assert!(
            !area.contains(a.pfn()),
            "unmovable frame {a:?} in the CMA area"
        );
        kernel.push(a);
    }
    assert!(kernel.len() as u64 >= (256 - 32) * PB - 2048);
    for b in kernel {
        m.free(b).unwrap();
    }
    // Movable memory uses it.
    let mut w = Words::default();
    let mut movable = Vec::new();
    while let Ok(a) = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO) {
        movable.push(a);
    }
    let s = m.inspect().cma_stats(id).unwrap();
    assert_eq!(s.movable + s.free, area.len());
    assert!(s.movable > area.len() / 2, "{s:?}");
    // Keep one frame in four: the area's movable frames must move out.
    let mut kept = HashSet::new();
    for b in movable {
        if b.pfn().get() % 4 == 0 {
            kept.insert(b.pfn().get());
            w.word.insert(b.pfn().get(), b.pfn().get() ^ 0x77);
            w.blocks.insert(b.pfn(), b);
        } else {
            m.free(b).unwrap();
        }
    }
    let c = m.cma_alloc(id, area.len() / 2 + 100, 512, &mut w).unwrap();
    assert!(area.contains_range(&c.range()));
    assert!(c.moved() > 0);
    let owners: HashSet<u64> = w.word.values().map(|v| v ^ 0x77).collect();
    assert_eq!(owners, kept, "every owner's word survived");
    assert!(w.word.keys().all(|&k| !c.range().contains(Pfn(k))));
    assert!(w.blocks.keys().all(|&p| !c.range().contains(p)));
    let s = m.inspect().cma_stats(id).unwrap();
    assert_eq!((s.held, s.allocs, s.moved), (c.range().len(), 1, c.moved()));
    assert_eq!(c.area(), id);
    m.validate().unwrap();
    m.cma_release(c).unwrap();
    assert_eq!(m.inspect().cma_stats(id).unwrap().held, 0);
    w.free_all(m);
    m.validate().unwrap();
}

#[test]
fn movable_requests_prefer_the_area_while_it_holds_most_free_memory() {
    // Three quarters of the zone is CMA: the first movable request goes there.
    let (m, id) = with_cma(64, 16, 48);
    let area = m.inspect().cma_stats(id).unwrap().range;
    let a = m
        .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
        .unwrap();
    assert!(area.contains(a.pfn()));
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    assert_eq!(z.fallback_stats().cma, 1);
    // A quarter: own lists first.
    let (m2, id2) = with_cma(64, 0, 16);
    let area2 = m2.inspect().cma_stats(id2).unwrap().range;
    let b = m2
        .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
        .unwrap();
    assert!(!area2.contains(b.pfn()));
}

#[test]
fn bad_areas_and_requests_get_typed_errors() {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let base = 4 * GIB;
    let span = r(base, base + 64 * PB);
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Normal,
        span,
        r(base, base + 60 * PB),
    );
    assert_eq!(
        m.add_cma_area(r(base + 1, base + PB)),
        Err(ContigError::Invalid)
    );
    assert_eq!(m.add_cma_area(r(base, base)), Err(ContigError::Invalid));
    assert_eq!(
        m.add_cma_area(r(0, PB)),
        Err(ContigError::OutOfRange { pfn: Pfn(0) })
    );
    assert!(matches!(
        m.add_cma_area(r(base + 59 * PB, base + 61 * PB)),
        Err(ContigError::Blocked { .. })
    ));
    let k = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let kb = k.pfn().get() / PB * PB;
    assert!(matches!(
        m.add_cma_area(r(kb, kb + PB)),
        Err(ContigError::Busy { .. })
    ));
    let id = m.add_cma_area(r(base + 40 * PB, base + 48 * PB)).unwrap();
    assert_eq!(
        m.add_cma_area(r(base + 47 * PB, base + 50 * PB)),
        Err(ContigError::Overlap {
            pfn: Pfn(base + 47 * PB)
        }),
        "overlapping areas"
    );
    let m: &Machine<'static> = m;
    let mut w = Words::default();
    let mut cma = |id, frames| m.cma_alloc(id, frames, 1, &mut w).map(|c| c.range());
    assert_eq!(cma(CmaId(5), 1), Err(ContigError::Invalid));
    assert_eq!(cma(id, 0), Err(ContigError::Invalid));
    assert_eq!(cma(id, 9 * PB), Err(ContigError::NotFound));
    m.free(k).unwrap();
    assert_eq!(m.inspect().cma_stats(id).unwrap().failures, 1);
    assert!(m.inspect().cma_stats(CmaId(5)).is_none());
    m.validate().unwrap();
}

/// A piece of a range taken in a CMA area, freed through a CPU's cache
/// (the range given up as numbers, a piece made a block again), bypasses
/// the cache: the cache's lists serve non-movable requests, and this frame
/// must only ever serve movable ones.
#[test]
fn cma_pieces_freed_through_a_cache_go_back_to_the_area() {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let base = 4 * GIB;
    let span = r(base, base + 64 * PB);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    let id = m.add_cma_area(r(base + 8 * PB, base + 16 * PB)).unwrap();
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &'static Machine<'static> = m;
    let mut w = Words::default();
    let area = m.inspect().cma_stats(id).unwrap().range;
    let seg = m
        .alloc_contig_range(r(area.start.get(), area.start.get() + 1), &mut w)
        .unwrap();
    let start = seg.into_raw().start;
    // SAFETY: the segment was given up just above; its one frame is ours.
    let piece = unsafe { m.block_from_raw(start, Order::ZERO) }.unwrap();
    let mut cpu = m.cpu(pageframe::CpuId(0), NodeId::ZERO).unwrap();
    let free = m.inspect().free_pages();
    cpu.free(piece).unwrap();
    assert_eq!(
        m.inspect().free_pages(),
        free + 1,
        "back in the zone, not the cache"
    );
    // Unmovable requests through the cache never get a CMA frame.
    for _ in 0..2000 {
        let a = cpu.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
        assert!(!area.contains(a.pfn()));
        let _ = a.into_raw(); // kept to the end of the test
    }
    drop(cpu);
    m.validate().unwrap();
}

/// An area whose pageblocks cannot all become CMA (one is a highatomic
/// reserve) is refused before any pageblock changes type.
#[test]
fn an_area_refused_leaves_every_pageblock_its_type() {
    let m = one_zone(128 * PB);
    let base = 4 * GIB;
    let zone = m.inspect().zone_of(Pfn(base)).unwrap();
    let low = zone.watermarks().low;
    // A high-order atomic success near the watermark reserves its
    // pageblock (spec 02 §7); freed, the pageblock stays reserved.
    let mut held = Vec::new();
    while m.inspect().free_pages() > low {
        held.push(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap());
    }
    let a = m
        .alloc(NodeId::ZERO, Gfp::ATOMIC, Order::new(2).unwrap())
        .unwrap();
    let reserved = a.pfn().get() / PB * PB;
    m.free(a).unwrap();
    for b in held {
        m.free(b).unwrap();
    }
    let types = |m: &Machine<'static>| {
        m.inspect().zone_of(Pfn(base)).unwrap().inspect(|mz| {
            (0..128)
                .map(|i| mz.block_type(Pfn(base + i * PB)))
                .collect::<Vec<_>>()
        })
    };
    let before = types(m);
    assert_eq!(
        before[((reserved - base) / PB) as usize],
        Some(pageframe::zone::MigrateType::HighAtomic)
    );
    // The area starts two pageblocks below the reserved one (whichever
    // it is, the area holds free pageblocks before it).
    let start = reserved.saturating_sub(2 * PB).max(base);
    let area = r(start, reserved + PB);
    assert_eq!(
        m.add_cma_area(area),
        Err(ContigError::Busy { pfn: Pfn(reserved) })
    );
    assert_eq!(types(m), before, "no pageblock retyped");
    m.validate().unwrap();
}
