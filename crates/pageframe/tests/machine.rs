//! The machine: GFP zone selection, watermarks, the zonelist walk, reports,
//! and set-up.

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::{
    AllocError, FreeError, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, SetupError, ZoneKind,
    zone::{MigrateType, RangeError},
};

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
    let m = two_zones(GIB, GIB);
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let a = m
            .alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::DMA32, Order::ZERO)
            .unwrap();
        assert!(a.pfn().get() < 4 * GIB && a.zone() == ZoneKind::Dma32);
        seen.push(a);
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
        assert!(
            b.pfn().get() >= 4 * GIB,
            "Normal comes first in the zonelist"
        );
        seen.push(b);
    }
    for b in seen {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn exhausting_normal_falls_back_to_dma32_but_not_into_its_reserve() {
    let m = two_zones(64 << 10, 64 << 10);
    let node = m.inspect().node(NodeId::ZERO).unwrap();
    let dma32 = node.zone(ZoneKind::Dma32).unwrap();
    let reserve = dma32.lowmem_reserve(ZoneKind::Normal);
    assert_eq!(
        reserve,
        node.zone(ZoneKind::Normal).unwrap().managed_pages() / 256
    );
    let mut got = Vec::new();
    while let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        got.push(a);
    }
    let low = got.iter().filter(|b| b.pfn().get() < 4 * GIB).count();
    assert!(low > 0, "fell back to DMA32");
    // Plain requests stop above min + the reserve held against Normal callers.
    assert!(dma32.free_pages() >= dma32.watermarks().min + reserve);
    // A DMA32-only caller may still use what was held back from Normal callers.
    got.push(
        m.alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::DMA32, Order::ZERO)
            .unwrap(),
    );
    for b in got {
        m.free(b).unwrap();
    }
}

