//! Property tests: random mobility operations against the shared model.

use std::mem::MaybeUninit;

use pageframe_buddy::{Pfn, PfnRange};
use pageframe_mobility::{MobileZone, MobilityConfig, Placement};
use pageframe_models::mobility::{Model, Op};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Every order, 4..=6 included (the claim rule's threshold is order 4).
        8 => (0u8..11, 0u8..3, 0u8..8).prop_map(|(k, t, m)| Op::Alloc(k, t, m)),
        6 => any::<usize>().prop_map(Op::Free),
        1 => (0u64..5000, 0u8..12).prop_map(|(p, k)| Op::FreeAny(p, k)),
        1 => any::<usize>().prop_map(Op::Isolate),
        1 => any::<usize>().prop_map(Op::Unisolate),
        1 => (any::<usize>(), 0u8..6).prop_map(|(n, t)| Op::SetType(n, t)),
        1 => any::<usize>().prop_map(Op::Reserve),
        1 => (0u8..3, any::<bool>()).prop_map(|(t, f)| Op::Unreserve(t, f)),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(n, on)| Op::Pin(n, on)),
        1 => any::<u64>().prop_map(Op::TakeFree),
    ]
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 2 } else { 128 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn mobility_matches_model(blocks in 1u64..12, offset in 0u64..600, grouping in any::<bool>(),
                              pageblock in prop_oneof![Just(4u8), Just(9u8), Just(10u8)],
                              ops in prop::collection::vec(op(), 1..150)) {
        let span = PfnRange::new(Pfn(offset), Pfn(offset + blocks * 512));
        // Pageblocks below, at and above the core's largest chunk (9).
        let cfg = MobilityConfig {
            grouping,
            pageblock_order: pageframe_buddy::Order::new(pageblock).unwrap(),
            ..MobilityConfig::default()
        };
        let mut meta: Box<[MaybeUninit<u8>]> = Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
        let mut z = MobileZone::new(span, cfg, &mut meta).unwrap();
        z.add_free_range(span).unwrap();
        let mut model = Model::default();
        for op in &ops {
            model.step(&mut z, op).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
        }
        model.free_all(&mut z).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(cases())]

    /// Small superpageblocks (8 or 16 pageblocks of 16 frames), so that a
    /// zone has many, under every placement: the fallback rules and the
    /// taint counts (`validate`) hold through every operation.
    #[test]
    fn superpageblocks_match_model(blocks in 1u64..12, offset in 0u64..600,
                                   shift in 7u8..9, placement in 0usize..3,
                                   ops in prop::collection::vec(op(), 1..200)) {
        let span = PfnRange::new(Pfn(offset), Pfn(offset + blocks * 512));
        let cfg = MobilityConfig {
            buddy: pageframe_buddy::BuddyConfig::new(pageframe_buddy::Order::new(6).unwrap()),
            pageblock_order: pageframe_buddy::Order::new(4).unwrap(),
            superpageblock_shift: shift,
            ..MobilityConfig::default()
        };
        let mut meta: Box<[MaybeUninit<u8>]> = Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
        let mut z = MobileZone::new(span, cfg, &mut meta).unwrap();
        z.set_placement(Placement::ALL[placement]);
        z.add_free_range(span).unwrap();
        let mut model = Model::default();
        for op in &ops {
            model.step(&mut z, op).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
        }
        model.free_all(&mut z).map_err(TestCaseError::fail)?;
    }
}
