#![allow(missing_docs)] // criterion_group! generates undocumented items
//! Buddy core benchmarks, each scenario run against the buddy
//! core, the facade zone (spin lock + watermark check) and the peer
//! `buddy_system_allocator` in the same run, over 4 GiB of simulated frames.
//!
//! Every benchmark's "iteration" is ONE operation (one alloc or one free),
//! so criterion's time per iteration is the time per operation.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pageframe_benches::{
    FRAMES_4G, Facade, Frames, core_zone, fill, machine, meta, mobile_meta, mobile_zone, peer, span,
};
use pageframe_buddy::{BuddyConfig, BuddyZone, SingleList};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Runs `iters` operations as alternating alloc/free of one block of `order`.
fn pairs<F: Frames>(a: &mut F, order: u8, iters: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..iters / 2 {
        let p = a.alloc(order).expect("alloc");
        // The frame number is what the caller looks at; the handle itself
        // stays where a caller keeps it (in registers here).
        black_box(F::pfn(&p));
        a.free(p, order);
    }
    t.elapsed()
}

/// Brings an allocator to 50% fill where every free frame's buddy is
/// allocated: all of memory as order 0, then every other frame freed.
fn half_split<F: Frames>(a: &mut F) {
    for p in fill(a, 0) {
        if F::pfn(&p) % 2 == 1 {
            a.free(p, 0);
        } else {
            // Kept allocated to the end of the run.
            std::mem::forget(p);
        }
    }
}

macro_rules! each_allocator {
    ($g:expr, $name:expr, |$a:ident| $body:expr) => {{
        let s = span(FRAMES_4G);
        {
            let mut m = meta(s);
            let mut z = core_zone(s, &mut m);
            let $a = &mut z;
            $g.bench_function(BenchmarkId::new($name, "buddy"), $body);
        }
        {
            let mut f = Facade(machine(s, 0, pageframe::zone::MobilityConfig::DEFAULT));
            let $a = &mut f;
            $g.bench_function(BenchmarkId::new($name, "facade"), $body);
        }
        {
            let mut p = peer(s);
            let $a = &mut p;
            $g.bench_function(BenchmarkId::new($name, "peer"), $body);
        }
    }};
}

fn repeated_pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("pair");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    // Worst case: an empty allocator, a full split and merge each time.
    each_allocator!(g, "order0_empty", |a| |b| b
        .iter_custom(|n| pairs(&mut *a, 0, n)));
    each_allocator!(g, "order9_empty", |a| |b| b
        .iter_custom(|n| pairs(&mut *a, 9, n)));
    // 50% fill with the buddy already split.
    each_allocator!(g, "order0_half_split", |a| {
        half_split(&mut *a);
        |b| b.iter_custom(|n| pairs(&mut *a, 0, n))
    });
    g.finish();
}

/// The mobility layer's order-0 fast path (movable requests) beside the
/// bare buddy core: the cost of grouping by mobility.
fn mobility_pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("mobility_pair");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    let s = span(FRAMES_4G);
    for (name, prep) in [("order0_empty", false), ("order0_half_split", true)] {
        {
            let mut m = meta(s);
            let mut z = core_zone(s, &mut m);
            if prep {
                half_split(&mut z);
            }
            g.bench_function(BenchmarkId::new(name, "buddy"), |b| {
                b.iter_custom(|n| pairs(&mut z, 0, n))
            });
        }
        {
            let mut m = mobile_meta(s);
            let mut z = mobile_zone(s, &mut m);
            if prep {
                half_split(&mut z);
            }
            g.bench_function(BenchmarkId::new(name, "mobility"), |b| {
                b.iter_custom(|n| pairs(&mut z, 0, n))
            });
        }
    }
    g.finish();
}

