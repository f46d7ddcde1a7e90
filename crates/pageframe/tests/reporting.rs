//! Free page reporting: every free block of the reporting order is offered
//! once until it is allocated again; refused batches come back unmarked;
//! nothing is lost or handed out while it is being reported.

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::{
    Block, FreeError, Gfp, NodeId, Order, Pfn, RawError, reporting::REPORTING_CAPACITY,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const HUGE: Order = Order::HUGE_2M;

#[test]
fn every_free_huge_block_is_reported_once_until_reallocated() {
    let m = one_zone(512 * PB); // 1 GiB
    let free = m.inspect().free_pages();
    let mut seen = HashSet::new();
    let s = m.report_free_pages(HUGE, |batch| {
        assert!(batch.len() <= REPORTING_CAPACITY);
        for &(p, o) in batch {
            assert!(o >= HUGE && p.is_aligned(o));
            assert!(seen.insert(p), "{p:?} offered twice");
        }
        true
    });
    assert_eq!(m.inspect().free_pages(), free, "every block came back");
    let (big, reported) = m.inspect().reported_pages(HUGE);
    assert_eq!(reported, s.pages);
    assert!(reported * 100 >= big * 95, "{reported} of {big}");
    // The low watermark stays unreported, no more.
    let low = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(pageframe::ZoneKind::Normal)
        .unwrap()
        .watermarks()
        .low;
    assert!(big - reported <= low + 1024, "{} left", big - reported);
    m.validate().unwrap();
    // Nothing new: the second pass offers nothing.
    let again = m.report_free_pages(HUGE, |_| panic!("nothing is unreported"));
    assert_eq!(again.batches, 0);
    // A block allocated and freed is offered again once it is back on the
    // free lists, and only it (merged with its buddies into whatever it
    // joins). While the zone's pageblock pool keeps it for the next huge
    // page, only the half its allocation split off a larger block is new
    // on the lists.
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, HUGE).unwrap();
    let a = b.pfn();
    m.free(b).unwrap();
    let mut offered = Vec::new();
    m.report_free_pages(HUGE, |b| {
        offered.extend_from_slice(b);
        true
    });
    assert_eq!(offered, [(Pfn(a.get() ^ HUGE.pages()), HUGE)]);
    assert_eq!(m.drain_stripes(), 1);
    let mut offered = Vec::new();
    m.report_free_pages(HUGE, |b| {
        offered.extend_from_slice(b);
        true
    });
    assert_eq!(offered.len(), 1, "{offered:?}");
    let (p, o) = offered[0];
    assert!(p <= a && a + HUGE.pages() <= p + o.pages());
    m.validate().unwrap();
}

#[test]
fn a_refused_batch_comes_back_unmarked_and_nothing_leaks_meanwhile() {
    let m = one_zone(64 * PB);
    let free = m.inspect().free_pages();
    let mut during = None;
    let s = m.report_free_pages(HUGE, |batch| {
        // While a block is reported it is nobody's: its frees are refused,
        // nothing hands it out, and the books still add up.
        let (p, o) = batch[0];
        // SAFETY: the block is the reporter's, not a live allocation: the
        // call must refuse it.
        let r = unsafe { m.block_from_raw(p, o) };
        assert_eq!(
            r.map(Block::into_raw),
            Err(RawError {
                pfn: p,
                why: FreeError::Busy
            })
        );
        m.validate().unwrap();
        let got: Vec<Block> = (0..8)
            .filter_map(|_| m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).ok())
            .collect();
        assert!(got.iter().all(|g| {
            batch
                .iter()
                .all(|&(b, o)| !(b <= g.pfn() && g.pfn() < b + o.pages()))
        }));
        for g in got {
            m.free(g).unwrap();
        }
        during = Some(m.inspect().free_pages());
        false
    });
    assert_eq!(s.blocks, 0);
    assert!(s.refused > 0);
    assert!(during.unwrap() < free, "the batch was off the lists");
    assert_eq!(m.inspect().free_pages(), free);
    assert_eq!(m.inspect().reported_pages(HUGE).1, 0, "refused: unmarked");
    m.validate().unwrap();
}

/// The goal: after churn settles, at least 95% of the free memory in
/// blocks of 2 MiB or more is reported within two passes.
#[test]
fn churn_then_two_passes_report_the_free_huge_memory() {
    let frames = if cfg!(miri) { 64 * PB } else { 4 * GIB };
    let m = one_zone(frames);
    let mut rng = SmallRng::seed_from_u64(3);
    let mut live = Vec::new();
    let _ = m.report_free_pages(HUGE, |_| true);
    for step in 0..frames / 4 {
        if rng.gen_bool(0.55) || live.is_empty() {
            let o = Order::new([0, 0, 0, 1, 3, 9][rng.gen_range(0..6)]).unwrap();
            if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o) {
                live.push(a);
            }
        } else {
            let b = live.swap_remove(rng.gen_range(0..live.len()));
            m.free(b).unwrap();
        }
        if step % 50_000 == 0 {
            let _ = m.report_free_pages(HUGE, |_| true);
        }
    }
    // Settle: free half of what is held.
    for _ in 0..live.len() / 2 {
        let b = live.swap_remove(rng.gen_range(0..live.len()));
        m.free(b).unwrap();
    }
    for _ in 0..2 {
        let _ = m.report_free_pages(HUGE, |_| true);
    }
    let (big, reported) = m.inspect().reported_pages(HUGE);
    assert!(big > 0);
    assert!(reported * 100 >= big * 95, "{reported} of {big} reported");
    m.validate().unwrap();
    for b in live {
        m.free(b).unwrap();
    }
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// Every frame of the zone allocated, then every other one freed: free
/// memory in order-0 blocks only. Returns the frames still held.
fn checkerboard(frames: u64) -> (&'static pageframe::Machine<'static>, Vec<Block>) {
    let m = one_zone(frames);
    m.tunables().set_min_free_kbytes(0);
    let mut all = Vec::new();
    while let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
        all.push(a);
    }
    all.sort_by_key(Block::pfn);
    let mut held = Vec::new();
    for (i, b) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            m.free(b).unwrap();
        } else {
            held.push(b);
        }
    }
    (m, held)
}

