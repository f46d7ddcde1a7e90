//! The per-CPU caches through a CPU's handle: cached paths, checked frees,
//! conservation with frames crossing CPUs, and compaction beside them.

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use pageframe::{
    Block, FreeError, Gfp, Machine, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode},
};
use pageframe::{
    CpuId,
    pcp::{CpuError, PcpError},
};

const FRAMES: u64 = if cfg!(miri) { 8 << 10 } else { 64 << 10 }; // 256 MiB (32 MiB under Miri)

/// One zone of 256 MiB (100 frames short of its span: a hole at the top)
/// with per-CPU caches for `cpus` CPUs.
fn cached_machine(cpus: u32) -> &'static Machine<'static> {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB, 4 * GIB + FRAMES);
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Normal,
        span,
        r(4 * GIB, 4 * GIB + FRAMES - 100),
    );
    let bytes = m.pcp_bytes(cpus).unwrap();
    m.enable_pcp(cpus, leak(bytes)).unwrap();
    m
}

#[test]
fn handles_are_claimed_once() {
    let m = cached_machine(2);
    let c0 = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    assert_eq!(
        m.cpu(CpuId(0), NodeId::ZERO).err(),
        Some(CpuError::Pcp(PcpError::Busy))
    );
    assert_eq!(
        m.cpu(CpuId(2), NodeId::ZERO).err(),
        Some(CpuError::Pcp(PcpError::NoSuchCpu))
    );
    // A node the topology does not have is named as such, not as a CPU.
    assert_eq!(
        m.cpu(CpuId(1), n(5)).err(),
        Some(CpuError::NoSuchNode(n(5)))
    );
    drop(c0);
    assert!(
        m.cpu(CpuId(0), NodeId::ZERO).is_ok(),
        "dropping gives it back"
    );
    let m2 = one_zone(4096);
    assert!(m2.pcp_bytes(0).is_err());
    assert!(m2.enable_pcp(1, leak(16)).is_err(), "memory too small");
    assert_eq!(m2.inspect().pcp_cpus(), 0);
}

#[test]
fn cached_paths_serve_and_check_frees() {
    let m = cached_machine(1);
    let before = m.inspect().free_pages();
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let mut live = Vec::new();
    for i in 0..2000u32 {
        let order = o((i % 4) as u8);
        live.push(cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE, order).unwrap());
    }
    let held: HashSet<Pfn> = live.iter().map(Block::pfn).collect();
    assert_eq!(held.len(), live.len(), "a frame was handed out twice");
    let zone = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let zone_allocs = zone.stats().allocs;
    for _ in 0..10_000 {
        let b = cpu.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
        cpu.free(b).unwrap();
    }
    let from_zone = zone.stats().allocs - zone_allocs;
    assert!(
        from_zone < 1000,
        "{from_zone} of 10000 allocations reached the zone"
    );
    let pageframe::pcp::CacheInfo { stats, count, .. } =
        cpu.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert!(
        count > 0 && stats.local_hits >= 9000,
        "{stats:?}, {count} pages cached"
    );
    assert_eq!(
        m.inspect().free_pages() + count as u64 + 2000 * 15 / 4,
        before,
        "cached frames are not free"
    );

    // Numbers that are not the caller's block, through the raw path: a
    // typed error naming the frame, nothing changes.
    let raw = |p: Pfn, o: Order| {
        // SAFETY: none of these is a live allocation of that order: the
        // call must refuse it.
        unsafe { m.block_from_raw(p, o) }
            .map(Block::into_raw)
            .map_err(|e| {
                assert_eq!(e.pfn, p);
                e.why
            })
    };
    let b = live.remove(1);
    let (p, order) = (b.pfn(), b.order());
    let zone_free = zone.free_pages();
    assert_eq!(
        raw(p, Order::ZERO),
        Err(FreeError::WrongOrder { allocated: order })
    );
    cpu.free(b).unwrap();
    assert_eq!(
        raw(p, order),
        Err(FreeError::AlreadyFree),
        "a cached frame is nobody's block"
    );
    assert_eq!(
        raw(Pfn(4 * GIB + FRAMES - 50), Order::ZERO),
        Err(FreeError::Hole)
    );
    assert_eq!(raw(Pfn(0x10), Order::ZERO), Err(FreeError::OutOfRange));
    let tail = live.iter().find(|b| b.order() == o(3)).unwrap().pfn() + 1;
    assert!(matches!(
        raw(tail, Order::ZERO),
        Err(FreeError::NotBlockHead { .. })
    ));
    let span = zone.span();
    let free_frame = zone
        .inspect(|z| {
            z.buddy().walk(span).find_map(|(p, b)| {
                matches!(b, pageframe::zone::BlockInfo::Free { .. }).then_some(p)
            })
        })
        .unwrap();
    assert_eq!(raw(free_frame, Order::ZERO), Err(FreeError::AlreadyFree));
    assert_eq!(zone.free_pages(), zone_free);

    for b in live {
        cpu.free(b).unwrap();
    }
    cpu.drain();
    assert_eq!(
        m.inspect().free_pages(),
        before,
        "every frame back in the zone"
    );
    m.validate().unwrap();
}

