//! Memory hot-add: a zone declared at set-up arrives at run time, with
//! metadata given by the caller or carved from the new memory, while other
//! CPUs allocate; bad requests change nothing; the memory can go offline
//! again.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use pageframe::CpuId;
use pageframe::{
    FreeError, Gfp, Machine, MachineConfig, Pfn, SetupError, ZoneKind,
    topology::Topology,
    zone::{InitError, RangeError},
};

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

/// Boot memory: a Normal zone of 256 MiB at 4 GiB; up to 1 GiB of Movable
/// memory may arrive at 8 GiB.
fn hotpluggable() -> &'static mut Machine<'static> {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let boot = r(4 * GIB, 4 * GIB + GIB / 4);
    zone(m, n(0), ZoneKind::Normal, boot, boot);
    m.declare_hotplug(n(0), ZoneKind::Movable, r(8 * GIB, 9 * GIB))
        .unwrap();
    m
}

/// Frees every block and checks that every frame came back.
fn free_all(m: &Machine<'static>, live: Vec<pageframe::Block>) {
    for b in live {
        m.free(b).unwrap();
    }
    assert_eq!(
        m.inspect().free_pages(),
        m.inspect().managed_pages(),
        "no frame lost"
    );
    m.validate().unwrap();
}

#[test]
fn a_declared_zone_arrives_with_its_metadata_carved_from_itself() {
    let m = hotpluggable();
    let before = m.inspect().managed_pages();
    // Nothing there yet: movable requests are served by Normal, and the
    // declared range is no zone's.
    let a = m.alloc(n(0), MOVABLE, o(0)).unwrap();
    assert_eq!(a.zone(), ZoneKind::Normal);
    m.free(a).unwrap();
    assert!(m.inspect().zone_of(Pfn(8 * GIB)).is_none());
    // SAFETY: no block lives there: refused.
    let r0 = unsafe { m.block_from_raw(Pfn(8 * GIB), o(0)) };
    assert_eq!(
        r0.map(pageframe::Block::into_raw).map_err(|e| e.why),
        Err(FreeError::OutOfRange)
    );

    let dimm = r(8 * GIB, 8 * GIB + GIB / 4);
    let plan = m.inspect().memmap_on_memory(dimm).unwrap();
    let needed = m.zone_metadata_bytes(dimm) as u64;
    assert_eq!(plan.metadata.start, dimm.start);
    assert!(plan.metadata_bytes() >= needed, "room for the metadata");
    assert!(
        plan.metadata_bytes() < needed + PB * 4096,
        "at most one pageblock more than needed"
    );
    assert!(plan.online.start.is_aligned(o(9)));
    assert_eq!(plan.online.end, dimm.end);

    let z = m
        .hot_add_zone(
            n(0),
            ZoneKind::Movable,
            dimm,
            leak(plan.metadata_bytes() as usize),
        )
        .unwrap();
    assert_eq!((z.span(), z.managed_pages()), (dimm, 0));
    assert_eq!(m.inspect().managed_pages(), before, "holes until onlined");
    m.add_free_range(plan.online).unwrap();
    assert_eq!(m.inspect().managed_pages(), before + plan.online.len());
    assert!(
        m.inspect()
            .zone(pageframe::topology::ZoneRef {
                node: n(0),
                kind: ZoneKind::Movable
            })
            .is_some()
    );
    assert!(
        m.inspect().zone_of(Pfn(9 * GIB - 1)).is_none(),
        "declared but not added"
    );
    // The metadata frames are holes of the zone: not allocatable, no block.
    // SAFETY: no block lives there: refused.
    assert!(unsafe { m.block_from_raw(plan.metadata.start, o(0)) }.is_err());

    // Movable requests now prefer the Movable zone; others never use it.
    let mut live = Vec::new();
    for _ in 0..64 {
        let a = m.alloc(n(0), MOVABLE, o(9)).unwrap();
        assert_eq!(a.zone(), ZoneKind::Movable);
        assert!(plan.online.contains(a.pfn()));
        live.push(a);
    }
    for _ in 0..256 {
        let a = m.alloc(n(0), Gfp::KERNEL, o(0)).unwrap();
        assert_eq!(a.zone(), ZoneKind::Normal);
        live.push(a);
    }
    assert!(m.inspect().zone_of(live[0].pfn()).unwrap().watermarks().min > 0);
    free_all(m, live);
}

