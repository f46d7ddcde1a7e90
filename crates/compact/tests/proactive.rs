//! Proactive compaction (spec 03 §11.3): thresholds for every
//! proactiveness, start and stop rules, the back-off, the node score.

use std::cell::RefCell;

use pageframe_buddy::{BuddyConfig, Order, Pfn, PfnRange};
use pageframe_compact::{
    CompactState, Kcompactd, KcompactdWake, NodeZone, ZoneMarks, fragmentation_score, node_score,
    thresholds,
};
use pageframe_mobility::{MobileZone, MobilityConfig};
use pageframe_models::compact::{Op, World};

const MS: u64 = 1_000_000;

fn zone(blocks: u64) -> MobileZone<'static> {
    let span = PfnRange::new(Pfn(0), Pfn(blocks * 16));
    let cfg = MobilityConfig {
        buddy: BuddyConfig::new(Order::new(6).unwrap()),
        pageblock_order: Order::new(4).unwrap(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    };
    let meta = Box::leak(Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg)));
    let mut z = MobileZone::new(span, cfg, meta).unwrap();
    z.add_free_range(span).unwrap();
    z
}

/// A fragmented zone of movable, unpinned frames (so compaction can always
/// make progress).
fn fragmented(seed: u64) -> World<'static> {
    let mut w = World::new(zone(24), seed);
    w.fragment(1, 0, 0, 70);
    w
}

fn score(w: &World<'_>) -> u32 {
    fragmentation_score(&w.zone.borrow())
}

/// The node score of a one-zone node: the zone's, weighted by
/// `present / (present + 1)`.
fn node(w: &World<'_>) -> u32 {
    node_score(&[NodeZone::new(&w.zone, &w.state, w.marks)]).unwrap()
}

#[test]
fn thresholds_for_every_proactiveness() {
    let known = [
        (0, 100, 100),
        (20, 80, 90),
        (50, 50, 60),
        (80, 20, 30),
        (90, 10, 15),
        (95, 5, 7),
        (99, 1, 1),
        (100, 0, 0),
    ];
    for (p, low, high) in known {
        let t = thresholds(p);
        assert_eq!((t.low, t.high), (low, high), "p = {p}");
    }
    let mut last = thresholds(0);
    for p in 0..=100u8 {
        let t = thresholds(p);
        assert_eq!(t.low, 100 - u32::from(p));
        assert!(
            t.low <= t.high && t.high <= 100 && t.high - t.low <= 10,
            "p = {p}: {t:?}"
        );
        assert!(t.high <= last.high, "high must not rise with p");
        last = t;
    }
    assert_eq!(thresholds(255), thresholds(100));
}

#[test]
fn proactive_compaction_starts_above_high_and_stops_at_low_for_every_p() {
    // The score a whole-zone compaction reaches: the floor no run can beat.
    let mut full = fragmented(42);
    let start_score = node(&full);
    assert_eq!(start_score, score(&full) * 384 / 385);
    full.step(&Op::Full).unwrap();
    let floor = score(&full);
    let full_moves = full.mig.moves.len();
    assert!(start_score > 90 && floor < 20, "{start_score} -> {floor}");
    let mut ran = 0;
    for p in 0..=100u8 {
        let mut w = fragmented(42);
        assert_eq!(node(&w), start_score);
        w.step(&Op::Tick(0, p)).unwrap();
        let t = thresholds(p);
        let rep_checked = w.kcd.stats().proactive_checks == 1;
        assert_eq!(rep_checked, p != 0, "p = {p}");
        let should_run = p != 0 && start_score > t.high;
        assert_eq!(
            w.kcd.stats().proactive_runs == 1,
            should_run,
            "p = {p}, score {start_score}, {t:?}"
        );
        if should_run {
            ran += 1;
            // The run checks the score with the destinations it still holds
            // isolated; handing the unused ones back at the end adds small
            // free blocks, worth a few points in a zone this small.
            let after = score(&w);
            assert!(
                after <= t.low.max(floor) + 5,
                "p = {p}: stopped at {after} above low {}",
                t.low
            );
            assert!(w.mig.moves.len() <= full_moves);
            if t.low > floor + 10 {
                assert!(
                    w.mig.moves.len() < full_moves,
                    "p = {p} compacted as much as a full run"
                );
            }
        } else {
            assert!(
                w.mig.moves.is_empty(),
                "p = {p} moved frames without running"
            );
        }
    }
    assert!(ran > 80);
}

