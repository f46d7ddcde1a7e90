//! Soundness at run time: races on one frame, bad input from `unsafe`
//! callers, topology corner cases. The compile-time
//! ones (no `&mut` access to a zone's free lists, no per-CPU cache usable
//! with another zone, the adapter's trust boundary) are `compile_fail`
//! examples in the crate docs ("Why safe code cannot break it").

mod common;

use std::sync::Barrier;
use std::sync::atomic::{AtomicU32, Ordering};

use common::*;
use pageframe::CpuId;
use pageframe::{
    AllocError, FreeError, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, SetupError, ZoneKind,
    pcp::PcpSetupError,
    topology::Topology,
    tune::{NodePolicy, ThpDefrag, ThpPolicy},
};

/// Two CPUs freeing one frame at once, through their caches or
/// the zone: exactly one succeeds, every time, and no frame is lost. Safe
/// code cannot do this any more (a block has one owner); the test makes
/// the second owner with the `unsafe` raw path, breaking its contract on
/// purpose, to show the ownership byte still has one winner.
#[test]
fn concurrent_frees_of_one_frame_have_one_winner() {
    let m = one_zone(if cfg!(miri) { 4096 } else { 64 << 10 });
    m.enable_pcp(2, leak(m.pcp_bytes(2).unwrap())).unwrap();
    let m: &Machine<'static> = m;
    let managed = m.inspect().managed_pages();
    let rounds = if cfg!(miri) { 20 } else { 2000 };
    let barrier = Barrier::new(2);
    let wins = [AtomicU32::new(0), AtomicU32::new(0)];
    let (tx, rx) = std::sync::mpsc::sync_channel::<(Pfn, Order)>(0);
    std::thread::scope(|s| {
        let (barrier, wins) = (&barrier, &wins);
        s.spawn(move || {
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
            for i in 0..rounds {
                let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
                let (p, o) = b.into_raw();
                tx.send((p, o)).unwrap();
                barrier.wait();
                // Alternate the paths: cache vs cache, cache vs zone. The
                // other thread may have freed it already: then the number
                // is refused, or it frees it after this block is made.
                // SAFETY: deliberately not: two threads race for one
                // number, which is what the ownership byte must survive.
                let r = match unsafe { m.block_from_raw(p, o) } {
                    Ok(b) if i % 2 == 0 => c.free(b).map_err(|e| e.reason()),
                    Ok(b) => m.free(b).map_err(|e| e.reason()),
                    Err(e) => Err(e.why),
                };
                if r.is_ok() {
                    wins[0].fetch_add(1, Ordering::Relaxed);
                } else {
                    assert!(
                        matches!(r, Err(FreeError::AlreadyFree | FreeError::Busy)),
                        "{r:?}"
                    );
                }
                barrier.wait();
            }
        });
        s.spawn(move || {
            let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
            for (p, o) in rx.iter().take(rounds) {
                barrier.wait();
                // SAFETY: the same deliberate race as the other thread's.
                let r = match unsafe { m.block_from_raw(p, o) } {
                    Ok(b) => c.free(b).map_err(|e| e.reason()),
                    Err(e) => Err(e.why),
                };
                if r.is_ok() {
                    wins[1].fetch_add(1, Ordering::Relaxed);
                } else {
                    assert!(
                        matches!(r, Err(FreeError::AlreadyFree | FreeError::Busy)),
                        "{r:?}"
                    );
                }
                barrier.wait();
            }
            c.drain();
        });
    });
    let total = wins[0].load(Ordering::Relaxed) + wins[1].load(Ordering::Relaxed);
    assert_eq!(total, rounds as u32, "exactly one free won each round");
    m.drain_pcp(None, |_| std::thread::yield_now());
    assert_eq!(
        m.inspect().free_pages(),
        managed,
        "no frame lost or doubled"
    );
    m.validate().unwrap();
}