#[test]
fn frames_freed_on_another_cpu_are_conserved() {
    let m = cached_machine(2);
    let before = m.inspect().free_pages();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Block>(1024);
    // Fewer under Miri, which runs the same interleaving checks slowly.
    let n: u32 = if cfg!(miri) { 300 } else { 50_000 };
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
            for i in 0..n {
                let order = o((i % 2) as u8);
                let b = cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE, order).unwrap();
                tx.send(b).unwrap();
            }
            cpu.drain();
        });
        s.spawn(move || {
            let mut cpu = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
            let mut seen = 0u32;
            for b in rx {
                cpu.free(b).unwrap();
                seen += 1;
            }
            assert_eq!(seen, n);
            cpu.drain();
        });
    });
    assert_eq!(m.inspect().free_pages(), before, "no frame lost");
    m.validate().unwrap();
}

#[test]
fn drain_all_reaches_caches_held_by_others() {
    let m = cached_machine(2);
    let before = m.inspect().free_pages();
    let mut c1 = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
    let b = c1.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    c1.free(b).unwrap();
    assert!(
        m.inspect().free_pages() < before,
        "CPU 1's cache holds frames"
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            // CPU 1 keeps working and honours the request at its next call.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let q = c1.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
                c1.free(q).unwrap();
            }
            c1.drain();
        });
        let mut c0 = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        m.drain_pcp(Some(&mut c0), |_| std::thread::yield_now());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
}

/// A kernel with one word per frame that records what it moved.
#[derive(Default)]
struct Recorder {
    blocks: HashMap<Pfn, Block>,
    data: HashMap<u64, u64>,
    sources: HashSet<u64>,
}

impl Migrator for Recorder {
    fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<Block> {
        self.blocks.remove(&pfn)
    }
    fn putback(&mut self, b: Block) {
        self.blocks.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        self.blocks.insert(b.pfn(), b);
    }
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        for i in 0..order.pages() {
            if let Some(w) = self.data.remove(&(src.get() + i)) {
                self.data.insert(dst.get() + i, w);
            }
        }
        self.sources.insert(src.get());
        Ok(())
    }
}

impl pageframe::compact::SlowPathHooks for Recorder {}

