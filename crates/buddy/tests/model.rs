//! Property tests: random operation sequences against the reference model
//! of `pageframe_models::buddy` (frame by frame: hole, free or allocated).

mod common;

use common::o;
use pageframe_buddy::{BuddyConfig, BuddyZone, Order, Pfn, PfnRange, SingleList};
use pageframe_models::buddy::{Model, Op};
use proptest::prelude::*;

/// Span lengths; small under Miri, where every step's `validate()` is slow.
const MAX_LEN: u64 = if cfg!(miri) { 400 } else { 3000 };

type Scenario = (u8, u8, u64, u64, Vec<(u64, u64)>, Vec<Op>);

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop_oneof![Just(3u8), Just(5u8), Just(10u8)],
        // Chunk order: single frames (all blocks linked), small, word-sized
        // and the default (capped by the maximum order).
        prop_oneof![Just(0u8), Just(2u8), Just(6u8), Just(9u8)],
        0u64..5000,
        64u64..MAX_LEN,
    )
        .prop_flat_map(|(max, chunk, start, len)| {
            let ranges = prop::collection::vec((0..len, 1..len), 1..4);
            let op = prop_oneof![
                4 => (0..=max + 1).prop_map(Op::Alloc),
                4 => any::<usize>().prop_map(Op::Free),
                1 => (0..len + 8, 0..=max + 1).prop_map(move |(p, k)| Op::FreeAny(start + p, k)),
                1 => (0..len + 8, 0..=max).prop_map(move |(p, k)| Op::AllocAt(start + p, k)),
                1 => (0..len + 8, 1u64..200).prop_map(move |(p, n)| Op::Reserve(start + p, n)),
                1 => any::<usize>().prop_map(Op::Release),
                1 => Just(Op::Hold),
                3 => any::<usize>().prop_map(Op::HeldAlloc),
                2 => (any::<usize>(), any::<bool>()).prop_map(|(n, z)| Op::HeldFree(n, z)),
                1 => any::<usize>().prop_map(Op::Unhold),
                2 => (0u32..70).prop_map(Op::AllocRun),
                1 => (0..len + 8, 0u32..70).prop_map(move |(p, n)| Op::FreeRun(start + p, n)),
                2 => (any::<usize>(), 1u32..20).prop_map(|(i, n)| Op::FreeLiveRun(i, n)),
            ];
            (
                Just(max),
                Just(chunk.min(max)),
                Just(start),
                Just(len),
                ranges,
                prop::collection::vec(op, 1..120),
            )
        })
}

fn cases() -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 1 } else { 256 },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn buddy_matches_model((max, chunk, start, len, ranges, ops) in scenario()) {
        let span = PfnRange::new(Pfn(start), Pfn(start + len));
        let config = BuddyConfig { max_order: o(max), chunk_order: Order::new(chunk).unwrap() };
        let mut m = vec![std::mem::MaybeUninit::uninit(); BuddyZone::<SingleList>::metadata_bytes(span, config)];
        let mut z = BuddyZone::new(span, config, &mut m, SingleList).unwrap();
        let mut model = Model::new(span, o(max));
        for (a, n) in ranges {
            let r = PfnRange::new(Pfn(start + a), Pfn(start + a + n));
            model.add_range(&mut z, r).map_err(TestCaseError::fail)?;
        }
        for op in &ops {
            model.step(&mut z, op).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
        }
        model.free_all_and_check(&mut z).map_err(TestCaseError::fail)?;
    }
}
