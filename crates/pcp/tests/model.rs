//! Property tests against a reference zone (spec 04 §12): conservation of
//! frames between the zone, the cache and the caller, count bounds, `high`
//! within `[high_min, high_max]`, and the decay rule; with a home
//! (`PcpConfig::with_home`), a frame freed outside its regions is never
//! handed out before it has been back in the zone.

use std::collections::{BTreeMap, BTreeSet};

use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    FreeOutcome, HOME_REGIONS, Order, PCP_LIST_TYPES, PcpConfig, PcpError, PcpSizing, PerCpuPages,
    Pfn, Slot, ZoneFlags,
};
use proptest::prelude::*;

const ORDERS: [u8; 5] = [0, 1, 2, 3, 9];
const INITIAL: [(u8, u64, u64); 5] = [
    // (order, first frame, blocks): disjoint ranges.
    (0, 0, 600),
    (1, 1_000, 60),
    (2, 2_000, 40),
    (3, 3_000, 30),
    (9, 1 << 20, 6),
];

#[derive(Clone, Debug)]
enum Op {
    Alloc { order: usize, mt: u8 },
    Free { pick: usize, mt: u8 },
    Decay,
    Drain,
    DrainBatch,
    Flags(u8),
    Resize { batch: u32, lo: u32, span: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..ORDERS.len(), 0u8..3).prop_map(|(order, mt)| Op::Alloc { order, mt }),
        6 => (any::<usize>(), 0u8..3).prop_map(|(pick, mt)| Op::Free { pick, mt }),
        1 => Just(Op::Decay),
        1 => Just(Op::Drain),
        1 => Just(Op::DrainBatch),
        1 => (0u8..4).prop_map(Op::Flags),
        1 => (1u32..8, 0u32..64, 0u32..256).prop_map(|(batch, lo, span)| Op::Resize { batch, lo, span }),
    ]
}

