//! swap-latency: per-operation latency distribution of order-0 slot
//! allocation and free at 50/90/99% device fill, and of order-9
//! (whole-cluster) allocation, side by side with a peer: a single-lock
//! linear-scan slot map with a next-fit cursor (the pre-cluster Linux
//! shape). Each operation is timed alone with the time-stamp counter
//! (calibrated against the wall clock); the timer's own overhead, measured
//! the same way, is subtracted.

use std::mem::MaybeUninit;
use std::sync::Mutex;
use std::time::Instant;

use pageframe_swap::{Order, Slot, SwapConfig, SwapCpu, SwapDevice};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::progress;
use crate::table::{Table, f};

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `_rdtsc` only reads the time-stamp counter; it has no
        // memory effects and exists on every x86-64 CPU.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<Instant> = OnceLock::new();
        T0.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Nanoseconds per tick and the timer overhead in ticks.
fn calibrate() -> (f64, u64) {
    let (t0, c0) = (Instant::now(), ticks());
    while t0.elapsed().as_millis() < 100 {}
    let ns_per_tick = t0.elapsed().as_nanos() as f64 / (ticks() - c0) as f64;
    let mut over: Vec<u64> = (0..10_000)
        .map(|_| {
            let a = ticks();
            let b = ticks();
            b - a
        })
        .collect();
    over.sort_unstable();
    (ns_per_tick, over[over.len() / 2])
}

trait Slots {
    fn alloc0(&mut self) -> Option<u32>;
    fn free0(&mut self, s: u32);
}

struct Ours<'a> {
    dev: SwapDevice<'a>,
    cpu: SwapCpu,
}

impl Slots for Ours<'_> {
    fn alloc0(&mut self) -> Option<u32> {
        self.dev
            .alloc(&mut self.cpu, Order::ZERO)
            .ok()
            .map(Slot::get)
    }
    fn free0(&mut self, s: u32) {
        let _ = self.dev.free(Slot::new(s), Order::ZERO);
    }
}

struct LinearScan(Mutex<(Vec<u8>, usize)>);

impl Slots for LinearScan {
    fn alloc0(&mut self) -> Option<u32> {
        let mut g = self.0.lock().ok()?;
        let (map, cursor) = &mut *g;
        let start = *cursor;
        let pos = map[start..]
            .iter()
            .position(|&b| b == 0)
            .map(|p| p + start)
            .or_else(|| map[..start].iter().position(|&b| b == 0))?;
        map[pos] = 1;
        *cursor = if pos + 1 == map.len() { 1 } else { pos + 1 };
        Some(pos as u32)
    }
    fn free0(&mut self, s: u32) {
        if let Ok(mut g) = self.0.lock() {
            g.0[s as usize] = 0;
        }
    }
}

struct Dist {
    alloc: Vec<u64>,
    free: Vec<u64>,
}

/// Fill to `fill`, churn to scatter the holes, then time `ops` alloc/free
/// pairs (free a random held slot, allocate one).
fn measure(a: &mut impl Slots, usable: usize, fill: f64, ops: usize, rng: &mut SmallRng) -> Dist {
    let target = (usable as f64 * fill) as usize;
    let mut held = Vec::with_capacity(usable);
    while held.len() < target {
        held.push(a.alloc0().expect("fill"));
    }
    for _ in 0..usable {
        let i = rng.gen_range(0..held.len());
        a.free0(held.swap_remove(i));
        held.push(a.alloc0().expect("churn"));
    }
    let mut d = Dist {
        alloc: Vec::with_capacity(ops),
        free: Vec::with_capacity(ops),
    };
    for _ in 0..ops {
        let i = rng.gen_range(0..held.len());
        let s = held.swap_remove(i);
        let t0 = ticks();
        a.free0(s);
        let t1 = ticks();
        let got = a.alloc0();
        let t2 = ticks();
        held.push(got.expect("steady state"));
        d.free.push(t1 - t0);
        d.alloc.push(t2 - t1);
    }
    d
}

