//! The facade: GFP zone selection, watermarks, the zonelist walk, bad input.

use std::collections::HashSet;
use std::mem::MaybeUninit;

use pageframe::{
    AllocError, AllocFlags, FreeError, Gfp, Node, NodeError, Order, Pfn, PfnRange, RangeError,
    Watermarks, Zone, ZoneKind, default_min_free_kbytes, watermark_ok,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 18; // frames per GiB

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

fn buf(span: PfnRange) -> Meta {
    Box::new_uninit_slice(Zone::metadata_bytes(span))
}

/// DMA32 of `low` frames from 1 MiB, Normal of `high` frames from 4 GiB.
fn two_zones<'a>(
    m1: &'a mut [MaybeUninit<u8>],
    m2: &'a mut [MaybeUninit<u8>],
    low: u64,
    high: u64,
) -> Node<'a> {
    let mut node = Node::new();
    node.add_zone(Zone::new(ZoneKind::Dma32, r(256, 4 * GIB), m1).unwrap())
        .unwrap();
    node.add_zone(Zone::new(ZoneKind::Normal, r(4 * GIB, 8 * GIB), m2).unwrap())
        .unwrap();
    node.add_free_range(r(256, 256 + low)).unwrap();
    node.add_free_range(r(4 * GIB, 4 * GIB + high)).unwrap();
    node
}

type Meta = Box<[MaybeUninit<u8>]>;

fn bufs() -> (Meta, Meta) {
    (buf(r(256, 4 * GIB)), buf(r(4 * GIB, 8 * GIB)))
}

#[test]
fn gfp_zone_table() {
    // spec 01 §3.5.
    assert_eq!(Gfp::KERNEL.highest_zone(), Some(ZoneKind::Normal));
    assert_eq!(
        (Gfp::KERNEL | Gfp::DMA32).highest_zone(),
        Some(ZoneKind::Dma32)
    );
    assert_eq!((Gfp::KERNEL | Gfp::DMA).highest_zone(), Some(ZoneKind::Dma));
    assert_eq!(Gfp::MOVABLE.highest_zone(), Some(ZoneKind::Normal));
    assert_eq!(
        Gfp::HIGHUSER_MOVABLE.highest_zone(),
        Some(ZoneKind::Movable)
    );
    assert_eq!(
        (Gfp::MOVABLE | Gfp::DMA32).highest_zone(),
        Some(ZoneKind::Dma32)
    );
    assert_eq!((Gfp::DMA | Gfp::DMA32).highest_zone(), None);
    assert!(!(Gfp::MOVABLE | Gfp::RECLAIMABLE).is_valid());
    assert!(!Gfp::TRANSHUGE_LIGHT.contains(Gfp::DIRECT_RECLAIM));
    assert!(Gfp::TRANSHUGE.contains(Gfp::DIRECT_RECLAIM | Gfp::COMP | Gfp::MOVABLE));
}

#[test]
fn dma32_requests_stay_low_and_normal_is_preferred() {
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, GIB, GIB);
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let p = node.alloc(Gfp::KERNEL | Gfp::DMA32, Order::ZERO).unwrap();
        assert!(p.get() < 4 * GIB);
        seen.push(p);
        let q = node.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
        assert!(q.get() >= 4 * GIB, "Normal comes first in the zonelist");
        seen.push(q);
    }
    for p in seen {
        node.free(p, Order::ZERO).unwrap();
    }
    node.validate().unwrap();
}