#[test]
fn bad_hot_adds_change_nothing() {
    let m = hotpluggable();
    let dimm = r(8 * GIB, 8 * GIB + GIB / 4);
    let bytes = m.zone_metadata_bytes(dimm);
    let free = m.inspect().free_pages();
    assert_eq!(
        m.hot_add_zone(n(0), ZoneKind::Dma32, dimm, leak(bytes))
            .err(),
        Some(SetupError::NotHotpluggable(n(0), ZoneKind::Dma32)),
        "nothing declared for that kind"
    );
    assert_eq!(
        m.hot_add_zone(
            n(0),
            ZoneKind::Movable,
            r(9 * GIB - PB, 9 * GIB + PB),
            leak(bytes)
        )
        .err(),
        Some(SetupError::NotHotpluggable(n(0), ZoneKind::Movable)),
        "past the declared range"
    );
    assert_eq!(
        m.hot_add_zone(n(1), ZoneKind::Movable, dimm, leak(bytes))
            .err(),
        Some(SetupError::NoSuchNode(n(1)))
    );
    assert_eq!(
        m.hot_add_zone(n(0), ZoneKind::Movable, r(8 * GIB, 8 * GIB), leak(bytes))
            .err(),
        Some(SetupError::Range(RangeError::Empty))
    );
    assert_eq!(
        m.hot_add_zone(n(0), ZoneKind::Movable, dimm, leak(bytes - 1))
            .err(),
        Some(SetupError::Zone(InitError::MetadataTooSmall {
            needed: bytes,
            given: bytes - 1
        }))
    );
    assert!(
        m.inspect().zone_of(dimm.start).is_none(),
        "no zone after the failures"
    );
    assert_eq!(m.inspect().free_pages(), free);

    m.hot_add_zone(n(0), ZoneKind::Movable, dimm, leak(bytes))
        .unwrap();
    assert_eq!(
        m.hot_add_zone(n(0), ZoneKind::Movable, dimm, leak(bytes))
            .err(),
        Some(SetupError::DuplicateZone(n(0), ZoneKind::Movable)),
        "one zone a slot"
    );
    assert_eq!(m.inspect().free_pages(), free);
    m.validate().unwrap();
}

#[test]
fn declarations_are_checked() {
    let m = hotpluggable();
    assert_eq!(
        m.declare_hotplug(n(0), ZoneKind::Movable, r(10 * GIB, 11 * GIB)),
        Err(SetupError::DuplicateZone(n(0), ZoneKind::Movable)),
        "declared already"
    );
    assert_eq!(
        m.declare_hotplug(n(0), ZoneKind::Normal, r(10 * GIB, 11 * GIB)),
        Err(SetupError::DuplicateZone(n(0), ZoneKind::Normal)),
        "the zone is there"
    );
    assert_eq!(
        m.declare_hotplug(n(0), ZoneKind::Dma32, r(4 * GIB + 5, 4 * GIB + 6)),
        Err(SetupError::OverlappingSpan(n(0), ZoneKind::Dma32)),
        "meets the Normal zone"
    );
    assert_eq!(
        m.declare_hotplug(n(3), ZoneKind::Dma32, r(0, 1)),
        Err(SetupError::NoSuchNode(n(3)))
    );
    assert_eq!(
        m.declare_hotplug(n(0), ZoneKind::Dma32, r(5, 5)),
        Err(SetupError::Range(RangeError::Empty))
    );
    let meta = leak(m.zone_metadata_bytes(r(8 * GIB + GIB / 2, 10 * GIB)));
    assert_eq!(
        m.add_zone(n(0), ZoneKind::Dma32, r(8 * GIB + GIB / 2, 10 * GIB), meta)
            .err(),
        Some(SetupError::OverlappingSpan(n(0), ZoneKind::Dma32)),
        "a zone over a declared range"
    );
    let meta = leak(m.zone_metadata_bytes(r(12 * GIB, 13 * GIB)));
    assert_eq!(
        m.add_zone(n(0), ZoneKind::Movable, r(12 * GIB, 13 * GIB), meta)
            .err(),
        Some(SetupError::DuplicateZone(n(0), ZoneKind::Movable)),
        "the declared slot is reserved for the hot-add"
    );
    assert_eq!(
        m.inspect().hotplug_range(n(0), ZoneKind::Movable),
        Some(r(8 * GIB, 9 * GIB))
    );
    assert_eq!(m.inspect().hotplug_range(n(0), ZoneKind::Dma32), None);
    assert_eq!(m.inspect().hotplug_range(n(5), ZoneKind::Movable), None);
}