#[test]
fn compaction_keeps_the_cache_path_states() {
    let m = cached_machine(1);
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    // Fill with movable frames through the cache, then free 3 of every 4.
    let mut mig = Recorder::default();
    let mut live = HashSet::new();
    let mut all = Vec::new();
    while let Ok(a) = cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE, Order::ZERO) {
        live.insert(a.pfn());
        mig.data.insert(a.pfn().get(), a.pfn().get() ^ 0x5a5a);
        all.push(a);
    }
    // Free from the top down: the frames freed last, the lowest, are the
    // ones still cached, right where the migrate scanner starts.
    all.sort_unstable_by_key(|b| std::cmp::Reverse(b.pfn()));
    for b in all {
        let p = b.pfn();
        if p.get() % 4 != 0 {
            cpu.free(b).unwrap();
            mig.data.remove(&p.get());
            live.remove(&p);
        } else {
            mig.blocks.insert(p, b);
        }
    }
    let count = cpu
        .cache_info(NodeId::ZERO, ZoneKind::Normal)
        .unwrap()
        .count;
    assert!(count > 0, "the test needs frames sitting in the cache");
    let out = m.compact_node(NodeId::ZERO, &mut mig).unwrap();
    assert!(out.stats.migrated > 0, "compaction moved blocks: {out:?}");
    assert!(
        mig.sources.iter().all(|s| live.contains(&Pfn(*s))),
        "only live allocations move"
    );
    // Every owner finds its word at the frame's new place, and holds the
    // block of the new place; the old number is nobody's block.
    let now_live: HashSet<Pfn> = mig.data.keys().map(|&k| Pfn(k)).collect();
    let owners: HashSet<Pfn> = mig.data.values().map(|&w| Pfn(w ^ 0x5a5a)).collect();
    assert_eq!(owners, live, "every owner's word survived, once");
    assert_eq!(now_live.len(), live.len(), "no frame lost or duplicated");
    assert_eq!(
        mig.blocks.keys().copied().collect::<HashSet<Pfn>>(),
        now_live,
        "the kernel holds the blocks where the words are"
    );
    m.validate().unwrap();
    for &src in &mig.sources {
        if !now_live.contains(&Pfn(src)) {
            // SAFETY: the old place of a moved block is no live
            // allocation: the call must refuse it.
            let r = unsafe { m.block_from_raw(Pfn(src), Order::ZERO) };
            assert!(r.is_err(), "old place of a moved block");
        }
    }
    // A 2 MiB block through the slow path, then everything back.
    let huge = m
        .alloc_slow(
            NodeId::ZERO,
            Gfp::HIGHUSER_MOVABLE,
            Order::HUGE_2M,
            &mut mig,
        )
        .unwrap();
    for (_, b) in mig.blocks.drain() {
        cpu.free(b).unwrap();
    }
    cpu.free(huge).unwrap();
    cpu.drain();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
    m.validate().unwrap();
}

/// A kernel that, asked to move a block it handed over, first tries to
/// take the source and the destination back by their numbers (breaking
/// the raw path's contract): both numbers are refused while the move is
/// under way, so no frame gets two owners.
struct Rogue<'m> {
    machine: &'m Machine<'static>,
    words: Words,
    refused: u64,
}

impl Migrator for Rogue<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.words.isolate(pfn, order)
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, mode: MigrateMode) -> Result<(), MigrateError> {
        for p in [s, d] {
            // SAFETY: deliberately not: the machine holds both frames for
            // the move and must refuse the numbers.
            match unsafe { self.machine.block_from_raw(p, o) } {
                Err(e) if e.why == FreeError::Busy => self.refused += 1,
                r => panic!("{p:?}: {r:?}"),
            }
        }
        self.words.migrate(s, d, o, mode)
    }
    fn putback(&mut self, b: Block) {
        self.words.putback(b)
    }
    fn migrated(&mut self, b: Block, from: Pfn) {
        self.words.migrated(b, from)
    }
}

#[test]
fn a_block_being_migrated_cannot_be_freed() {
    let m = one_zone(16 * PB);
    let mut w = Words::default();
    let kept = fragment(m, 0, &mut w);
    let mut rogue = Rogue {
        machine: m,
        words: w,
        refused: 0,
    };
    let out = m.compact_node(NodeId::ZERO, &mut rogue).unwrap();
    assert!(out.stats.migrated > 0);
    assert_eq!(
        rogue.refused,
        2 * rogue.words.moves,
        "every source and destination refused its number"
    );
    m.validate().unwrap();
    // The owners still own exactly one block each (moved or not).
    let zone = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    assert_eq!(zone.managed_pages() - zone.free_pages(), kept.len() as u64);
}

