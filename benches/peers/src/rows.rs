//! The rows: each a workload run on a fresh allocator, timed from outside,
//! the same code for every column.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use core_affinity::CoreId;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::frames::{Frames, HUGE_FRAMES};

/// The timed rows, in the table's order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Row {
    /// Order-0 alloc then free, on an empty allocator.
    Pair0,
    /// Order-9 (2 MiB) alloc then free, on an empty allocator.
    Pair9,
    /// Order-0 allocations until none is left.
    Fill,
    /// Every frame of a full allocator freed, in random order.
    FreeRandom,
    /// The scattered test: see [`scattered`].
    Scattered,
    /// Two threads doing order-0 pairs on one allocator.
    Threads,
}

impl Row {
    /// Every timed row.
    pub const ALL: [Row; 6] = [
        Row::Pair0,
        Row::Pair9,
        Row::Fill,
        Row::FreeRandom,
        Row::Scattered,
        Row::Threads,
    ];

    /// The row's name on the command line (`--row`).
    pub fn name(self) -> &'static str {
        match self {
            Row::Pair0 => "pair0",
            Row::Pair9 => "pair9",
            Row::Fill => "fill",
            Row::FreeRandom => "free",
            Row::Scattered => "scattered",
            Row::Threads => "threads",
        }
    }

    /// The row's label in the table.
    pub fn label(self) -> &'static str {
        match self {
            Row::Pair0 => "order-0 pair, empty",
            Row::Pair9 => "order-9 pair, empty",
            Row::Fill => "order-0 fill to 100%",
            Row::FreeRandom => "every frame freed, random order",
            Row::Scattered => "scattered test, per step",
            Row::Threads => "two threads, one allocator, aggregate Mops/s",
        }
    }

    /// Threads the row runs (and CPUs or cores its allocator is set up for).
    pub fn threads(self) -> usize {
        match self {
            Row::Threads => 2,
            _ => 1,
        }
    }
}

/// What the rows are given.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Frames of the simulated memory.
    pub frames: u64,
    /// Pairs timed by the pair rows (order 0; order 9 runs an eighth).
    pub pairs: u64,
    /// Iterations of the scattered test.
    pub iters: usize,
    /// How long the two threads run.
    pub secs: f64,
    /// Seed of the random choices (the round's own: the same for every
    /// column of a round).
    pub seed: u64,
    /// The cores the two threads are pinned to (`None`: not pinned).
    pub cores: [Option<CoreId>; 2],
}

/// One measurement of one cell.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// ns an operation, or Mops/s for the two-thread row.
    pub value: f64,
    /// For the scattered test: free 2 MiB blocks after it.
    pub huge_blocks: Option<u64>,
    /// For the scattered test: ns a free and ns an allocation, each phase
    /// of its iterations timed apart.
    pub phases: Option<(f64, f64)>,
}

impl Sample {
    fn of(value: f64) -> Sample {
        Sample {
            value,
            huge_blocks: None,
            phases: None,
        }
    }
}

fn ns_per(d: Duration, ops: u64) -> f64 {
    d.as_nanos() as f64 / ops.max(1) as f64
}

/// Runs `row` on handles `make(thread)` makes of one fresh allocator; the
/// single-thread rows use `make(0)` on the calling thread.
pub fn run<F: Frames>(row: Row, s: &Setup, make: impl Fn(usize) -> F + Sync) -> Sample {
    match row {
        Row::Pair0 => Sample::of(pairs(&mut make(0), 0, s.pairs)),
        Row::Pair9 => Sample::of(pairs(&mut make(0), 9, s.pairs / 8)),
        Row::Fill => Sample::of(fill(&mut make(0), s.frames)),
        Row::FreeRandom => Sample::of(free_random(&mut make(0), s.frames, s.seed)),
        Row::Scattered => scattered(&mut make(0), s.frames, s.iters, s.seed),
        Row::Threads => Sample::of(threads(&make, s.secs, s.cores)),
    }
}

/// ns an operation of `n` alloc/free pairs of `order` (after `n / 16`
/// untimed ones), the block held only between the two calls.
fn pairs<F: Frames>(f: &mut F, order: u8, n: u64) -> f64 {
    let pair = |f: &mut F| {
        let h = f.alloc(order).expect("alloc on an empty allocator");
        black_box(F::pfn(&h));
        f.free(h, order);
    };
    for _ in 0..n / 16 {
        pair(f);
    }
    let t = Instant::now();
    for _ in 0..n {
        pair(f);
    }
    ns_per(t.elapsed(), 2 * n)
}

/// An empty vector for the handles of a fill of `frames`, its pages
/// already touched: a first touch faults a page in, which a fill would
/// otherwise be timed for (and more often for larger handles).
fn holder<H>(frames: u64) -> Vec<H> {
    let mut held = Vec::with_capacity(frames as usize);
    for slot in held.spare_capacity_mut() {
        *slot = std::mem::MaybeUninit::zeroed();
    }
    black_box(held.as_ptr());
    held
}

