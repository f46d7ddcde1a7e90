//! Per-CPU page caches through a CPU's handle on a machine, against the
//! machine's zone path without a cache and `buddy_system_allocator`, over
//! the same zone size, in one run. Also prints the two-thread auto-tuning report (share of allocations
//! that reach the zone, zone-lock acquisitions per 1000 operations, idle
//! decay of `high`). Run: `cargo bench -p pageframe-benches --bench pcp`.

use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use pageframe::{Block, CpuCache, Gfp, Machine, NodeId, Order, ZoneKind, zone::MobilityConfig};
use pageframe::{CpuId, pcp::PcpStats};
use pageframe_benches::{machine, span};

/// 1 GiB of 4 KiB frames: batch 63, high_max 16384 per CPU with 2 CPUs.
const PAGES: u64 = 1 << 18;
const O0: Order = Order::ZERO;
const GFP: Gfp = Gfp::KERNEL.union(Gfp::MOVABLE);

/// A 1 GiB machine with per-CPU caches for 2 CPUs, `high` auto-tuned or
/// fixed where auto-tuning starts (`percpu_pagelist_high_fraction`).
fn machine_for(fixed: bool) -> &'static Machine<'static> {
    let m = machine(span(PAGES), 2, MobilityConfig::DEFAULT);
    if fixed {
        let low = m
            .inspect()
            .node(NodeId::ZERO)
            .and_then(|n| n.zone(ZoneKind::Normal))
            .map_or(1, |z| z.watermarks().low);
        m.tunables()
            .set_pcp_high_fraction((PAGES / low.max(1)).max(8) as u32)
            .expect("fraction");
    }
    m
}

fn cpu(m: &'static Machine<'static>, id: u32) -> CpuCache<'static, 'static> {
    m.cpu(CpuId(id), NodeId::ZERO).expect("handle")
}

fn stats(c: &mut CpuCache<'_, 'static>) -> PcpStats {
    c.cache_info(NodeId::ZERO, ZoneKind::Normal)
        .map(|s| s.stats)
        .unwrap_or_default()
}

fn high(c: &mut CpuCache<'_, 'static>) -> u32 {
    c.cache_info(NodeId::ZERO, ZoneKind::Normal)
        .map_or(0, |s| s.high)
}

fn count(c: &mut CpuCache<'_, 'static>) -> u32 {
    c.cache_info(NodeId::ZERO, ZoneKind::Normal)
        .map_or(0, |s| s.count)
}

fn peer(pages: u64) -> buddy_system_allocator::FrameAllocator<32> {
    let mut a = buddy_system_allocator::FrameAllocator::<32>::new();
    a.add_frame(0, pages as usize);
    a
}

