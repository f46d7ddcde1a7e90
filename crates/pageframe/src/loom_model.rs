//! Loom models of the cross-CPU ownership protocol: the per-CPU caches of a
//! real (tiny) machine, its ownership bytes and its zone lock, with every
//! interleaving loom explores within its bounds; and of the allocation
//! from any context, whose thread the lock refuses to `lock` for. Run with `cargo xtask
//! loom` (`RUSTFLAGS="--cfg loom" cargo test -p pageframe --lib --release
//! loom_model`).

use std::boxed::Box;
use std::cell::Cell;
use std::mem::MaybeUninit;
use std::sync::OnceLock;
use std::vec;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use pageframe_buddy::{BuddyConfig, FreeError, Order, Pfn, PfnRange};
use pageframe_mobility::MobilityConfig;
use pageframe_pcp::CpuId;

use crate::Block;
use crate::lock::{GuardSend, RawMutex};
use crate::{Gfp, Machine, MachineConfig, NodeId, ZoneKind};

/// A spin lock loom can see: a loom atomic, and a yield while spinning so
/// the holder gets to run. Created lazily (loom atomics are not `const`).
struct LoomLock(OnceLock<AtomicBool>);

impl LoomLock {
    fn flag(&self) -> &AtomicBool {
        self.0.get_or_init(|| AtomicBool::new(false))
    }
}

// SAFETY: mutual exclusion by compare-and-swap on one flag, acquire on
// lock and release on unlock.
unsafe impl RawMutex for LoomLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = LoomLock(OnceLock::new());
    type GuardMarker = GuardSend;

    fn lock(&self) {
        assert!(
            !NO_WAIT.with(Cell::get),
            "a call that must not wait took a lock with `lock`"
        );
        while !self.try_lock() {
            thread::yield_now();
        }
    }

    fn try_lock(&self) -> bool {
        self.flag()
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock(&self) {
        self.flag().store(false, Ordering::Release);
    }
}

loom::thread_local! {
    /// Whether this thread is in a call that must not wait
    /// ([`Machine::try_alloc`]): [`LoomLock`] then refuses `lock`.
    static NO_WAIT: Cell<bool> = Cell::new(false);
}

/// `f` as a call that must not wait: any `lock` in it fails the model.
fn no_wait<T>(f: impl FnOnce() -> T) -> T {
    NO_WAIT.with(|w| w.set(true));
    let r = f();
    NO_WAIT.with(|w| w.set(false));
    r
}

/// The lock the models' zones take, and no hooks.
type Loom = (LoomLock, crate::debug::NoHooks);

type LoomMachine = Machine<'static, Loom>;

const FRAMES: u64 = 16;

/// One node, one zone of 16 frames (max order 3), watermarks at zero, and
/// per-CPU caches for two CPUs.
fn machine() -> &'static LoomMachine {
    machine_of(&[(ZoneKind::Normal, 0)])
}

/// One node with a zone of 16 frames (max order 3) of each given kind at
/// each given first frame, watermarks at zero, and per-CPU caches for two
/// CPUs.
fn machine_of(zones: &[(ZoneKind, u64)]) -> &'static LoomMachine {
    let config = MachineConfig {
        mobility: MobilityConfig {
            buddy: BuddyConfig::new(Order::new_truncated(3)),
            pageblock_order: Order::new_truncated(3),
            ..MobilityConfig::DEFAULT
        },
        ..MachineConfig::SINGLE_NODE
    };
    let slot: &'static mut MaybeUninit<LoomMachine> = Box::leak(Box::new_uninit());
    let m = crate::boot::Builder::new(config).lock().build_in(slot);
    for &(kind, start) in zones {
        let span = PfnRange::new(Pfn(start), Pfn(start + FRAMES));
        let meta =
            Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
        m.add_zone(NodeId::ZERO, kind, span, meta).unwrap();
        m.add_free_range(span).unwrap();
    }
    m.tunables().set_min_free_kbytes(0);
    // Touches every stripe's lock here, so its lazily made flag is made
    // before the threads share it.
    m.drain_stripes();
    let bytes = m.pcp_bytes(2).unwrap();
    m.enable_pcp(
        2,
        Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice()),
    )
    .unwrap();
    m
}