fn pcts(v: &mut [u64], ns: f64, over: u64) -> [f64; 3] {
    v.sort_unstable();
    let at = |q: f64| {
        (v[((v.len() as f64 * q) as usize).min(v.len() - 1)].saturating_sub(over)) as f64 * ns
    };
    [at(0.5), at(0.99), at(0.999)]
}

/// Runs the scenario.
pub fn run(opts: &Opts) -> Result<(), String> {
    let clusters: u32 = opts.get("clusters", 256)?; // 512 MiB of swap
    let ops: usize = opts.get("ops", if opts.quick { 50_000 } else { 400_000 })?;
    let slots = clusters * 512;
    let usable = slots as usize - 1;
    let (ns, over) = calibrate();
    println!(
        "## swap-latency: {} slots ({} MiB), {} timed ops per cell, timer overhead {:.1} ns subtracted\n",
        slots,
        slots / 256,
        ops,
        over as f64 * ns
    );
    let mut t = Table::new(&[
        "fill",
        "allocator",
        "alloc p50 ns",
        "alloc p99 ns",
        "alloc p99.9 ns",
        "free p50 ns",
        "free p99 ns",
    ]);
    let pb = progress::bar(7, "swap-latency");
    for fill in [0.5, 0.9, 0.99] {
        let cfg = SwapConfig::new(slots);
        let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)];
        let dev = SwapDevice::new(cfg, &mut meta, None).map_err(|e| format!("{e:?}"))?;
        let mut ours = Ours {
            dev,
            cpu: SwapCpu::new(),
        };
        let mut rng = SmallRng::seed_from_u64(opts.seed);
        let mut d = measure(&mut ours, usable, fill, ops, &mut rng);
        pb.inc(1);
        let mut peer = LinearScan(Mutex::new((vec![0; slots as usize], 1)));
        if let Ok(mut g) = peer.0.lock() {
            g.0[0] = 1;
        }
        let mut rng = SmallRng::seed_from_u64(opts.seed);
        let mut p = measure(&mut peer, usable, fill, ops, &mut rng);
        pb.inc(1);
        for (name, dist) in [("pageframe-swap", &mut d), ("linear-scan", &mut p)] {
            let a = pcts(&mut dist.alloc, ns, over);
            let fr = pcts(&mut dist.free, ns, over);
            t.row(vec![
                format!("{:.0}%", fill * 100.0),
                name.into(),
                f(a[0], 0),
                f(a[1], 0),
                f(a[2], 0),
                f(fr[0], 0),
                f(fr[1], 0),
            ]);
        }
    }
    // Order 9: a whole free cluster for a THP, with a quarter of the device
    // in base slots; each allocation is freed again (untimed).
    let cfg = SwapConfig::new(slots);
    let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)];
    let dev = SwapDevice::new(cfg, &mut meta, None).map_err(|e| format!("{e:?}"))?;
    let mut cpu = SwapCpu::new();
    for _ in 0..usable / 4 {
        dev.alloc(&mut cpu, Order::ZERO)
            .map_err(|e| e.to_string())?;
    }
    let k = dev.huge_order();
    let mut v = Vec::with_capacity(ops / 10);
    for _ in 0..ops / 10 {
        let t0 = ticks();
        let s = dev.alloc(&mut cpu, k);
        let t1 = ticks();
        let s = s.map_err(|e| e.to_string())?;
        v.push(t1 - t0);
        dev.free(s, k).map_err(|e| e.to_string())?;
    }
    pb.inc(1);
    pb.finish_and_clear();
    let a = pcts(&mut v, ns, over);
    t.row(vec![
        "25% (order 9)".into(),
        "pageframe-swap".into(),
        f(a[0], 0),
        f(a[1], 0),
        f(a[2], 0),
        "-".into(),
        "-".into(),
    ]);
    print!("{}", t.render());
    println!(
        "\nGoals: order-0 alloc at 99% fill p50 <= 50 ns, p99 <= 1000 ns; order-9 alloc <= 100 ns."
    );
    Ok(())
}
