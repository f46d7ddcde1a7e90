//! `pairs <path> <n>`: `n` alloc+free pairs through one path, for an
//! instruction counter (`cargo xtask instructions` runs it under
//! callgrind twice, with two `n`, and prints the difference a pair: the
//! set-up cancels out). Every path goes through the public API.
//!
//! Paths: `zone` (`Machine::alloc`/`free`), `zone-2m` (the same, a 2 MiB
//! block), `cached` (a `CpuCache` held by
//! its CPU), `cached-burst` (through that handle, 64 allocations and
//! then their frees, as criterion's burst row), `cached-fill` (`n` allocations alone through that handle, its
//! refills from the zone included), `cached-fill-free` (the same, then
//! each freed through the handle in random order), `on-cpu` (`Machine::alloc_on`/`free_on`, the block kept as a
//! number between), `ostd-local` and `ostd-claimed` (one frame through
//! `pageframe-ostd`'s local and safe calls), `ostd-local-2m` (a 2 MiB
//! segment through the local calls), `ostd-local-8k` and `ostd-local-12k`
//! (two and three frames through the local calls: a block of order 1, a
//! run of single frames), `ostd-fill` (`n` frames allocated
//! alone through the local calls, refills included), `ostd-churn` (`n` steps of the OSTD
//! kernel bench's churn on one CPU through the local calls: requests of
//! one to sixteen frames, mostly one, freed in random order),
//! `zone-fill` (`n` order-0 allocations through the zone),
//! `zone-fill-free` (the same, then each freed in random order) and
//! `zone-scattered` (`n` steps of the scattered test through the zone,
//! after the same set-up for every `n`: the zone filled and a random half
//! freed; a step frees a random frame held and allocates one).

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pageframe::{
    CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, PhysAddr, ZoneKind,
};
use pageframe_ostd::FrameAllocator;

fn leak(n: usize) -> &'static mut [MaybeUninit<u8>] {
    Box::leak(Box::new_uninit_slice(n))
}

/// A 4 GiB machine with caches for two CPUs.
fn machine() -> &'static Machine<'static> {
    let m: &'static mut Machine<'static> =
        Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
    let span = PfnRange::new(Pfn(1 << 20), Pfn(2 << 20));
    m.add_zone(
        NodeId::ZERO,
        ZoneKind::Normal,
        span,
        leak(m.zone_metadata_bytes(span)),
    )
    .expect("zone");
    m.add_free_range(span).expect("memory");
    let bytes = m.pcp_bytes(2).expect("sizing");
    m.enable_pcp(2, leak(bytes)).expect("caches");
    m
}

/// Host memory standing for 256 MiB of physical memory from 0, for the
/// OSTD adapter (which carves its metadata from the memory it is given).
static BASE: AtomicU64 = AtomicU64::new(0);

fn virt(pa: PhysAddr) -> *mut u8 {
    (BASE.load(Relaxed) + pa.get()) as *mut u8
}

fn two_cpus() -> u32 {
    2
}

fn cpu_zero() -> u32 {
    0
}

fn ostd() -> &'static FrameAllocator {
    let frames = 1u64 << 16;
    let ram: &'static mut [MaybeUninit<u8>] = leak((frames * 4096) as usize + 4096);
    let base = ram.as_mut_ptr() as u64;
    BASE.store(base.next_multiple_of(4096), Relaxed);
    let a: &'static FrameAllocator = Box::leak(Box::new(FrameAllocator::with_pcp(
        PfnRange::new(Pfn(0), Pfn(frames)),
        virt,
        two_cpus,
        cpu_zero,
    )));
    // SAFETY: the simulated memory is this program's alone, given up to the
    // allocator for good and reachable at `virt`.
    unsafe { a.add_free_memory(PhysAddr::new(4096), (frames - 1) * 4096) }.expect("memory");
    a
}

