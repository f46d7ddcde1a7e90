//! Behaviour of the individual rules: result order, deferral, suitability,
//! capture, async direct compaction's type rule, skip hints and their
//! reset, aborts, pinning, kcompactd wakeups, the retry policy, and the
//! batches the migrator is handed.

use std::cell::RefCell;

use pageframe_buddy::{BuddyConfig, Order, Pfn, PfnRange};
use pageframe_compact::{
    COMPACT_CLUSTER_MAX, CompactRequest, CompactResult, CompactRetry, CompactState, DeferralState,
    MIGRATE_BATCH_MAX, MigrateMode, NodeZone, Priority, ZoneMarks, compact_zone,
    compaction_suitable, reset_isolation_suitable, suit_allocation_order, try_to_compact_pages,
};
use pageframe_mobility::{AllocMode, MigrateType, MobileZone, MobilityConfig, Watermarks};
use pageframe_models::compact::{Op, World};

fn small() -> MobilityConfig {
    MobilityConfig {
        buddy: BuddyConfig::new(Order::new(6).unwrap()),
        pageblock_order: Order::new(4).unwrap(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    }
}

/// A zone of `blocks` 16-frame pageblocks from frame 0, all free.
fn zone(blocks: u64) -> MobileZone<'static> {
    let span = PfnRange::new(Pfn(0), Pfn(blocks * 16));
    let cfg = small();
    let meta = Box::leak(Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg)));
    let mut z = MobileZone::new(span, cfg, meta).unwrap();
    z.add_free_range(span).unwrap();
    z
}

/// Every frame allocated movable, then three of every four freed (the
/// Gupta pattern at small scale).
fn gupta(blocks: u64, seed: u64) -> World<'static> {
    let mut w = World::new(zone(blocks), seed);
    while w.alloc(Order::ZERO, MigrateType::Movable).is_some() {}
    let heads: Vec<u64> = w.mig.owners.keys().copied().collect();
    for h in heads {
        if h % 4 != 0 {
            w.step(&Op::Free(
                w.mig.owners.keys().position(|&k| k == h).unwrap(),
            ))
            .unwrap();
        }
    }
    w
}

/// The Gupta pattern over `blocks` pageblocks of 512 frames (2 MiB of
/// 4 KiB pages): 128 movable frames kept in each.
fn gupta_2m(blocks: u64, seed: u64) -> World<'static> {
    let span = PfnRange::new(Pfn(0), Pfn(blocks * 512));
    let cfg = MobilityConfig {
        buddy: BuddyConfig::new(Order::new(10).unwrap()),
        pageblock_order: Order::HUGE_2M,
        grouping: true,
        superpageblock_shift: pageframe_mobility::DEFAULT_SUPERPAGEBLOCK_SHIFT,
    };
    let meta = Box::leak(Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg)));
    let mut z = MobileZone::new(span, cfg, meta).unwrap();
    z.add_free_range(span).unwrap();
    let mut w = World::new(z, seed);
    while w.alloc(Order::ZERO, MigrateType::Movable).is_some() {}
    let heads: Vec<u64> = w.mig.owners.keys().copied().collect();
    let mut zone = w.zone.borrow_mut();
    for h in heads {
        if h % 4 != 0 && zone.free(Pfn(h), Order::ZERO).is_ok() {
            w.mig.release(h);
        }
    }
    drop(zone);
    w
}

fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

#[test]
fn result_codes_are_ordered_as_linux_numbers_them() {
    use CompactResult::*;
    let all = [
        NotSuitableZone,
        Skipped,
        Deferred,
        NoSuitablePage,
        Continue,
        Complete,
        PartialSkipped,
        Contended,
        Success,
    ];
    for (i, r) in all.iter().enumerate() {
        assert_eq!(*r as usize, i, "{r}");
    }
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(Skipped.max(Success), Success);
    assert!(Priority::SyncFull < Priority::SyncLight && Priority::SyncLight < Priority::Async);
    assert_eq!(Priority::Async.raised(), Some(Priority::SyncLight));
    assert_eq!(Priority::SyncFull.raised(), None);
    assert_eq!(Priority::Async.mode(), MigrateMode::Async);
    assert_eq!(Priority::SyncFull.mode(), MigrateMode::SyncLight);
}