#[test]
fn reserves_grant_deeper_access_in_order_of_privilege() {
    let m = one_zone(32 << 10);
    let zone = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let w = zone.watermarks();
    assert!(w.min > 0 && w.min <= w.low && w.low <= w.high && w.high <= w.promo);
    let drain = |gfp: Gfp| {
        let mut got = Vec::new();
        while let Ok(a) = m.alloc(NodeId::ZERO, gfp, Order::ZERO) {
            got.push(a);
        }
        (zone.free_pages(), got)
    };
    let (after_kernel, a) = drain(Gfp::KERNEL);
    let (after_high, b) = drain(Gfp::KERNEL | Gfp::HIGH);
    let (after_atomic, c) = drain(Gfp::ATOMIC);
    let (after_memalloc, d) = drain(Gfp::KERNEL | Gfp::MEMALLOC);
    assert!(
        after_kernel <= w.min + 1 && after_kernel >= w.min,
        "{after_kernel} vs min {}",
        w.min
    );
    assert!(after_high < after_kernel && after_high >= w.min / 2);
    assert!(after_atomic < after_high);
    assert_eq!(after_memalloc, 0);
    for b in a.into_iter().chain(b).chain(c).chain(d) {
        m.free(b).unwrap();
    }
    // NOMEMALLOC overrides MEMALLOC.
    let (after, e) = drain(Gfp::KERNEL | Gfp::MEMALLOC | Gfp::NOMEMALLOC);
    assert_eq!(after, after_kernel);
    assert!(zone.watermark_failures() > 0);
    for b in e {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn setup_errors_are_typed_and_change_nothing() {
    let m = two_zones(4096, 4096);
    let before = m.inspect().free_pages();
    assert_eq!(
        m.add_free_range(r(8 * GIB - 1, 8 * GIB + 1)),
        Err(SetupError::Range(RangeError::OutOfSpan))
    );
    assert_eq!(
        m.add_free_range(r(4 * GIB - 10, 4 * GIB + 10)),
        Err(SetupError::Range(RangeError::Overlap { pfn: Pfn(4 * GIB) }))
    );
    assert_eq!(
        m.add_free_range(r(5, 5)),
        Err(SetupError::Range(RangeError::Empty))
    );
    assert_eq!(m.inspect().free_pages(), before);
    // Across the zone boundary, all or nothing, then both zones gain frames.
    m.add_free_range(r(4 * GIB - 10, 4 * GIB)).unwrap();
    assert_eq!(m.inspect().free_pages(), before + 10);
    m.validate().unwrap();

    let m2 = machine_with(MachineConfig::SINGLE_NODE);
    zone(m2, NodeId::ZERO, ZoneKind::Dma32, r(0, 512), r(0, 0));
    let meta = leak(m2.zone_metadata_bytes(r(256, 1024)));
    assert_eq!(
        m2.add_zone(NodeId::ZERO, ZoneKind::Normal, r(256, 1024), meta)
            .err(),
        Some(SetupError::OverlappingSpan(NodeId::ZERO, ZoneKind::Normal))
    );
    let meta = leak(m2.zone_metadata_bytes(r(1024, 2048)));
    assert_eq!(
        m2.add_zone(NodeId::ZERO, ZoneKind::Dma32, r(1024, 2048), meta)
            .err(),
        Some(SetupError::DuplicateZone(NodeId::ZERO, ZoneKind::Dma32))
    );
    let meta = leak(m2.zone_metadata_bytes(r(1024, 2048)));
    assert_eq!(
        m2.add_zone(n(1), ZoneKind::Normal, r(1024, 2048), meta)
            .err(),
        Some(SetupError::NoSuchNode(n(1)))
    );
    assert!(
        m2.inspect()
            .node(NodeId::ZERO)
            .unwrap()
            .zone(ZoneKind::Normal)
            .is_none()
    );
}

#[test]
fn metadata_sizes_are_exactly_what_zones_need() {
    // Every size the docs promise is the size the code needs: a zone takes
    // exactly `zone_metadata_bytes` bytes at any buffer address, and one
    // byte less is refused at some address (the size has no slack beyond
    // aligning the buffer).
    let fits = |span: pageframe::PfnRange, buf: &'static mut [std::mem::MaybeUninit<u8>]| {
        let m = machine_with(MachineConfig::SINGLE_NODE);
        match m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, buf) {
            Ok(_) => true,
            Err(SetupError::Zone(pageframe::zone::InitError::MetadataTooSmall { .. })) => false,
            Err(e) => panic!("{span:?}: {e}"),
        }
    };
    let spans = [
        r(0, 1),
        r(1, 1000),
        r(511, 513),
        r(4096, 4096 + 3 * 512 + 7),
        r(3 * GIB, 3 * GIB + 4096),
    ];
    for span in spans {
        let m = machine_with(MachineConfig::SINGLE_NODE);
        let need = m.zone_metadata_bytes(span);
        // The docs: 4.3 bytes a frame of the span rounded out to 4 MiB (a
        // 4-byte word and two bits a frame, 44 bytes a pageblock), one
        // ownership byte a frame, two more bytes a pageblock, and under 20
        // KiB a zone (list heads and counts, the order-0 stripes, alignment
        // slack).
        let buddy_frames = span.end.align_up(Order::DEFAULT_MAX).get()
            - span.start.align_down(Order::DEFAULT_MAX).get();
        let pageblocks = span.end.align_up(Order::HUGE_2M).get() / 512 - span.start.get() / 512;
        // With owner records (feature `page-owner`): 24 bytes a frame more.
        let owners = if cfg!(feature = "page-owner") {
            24 * span.len() + 8
        } else {
            0
        };
        assert!(
            need <= (buddy_frames * 43 / 10 + span.len() + 2 * pageblocks + 20 * 1024 + owners)
                as usize,
            "{span:?}: {need}"
        );
        let mut any_short_refused = false;
        for off in 0..16 {
            let buf = leak(need + 16);
            assert!(
                fits(span, &mut buf[off..off + need]),
                "{span:?} at offset {off}"
            );
            let buf = leak(need + 16);
            any_short_refused |= !fits(span, &mut buf[off..off + need - 1]);
        }
        assert!(
            any_short_refused,
            "{span:?}: {need} bytes is more than any address needs"
        );
    }
    let m = machine_with(MachineConfig::SINGLE_NODE);
    assert_eq!(
        m.zone_metadata_bytes(r(7, 7)),
        0,
        "an empty span has no zone"
    );
    assert_eq!(
        m.zone_metadata_bytes(r(0, u64::MAX)),
        0,
        "nor a span no zone can index"
    );
}

#[test]
fn reports_name_the_real_node() {
    let m = numa(2, 4);
    let text = m.inspect().buddyinfo().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[0].starts_with("Node 0, zone   Normal"), "{text}");
    assert!(lines[1].starts_with("Node 1, zone   Normal"), "{text}");
    // 4 pageblocks = 2 order-10 blocks on each node.
    assert_eq!(lines[1].split_whitespace().last(), Some("2"));
    let z1 = m
        .inspect()
        .node(n(1))
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let pti = z1.pagetypeinfo().to_string();
    assert!(
        pti.contains("Node 1, zone   Normal, type      Movable"),
        "{pti}"
    );
}

