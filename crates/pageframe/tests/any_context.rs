//! Allocation from any context (`Machine::try_alloc`): with a lock held by
//! the caller's own CPU (the code an NMI interrupted: the zone's lock, the
//! CPU's cache), by another CPU, or with a drain pending on the cache, the
//! call fails at once or takes another source, and changes nothing it
//! does not hand out; under contention every block has one owner. A call
//! that waited would spin forever on a lock its own thread holds: each
//! such call runs under a watchdog that fails the test instead.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::time::Duration;

use common::watchdog::Watchdog;
use common::*;
use pageframe::debug::fail::FailConfig;
use pageframe::debug::{Event, Hooks, PAGE_POISON, Poisoning};
use pageframe::pcp::CacheInfo;
use pageframe::zone::Zone;
use pageframe::{
    AllocError, Block, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, PAGE_SIZE, Pfn, PfnRange,
    PhysAddr, ZoneKind,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const LIMIT: Duration = Duration::from_secs(10);
const O0: Order = Order::ZERO;
/// The usual request from any context: unmovable, Normal zone.
const ANY: Gfp = Gfp::empty();
const CPU0: CpuId = CpuId(0);

/// One Normal zone of 16 pageblocks at 4 GiB, all free, with per-CPU
/// caches for `cpus` CPUs.
fn cached(cpus: u32) -> &'static Machine<'static> {
    let m = one_zone(16 * PB);
    m.enable_pcp(cpus, leak(m.pcp_bytes(cpus).unwrap()))
        .unwrap();
    m
}

fn normal<'m>(m: &'m Machine<'static>) -> &'m Zone<'static> {
    m.inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap()
}

/// CPU `cpu`'s cache of the Normal zone, read without honouring its
/// requests (claiming a handle does not poll).
fn info(m: &Machine<'static>, cpu: u32) -> CacheInfo {
    m.cpu(CpuId(cpu), NodeId::ZERO)
        .unwrap()
        .cache_info(NodeId::ZERO, ZoneKind::Normal)
        .unwrap()
}

/// `f`, a call that must not wait, under a watchdog: if it spins on a lock
/// the test's own thread holds, the process fails instead of hanging.
fn at_once<T>(f: impl FnOnce() -> T) -> T {
    let dog = Watchdog::start(0, &["a call that must not wait"], LIMIT);
    let r = dog.call(0, 0, f);
    dog.stop();
    r
}

/// Every frame is back (caches drained), and the books check.
fn settled(m: &Machine<'static>) {
    m.drain_pcp(None, |_| std::thread::yield_now());
    m.drain_stripes();
    assert_eq!(
        m.inspect().free_pages(),
        m.inspect().managed_pages(),
        "frames lost"
    );
    m.validate().unwrap();
}

/// The NMI case: the code it interrupted holds the zone's lock on this
/// CPU. With CPU 0's cache empty and no stripe holding frames, nothing can
/// serve without that lock: `Busy` at once, for every order, and nothing
/// changed; once the lock is free, the cache refills.
#[test]
fn with_the_zone_lock_held_by_its_own_cpu_it_fails_at_once() {
    let m = cached(2);
    let z = normal(m);
    let (free, cache) = (m.inspect().free_pages(), info(m, 0));
    assert_eq!((cache.count, m.inspect().stripe_frames()), (0, 0));
    for k in [0, 3, 5] {
        let r = z.inspect(|_| at_once(|| m.try_alloc(CPU0, NodeId::ZERO, ANY, o(k))));
        assert_eq!(r.unwrap_err(), AllocError::Busy, "order {k}");
    }
    assert_eq!((m.inspect().free_pages(), info(m, 0)), (free, cache));
    m.validate().unwrap();
    let b = m.try_alloc(CPU0, NodeId::ZERO, ANY, O0).unwrap();
    let after = info(m, 0);
    assert_eq!(after.stats.refills, cache.stats.refills + 1);
    assert!(after.count > 0);
    m.free(b).unwrap();
    settled(m);
}