#[test]
fn deferral_skips_two_to_the_failures_minus_one_attempts() {
    for d in 1..=8u32 {
        let st = CompactState::new();
        for _ in 0..d {
            st.defer_compaction(o(5));
        }
        let shift = d.min(6);
        for i in 0..(1u32 << shift) - 1 {
            assert!(st.compaction_deferred(o(5)), "d={d}: call {i} should defer");
        }
        assert!(!st.compaction_deferred(o(7)), "d={d}: the 2^d-th call runs");
        // Lower orders than the failed one are never deferred.
        assert!(!st.compaction_deferred(o(4)));
        assert_eq!(st.deferral().state().shift as u32, shift);
        assert_eq!(st.compaction_restarting(o(5)), shift == 6);
    }
}

#[test]
fn deferral_reset_forgets_failures_only_when_the_allocation_succeeded() {
    let st = CompactState::new();
    st.defer_compaction(o(5));
    st.defer_compaction(o(5));
    st.defer_reset(o(5), false);
    // The failed order rises above the success, the back-off stays.
    assert_eq!(
        st.deferral().state(),
        DeferralState {
            considered: 0,
            shift: 2,
            order_failed: 6
        }
    );
    assert!(!st.compaction_deferred(o(5)));
    assert!(st.compaction_deferred(o(6)));
    st.defer_reset(o(6), true);
    assert_eq!(
        st.deferral().state(),
        DeferralState {
            considered: 0,
            shift: 0,
            order_failed: 7
        }
    );
    assert!(!st.compaction_deferred(o(9)));
}

#[test]
fn suitability_needs_free_frames_and_fragmentation() {
    let marks = ZoneMarks {
        wmark: Watermarks::with_gap(8, 2),
        reserve: 0,
    };
    // Every other pageblock allocated whole: the free memory is in order-4
    // blocks, so an order-5 request fails for lack of memory, not
    // fragmentation (fragmentation index <= 500).
    let mut z = zone(16);
    let mut held = Vec::new();
    while let Ok(p) = z.alloc(o(4), MigrateType::Movable, AllocMode::empty()) {
        held.push(p);
    }
    for p in held.iter().filter(|p| (p.get() / 16) % 2 == 0) {
        z.free(*p, o(4)).unwrap();
    }
    let fi = z.fragmentation_index(o(5));
    assert!((0..=500).contains(&fi), "index {fi}");
    assert!(!compaction_suitable(&z, o(5), marks.wmark.min, &marks, 500));
    assert!(compaction_suitable(
        &z,
        o(5),
        marks.wmark.min,
        &marks,
        fi as u32 - 1
    ));
    assert_eq!(
        suit_allocation_order(&z, o(5), marks.wmark.min, &marks, 500, false, true),
        CompactResult::Skipped
    );
    // Already satisfiable at order 4.
    assert_eq!(
        suit_allocation_order(&z, o(4), marks.wmark.min, &marks, 500, false, true),
        CompactResult::Success
    );
    // Non-costly orders ignore the index; too few free frames skips.
    assert!(compaction_suitable(&z, o(3), marks.wmark.min, &marks, 1000));
    let tight = ZoneMarks {
        wmark: Watermarks::with_gap(z.free_pages(), 2),
        ..marks
    };
    assert!(!compaction_suitable(
        &z,
        o(3),
        tight.wmark.min,
        &tight,
        1000
    ));
}

