//! The OSTD contract on the host, over simulated memory: ranges handed
//! over before any zone, any size and alignment, parts of allocations
//! given back in any order and from several threads, bad input refused
//! and counted with nothing changed.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use pageframe::boot::AddError;
use pageframe::{FreeError, Pfn, PfnRange, PhysAddr};
use pageframe_ostd::{Counters, DeallocError, FrameAllocator};

/// Host memory standing for physical memory from 0: 128 MiB a test.
const PART: u64 = 32768;
const TESTS: u64 = 10;
static BASE: AtomicU64 = AtomicU64::new(0);
static RAM: Mutex<()> = Mutex::new(());

fn virt(pa: PhysAddr) -> *mut u8 {
    assert!(
        pa.get() < TESTS * PART * 4096,
        "{pa:?} is not simulated RAM"
    );
    (BASE.load(Relaxed) + pa.get()) as *mut u8
}

/// Test `k`'s allocator over its 128 MiB, with its memory handed over as
/// OSTD does on a QEMU guest (low memory in two pieces, the rest around
/// the kernel image and the early allocator's frames), and the frames
/// handed over.
fn allocator(k: u64) -> (&'static FrameAllocator, u64) {
    allocator_with(k, false)
}

thread_local! {
    /// The simulated CPU a test thread runs on.
    static CPU: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

fn two_cpus() -> u32 {
    2
}

fn this_cpu() -> u32 {
    CPU.with(|c| c.get())
}

/// [`allocator`], with per-CPU caches for two CPUs if `pcp`.
fn allocator_with(k: u64, pcp: bool) -> (&'static FrameAllocator, u64) {
    {
        let _g = RAM.lock().unwrap();
        if BASE.load(Relaxed) == 0 {
            let l = Layout::from_size_align((TESTS * PART * 4096) as usize, 4096).unwrap();
            // SAFETY: a non-zero size; leaked for the tests' life.
            BASE.store(unsafe { std::alloc::alloc_zeroed(l) } as u64, Relaxed);
        }
    }
    let base = k * PART;
    let window = PfnRange::new(Pfn(base), Pfn(base + PART));
    let a: &'static FrameAllocator = Box::leak(Box::new(if pcp {
        FrameAllocator::with_pcp(window, virt, two_cpus, this_cpu)
    } else {
        FrameAllocator::new(window, virt)
    }));
    let ranges = [
        (0, 8),
        (9, 0x9f),
        (0x100, 0x1776),
        (0x1777, 0x7000),
        (0x7400, PART),
    ];
    for (s, e) in ranges {
        // SAFETY: simulated RAM of this test only, given up for good.
        unsafe { a.add_free_memory(PhysAddr::new((base + s) * 4096), (e - s) * 4096) }.unwrap();
    }
    (a, ranges.iter().map(|(s, e)| e - s).sum())
}

/// A tiny deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The frames a caller holds, as disjoint ranges by start: a frame handed
/// out twice shows as an overlap.
#[derive(Default)]
struct Books(BTreeMap<u64, u64>);
impl Books {
    fn take(&mut self, p: Pfn, n: u64) {
        let (s, e) = (p.get(), p.get() + n);
        if let Some((&a, &b)) = self.0.range(..e).next_back() {
            assert!(
                b <= s,
                "frames {s:#x}..{e:#x} handed out while {a:#x}..{b:#x} are held"
            );
        }
        self.0.insert(s, e);
    }
    /// Takes a random piece of a random holding out of the books.
    fn give(&mut self, rng: &mut Rng) -> Option<(Pfn, u64)> {
        let n = self.0.len() as u64;
        if n == 0 {
            return None;
        }
        let (&s, &e) = self.0.iter().nth(rng.below(n) as usize).unwrap();
        let a = s + rng.below(e - s);
        let b = a + 1 + rng.below(e - a);
        self.0.remove(&s);
        if s < a {
            self.0.insert(s, a);
        }
        if b < e {
            self.0.insert(b, e);
        }
        Some((Pfn(a), b - a))
    }
}

/// How a test calls the allocator.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// The safe calls, which claim the CPU's cache call by call.
    Claimed,
    /// The local calls, through the handle kept for the thread's CPU (each
    /// thread is one CPU, and one CPU is one thread).
    Local,
}

fn alloc(a: &FrameAllocator, path: Path, frames: u64, align: u64) -> Option<Pfn> {
    match path {
        Path::Claimed => a.alloc_frames(frames, align),
        // SAFETY: the test thread is the only one that runs as its CPU.
        Path::Local => unsafe { a.alloc_frames_local(this_cpu(), frames, align) },
    }
}

