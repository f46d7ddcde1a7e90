//! Per-CPU page cache (pageframe-pcp) against the zone path without a PCP
//! and `buddy_system_allocator`, all over the same buddy zone size, in one
//! run. Also prints the two-thread auto-tuning report (share of allocations
//! that reach the zone, zone-lock acquisitions per 1000 operations, idle
//! decay of `high`). Run: `cargo bench -p pageframe-benches --bench pcp`.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use pageframe_buddy::{BuddyConfig, BuddyZone, ListId, PfnRange, SingleList};
use pageframe_pcp::{
    CpuId, MigrateType, Order, PcpConfig, PcpSet, PcpSizing, PcpSlot, PcpZone, PerCpuPages, Pfn,
    RefillSink, Slot, SpillBatch, ZoneGeometry,
};

/// 1 GiB of 4 KiB frames: batch 63, high_max 16384 per CPU with 2 CPUs.
const PAGES: u64 = 1 << 18;
/// A plausible low watermark for a 1 GiB zone (min ~1024 pages + gap).
const LOW_WMARK: u64 = 1286;
const O0: Order = Order::ZERO;
const MT: MigrateType = MigrateType::Movable;

/// A buddy zone behind a mutex: the zone lock the PCP batches against.
struct BuddyBackend {
    zone: Mutex<BuddyZone<'static>>,
}

fn list0() -> ListId {
    ListId::new(0).expect("list 0")
}

impl BuddyBackend {
    fn new(pages: u64) -> &'static BuddyBackend {
        let span = PfnRange::new(Pfn::new(0), Pfn::new(pages));
        let cfg = BuddyConfig::default();
        let bytes = BuddyZone::<'static, SingleList>::metadata_bytes(span, cfg);
        let meta: &'static mut [MaybeUninit<u8>] =
            Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice());
        let mut zone = BuddyZone::new(span, cfg, meta, SingleList).expect("zone");
        zone.add_free_range(span).expect("free range");
        Box::leak(Box::new(BuddyBackend {
            zone: Mutex::new(zone),
        }))
    }

    /// The zone path without a PCP: one lock acquisition per block.
    #[inline]
    fn alloc(&self, o: Order) -> Option<u64> {
        let mut z = self.zone.lock().unwrap();
        z.alloc(o, list0()).ok().map(|p| p.get())
    }

    #[inline]
    fn free(&self, f: u64, o: Order) {
        let mut z = self.zone.lock().unwrap();
        let _ = z.free(Pfn::new(f), o);
    }
}

impl PcpZone for BuddyBackend {
    fn refill(&self, order: Order, _mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        let mut z = self.zone.lock().unwrap();
        while sink.remaining() > 0 {
            let Ok(p) = z.alloc(order, list0()) else {
                break;
            };
            if let Err(back) = sink.push(p) {
                let _ = z.free(back, order);
                break;
            }
        }
    }

    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let mut z = self.zone.lock().unwrap();
        for (f, o) in batch {
            let _ = z.free(f, o);
        }
    }
}

fn sizing(cpus: u32) -> PcpSizing {
    PcpSizing::for_zone(ZoneGeometry {
        managed_pages: PAGES,
        low_wmark: LOW_WMARK,
        page_size: 4096,
        local_cpus: cpus,
        high_fraction: 0,
    })
    .expect("sizing")
}

fn pcp_set(cpus: usize, s: PcpSizing) -> &'static PcpSet<'static, 'static> {
    let slots: Vec<PcpSlot<'static>> = (0..cpus)
        .map(|_| {
            let mem: &'static mut [Slot] =
                Box::leak(vec![Slot::EMPTY; s.suggested_slots()].into_boxed_slice());
            PcpSlot::new(PerCpuPages::new(mem, s, PcpConfig::X86_64).expect("cache"))
        })
        .collect();
    let slots: &'static [PcpSlot<'static>] = Box::leak(slots.into_boxed_slice());
    Box::leak(Box::new(PcpSet::new(slots)))
}

fn peer(pages: u64) -> buddy_system_allocator::FrameAllocator<32> {
    let mut a = buddy_system_allocator::FrameAllocator::<32>::new();
    a.add_frame(0, pages as usize);
    a
}