#[test]
fn errors_read_as_sentences() {
    let texts = [
        AllocError::OutOfMemory.to_string(),
        FreeError::AlreadyFree.to_string(),
        FreeError::NotBlockHead {
            head: Pfn(0x200),
            order: Order::HUGE_2M,
        }
        .to_string(),
        SetupError::DuplicateZone(n(1), ZoneKind::Dma32).to_string(),
        pageframe::ConfigError::Proactiveness(101).to_string(),
    ];
    assert_eq!(
        texts[2],
        "the frame lies inside the order-9 block at 0x200, not at its head"
    );
    assert_eq!(texts[3], "node 1 already has a DMA32 zone");
    for t in texts {
        assert!(
            !t.contains('{') && !t.contains("::") && t.contains(' '),
            "{t}"
        );
    }
}

#[test]
fn two_threads_share_a_machine_without_losing_frames() {
    let m: &Machine<'static> = two_zones(8192, 8192);
    let before = m.inspect().free_pages();
    let (tx, rx) = std::sync::mpsc::channel::<pageframe::Block>();
    std::thread::scope(|s| {
        s.spawn(move || {
            for i in 0..if cfg!(miri) { 300 } else { 20_000u32 } {
                let order = Order::new((i % 4) as u8).unwrap();
                if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, order) {
                    tx.send(a).unwrap();
                }
            }
        });
        s.spawn(move || {
            let mut live = HashSet::new();
            for b in rx {
                let p = b.pfn();
                assert!(live.insert(p), "frame {p:?} handed out twice");
                m.free(b).unwrap();
                live.remove(&p);
            }
        });
    });
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
}

#[cfg(feature = "x86_64")]
#[test]
fn x86_64_frame_allocator_adapter() {
    use ::x86_64::structures::paging::{
        FrameAllocator, FrameDeallocator, PhysFrame, Size2MiB, Size4KiB,
    };
    let m = two_zones(4096, 4096);
    let before = m.inspect().free_pages();
    // SAFETY: the frames are simulated and never touched.
    let mut a = unsafe { pageframe::paging::FrameAdapter::new(m, NodeId::ZERO, Gfp::KERNEL) };
    let small: PhysFrame<Size4KiB> = a.allocate_frame().unwrap();
    let big: PhysFrame<Size2MiB> = a.allocate_frame().unwrap();
    assert_eq!(big.start_address().as_u64() % (2 << 20), 0);
    assert_eq!(m.inspect().free_pages(), before - 1 - 512);
    // SAFETY: both frames came from this adapter and are no longer used;
    // the double free breaks the contract on purpose: the machine refuses
    // it (the frame is free), and the adapter counts it.
    unsafe {
        a.deallocate_frame(small);
        a.deallocate_frame(big);
        a.deallocate_frame(small);
    }
    assert_eq!(a.rejected_frees(), 1);
    assert_eq!(m.inspect().free_pages(), before);
}