fn order0_pair(c: &mut Criterion) {
    let m = machine_for(false);
    let mut local = cpu(m, 0);
    let mut g = c.benchmark_group("pcp/order0_alloc_free_pair");
    g.throughput(Throughput::Elements(2)); // one alloc + one free
    g.bench_function("pcp", |b| {
        b.iter(|| {
            let f = local.alloc(GFP, O0).unwrap();
            black_box(f.pfn());
            local.free(f).unwrap();
        })
    });
    g.bench_function("zone_no_pcp", |b| {
        b.iter(|| {
            let f = m.alloc(NodeId::ZERO, GFP, O0).unwrap();
            black_box(f.pfn());
            m.free(f).unwrap();
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
    let m = machine_for(false);
    let mut local = cpu(m, 0);
    let mut bsa = peer(PAGES);
    let mut g = c.benchmark_group("pcp/batch_alloc_then_free");
    let mut buf: Vec<Block> = Vec::with_capacity(4096);
    let mut raw = vec![0u64; 4096];
    for n in [1usize, 16, 256, 1024, 4096] {
        g.throughput(Throughput::Elements(n as u64)); // per page: its alloc + its free
        // Warm up so `high` has grown for this batch size.
        for _ in 0..8 {
            buf.extend((0..n).map(|_| local.alloc(GFP, O0).unwrap()));
            for f in buf.drain(..) {
                local.free(f).unwrap();
            }
        }
        g.bench_with_input(BenchmarkId::new("pcp_single", n), &n, |b, &n| {
            b.iter(|| {
                buf.extend((0..n).map(|_| local.alloc(GFP, O0).unwrap()));
                for f in buf.drain(..) {
                    local.free(f).unwrap();
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("zone_no_pcp", n), &n, |b, &n| {
            b.iter(|| {
                buf.extend((0..n).map(|_| m.alloc(NodeId::ZERO, GFP, O0).unwrap()));
                for f in buf.drain(..) {
                    m.free(f).unwrap();
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
    println!("pcp high after the batch runs: {}", high(&mut local));
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
}

/// CPU 0 allocates bursts of `burst` frames, CPU 1 frees them. Warm-up is
/// the first tenth of the rounds; counters are deltas after it. Then CPU 1
/// idles and runs the 1 s decay step `ticks` times.
fn two_threads(burst: usize, total: usize, fixed: bool) -> TwoThread {
    let m = machine_for(fixed);
    let rounds = (total / burst).max(20);
    let warm = rounds / 10;
    let (tx, rx) = mpsc::sync_channel::<Vec<Block>>(2);
    let (back_tx, back_rx) = mpsc::channel::<Vec<Block>>();
    let start = Instant::now();
    let (a, b) = thread::scope(|sc| {
        let producer = sc.spawn(move || {
            let mut cpu = cpu(m, 0);
            let mut base = stats(&mut cpu);
            let mut series = Vec::new();
            let mut t0 = Instant::now();
            for r in 0..rounds {
                if r == warm {
                    base = stats(&mut cpu);
                    t0 = Instant::now();
                }
                let mut v = back_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(burst));
                v.clear();
                for _ in 0..burst {
                    v.push(cpu.alloc(GFP, O0).expect("zone has room"));
                }
                if r % (rounds / 50).max(1) == 0 {
                    series.push((r as u32, high(&mut cpu)));
                }
                tx.send(v).unwrap();
            }
            drop(tx);
            let st = stats(&mut cpu);
            cpu.drain();
            (st, base, series, t0.elapsed())
        });
        let consumer = sc.spawn(move || {
            let mut cpu = cpu(m, 1);
            let mut base = stats(&mut cpu);
            let mut r = 0;
            let mut series = Vec::new();
            let every = (rounds / 50).max(1);
            while let Ok(mut v) = rx.recv() {
                if r == warm {
                    base = stats(&mut cpu);
                }
                for f in v.drain(..) {
                    cpu.free(f).unwrap();
                }
                if r % every == 0 {
                    series.push(high(&mut cpu));
                }
                r += 1;
                let _ = back_tx.send(v);
            }
            // Idle: only the periodic decay runs.
            let mut idle = vec![(0, count(&mut cpu), high(&mut cpu))];
            for tick in 1..=40u32 {
                cpu.tick();
                idle.push((tick, count(&mut cpu), high(&mut cpu)));
            }
            let st = stats(&mut cpu);
            cpu.drain();
            (st, base, series, idle)
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
    }
}

/// One CPU allocates a burst and frees it again (a build-like pattern).
/// Returns (pages refilled from the zone, allocations, zone-lock
/// acquisitions) after a warm-up of a tenth of the rounds.
fn same_cpu(burst: usize, total: usize, fixed: bool) -> (u64, u64, u64) {
    let m = machine_for(fixed);
    let mut cpu = cpu(m, 0);
    let rounds = (total / burst).max(20);
    let mut v = Vec::with_capacity(burst);
    let mut base = stats(&mut cpu);
    for r in 0..rounds {
        if r == rounds / 10 {
            base = stats(&mut cpu);
        }
        for _ in 0..burst {
            v.push(cpu.alloc(GFP, O0).expect("zone has room"));
        }
        for f in v.drain(..) {
            cpu.free(f).unwrap();
        }
    }
    let st = stats(&mut cpu);
    (
        st.refilled_blocks - base.refilled_blocks,
        st.allocs - base.allocs,
        st.zone_lock_acquisitions - base.zone_lock_acquisitions,
    )
}

fn same_cpu_report() {
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
        let (pa, na, la) = same_cpu(burst, 400_000, false);
        let (pf, nf, lf) = same_cpu(burst, 400_000, true);
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
    println!();
    println!("== pcp two-thread burst workload (CPU 0 allocates, CPU 1 frees), after warm-up ==");
    println!(
        "auto: high auto-tuned; fixed: percpu_pagelist_high_fraction keeping it where auto starts"
    );
    println!(
        "{:>6} {:>6} {:>10} {:>12} {:>14} {:>16} {:>10}",
        "burst", "mode", "allocs", "reach_zone%", "refill_pages%", "zone_locks/1k_op", "ns/op"
    );
    let mut shown = None;
    for burst in [32usize, 256, 4096] {
        for (name, fixed) in [("auto", false), ("fixed", true)] {
            let r = two_threads(burst, 400_000, fixed);
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
    same_cpu_report();
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
        println!("idle decay on CPU1 (1 tick = 1 s), tick: count/high:");
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
