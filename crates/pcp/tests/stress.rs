//! Threads: one CPU allocates, another frees what it got, a third drains
//! everything and changes the sizing while they run. Checks that no frame is
//! lost or handed out twice. Bounded in iterations.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    CpuId, MigrateType, Order, PcpConfig, PcpSet, PcpSizing, PcpSlot, PerCpuPages, Pfn, Slot,
};

const FRAMES: u64 = if cfg!(miri) { 512 } else { 4096 };
const ROUNDS: usize = if cfg!(miri) { 4 } else { 300 };
/// Drain rounds of the third CPU at most.
const DRAINS: u32 = if cfg!(miri) { 100 } else { 5000 };

#[test]
fn alloc_on_one_cpu_free_on_another_with_racing_drains() {
    let zone = RefZone::with_blocks(Order::new_truncated(0), 0, FRAMES);
    let sizing = PcpSizing::new(15, 64, 1024).unwrap();
    let mut mems: Vec<Vec<Slot>> = (0..3).map(|_| vec![Slot::EMPTY; 1200]).collect();
    let slots: Vec<PcpSlot<'_>> = mems
        .iter_mut()
        .map(|m| PcpSlot::new(PerCpuPages::new(m, sizing, PcpConfig::X86_64).unwrap()))
        .collect();
    let set = PcpSet::new(&slots);
    let taken: Vec<AtomicBool> = (0..FRAMES).map(|_| AtomicBool::new(false)).collect();
    let finished = AtomicUsize::new(0);
    let (tx, rx) = mpsc::sync_channel::<Vec<Pfn>>(4);

    let (set, zone, taken, finished) = (&set, &zone, &taken, &finished);
    // Claimed before any thread starts: the drainer's `drain_all` claims an
    // unowned cache for a moment to drain it, so a claim inside a thread
    // could meet `Busy`.
    let mut cpus = (0..3).map(|c| set.claim(CpuId(c)).unwrap());
    let (mut cpu0, mut cpu1, mut cpu2) = (
        cpus.next().unwrap(),
        cpus.next().unwrap(),
        cpus.next().unwrap(),
    );
    thread::scope(|s| {
        // CPU 0: allocates bursts and hands them over.
        s.spawn(move || {
            let cpu = &mut cpu0;
            let bursts = [32usize, 256, 7, 1000];
            for r in 0..ROUNDS {
                let want = bursts[r % bursts.len()];
                let mut got = Vec::with_capacity(want);
                for i in 0..want {
                    let mt = pageframe_pcp::PCP_LIST_TYPES[i % 3];
                    match cpu.alloc(zone, Order::new_truncated(0), mt) {
                        Ok(f) => {
                            let was = taken[f.get() as usize].swap(true, Ordering::AcqRel);
                            assert!(!was, "frame {} handed out twice", f.get());
                            got.push(f);
                        }
                        Err(_) => break, // everything is in flight or cached elsewhere
                    }
                }
                if r.is_multiple_of(16) {
                    cpu.decay(zone);
                }
                tx.send(got).unwrap();
            }
            drop(tx);
            // Make sure the remote-drain path really ran against this owner.
            let t0 = Instant::now();
            while cpu.stats().drains == 0 && t0.elapsed() < Duration::from_secs(5) {
                cpu.poll(zone);
                thread::yield_now();
            }
            assert!(cpu.stats().drains > 0, "no remote drain was honoured");
            cpu.inspect(|c| c.validate()).unwrap();
            finished.fetch_add(1, Ordering::Release);
        });
        // CPU 1: frees what CPU 0 allocated.
        s.spawn(move || {
            let cpu = &mut cpu1;
            loop {
                match rx.recv_timeout(Duration::from_millis(1)) {
                    Ok(batch) => {
                        for f in batch {
                            let was = taken[f.get() as usize].swap(false, Ordering::AcqRel);
                            assert!(was, "frame {} freed while not allocated", f.get());
                            cpu.free(zone, f, Order::new_truncated(0), MigrateType::Movable)
                                .unwrap();
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => cpu.poll(zone),
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            // Make sure the remote-drain path really ran against this owner.
            let t0 = Instant::now();
            while cpu.stats().drains == 0 && t0.elapsed() < Duration::from_secs(5) {
                cpu.poll(zone);
                thread::yield_now();
            }
            assert!(cpu.stats().drains > 0, "no remote drain was honoured");
            cpu.inspect(|c| c.validate()).unwrap();
            finished.fetch_add(1, Ordering::Release);
        });
        // CPU 2: drains everybody, now and then resizes.
        s.spawn(move || {
            let cpu = &mut cpu2;
            let mut i = 0u32;
            while finished.load(Ordering::Acquire) < 2 && i < DRAINS {
                set.drain_all(zone, Some(cpu), |_| thread::yield_now());
                if i.is_multiple_of(50) {
                    let lo = 16 + (i % 7) * 16;
                    set.update_sizing(PcpSizing::new(1 + i % 31, lo, lo + 900).unwrap());
                }
                i += 1;
                thread::yield_now();
            }
        });
    });

    set.drain_all(zone, None, |_| {});
    assert!(taken.iter().all(|t| !t.load(Ordering::Relaxed)));
    let mut frames = zone.blocks(Order::new_truncated(0));
    frames.sort_unstable();
    assert_eq!(
        frames,
        (0..FRAMES).collect::<Vec<_>>(),
        "lost or duplicated frames"
    );
}