#[test]
fn gfp_mobility_bits_choose_the_migratetype_and_keep_types_apart() {
    assert_eq!(Gfp::KERNEL.migratetype(), MigrateType::Unmovable);
    assert_eq!(Gfp::HIGHUSER_MOVABLE.migratetype(), MigrateType::Movable);
    assert_eq!(
        (Gfp::KERNEL | Gfp::RECLAIMABLE).migratetype(),
        MigrateType::Reclaimable
    );
    let m = two_zones(16 << 10, 16 << 10);
    let mut got = Vec::new();
    for i in 0..3000u32 {
        let gfp = match i % 3 {
            0 => Gfp::KERNEL,
            1 => Gfp::KERNEL | Gfp::MOVABLE,
            _ => Gfp::KERNEL | Gfp::RECLAIMABLE,
        };
        got.push((
            m.alloc(NodeId::ZERO, gfp, Order::ZERO).unwrap(),
            gfp.migratetype(),
        ));
    }
    // Every frame sits in a pageblock of its own type: no mixing.
    let normal = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    for (b, mt) in &got {
        assert_eq!(
            normal.inspect(|z| z.block_type(b.pfn())),
            Some(*mt),
            "{b:?}"
        );
    }
    let s = normal.fallback_stats();
    assert!(
        s.claims_whole >= 2,
        "unmovable and reclaimable each claimed a block"
    );
    assert_eq!(s.steals, 0);
    for (b, _) in got {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
    assert!(
        normal
            .pagetypeinfo()
            .to_string()
            .contains("type  Reclaimable")
    );
}

#[test]
fn high_order_atomic_requests_reserve_a_highatomic_block() {
    // spec 02 §7: after a high-order atomic success in the slow pass, its
    // pageblock becomes reserve (zones of >= 100 pageblocks only).
    let m = one_zone(128 * PB);
    let zone = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let low = zone.watermarks().low;
    let mut held = Vec::new();
    while zone.free_pages() > low {
        held.push(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap());
    }
    let a = m.alloc(NodeId::ZERO, Gfp::ATOMIC, o(2)).unwrap();
    let t = zone.inspect(|z| (z.block_type(a.pfn()), z.highatomic_reserved()));
    assert_eq!(t, (Some(MigrateType::HighAtomic), 512));
    m.free(a).unwrap();
    for b in held {
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn tunables_are_checked_and_applied() {
    let m = one_zone(64 << 10);
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let before = z.watermarks();
    assert_eq!(
        m.tunables().set_watermark_scale_factor(0),
        Err(pageframe::ConfigError::WatermarkScaleFactor(0))
    );
    assert_eq!(
        m.tunables().set_watermark_scale_factor(3001),
        Err(pageframe::ConfigError::WatermarkScaleFactor(3001))
    );
    assert_eq!(z.watermarks(), before, "refused values change nothing");
    m.tunables().set_watermark_scale_factor(1000).unwrap();
    let w = z.watermarks();
    assert_eq!(w.min, before.min);
    assert_eq!(w.low - w.min, (64 << 10) / 10, "10% of the zone");
    assert_eq!(
        m.tunables().set_proactiveness(101),
        Err(pageframe::ConfigError::Proactiveness(101))
    );
    assert_eq!(
        m.tunables().set_proactiveness(u32::MAX),
        Err(pageframe::ConfigError::Proactiveness(u32::MAX))
    );
    m.tunables().set_proactiveness(0).unwrap();
    assert_eq!(m.tunables().proactiveness(), 0);
    assert_eq!(
        m.tunables().set_extfrag_threshold(1001),
        Err(pageframe::ConfigError::ExtfragThreshold(1001))
    );
    m.tunables().set_extfrag_threshold(1000).unwrap();
    // min_free_kbytes: any value, saturating; larger than memory reserves all.
    m.tunables().set_min_free_kbytes(u64::MAX);
    assert_eq!(
        m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO),
        Err(AllocError::OutOfMemory)
    );
    let a = m
        .alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::MEMALLOC, Order::ZERO)
        .unwrap();
    m.free(a).unwrap();
    m.tunables().set_min_free_kbytes(1024);
    assert_eq!(z.watermarks().min, 256);
    assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).is_ok());
}

/// The size the docs promise for a machine (README, crate docs: "about
/// 35 KiB"), so that a kernel sizing its static or carve-out from them is
/// not surprised.
#[test]
fn machine_is_the_size_the_docs_say() {
    let size = std::mem::size_of::<pageframe::Machine<'static>>();
    // The counters of feature `vmstat` add 192 bytes a zone slot (and
    // align the zones to cache lines): about 11 KiB.
    let docs = if cfg!(feature = "vmstat") {
        44 << 10..=49 << 10
    } else {
        33 << 10..=38 << 10
    };
    assert!(
        docs.contains(&size),
        "Machine is {size} bytes: update the docs"
    );
}

/// Orders above 10 exist because a machine's maximum order is its
/// configuration's: the default refuses them, one configured for them
/// hands them out, and nothing goes beyond `ORDER_LIMIT`.
#[test]
fn orders_above_ten_are_served_by_machines_configured_for_them() {
    assert_eq!(
        Order::new(
            pageframe::zone::MobilityConfig::DEFAULT
                .buddy
                .max_order
                .get()
                + 1
        )
        .map(Order::get),
        Some(11)
    );
    assert_eq!(Order::new(16), None);
    let m = one_zone(1 << 16);
    assert_eq!(
        m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(11).unwrap())
            .err(),
        Some(AllocError::OrderTooLarge)
    );
    let mut config = MachineConfig::SINGLE_NODE;
    config.mobility.buddy.max_order = Order::new(15).unwrap();
    let big = machine_with(config);
    let span = r(4 * GIB, 4 * GIB + (1 << 16));
    zone(big, NodeId::ZERO, ZoneKind::Normal, span, span);
    let b = big
        .alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(15).unwrap())
        .unwrap();
    assert_eq!(b.order().pages(), 1 << 15);
    big.free(b).unwrap();
    big.validate().unwrap();
}