/// A balloon driver that hands a page back every batch: each freed frame
/// is a new unreported block, but the pass offers no more than was free
/// when it began, and ends.
#[test]
fn a_pass_whose_callback_frees_a_frame_every_batch_ends() {
    let (m, mut held) = checkerboard(8192);
    let free_at_start = m.inspect().free_pages();
    let mut offered = 0;
    let s = m.report_free_pages(Order::ZERO, |batch| {
        offered += batch.iter().map(|(_, o)| o.pages()).sum::<u64>();
        if let Some(b) = held.pop() {
            m.free(b).unwrap();
        }
        true
    });
    assert_eq!(s.pages, offered);
    assert!(
        offered <= free_at_start,
        "{offered} frames offered, {free_at_start} free at the start"
    );
    assert!(
        offered > 0 && !held.is_empty(),
        "the pass stopped by itself"
    );
    m.validate().unwrap();
    for b in held {
        m.free(b).unwrap();
    }
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// The callback allocates enough order-0 frames for a stripe to reserve
/// the chunk the batch came from: the batch's blocks return into the
/// reservation's keeping, unmarked, and every invariant holds.
#[test]
fn blocks_given_back_into_a_chunk_reserved_meanwhile_stay_unmarked() {
    let (m, mut held) = checkerboard(8192);
    // The first 512 frames: half free, in order-0 blocks.
    for b in held.split_off(256) {
        m.free(b).unwrap();
    }
    let mut got = Vec::new();
    m.report_free_pages(Order::ZERO, |_| {
        if got.is_empty() {
            // Past the stripes' rest after the machine was filled.
            got.extend((0..100).map(|_| m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap()));
            assert!(m.inspect().stripe_frames() > 0, "a stripe reserved a chunk");
        }
        m.validate().unwrap();
        true
    });
    m.validate().unwrap();
    for b in got.into_iter().chain(held) {
        m.free(b).unwrap();
    }
    m.drain_stripes();
    m.validate().unwrap();
    assert_eq!(m.inspect().free_pages(), m.inspect().managed_pages());
}

/// Reporting passes mixed with order-0 traffic, in the callback and on
/// another thread at once, on 100 seeds: `validate()` holds after every
/// batch and every pass, nothing is handed out twice, nothing is lost.
#[test]
fn reporting_beside_order0_traffic_keeps_every_invariant() {
    let seeds = if cfg!(miri) { 2 } else { 100 };
    for seed in 0..seeds {
        let m: &'static pageframe::Machine<'static> = one_zone(16 * PB);
        m.tunables().set_min_free_kbytes(0);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut mine: Vec<Block> = Vec::new();
        /// Stops the other thread however this one leaves the scope (a
        /// failed check would otherwise wait for it forever).
        struct StopOnDrop<'s>(&'s std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            let stop = &stop;
            let _stop = StopOnDrop(stop);
            let other = s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(!seed);
                let mut held: Vec<Block> = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if rng.gen_bool(0.55) {
                        if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
                            held.push(a);
                        }
                    } else if !held.is_empty() {
                        let b = held.swap_remove(rng.gen_range(0..held.len()));
                        m.free(b).unwrap();
                    }
                }
                held
            });
            for _ in 0..20 {
                for _ in 0..rng.gen_range(0..400) {
                    if rng.gen_bool(0.6) {
                        if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
                            mine.push(a);
                        }
                    } else if !mine.is_empty() {
                        let b = mine.swap_remove(rng.gen_range(0..mine.len()));
                        m.free(b).unwrap();
                    }
                }
                let min = Order::new(rng.gen_range(0..3)).unwrap();
                let refuse = rng.gen_bool(0.2);
                m.report_free_pages(min, |_| {
                    for _ in 0..rng.gen_range(0..4) {
                        if let Ok(a) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO) {
                            mine.push(a);
                        }
                    }
                    if !mine.is_empty() && rng.gen_bool(0.5) {
                        let b = mine.swap_remove(rng.gen_range(0..mine.len()));
                        m.free(b).unwrap();
                    }
                    m.validate()
                        .unwrap_or_else(|e| panic!("seed {seed}, in a batch: {e}"));
                    !refuse
                });
                m.validate()
                    .unwrap_or_else(|e| panic!("seed {seed}, after a pass: {e}"));
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let theirs = other.join().unwrap();
            let all: HashSet<Pfn> = mine.iter().chain(&theirs).map(Block::pfn).collect();
            assert_eq!(
                all.len(),
                mine.len() + theirs.len(),
                "seed {seed}: a frame twice"
            );
            for b in mine.drain(..).chain(theirs) {
                m.free(b).unwrap();
            }
        });
        m.drain_stripes();
        m.validate().unwrap();
        assert_eq!(
            m.inspect().free_pages(),
            m.inspect().managed_pages(),
            "seed {seed}"
        );
    }
}