#[test]
fn direct_compaction_captures_exactly_the_requested_block() {
    let mut w = gupta(12, 3);
    let before = w.mig.owners.len();
    w.step(&Op::Direct(4, 1, 1)).unwrap(); // order 5 = 2 pageblocks, sync-light, movable
    assert_eq!(w.captured, 1, "{:?}", w.results);
    assert_eq!(w.mig.owners.len(), before + 1);
    let stats = w.state.stats();
    assert_eq!(stats.captured, 1);
    assert_eq!(stats.stall, 1);
    assert_eq!(stats.success, 1);
    // Each frame moved at most once, and only as many as one block needs
    // beyond what the scanners had to finish.
    assert!(stats.migrate_success <= 32 + 32, "{stats:?}");
}

#[test]
fn async_direct_compaction_for_unmovable_leaves_movable_blocks_alone() {
    let mut w = gupta(12, 5);
    w.step(&Op::Direct(4, 2, 0)).unwrap(); // async, unmovable
    assert!(
        w.mig.moves.is_empty(),
        "spec 03 §14.3 broken: {:?}",
        w.mig.moves
    );
    // Sync-light compacts the same zone for the same request.
    w.step(&Op::Direct(4, 1, 0)).unwrap();
    assert!(!w.mig.moves.is_empty());
}

#[test]
fn pinned_and_unmovable_blocks_are_never_isolated() {
    let mut w = World::new(zone(8), 9);
    w.fragment(1, 3, 1, 60); // every movable block pinned
    w.step(&Op::Full).unwrap();
    w.step(&Op::Direct(4, 0, 1)).unwrap();
    assert_eq!(w.mig.isolations, 0);
    assert!(w.mig.moves.is_empty());
}

#[test]
fn linear_scanners_honour_skip_hints_unless_told_to_ignore_them() {
    let mut w = gupta(12, 7);
    for n in (0..12).step_by(2) {
        w.step(&Op::Skip(n, true)).unwrap();
    }
    // The model checks each move against the pre-set hints when honoured.
    w.step(&Op::Direct(4, 1, 1)).unwrap();
    let marked = |p: u64| (p / 16).is_multiple_of(2);
    assert!(w.mig.moves.iter().all(|m| !marked(m.src) && !marked(m.dst)));
    assert!(!w.mig.moves.is_empty());
    // Whole-zone compaction ignores them.
    w.step(&Op::Full).unwrap();
    assert!(w.mig.moves.iter().any(|m| marked(m.src) || marked(m.dst)));
}

#[test]
fn restarting_after_maximum_deferral_clears_skip_hints() {
    let mut w = World::new(zone(12), 11);
    w.fragment(1, 0, 0, 60);
    for n in 0..12 {
        w.step(&Op::Skip(n, true)).unwrap();
    }
    for _ in 0..6 {
        w.state.defer_compaction(o(5));
    }
    for _ in 0..63 {
        assert!(w.state.compaction_deferred(o(5)));
    }
    // The 64th attempt is not deferred and restarts with fresh hints.
    let node = [NodeZone::new(&w.zone, &w.state, w.marks)];
    let out = try_to_compact_pages(
        &node,
        o(5),
        MigrateType::Movable,
        Priority::SyncLight,
        &mut w.mig,
    );
    assert_ne!(out.result, CompactResult::Deferred);
    assert!(!w.mig.moves.is_empty(), "{out:?}");
    if let Some((_, c)) = out.captured {
        w.mig.adopt(c.get(), 5, MigrateType::Movable);
    }
    w.check().unwrap();
}