#[test]
fn exhausting_normal_falls_back_to_dma32_but_not_into_its_reserve() {
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 64 << 10, 64 << 10);
    let dma32 = node.zone(ZoneKind::Dma32).unwrap();
    let reserve = dma32.lowmem_reserve(ZoneKind::Normal);
    assert_eq!(
        reserve,
        node.zone(ZoneKind::Normal).unwrap().managed_pages() / 256
    );
    let mut got = Vec::new();
    while let Ok(p) = node.alloc(Gfp::KERNEL, Order::ZERO) {
        got.push(p);
    }
    let low = got.iter().filter(|p| p.get() < 4 * GIB).count();
    assert!(low > 0, "fell back to DMA32");
    // Plain requests stop above min + the reserve held against Normal-capable callers.
    assert!(dma32.free_pages() >= dma32.watermarks().min + reserve);
    // A DMA32-only caller may still use what was held back from Normal callers.
    assert!(node.alloc(Gfp::KERNEL | Gfp::DMA32, Order::ZERO).is_ok());
    for p in got {
        node.free(p, Order::ZERO).unwrap();
    }
    node.validate().unwrap();
}

#[test]
fn reserves_grant_deeper_access_in_order_of_privilege() {
    let span = r(0, 32 << 10);
    let mut m = buf(span);
    let zone = Zone::new(ZoneKind::Normal, span, &mut m).unwrap();
    zone.add_free_range(span).unwrap();
    let w = zone.watermarks();
    assert!(w.min > 0 && w.min <= w.low && w.low <= w.high && w.high <= w.promo);
    let drain = |gfp: Gfp| {
        let mut n = Vec::new();
        while let Ok(p) = zone.alloc(gfp, Order::ZERO) {
            n.push(p);
        }
        (zone.free_pages(), n)
    };
    let (after_kernel, a) = drain(Gfp::KERNEL);
    let (after_high, b) = drain(Gfp::KERNEL | Gfp::HIGH);
    let (after_atomic, c) = drain(Gfp::ATOMIC);
    let (after_memalloc, d) = drain(Gfp::KERNEL | Gfp::MEMALLOC);
    assert!(
        after_kernel > w.min.saturating_sub(1) && after_kernel <= w.min + 1,
        "{after_kernel} vs min {}",
        w.min
    );
    assert!(after_high < after_kernel && after_high >= w.min / 2);
    assert!(after_atomic < after_high);
    assert_eq!(after_memalloc, 0);
    // NOMEMALLOC overrides MEMALLOC.
    for p in a.into_iter().chain(b).chain(c).chain(d) {
        zone.free(p, Order::ZERO).unwrap();
    }
    let (_, e) = drain(Gfp::KERNEL | Gfp::MEMALLOC | Gfp::NOMEMALLOC);
    assert_eq!(zone.free_pages(), after_kernel);
    assert!(zone.watermark_failures() > 0);
    for p in e {
        zone.free(p, Order::ZERO).unwrap();
    }
    zone.validate().unwrap();
}

#[test]
fn bad_requests_are_typed_errors_and_change_nothing() {
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 4096, 4096);
    let before = node.free_pages();
    assert_eq!(
        node.alloc(Gfp::MOVABLE | Gfp::RECLAIMABLE, Order::ZERO),
        Err(AllocError::InvalidGfp)
    );
    assert_eq!(
        node.alloc(Gfp::DMA | Gfp::DMA32, Order::ZERO),
        Err(AllocError::InvalidGfp)
    );
    assert_eq!(
        node.alloc(Gfp::KERNEL | Gfp::DMA, Order::ZERO),
        Err(AllocError::NoEligibleZone)
    );
    assert_eq!(
        node.alloc(Gfp::KERNEL, Order::new(11).unwrap()),
        Err(AllocError::OrderTooLarge)
    );
    assert_eq!(
        node.free(Pfn(9 * GIB), Order::ZERO),
        Err(FreeError::OutOfRange)
    );
    assert_eq!(
        node.free(Pfn(300), Order::ZERO),
        Err(FreeError::AlreadyFree)
    );
    assert_eq!(node.free(Pfn(100_000), Order::ZERO), Err(FreeError::Hole));
    assert_eq!(
        node.add_free_range(r(8 * GIB - 1, 8 * GIB + 1)),
        Err(RangeError::OutOfSpan)
    );
    assert_eq!(
        node.add_free_range(r(4 * GIB - 10, 4 * GIB + 10)),
        Err(RangeError::Overlap { pfn: Pfn(4 * GIB) })
    );
    assert_eq!(node.free_pages(), before);
    node.validate().unwrap();
    // Across the zone boundary, all-or-nothing and then both zones gain frames.
    node.add_free_range(r(4 * GIB - 10, 4 * GIB)).unwrap();
    assert_eq!(node.free_pages(), before + 10);

    let mut m3 = buf(r(0, 512));
    let mut node2 = Node::new();
    node2
        .add_zone(Zone::new(ZoneKind::Dma32, r(0, 512), &mut m3).unwrap())
        .unwrap();
    let mut m4 = buf(r(256, 1024));
    assert_eq!(
        node2.add_zone(Zone::new(ZoneKind::Normal, r(256, 1024), &mut m4).unwrap()),
        Err(NodeError::OverlappingSpan)
    );
    let mut m5 = buf(r(1024, 2048));
    assert_eq!(
        node2.add_zone(Zone::new(ZoneKind::Dma32, r(1024, 2048), &mut m5).unwrap()),
        Err(NodeError::DuplicateZone)
    );
}