/// The code it interrupted holds CPU 0's cache (its handle, mid-call): the
/// call leaves that cache alone and takes the zone's free lists; with the
/// zone's lock held as well, `Busy`.
#[test]
fn with_its_cpus_cache_claimed_it_takes_the_zone() {
    let m = cached(2);
    let z = normal(m);
    let mut c = m.cpu(CPU0, NodeId::ZERO).unwrap();
    let b = c.alloc(ANY, O0).unwrap();
    c.free(b).unwrap();
    let held = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
    assert!(held.count > 0);
    assert_eq!(m.inspect().stripe_frames(), 0);
    let free = m.inspect().free_pages();
    let got = at_once(|| m.try_alloc(CPU0, NodeId::ZERO, ANY, O0)).unwrap();
    assert_eq!(m.inspect().free_pages(), free - 1, "from the zone");
    assert_eq!(
        c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap(),
        held,
        "the claimed cache is untouched"
    );
    let r = z.inspect(|_| at_once(|| m.try_alloc(CPU0, NodeId::ZERO, ANY, O0)));
    assert_eq!(r.unwrap_err(), AllocError::Busy);
    assert_eq!(m.inspect().free_pages(), free - 1);
    m.free(got).unwrap();
    drop(c);
    settled(m);
}

/// A stripe's reservation serves order 0 with the zone's lock held (the
/// stripe's own lock is free); order 1 needs the zone: `Busy`.
#[test]
fn a_stripe_serves_while_the_zone_lock_is_held() {
    let m: &'static Machine<'static> = one_zone(16 * PB);
    let z = normal(m);
    // An ordinary order-0 allocation reserves a chunk for a stripe.
    let first = m.alloc(NodeId::ZERO, Gfp::MOVABLE, O0).unwrap();
    let striped = m.inspect().stripe_frames();
    assert!(striped > 0);
    let (got, high) = z.inspect(|_| {
        at_once(|| {
            (
                m.try_alloc(CPU0, NodeId::ZERO, Gfp::MOVABLE, O0),
                m.try_alloc(CPU0, NodeId::ZERO, Gfp::MOVABLE, o(1)),
            )
        })
    });
    let got = got.unwrap();
    assert_eq!(high.unwrap_err(), AllocError::Busy);
    assert_eq!(m.inspect().stripe_frames(), striped - 1);
    assert_eq!(got.pfn(), first.pfn() + 1, "the stripe's next frame");
    m.free(got).unwrap();
    m.free(first).unwrap();
    settled(m);
}

/// Another CPU holds the zone's lock: with CPU 1's cache empty the call
/// is `Busy` and the cache unchanged; with frames in it, a hit needs no
/// lock and is served.
#[test]
fn with_the_zone_lock_held_by_another_cpu_only_a_hit_is_served() {
    let m = cached(2);
    let z = normal(m);
    // Read while the lock is free (counting takes it).
    let free = m.inspect().free_pages();
    let dog = Watchdog::start(1, &["holding the zone lock"], LIMIT);
    let (holding, release) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            let _watched = dog.worker(0);
            dog.call(0, 0, || {
                z.inspect(|_| {
                    holding.store(true, Relaxed);
                    while !release.load(Relaxed) && !dog.died() {
                        std::thread::yield_now();
                    }
                })
            });
        });
        while !holding.load(Relaxed) {
            std::thread::yield_now();
        }
        let empty = info(m, 1);
        assert_eq!(empty.count, 0);
        let r = m.try_alloc(CpuId(1), NodeId::ZERO, ANY, O0);
        assert_eq!(r.unwrap_err(), AllocError::Busy);
        assert_eq!(info(m, 1), empty);
        release.store(true, Relaxed);
        dog.joining();
    });
    dog.stop();
    assert_eq!(m.inspect().free_pages(), free);
    // Frames in CPU 1's cache now; the other CPU takes the lock again.
    let b = m.alloc_on(CpuId(1), NodeId::ZERO, ANY, O0).unwrap();
    m.free_on(CpuId(1), b).unwrap();
    let cache = info(m, 1);
    assert!(cache.count > 1);
    let got = z.inspect(|_| m.try_alloc(CpuId(1), NodeId::ZERO, ANY, O0).unwrap());
    let after = info(m, 1);
    assert_eq!(after.count, cache.count - 1);
    assert_eq!(after.stats.local_hits, cache.stats.local_hits + 1);
    m.free(got).unwrap();
    settled(m);
}