#[test]
fn skip_hint_flush_runs_once_after_a_direct_compactor_met_its_scanners() {
    let mut w = gupta(24, 13);
    // Pin every frame of the odd pageblocks: no aligned pair of pageblocks
    // (an order-5 block) can become free, so the run scans to the end.
    let odd: Vec<u64> = w
        .mig
        .owners
        .keys()
        .copied()
        .filter(|h| (h / 16) % 2 == 1)
        .collect();
    for h in odd {
        w.zone.borrow_mut().set_pinned(Pfn(h), true);
    }
    assert!(!reset_isolation_suitable(&w.zone, &w.state));
    let req = CompactRequest::direct(o(5), MigrateType::Movable, Priority::SyncLight, w.marks);
    let out = compact_zone(&w.zone, &w.state, &mut w.mig, &req);
    assert!(
        matches!(
            out.result,
            CompactResult::Complete | CompactResult::PartialSkipped
        ),
        "{out:?}"
    );
    assert!(w.state.blockskip_flush());
    for n in 0..24 {
        w.step(&Op::Skip(n, true)).unwrap();
    }
    assert!(reset_isolation_suitable(&w.zone, &w.state));
    assert!(!w.state.blockskip_flush());
    let z = w.zone.borrow();
    let b = z.mobility().pageblocks();
    let cleared = (0..b.len()).filter(|&i| !b.skip(b.block_start(i))).count();
    assert!(cleared > 0);
    drop(z);
    assert!(!reset_isolation_suitable(&w.zone, &w.state));
    w.check().unwrap();
}

#[test]
fn an_aborted_run_puts_everything_back() {
    for at in 0..6u8 {
        let mut w = gupta(10, 17 + u64::from(at));
        w.step(&Op::Abort(at)).unwrap();
        w.step(&Op::Full).unwrap();
        let r = &w.results["full"];
        assert!(
            r.contains_key(&CompactResult::Contended),
            "abort at {at}: {r:?}"
        );
    }
}

#[test]
fn blocks_a_run_isolated_from_are_skipped_by_the_next() {
    let mut w = gupta(16, 19);
    w.step(&Op::Direct(4, 2, 1)).unwrap(); // async movable order 5
    let first_top = w
        .mig
        .moves
        .iter()
        .map(|m| m.src / 16)
        .max()
        .unwrap_or_else(|| {
            panic!(
                "first run moved nothing: {:?} {:?}",
                w.results,
                w.state.stats()
            )
        });
    w.step(&Op::Direct(4, 2, 1)).unwrap();
    assert!(!w.mig.moves.is_empty());
    assert!(
        w.mig.moves.iter().all(|m| m.src / 16 > first_top),
        "second run went back into block {first_top} or below: {:?}",
        w.mig.moves
    );
}

#[test]
fn kcompactd_serves_wakeups_and_ignores_order_zero() {
    let mut w = gupta(12, 23);
    w.step(&Op::Tick(0, 0)).unwrap(); // proactiveness 0: no proactive work
    let node = [NodeZone::new(&w.zone, &w.state, w.marks)];
    assert!(!w.wake.wakeup(&node, Order::ZERO, 0, 500));
    assert!(w.wake.wakeup(&node, o(5), 0, 500));
    assert!(w.wake.pending());
    w.step(&Op::Tick(1, 0)).unwrap();
    assert!(!w.wake.pending());
    assert_eq!(w.kcd.stats().wakes, 1);
    assert!(!w.mig.moves.is_empty());
    let s = w.state.stats();
    assert!(s.daemon_migrate_scanned > 0 && s.daemon_migrate_scanned == s.migrate_scanned);
}

#[test]
fn retry_policy_raises_priority_then_gives_up() {
    // Costly: success is retried 4 times, then priority rises to the costly
    // minimum (sync-light) and stops there.
    let mut r = CompactRetry::new(o(9));
    r.set_priority(Priority::Async);
    for _ in 0..4 {
        assert!(r.should_retry(CompactResult::Success, || false));
    }
    assert_eq!(r.priority(), Priority::Async);
    assert!(r.should_retry(CompactResult::Success, || false));
    assert_eq!(r.priority(), Priority::SyncLight);
    assert!(!r.should_retry(CompactResult::Complete, || true));
    // Non-costly goes on to sync-full; skipped asks about reclaim.
    let mut r = CompactRetry::new(o(2));
    assert!(r.should_retry(CompactResult::Deferred, || false));
    assert_eq!(r.priority(), Priority::SyncFull);
    assert!(!r.should_retry(CompactResult::Contended, || true));
    assert!(r.should_retry(CompactResult::Skipped, || true));
    assert!(!r.should_retry(CompactResult::Skipped, || false));
    assert!(!CompactRetry::new(Order::ZERO).should_retry(CompactResult::Success, || true));
}

