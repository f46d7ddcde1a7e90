//! Set-up calls through `&self` are atomic: a call that another CPU's
//! call of the same kind beats gets its error and has changed nothing:
//! no zone took part of its range, and no frame it did not take was
//! written. Each race is forced: the first call is held inside its
//! poisoning write (the hook) while the second runs.

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::watchdog::Watchdog;
use common::{leak, r};
use pageframe::debug::{Hooks, PAGE_POISON, Poisoning};
use pageframe::zone::RangeError;
use pageframe::{
    Gfp, Machine, MachineConfig, NodeId, Order, PAGE_SIZE, Pfn, PfnRange, SetupError, ZoneKind,
};

const BASE: u64 = 1 << 20;
/// Two zones of this many frames each, back to back.
const HALF: u64 = 2048;
/// How long the held call waits for the other one to finish: long enough
/// for it to run whole when nothing stops it.
const HOLD: Duration = Duration::from_millis(300);

/// Simulated memory whose first poisoning write, when asked, waits until
/// the test lets it go (or [`HOLD`] passes).
struct Memory {
    bytes: Mutex<Vec<u8>>,
    hold_next: AtomicBool,
    held: AtomicBool,
    release: AtomicBool,
}

impl Memory {
    fn offset(p: Pfn) -> usize {
        ((p.get() - BASE) * PAGE_SIZE) as usize
    }

    fn read(&self, frames: PfnRange) -> Vec<u8> {
        let b = self.bytes.lock().unwrap();
        b[Self::offset(frames.start)..Self::offset(frames.end)].to_vec()
    }

    fn write(&self, frames: PfnRange, byte: u8) {
        let mut b = self.bytes.lock().unwrap();
        b[Self::offset(frames.start)..Self::offset(frames.end)].fill(byte);
    }
}

impl Hooks for Memory {
    fn poisoning(&self) -> Poisoning {
        Poisoning::POISON
    }
    fn fill(&self, frames: PfnRange, byte: u8) {
        if self.hold_next.swap(false, SeqCst) {
            self.held.store(true, SeqCst);
            let t = Instant::now();
            while !self.release.load(SeqCst) && t.elapsed() < HOLD {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.write(frames, byte);
    }
}

type Poisoned = Machine<'static, (pageframe::lock::SpinLock, Memory)>;

/// Two Normal-and-Movable zones of [`HALF`] frames, nothing handed over
/// yet, over memory that starts out as 0x5a.
fn machine() -> &'static Poisoned {
    let m = Box::leak(
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE)
            .hooks(Memory {
                bytes: Mutex::new(vec![0x5a; (2 * HALF * PAGE_SIZE) as usize]),
                hold_next: AtomicBool::new(false),
                held: AtomicBool::new(false),
                release: AtomicBool::new(false),
            })
            .build_boxed(),
    );
    let low = r(BASE, BASE + HALF);
    let high = r(BASE + HALF, BASE + 2 * HALF);
    for (kind, span) in [(ZoneKind::Normal, low), (ZoneKind::Movable, high)] {
        let meta = leak(m.zone_metadata_bytes(span));
        m.add_zone(NodeId::ZERO, kind, span, meta).unwrap();
    }
    m
}

/// Hands `first` over on another thread, held inside its poisoning write,
/// and meanwhile `second` here; if the second call succeeds, a block is
/// taken from what it handed over and its owner writes it. Returns both
/// results and the block's frames with what its owner wrote.
fn race(
    m: &'static Poisoned,
    first: PfnRange,
    second: PfnRange,
) -> (
    Result<(), SetupError>,
    Result<(), SetupError>,
    Option<PfnRange>,
) {
    let mem = m.inspect().hooks();
    let dog = Watchdog::start(1, &["add_free_range"], Duration::from_secs(30));
    mem.hold_next.store(true, SeqCst);
    let (a, b, owned) = std::thread::scope(|s| {
        let dog2 = dog.clone();
        let t = s.spawn(move || {
            let _w = dog2.worker(0);
            dog2.call(0, 0, || m.add_free_range(first))
        });
        while !mem.held.load(SeqCst) {
            std::thread::yield_now();
        }
        let b = m.add_free_range(second);
        let owned = b.is_ok().then(|| {
            let blk = m
                .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::new(3).unwrap())
                .unwrap();
            let frames = blk.range();
            mem.write(frames, 0x55); // its owner fills it
            let _ = blk.into_raw(); // kept for the rest of the test
            frames
        });
        mem.release.store(true, SeqCst);
        dog.joining();
        (t.join().unwrap(), b, owned)
    });
    dog.stop();
    (a, b, owned)
}

/// Whether `e` is the refusal of frames handed over before.
fn overlap(e: &Result<(), SetupError>) -> bool {
    matches!(e, Err(SetupError::Range(RangeError::Overlap { .. })))
}

/// Managed frames of the zone over `span`.
fn managed(m: &Poisoned, span: PfnRange) -> u64 {
    m.inspect().zone_of(span.start).unwrap().managed_pages()
}

#[test]
fn a_hand_over_that_loses_a_race_writes_nothing() {
    let m = machine();
    let range = r(BASE, BASE + HALF);
    let (a, b, owned) = race(m, range, range);
    assert!(
        (a.is_ok() && overlap(&b)) || (overlap(&a) && b.is_ok()),
        "one wins, the other is refused: {a:?} {b:?}"
    );
    if let Some(frames) = owned {
        assert!(
            m.inspect().hooks().read(frames).iter().all(|&x| x == 0x55),
            "the loser poisoned a block another thread owns"
        );
    }
    assert_eq!(managed(m, range), HALF);
    m.validate().unwrap();
}

#[test]
fn a_hand_over_across_two_zones_that_loses_a_race_changes_no_zone() {
    let m = machine();
    let low = r(BASE, BASE + HALF);
    let high = r(BASE + HALF, BASE + 2 * HALF);
    // The first call straddles both zones; the second takes the high
    // zone's part alone.
    let (a, b, _) = race(m, r(BASE, BASE + 2 * HALF), high);
    assert!(
        (a.is_ok() && overlap(&b)) || (overlap(&a) && b.is_ok()),
        "one wins, the other is refused: {a:?} {b:?}"
    );
    let low_expected = if a.is_ok() { HALF } else { 0 };
    assert_eq!(
        managed(m, low),
        low_expected,
        "the refused call changed a zone"
    );
    assert_eq!(managed(m, high), HALF);
    m.validate().unwrap();
    // What a refused call left is a hole still: handing it over works.
    if a.is_err() {
        m.add_free_range(low).unwrap();
        assert!(
            m.inspect()
                .hooks()
                .read(low)
                .iter()
                .all(|&x| x == PAGE_POISON)
        );
    }
}