#[test]
fn buddyinfo_names_every_zone() {
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 2048, 1024);
    let text = node.buddyinfo().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("Node 0, zone    DMA32"));
    assert!(lines[1].starts_with("Node 0, zone   Normal"));
    assert_eq!(lines[1].split_whitespace().last(), Some("1"));
}

#[test]
fn two_threads_share_a_node_without_losing_frames() {
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 8192, 8192);
    let before = node.free_pages();
    let (tx, rx) = std::sync::mpsc::channel::<(Pfn, Order)>();
    std::thread::scope(|s| {
        let n = &node;
        s.spawn(move || {
            for i in 0..20_000u32 {
                let o = Order::new((i % 4) as u8).unwrap();
                if let Ok(p) = n.alloc(Gfp::KERNEL, o) {
                    tx.send((p, o)).unwrap();
                }
            }
        });
        s.spawn(move || {
            let mut live = HashSet::new();
            for (p, o) in rx {
                assert!(live.insert(p), "frame {p:?} handed out twice");
                n.free(p, o).unwrap();
                live.remove(&p);
            }
        });
    });
    assert_eq!(node.free_pages(), before);
    node.validate().unwrap();
}

proptest! {
    #[test]
    fn watermarks_are_ordered_with_equal_gaps(managed in 1u64..(1 << 26), sf in 1u32..3000) {
        // spec 01 §13.7.
        let share = default_min_free_kbytes(managed * 4) / 4;
        let w = Watermarks::compute(share, managed, sf);
        prop_assert!(w.min <= w.low && w.low <= w.high && w.high <= w.promo);
        prop_assert_eq!(w.low - w.min, w.high - w.low);
    }

    #[test]
    fn watermark_check_is_monotone(free in 0u64..100_000, extra in 0u64..1000, order in 0u8..=10,
                                   mark in 0u64..50_000, reserve in 0u64..5_000, blocks in any::<u16>()) {
        // spec 01 §13.8: more free memory never turns true into false, and
        // more reserve privilege never does either.
        let has = |o: u8| (blocks >> o) & 0x7ff != 0;
        let ladder = [AllocFlags::empty(), AllocFlags::MIN_RESERVE, AllocFlags::MIN_RESERVE | AllocFlags::NON_BLOCK,
                      AllocFlags::MIN_RESERVE | AllocFlags::NON_BLOCK | AllocFlags::OOM, AllocFlags::NO_WATERMARKS];
        for f in ladder {
            if watermark_ok(free, order, mark, reserve, f, has) {
                prop_assert!(watermark_ok(free + extra, order, mark, reserve, f, has));
            }
        }
        for pair in ladder.windows(2) {
            if watermark_ok(free, order, mark, reserve, pair[0], has) {
                prop_assert!(watermark_ok(free, order, mark, reserve, pair[1], has));
            }
        }
    }
}