#[test]
fn a_lock_that_refuses_ends_the_run_contended() {
    let z = zone(4);
    let cell = RefCell::new(z);
    let st = CompactState::new();
    let guard = cell.borrow_mut();
    let mut mig = pageframe_models::compact::TagMigrator::new(PfnRange::new(Pfn(0), Pfn(64)), 1);
    let req = CompactRequest::full(ZoneMarks::default());
    assert_eq!(
        compact_zone(&cell, &st, &mut mig, &req).result,
        CompactResult::Contended
    );
    drop(guard);
}

/// spec 03 §7, written out as the reference model of [`Deferral`].
#[derive(Clone, Copy, Default, Debug)]
struct ModelDefer {
    considered: u32,
    shift: u8,
    order_failed: u8,
}

impl ModelDefer {
    fn defer(&mut self, order: u8) {
        self.considered = 0;
        self.shift = (self.shift + 1).min(6);
        self.order_failed = self.order_failed.min(order);
    }
    fn deferred(&mut self, order: u8) -> bool {
        if order < self.order_failed {
            return false;
        }
        self.considered += 1;
        if self.considered >= 1 << self.shift {
            self.considered = 1 << self.shift;
            return false;
        }
        true
    }
    fn reset(&mut self, order: u8, ok: bool) {
        if ok {
            self.considered = 0;
            self.shift = 0;
        }
        if order >= self.order_failed {
            self.order_failed = order + 1;
        }
    }
}

