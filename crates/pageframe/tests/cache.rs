//! The per-CPU cache in front of a zone: cached paths, checked frees, and
//! conservation with frames crossing CPUs.

use std::collections::HashSet;
use std::mem::MaybeUninit;

use pageframe::pcp::{
    CpuId, PcpConfig, PcpSet, PcpSizing, PcpSlot, PerCpuPages, Slot, ZoneGeometry,
};
use pageframe::{FreeError, Gfp, Order, Pfn, PfnRange, Zone, ZoneKind};

const FRAMES: u64 = 64 << 10; // 256 MiB

type Meta = Box<[MaybeUninit<u8>]>;

fn zone_with_states(meta: &mut Meta, states: &mut Meta) -> Zone<'static> {
    let span = PfnRange::new(Pfn(0x1000), Pfn(0x1000 + FRAMES));
    let m: &'static mut [MaybeUninit<u8>] = leak(meta);
    let s: &'static mut [MaybeUninit<u8>] = leak(states);
    let z = Zone::new(ZoneKind::Normal, span, m)
        .unwrap()
        .with_frame_states(s)
        .unwrap();
    z.add_free_range(PfnRange::new(Pfn(0x1000), Pfn(0x1000 + FRAMES - 100)))
        .unwrap();
    z
}

/// Moves a buffer into a leaked allocation the test keeps for its whole run.
fn leak(b: &mut Meta) -> &'static mut [MaybeUninit<u8>] {
    Box::leak(std::mem::take(b))
}

fn sizing(z: &Zone<'_>, cpus: u32) -> PcpSizing {
    PcpSizing::for_zone(ZoneGeometry {
        managed_pages: z.managed_pages(),
        low_wmark: z.watermarks().low,
        page_size: 4096,
        local_cpus: cpus,
        high_fraction: 0,
    })
    .unwrap()
}

fn slots(s: PcpSizing, cpus: usize) -> Vec<PcpSlot<'static>> {
    (0..cpus)
        .map(|_| {
            let mem: &'static mut [Slot] =
                Box::leak(vec![Slot::EMPTY; s.suggested_slots()].into_boxed_slice());
            PcpSlot::new(PerCpuPages::new(mem, s, PcpConfig::X86_64).unwrap())
        })
        .collect()
}

fn buffers() -> (Meta, Meta) {
    let span = PfnRange::new(Pfn(0x1000), Pfn(0x1000 + FRAMES));
    (
        Box::new_uninit_slice(Zone::metadata_bytes(span)),
        Box::new_uninit_slice(Zone::frame_state_bytes(span)),
    )
}

#[test]
fn cached_paths_serve_and_check_frees() {
    let (mut m, mut s) = buffers();
    let zone = zone_with_states(&mut m, &mut s);
    let before = zone.free_pages();
    let sz = sizing(&zone, 1);
    let cpus = slots(sz, 1);
    let set = PcpSet::new(&cpus);
    let mut local = set.claim(CpuId(0)).unwrap();

    let mut live = Vec::new();
    for i in 0..2000u32 {
        let order = Order::new((i % 4) as u8).unwrap();
        live.push((
            zone.alloc_cached(&mut local, Gfp::KERNEL | Gfp::MOVABLE, order)
                .unwrap(),
            order,
        ));
    }
    let held: HashSet<Pfn> = live.iter().map(|l| l.0).collect();
    assert_eq!(held.len(), live.len(), "a frame was handed out twice");
    let locks_before = zone.stats().allocs;
    for _ in 0..10_000 {
        let p = zone
            .alloc_cached(&mut local, Gfp::KERNEL, Order::ZERO)
            .unwrap();
        zone.free_cached(&mut local, p, Order::ZERO).unwrap();
    }
    let from_zone = zone.stats().allocs - locks_before;
    assert!(
        from_zone < 1000,
        "{from_zone} of 10000 allocations reached the zone"
    );

    // Bad frees through the cache: typed errors, nothing changes.
    let (p, o) = live[1];
    let cached_count = local.count();
    let zone_free = zone.free_pages();
    assert_eq!(
        zone.free_cached(&mut local, p, Order::ZERO),
        Err(FreeError::WrongOrder { allocated: o })
    );
    zone.free_cached(&mut local, p, o).unwrap();
    assert_eq!(
        zone.free_cached(&mut local, p, o),
        Err(FreeError::AlreadyFree),
        "double free of a cached frame"
    );
    assert_eq!(
        zone.free(p, o),
        Err(FreeError::AlreadyFree),
        "nor through the zone"
    );
    let cached_count = cached_count + o.pages() as u32;
    assert!(local.count() <= cached_count);
    assert_eq!(
        zone.free_cached(&mut local, Pfn(0x1000 + FRAMES - 50), Order::ZERO),
        Err(FreeError::Hole)
    );
    assert_eq!(
        zone.free_cached(&mut local, Pfn(0x10), Order::ZERO),
        Err(FreeError::OutOfRange)
    );
    let span = zone.span();
    let free_frame = zone
        .with_zone(|z| {
            z.buddy()
                .walk(span)
                .find_map(|(p, b)| matches!(b, pageframe::BlockInfo::Free { .. }).then_some(p))
        })
        .unwrap();
    assert_eq!(
        zone.free_cached(&mut local, free_frame, Order::ZERO),
        Err(FreeError::AlreadyFree)
    );
    assert_eq!(zone.free_pages(), zone_free);
    live.remove(1);

    for (p, o) in live {
        zone.free_cached(&mut local, p, o).unwrap();
    }
    local.drain(&zone);
    assert_eq!(zone.free_pages(), before, "every frame back in the zone");
    zone.validate().unwrap();
}

#[test]
fn frames_freed_on_another_cpu_are_conserved() {
    let (mut m, mut s) = buffers();
    let zone = zone_with_states(&mut m, &mut s);
    let before = zone.free_pages();
    let sz = sizing(&zone, 2);
    let cpus = slots(sz, 2);
    let set = PcpSet::new(&cpus);
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Pfn, Order)>(1024);
    std::thread::scope(|sc| {
        let (z, set) = (&zone, &set);
        sc.spawn(move || {
            let mut local = set.claim(CpuId(0)).unwrap();
            for i in 0..50_000u32 {
                let o = Order::new((i % 2) as u8).unwrap();
                let p = z
                    .alloc_cached(&mut local, Gfp::KERNEL | Gfp::MOVABLE, o)
                    .unwrap();
                tx.send((p, o)).unwrap();
            }
            local.drain(z);
        });
        sc.spawn(move || {
            let mut local = set.claim(CpuId(1)).unwrap();
            let mut seen = 0u32;
            for (p, o) in rx {
                z.free_cached(&mut local, p, o).unwrap();
                seen += 1;
            }
            assert_eq!(seen, 50_000);
            local.drain(z);
        });
    });
    assert_eq!(zone.free_pages(), before, "no frame lost");
    zone.validate().unwrap();
}