/// A drain of every cache asks CPU 0's owner to empty its cache; the owner
/// lets its handle go without honouring it, and before the drainer takes
/// the cache over, the call runs on CPU 0. It must not honour the request
/// (a spill takes the zone lock) nor use the cache: the cache is as the
/// owner left it, the call is served from the zone, and the drain then
/// empties the cache.
#[test]
fn a_cache_with_a_drain_pending_is_left_alone() {
    let m = cached(2);
    let dog = Watchdog::start(1, &["try_alloc", "drain_pcp"], LIMIT);
    let (ready_tx, ready_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let dog = &dog;
        let owner = s.spawn(move || {
            let _watched = dog.worker(0);
            let mut c = m.cpu(CPU0, NodeId::ZERO).unwrap();
            let b = c.alloc(ANY, O0).unwrap();
            c.free(b).unwrap();
            let left = c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap();
            assert!(left.count > 0);
            ready_tx.send(()).unwrap();
            // The drain's request is posted (the drainer waits for us).
            go_rx.recv().unwrap();
            drop(c);
            let free = m.inspect().free_pages();
            let got = dog.call(0, 0, || m.try_alloc(CPU0, NodeId::ZERO, ANY, O0));
            assert_eq!(m.inspect().free_pages(), free - 1, "from the zone");
            assert_eq!(info(m, 0), left, "the cache is as its owner left it");
            done_tx.send(()).unwrap();
            got.unwrap()
        });
        ready_rx.recv().unwrap();
        let mut kicked = false;
        dog.call(1, 1, || {
            m.drain_pcp(None, |cpu| {
                if cpu == CPU0 && !kicked {
                    kicked = true;
                    go_tx.send(()).unwrap();
                    done_rx.recv().unwrap();
                }
                std::thread::yield_now();
            })
        });
        assert!(kicked, "the drain waited for CPU 0's owner");
        assert_eq!(info(m, 0).count, 0, "the drain emptied the cache");
        dog.joining();
        m.free(owner.join().unwrap()).unwrap();
    });
    dog.stop();
    settled(m);
}

/// Flags that ask for sleeping, reclaim, reserves or retries are refused,
/// alone and in the usual combinations; the others are served.
#[test]
fn flags_it_never_honours_are_refused() {
    let m = cached(2);
    let free = m.inspect().free_pages();
    for gfp in [
        Gfp::DIRECT_RECLAIM,
        Gfp::KSWAPD_RECLAIM,
        Gfp::IO,
        Gfp::FS,
        Gfp::HIGH,
        Gfp::MEMALLOC,
        Gfp::NOFAIL,
        Gfp::RETRY_MAYFAIL,
        Gfp::NORETRY,
        Gfp::KERNEL,
        Gfp::ATOMIC,
        Gfp::NOWAIT,
        Gfp::HIGHUSER_MOVABLE,
        Gfp::TRANSHUGE_LIGHT,
        // Valid bits, invalid together.
        Gfp::MOVABLE | Gfp::RECLAIMABLE,
        Gfp::DMA | Gfp::DMA32,
    ] {
        let r = m.try_alloc(CPU0, NodeId::ZERO, gfp, O0);
        assert_eq!(r.unwrap_err(), AllocError::InvalidGfp, "{gfp:?}");
    }
    assert_eq!(m.inspect().free_pages(), free);
    for gfp in [
        Gfp::empty(),
        Gfp::MOVABLE,
        Gfp::RECLAIMABLE,
        Gfp::HIGHMEM | Gfp::MOVABLE,
        Gfp::THISNODE | Gfp::HARDWALL,
        Gfp::NOWARN | Gfp::ZERO | Gfp::COMP | Gfp::NOMEMALLOC,
    ] {
        let b = m.try_alloc(CPU0, NodeId::ZERO, gfp, o(2)).unwrap();
        m.free(b).unwrap();
    }
    // A CPU without a cache, a node without memory in the topology.
    let b = m.try_alloc(CpuId(7), NodeId::ZERO, ANY, O0).unwrap();
    m.free(b).unwrap();
    assert_eq!(
        m.try_alloc(CPU0, n(3), ANY, O0).unwrap_err(),
        AllocError::NoSuchNode
    );
    settled(m);
}

