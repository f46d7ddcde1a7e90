#![allow(missing_docs)] // criterion_group! generates undocumented items
//! The machine's public paths, as a kernel calls them (issue 14): a CPU's
//! cached path and the zone path, order 0, on a 4 GiB zone with per-CPU
//! caches for two CPUs. Every "iteration" is one operation (an alloc or a
//! free). Run: `cargo bench -p pageframe-benches --bench machine`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pageframe::MobilityConfig;
use pageframe_benches::{Cached, FRAMES_4G, Facade, Frames, machine, span};

fn pairs(a: &mut impl Frames, iters: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..iters / 2 {
        let p = a.alloc(0).expect("alloc");
        a.free(black_box(p), 0);
    }
    t.elapsed()
}

fn bursts(a: &mut impl Frames, iters: u64, burst: usize) -> Duration {
    let mut v = Vec::with_capacity(burst);
    let t = Instant::now();
    for _ in 0..iters / (2 * burst as u64) {
        for _ in 0..burst {
            v.push(a.alloc(0).expect("alloc"));
        }
        for p in v.drain(..) {
            a.free(p, 0);
        }
    }
    t.elapsed()
}

fn cached_paths(c: &mut Criterion) {
    let m = machine(span(FRAMES_4G), 2, MobilityConfig::DEFAULT);
    let mut g = c.benchmark_group("machine");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    let mut cpu = Cached::new(m, 0);
    g.bench_function("cached_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut cpu, n))
    });
    g.bench_function("cached_order0_burst64", |b| {
        b.iter_custom(|n| bursts(&mut cpu, n, 64))
    });
    drop(cpu);
    let mut zone = Facade(m);
    g.bench_function("zone_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut zone, n))
    });
    g.finish();
}

criterion_group!(benches, cached_paths);
criterion_main!(benches);
