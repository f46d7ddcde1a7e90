//! pageframe-swap benchmarks: order-0 slot allocation at 50/90/99 % device
//! fill and order-9 (whole-cluster) allocation, side by side with a peer: a
//! single-lock linear-scan slot map with a next-fit cursor, the shape of
//! Linux's swap allocator before clusters (and of a plain bitmap allocator).
//!
//! Only the allocations are timed (`iter_custom`); the frees that keep the
//! fill level constant run untimed between batches. Latency percentiles
//! (p50/p99) come from the lab: `pageframe-lab swap-latency`.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use pageframe_swap::{Order, Slot, SwapConfig, SwapCpu, SwapDevice};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CLUSTERS: u32 = 64; // 32768 slots: 128 MiB of swap
const BATCH: usize = 32;

/// The peer: one lock, one byte per slot, next-fit scan.
struct LinearScan {
    inner: Mutex<(Vec<u8>, usize)>,
}

impl LinearScan {
    fn new(slots: usize) -> Self {
        let mut map = vec![0u8; slots];
        map[0] = 1; // header
        LinearScan {
            inner: Mutex::new((map, 1)),
        }
    }

    fn alloc(&self) -> Option<u32> {
        let mut g = self.inner.lock().unwrap();
        let (map, cursor) = &mut *g;
        let n = map.len();
        let start = *cursor;
        let pos = map[start..]
            .iter()
            .position(|&b| b == 0)
            .map(|p| p + start)
            .or_else(|| map[..start].iter().position(|&b| b == 0))?;
        map[pos] = 1;
        *cursor = if pos + 1 == n { 1 } else { pos + 1 };
        Some(pos as u32)
    }

    fn free(&self, s: u32) {
        self.inner.lock().unwrap().0[s as usize] = 0;
    }
}

trait Slots {
    fn alloc0(&mut self) -> Option<u32>;
    fn free0(&mut self, s: u32);
}

struct Ours {
    dev: SwapDevice<'static>,
    cpu: SwapCpu,
}

impl Slots for Ours {
    fn alloc0(&mut self) -> Option<u32> {
        self.dev
            .alloc(&mut self.cpu, Order::ZERO)
            .ok()
            .map(Slot::get)
    }
    fn free0(&mut self, s: u32) {
        self.dev.free(Slot::new(s), Order::ZERO).unwrap();
    }
}

impl Slots for LinearScan {
    fn alloc0(&mut self) -> Option<u32> {
        self.alloc()
    }
    fn free0(&mut self, s: u32) {
        self.free(s)
    }
}

fn ours() -> Ours {
    let cfg = SwapConfig::new(CLUSTERS * 512);
    let meta =
        Box::leak(vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)].into_boxed_slice());
    Ours {
        dev: SwapDevice::new(cfg, meta, None).unwrap(),
        cpu: SwapCpu::new(),
    }
}

/// Fills to `fill` (fraction of usable slots) and churns so that the free
/// slots are scattered, as after a long run.
fn prepare(a: &mut impl Slots, fill: f64, rng: &mut SmallRng) -> Vec<u32> {
    let usable = (CLUSTERS * 512 - 1) as usize;
    let target = (usable as f64 * fill) as usize;
    let mut held = Vec::with_capacity(usable);
    while held.len() < target {
        held.push(a.alloc0().unwrap());
    }
    for _ in 0..usable {
        let i = rng.gen_range(0..held.len());
        a.free0(held.swap_remove(i));
        held.push(a.alloc0().unwrap());
    }
    held
}

fn timed_allocs(
    a: &mut impl Slots,
    held: &mut Vec<u32>,
    rng: &mut SmallRng,
    iters: u64,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    let mut got = [0u32; BATCH];
    while done < iters {
        let n = BATCH.min((iters - done) as usize);
        for _ in 0..n {
            let i = rng.gen_range(0..held.len());
            a.free0(held.swap_remove(i));
        }
        let t = Instant::now();
        for g in got.iter_mut().take(n) {
            *g = black_box(a.alloc0().unwrap());
        }
        total += t.elapsed();
        held.extend_from_slice(&got[..n]);
        done += n as u64;
    }
    total
}

fn order0(c: &mut Criterion) {
    let mut g = c.benchmark_group("swap/order0_alloc");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for fill in [0.5, 0.9, 0.99] {
        let pct = (fill * 100.0) as u32;
        let mut rng = SmallRng::seed_from_u64(7);
        let mut a = ours();
        let mut held = prepare(&mut a, fill, &mut rng);
        g.bench_with_input(BenchmarkId::new("pageframe-swap", pct), &pct, |b, _| {
            b.iter_custom(|iters| timed_allocs(&mut a, &mut held, &mut rng, iters))
        });
        let mut rng = SmallRng::seed_from_u64(7);
        let mut p = LinearScan::new((CLUSTERS * 512) as usize);
        let mut held = prepare(&mut p, fill, &mut rng);
        g.bench_with_input(BenchmarkId::new("linear-scan", pct), &pct, |b, _| {
            b.iter_custom(|iters| timed_allocs(&mut p, &mut held, &mut rng, iters))
        });
    }
    g.finish();
}

fn huge(c: &mut Criterion) {
    let mut g = c.benchmark_group("swap/order9_alloc");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut a = ours();
    // Half the device busy with base slots so the free list is not trivially
    // the whole device.
    let mut rng = SmallRng::seed_from_u64(9);
    let _held = prepare(&mut a, 0.25, &mut rng);
    let k = a.dev.huge_order();
    g.bench_function("pageframe-swap", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            let mut got = Vec::with_capacity(16);
            while done < iters {
                let n = 16.min(iters - done);
                let t = Instant::now();
                for _ in 0..n {
                    got.push(black_box(a.dev.alloc(&mut a.cpu, k).unwrap()));
                }
                total += t.elapsed();
                for s in got.drain(..) {
                    a.dev.free(s, k).unwrap();
                }
                done += n;
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, order0, huge);
criterion_main!(benches);