/// # Safety
///
/// The frames are the caller's, as for `dealloc_frames`.
unsafe fn dealloc(a: &FrameAllocator, path: Path, p: Pfn, n: u64) -> Result<(), DeallocError> {
    match path {
        // SAFETY: the caller's promise.
        Path::Claimed => unsafe { a.dealloc_frames(p, n) },
        // SAFETY: the caller's promise; the thread is its CPU's only one.
        Path::Local => unsafe { a.dealloc_frames_local(this_cpu(), p, n) },
    }
}

/// Every CPU's caches emptied: a kept handle by its CPU, the others by a
/// claim (the test thread plays each CPU in turn).
fn drain_all(a: &FrameAllocator, cpus: u32) {
    // SAFETY: the machine serves only to claim CPUs' caches and drain
    // them; nothing is taken from it or freed through it.
    let m = unsafe { a.machine() }.unwrap();
    for cpu in 0..cpus {
        // SAFETY: no other thread runs as any CPU now.
        if unsafe { a.drain_local(cpu) } == 0
            && let Ok(mut h) = m.cpu(pageframe::CpuId(cpu), pageframe::NodeId::ZERO)
        {
            h.drain();
        }
    }
}

#[test]
fn random_sizes_and_partial_frees_never_hand_a_frame_out_twice() {
    random_sizes_and_partial_frees(0, false, Path::Claimed);
}

#[test]
fn random_sizes_and_partial_frees_through_per_cpu_caches() {
    random_sizes_and_partial_frees(5, true, Path::Claimed);
}

#[test]
fn random_sizes_and_partial_frees_through_kept_handles() {
    random_sizes_and_partial_frees(6, true, Path::Local);
}

fn random_sizes_and_partial_frees(k: u64, pcp: bool, path: Path) {
    let (a, added) = allocator_with(k, pcp);
    let mut books = Books::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for step in 0..20_000 {
        if rng.below(100) < 55 {
            // Mostly small, now and then up to 5 MiB, aligned up to 2 MiB.
            let frames = match rng.below(10) {
                0 => 1 + rng.below(1280),
                1..=3 => 1 + rng.below(64),
                _ => 1 + rng.below(4),
            };
            let align = 1 << rng.below(10);
            if let Some(p) = alloc(a, path, frames, align) {
                assert_eq!(p.get() % align, 0, "step {step}");
                books.take(p, frames);
            }
        } else if let Some((p, n)) = books.give(&mut rng) {
            // SAFETY: the books say these frames are ours.
            unsafe { dealloc(a, path, p, n) }.unwrap();
        }
    }
    let m = a.inspect().unwrap();
    a.validate().unwrap();
    while let Some((p, n)) = books.give(&mut rng) {
        // SAFETY: as above.
        unsafe { dealloc(a, path, p, n) }.unwrap();
    }
    a.validate().unwrap();
    // Everything back, nothing lost: what was added is managed, less the
    // frames carved for metadata and the machine (and, with per-CPU
    // caches, the frames their memory took).
    if path == Path::Local {
        // The local calls went through a handle kept for CPU 0: its caches
        // are held for good.
        // SAFETY: the machine serves only to try a claim, which fails.
        let machine = unsafe { a.machine() }.unwrap();
        assert!(
            machine
                .cpu(pageframe::CpuId(0), pageframe::NodeId::ZERO)
                .is_err(),
            "no handle kept"
        );
    }
    let pcp_frames = if pcp {
        drain_all(a, 2);
        m.managed_pages() - m.free_pages()
    } else {
        0
    };
    assert!(pcp_frames < 64, "{pcp_frames}");
    assert_eq!(m.free_pages() + pcp_frames, m.managed_pages());
    assert!(added - m.managed_pages() < 300);
    assert_eq!(a.counters().refused_frees, 0);
}

#[test]
fn layouts_are_honoured_and_impossible_ones_refused() {
    let (a, _) = allocator(1);
    // 2 MiB aligned single frame, a 4 MiB block, a 12 MiB range.
    for (frames, align) in [(1, 512), (1024, 1024), (3000, 512), (7, 8), (513, 1)] {
        let p = a.alloc_frames(frames, align).unwrap();
        assert_eq!(p.get() % align, 0, "{frames} frames aligned to {align}");
        // SAFETY: just allocated, not used.
        unsafe { a.dealloc_frames(p, frames) }.unwrap();
    }
    assert_eq!(a.alloc_frames(0, 1), None);
    assert_eq!(a.alloc_frames(1, 3), None);
    assert_eq!(a.alloc_frames(PART * 2, 1), None);
    // Sizes whose power of two or alignment lies beyond 64 bits: no frame
    // (a wrapped size would have been one frame).
    for (frames, align) in [
        (1 << 63 | 1, 1),
        (u64::MAX, 1),
        (1, 1 << 63),
        (u64::MAX, 1 << 63),
    ] {
        assert_eq!(
            a.alloc_frames(frames, align),
            None,
            "{frames:#x}, {align:#x}"
        );
    }
    assert_eq!(a.counters().failed_allocs, 7);
    let m = a.inspect().unwrap();
    assert_eq!(m.free_pages(), m.managed_pages());
}