/// Fill to 100% then drain in random order; `iters` operations of one kind
/// timed (fills stop at `iters`; drains free everything), the rest untimed.
fn fill_drain(c: &mut Criterion, order: u8, name: &str) {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    let mut rng = SmallRng::seed_from_u64(7);
    each_allocator!(g, "fill", |a| |b| b.iter_custom(|n| {
        let mut total = Duration::ZERO;
        let mut left = n;
        while left > 0 {
            let t = Instant::now();
            let mut got = Vec::with_capacity((FRAMES_4G >> order) as usize);
            while (got.len() as u64) < left {
                match Frames::alloc(&mut *a, order) {
                    Some(p) => got.push(p),
                    None => break,
                }
            }
            total += t.elapsed();
            left -= got.len() as u64;
            for p in got {
                Frames::free(&mut *a, p, order);
            }
        }
        total
    }));
    // Whole drains: every block freed in random order, the time of all the
    // frees over their number (a partial drain would time only the first,
    // cache-cold frees after a fill).
    each_allocator!(g, "drain_random", |a| |b| b.iter_custom(|n| {
        let (mut total, mut done) = (Duration::ZERO, 0u64);
        while done < n {
            let mut got = fill(&mut *a, order);
            got.shuffle(&mut rng);
            let len = got.len() as u64;
            let t = Instant::now();
            for p in got {
                Frames::free(&mut *a, p, order);
            }
            total += t.elapsed();
            done += len;
        }
        total.mul_f64(n as f64 / done as f64)
    }));
    g.finish();
}

fn fill_drain_order0(c: &mut Criterion) {
    fill_drain(c, 0, "order0_full");
}

fn fill_drain_order9(c: &mut Criterion) {
    fill_drain(c, 9, "order9_full");
}

/// The scattered test: fill 100% at order 0, free a random half, then steps
/// of free-random + alloc. Times the steps (2 ops each) and, after 5M steps,
/// prints how many 2 MiB blocks can still be allocated.
/// One step of the scattered test: free a random live frame, allocate one.
fn scatter_step<F: Frames>(a: &mut F, live: &mut Vec<F::Handle>, rng: &mut SmallRng) {
    let i = rng.gen_range(0..live.len());
    a.free(live.swap_remove(i), 0);
    live.push(a.alloc(0).expect("alloc after free"));
}

fn scattered(c: &mut Criterion) {
    const STEPS: u64 = 5_000_000;
    let mut g = c.benchmark_group("scattered");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    each_allocator!(g, "steps", |a| {
        let mut rng = SmallRng::seed_from_u64(42);
        let mut live = fill(&mut *a, 0);
        live.shuffle(&mut rng);
        for p in live.split_off(live.len() / 2) {
            Frames::free(&mut *a, p, 0);
        }
        let t = Instant::now();
        for _ in 0..STEPS {
            scatter_step(&mut *a, &mut live, &mut rng);
        }
        let per_op = t.elapsed().as_nanos() as f64 / (2 * STEPS) as f64;
        let mut held = Vec::new();
        while let Some(p) = Frames::alloc(&mut *a, 9) {
            held.push(p);
        }
        let huge = held.len();
        for p in held {
            Frames::free(&mut *a, p, 9);
        }
        // Half the frames are free: at most half the 2 MiB blocks can be.
        eprintln!(
            "scattered: {per_op:.1} ns/op over {STEPS} steps; {huge} of the {} possible 2 MiB blocks allocatable after",
            FRAMES_4G >> 10
        );
        move |b: &mut criterion::Bencher| {
            b.iter_custom(|n| {
                let t = Instant::now();
                for _ in 0..n.div_ceil(2) {
                    scatter_step(&mut *a, &mut live, &mut rng);
                }
                t.elapsed()
            })
        }
    });
    g.finish();
}

/// Zone set-up cost over 64 GiB of frames (reported per frame through the
/// throughput figure): `new` + `add_free_range` of the whole span.
fn init(c: &mut Criterion) {
    let frames = 16u64 << 20;
    let s = span(frames);
    let mut m = meta(s);
    let mut g = c.benchmark_group("init_64g");
    g.sample_size(20).measurement_time(Duration::from_secs(2));
    g.throughput(Throughput::Elements(frames));
    g.bench_function("buddy", |b| {
        b.iter(|| {
            let mut z =
                BuddyZone::new(s, BuddyConfig::default(), &mut m, SingleList).expect("zone");
            z.add_free_range(s).expect("range");
            black_box(z.free_pages())
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    repeated_pairs,
    mobility_pairs,
    fill_drain_order0,
    fill_drain_order9,
    scattered,
    init
);
criterion_main!(benches);