/// Order-0 allocations into `held` until none is left; checks that every
/// frame came out.
fn fill_into<F: Frames>(f: &mut F, frames: u64, held: &mut Vec<F::Handle>) {
    while let Some(h) = f.alloc(0) {
        held.push(h);
    }
    assert_eq!(held.len() as u64, frames, "a fill reached every frame");
}

/// [`fill_into`] a new holder.
fn fill_all<F: Frames>(f: &mut F, frames: u64) -> Vec<F::Handle> {
    let mut held = holder(frames);
    fill_into(f, frames, &mut held);
    held
}

/// ns an allocation of a fill from empty to full.
fn fill<F: Frames>(f: &mut F, frames: u64) -> f64 {
    let mut held = holder(frames);
    let t = Instant::now();
    fill_into(f, frames, &mut held);
    let d = t.elapsed();
    black_box(&held);
    ns_per(d, frames)
}

/// ns a free of every frame of a full allocator, in random order; checks
/// that all are free afterwards.
fn free_random<F: Frames>(f: &mut F, frames: u64, seed: u64) -> f64 {
    let mut held = fill_all(f, frames);
    held.shuffle(&mut SmallRng::seed_from_u64(seed));
    let t = Instant::now();
    for h in held {
        f.free(h, 0);
    }
    let d = t.elapsed();
    assert_eq!(f.settle().frames, frames, "every frame free again");
    ns_per(d, frames)
}

/// The scattered test, the lab's `frag` scenario (LLFree's fragmentation
/// method): every frame allocated at order 0, a random half freed, then
/// `iters` iterations each freeing a random tenth of the frames held and
/// allocating as many again. A step is one of those frees or allocations;
/// returns ns a step and the free 2 MiB blocks once caches are drained.
fn scattered<F: Frames>(f: &mut F, frames: u64, iters: usize, seed: u64) -> Sample {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut held = fill_all(f, frames);
    for _ in 0..frames / 2 {
        let h = held.swap_remove(rng.gen_range(0..held.len()));
        f.free(h, 0);
    }
    let (mut steps, mut freeing, mut allocating) = (0u64, Duration::ZERO, Duration::ZERO);
    for _ in 0..iters {
        let n = held.len() / 10;
        let t = Instant::now();
        for _ in 0..n {
            let h = held.swap_remove(rng.gen_range(0..held.len()));
            f.free(h, 0);
        }
        let half = Instant::now();
        for _ in 0..n {
            held.push(f.alloc(0).expect("a frame to refill"));
        }
        freeing += half - t;
        allocating += half.elapsed();
        steps += 2 * n as u64;
    }
    let settled = f.settle();
    assert_eq!(
        settled.frames + held.len() as u64,
        frames,
        "free and held frames add up"
    );
    Sample {
        value: ns_per(freeing + allocating, steps),
        huge_blocks: Some(settled.huge_blocks),
        phases: Some((ns_per(freeing, steps / 2), ns_per(allocating, steps / 2))),
    }
}

/// The most 2 MiB blocks the scattered test can leave: its free frames
/// over 512.
pub fn scattered_huge_max(frames: u64) -> u64 {
    (frames - frames / 2) / HUGE_FRAMES
}

/// Aggregate Mops/s of two threads, each on its own handle
/// (`make(thread)`, made inside the thread) and pinned to its own core,
/// doing order-0 alloc/free pairs for `secs` seconds: operations of both
/// over the time from the first one's start to the last one's end.
fn threads<F: Frames>(
    make: &(impl Fn(usize) -> F + Sync),
    secs: f64,
    cores: [Option<CoreId>; 2],
) -> f64 {
    // Counters rather than a barrier: a thread that fails while making its
    // handle must not leave the others waiting.
    let ready = AtomicUsize::new(0);
    let (go, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let runs: Vec<(Instant, Instant, u64)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let (ready, go, stop) = (&ready, &go, &stop);
                s.spawn(move || {
                    if let Some(c) = cores[t] {
                        core_affinity::set_for_current(c);
                    }
                    let mut f = make(t);
                    ready.fetch_add(1, Ordering::AcqRel);
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    let t0 = Instant::now();
                    let mut pairs = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            let h = f.alloc(0).expect("alloc");
                            black_box(F::pfn(&h));
                            f.free(h, 0);
                        }
                        pairs += 256;
                    }
                    (t0, Instant::now(), 2 * pairs)
                })
            })
            .collect();
        while ready.load(Ordering::Acquire) < 2 && !workers.iter().any(|w| w.is_finished()) {
            std::thread::yield_now();
        }
        go.store(true, Ordering::Release);
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    let first = runs.iter().map(|r| r.0).min().expect("two runs");
    let last = runs.iter().map(|r| r.1).max().expect("two runs");
    let ops: u64 = runs.iter().map(|r| r.2).sum();
    ops as f64 / (last - first).as_secs_f64() / 1e6
}