/// A request that may ignore the watermarks (`MEMALLOC`) gets every frame
/// left, those parked in the requesting CPU's own cache included: ordinary
/// requests that fall back from Normal to DMA32 refill DMA32's cache, then
/// stop at DMA32's lowmem reserve with frames still cached.
#[test]
fn memalloc_reaches_the_frames_in_its_own_cache() {
    let m = two_zones(FRAMES / 2, FRAMES / 2);
    let bytes = m.pcp_bytes(1).unwrap();
    m.enable_pcp(1, leak(bytes)).unwrap();
    let m: &'static Machine<'static> = m;
    let before = m.inspect().free_pages();
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let mut held = HashSet::new();
    let mut blocks = Vec::new();
    while let Ok(a) = cpu.alloc(Gfp::KERNEL, Order::ZERO) {
        assert!(held.insert(a.pfn()), "{a:?} handed out twice");
        blocks.push(a);
    }
    let cached = cpu.cache_info(NodeId::ZERO, ZoneKind::Dma32).unwrap().count;
    assert!(cached > 0, "the ordinary requests left frames in the cache");
    while let Ok(a) = cpu.alloc(Gfp::KERNEL | Gfp::MEMALLOC, Order::ZERO) {
        assert!(held.insert(a.pfn()), "{a:?} handed out twice");
        blocks.push(a);
    }
    assert_eq!(held.len() as u64, before, "every free frame handed out");
    assert_eq!(m.inspect().free_pages(), 0);
    for b in blocks {
        cpu.free(b).unwrap();
    }
    cpu.drain();
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
}