/// Every frame is in exactly one place, and the places add up to the start.
fn check_conservation(zone: &RefZone, c: &PerCpuPages<'_>, held: &[(Pfn, Order)]) {
    let mut seen: BTreeMap<(u8, u64), u32> = BTreeMap::new();
    for &o in &ORDERS {
        for f in zone.blocks(Order::new_truncated(o)) {
            *seen.entry((o, f)).or_default() += 1;
        }
    }
    let thp = c.config().thp_order().unwrap();
    c.for_each_block(|li, f| *seen.entry((li.order(thp).get(), f.get())).or_default() += 1);
    for &(f, o) in held {
        *seen.entry((o.get(), f.get())).or_default() += 1;
    }
    let expected: usize = INITIAL.iter().map(|&(_, _, n)| n as usize).sum();
    assert_eq!(seen.len(), expected, "a frame was lost or invented");
    for ((o, f), n) in seen {
        assert_eq!(n, 1, "frame {f} of order {o} is in two places");
        let (_, first, count) = INITIAL.iter().find(|x| x.0 == o).copied().unwrap();
        assert!(f >= first && f < first + (count << o) && (f - first) % (1 << o) == 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn pcp_matches_the_model(
        slots in 4usize..300,
        batch in 1u32..16,
        lo in 0u32..128,
        span in 0u32..512,
        ops in proptest::collection::vec(op(), 1..200),
        home in proptest::option::of(0u8..6),
    ) {
        let zone = RefZone::new();
        for (o, first, n) in INITIAL {
            zone.add_blocks(Order::new_truncated(o), first, n);
        }
        let mut mem = vec![Slot::EMPTY; slots];
        let sizing = PcpSizing::new(batch, lo, lo + span).unwrap();
        let config = match home {
            Some(h) => PcpConfig::X86_64.with_home(Order::new_truncated(h)).unwrap(),
            None => PcpConfig::X86_64,
        };
        let mut c = PerCpuPages::new(&mut mem, sizing, config).unwrap();
        let mut held: Vec<(Pfn, Order)> = Vec::new();
        // Order-0 frames freed outside their home and not yet back in the zone.
        let mut foreign: BTreeSet<u64> = BTreeSet::new();
        // Each order-0 list's home regions as the model sees them, the one
        // moved to longest ago first: a refill into the empty home moves
        // it to the refill's region (the frame handed out comes from it),
        // which is the newest now, dropping the oldest when the region is
        // new and the home has all it keeps.
        let mut homes: [Vec<u64>; 3] = Default::default();
        for op in ops {
            match op {
                Op::Alloc { order, mt } => {
                    let o = Order::new_truncated(ORDERS[order]);
                    let refills = c.stats().refills;
                    if let Ok(f) = c.alloc(&zone, o, PCP_LIST_TYPES[(mt) as usize]) {
                        prop_assert!(
                            o.get() != 0 || !foreign.contains(&f.get()),
                            "frame {} freed outside its home was handed out again", f.get()
                        );
                        held.push((f, o));
                        if let (0, Some(h)) = (o.get(), home)
                            && c.stats().refills != refills
                        {
                            let regions = &mut homes[mt as usize];
                            let r = f.get() >> h;
                            if let Some(i) = regions.iter().position(|&x| x == r) {
                                regions.remove(i);
                            } else if regions.len() == HOME_REGIONS {
                                regions.remove(0);
                            }
                            regions.push(r);
                        }
                    }
                }
                Op::Free { pick, mt } => {
                    if !held.is_empty() {
                        let (f, o) = held.swap_remove(pick % held.len());
                        let count = c.count();
                        let r = match c.free(&zone, f, o, PCP_LIST_TYPES[(mt) as usize]) {
                            Ok(r) => r,
                            // No slot left even after spilling (a small
                            // arena): documented as "free to the zone
                            // directly", the block is still the caller's.
                            Err(PcpError::NoRoom) => {
                                let mut cached = false;
                                c.for_each_block(|_, g| cached |= g == f);
                                prop_assert!(!cached, "refused frame {} was kept", f.get());
                                held.push((f, o));
                                continue;
                            }
                            Err(e) => return Err(TestCaseError::fail(format!("free: {e:?}"))),
                        };
                        if let (0, Some(h)) = (o.get(), home) {
                            // Kept on its list only inside the home, else
                            // foreign (or already back in the zone).
                            let inside = homes[mt as usize].contains(&(f.get() >> h));
                            let mut place = None;
                            c.for_each_block(|l, g| if g == f { place = Some(l.is_foreign()) });
                            prop_assert!(
                                place.is_none() || place == Some(!inside),
                                "frame {} freed {} its home went to the {} list",
                                f.get(),
                                if inside { "inside" } else { "outside" },
                                if inside { "foreign" } else { "home" }
                            );
                        }
                        match r {
                            FreeOutcome::Cached => prop_assert_eq!(c.count(), count + o.pages() as u32),
                            // Whole blocks leave, so the spill may overshoot
                            // by less than one block (spec 04 §5.5).
                            FreeOutcome::Spilled(n) => {
                                prop_assert!(n > 0);
                                prop_assert_eq!(c.count() + n, count + o.pages() as u32);
                            }
                        }
                    }
                }
                Op::Decay => {
                    // `high` follows the lists' pages (Linux's count).
                    let (h, count) = (c.high() as i64, (c.count() - c.foreign()) as i64);
                    let s = c.sizing();
                    let min = s.high_min() as i64;
                    c.decay(&zone);
                    let new = c.high() as i64;
                    if h > min {
                        let idle = count - ((s.batch() as i64) << c.config().scale_max());
                        let want = idle.max(h - h / 8).max(min).min(s.high_max() as i64);
                        prop_assert_eq!(new, want);
                    } else {
                        prop_assert_eq!(new, h);
                    }
                    if count <= h {
                        prop_assert!(new <= h, "decay raised high");
                    }
                    prop_assert!(c.count() <= c.high());
                }
                Op::Drain => {
                    c.drain(&zone);
                    prop_assert_eq!(c.count(), 0);
                }
                Op::DrainBatch => {
                    let before = c.count();
                    let n = c.drain_batch(&zone);
                    prop_assert_eq!(c.count() + n, before);
                }
                Op::Flags(f) => zone.set_flags(ZoneFlags::from_bits_truncate(f)),
                Op::Resize { batch, lo, span } => {
                    c.set_sizing(PcpSizing::new(batch, lo, lo + span).unwrap());
                }
            }
            if let Err(e) = c.validate() {
                prop_assert!(false, "validate: {}", e);
            }
            prop_assert!(home.is_some() || c.foreign() == 0);
            c.for_each_block(|li, f| {
                if li.is_foreign() {
                    foreign.insert(f.get());
                }
            });
            for f in zone.blocks(Order::new_truncated(0)) {
                foreign.remove(&f);
            }
            let s = c.sizing();
            prop_assert!(c.high() >= s.high_min() && c.high() <= s.high_max());
            prop_assert!(c.count() as u64 <= slots as u64 * 512);
            check_conservation(&zone, &c, &held);
        }
        c.drain(&zone);
        for (f, o) in held.drain(..) {
            zone.put(f, o);
        }
        let total: u64 = INITIAL.iter().map(|&(o, _, n)| n << o).sum();
        prop_assert_eq!(zone.free_pages(), total);
    }
}
