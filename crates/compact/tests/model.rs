//! Property tests: random fragmented zones, random compaction runs (direct
//! at every priority, kcompactd, proactive, whole-zone), a migrator that
//! moves per-frame words, per move or a batch at a time, may refuse at
//! random and may panic in the middle of a batch; the shared model checks
//! contents, conservation, clean books, scanner and skip-hint invariants
//! after every step.

use std::mem::MaybeUninit;

use pageframe_buddy::{BuddyConfig, Order, Pfn, PfnRange};
use pageframe_mobility::{MobileZone, MobilityConfig};
use pageframe_models::compact::{Op, World};
use proptest::prelude::*;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 2 } else { n },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Small pageblocks (16 frames) so a few hundred frames hold many blocks.
fn config() -> MobilityConfig {
    MobilityConfig {
        buddy: BuddyConfig::new(Order::new(6).unwrap()),
        pageblock_order: Order::new(4).unwrap(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..4, any::<u8>()).prop_map(|(k, t)| Op::Alloc(k, t)),
        3 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, on)| Op::Pin(n, on)),
        2 => (any::<usize>(), any::<bool>()).prop_map(|(n, on)| Op::Skip(n, on)),
        5 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(k, p, t)| Op::Direct(k, p, t)),
        1 => Just(Op::Full),
        2 => (0u16..2000, prop_oneof![Just(0u8), Just(20), Just(50), Just(90), any::<u8>()])
            .prop_map(|(ms, p)| Op::Tick(ms, p)),
        1 => any::<u8>().prop_map(Op::Wake),
        1 => (0u8..60, 0u8..60).prop_map(|(i, m)| Op::Refuse(i, m)),
        1 => (0u8..12).prop_map(Op::Abort),
        1 => any::<bool>().prop_map(Op::Batched),
        1 => any::<u8>().prop_map(Op::PanicInBatch),
    ]
}

/// `shift`: log2 of a superpageblock's frames (the default, 1 GiB, or
/// a few pageblocks, so that unmovable memory taints some and compaction
/// keeps to them).
#[allow(clippy::too_many_arguments)]
fn run(
    blocks: u64,
    offset: u64,
    seed: u64,
    shift: u8,
    fill: (u64, u64, u64),
    refuse: (u8, u8),
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let span = PfnRange::new(Pfn(offset), Pfn(offset + blocks * 16));
    let cfg = MobilityConfig {
        superpageblock_shift: shift,
        ..config()
    };
    let mut meta: Box<[MaybeUninit<u8>]> =
        Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
    let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
    zone.add_free_range(span).unwrap();
    let mut w = World::new(zone, seed);
    w.fragment(2, fill.0, fill.1, fill.2);
    w.check().map_err(TestCaseError::fail)?;
    w.mig.refuse_isolate = refuse.0;
    w.mig.refuse_migrate = refuse.1;
    for op in ops {
        w.step(op)
            .map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(192))]

    /// Everything the model checks holds over random states and runs.
    #[test]
    fn compaction_keeps_every_frame_and_its_data(
        blocks in 2u64..14, offset in 0u64..40, seed in any::<u64>(),
        shift in prop_oneof![Just(18u8), Just(6), Just(7)],
        unmovable_in in 0u64..10, pin_in in 0u64..12, free_pct in 20u64..95,
        ops in prop::collection::vec(op(), 1..40),
    ) {
        run(blocks, offset, seed, shift, (unmovable_in, pin_in, free_pct), (0, 0), &ops)?;
    }

    /// A migrator that refuses isolation and migration at random (again,
    /// busy, pinned) leaves the zone consistent and every owner whole.
    #[test]
    fn random_refusals_leave_everything_consistent(
        blocks in 2u64..12, seed in any::<u64>(), free_pct in 30u64..90,
        refuse_isolate in 0u8..80, refuse_migrate in 10u8..90,
        ops in prop::collection::vec(op(), 1..30),
    ) {
        run(blocks, 0, seed, 6, (6, 0, free_pct), (refuse_isolate, refuse_migrate), &ops)?;
    }

    /// With only movable, unpinned order-0 frames and a willing migrator, a
    /// whole-zone compaction leaves all free memory but the meeting block
    /// and the watermark's slack as whole pageblocks, moving each frame at
    /// most once.
    #[test]
    fn full_compaction_builds_whole_pageblocks(blocks in 4u64..16, seed in any::<u64>(), free_pct in 40u64..90) {
        let span = PfnRange::new(Pfn(0), Pfn(blocks * 16));
        let cfg = config();
        let mut meta: Box<[MaybeUninit<u8>]> = Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
        let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
        zone.add_free_range(span).unwrap();
        let mut w = World::new(zone, seed);
        w.fragment(0, 0, 0, free_pct);
        let used = w.mig.owners.len() as u64;
        w.step(&Op::Full).map_err(TestCaseError::fail)?;
        let moved: u64 = w.mig.moves.iter().map(|m| 1u64 << m.order).sum();
        prop_assert!(moved <= used, "moved {} of {} frames", moved, used);
        let sources: std::collections::BTreeSet<u64> = w.mig.moves.iter().map(|m| m.src).collect();
        prop_assert_eq!(sources.len(), w.mig.moves.len(), "a frame moved twice");
        let z = w.zone.borrow();
        let free = z.free_pages();
        let whole: u64 = (4..=6u8).map(|o| z.buddy().free_blocks(Order::new(o).unwrap()) << o).sum();
        // Slack: the block where the scanners met, plus the frames the free
        // scanner must leave above the min watermark.
        let slack = 16 + w.marks.wmark.min + 16;
        prop_assert!(whole + slack >= free, "only {} of {} free frames in whole pageblocks", whole, free);
    }
}

/// Found by the fuzz target: a run that captured its block and then ran out
/// of destinations reported `Contended` and leaked the captured block.
#[test]
fn a_captured_block_is_never_lost() {
    let span = PfnRange::new(Pfn(0x5f), Pfn(0x35f));
    let cfg = MobilityConfig {
        buddy: BuddyConfig::new(Order::new(7).unwrap()),
        pageblock_order: Order::new(5).unwrap(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    };
    let mut meta: Box<[MaybeUninit<u8>]> =
        Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
    let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
    zone.add_free_range(span).unwrap();
    let mut w = World::new(zone, 16285016259070746463);
    w.fragment(2, 6, 6, 47);
    w.step(&Op::Direct(255, 255, 10)).unwrap();
    assert_eq!(w.captured, 1);
}

/// Found by the `compact_ops` fuzz target: a direct compaction moved a
/// block into a pageblock marked skip before the run.
#[test]
fn fuzz_regression_skip_marked_destination() {
    let cfg = MobilityConfig {
        buddy: BuddyConfig::new(Order::new(4).unwrap()),
        pageblock_order: Order::new(2).unwrap(),
        grouping: true,
        ..MobilityConfig::DEFAULT
    };
    let span = PfnRange::new(Pfn(0x2a), Pfn(0x86));
    let mut meta = vec![MaybeUninit::uninit(); MobileZone::metadata_bytes(span, cfg)];
    let mut zone = MobileZone::new(span, cfg, &mut meta).unwrap();
    zone.add_free_range(span).unwrap();
    let mut w = World::new(zone, 10131297721725397248);
    w.fragment(1, 10, 10, 52);
    w.check().unwrap();
    for op in [Op::Full, Op::Full, Op::Direct(139, 169, 0)] {
        w.step(&op).unwrap();
    }
}