#[test]
fn deferral_skips_two_to_the_shift_minus_one() {
    let d = pageframe_compact::Deferral::new();
    let huge = Order::HUGE_2M;
    assert!(!d.is_deferred(huge), "nothing failed yet");
    for shift in 1..=8u32 {
        d.defer(huge);
        let s = shift.min(u32::from(pageframe_compact::COMPACT_MAX_DEFER_SHIFT));
        let skipped = (0..200).take_while(|_| d.is_deferred(huge)).count() as u32;
        assert_eq!(skipped, (1 << s) - 1, "after {shift} failures");
        assert!(!d.is_deferred(huge), "allowed until the next failure");
    }
    d.reset(huge, true);
    assert!(!d.is_deferred(huge));
    assert_eq!(d.state().shift, 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    #[test]
    fn deferral_matches_the_spec_model(
        ops in proptest::collection::vec((0u8..4, 1u8..=10), 1..300),
    ) {
        let d = pageframe_compact::Deferral::new();
        let mut m = ModelDefer::default();
        for (op, order) in ops {
            let o = Order::new(order).unwrap();
            match op {
                0 => { d.defer(o); m.defer(order); }
                1 => { d.reset(o, true); m.reset(order, true); }
                2 => { d.reset(o, false); m.reset(order, false); }
                _ => proptest::prop_assert_eq!(d.is_deferred(o), m.deferred(order)),
            }
            let s = d.state();
            proptest::prop_assert_eq!((s.considered, s.shift, s.order_failed), (m.considered, m.shift, m.order_failed));
        }
    }
}

/// The kernel's tag bits (6 up to the highest the core keeps) travel
/// with a block when it moves, and none of the bits that travel is one the
/// core drops.
#[test]
fn kernel_tag_bits_travel_with_a_moved_block() {
    use pageframe_compact::tag;
    use pageframe_mobility::tag::KEPT;
    assert_eq!(tag::CARRIED & !KEPT, 0, "only kept bits travel");
    let high = 1u32 << (pageframe_buddy::TAG_BITS - 1);
    let bits = |id: u64| if id % 2 == 1 { high | 1 << 6 } else { 1 << 7 };
    let mut w = gupta(16, 7);
    let owners: Vec<(u64, u64)> = w.mig.owners.iter().map(|(&h, o)| (h, o.id)).collect();
    for &(h, id) in &owners {
        assert!(
            w.zone
                .borrow_mut()
                .set_tag_bits(Pfn(h), tag::CARRIED, bits(id))
        );
    }
    w.step(&Op::Full).unwrap();
    let moved: std::collections::BTreeSet<u64> = w.mig.moves.iter().map(|m| m.dst).collect();
    assert!(!moved.is_empty(), "compaction moved blocks");
    for (&h, o) in &w.mig.owners {
        let t = w.zone.borrow().tag(Pfn(h)).unwrap();
        assert_eq!(
            t & tag::CARRIED,
            bits(o.id),
            "block {h} (moved: {})",
            moved.contains(&h)
        );
    }
}

/// A whole-zone run migrates each pageblock's 128 kept frames as one batch
/// (one TLB flush for the kernel), not in pieces of `COMPACT_CLUSTER_MAX`.
#[test]
fn whole_zone_compaction_moves_a_pageblock_per_batch() {
    let mut w = gupta_2m(8, 3);
    w.mig.batched = true;
    w.step(&Op::Full).unwrap();
    let (batches, moved) = (&w.mig.batches, w.mig.moves.len() as u64);
    assert!(moved >= 5 * 128, "{moved} frames moved");
    assert!(
        batches.iter().all(|&f| f <= MIGRATE_BATCH_MAX),
        "{batches:?}"
    );
    assert!(
        batches.iter().filter(|&&f| f == 128).count() >= 4,
        "whole pageblocks: {batches:?}"
    );
    assert!(
        batches.len() as u64 * COMPACT_CLUSTER_MAX < moved,
        "{} batches for {moved} moves",
        batches.len()
    );
    // The same run through the default, `migrate` per move, makes the same
    // moves from the same batches.
    let mut d = gupta_2m(8, 3);
    d.step(&Op::Full).unwrap();
    assert_eq!(d.mig.batches, w.mig.batches);
    assert_eq!(d.mig.moves, w.mig.moves);
}

/// A direct compactor that may capture a block smaller than a pageblock
/// isolates `COMPACT_CLUSTER_MAX` frames at a time, so that it stops as soon
/// as the block is there (spec 03 §8, §9.3); one building a whole pageblock
/// moves it in one batch.
#[test]
fn a_direct_compactor_for_a_small_block_keeps_to_the_cluster() {
    let mut w = gupta_2m(8, 5);
    w.step(&Op::Direct(1, 1, 1)).unwrap(); // order 2, sync-light, movable
    assert_eq!(w.captured, 1, "{:?}", w.results);
    assert!(!w.mig.batches.is_empty());
    assert!(
        w.mig.batches.iter().all(|&f| f <= COMPACT_CLUSTER_MAX),
        "{:?}",
        w.mig.batches
    );
    let mut w = gupta_2m(8, 5);
    w.step(&Op::Direct(8, 1, 1)).unwrap(); // order 9: a pageblock
    assert_eq!(w.captured, 1, "{:?}", w.results);
    assert!(
        w.mig.batches.iter().any(|&f| f > COMPACT_CLUSTER_MAX),
        "{:?}",
        w.mig.batches
    );
}

/// The moves of a batch the kernel refuses (again, busy, pinned) leave
/// their sources where they were, their owners' again; the others are
/// made. The model checks every owner's words and clean books.
#[test]
fn moves_refused_in_a_batch_go_back_and_the_rest_are_made() {
    let mut w = gupta_2m(8, 7);
    w.mig.batched = true;
    w.mig.refuse_migrate = 30;
    let free = w.zone.borrow().free_pages();
    w.step(&Op::Full).unwrap();
    let st = w.state.stats();
    assert!(st.migrate_success > 0 && st.migrate_fail > 0, "{st:?}");
    assert_eq!(w.zone.borrow().free_pages(), free);
    // A kernel that refuses every move: nothing moves, nothing is lost.
    let mut r = gupta_2m(8, 7);
    r.mig.batched = true;
    r.mig.refuse_migrate = 100;
    let before: Vec<u64> = r.mig.owners.keys().copied().collect();
    r.step(&Op::Full).unwrap();
    assert!(r.mig.moves.is_empty() && !r.mig.batches.is_empty());
    assert_eq!(r.mig.owners.keys().copied().collect::<Vec<_>>(), before);
    assert_eq!(r.zone.borrow().free_pages(), free);
}

/// A kernel that panics in the middle of a batch: the moves it made before
/// count (their owners live at the destinations), the others never
/// happened, and nothing is lost or left isolated.
#[test]
fn a_migrator_panicking_mid_batch_keeps_the_moves_it_made() {
    for made in [0u8, 1, 40, 63] {
        let mut w = gupta_2m(4, 11);
        let free = w.zone.borrow().free_pages();
        w.step(&Op::PanicInBatch(made)).unwrap();
        assert_eq!(
            w.results.get("panicked").map(|r| r.values().sum::<u64>()),
            Some(1),
            "{:?}",
            w.results
        );
        assert_eq!(w.mig.moves.len(), usize::from(made));
        assert_eq!(w.zone.borrow().free_pages(), free);
        // The next run goes on from there.
        w.step(&Op::Full).unwrap();
        assert!(!w.mig.moves.is_empty());
    }
}

/// Once superpageblocks are told apart (some tainted), compaction moves a
/// block of a tainted superpageblock inside it where it has room; Linux's
/// scanners move the bottom of the zone into its top.
#[test]
fn compaction_keeps_movable_memory_inside_its_superpageblock() {
    use pageframe_mobility::Placement;
    for (placement, local) in [
        (Placement::Superpageblock, true),
        (Placement::Neighbour, false),
    ] {
        // Four superpageblocks of sixteen 16-frame pageblocks.
        let span = PfnRange::new(Pfn(0), Pfn(1024));
        let cfg = MobilityConfig {
            superpageblock_shift: 8,
            ..small()
        };
        let meta = Box::leak(Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg)));
        let mut z = MobileZone::new(span, cfg, meta).unwrap();
        z.add_free_range(span).unwrap();
        z.set_placement(placement);
        let mut w = World::new(z, 5);
        while w.alloc(Order::ZERO, MigrateType::Movable).is_some() {}
        let heads: Vec<u64> = w.mig.owners.keys().copied().collect();
        for h in heads.into_iter().filter(|h| h % 4 != 0) {
            let i = w.mig.owners.keys().position(|&k| k == h).unwrap();
            w.step(&Op::Free(i)).unwrap();
        }
        // Regions 0 and 1 hold a pageblock typed unmovable (their last):
        // they are tainted; regions 2 and 3 are clean.
        for r in [0u64, 1] {
            w.zone
                .borrow_mut()
                .set_block_type(Pfn(r * 256 + 240), MigrateType::Unmovable)
                .unwrap();
        }
        let req = CompactRequest::full(w.marks);
        let out = compact_zone(&w.zone, &w.state, &mut w.mig, &req);
        assert!(out.stats.migrated > 0, "{placement:?}: {out:?}");
        let moves = w.mig.moves.clone();
        let from_tainted: Vec<_> = moves.iter().filter(|m| m.src >> 8 < 2).collect();
        let crossing = from_tainted
            .iter()
            .filter(|m| m.src >> 8 != m.dst >> 8)
            .count();
        // Inside: all but the last batch of each tainted region, once it
        // has no free frame left above the migrate scanner. Clean regions
        // pack upward across regions as Linux's scanners do.
        assert!(!from_tainted.is_empty());
        if local {
            assert!(
                crossing * 5 < from_tainted.len(),
                "{placement:?}: {moves:?}"
            );
            assert!(moves.iter().any(|m| m.src >> 8 == 2 && m.dst >> 8 == 3));
        } else {
            assert!(
                crossing * 2 > from_tainted.len(),
                "{placement:?}: {moves:?}"
            );
        }
        w.check().unwrap();
    }
}