#[test]
fn memmap_on_memory_refuses_what_cannot_hold_itself() {
    let m = hotpluggable();
    assert_eq!(
        m.inspect().memmap_on_memory(r(8 * GIB, 8 * GIB)),
        None,
        "empty"
    );
    assert_eq!(
        m.inspect().memmap_on_memory(r(8 * GIB, 8 * GIB + PB)),
        None,
        "one pageblock: nothing left after its metadata"
    );
    let p = m
        .inspect()
        .memmap_on_memory(r(8 * GIB, 8 * GIB + 2 * PB))
        .unwrap();
    assert_eq!(p.online, r(8 * GIB + PB, 8 * GIB + 2 * PB));
    // An unaligned start still onlines from a pageblock boundary.
    let p = m
        .inspect()
        .memmap_on_memory(r(8 * GIB + 7, 8 * GIB + 64 * PB))
        .unwrap();
    assert!(p.online.start.is_aligned(o(9)));
    assert!(p.metadata_bytes() >= m.zone_metadata_bytes(r(8 * GIB + 7, 8 * GIB + 64 * PB)) as u64);
}

#[test]
fn hot_added_memory_goes_offline_again_and_the_data_moves_with_it() {
    let m = hotpluggable();
    let dimm = r(8 * GIB, 8 * GIB + GIB / 4);
    let plan = m.inspect().memmap_on_memory(dimm).unwrap();
    m.hot_add_zone(
        n(0),
        ZoneKind::Movable,
        dimm,
        leak(plan.metadata_bytes() as usize),
    )
    .unwrap();
    m.add_free_range(plan.online).unwrap();
    let before = m.inspect().managed_pages();
    let mut w = Words::default();
    let mut live = Vec::new();
    let all: Vec<pageframe::Block> = (0..40_000)
        .map(|_| {
            let a = m.alloc(n(0), MOVABLE, o(0)).unwrap();
            assert_eq!(a.zone(), ZoneKind::Movable);
            a
        })
        .collect();
    for (i, b) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            let p = b.pfn();
            w.word.insert(p.get(), i as u64 / 2);
            w.blocks.insert(p, b);
            live.push(p);
        } else {
            m.free(b).unwrap();
        }
    }
    // Half of the new memory goes out again; its data moves to the other
    // half (migration destinations come from the range's own zone).
    let mid = (plan.online.start.get() + plan.online.len() / 2) / PB * PB;
    let half = r(mid, dimm.end.get());
    let in_half = live.iter().filter(|p| half.contains(**p)).count() as u64;
    assert!(in_half > 1_000, "the Movable zone served them");
    let moved = m.offline_range(half, &mut w).unwrap();
    assert_eq!(moved, in_half, "exactly the frames in use there moved");
    assert_eq!(m.inspect().managed_pages(), before - half.len());
    let mut seen: Vec<u64> = w.word.values().copied().collect();
    seen.sort_unstable();
    assert!(seen.iter().copied().eq(0..20_000), "every word once");
    assert!(w.word.keys().all(|&p| !half.contains(Pfn(p))));
    assert!(w.blocks.keys().all(|&p| w.word.contains_key(&p.get())));
    w.free_all(m);
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    // And back online.
    m.add_free_range(half).unwrap();
    assert_eq!(m.inspect().managed_pages(), before);
    m.validate().unwrap();
}