#[test]
fn proactiveness_zero_never_runs_and_a_write_triggers_a_check() {
    let mut w = fragmented(7);
    for i in 0..40 {
        w.step(&Op::Tick(500, 0)).unwrap();
        assert!(w.mig.moves.is_empty(), "tick {i}");
    }
    assert_eq!(w.kcd.stats().proactive_checks, 0);
    assert!(w.kcd.set_proactiveness(101).is_err());
    assert_eq!(w.kcd.proactiveness(), 0);
    // Writing a non-zero value checks at the very next tick.
    w.kcd.set_proactiveness(20).unwrap();
    w.step(&Op::Tick(0, 20)).unwrap();
    assert_eq!(w.kcd.stats().proactive_checks, 1);
    assert!(!w.mig.moves.is_empty());
}

#[test]
fn checks_come_every_500_ms() {
    let mut w = fragmented(9);
    w.step(&Op::Tick(0, 20)).unwrap();
    assert_eq!(w.kcd.stats().proactive_checks, 1);
    for _ in 0..4 {
        w.step(&Op::Tick(100, 20)).unwrap();
    }
    assert_eq!(w.kcd.stats().proactive_checks, 1, "checked before 500 ms");
    w.step(&Op::Tick(100, 20)).unwrap();
    assert_eq!(w.kcd.stats().proactive_checks, 2);
    assert_eq!(w.kcd.stats().backoffs, 0);
}

#[test]
fn no_progress_backs_off_for_32_seconds() {
    // Every movable frame pinned: compaction cannot move anything.
    let mut w = World::new(zone(24), 5);
    w.fragment(1, 0, 1, 70);
    let s = score(&w);
    assert!(s > 90, "score {s}");
    let mut ticks = 0;
    while w.now < 70_000 * MS {
        w.step(&Op::Tick(500, 20)).unwrap();
        ticks += 1;
    }
    let st = w.kcd.stats();
    // Checks at ~0.5 s, ~32.5 s and ~64.5 s: every run failed to improve.
    assert_eq!(st.proactive_checks, 3, "{st:?}");
    assert_eq!(st.proactive_runs, 3);
    assert_eq!(st.backoffs, 3);
    assert_eq!(st.idle_ticks, ticks - 3);
    assert_eq!(st.backoff_ticks, st.idle_ticks);
    assert_eq!(w.mig.isolations, 0);
}

#[test]
fn node_score_weights_zones_by_size() {
    // A small zone at score 100 next to a large unfragmented one.
    let mut small = World::new(zone(2), 1);
    small.fragment(0, 0, 0, 50);
    let big = RefCell::new(zone(40));
    let (s1, s2) = (CompactState::new(), CompactState::new());
    let marks = ZoneMarks::default();
    let small_score = score(&small);
    assert_eq!(small_score, 100);
    let node = [
        NodeZone::new(&small.zone, &s1, marks),
        NodeZone::new(&big, &s2, marks),
    ];
    let n = node_score(&node).unwrap();
    let expect = 32 * 100 / (32 + 640 + 1);
    assert_eq!(n, expect);
    assert!(n < 10);
    // The daemon sees the node score, not the small zone's: no run.
    let mut kcd = Kcompactd::new();
    let rep = kcd.tick(0, &node, &KcompactdWake::new(), &mut small.mig);
    assert!(rep.checked && rep.proactive.is_none());
}