#[test]
fn calls_without_a_handle_use_the_cpus_cache_or_the_zone_when_it_is_out() {
    let m = cached_machine(2);
    let before = m.inspect().free_pages();
    for _ in 0..100 {
        let b = m
            .alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
            .unwrap();
        m.free_on(CpuId(1), b).unwrap();
    }
    let mut c1 = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
    let info = c1.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!((info.stats.allocs, info.stats.frees), (100, 100));
    assert!(info.count > 0, "the frames stayed in CPU 1's cache");
    // With CPU 1's handle out, calls for CPU 1 go to the zone and leave
    // its cache alone.
    let b = m
        .alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
        .unwrap();
    m.free_on(CpuId(1), b).unwrap();
    let after = c1.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!((after.stats.allocs, after.stats.frees), (100, 100));
    assert_eq!(after.count, info.count);
    c1.drain();
    drop(c1);
    assert_eq!(m.inspect().free_pages(), before);
    // A CPU without caches, and a block of another machine.
    let b = m
        .alloc_on(CpuId(7), NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
        .unwrap();
    m.free_on(CpuId(7), b).unwrap();
    let other = one_zone(PB);
    let foreign = other.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let refused = m.free_on(CpuId(0), foreign).unwrap_err();
    assert_eq!(refused.reason(), FreeError::Foreign);
    other.free(refused.into_inner()).unwrap();
    m.validate().unwrap();
}

#[test]
fn threads_without_handles_share_frames_across_cpus() {
    let m = cached_machine(2);
    let before = m.inspect().free_pages();
    // Bounded: at most 64 blocks in flight, whatever the threads' speeds.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Block>(64);
    std::thread::scope(|s| {
        // CPU 0 allocates (orders 0..=3), CPU 1 frees what it is sent.
        s.spawn(move || {
            for i in 0..20_000u32 {
                let o = Order::new((i % 4) as u8).unwrap();
                let b = m.alloc_on(CpuId(0), NodeId::ZERO, Gfp::KERNEL, o).unwrap();
                tx.send(b).unwrap();
            }
        });
        s.spawn(move || {
            for b in rx {
                m.free_on(CpuId(1), b).unwrap();
            }
        });
    });
    for cpu in 0..2 {
        m.cpu(CpuId(cpu), NodeId::ZERO).unwrap().drain();
    }
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
}

/// `CpuCache::free_raw` looks the zone up from the frame whichever zone the
/// last such free went to, and refuses what is not the caller's block with
/// a typed error that changes nothing; a pinned block goes to its zone
/// unpinned, not into the cache.
#[test]
fn raw_frees_through_a_handle_find_each_zone_and_refuse_the_rest() {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let low = r(GIB / 4, GIB / 4 + FRAMES / 2);
    let high = r(4 * GIB, 4 * GIB + FRAMES / 2);
    zone(m, NodeId::ZERO, ZoneKind::Dma32, low, low);
    zone(m, NodeId::ZERO, ZoneKind::Normal, high, high);
    let bytes = m.pcp_bytes(1).unwrap();
    m.enable_pcp(1, leak(bytes)).unwrap();
    let before = m.inspect().free_pages();
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let in_zone = |p: Pfn| if low.contains(p) { 0 } else { 1 };

    // Frames of both zones, freed alternately by number.
    let mut live = Vec::new();
    for i in 0..400u32 {
        let gfp = if i % 2 == 0 { Gfp::DMA32 } else { Gfp::KERNEL };
        live.push(cpu.alloc(gfp, Order::ZERO).unwrap().into_raw());
    }
    let mut seen = [0; 2];
    for &(p, _) in &live {
        seen[in_zone(p)] += 1;
    }
    assert!(seen[0] > 0 && seen[1] > 0, "frames of both zones: {seen:?}");
    let (first, rest) = live.split_first().unwrap();
    for &(p, order) in rest {
        // SAFETY: allocated above, held only as this number.
        unsafe { cpu.free_raw(p, order) }.unwrap();
    }

    // What is not the caller's block, by number: refused, nothing changed.
    let b = cpu.alloc(Gfp::KERNEL, o(2)).unwrap();
    let (q, order) = b.into_raw();
    let free_before = m.inspect().free_pages();
    let (p, _) = rest[0];
    let refused = |cpu: &mut pageframe::CpuCache<'_, 'static>, p: Pfn, o: Order| {
        // SAFETY: none of these is a live allocation of that order (the
        // call must refuse each).
        unsafe { cpu.free_raw(p, o) }.map_err(|e| {
            assert_eq!(e.pfn, p);
            e.why
        })
    };
    assert_eq!(
        refused(&mut cpu, p, Order::ZERO),
        Err(FreeError::AlreadyFree)
    );
    assert_eq!(
        refused(&mut cpu, Pfn(0x10), Order::ZERO),
        Err(FreeError::OutOfRange)
    );
    assert!(matches!(
        refused(&mut cpu, q, Order::ZERO),
        Err(FreeError::WrongOrder { .. })
    ));
    assert_eq!(m.inspect().free_pages(), free_before);
    // SAFETY: allocated above, held only as this number.
    unsafe { cpu.free_raw(q, order) }.unwrap();

    // A pinned block is the zone's to unpin: it bypasses the cache.
    let b = cpu.alloc(Gfp::DMA32, Order::ZERO).unwrap();
    m.set_pinned(&b, true).unwrap();
    let (pinned, order) = b.into_raw();
    let cached = cpu.cache_info(NodeId::ZERO, ZoneKind::Dma32).unwrap().count;
    // SAFETY: allocated above, held only as this number.
    unsafe { cpu.free_raw(pinned, order) }.unwrap();
    assert_eq!(
        cpu.cache_info(NodeId::ZERO, ZoneKind::Dma32).unwrap().count,
        cached,
        "a pinned frame reached the cache"
    );
    assert_eq!(
        refused(&mut cpu, pinned, Order::ZERO),
        Err(FreeError::AlreadyFree)
    );

    // SAFETY: allocated above, held only as this number.
    unsafe { cpu.free_raw(first.0, first.1) }.unwrap();
    cpu.drain();
    assert_eq!(m.inspect().free_pages(), before, "every frame back");
    m.validate().unwrap();
}

/// `CpuCache::free_raw_or` frees as `free_raw` does and hands a refusal,
/// with the handle, to the caller's fallback, whose answer is the call's:
/// a fallback that frees the frames another way finds the handle as it was.
#[test]
fn a_raw_free_hands_its_refusal_to_the_callers_fallback() {
    let m = cached_machine(1);
    let before = m.inspect().free_pages();
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let never = |_: &mut pageframe::CpuCache<'_, 'static>,
                 e: pageframe::RawError|
     -> Result<(), u32> { panic!("refused: {e:?}") };
    // Accepted frees, of a frame (the cache's hit path) and of a block:
    // the fallback is never called.
    let (p, o0) = cpu.alloc(Gfp::KERNEL, Order::ZERO).unwrap().into_raw();
    // SAFETY: allocated above, held only as this number.
    assert_eq!(unsafe { cpu.free_raw_or(p, o0, never) }, Ok(()));
    let (q, o2) = cpu.alloc(Gfp::KERNEL, o(2)).unwrap().into_raw();
    // SAFETY: as above.
    assert_eq!(unsafe { cpu.free_raw_or(q, o2, never) }, Ok(()));

    // Refusals: the fallback sees the frame and the reason, nothing changed.
    let (q, o2) = cpu.alloc(Gfp::KERNEL, o(2)).unwrap().into_raw();
    let free_before = m.inspect().free_pages();
    let info = cpu.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    let mut seen = Vec::new();
    for (f, order) in [(p, o0), (q, o0), (q + 1, o2), (Pfn(0x10), o0)] {
        // SAFETY: none of these is a live allocation of that order.
        let r = unsafe {
            cpu.free_raw_or(f, order, |_, e| {
                seen.push((e.pfn, e.why));
                Err(7u32)
            })
        };
        assert_eq!(r, Err(7), "the fallback's answer");
    }
    assert_eq!(seen[0], (p, FreeError::AlreadyFree));
    assert!(matches!(seen[1], (f, FreeError::WrongOrder { .. }) if f == q));
    assert_eq!(seen[2].0, q + 1);
    assert_eq!(seen[3], (Pfn(0x10), FreeError::OutOfRange));
    assert_eq!(m.inspect().free_pages(), free_before);
    let after = cpu.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert_eq!(
        (after.count, after.stats.frees),
        (info.count, info.stats.frees)
    );

    // A fallback that frees the block at its own order, through the handle
    // it is given (as a kernel's general path would).
    // SAFETY: `q` is a live block of order 2, held only as this number; the
    // fallback frees it once, at that order.
    let r = unsafe { cpu.free_raw_or(q, o0, |h, _| h.free_raw(q, o2).map_err(|e| e.why)) };
    assert_eq!(r, Ok(()));
    cpu.drain();
    assert_eq!(m.inspect().free_pages(), before, "every frame back");
    m.validate().unwrap();
}

/// Bytes [`Machine::pcp_bytes`] asks for each CPU beyond the first, for one
/// zone of `frames` frames.
fn per_cpu_bytes(frames: u64) -> usize {
    let m = one_zone(frames);
    m.pcp_bytes(2).unwrap() - m.pcp_bytes(1).unwrap()
}

/// The caches' memory follows what a cache can hold, not the zone's size
/// (the formula in the crate docs): with the order-0 frames in the homes'
/// bitmaps, a CPU's slots are `2 * (batch << 5) + 2`, 16 bytes each, next
/// to its cache record of a fixed size.
#[test]
#[cfg_attr(miri, ignore = "zones of gigabytes")]
fn cache_memory_follows_the_cache_not_the_zone() {
    let slots = |batch: usize| (batch << 5) + 2;
    // 4 GiB and 16 GiB: batch 63 (its 1 MiB cap), the same bytes.
    let big = per_cpu_bytes(1 << 20);
    assert_eq!(
        big,
        per_cpu_bytes(1 << 22),
        "a CPU's bytes grew with its zone"
    );
    // 64 MiB: batch 3; the record is the same size.
    let small = per_cpu_bytes(1 << 14);
    let record = big - slots(63) * 16;
    assert_eq!(small - slots(3) * 16, record);
    assert!(record < 8 << 10, "record of {record} bytes");
}

/// A handle serves each request from its cache of the zone the request's
/// zonelist tries first, as the machine's own path does, and a second
/// such request is a hit there: every request zone, with and without
/// `THISNODE`, from both nodes of a machine whose second node has no DMA32
/// zone (its DMA32 requests go to node 0's, or nowhere with `THISNODE`).
#[test]
fn a_handle_serves_each_request_from_the_zone_it_tries_first() {
    let m = machine_with(pageframe::MachineConfig::new(
        pageframe::topology::Topology::uniform(2).unwrap(),
    ));
    let dma32 = r(GIB / 4, GIB / 4 + FRAMES / 4);
    zone(m, n(0), ZoneKind::Dma32, dma32, dma32);
    for i in 0..2 {
        let span = r(base(i), base(i) + FRAMES / 4);
        zone(m, n(i), ZoneKind::Normal, span, span);
    }
    let bytes = m.pcp_bytes(2).unwrap();
    m.enable_pcp(2, leak(bytes)).unwrap();
    let requests = [
        Gfp::KERNEL,
        Gfp::DMA32,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::KERNEL | Gfp::THISNODE,
        Gfp::DMA32 | Gfp::THISNODE,
    ];
    let mut served = 0;
    for node in 0..2 {
        let mut cpu = m.cpu(CpuId(node as u32), n(node)).unwrap();
        // Order 0 (the cache's homes and hot frames) and a cached higher
        // order (its lists), for each request.
        for (gfp, order) in requests
            .into_iter()
            .flat_map(|g| [(g, Order::ZERO), (g, o(2))])
        {
            // Where the machine's own path puts the request.
            let by_zone = m.alloc(n(node), gfp, order);
            let want = by_zone.as_ref().map(|b| (b.node(), b.zone())).ok();
            if let Ok(b) = by_zone {
                m.free(b).unwrap();
            }
            let first = cpu.alloc(gfp, order);
            let at = |b: &Block| (b.node(), b.zone());
            let what = format!("node {node}, {gfp:?}, order {}", order.get());
            assert_eq!(first.as_ref().map(at).ok(), want, "{what}");
            let Ok(first) = first else { continue };
            let (node_of, kind) = at(&first);
            let held = cpu.cache_info(node_of, kind).unwrap().count;
            let second = cpu.alloc(gfp, order).unwrap();
            assert_eq!(at(&second), (node_of, kind), "{what}");
            assert_eq!(
                cpu.cache_info(node_of, kind).unwrap().count,
                held - order.pages() as u32,
                "{what}: a hit in that zone's cache"
            );
            cpu.free(first).unwrap();
            cpu.free(second).unwrap();
            served += 1;
        }
        assert!(cpu.drain() > 0, "node {node}: the caches held frames");
    }
    // Node 1 has no DMA32 zone of its own: one request fails there, at
    // each order.
    assert_eq!(served, 2 * (2 * requests.len() - 1));
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// A fresh cache's first run refills its home, comes from there and goes
/// back there; a run given back to an empty home moves the home to it.
#[test]
fn a_first_run_refills_the_home_and_goes_back_to_it() {
    let m = cached_machine(1);
    let total = m.inspect().free_pages();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    let count = |c: &mut pageframe::CpuCache<'_, '_>| {
        c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count
    };
    let p = c.alloc_run_raw(Gfp::KERNEL, 5).expect("a run");
    let refilled = count(&mut c) + 5;
    assert!(refilled > 5, "the run came with a refill of {refilled}");
    assert_eq!(m.inspect().free_pages(), total - u64::from(refilled));
    // SAFETY: the run is this test's, held as numbers.
    unsafe { c.free_range_raw(PfnRange::new(p, p + 5)) }.unwrap();
    assert_eq!(count(&mut c), refilled, "back in the home");
    // Every frame of the home taken one by one: the home is empty.
    let singles: Vec<Block> = (0..refilled)
        .map(|_| c.alloc(Gfp::KERNEL, Order::ZERO).unwrap())
        .collect();
    assert_eq!(count(&mut c), 0);
    let free = m.inspect().free_pages();
    let (q, n) = (singles[8].pfn(), 3u64);
    let (kept, given): (Vec<Block>, Vec<Block>) = singles
        .into_iter()
        .partition(|b| !(q..q + n).contains(&b.pfn()));
    assert_eq!(given.len() as u64, n, "the home's frames were in a row");
    for b in given {
        let _ = b.into_raw();
    }
    // SAFETY: the frames of `given`, held now as these numbers.
    unsafe { c.free_range_raw(PfnRange::new(q, q + n)) }.unwrap();
    assert_eq!(count(&mut c), n as u32, "an empty home takes the run");
    assert_eq!(
        c.alloc_run_raw(Gfp::KERNEL, n),
        Some(q),
        "and gives it again"
    );
    assert_eq!(m.inspect().free_pages(), free, "no refill");
    // SAFETY: as above.
    unsafe { c.free_range_raw(PfnRange::new(q, q + n)) }.unwrap();
    for b in kept {
        c.free(b).unwrap();
    }
    c.drain();
    assert_eq!(m.inspect().free_pages(), total);
    m.validate().unwrap();
}

/// A run of frames the cache's home cannot give comes from the zone, as
/// order-0 allocations of one bitmap word, and goes back through the zone
/// in one step: whole, in parts, or frame by frame; a run given back twice
/// is refused with nothing changed.
#[test]
fn runs_the_home_lacks_come_from_the_zone_and_go_back_whole() {
    let m = cached_machine(1);
    let total = m.inspect().free_pages();
    let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    // A run takes no fallback: a first frame claims a pageblock for the
    // request's type, as any allocation of it would.
    let first = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    // A home holding every other frame of a refill has no run of two:
    // every run is the zone's.
    let one = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
    let held = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap().count;
    let mut singles: Vec<Block> = (0..held)
        .map(|_| c.alloc(Gfp::KERNEL, Order::ZERO).unwrap())
        .collect();
    singles.push(one);
    singles.sort_by_key(|b| b.pfn());
    let mut kept = Vec::new();
    for (i, b) in singles.into_iter().enumerate() {
        if i % 2 == 0 {
            c.free(b).unwrap();
        } else {
            kept.push(b);
        }
    }
    // Out of the zone: `first`, and the refill's frames (cached or kept).
    let total = total - 1 - (u64::from(held) + 1);
    let mut runs = Vec::new();
    for k in [3u64, 5, 7, 9, 15, 33, 64] {
        let p = c
            .alloc_run_raw(Gfp::KERNEL, k)
            .unwrap_or_else(|| panic!("a run of {k} from the zone"));
        assert_eq!(p.get() / 64, (p.get() + k - 1) / 64, "one word of {k}");
        runs.push((p, k));
    }
    assert_eq!(
        m.inspect().free_pages(),
        total - (3 + 5 + 7 + 9 + 15 + 33 + 64)
    );
    m.validate().unwrap();
    // SAFETY: every run is this test's, held as numbers.
    unsafe {
        let (p, k) = runs[0];
        c.free_range_raw(PfnRange::new(p, p + k)).unwrap();
        let free = m.inspect().free_pages();
        let again = c.free_range_raw(PfnRange::new(p, p + k));
        assert_eq!(again.map_err(|e| e.why), Err(FreeError::AlreadyFree));
        assert_eq!(m.inspect().free_pages(), free, "nothing changed");
        // In parts: the middle, then the ends.
        let (p, k) = runs[4];
        c.free_range_raw(PfnRange::new(p + 4, p + 11)).unwrap();
        c.free_range_raw(PfnRange::new(p, p + 4)).unwrap();
        c.free_range_raw(PfnRange::new(p + 11, p + k)).unwrap();
        // Frame by frame, each an order-0 allocation.
        let (p, k) = runs[2];
        for f in 0..k {
            c.free_raw(p + f, Order::ZERO).unwrap();
        }
        for &(p, k) in runs.iter().skip(1).filter(|&&(_, k)| k != 15 && k != 7) {
            c.free_range_raw(PfnRange::new(p, p + k)).unwrap();
        }
    }
    for b in kept {
        c.free(b).unwrap();
    }
    c.drain();
    assert_eq!(m.inspect().free_pages(), total + u64::from(held) + 1);
    m.validate().unwrap();
    m.free(first).unwrap();
}
