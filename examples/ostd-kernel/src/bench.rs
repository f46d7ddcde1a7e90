//! pageframe beside OSTD's default frame allocator (`osdk-frame-allocator`)
//! in one boot, on the same workloads and the same amount of memory: each
//! gets an arena of `ARENA_FRAMES` frames taken from the kernel's
//! allocator, and is driven through `GlobalFrameAllocator` alone.

extern crate alloc;

use alloc::vec::Vec;
use core::alloc::Layout;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};

use ostd::cpu::{CpuSet, PinCurrentCpu, num_cpus};
use ostd::mm::frame::GlobalFrameAllocator;
use ostd::prelude::*;
use pageframe::{Pfn, PfnRange};
use pageframe_ostd::FrameAllocator;

/// 256 MiB each.
pub const ARENA_FRAMES: u64 = 1 << 16;
const PAGE: usize = 4096;
const HUGE: usize = 2 << 20;

/// The TSC, the cycle counter every row is read from.
fn cycles() -> u64 {
    #[allow(unsafe_code, unused_unsafe)]
    // SAFETY: `rdtsc` reads a counter; it has no memory effects.
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn frames(n: usize) -> Layout {
    Layout::from_size_align(n * PAGE, PAGE).unwrap()
}

/// Cycles per alloc+free pair of one frame.
fn frame_pairs(a: &dyn GlobalFrameAllocator, n: u64) -> u64 {
    let t = cycles();
    for _ in 0..n {
        let p = a.alloc(frames(1)).unwrap();
        a.dealloc(p, PAGE);
    }
    (cycles() - t) / n
}

/// Cycles per allocation filling `n` frames, then per free in random order.
fn fill_then_random_free(a: &dyn GlobalFrameAllocator, n: usize) -> (u64, u64) {
    let mut held = Vec::with_capacity(n);
    let t = cycles();
    for _ in 0..n {
        held.push(a.alloc(frames(1)).unwrap());
    }
    let fill = (cycles() - t) / n as u64;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for i in (1..held.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        held.swap(i, j);
    }
    let t = cycles();
    for p in held {
        a.dealloc(p, PAGE);
    }
    (fill, (cycles() - t) / n as u64)
}

/// Cycles per alloc+free pair of a 2 MiB-aligned 2 MiB segment.
fn huge_pairs(a: &dyn GlobalFrameAllocator, n: u64) -> u64 {
    let l = Layout::from_size_align(HUGE, HUGE).unwrap();
    let t = cycles();
    for _ in 0..n {
        let p = a.alloc(l).unwrap();
        a.dealloc(p, HUGE);
    }
    (cycles() - t) / n
}

/// How many 2 MiB-aligned 2 MiB segments can be had now (all given back).
fn huge_available(a: &dyn GlobalFrameAllocator) -> usize {
    let l = Layout::from_size_align(HUGE, HUGE).unwrap();
    let mut got = Vec::new();
    while let Some(p) = a.alloc(l) {
        got.push(p);
    }
    let n = got.len();
    for p in got {
        a.dealloc(p, HUGE);
    }
    n
}

// The churn runs on every CPU at once, started by an inter-processor call
// (a plain `fn`), so its parameters and results are statics.
static CHURN_TARGET: AtomicUsize = AtomicUsize::new(0);
/// The CPUs taking part in the churn: all, or the one that starts it.
static CHURN_CPUS: AtomicUsize = AtomicUsize::new(0);
static ARRIVED: AtomicUsize = AtomicUsize::new(0);
static DONE: AtomicUsize = AtomicUsize::new(0);
static CHURN_CYCLES: AtomicU64 = AtomicU64::new(0);
static CHURN_OPS: AtomicU64 = AtomicU64::new(0);
/// What each CPU keeps after its churn (frames of scattered allocations),
/// given back after the huge-block count.
static KEPT: ostd::sync::SpinLock<Vec<(usize, usize)>> = ostd::sync::SpinLock::new(Vec::new());

const CHURN_OPS_PER_CPU: u64 = 200_000;
const CHURN_LIVE: usize = 2048;

/// The allocator the churn drives, chosen before it starts.
fn target() -> &'static dyn GlobalFrameAllocator {
    if CHURN_TARGET.load(SeqCst) == 0 {
        &PAGEFRAME
    } else {
        &PEER
    }
}

/// One CPU's churn: allocations of 1 to 16 frames (mostly 1), freed in
/// random order, a live set of `CHURN_LIVE`; a tenth of the last live set
/// is kept (fragmenting the arena) for the huge-block count.
fn churn() {
    let cpus = CHURN_CPUS.load(SeqCst);
    ARRIVED.fetch_add(1, SeqCst);
    while ARRIVED.load(SeqCst) < cpus {
        core::hint::spin_loop();
    }
    let a = target();
    let cpu = u64::from(u32::from(ostd::cpu::CpuId::current_racy()));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (cpu + 1) * 0x1000_0001);
    let mut live: Vec<(usize, usize)> = Vec::with_capacity(CHURN_LIVE);
    let mut ops = 0;
    let t = cycles();
    for _ in 0..CHURN_OPS_PER_CPU {
        let r = rng.next();
        if live.len() < CHURN_LIVE && (live.is_empty() || r % 2 == 0) {
            let n = match (r >> 8) % 8 {
                0 => 1 + ((r >> 16) % 16) as usize,
                1 => 2,
                _ => 1,
            };
            if let Some(p) = a.alloc(frames(n)) {
                live.push((p, n * PAGE));
            }
        } else {
            let i = ((r >> 16) % live.len() as u64) as usize;
            let (p, size) = live.swap_remove(i);
            a.dealloc(p, size);
        }
        ops += 1;
    }
    CHURN_CYCLES.fetch_add(cycles() - t, SeqCst);
    CHURN_OPS.fetch_add(ops, SeqCst);
    let mut kept = Vec::new();
    for (i, (p, size)) in live.into_iter().enumerate() {
        if i % 10 == 0 {
            kept.push((p, size));
        } else {
            a.dealloc(p, size);
        }
    }
    KEPT.disable_irq().lock().extend(kept);
    DONE.fetch_add(1, SeqCst);
}

