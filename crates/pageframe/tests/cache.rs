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

/// A migrator whose "contents" are one word per frame.
#[derive(Default)]
struct Words {
    data: std::collections::HashMap<u64, u64>,
    sources: HashSet<u64>,
}

impl pageframe::Migrator for Words {
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _mode: pageframe::compact::MigrateMode,
    ) -> Result<(), pageframe::compact::MigrateError> {
        for i in 0..order.pages() {
            if let Some(w) = self.data.remove(&(src.get() + i)) {
                self.data.insert(dst.get() + i, w);
            }
        }
        self.sources.insert(src.get());
        Ok(())
    }
}

#[test]
fn compaction_keeps_the_cache_path_states() {
    use pageframe::{
        CompactDriver, CompactPriority, CompactState, Compactor, MigrateType, NodeId, ZoneTarget,
    };
    let (mut m, mut s) = buffers();
    let zone = zone_with_states(&mut m, &mut s);
    let sz = sizing(&zone, 1);
    let cpus = slots(sz, 1);
    let set = PcpSet::new(&cpus);
    let mut local = set.claim(CpuId(0)).unwrap();
    // Fill with movable frames through the cache, then free 3 of every 4.
    let mut driver = CompactDriver::new(Words::default());
    let mut live = HashSet::new();
    while let Ok(p) = zone.alloc_cached(&mut local, Gfp::KERNEL | Gfp::MOVABLE, Order::ZERO) {
        live.insert(p);
        driver.migrator.data.insert(p.get(), p.get() ^ 0x5a5a);
    }
    // Free from the top down: the frames freed last, the lowest, are the
    // ones still cached, right where the migrate scanner starts.
    let mut order: Vec<Pfn> = live.iter().copied().collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    for p in order {
        if p.get() % 4 != 0 {
            zone.free_cached(&mut local, p, Order::ZERO).unwrap();
            driver.migrator.data.remove(&p.get());
            live.remove(&p);
        }
    }
    let cached: HashSet<u64> = {
        let mut c = HashSet::new();
        local.inspect(|pcp| {
            pcp.for_each_block(|_, f| {
                c.insert(f.0);
            })
        });
        c
    };
    assert!(
        !cached.is_empty(),
        "the test needs frames sitting in the cache"
    );
    let state = CompactState::new();
    let target = ZoneTarget {
        node: NodeId::ZERO,
        zone: &zone,
        state: &state,
        mt: MigrateType::Movable,
        background: false,
    };
    let run = driver.compact(target, Order::HUGE_2M, CompactPriority::SyncFull);
    assert!(run.work.migrated > 0, "compaction moved blocks: {run:?}");
    assert!(
        driver.migrator.sources.is_disjoint(&cached),
        "a cached frame was migrated"
    );
    // Every owner finds its word at the frame's new place; frees through the
    // cache follow the moves: the new place frees, the old one is refused.
    let now_live: HashSet<Pfn> = driver.migrator.data.keys().map(|&k| Pfn(k)).collect();
    let owners: HashSet<Pfn> = driver
        .migrator
        .data
        .values()
        .map(|&w| Pfn(w ^ 0x5a5a))
        .collect();
    assert_eq!(owners, live, "every owner's word survived, once");
    assert_eq!(now_live.len(), live.len(), "no frame lost or duplicated");
    for &src in &driver.migrator.sources {
        if !now_live.contains(&Pfn(src)) {
            assert!(
                zone.free_cached(&mut local, Pfn(src), Order::ZERO).is_err(),
                "old place of a moved block"
            );
        }
    }
    for p in now_live {
        zone.free_cached(&mut local, p, Order::ZERO).unwrap();
    }
    if let Some(p) = run.captured {
        // The 2 MiB block compaction captured for the requester is its to free.
        zone.free_cached(&mut local, p, Order::HUGE_2M).unwrap();
    }
    local.drain(&zone);
    assert_eq!(zone.free_pages(), zone.managed_pages());
    zone.validate().unwrap();
}