/// Fault injection, the counters and the owner records work as for every
/// allocation.
#[test]
fn fault_injection_counters_and_owners_see_it() {
    let m = cached(2);
    m.inspect().fail_page_alloc().set(FailConfig::ALWAYS);
    let r = m.try_alloc(CPU0, NodeId::ZERO, ANY, O0);
    m.inspect().fail_page_alloc().disable();
    assert_eq!(r.unwrap_err(), AllocError::OutOfMemory);
    assert_eq!(m.inspect().fail_page_alloc().injected(), 1);
    let before = m.inspect().vmstat();
    assert_eq!(before.alloc_fail, 1);
    // A refill of CPU 0's cache, then a hit.
    let a = m.try_alloc(CPU0, NodeId::ZERO, ANY, O0).unwrap();
    let b = m.try_alloc(CPU0, NodeId::ZERO, ANY, O0).unwrap();
    let v = m.inspect().vmstat();
    let normal = ZoneKind::Normal.index();
    assert_eq!(v.pgalloc[normal][0], before.pgalloc[normal][0] + 2);
    assert_eq!(v.pcp_refill, before.pcp_refill + 1);
    assert_eq!(v.pcp_hit, before.pcp_hit + 1);
    let owner = m.inspect().owner_of(b.pfn()).unwrap();
    assert!(owner.live);
    assert_eq!(owner.owner.site.unwrap().file(), file!());
    m.free(a).unwrap();
    m.free(b).unwrap();
    settled(m);
}

/// A zone's memory byte by byte, and how many events the hooks saw.
struct Memory {
    bytes: std::sync::Mutex<Vec<u8>>,
    events: AtomicU64,
    allocs: AtomicU64,
}

const BASE: u64 = 1 << 20;
const FRAMES: u64 = 4096;

impl Memory {
    fn at(p: Pfn) -> usize {
        ((p.get() - BASE) * PAGE_SIZE) as usize
    }
}

impl Hooks for Memory {
    fn event(&self, e: &Event) {
        self.events.fetch_add(1, Relaxed);
        if let Event::Alloc { .. } = e {
            self.allocs.fetch_add(1, Relaxed);
        }
    }
    fn poisoning(&self) -> Poisoning {
        Poisoning::POISON | Poisoning::INIT_ON_ALLOC
    }
    fn fill(&self, f: PfnRange, byte: u8) {
        self.bytes.lock().unwrap()[Self::at(f.start)..Self::at(f.end)].fill(byte);
    }
    fn check(&self, f: PfnRange, byte: u8) -> Option<PhysAddr> {
        let b = self.bytes.lock().unwrap();
        let start = Self::at(f.start);
        let i = b[start..Self::at(f.end)].iter().position(|&x| x != byte)?;
        Some(PhysAddr::new(BASE * PAGE_SIZE + (start + i) as u64))
    }
}

/// Poisoning: the block is checked and initialised through `check` and
/// `fill`; a write after the free is counted, but no hook's `event` runs
/// for the call, refills included (the kernel's event code may take
/// locks).
#[test]
fn poisoning_applies_and_no_event_is_raised() {
    let m = Box::leak(
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE)
            .hooks(Memory {
                bytes: std::sync::Mutex::new(vec![0x5a; (FRAMES * PAGE_SIZE) as usize]),
                events: AtomicU64::new(0),
                allocs: AtomicU64::new(0),
            })
            .build_boxed(),
    );
    let span = r(BASE, BASE + FRAMES);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    m.enable_pcp(1, leak(m.pcp_bytes(1).unwrap())).unwrap();
    let m: &'static _ = m;
    // A block through CPU 0's cache, freed back to it, then written.
    let b = m.alloc_on(CPU0, NodeId::ZERO, ANY, O0).unwrap();
    assert_eq!(
        m.inspect().hooks().allocs.load(Relaxed),
        1,
        "the hooks see events"
    );
    let at = Memory::at(b.pfn());
    m.free_on(CPU0, b).unwrap();
    assert_eq!(m.inspect().hooks().bytes.lock().unwrap()[at], PAGE_POISON);
    m.inspect().hooks().bytes.lock().unwrap()[at + 8] = 1;
    let events = m.inspect().hooks().events.load(Relaxed);
    let again = m.try_alloc(CPU0, NodeId::ZERO, ANY, O0).unwrap();
    assert_eq!(Memory::at(again.pfn()), at, "the cache's lowest frame");
    assert_eq!(m.inspect().use_after_free_reports(), 1);
    let page = m.inspect().hooks().bytes.lock().unwrap()[at..at + PAGE_SIZE as usize].to_vec();
    assert!(page.iter().all(|&x| x == 0), "initialised on allocation");
    // Frames from a refill, and a failure: no event either.
    let mut more: Vec<Block> = (0..100)
        .map(|_| m.try_alloc(CPU0, NodeId::ZERO, ANY, O0).unwrap())
        .collect();
    assert_eq!(
        m.try_alloc(CPU0, NodeId::ZERO, ANY, o(12)).unwrap_err(),
        AllocError::OrderTooLarge
    );
    assert_eq!(m.inspect().hooks().events.load(Relaxed), events);
    more.push(again);
    for b in more {
        m.free(b).unwrap();
    }
    assert_eq!(m.inspect().use_after_free_reports(), 1);
}