#[test]
fn bad_input_is_refused_counted_and_changes_nothing() {
    let (a, _) = allocator(2);
    let base = 2 * PART;
    // Before any allocation there is no machine to free into.
    // SAFETY: refused: nothing allocated yet.
    let early = unsafe { a.dealloc_frames(Pfn(base + 0x200), 1) };
    assert_eq!(early, Err(DeallocError::NoMachine));
    let p = a.alloc_frames(4, 1).unwrap();
    let m = a.inspect().unwrap();
    let free = m.free_pages();
    // SAFETY (every call below): each is refused, with nothing freed.
    unsafe {
        // Handed over twice, in part.
        let twice = a.add_free_memory(PhysAddr::new((base + 0x1000) * 4096), 8192);
        assert!(matches!(twice, Err(AddError::Overlap(_))));
        // Outside every zone, and the frames the build carved for the
        // machine's own metadata (the top of the window: holes of the
        // zone, but handed over).
        for q in [base + PART + 5, base + PART - 1] {
            match a.dealloc_frames(Pfn(q), 1) {
                Err(DeallocError::Refused(e)) => {
                    assert!(
                        matches!(e.why, FreeError::Hole | FreeError::OutOfRange),
                        "{q:#x}"
                    )
                }
                other => panic!("{q:#x}: {other:?}"),
            }
        }
        // Free frames, and an allocation with one free frame after it.
        assert!(matches!(
            a.dealloc_frames(p + 100, 1),
            Err(DeallocError::Refused(_))
        ));
        assert!(matches!(
            a.dealloc_frames(p, 5),
            Err(DeallocError::Refused(_))
        ));
        assert_eq!(
            a.dealloc(PhysAddr::new(p.addr().get() + 1), 4096),
            Err(DeallocError::Misaligned)
        );
        assert_eq!(a.dealloc(p.addr(), 100), Err(DeallocError::Misaligned));
        // A size that runs past the last frame number says so.
        assert_eq!(a.dealloc_frames(p, u64::MAX), Err(DeallocError::Overflow));
    }
    assert_eq!(m.free_pages(), free);
    assert_eq!(
        a.counters(),
        Counters {
            refused_adds: 1,
            refused_frees: 8,
            failed_allocs: 0,
            adopted_frames: 0
        }
    );
    // The allocation is intact: given back in two parts.
    // SAFETY: ours, not used.
    unsafe {
        a.dealloc_frames(p + 2, 2).unwrap();
        a.dealloc_frames(p, 2).unwrap();
        // A second free of the same frames is refused.
        assert!(a.dealloc_frames(p, 1).is_err());
    }
    assert_eq!(m.free_pages(), m.managed_pages());
    a.validate().unwrap();
}

#[test]
fn frames_never_handed_over_are_adopted_once() {
    let (a, _) = allocator(4);
    let base = 4 * PART;
    let p = a.alloc_frames(1, 1).unwrap();
    let m = a.inspect().unwrap();
    let managed = m.managed_pages();
    // The frame between the two low pieces and the early allocator's
    // frames around the kernel image, given back one by one as OSTD does.
    // SAFETY: simulated RAM never handed over, given up for good.
    unsafe {
        a.dealloc_frames(Pfn(base + 8), 1).unwrap();
        for q in 0x7000..0x7400 {
            a.dealloc_frames(Pfn(base + q), 1).unwrap();
        }
    }
    assert_eq!(m.managed_pages(), managed + 0x401);
    assert_eq!(a.counters().adopted_frames, 0x401);
    // Given back twice: free now, refused.
    // SAFETY: refused, nothing freed.
    let twice = unsafe { a.dealloc_frames(Pfn(base + 0x7100), 1) };
    assert!(matches!(twice, Err(DeallocError::Refused(e)) if e.why == FreeError::AlreadyFree));
    // The adopted memory merges with its neighbours: the zone is whole.
    // SAFETY: ours.
    unsafe { a.dealloc_frames(p, 1) }.unwrap();
    assert_eq!(m.free_pages(), m.managed_pages());
    a.validate().unwrap();
}

#[test]
fn threads_free_parts_of_each_others_allocations() {
    threads_free_parts(3, Path::Claimed, 4);
}

