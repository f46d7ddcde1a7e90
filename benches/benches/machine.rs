#![allow(missing_docs)] // criterion_group! generates undocumented items
//! The machine's public paths, as a kernel calls them: a CPU's cached
//! path (with a handle, without one, from any context) and the zone path,
//! order 0 (and order 9, a huge page, through a handle and through the
//! zone), on a 4 GiB zone with per-CPU caches for two CPUs. Every
//! "iteration" is one operation (an alloc or a free). Run:
//! `cargo bench -p pageframe-benches --bench machine`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pageframe::zone::MobilityConfig;
use pageframe_benches::{AnyContext, Cached, FRAMES_4G, Facade, Frames, OnCpu, machine, span};

fn pairs<F: Frames>(a: &mut F, iters: u64) -> Duration {
    pairs_of(a, iters, 0)
}

/// Alloc+free pairs of blocks of `order`.
fn pairs_of<F: Frames>(a: &mut F, iters: u64, order: u8) -> Duration {
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
    g.bench_function("cached_order9_pair", |b| {
        b.iter_custom(|n| pairs_of(&mut cpu, n, 9))
    });
    drop(cpu);
    let mut on = OnCpu(m, 0);
    g.bench_function("on_cpu_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut on, n))
    });
    let mut any = AnyContext(m, 0);
    g.bench_function("any_context_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut any, n))
    });
    let mut zone = Facade(m);
    g.bench_function("zone_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut zone, n))
    });
    g.bench_function("zone_order9_pair", |b| {
        b.iter_custom(|n| pairs_of(&mut zone, n, 9))
    });
    g.finish();
}

/// One zone shared by 1 and 2 threads, through the zone
/// path (no per-CPU cache), through each thread's CPU cache, and the peer
/// behind a `std::sync::Mutex`; and huge pages through the zone, with its
/// pageblock pool and without. Criterion reports time per operation of
/// the whole group of threads: ratio 1 thread / 2 threads = scaling.
fn scaling(c: &mut Criterion) {
    let m = machine(span(FRAMES_4G), 2, MobilityConfig::DEFAULT);
    let peer = std::sync::Mutex::new(pageframe_benches::peer(span(FRAMES_4G)));
    let mut g = c.benchmark_group("machine/scaling");
    g.sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));
    for threads in [1u64, 2] {
        g.bench_function(format!("zone/{threads}"), |b| {
            b.iter_custom(|n| timed(threads, n, |_| Facade(m)))
        });
        g.bench_function(format!("cached/{threads}"), |b| {
            b.iter_custom(|n| timed(threads, n, |t| Cached::new(m, t)))
        });
        g.bench_function(format!("peer_mutex/{threads}"), |b| {
            b.iter_custom(|n| timed(threads, n, |_| Locked(&peer)))
        });
        // Huge pages through the zone: its pageblock pool, then the free
        // lists under the zone lock (the pool off).
        g.bench_function(format!("zone_order9/{threads}"), |b| {
            b.iter_custom(|n| timed_of(threads, n, 9, |_| Facade(m)))
        });
        let slots = m.tunables().pageblock_pool();
        m.tunables().set_pageblock_pool(0).expect("a slot count");
        g.bench_function(format!("zone_order9_locked/{threads}"), |b| {
            b.iter_custom(|n| timed_of(threads, n, 9, |_| Facade(m)))
        });
        m.tunables()
            .set_pageblock_pool(slots)
            .expect("a slot count");
    }
    g.finish();
}

/// `threads` threads doing order-0 alloc+free pairs at once, each on the
/// `Frames` that `make(thread)` builds inside it, `iters` operations in
/// all: wall time from the first thread's start to the last one's end.
fn timed<F: Frames>(threads: u64, iters: u64, make: impl Fn(u32) -> F + Sync) -> Duration {
    timed_of(threads, iters, 0, make)
}

/// [`timed`] with pairs of blocks of `order`.
fn timed_of<F: Frames>(
    threads: u64,
    iters: u64,
    order: u8,
    make: impl Fn(u32) -> F + Sync,
) -> Duration {
    let per = (iters / threads).max(2);
    let start = std::sync::Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (start, make) = (&start, &make);
                s.spawn(move || {
                    let mut a = make(t as u32);
                    start.wait();
                    let t0 = Instant::now();
                    pairs_of(&mut a, per, order);
                    (t0, t0.elapsed())
                })
            })
            .collect();
        start.wait();
        let ends: Vec<(Instant, Duration)> = handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        let first = ends.iter().map(|e| e.0).min().expect("a thread");
        let last = ends.iter().map(|e| e.0 + e.1).max().expect("a thread");
        last - first
    })
}

/// The peer behind a mutex, shared by the threads.
struct Locked<'p>(&'p std::sync::Mutex<buddy_system_allocator::FrameAllocator<33>>);

impl Frames for Locked<'_> {
    type Handle = u64;
    fn alloc(&mut self, order: u8) -> Option<u64> {
        Frames::alloc(&mut *self.0.lock().expect("lock"), order)
    }
    fn free(&mut self, pfn: u64, order: u8) {
        Frames::free(&mut *self.0.lock().expect("lock"), pfn, order)
    }
    fn pfn(block: &u64) -> u64 {
        *block
    }
}

criterion_group!(benches, cached_paths, scaling);
criterion_main!(benches);
