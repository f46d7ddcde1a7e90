//! Free page reporting: every free block of the reporting order is offered
//! once until it is allocated again; refused batches come back unmarked;
//! nothing is lost or handed out while it is being reported.

mod common;

use std::collections::HashSet;

use common::*;
use pageframe::{FreeError, Gfp, NodeId, Order, Pfn, REPORTING_CAPACITY};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const HUGE: Order = Order::HUGE_2M;

#[test]
fn every_free_huge_block_is_reported_once_until_reallocated() {
    let m = one_zone(512 * PB); // 1 GiB
    let free = m.free_pages();
    let mut seen = HashSet::new();
    let s = m.report_free_pages(HUGE, |batch| {
        assert!(batch.len() <= REPORTING_CAPACITY);
        for &(p, o) in batch {
            assert!(o >= HUGE && p.is_aligned(o));
            assert!(seen.insert(p), "{p:?} offered twice");
        }
        true
    });
    assert_eq!(m.free_pages(), free, "every block came back");
    let (big, reported) = m.reported_pages(HUGE);
    assert_eq!(reported, s.pages);
    assert!(reported * 100 >= big * 95, "{reported} of {big}");
    // The low watermark stays unreported, no more.
    let low = m
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
    // A block allocated and freed is offered again, and only it (merged
    // with its buddies into whatever it joins).
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, HUGE).unwrap().pfn;
    m.free(a, HUGE).unwrap();
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
    let free = m.free_pages();
    let mut during = None;
    let s = m.report_free_pages(HUGE, |batch| {
        // While a block is reported it is nobody's: its frees are refused,
        // nothing hands it out, and the books still add up.
        let (p, o) = batch[0];
        assert_eq!(m.free(p, o), Err(FreeError::Busy));
        m.validate().unwrap();
        let got: Vec<Pfn> = (0..8)
            .filter_map(|_| {
                m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO)
                    .ok()
                    .map(|a| a.pfn)
            })
            .collect();
        assert!(
            got.iter()
                .all(|g| batch.iter().all(|&(b, o)| !(b <= *g && *g < b + o.pages())))
        );
        for g in got {
            m.free(g, Order::ZERO).unwrap();
        }
        during = Some(m.free_pages());
        false
    });
    assert_eq!(s.blocks, 0);
    assert!(s.refused > 0);
    assert!(during.unwrap() < free, "the batch was off the lists");
    assert_eq!(m.free_pages(), free);
    assert_eq!(m.reported_pages(HUGE).1, 0, "refused: unmarked");
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
                live.push((a.pfn, o));
            }
        } else {
            let (p, o) = live.swap_remove(rng.gen_range(0..live.len()));
            m.free(p, o).unwrap();
        }
        if step % 50_000 == 0 {
            let _ = m.report_free_pages(HUGE, |_| true);
        }
    }
    // Settle: free half of what is held.
    for _ in 0..live.len() / 2 {
        let (p, o) = live.swap_remove(rng.gen_range(0..live.len()));
        m.free(p, o).unwrap();
    }
    for _ in 0..2 {
        let _ = m.report_free_pages(HUGE, |_| true);
    }
    let (big, reported) = m.reported_pages(HUGE);
    assert!(big > 0);
    assert!(reported * 100 >= big * 95, "{reported} of {big} reported");
    m.validate().unwrap();
    for (p, o) in live {
        m.free(p, o).unwrap();
    }
    assert_eq!(m.free_pages(), m.managed_pages());
}