#[test]
fn threads_free_parts_of_each_others_allocations_through_kept_handles() {
    threads_free_parts(7, Path::Local, 2);
}

/// `threads` threads, as CPUs 0 and 1 (the local path: one thread a CPU).
fn threads_free_parts(k: u64, path: Path, threads: u64) {
    let (a, _) = allocator_with(k, true);
    let shared: Mutex<Books> = Mutex::new(Books::default());
    std::thread::scope(|s| {
        for t in 0..threads {
            let shared = &shared;
            s.spawn(move || {
                CPU.with(|c| c.set(t as u32 % 2));
                let mut rng = Rng(0x1234_5678 + t);
                for _ in 0..5_000 {
                    if rng.below(2) == 0 {
                        let frames = 1 + rng.below(40);
                        if let Some(p) = alloc(a, path, frames, 1) {
                            shared.lock().unwrap().take(p, frames);
                        }
                    } else {
                        let piece = shared.lock().unwrap().give(&mut rng);
                        if let Some((p, n)) = piece {
                            // SAFETY: taken out of the shared books, so
                            // this thread alone gives these frames back.
                            unsafe { dealloc(a, path, p, n) }.unwrap();
                        }
                    }
                }
            });
        }
    });
    let mut rng = Rng(7);
    let mut books = shared.into_inner().unwrap();
    while let Some((p, n)) = books.give(&mut rng) {
        // SAFETY: as above.
        unsafe { a.dealloc_frames(p, n) }.unwrap();
    }
    let m = a.inspect().unwrap();
    drain_all(a, 2);
    // Everything back but the caches' own memory.
    let used = m.managed_pages() - m.free_pages();
    assert!(used > 0 && used < 64, "{used}");
    a.validate().unwrap();
}

#[test]
fn memory_beyond_the_address_width_is_refused_and_the_rest_works() {
    let (a, added) = allocator(8);
    // SAFETY: each call is refused, with nothing taken.
    unsafe {
        for (addr, size) in [
            (1 << 60, u64::MAX),
            (1 << 60, 1 << 20),
            (u64::MAX - 4095, 8192),
        ] {
            let r = a.add_free_memory(PhysAddr::new(addr), size);
            assert!(
                matches!(r, Err(AddError::AddressWidth { .. })),
                "{addr:#x} + {size:#x}: {r:?}"
            );
        }
    }
    assert_eq!(a.counters().refused_adds, 3);
    let p = a.alloc_frames(16, 16).unwrap();
    let m = a.inspect().unwrap();
    assert!(m.managed_pages() <= added);
    // SAFETY: just allocated, not used.
    unsafe { a.dealloc_frames(p, 16) }.unwrap();
    assert_eq!(m.free_pages(), m.managed_pages());
    a.validate().unwrap();
}

/// Through a kept handle too, a few frames given back twice, or in a way
/// that is no block or run they came as, are refused once each (counted
/// once), with nothing changed.
#[test]
fn a_few_frames_refused_through_kept_handles_change_nothing() {
    let (a, _) = allocator_with(9, true);
    let cpu = this_cpu();
    // SAFETY (every call): the frames are this test's; each refused call
    // frees nothing.
    unsafe {
        // The handle is kept by the first call; its caches empty after.
        let first = a.alloc_frames_local(cpu, 1, 1).unwrap();
        a.dealloc_frames_local(cpu, first, 1).unwrap();
        a.drain_local(cpu);
        let m = a.inspect().unwrap();
        let base = m.free_pages();
        let block = a.alloc_frames_local(cpu, 4, 1).unwrap();
        let run = a.alloc_frames_local(cpu, 3, 1).unwrap();
        // Sixteen frames, a power of two past the cached orders: a run,
        // given back in two parts.
        let big = a.alloc_frames_local(cpu, 16, 1).unwrap();
        a.dealloc_frames_local(cpu, big + 4, 12).unwrap();
        a.dealloc_frames_local(cpu, big, 4).unwrap();
        a.dealloc_frames_local(cpu, run, 3).unwrap();
        a.dealloc_frames_local(cpu, block, 4).unwrap();
        let free = m.free_pages();
        for (p, n) in [(run, 3), (block, 4), (block + 1, 2), (run, 2), (big, 16)] {
            let r = a.dealloc_frames_local(cpu, p, n);
            assert!(
                matches!(r, Err(DeallocError::Refused(_))),
                "{p:?} {n}: {r:?}"
            );
        }
        assert_eq!(a.counters().refused_frees, 5);
        assert_eq!(m.free_pages(), free, "nothing changed");
        a.validate().unwrap();
        a.drain_local(cpu);
        assert_eq!(m.free_pages(), base, "every frame back");
    }
    a.validate().unwrap();
}