fn order0_pair(c: &mut Criterion) {
    let zone = BuddyBackend::new(PAGES);
    let set = pcp_set(2, sizing(2));
    let mut local = set.claim(CpuId(0)).unwrap();
    let mut g = c.benchmark_group("pcp/order0_alloc_free_pair");
    g.throughput(Throughput::Elements(2)); // one alloc + one free
    g.bench_function("pcp", |b| {
        b.iter(|| {
            let f = local.alloc(zone, O0, MT).unwrap();
            local.free(zone, black_box(f), O0, MT).unwrap();
        })
    });
    g.bench_function("zone_no_pcp", |b| {
        b.iter(|| {
            let f = zone.alloc(O0).unwrap();
            zone.free(black_box(f), O0);
        })
    });
    let mut bsa = peer(PAGES);
    g.bench_function("buddy_system_allocator", |b| {
        b.iter(|| {
            let f = bsa.alloc(1).unwrap();
            bsa.dealloc(black_box(f), 1);
        })
    });
    let mut stack: Vec<u64> = (0..1024).collect();
    g.bench_function("percpu_stack_floor", |b| {
        b.iter(|| {
            let f = stack.pop().unwrap();
            stack.push(black_box(f));
        })
    });
    g.finish();
}

fn batches(c: &mut Criterion) {
    let zone = BuddyBackend::new(PAGES);
    let s = sizing(2);
    let set = pcp_set(2, s);
    let mut local = set.claim(CpuId(0)).unwrap();
    let mut bsa = peer(PAGES);
    let mut g = c.benchmark_group("pcp/batch_alloc_then_free");
    let mut buf = vec![Pfn(0); 4096];
    let mut raw = vec![0u64; 4096];
    for n in [1usize, 16, 256, 1024, 4096] {
        g.throughput(Throughput::Elements(n as u64)); // per page: its alloc + its free
        // Warm up so `high` has grown for this batch size.
        for _ in 0..8 {
            local.alloc_bulk(zone, O0, MT, &mut buf[..n]).unwrap();
            local.free_bulk(zone, &buf[..n], O0, MT).unwrap();
        }
        g.bench_with_input(BenchmarkId::new("pcp_bulk", n), &n, |b, &n| {
            b.iter(|| {
                let got = local.alloc_bulk(zone, O0, MT, &mut buf[..n]).unwrap();
                local.free_bulk(zone, &buf[..got], O0, MT).unwrap();
            })
        });
        // The bulk allocation alone (the frees run untimed between samples).
        g.bench_with_input(BenchmarkId::new("pcp_alloc_bulk_only", n), &n, |b, &n| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let got = local.alloc_bulk(zone, O0, MT, &mut buf[..n]).unwrap();
                    total += t.elapsed();
                    local.free_bulk(zone, &buf[..got], O0, MT).unwrap();
                }
                total
            })
        });
        g.bench_with_input(BenchmarkId::new("pcp_single", n), &n, |b, &n| {
            b.iter(|| {
                for slot in buf[..n].iter_mut() {
                    *slot = local.alloc(zone, O0, MT).unwrap();
                }
                for &f in &buf[..n] {
                    local.free(zone, f, O0, MT).unwrap();
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("zone_no_pcp", n), &n, |b, &n| {
            b.iter(|| {
                for slot in raw[..n].iter_mut() {
                    *slot = zone.alloc(O0).unwrap();
                }
                for &f in &raw[..n] {
                    zone.free(f, O0);
                }
            })
        });
        g.bench_with_input(
            BenchmarkId::new("buddy_system_allocator", n),
            &n,
            |b, &n| {
                b.iter(|| {
                    for slot in raw[..n].iter_mut() {
                        *slot = bsa.alloc(1).unwrap() as u64;
                    }
                    for &f in &raw[..n] {
                        bsa.dealloc(f as usize, 1);
                    }
                })
            },
        );
    }
    g.finish();
    println!(
        "pcp sizing for the batch runs: batch {} high_min {} high_max {}; high after: {}",
        s.batch(),
        s.high_min(),
        s.high_max(),
        local.high()
    );
}

/// What one two-thread run measured.
struct TwoThread {
    allocs: u64,
    reached_zone: u64,
    refilled_pages: u64,
    zone_locks: u64,
    ops: u64,
    ns_per_op: f64,
    high_series: Vec<(u32, u32)>,
    idle: Vec<(u32, u32, u32)>,
    high_min: u32,
}

/// CPU 0 allocates bursts of `burst` frames, CPU 1 frees them. Warm-up is
/// the first tenth of the rounds; counters are deltas after it. Then CPU 1
/// idles and runs the 1 s decay step `ticks` times.
fn two_threads(burst: usize, total: usize, s: PcpSizing) -> TwoThread {
    let zone = BuddyBackend::new(PAGES);
    let set = pcp_set(2, s);
    let rounds = (total / burst).max(20);
    let warm = rounds / 10;
    let (tx, rx) = mpsc::sync_channel::<Vec<Pfn>>(2);
    let (back_tx, back_rx) = mpsc::channel::<Vec<Pfn>>();
    let start = Instant::now();
    let (a, b) = thread::scope(|sc| {
        let producer = sc.spawn(move || {
            let mut cpu = set.claim(CpuId(0)).unwrap();
            let mut base = cpu.stats();
            let mut series = Vec::new();
            let mut t0 = Instant::now();
            for r in 0..rounds {
                if r == warm {
                    base = cpu.stats();
                    t0 = Instant::now();
                }
                let mut v = back_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(burst));
                v.clear();
                for _ in 0..burst {
                    v.push(cpu.alloc(zone, O0, MT).expect("zone has room"));
                }
                if r % (rounds / 50).max(1) == 0 {
                    series.push((r as u32, cpu.high()));
                }
                tx.send(v).unwrap();
            }
            drop(tx);
            (cpu.stats(), base, series, t0.elapsed())
        });
        let consumer = sc.spawn(move || {
            let mut cpu = set.claim(CpuId(1)).unwrap();
            let mut base = cpu.stats();
            let mut r = 0;
            let mut series = Vec::new();
            let every = (rounds / 50).max(1);
            while let Ok(v) = rx.recv() {
                if r == warm {
                    base = cpu.stats();
                }
                for &f in &v {
                    cpu.free(zone, f, O0, MT).unwrap();
                }
                if r % every == 0 {
                    series.push(cpu.high());
                }
                r += 1;
                let _ = back_tx.send(v);
            }
            // Idle: only the periodic decay runs.
            let mut idle = vec![(0, cpu.count(), cpu.high())];
            for tick in 1..=40u32 {
                cpu.decay(zone);
                idle.push((tick, cpu.count(), cpu.high()));
            }
            (cpu.stats(), base, series, idle)
        });
        (producer.join().unwrap(), consumer.join().unwrap())
    });
    let _ = start;
    let (pa, pb, series0, elapsed) = a;
    let (ca, cb, series1, idle) = b;
    let allocs = pa.allocs - pb.allocs;
    let frees = ca.frees - cb.frees;
    let high_series = series0
        .iter()
        .zip(series1.iter().chain(std::iter::repeat(&0)))
        .map(|(&(_, h0), &h1)| (h0, h1))
        .collect();
    TwoThread {
        allocs,
        reached_zone: allocs - (pa.local_hits - pb.local_hits),
        refilled_pages: pa.refilled_blocks - pb.refilled_blocks,
        zone_locks: (pa.zone_lock_acquisitions - pb.zone_lock_acquisitions)
            + (ca.zone_lock_acquisitions - cb.zone_lock_acquisitions),
        ops: allocs + frees,
        ns_per_op: elapsed.as_nanos() as f64 / (allocs + frees).max(1) as f64,
        high_series,
        idle,
        high_min: s.high_min(),
    }
}

/// One CPU allocates a burst and frees it again (a build-like pattern).
/// Returns (pages refilled from the zone, allocations, zone-lock
/// acquisitions) after a warm-up of a tenth of the rounds.
fn same_cpu(burst: usize, total: usize, s: PcpSizing) -> (u64, u64, u64) {
    let zone = BuddyBackend::new(PAGES);
    let set = pcp_set(1, s);
    let mut cpu = set.claim(CpuId(0)).unwrap();
    let rounds = (total / burst).max(20);
    let mut v = Vec::with_capacity(burst);
    let mut base = cpu.stats();
    for r in 0..rounds {
        if r == rounds / 10 {
            base = cpu.stats();
        }
        for _ in 0..burst {
            v.push(cpu.alloc(zone, O0, MT).expect("zone has room"));
        }
        for f in v.drain(..) {
            cpu.free(zone, f, O0, MT).unwrap();
        }
    }
    let st = cpu.stats();
    (
        st.refilled_blocks - base.refilled_blocks,
        st.allocs - base.allocs,
        st.zone_lock_acquisitions - base.zone_lock_acquisitions,
    )
}

fn same_cpu_report(auto: PcpSizing, fixed: PcpSizing) {
    println!();
    println!("== same CPU allocates a burst then frees it, after warm-up ==");
    println!(
        "{:>6} {:>15} {:>15} {:>10} {:>17} {:>17}",
        "burst",
        "zone_pages%auto",
        "zone_pages%fix",
        "cut%",
        "zone_locks/1k_au",
        "zone_locks/1k_fx"
    );
    for burst in [32usize, 256, 1024, 4096] {
        let (pa, na, la) = same_cpu(burst, 400_000, auto);
        let (pf, nf, lf) = same_cpu(burst, 400_000, fixed);
        let (ra, rf) = (pa as f64 / na as f64, pf as f64 / nf as f64);
        let cut = if rf > 0.0 {
            100.0 * (1.0 - ra / rf)
        } else {
            0.0
        };
        println!(
            "{:>6} {:>15.2} {:>15.2} {:>10.1} {:>17.3} {:>17.3}",
            burst,
            100.0 * ra,
            100.0 * rf,
            cut,
            1000.0 * la as f64 / (2 * na) as f64,
            1000.0 * lf as f64 / (2 * nf) as f64
        );
    }
}

fn two_thread_report() {
    let auto = sizing(2);
    let fixed = PcpSizing::new(auto.batch(), auto.high_min(), auto.high_min()).unwrap();
    println!();
    println!("== pcp two-thread burst workload (CPU 0 allocates, CPU 1 frees), after warm-up ==");
    println!(
        "auto: batch {} high_min {} high_max {}; fixed: high = high_min = {}",
        auto.batch(),
        auto.high_min(),
        auto.high_max(),
        fixed.high_max()
    );
    println!(
        "{:>6} {:>6} {:>10} {:>12} {:>14} {:>16} {:>10}",
        "burst", "mode", "allocs", "reach_zone%", "refill_pages%", "zone_locks/1k_op", "ns/op"
    );
    let mut shown = None;
    for burst in [32usize, 256, 4096] {
        for (name, s) in [("auto", auto), ("fixed", fixed)] {
            let r = two_threads(burst, 400_000, s);
            println!(
                "{:>6} {:>6} {:>10} {:>12.3} {:>14.2} {:>16.3} {:>10.1}",
                burst,
                name,
                r.allocs,
                100.0 * r.reached_zone as f64 / r.allocs as f64,
                100.0 * r.refilled_pages as f64 / r.allocs as f64,
                1000.0 * r.zone_locks as f64 / r.ops as f64,
                r.ns_per_op
            );
            if burst == 4096 && name == "auto" {
                shown = Some(r);
            }
        }
    }
    same_cpu_report(auto, fixed);
    if let Some(r) = shown {
        println!(
            "high over the run (burst 4096, auto), sampled: CPU0 (allocating) / CPU1 (freeing)"
        );
        let line: Vec<String> = r
            .high_series
            .iter()
            .step_by(5)
            .map(|(a, b)| format!("{a}/{b}"))
            .collect();
        println!("  {}", line.join(" "));
        println!(
            "idle decay on CPU1 (1 tick = 1 s), tick: count/high (high_min {}):",
            r.high_min
        );
        let line: Vec<String> = r
            .idle
            .iter()
            .filter(|(t, _, _)| [0, 1, 2, 4, 8, 16, 24, 32, 40].contains(t))
            .map(|(t, c, h)| format!("{t}: {c}/{h}"))
            .collect();
        println!("  {}", line.join("  "));
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    order0_pair(&mut c);
    batches(&mut c);
    c.final_summary();
    two_thread_report();
}