/// Interleavings explored by the last model (printed by each test).
static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn builder() -> loom::model::Builder {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 100_000;
    b
}

/// Everything back in the zone, and the books agree.
fn settled(m: &LoomMachine) {
    RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    m.drain_pcp(None, |_| thread::yield_now());
    let frames = m.managed_pages();
    assert_eq!(m.free_pages(), frames);
    m.validate().unwrap();
    m.drain_stripes();
    assert_eq!(m.free_pages(), frames);
    assert_eq!(m.stripe_frames(), 0);
    m.validate().unwrap();
}

/// A second block of the same frames: what only a broken `unsafe` contract
/// makes (a number turned into a block twice), to race two frees of one
/// frame against the ownership byte.
fn twin(m: &LoomMachine, b: &Block) -> Block {
    Block::new(m.id, b.zone_ref(), b.pfn(), b.order())
}

/// The reason of a refused free (`None`: it went through).
fn why(r: Result<(), crate::Refused<Block>>) -> Option<FreeError> {
    r.err().map(|e| e.reason())
}

/// Two CPUs free the same frame at once (through twin blocks, as only an
/// `unsafe` misuse can make), one through its cache and one through the
/// zone: exactly one succeeds, the other gets a typed error, and the frame
/// is in exactly one place afterwards.
#[test]
fn two_cpus_freeing_one_frame_have_one_winner() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let b = {
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
            c.alloc(Gfp::KERNEL, Order::ZERO).unwrap()
        };
        let b2 = twin(m, &b);
        let t = thread::spawn(move || {
            let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
            why(c.free(b2))
        });
        let mut c0 = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        let mine = why(c0.free(b));
        let theirs = t.join().unwrap();
        assert!(mine.is_none() != theirs.is_none(), "{mine:?} / {theirs:?}");
        for r in [mine, theirs] {
            assert!(matches!(r, None | Some(FreeError::AlreadyFree)));
        }
        drop(c0);
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// The same race between a cache and the zone path (`Machine::free`).
#[test]
fn cache_and_zone_freeing_one_frame_have_one_winner() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
        let b2 = twin(m, &b);
        let t = thread::spawn(move || why(m.free(b2)));
        let mine = {
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
            why(c.free(b))
        };
        let theirs = t.join().unwrap();
        assert!(mine.is_none() != theirs.is_none(), "{mine:?} / {theirs:?}");
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A CPU frees into its cache while another CPU drains every cache: the
/// drain waits for the owner, which honours it at its next operation or
/// when it lets the cache go; nothing is lost.
#[test]
fn a_free_racing_a_remote_drain() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
        // A kernel claims each CPU's handle once and keeps it.
        let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
        let t = thread::spawn(move || {
            c.free(b).unwrap();
            thread::yield_now();
            c.tick();
        });
        m.drain_pcp(None, |_| thread::yield_now());
        t.join().unwrap();
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A CPU keeps a frame it freed hot while another CPU drains every cache:
/// the owner sends its hot frames on before it honours the request (or
/// when it lets its handle go), so the frame is free in the zone when the
/// drain returns.
#[test]
fn a_remote_drain_takes_the_hot_frames() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
        let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
        c.free(b).unwrap();
        assert_eq!(c.hot_frames(NodeId::ZERO, ZoneKind::Normal), 1);
        let t = thread::spawn(move || {
            c.tick();
            drop(c);
        });
        m.drain_pcp(None, |_| thread::yield_now());
        m.drain_stripes();
        assert_eq!(m.free_pages(), m.managed_pages(), "the hot frame is back");
        t.join().unwrap();
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A drain of every cache while a CPU allocates through its cache (refills
/// from the zone) and frees: the allocated frames are distinct and come
/// back; the zone ends whole.
#[test]
fn drain_all_during_allocation() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        let t = thread::spawn(move || {
            let a = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
            let b = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
            assert_ne!(a.pfn(), b.pfn());
            c.free(a).unwrap();
            c.free(b).unwrap();
        });
        m.drain_pcp(None, |_| thread::yield_now());
        t.join().unwrap();
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A frame an order-0 stripe handed out is freed by another CPU while the
/// stripes give their reservations back (as before a contiguous
/// allocation): the free lands in the stripe or, once the chunk is the
/// zone's again, in the zone; nothing is lost or freed twice.
#[test]
fn a_stripe_frame_freed_while_the_stripes_are_given_back() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        // `Machine::alloc` of order 0 goes through a stripe's reservation.
        let b = m
            .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .unwrap();
        assert!(
            m.stripe_frames() > 0,
            "the stripe holds the rest of the chunk"
        );
        let stale = twin(m, &b);
        let t = thread::spawn(move || why(m.free(b)));
        m.drain_stripes();
        assert_eq!(t.join().unwrap(), None);
        assert_eq!(why(m.free(stale)), Some(FreeError::AlreadyFree));
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// The machine's pageblock order (3: two pageblocks a zone).
const PAGEBLOCK: Order = Order::new_truncated(3);

/// A huge page freed twice at once (twin blocks, as only an `unsafe`
/// misuse makes) into a zone whose pageblock pool has room: one free puts
/// it in the pool, the other is refused; the block is in one place.
#[test]
fn two_frees_of_one_huge_page_into_the_pool_have_one_winner() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        m.tunables().set_pageblock_pool(1).unwrap();
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, PAGEBLOCK).unwrap();
        let b2 = twin(m, &b);
        let t = thread::spawn(move || why(m.free(b2)));
        let mine = why(m.free(b));
        let theirs = t.join().unwrap();
        assert!(mine.is_none() != theirs.is_none(), "{mine:?} / {theirs:?}");
        for r in [mine, theirs] {
            assert!(matches!(r, None | Some(FreeError::AlreadyFree)));
        }
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// One CPU frees a huge page into the pool while another takes one (from
/// the pool or the free lists) and gives it back, and a third gives the
/// pool back to the lists: every free succeeds, and everything comes back
/// with the books in agreement.
#[test]
fn a_pool_free_beside_a_pool_alloc_and_a_drain() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        m.tunables().set_pageblock_pool(1).unwrap();
        let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, PAGEBLOCK).unwrap();
        let t = thread::spawn(move || m.free(b).unwrap());
        let u = thread::spawn(move || {
            if let Ok(c) = m.alloc(NodeId::ZERO, Gfp::KERNEL, PAGEBLOCK) {
                thread::yield_now();
                m.free(c).unwrap();
            }
        });
        m.drain_stripes();
        t.join().unwrap();
        u.join().unwrap();
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Two CPUs allocate and free order-0 frames through the stripes at once
/// (each takes a free stripe by `try_lock`): the frames are distinct, and
/// all come back.
#[test]
fn two_cpus_allocating_through_the_stripes_get_distinct_frames() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let t = thread::spawn(move || {
            let a = m
                .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                .unwrap();
            thread::yield_now();
            a
        });
        let b = m
            .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .unwrap();
        let a = t.join().unwrap();
        assert_ne!(a.pfn(), b.pfn());
        let t = thread::spawn(move || why(m.free(a)));
        m.free(b).unwrap();
        assert_eq!(t.join().unwrap(), None);
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A CPU's cache refills (under the zone lock, past the stripes) while
/// its type's lists are empty and a stripe holds the type's free frames,
/// as another CPU allocates through that stripe: the refill takes the
/// reservation back only from a stripe free at that moment (`try_lock`:
/// the zone lock comes after a stripe's), so neither waits on the other;
/// the frames are distinct and all come back.
#[test]
fn a_refill_taking_a_stripes_frames_beside_a_striped_allocation() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        // The first unmovable frame claims a pageblock; the next comes
        // from a stripe that reserved the rest of it.
        let first = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
        let second = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
        assert!(
            m.stripe_frames() > 0,
            "a stripe holds the claimed pageblock"
        );
        let t = thread::spawn(move || m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap());
        let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        let mine = c.alloc(Gfp::KERNEL, Order::ZERO).unwrap();
        let theirs = t.join().unwrap();
        assert_ne!(mine.pfn(), theirs.pfn());
        c.free(mine).unwrap();
        drop(c);
        for b in [first, second, theirs] {
            m.free(b).unwrap();
        }
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// Two CPUs, each holding its handle with a frame cached in each of two
/// zones, drain every cache of the machine at the same moment: each serves
/// the other's requests in both zones while it waits, so both drains end
/// (loom fails a run that never does) and every frame is back.
#[test]
fn two_cpus_draining_two_zones_at_once() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine_of(&[(ZoneKind::Dma32, 0), (ZoneKind::Normal, 1 << 20)]);
        let fill = |c: &mut crate::CpuCache<'static, 'static, Loom>| {
            for gfp in [Gfp::KERNEL | Gfp::DMA32, Gfp::KERNEL] {
                let b = c.alloc(gfp, Order::ZERO).unwrap();
                c.free(b).unwrap();
            }
        };
        let mut c1 = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
        let mut c0 = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
        fill(&mut c0);
        fill(&mut c1);
        let t = thread::spawn(move || {
            m.drain_pcp(Some(&mut c1), |_| thread::yield_now());
            drop(c1);
        });
        m.drain_pcp(Some(&mut c0), |_| thread::yield_now());
        drop(c0);
        t.join().unwrap();
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A call from any context on CPU 0 while another CPU drains every cache:
/// CPU 0's cache holds frames its owner left there. In every interleaving
/// the call takes locks only with `try_lock` (a `lock` fails the model),
/// gets a frame or `Busy`, the drain ends, and, unless the call refilled
/// the cache after the drain, the drain left it empty: the call never
/// acknowledges a drain it did not do.
#[test]
fn any_context_alloc_racing_a_drain() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let cached = {
            let mut c = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
            let b = c.alloc(Gfp::empty(), Order::ZERO).unwrap();
            c.free(b).unwrap();
            c.cache_info(NodeId::ZERO, ZoneKind::Normal).unwrap()
        };
        assert!(cached.count > 0);
        let t = thread::spawn(move || {
            no_wait(|| m.try_alloc(CpuId(0), NodeId::ZERO, Gfp::empty(), Order::ZERO))
        });
        m.drain_pcp(None, |_| thread::yield_now());
        let got = t.join().unwrap();
        let after = m
            .cpu(CpuId(0), NodeId::ZERO)
            .unwrap()
            .cache_info(NodeId::ZERO, ZoneKind::Normal)
            .unwrap();
        if after.stats.refills == cached.stats.refills {
            assert_eq!(after.count, 0, "the drain left frames in the cache");
        }
        match got {
            Ok(b) => m.free(b).unwrap(),
            Err(e) => assert_eq!(e, crate::AllocError::Busy),
        }
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A call from any context on CPU 0 while CPU 1 allocates through the
/// zone and through its cache (a refill under the zone lock): the call
/// only ever `try_lock`s, every block handed out is distinct (a refill
/// may leave the zone empty for the others), and all come back.
#[test]
fn any_context_alloc_beside_the_zone_path() {
    RUNS.store(0, std::sync::atomic::Ordering::Relaxed);
    builder().check(|| {
        let m = machine();
        let mut c = m.cpu(CpuId(1), NodeId::ZERO).unwrap();
        let t = thread::spawn(move || {
            let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new_truncated(1));
            let a = c.alloc(Gfp::KERNEL, Order::ZERO);
            [a.ok(), b.ok()]
        });
        let got = no_wait(|| m.try_alloc(CpuId(0), NodeId::ZERO, Gfp::empty(), Order::ZERO));
        let mut all: std::vec::Vec<Block> = t.join().unwrap().into_iter().flatten().collect();
        match got {
            Ok(g) => all.push(g),
            Err(e) => assert!(
                matches!(e, crate::AllocError::Busy | crate::AllocError::OutOfMemory),
                "{e:?}"
            ),
        }
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert!(
                    x.range().intersect(&y.range()).is_empty(),
                    "{x:?} and {y:?}"
                );
            }
        }
        for b in all {
            m.free(b).unwrap();
        }
        settled(m);
    });
    std::println!(
        "interleavings: {}",
        RUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
}