const CALLS: &[&str] = &[
    "try_alloc",
    "alloc_on",
    "free",
    "holding the zone lock",
    "drain_pcp",
];

/// Four CPUs (on two cores) allocate from any context, through their
/// caches and the zone, free, hold the zone's lock and drain every cache,
/// all at once, checking at each step that no frame has two owners; no
/// call may last over 10 s, and at the end every frame is back.
#[test]
fn under_contention_every_frame_has_one_owner() {
    let cpus = 4u32;
    let m = cached(cpus);
    let z = normal(m);
    let span = z.span();
    let owned: Vec<AtomicBool> = (0..span.len()).map(|_| AtomicBool::new(false)).collect();
    let take = |b: &Block| {
        for p in b.pfn().get()..b.pfn().get() + b.order().pages() {
            let i = (p - span.start.get()) as usize;
            assert!(!owned[i].swap(true, Relaxed), "frame {p} has two owners");
        }
    };
    let give = |b: &Block| {
        for p in b.pfn().get()..b.pfn().get() + b.order().pages() {
            owned[(p - span.start.get()) as usize].store(false, Relaxed);
        }
    };
    let steps = if cfg!(miri) { 100 } else { 20_000 };
    let (served, busy) = (AtomicU64::new(0), AtomicU64::new(0));
    let dog = Watchdog::start(cpus as usize, CALLS, LIMIT);
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (dog, take, give, served, busy) = (&dog, &take, &give, &served, &busy);
            s.spawn(move || {
                let _watched = dog.worker(cpu as usize);
                let i = cpu as usize;
                let mut rng = SmallRng::seed_from_u64(u64::from(cpu));
                let mut held: Vec<Block> = Vec::new();
                for step in 0..steps {
                    let order = o(*[0, 0, 0, 1, 3, 5].get(rng.gen_range(0..6)).unwrap());
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let gfp = [ANY, Gfp::MOVABLE][rng.gen_range(0..2)];
                            match dog
                                .call(i, 0, || m.try_alloc(CpuId(cpu), NodeId::ZERO, gfp, order))
                            {
                                Ok(b) => {
                                    take(&b);
                                    served.fetch_add(1, Relaxed);
                                    held.push(b);
                                }
                                Err(AllocError::Busy) => {
                                    busy.fetch_add(1, Relaxed);
                                }
                                Err(e) => assert_eq!(e, AllocError::OutOfMemory),
                            }
                        }
                        4..=5 => {
                            let r = dog.call(i, 1, || {
                                m.alloc_on(CpuId(cpu), NodeId::ZERO, Gfp::KERNEL, order)
                            });
                            if let Ok(b) = r {
                                take(&b);
                                held.push(b);
                            }
                        }
                        6..=7 => {
                            if !held.is_empty() {
                                let b = held.swap_remove(rng.gen_range(0..held.len()));
                                give(&b);
                                dog.call(i, 2, || match step % 2 {
                                    0 => m.free_on(CpuId(cpu), b),
                                    _ => m.free(b),
                                })
                                .unwrap();
                            }
                        }
                        8 => dog.call(i, 3, || {
                            z.inspect(|_| {
                                for _ in 0..rng.gen_range(0..200) {
                                    std::hint::spin_loop();
                                }
                            })
                        }),
                        _ => {
                            if step % 50 == 0 {
                                dog.call(i, 4, || m.drain_pcp(None, |_| std::thread::yield_now()));
                            }
                        }
                    }
                }
                for b in held {
                    give(&b);
                    m.free(b).unwrap();
                }
            });
        }
        dog.joining();
    });
    dog.stop();
    assert!(served.load(Relaxed) > 0);
    std::println!(
        "any-context calls served {}, busy {}",
        served.load(Relaxed),
        busy.load(Relaxed)
    );
    settled(m);
}