/// A xorshift generator with a fixed seed: the same choices every run.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        Rng(0x9e37_79b9_7f4a_7c15)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (> 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A fixed random order (the same for every run).
fn shuffle<T>(v: &mut [T]) {
    let mut rng = Rng::new();
    for i in (1..v.len()).rev() {
        v.swap(i, rng.below(i + 1));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, n) = match args.as_slice() {
        [_, p, n] => (p.as_str(), n.parse::<u64>().expect("a count")),
        _ => panic!(
            "usage: pairs <zone|zone-2m|zone-fill|zone-fill-free|zone-scattered|cached|cached-fill|cached-fill-free|on-cpu|ostd-local|ostd-claimed|ostd-local-2m|ostd-local-8k|ostd-local-12k|ostd-fill|ostd-churn> <n>"
        ),
    };
    let o0 = Order::ZERO;
    match path {
        "zone" | "zone-2m" => {
            let m = machine();
            let o = if path == "zone" { o0 } else { Order::HUGE_2M };
            for _ in 0..n {
                let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o).expect("a block");
                m.free(black_box(b)).expect("freed");
            }
        }
        "cached" => {
            let m = machine();
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).expect("CPU 0");
            for _ in 0..n {
                let b = c.alloc(Gfp::KERNEL, o0).expect("a frame");
                c.free(black_box(b)).expect("freed");
            }
        }
        // Bursts of 64 order-0 allocations through CPU 0's cache, then
        // their frees in the same order: past the hot stack's eight, the
        // frees go back into the home's bitmap.
        "cached-burst" => {
            let m = machine();
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).expect("CPU 0");
            let mut v = Vec::with_capacity(64);
            for _ in 0..n / 64 {
                v.extend((0..64).map(|_| c.alloc(Gfp::KERNEL, o0).expect("a frame")));
                for b in v.drain(..) {
                    c.free(black_box(b)).expect("freed");
                }
            }
        }
        // `n` order-0 blocks taken through CPU 0's cache (refilled from
        // the zone as it empties): what a kernel's fill costs.
        "cached-fill" | "cached-fill-free" => {
            let m = machine();
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).expect("CPU 0");
            let mut held: Vec<_> = (0..n)
                .map(|_| c.alloc(Gfp::KERNEL, o0).expect("a frame"))
                .collect();
            if path == "cached-fill-free" {
                shuffle(&mut held);
                for b in held {
                    c.free(b).expect("freed");
                }
            } else {
                black_box(held);
            }
        }
        "on-cpu" => {
            let m = machine();
            for _ in 0..n {
                let (p, o) = m
                    .alloc_on(CpuId(0), NodeId::ZERO, Gfp::KERNEL, o0)
                    .expect("a frame")
                    .into_raw();
                // SAFETY: the block allocated just above, kept only as
                // this number.
                let b = unsafe { m.block_from_raw(black_box(p), o) }.expect("live");
                m.free_on(CpuId(0), b).expect("freed");
            }
        }
        "ostd-local" | "ostd-claimed" | "ostd-local-2m" | "ostd-local-8k" | "ostd-local-12k" => {
            let a = ostd();
            let k = match path {
                "ostd-local-2m" => 512,
                "ostd-local-8k" => 2,
                "ostd-local-12k" => 3,
                _ => 1,
            };
            // A segment aligned to its size, as OSTD asks for huge pages;
            // anything smaller aligned to a frame.
            let align = if k == 512 { k } else { 1 };
            let local = path != "ostd-claimed";
            for _ in 0..n {
                let p = if local {
                    // SAFETY: this program is one thread, CPU 0 for the
                    // allocator.
                    unsafe { a.alloc_frames_local(black_box(0), k, align) }
                } else {
                    a.alloc_frames(k, align)
                }
                .expect("frames");
                let p = black_box(p);
                if local {
                    // SAFETY: the frames allocated just above; one thread,
                    // CPU 0.
                    unsafe { a.dealloc_frames_local(black_box(0), p, k) }
                } else {
                    // SAFETY: the frames allocated just above.
                    unsafe { a.dealloc_frames(p, k) }
                }
                .expect("freed");
            }
        }
        "ostd-fill" => {
            let a = ostd();
            let held: Vec<Pfn> = (0..n)
                // SAFETY: one thread, CPU 0 for the allocator.
                .map(|_| unsafe { a.alloc_frames_local(black_box(0), 1, 1) }.expect("a frame"))
                .collect();
            black_box(held);
        }
        "ostd-churn" => {
            let a = ostd();
            let mut rng = Rng::new();
            let mut live: Vec<(Pfn, u64)> = Vec::with_capacity(2048);
            for _ in 0..n {
                let x = rng.next();
                if live.len() < 2048 && (live.is_empty() || x.is_multiple_of(2)) {
                    let k = match (x >> 8) % 8 {
                        0 => 1 + (x >> 16) % 16,
                        1 => 2,
                        _ => 1,
                    };
                    // SAFETY: one thread, CPU 0 for the allocator.
                    let p = unsafe { a.alloc_frames_local(black_box(0), k, 1) }.expect("frames");
                    live.push((p, k));
                } else {
                    let (p, k) = live.swap_remove(((x >> 16) % live.len() as u64) as usize);
                    // SAFETY: frames allocated above and given back once;
                    // one thread, CPU 0.
                    unsafe { a.dealloc_frames_local(black_box(0), p, k) }.expect("freed");
                }
            }
            black_box(live);
        }
        // `n` order-0 blocks taken through the zone, then (`-free`) given
        // back in a random order: the difference is the frees' cost.
        "zone-fill" | "zone-fill-free" => {
            let m = machine();
            let mut held: Vec<_> = (0..n)
                .map(|_| m.alloc(NodeId::ZERO, Gfp::KERNEL, o0).expect("a frame"))
                .collect();
            if path == "zone-fill-free" {
                shuffle(&mut held);
                for b in held {
                    m.free(b).expect("freed");
                }
            } else {
                black_box(held);
            }
        }
        "zone-scattered" => {
            // Set-up (the same for every `n`): the zone filled, a random
            // half freed. Then `n` steps of a random frame freed and one
            // allocated.
            let m = machine();
            let mut held: Vec<_> =
                std::iter::from_fn(|| m.alloc(NodeId::ZERO, Gfp::KERNEL, o0).ok()).collect();
            let mut rng = Rng::new();
            for _ in 0..held.len() / 2 {
                let i = rng.below(held.len());
                m.free(held.swap_remove(i)).expect("freed");
            }
            for _ in 0..n {
                let i = rng.below(held.len());
                m.free(held.swap_remove(i)).expect("freed");
                held.push(m.alloc(NodeId::ZERO, Gfp::KERNEL, o0).expect("a frame"));
            }
            black_box(held);
        }
        other => panic!("no path {other}"),
    }
}
