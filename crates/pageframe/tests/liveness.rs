//! No CPU waits forever: drains of every CPU's caches from several CPUs at
//! once, contiguous allocations whose migrator drains, and reporting
//! passes, on machines with several zones, under a watchdog that fails the
//! test (naming the CPUs still waiting) when a call lasts over 10 s.

mod common;

use std::time::Duration;

use common::watchdog::Watchdog;
use common::*;
use pageframe::CpuId;
use pageframe::{
    Block, CpuCache, Gfp, Machine, Migrator, NodeId, Order, Pfn, ZoneKind,
    compact::{MigrateError, MigrateMode},
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const LIMIT: Duration = Duration::from_secs(10);

/// Two zones (DMA32 and Normal), each with per-CPU caches for `cpus`.
fn two_cached_zones(cpus: u32, frames: u64) -> &'static Machine<'static> {
    let m = two_zones(frames, frames);
    m.enable_pcp(cpus, leak(m.pcp_bytes(cpus).unwrap()))
        .unwrap();
    m
}

/// Frames in every CPU's caches are in the zones again: free + held =
/// managed, and the books check.
fn settled(m: &Machine<'static>, held: u64) {
    m.drain_pcp(None, |_| std::thread::yield_now());
    assert_eq!(
        m.inspect().free_pages() + held,
        m.inspect().managed_pages(),
        "frames lost"
    );
    m.validate().unwrap();
}

/// Two CPUs, each holding its handle, drain every cache of a two-zone
/// machine at the same moment, 10 000 times; each first puts a frame in its
/// cache of each zone, so every drain has work on both CPUs.
#[test]
fn two_cpus_draining_two_zones_at_once_finish() {
    let rounds = if cfg!(miri) { 20 } else { 10_000 };
    let m = two_cached_zones(2, 32 * PB);
    let dog = Watchdog::start(2, &["drain_pcp"], LIMIT);
    let barrier = dog.barrier(2);
    std::thread::scope(|s| {
        for cpu in 0..2u32 {
            let (dog, barrier) = (&dog, &barrier);
            s.spawn(move || {
                let _watched = dog.worker(cpu as usize);
                let mut c = m.cpu(CpuId(cpu), NodeId::ZERO).unwrap();
                for _ in 0..rounds {
                    for gfp in [Gfp::KERNEL | Gfp::DMA32, Gfp::KERNEL] {
                        let a = c.alloc(gfp, Order::ZERO).unwrap();
                        c.free(a).unwrap();
                    }
                    barrier.wait(|| c.poll());
                    dog.call(cpu as usize, 0, || {
                        m.drain_pcp(Some(&mut c), |_| std::thread::yield_now())
                    });
                    for kind in [ZoneKind::Dma32, ZoneKind::Normal] {
                        assert_eq!(c.cache_info(NodeId::ZERO, kind).unwrap().count, 0);
                    }
                }
            });
        }
        dog.joining();
    });
    dog.stop();
    settled(m, 0);
}

/// A migrator over nothing (the blocks it moves are the test's, by
/// number) whose `drain_caches` drains every CPU's caches with its own
/// CPU's handle, as a kernel's would.
struct Draining<'c, 'm> {
    cpu: &'c mut CpuCache<'m, 'static>,
    drains: u64,
}

impl Migrator for Draining<'_, '_> {
    // Nothing here keeps movable blocks: nothing moves, so only free memory
    // and cached frames (after the drain) make a range.
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<Block> {
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }
    fn putback(&mut self, b: Block) {
        unreachable!("{b:?} was never handed over")
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        unreachable!("{b:?} was never handed over")
    }

    fn drain_caches(&mut self) {
        self.drains += 1;
        let m = self.cpu.machine();
        m.drain_pcp(Some(self.cpu), |_| std::thread::yield_now());
    }
}

const CALLS: &[&str] = &[
    "alloc",
    "free",
    "drain_pcp",
    "alloc_contig (draining)",
    "report_free_pages",
    "tick",
];

/// Four CPUs (on two cores) allocate and free through their caches of
/// three zones, drain everyone's caches, take contiguous ranges whose
/// migrator drains, and run reporting passes whose callback allocates and
/// frees, all at once; no call may last over 10 s, and at the end every
/// frame is back.
#[test]
fn drains_contiguous_ranges_and_reporting_on_several_zones_end() {
    let m = numa(2, 16);
    // Node 0 gets a DMA32 zone too: three zones with caches.
    let cpus = 4u32;
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Dma32,
        r(256, 256 + 16 * PB),
        r(256, 256 + 16 * PB),
    );
    m.enable_pcp(cpus, leak(m.pcp_bytes(cpus).unwrap()))
        .unwrap();
    let m: &'static Machine<'static> = m;
    let steps = if cfg!(miri) { 50 } else { 4000 };
    let dog = Watchdog::start(cpus as usize, CALLS, LIMIT);
    let barrier = dog.barrier(cpus as usize);
    let contig = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for cpu in 0..cpus {
            let (dog, barrier, contig) = (&dog, &barrier, &contig);
            s.spawn(move || {
                let i = cpu as usize;
                let _watched = dog.worker(i);
                // Others may already be draining: `claim_cpu` retries.
                let mut c = claim_cpu(m, cpu, n(i % 2));
                let mut rng = SmallRng::seed_from_u64(0x11fe + u64::from(cpu));
                let mut held: Vec<Block> = Vec::new();
                let gfps = [Gfp::KERNEL, Gfp::KERNEL | Gfp::DMA32, Gfp::HIGHUSER_MOVABLE];
                for _ in 0..steps {
                    match rng.gen_range(0..100) {
                        0..=39 => {
                            let gfp = gfps[rng.gen_range(0..gfps.len())];
                            let o = Order::new(rng.gen_range(0..4)).unwrap();
                            if let Ok(a) = dog.call(i, 0, || c.alloc(gfp, o)) {
                                held.push(a);
                            }
                        }
                        40..=79 if !held.is_empty() => {
                            let b = held.swap_remove(rng.gen_range(0..held.len()));
                            dog.call(i, 1, || c.free(b)).unwrap();
                        }
                        80..=87 => dog.call(i, 2, || {
                            m.drain_pcp(Some(&mut c), |_| std::thread::yield_now())
                        }),
                        88..=93 => {
                            let frames = rng.gen_range(1..=600);
                            let node = n(rng.gen_range(0..2));
                            let mut mig = Draining {
                                cpu: &mut c,
                                drains: 0,
                            };
                            let r = dog.call(i, 3, || {
                                m.alloc_contig(node, Gfp::KERNEL, frames, 1, &mut mig)
                            });
                            if let Ok(a) = r {
                                contig.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                m.free_segment(a).unwrap();
                            }
                        }
                        94..=97 => {
                            let min = Order::new(rng.gen_range(0..10)).unwrap();
                            let mut got = Vec::new();
                            dog.call(i, 4, || {
                                m.report_free_pages(min, |_| {
                                    // Traffic in the callback: a balloon
                                    // driver allocating and handing back.
                                    if let Ok(a) = m.alloc(n(i % 2), Gfp::KERNEL, Order::ZERO) {
                                        got.push(a);
                                    }
                                    if got.len() > 1 {
                                        m.free(got.swap_remove(0)).unwrap();
                                    }
                                    true
                                })
                            });
                            for b in got {
                                m.free(b).unwrap();
                            }
                        }
                        _ => dog.call(i, 5, || c.tick()),
                    }
                }
                for b in held.drain(..) {
                    c.free(b).unwrap();
                }
                // Everyone done before anyone drops its handle: a drain
                // still running elsewhere is served meanwhile.
                barrier.wait(|| c.poll());
            });
        }
        dog.joining();
    });
    dog.stop();
    assert!(contig.load(std::sync::atomic::Ordering::Relaxed) > 0);
    settled(m, 0);
}