#[cfg(feature = "x86_64")]
#[test]
fn x86_64_frame_allocator_adapter() {
    use ::x86_64::structures::paging::{
        FrameAllocator, FrameDeallocator, PhysFrame, Size2MiB, Size4KiB,
    };
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 4096, 4096);
    let before = node.free_pages();
    let mut a = pageframe::x86_64::FrameAdapter::new(&node, Gfp::KERNEL);
    let small: PhysFrame<Size4KiB> = a.allocate_frame().unwrap();
    let big: PhysFrame<Size2MiB> = a.allocate_frame().unwrap();
    assert_eq!(big.start_address().as_u64() % (2 << 20), 0);
    assert_eq!(node.free_pages(), before - 1 - 512);
    // SAFETY: both frames came from this adapter and are no longer used.
    unsafe {
        a.deallocate_frame(small);
        a.deallocate_frame(big);
        a.deallocate_frame(small); // double free: rejected, counted
    }
    assert_eq!(a.rejected_frees(), 1);
    assert_eq!(node.free_pages(), before);
}

#[test]
fn gfp_mobility_bits_choose_the_migratetype_and_keep_types_apart() {
    use pageframe::MigrateType;
    assert_eq!(Gfp::KERNEL.migratetype(), MigrateType::Unmovable);
    assert_eq!(Gfp::HIGHUSER_MOVABLE.migratetype(), MigrateType::Movable);
    assert_eq!(
        (Gfp::KERNEL | Gfp::RECLAIMABLE).migratetype(),
        MigrateType::Reclaimable
    );
    let (mut m1, mut m2) = bufs();
    let node = two_zones(&mut m1, &mut m2, 16 << 10, 16 << 10);
    let mut got = Vec::new();
    for i in 0..3000u32 {
        let gfp = match i % 3 {
            0 => Gfp::KERNEL,
            1 => Gfp::KERNEL | Gfp::MOVABLE,
            _ => Gfp::KERNEL | Gfp::RECLAIMABLE,
        };
        let p = node.alloc(gfp, Order::ZERO).unwrap();
        got.push((p, gfp.migratetype()));
    }
    // Every frame sits in a pageblock of its own type: no mixing.
    let normal = node.zone(ZoneKind::Normal).unwrap();
    for &(p, mt) in &got {
        let t = normal.with_zone(|z| z.block_type(p)).unwrap();
        assert_eq!(t, mt, "{p:?}");
    }
    let s = normal.fallback_stats();
    assert!(
        s.claims_whole >= 2,
        "unmovable and reclaimable each claimed a block"
    );
    assert_eq!(s.steals, 0);
    for (p, _) in got {
        node.free(p, Order::ZERO).unwrap();
    }
    node.validate().unwrap();
    assert!(
        normal
            .pagetypeinfo()
            .to_string()
            .contains("type  Reclaimable")
    );
}

#[test]
fn high_order_atomic_requests_reserve_a_highatomic_block() {
    // spec 02 §7: after a high-order atomic success in the slow path, its
    // pageblock becomes reserve (zones of >= 100 pageblocks only).
    let span = r(0, 128 * 512);
    let mut m = buf(span);
    let zone = Zone::new(ZoneKind::Normal, span, &mut m).unwrap();
    zone.add_free_range(span).unwrap();
    // Drain to the low watermark so the atomic request reaches the slow pass.
    let low = zone.watermarks().low;
    let mut held = Vec::new();
    while zone.free_pages() > low {
        held.push(zone.alloc(Gfp::KERNEL, Order::ZERO).unwrap());
    }
    let p = zone.alloc(Gfp::ATOMIC, Order::new(2).unwrap()).unwrap();
    let t = zone.with_zone(|z| (z.block_type(p), z.highatomic_reserved()));
    assert_eq!(t, (Some(pageframe::MigrateType::HighAtomic), 512));
    zone.free(p, Order::new(2).unwrap()).unwrap();
    for q in held {
        zone.free(q, Order::ZERO).unwrap();
    }
    zone.validate().unwrap();
}