#[test]
fn memory_for_a_memoryless_node_arrives() {
    let m = machine_with(MachineConfig::new(Topology::uniform(2).unwrap()));
    let boot = r(base(0), base(0) + 64 * PB);
    zone(m, n(0), ZoneKind::Normal, boot, boot);
    let later = r(base(1), base(1) + 64 * PB);
    m.declare_hotplug(n(1), ZoneKind::Normal, later).unwrap();
    assert_eq!(m.inspect().node_order(n(1)), &[n(1), n(0)]);
    let a = m.alloc(n(1), Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(a.node(), n(0), "node 1 has nothing yet");
    assert!(m.alloc(n(1), Gfp::KERNEL | Gfp::THISNODE, o(0)).is_err());
    m.free(a).unwrap();

    m.hot_add_zone(
        n(1),
        ZoneKind::Normal,
        later,
        leak(m.zone_metadata_bytes(later)),
    )
    .unwrap();
    m.add_free_range(later).unwrap();
    let b = m.alloc(n(1), Gfp::KERNEL | Gfp::THISNODE, o(0)).unwrap();
    assert_eq!((b.node(), m.inspect().node_of(b.pfn())), (n(1), Some(n(1))));
    let c = m.alloc(n(1), Gfp::KERNEL, o(3)).unwrap();
    assert_eq!(c.node(), n(1), "the local node first now");
    free_all(m, vec![b, c]);
}

#[test]
fn a_zone_hot_added_while_other_cpus_allocate() {
    let m = hotpluggable();
    m.enable_pcp(2, leak(m.pcp_bytes(2).unwrap())).unwrap();
    let m: &'static Machine<'static> = m;
    let dimm = r(8 * GIB, 8 * GIB + GIB / 4);
    let plan = m.inspect().memmap_on_memory(dimm).unwrap();
    let online = AtomicBool::new(false);
    let workers: Vec<(u64, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|c| {
                let online = &online;
                s.spawn(move || {
                    let mut cpu = m.cpu(CpuId(c), n(0)).unwrap();
                    let (mut held, mut in_movable, mut rounds) = (Vec::new(), 0u64, 0u64);
                    // Churn until the new memory is online, then a while
                    // longer: every block is allocated from a zone present
                    // at that moment and freed back to it.
                    while !online.load(Ordering::Acquire) || rounds < 2_000 {
                        if online.load(Ordering::Acquire) {
                            rounds += 1;
                        }
                        for _ in 0..16 {
                            let a = cpu.alloc(MOVABLE, o(0)).unwrap();
                            in_movable += u64::from(a.zone() == ZoneKind::Movable);
                            held.push(a);
                        }
                        for b in held.drain(..) {
                            cpu.free(b).unwrap();
                        }
                    }
                    (in_movable, rounds)
                })
            })
            .collect();
        m.hot_add_zone(
            n(0),
            ZoneKind::Movable,
            dimm,
            leak(plan.metadata_bytes() as usize),
        )
        .unwrap();
        m.add_free_range(plan.online).unwrap();
        online.store(true, Ordering::Release);
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (in_movable, _) in workers {
        assert!(in_movable > 0, "each CPU reached the new zone");
    }
    m.drain_pcp(None, |_| {});
    assert_eq!(
        m.inspect().free_pages(),
        m.inspect().managed_pages(),
        "no frame lost"
    );
    m.validate().unwrap();
}

/// Small enough for Miri, whose data-race detector checks the slot's
/// publication: a reader that finds the zone reads all of it.
#[test]
fn miri_a_reader_sees_all_of_a_zone_or_none() {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let boot = r(4 * GIB, 4 * GIB + 4 * PB);
    zone(m, n(0), ZoneKind::Normal, boot, boot);
    let later = r(8 * GIB, 8 * GIB + 4 * PB);
    m.declare_hotplug(n(0), ZoneKind::Movable, later).unwrap();
    let m: &'static Machine<'static> = m;
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            loop {
                if let Some(z) = m.inspect().zone_of(later.start) {
                    assert_eq!(z.span(), later);
                    assert_eq!(z.kind(), ZoneKind::Movable);
                    return z.free_pages();
                }
                std::thread::yield_now();
            }
        });
        m.hot_add_zone(
            n(0),
            ZoneKind::Movable,
            later,
            leak(m.zone_metadata_bytes(later)),
        )
        .unwrap();
        assert_eq!(reader.join().unwrap(), 0);
    });
    m.add_free_range(later).unwrap();
    let a = m.alloc(n(0), MOVABLE, o(2)).unwrap();
    assert_eq!(a.zone(), ZoneKind::Movable);
    m.free(a).unwrap();
    m.validate().unwrap();
}
