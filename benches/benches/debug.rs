#![allow(missing_docs)] // criterion_group! generates undocumented items
//! What the debugging tools cost (`pageframe::debug`): order-0 pairs
//! through the zone path and a CPU's cached path, on a 4 GiB zone with
//! per-CPU caches for two CPUs, as in the `machine` bench.
//!
//! - `plain/*`: a machine without hooks. Built with the crate's debug
//!   features (`--features vmstat`, `page-owner`, `fail-alloc` of this
//!   package), the difference to the build without them is what each
//!   feature costs when compiled in: `cargo xtask debug-costs` runs the
//!   builds side by side.
//! - `traced/*`: hooks that count every event into atomics (the trace
//!   path's own cost, static dispatch).
//! - `poison/*`: `Poisoning::POISON` through hooks over real memory (a
//!   64 MiB zone backed by a buffer): a fill on every free, a check on
//!   every allocation.
//!
//! Run: `cargo bench -p pageframe-benches --bench debug`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pageframe::debug::{Event, Hooks, Poisoning};
use pageframe::zone::MobilityConfig;
use pageframe::{PAGE_SIZE, PfnRange, PhysAddr};
use pageframe_benches::{Cached, FRAMES_4G, Facade, Frames, machine, machine_with_hooks, span};

fn pairs<F: Frames>(a: &mut F, iters: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..iters / 2 {
        let p = a.alloc(0).expect("alloc");
        black_box(F::pfn(&p));
        a.free(p, 0);
    }
    t.elapsed()
}

/// Counts events by kind, as a trace consumer would.
#[derive(Default)]
struct Counting([AtomicU64; 4]);

impl Hooks for Counting {
    fn event(&self, e: &Event) {
        let i = match e {
            Event::AllocStart { .. } => 0,
            Event::Alloc { .. } => 1,
            Event::Free { .. } => 2,
            _ => 3,
        };
        self.0[i].fetch_add(1, Relaxed);
    }
}

/// Memory behind a zone of `FRAMES` frames from `span(FRAMES).start`.
struct Memory {
    base: u64,
    bytes: Box<[std::cell::UnsafeCell<u8>]>,
}

// SAFETY: the allocator calls `fill` and `check` only on frames it owns
// at that moment or that their holder is giving up: no two calls touch the
// same bytes at once.
unsafe impl Sync for Memory {}

const POISON_FRAMES: u64 = 1 << 14;

impl Memory {
    fn new(range: PfnRange) -> Memory {
        let len = (range.len() * PAGE_SIZE) as usize;
        Memory {
            base: range.start.get(),
            bytes: (0..len).map(|_| std::cell::UnsafeCell::new(0)).collect(),
        }
    }

    fn slice(&self, frames: PfnRange) -> *mut u8 {
        let off = ((frames.start.get() - self.base) * PAGE_SIZE) as usize;
        self.bytes[off].get()
    }
}

impl Hooks for Memory {
    const TRACE: bool = false;
    fn poisoning(&self) -> Poisoning {
        Poisoning::POISON
    }
    fn fill(&self, frames: PfnRange, byte: u8) {
        // SAFETY: `frames` lies inside the buffer (the zone's span) and no
        // other call touches it now (see `Sync` above).
        unsafe {
            std::ptr::write_bytes(
                self.slice(frames),
                byte,
                (frames.len() * PAGE_SIZE) as usize,
            )
        };
    }
    fn check(&self, frames: PfnRange, byte: u8) -> Option<PhysAddr> {
        let len = (frames.len() * PAGE_SIZE) as usize;
        // SAFETY: as for `fill`.
        let s = unsafe { std::slice::from_raw_parts(self.slice(frames), len) };
        let i = s.iter().position(|&b| b != byte)?;
        Some(PhysAddr::new(frames.start.get() * PAGE_SIZE + i as u64))
    }
}

fn costs(c: &mut Criterion) {
    let mut g = c.benchmark_group("debug");
    g.sample_size(30)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    g.throughput(Throughput::Elements(1));

    let m = machine(span(FRAMES_4G), 2, MobilityConfig::DEFAULT);
    let mut cpu = Cached::new(m, 0);
    g.bench_function("plain/cached_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut cpu, n))
    });
    drop(cpu);
    let mut zone = Facade(m);
    g.bench_function("plain/zone_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut zone, n))
    });

    let t = machine_with_hooks(
        span(FRAMES_4G),
        2,
        MobilityConfig::DEFAULT,
        Counting::default(),
    );
    let mut cpu = Cached::new(t, 0);
    g.bench_function("traced/cached_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut cpu, n))
    });
    drop(cpu);
    let mut zone = Facade(t);
    g.bench_function("traced/zone_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut zone, n))
    });

    // Every pair the traced rows ran (none when filtered out) raised its
    // three events.
    let seen = |i: usize| t.inspect().hooks().0[i].load(Relaxed);
    assert!(seen(0) == seen(1) && seen(1) == seen(2));

    let range = span(POISON_FRAMES);
    let p = machine_with_hooks(range, 2, MobilityConfig::DEFAULT, Memory::new(range));
    let mut cpu = Cached::new(p, 0);
    g.bench_function("poison/cached_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut cpu, n))
    });
    drop(cpu);
    let mut zone = Facade(p);
    g.bench_function("poison/zone_order0_pair", |b| {
        b.iter_custom(|n| pairs(&mut zone, n))
    });
    g.finish();
}

criterion_group!(benches, costs);
criterion_main!(benches);