/// Runs the churn against allocator `which` (0 pageframe, 1 the peer) on
/// every CPU, or on this one alone if `alone`: cycles per operation (mean
/// over CPUs), and the 2 MiB segments available afterwards with a tenth of
/// each CPU's live set kept. On one CPU, under `-icount`, the count
/// repeats exactly from boot to boot; on several it follows how QEMU
/// interleaves the vCPUs (each one's clock counts the others' slices).
fn churn_on(which: usize, alone: bool) -> (u64, usize) {
    CHURN_TARGET.store(which, SeqCst);
    ARRIVED.store(0, SeqCst);
    DONE.store(0, SeqCst);
    CHURN_CYCLES.store(0, SeqCst);
    CHURN_OPS.store(0, SeqCst);
    let cpus = if alone { 1 } else { num_cpus() };
    CHURN_CPUS.store(cpus, SeqCst);
    if alone {
        churn();
    } else {
        let here = ostd::task::disable_preempt().current_cpu();
        let mut others = CpuSet::new_full();
        others.remove(here);
        let pending = ostd::smp::inter_processor_call(&others, churn);
        churn();
        pending.wait();
    }
    while DONE.load(SeqCst) < cpus {
        core::hint::spin_loop();
    }
    let per_op = CHURN_CYCLES.load(SeqCst) / CHURN_OPS.load(SeqCst).max(1);
    let a = target();
    let huge = huge_available(a);
    for (p, size) in core::mem::take(&mut *KEPT.disable_irq().lock()) {
        a.dealloc(p, size);
    }
    (per_op, huge)
}

/// The two arena allocators. pageframe's arena is handed over after boot,
/// when OSTD's kernel page table maps all memory: its window is all of it.
static PAGEFRAME: FrameAllocator =
    FrameAllocator::for_ostd_in(PfnRange::new(Pfn(0), Pfn(u64::MAX >> 12)));
static PEER: osdk_frame_allocator::FrameAllocator = osdk_frame_allocator::FrameAllocator;

/// Gives each allocator an arena, runs every workload on both, and prints
/// the table (cycles, and pageframe's as a ratio of the peer's).
pub fn run(kernel: &FrameAllocator) {
    for a in [&PAGEFRAME as &dyn GlobalFrameAllocator, &PEER] {
        let base = kernel.alloc_frames(ARENA_FRAMES, 512).expect("an arena");
        a.add_free_memory(base.addr().get() as usize, (ARENA_FRAMES as usize) * PAGE);
    }
    // Build pageframe's arena machine before any timing.
    let p = PAGEFRAME.alloc(frames(1)).unwrap();
    GlobalFrameAllocator::dealloc(&PAGEFRAME, p, PAGE);
    let huge0 = [huge_available(&PAGEFRAME), huge_available(&PEER)];
    let mut rows: Vec<(&str, [u64; 2])> = Vec::new();
    let both = |f: &dyn Fn(&dyn GlobalFrameAllocator) -> u64| [f(&PAGEFRAME), f(&PEER)];
    rows.push(("4 KiB alloc+free pair", both(&|a| frame_pairs(a, 200_000))));
    let fills = [
        fill_then_random_free(&PAGEFRAME, 50_000),
        fill_then_random_free(&PEER, 50_000),
    ];
    rows.push(("4 KiB alloc, filling 200 MiB", [fills[0].0, fills[1].0]));
    rows.push(("4 KiB free, random order", [fills[0].1, fills[1].1]));
    rows.push(("2 MiB alloc+free pair", both(&|a| huge_pairs(a, 2_000))));
    // The churn on this CPU alone first: a count that repeats exactly
    // under `-icount`, where the one on every CPU follows how QEMU
    // interleaves the vCPUs.
    let alone = [churn_on(0, true), churn_on(1, true)];
    rows.push(("mixed churn on one CPU, per op", [alone[0].0, alone[1].0]));
    let churn = [churn_on(0, false), churn_on(1, false)];
    rows.push(("mixed churn on every CPU, per op", [churn[0].0, churn[1].0]));
    println!(
        "bench: {} CPUs, arenas of {} MiB each, cycles (TSC) per operation",
        num_cpus(),
        ARENA_FRAMES * 4 / 1024
    );
    println!("bench: | workload | pageframe | osdk-frame-allocator | ratio |");
    for (name, [p, o]) in &rows {
        let ratio_x100 = p * 100 / (*o).max(1);
        println!(
            "bench: | {} | {} | {} | {}.{:02} |",
            name,
            p,
            o,
            ratio_x100 / 100,
            ratio_x100 % 100
        );
    }
    println!(
        "bench: | 2 MiB segments free before / after the churn | {} / {} | {} / {} | |",
        huge0[0], churn[0].1, huge0[1], churn[1].1
    );
    let c = PAGEFRAME.counters();
    assert_eq!((c.refused_frees, c.refused_adds), (0, 0), "{:?}", c);
    PAGEFRAME.validate().unwrap();
}