/// A memoryless node falls back by distance.
#[test]
fn memoryless_node_allocates_from_the_nearest_node() {
    let mut t = Topology::uniform(3).unwrap();
    t.set_distance(n(2), n(1), 15).unwrap();
    let m = machine_with(MachineConfig::new(t));
    for i in 0..2 {
        let span = r(base(i), base(i) + 4 * PB);
        zone(m, n(i), ZoneKind::Normal, span, span);
    }
    let a = m.alloc(n(2), Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(a.node(), n(1), "node 1 is nearer to node 2");
    assert_eq!(m.inspect().node_order(n(2)), &[n(1), n(0)]);
    assert_eq!(
        m.alloc(n(2), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO),
        Err(AllocError::NoEligibleZone)
    );
    assert_eq!(
        m.alloc(n(3), Gfp::KERNEL, Order::ZERO),
        Err(AllocError::NoSuchNode)
    );
    m.free(a).unwrap();
}

/// `NodePolicy::ThisNode` keeps huge pages on the local node
/// even when its GFP flags do not say `__GFP_THISNODE`.
#[test]
fn thisnode_policy_never_returns_a_remote_frame() {
    let m = numa(2, 8);
    let mut w = Words::default();
    let _kept = fragment(m, 0, &mut w);
    w.refuse = true; // compaction cannot help node 0
    m.tunables().set_thp_policy(ThpPolicy {
        defrag: ThpDefrag::Always,
        nodes: NodePolicy::ThisNode,
        compact_only: true,
    });
    for _ in 0..20 {
        match m.alloc_thp(n(0), true, &mut w) {
            Ok(a) => {
                assert_eq!(a.node(), n(0), "a remote huge page under ThisNode");
                m.free(a).unwrap();
            }
            Err(e) => assert_eq!(e, AllocError::OutOfMemory),
        }
    }
    let s = m.inspect().stats(n(0));
    assert_eq!(s.thp_success_remote, 0);
    assert_eq!(s.thp_attempts, 20);
    // Remote fallback does go remote on the same machine.
    m.tunables().set_thp_policy(ThpPolicy::REMOTE_FALLBACK);
    let a = m.alloc_thp(n(0), true, &mut w).unwrap();
    assert_eq!(a.node(), n(1));
    m.free(a).unwrap();
}

/// A kernel with a 16 KiB stack can build a machine, add zones
/// and memory, and allocate (debug build: the worst case for stack use).
#[test]
fn machine_builds_on_a_16_kib_stack() {
    let slot: &'static mut std::mem::MaybeUninit<Machine<'static>> = Box::leak(Box::new_uninit());
    let metas: Vec<&'static mut [std::mem::MaybeUninit<u8>]> =
        (0..2).map(|_| leak(8 << 20)).collect();
    let done = std::thread::Builder::new()
        .stack_size(16 << 10)
        .spawn(move || {
            let m = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_in(slot);
            let mut metas = metas.into_iter();
            let dma32 = r(256, 64 << 10);
            let normal = r(4 * GIB, 4 * GIB + (64 << 10));
            m.add_zone(NodeId::ZERO, ZoneKind::Dma32, dma32, metas.next().unwrap())
                .unwrap();
            m.add_zone(
                NodeId::ZERO,
                ZoneKind::Normal,
                normal,
                metas.next().unwrap(),
            )
            .unwrap();
            m.add_free_range(dma32).unwrap();
            m.add_free_range(normal).unwrap();
            let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
            m.free(a).unwrap();
            m.inspect().managed_pages()
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(done, (64 << 10) - 256 + (64 << 10));
}

/// Any `lock_api::RawMutex` can be the zone lock; here a
/// counting one, showing every zone operation goes through it.
#[test]
fn the_zone_lock_is_the_callers_choice() {
    use pageframe::lock::{GuardSend, RawMutex, SpinLock};
    static LOCKS: AtomicU32 = AtomicU32::new(0);
    struct Counting(SpinLock);
    // SAFETY: delegates mutual exclusion to the spin lock.
    unsafe impl RawMutex for Counting {
        #[allow(clippy::declare_interior_mutable_const)]
        const INIT: Self = Counting(SpinLock::INIT);
        type GuardMarker = GuardSend;
        fn lock(&self) {
            LOCKS.fetch_add(1, Ordering::Relaxed);
            RawMutex::lock(&self.0)
        }
        fn try_lock(&self) -> bool {
            RawMutex::try_lock(&self.0)
        }
        unsafe fn unlock(&self) {
            // SAFETY: forwarded from our caller, who holds the lock.
            unsafe { RawMutex::unlock(&self.0) }
        }
    }
    let m: &mut Machine<'static, (Counting, pageframe::debug::NoHooks)> =
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE)
            .lock::<Counting>()
            .build_in(Box::leak(Box::new_uninit()));
    let span = r(0, 4096);
    let meta = leak(m.zone_metadata_bytes(span));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .unwrap();
    m.add_free_range(span).unwrap();
    let before = LOCKS.load(Ordering::Relaxed);
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    m.free(a).unwrap();
    assert!(LOCKS.load(Ordering::Relaxed) >= before + 2);
}

/// Numbers near their type's limits get typed errors, never a
/// panic, and change nothing.
#[test]
fn numbers_near_their_limits_are_refused_cleanly() {
    let m = one_zone(4096);
    let free = m.inspect().free_pages();
    let raw = |p: Pfn, o: Order| {
        // SAFETY: no such block exists: the call must refuse it.
        unsafe { m.block_from_raw(p, o) }.map(pageframe::Block::into_raw)
    };
    for p in [u64::MAX, u64::MAX - 1, pageframe::zone::MAX_PFN, 1 << 63, 0] {
        let err = |why| Err(pageframe::RawError { pfn: Pfn(p), why });
        assert_eq!(raw(Pfn(p), Order::ZERO), err(FreeError::OutOfRange));
        assert_eq!(
            raw(Pfn(p), Order::new(pageframe_types::ORDER_LIMIT).unwrap()),
            err(FreeError::OutOfRange)
        );
        assert!(m.add_free_range(r(p.saturating_sub(10), p)).is_err());
    }
    assert!(m.add_free_range(r(u64::MAX - 10, u64::MAX)).is_err());
    for k in 11..=pageframe_types::ORDER_LIMIT {
        let big = Order::new(k).unwrap();
        assert_eq!(
            m.alloc(NodeId::ZERO, Gfp::KERNEL, big),
            Err(AllocError::OrderTooLarge)
        );
        assert_eq!(
            raw(Pfn(4 * GIB), big),
            Err(pageframe::RawError {
                pfn: Pfn(4 * GIB),
                why: FreeError::OrderTooLarge
            })
        );
    }
    let huge_span = r(u64::MAX - 4096, u64::MAX);
    let m2 = machine_with(MachineConfig::SINGLE_NODE);
    assert_eq!(m2.zone_metadata_bytes(huge_span), 0);
    assert!(
        m2.add_zone(NodeId::ZERO, ZoneKind::Normal, huge_span, leak(1 << 20))
            .is_err()
    );
    for id in [8usize, 200, usize::MAX] {
        assert!(NodeId::new(id).is_none());
    }
    // Watermark arithmetic saturates instead of overflowing.
    for (share, managed, factor) in [
        (u64::MAX, u64::MAX, u32::MAX),
        (u64::MAX, 1, 1),
        (0, u64::MAX, 3000),
    ] {
        let w = pageframe::zone::Watermarks::compute(share, managed, factor);
        assert!(
            w.min <= w.low && w.low <= w.high && w.high <= w.promo,
            "{w:?}"
        );
    }
    // Orders beyond the largest any zone can have are not orders at all.
    assert!(Order::new(70).is_none() && Order::new(pageframe_types::ORDER_LIMIT + 1).is_none());
    assert_eq!(m.inspect().free_pages(), free);
    m.validate().unwrap();
}

/// Every entry point that takes a node, a CPU or a tunable refuses a value
/// outside the machine with a typed error (or an empty answer for a
/// report), and changes nothing.
#[test]
fn every_entry_point_refuses_what_is_not_in_the_machine() {
    let m = one_zone(4096);
    let free = m.inspect().free_pages();
    // Per-CPU set-up: no CPUs, too many, too little memory.
    assert!(m.pcp_bytes(0).is_err());
    assert!(m.pcp_bytes(u32::MAX).is_err());
    assert!(m.pcp_bytes(pageframe::pcp::MAX_CPUS as u32 + 1).is_err());
    assert!(m.enable_pcp(0, leak(0)).is_err());
    let need = m.pcp_bytes(2).unwrap();
    assert!(m.enable_pcp(2, leak(need - 1)).is_err(), "one byte short");
    assert_eq!(
        m.inspect().pcp_cpus(),
        0,
        "a refused set-up leaves no caches"
    );
    m.enable_pcp(2, leak(need)).unwrap();
    assert!(m.enable_pcp(2, leak(need)).is_err(), "twice");
    for f in [1u32, 7] {
        assert!(m.tunables().set_pcp_high_fraction(f).is_err());
    }
    let m: &Machine<'static> = m;
    // A node of the id space that the topology does not have.
    let absent = NodeId::new(5).unwrap();
    assert_eq!(
        m.alloc(absent, Gfp::KERNEL, Order::ZERO),
        Err(AllocError::NoSuchNode)
    );
    let mut hooks = Words::default();
    assert!(
        m.alloc_slow(absent, Gfp::KERNEL, Order::ZERO, &mut hooks)
            .is_err()
    );
    assert!(m.alloc_thp(absent, true, &mut hooks).is_err());
    assert!(m.cpu(CpuId(0), absent).is_err());
    assert!(m.inspect().node(absent).is_none());
    assert!(m.inspect().node_order(absent).is_empty());
    assert!(!m.wakeup_kcompactd(absent, Order::HUGE_2M, ZoneKind::Normal));
    assert_eq!(m.kcompactd_tick(absent, 0, &mut hooks), Default::default());
    assert!(m.compact_node(absent, &mut hooks).is_none());
    assert!(m.inspect().fragmentation_score(absent).is_none());
    assert_eq!(m.inspect().stats(absent), Default::default());
    // CPUs beyond those set up; a CPU whose handle is out.
    assert!(m.cpu(CpuId(2), NodeId::ZERO).is_err());
    assert!(m.cpu(CpuId(u32::MAX), NodeId::ZERO).is_err());
    let held = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    assert!(m.cpu(CpuId(0), NodeId::ZERO).is_err(), "one handle per CPU");
    drop(held);
    assert!(m.cpu(CpuId(0), NodeId::ZERO).is_ok(), "given back on drop");
    // A request no zone can serve: a GFP zone modifier combination that
    // names no zone.
    assert_eq!(
        m.alloc(NodeId::ZERO, Gfp::DMA | Gfp::DMA32, Order::ZERO),
        Err(AllocError::InvalidGfp)
    );
    assert_eq!(m.inspect().free_pages(), free);
    m.validate().unwrap();
}

/// Set-up before there is anything to set up gets a typed error a caller
/// can act on, not an `Ok` for nothing.
#[test]
fn per_cpu_caches_before_any_memory_are_refused() {
    let empty = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    assert_eq!(
        empty.pcp_bytes(2),
        Err(SetupError::Pcp(PcpSetupError::NoMemory)),
        "no zones"
    );
    assert!(empty.enable_pcp(2, leak(4096)).is_err());
    let no_ram = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB, 4 * GIB + 4096);
    no_ram
        .add_zone(
            NodeId::ZERO,
            ZoneKind::Normal,
            span,
            leak(no_ram.zone_metadata_bytes(span)),
        )
        .unwrap();
    assert_eq!(
        no_ram.pcp_bytes(2),
        Err(SetupError::Pcp(PcpSetupError::NoMemory)),
        "a zone without memory"
    );
    assert_eq!(
        no_ram.enable_pcp(2, leak(1 << 20)),
        Err(SetupError::Pcp(PcpSetupError::NoMemory))
    );
    assert_eq!(no_ram.inspect().pcp_cpus(), 0);
    // Once memory is handed over, the same calls work.
    no_ram.add_free_range(span).unwrap();
    let bytes = no_ram.pcp_bytes(2).unwrap();
    no_ram.enable_pcp(2, leak(bytes)).unwrap();
    assert_eq!(no_ram.inspect().pcp_cpus(), 2);
}

/// Tunables read back what was set, at the ends of their range.
#[test]
fn min_free_kbytes_reads_back_what_was_set() {
    let m = one_zone(4096);
    let computed = m.tunables().min_free_kbytes();
    assert!(computed > 0);
    for v in [0, 1, u64::MAX - 1, u64::MAX] {
        m.tunables().set_min_free_kbytes(v);
        assert_eq!(m.tunables().min_free_kbytes(), v);
    }
    // u64::MAX reserves everything: ordinary requests fail their mark.
    assert_eq!(
        m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO),
        Err(AllocError::OutOfMemory)
    );
    m.tunables().set_min_free_kbytes(0);
    assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).is_ok());
}

/// A contiguous request larger than the frame-number space is bad input,
/// refused before any search.
#[test]
fn contiguous_requests_beyond_the_frame_space_are_invalid() {
    let m = one_zone(4096);
    let free = m.inspect().free_pages();
    let mut w = Words::default();
    for (frames, align) in [
        (pageframe::zone::MAX_PFN + 1, 1),
        (u64::MAX, 1),
        (1, 1 << 63),
        (0, 1),
        (1, 3),
    ] {
        assert_eq!(
            m.alloc_contig(NodeId::ZERO, Gfp::KERNEL, frames, align, &mut w)
                .map(pageframe::Segment::into_raw),
            Err(pageframe::ContigError::Invalid),
            "{frames} frames aligned to {align}"
        );
    }
    // The whole frame space is a valid request: nothing that large exists.
    assert_eq!(
        m.alloc_contig(
            NodeId::ZERO,
            Gfp::KERNEL,
            pageframe::zone::MAX_PFN,
            1,
            &mut w
        )
        .map(pageframe::Segment::into_raw),
        Err(pageframe::ContigError::NotFound)
    );
    assert_eq!(m.inspect().free_pages(), free);
    m.validate().unwrap();
}
