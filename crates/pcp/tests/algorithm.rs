//! Deterministic checks of the spec 04 rules, step by step.

use pageframe_models::pcp::RefZone;
use pageframe_pcp::{
    AllocMiss, FOREIGN_FRAMES, FreeOutcome, ListIndex, MigrateType, Order, PcpConfig, PcpError,
    PcpFlags, PcpSizing, PcpZone, PerCpuPages, Slot, ZoneFlags,
};

const O0: Order = Order::new_truncated(0);
const U: MigrateType = MigrateType::Unmovable;
const M: MigrateType = MigrateType::Movable;
const R: MigrateType = MigrateType::Reclaimable;

fn sizing(batch: u32, lo: u32, hi: u32) -> PcpSizing {
    PcpSizing::new(batch, lo, hi).unwrap()
}

fn cache(mem: &mut [Slot], s: PcpSizing) -> PerCpuPages<'_> {
    PerCpuPages::new(mem, s, PcpConfig::X86_64).unwrap()
}

#[test]
fn refill_grows_high_and_doubles_batch() {
    let zone = RefZone::with_blocks(O0, 0, 1000);
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    assert_eq!(c.high(), 16);
    // First refill: b = 4, high 16 -> 20, cap = 20 - 0 - 4 = 16 >= 4 so the
    // next refill doubles (spec 04 §4.2).
    c.alloc(&zone, O0, U).unwrap();
    assert_eq!((c.high(), c.count(), c.alloc_factor()), (20, 3, 1));
    assert_eq!(c.stats().refilled_blocks, 4);
    for _ in 0..3 {
        c.alloc(&zone, O0, U).unwrap();
    }
    assert_eq!(c.stats().refills, 1);
    assert_eq!(c.stats().local_hits, 3);
    // Second refill: b = 4 << 1 = 8, high 20 -> 28.
    c.alloc(&zone, O0, U).unwrap();
    assert_eq!((c.high(), c.count(), c.alloc_factor()), (28, 7, 2));
    assert_eq!(c.stats().refilled_blocks, 12);
    assert_eq!(c.stats().zone_lock_acquisitions, 2);
    // Refills keep growing high up to high_max and never past it.
    for _ in 0..400 {
        c.alloc(&zone, O0, U).unwrap();
        assert!(c.high() <= 64);
        c.validate().unwrap();
    }
    assert_eq!(c.high(), 64);
}

#[test]
fn refill_respects_invariant_7() {
    // An order-0 refill with alloc_factor f brings in <= batch << f and
    // <= max(batch, high' - count - batch) pages (spec 04 §12(7)).
    let zone = RefZone::with_blocks(O0, 0, 100_000);
    let mut mem = vec![Slot::EMPTY; 4096];
    let mut c = cache(&mut mem, sizing(31, 124, 2000));
    for _ in 0..5000 {
        let (f, count, refilled) = (c.alloc_factor(), c.count(), c.stats().refilled_blocks);
        c.alloc(&zone, O0, M).unwrap();
        let got = c.stats().refilled_blocks - refilled;
        if got > 0 {
            assert_eq!(count, 0, "refill only on an empty list");
            assert!(got <= (31u64 << f));
            assert!(got <= 31u64.max(c.high() as u64 - count as u64 - 31));
        }
    }
}

#[test]
fn free_spills_when_count_reaches_high_and_keeps_a_batch() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    for i in 0..15 {
        assert_eq!(
            c.free(&zone, pageframe_pcp::Pfn(i), O0, U),
            Ok(FreeOutcome::Cached)
        );
    }
    // 16th free: count 16 >= high 16. high is raised to free_count + batch
    // = 20 and clamp(free_count 16, batch 4, high - batch 12) = 12 pages go.
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(15), O0, U),
        Ok(FreeOutcome::Spilled(12))
    );
    assert_eq!((c.count(), c.high()), (4, 20));
    assert_eq!(zone.free_blocks(O0), 12);
    // Coldest first: the first frames freed are the ones spilled.
    let mut back = zone.blocks(O0);
    back.sort();
    assert_eq!(back, (0..12).collect::<Vec<u64>>());
    c.validate().unwrap();
}

#[test]
fn high_order_free_streak_drains_on_second_consecutive_free() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    let o1 = Order::new_truncated(1);
    // free_high needs free_count >= batch + high_min / 2 = 12 and the
    // previous free to be high-order too (spec 04 §5.2).
    for i in 0..6 {
        assert_eq!(
            c.free(&zone, pageframe_pcp::Pfn(2 * i), o1, U),
            Ok(FreeOutcome::Cached)
        );
    }
    // An order-0 free breaks the PREV_FREE_HIGH_ORDER streak...
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(100), O0, U),
        Ok(FreeOutcome::Cached)
    );
    assert!(!c.flags().contains(PcpFlags::PREV_FREE_HIGH_ORDER));
    // ...so the next order-1 free only re-arms it,
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(200), o1, U),
        Ok(FreeOutcome::Cached)
    );
    assert_eq!(c.count(), 15);
    // and the second consecutive one drains everything (count 17 < high
    // would not spill otherwise).
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(202), o1, U),
        Ok(FreeOutcome::Spilled(17))
    );
    assert_eq!(c.count(), 0);
    assert_eq!(c.stats().free_high_spills, 1);
    assert_eq!(c.high(), 16);
    c.validate().unwrap();
}

#[test]
fn free_high_batch_keeps_a_batch_cached() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 128];
    // FREE_HIGH_BATCH: free_high also needs count >= batch (spec 04 §8).
    let s = sizing(8, 16, 64).with_free_high_batch(true);
    let mut c = cache(&mut mem, s);
    assert!(c.flags().contains(PcpFlags::FREE_HIGH_BATCH));
    // Build a free streak of 16 pages on order 0, then spill it all with a
    // drain so count restarts at 0 while free_count stays high.
    for i in 0..20 {
        c.free(&zone, pageframe_pcp::Pfn(i), O0, U).unwrap();
    }
    c.drain(&zone);
    assert!(c.free_count() >= 8 + 8);
    // Two order-1 frees: the second has count 4 < batch 8, so no free_high.
    c.free(&zone, pageframe_pcp::Pfn(100), Order::new_truncated(1), U)
        .unwrap();
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(102), Order::new_truncated(1), U),
        Ok(FreeOutcome::Cached)
    );
    assert_eq!(c.stats().free_high_spills, 0);
}

#[test]
fn decay_by_an_eighth_down_to_high_min() {
    let zone = RefZone::with_blocks(O0, 0, 1000);
    let mut mem = vec![Slot::EMPTY; 256];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    let mut held = Vec::new();
    for _ in 0..200 {
        held.push(c.alloc(&zone, O0, U).unwrap());
    }
    assert_eq!(c.high(), 64);
    assert!(c.count() <= 64);
    let mut prev = c.high();
    while prev > 16 {
        let before = c.count();
        let more = c.decay(&zone);
        let expect = (prev - prev / 8).max(16);
        assert_eq!(c.high(), expect);
        assert!(c.count() <= c.high());
        // More work while high is above high_min or something was spilled.
        assert_eq!(more, expect > 16 || before > expect);
        prev = expect;
    }
    assert!(!c.decay(&zone), "nothing left to do at high_min");
    c.validate().unwrap();
}

#[test]
fn decay_spills_the_excess_over_high() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 256];
    // Manual mode high 40: fill to 39, then lower high_max to 20 via sizing
    // with auto bounds so decay has to push count under the new high.
    let mut c = cache(&mut mem, sizing(4, 40, 40));
    for i in 0..39 {
        c.free(&zone, pageframe_pcp::Pfn(i), O0, U).unwrap();
    }
    assert_eq!(c.count(), 39);
    c.set_sizing(sizing(4, 10, 20));
    assert_eq!(c.high(), 20);
    assert!(c.decay(&zone));
    // high = max(39 - 128, 20 - 2, 10) = 18; the 21 pages above it spill.
    assert_eq!((c.high(), c.count()), (18, 18));
    assert_eq!(zone.free_pages(), 21);
}

#[test]
fn decay_stalls_below_eight_as_linux_does() {
    let zone = RefZone::with_blocks(O0, 0, 1000);
    let mut mem = vec![Slot::EMPTY; 64];
    let mut c = cache(&mut mem, sizing(1, 2, 7));
    for _ in 0..20 {
        c.alloc(&zone, O0, U).unwrap();
    }
    assert_eq!(c.high(), 7);
    for _ in 0..10 {
        // 7 / 8 == 0: high stays above high_min and work is reported.
        assert!(c.decay(&zone));
        assert_eq!(c.high(), 7);
    }
}

#[test]
fn pressure_shrinks_high() {
    let zone = RefZone::with_blocks(O0, 0, 1000);
    let mut mem = vec![Slot::EMPTY; 256];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    let mut held = Vec::new();
    for _ in 0..200 {
        held.push(c.alloc(&zone, O0, U).unwrap());
    }
    assert_eq!(c.high(), 64);
    // BELOW_HIGH: refills stop growing high...
    zone.set_flags(ZoneFlags::BELOW_HIGH);
    let before = c.high();
    held.push(c.alloc(&zone, O0, U).unwrap());
    assert_eq!(c.high(), before);
    c.drain(&zone);
    // ...and every free shrinks it by max(free_count, batch) and spills down
    // to high_min once count reaches it.
    let mut last = c.high();
    for f in held.drain(..40) {
        c.free(&zone, f, O0, U).unwrap();
        assert!(c.high() < last || c.high() == 16);
        assert!(c.count() <= 16);
        last = c.high();
    }
    assert_eq!(c.high(), 16);
    assert!(zone.below_high_rechecks() > 0);
    // RECLAIM_ACTIVE: the threshold is capped at 4 * batch = 16.
    zone.set_flags(ZoneFlags::RECLAIM_ACTIVE);
    for f in held.drain(..40) {
        c.free(&zone, f, O0, U).unwrap();
        assert!(c.count() < 16);
    }
    c.validate().unwrap();
}

#[test]
fn manual_mode_keeps_high_fixed() {
    let zone = RefZone::with_blocks(O0, 0, 2000);
    let mut mem = vec![Slot::EMPTY; 256];
    let mut c = cache(&mut mem, sizing(4, 32, 32));
    let mut held = Vec::new();
    for i in 0..1000 {
        if i % 3 == 2 {
            let f = held.pop().unwrap();
            c.free(&zone, f, O0, U).unwrap();
        } else {
            held.push(c.alloc(&zone, O0, U).unwrap());
        }
        c.decay(&zone);
        assert_eq!(c.high(), 32);
    }
}

#[test]
fn boot_pageset_refills_one_and_spills_every_free() {
    let zone = RefZone::with_blocks(O0, 0, 10);
    let mut mem = vec![Slot::EMPTY; 16];
    let mut c = cache(&mut mem, PcpSizing::BOOT);
    let f = c.alloc(&zone, O0, U).unwrap();
    assert_eq!((c.count(), c.stats().refilled_blocks), (0, 1));
    assert_eq!(c.free(&zone, f, O0, U), Ok(FreeOutcome::Spilled(1)));
    assert_eq!(c.count(), 0);
    assert_eq!(zone.free_blocks(O0), 10);
}

#[test]
fn spill_is_round_robin_and_coldest_first() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 16];
    let mut c = cache(&mut mem, sizing(1, 4, 4));
    let f = pageframe_pcp::Pfn;
    c.free(&zone, f(10), O0, U).unwrap();
    c.free(&zone, f(20), O0, M).unwrap();
    c.free(&zone, f(30), O0, R).unwrap();
    // count 4 >= 4: clamp(free_count 4, 1, 3) = 3 pages, starting at the
    // MOVABLE list: 20 (tail, coldest), 21, then the next list: 30.
    assert_eq!(c.free(&zone, f(21), O0, M), Ok(FreeOutcome::Spilled(3)));
    assert_eq!(zone.blocks(O0), vec![20, 21, 30]);
    assert_eq!(c.list_len(ListIndex::new(0).unwrap()), 1);
}

#[test]
fn thp_order_uses_its_own_lists() {
    let thp = Order::new_truncated(9);
    let zone = RefZone::with_blocks(thp, 0, 8);
    let mut mem = vec![Slot::EMPTY; 16];
    let mut c = cache(&mut mem, sizing(4, 2048, 4096));
    let f = c.alloc(&zone, thp, M).unwrap();
    // A refill of a high order takes max(batch >> order, 2) = 2 blocks.
    assert_eq!(c.count(), 512);
    assert_eq!(c.list_len(ListIndex::new(13).unwrap()), 1);
    c.free(&zone, f, thp, R).unwrap();
    assert_eq!(c.list_len(ListIndex::new(12).unwrap()), 1);
    assert_eq!(c.count(), 1024);
    c.validate().unwrap();
}

#[test]
fn uncached_orders_are_refused_without_change() {
    let zone = RefZone::with_blocks(Order::new_truncated(4), 0, 8);
    let mut mem = vec![Slot::EMPTY; 16];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    c.free(&zone, pageframe_pcp::Pfn(1), O0, U).unwrap();
    let (count, high, stats) = (c.count(), c.high(), c.stats());
    assert_eq!(
        c.alloc(&zone, Order::new_truncated(4), U),
        Err(AllocMiss::NotCached)
    );
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(64), Order::new_truncated(5), U),
        Err(PcpError::NotCached)
    );
    assert_eq!((c.count(), c.high(), c.stats()), (count, high, stats));
    assert_eq!(zone.free_blocks(Order::new_truncated(4)), 8);
}

#[test]
fn empty_zone_is_a_miss() {
    let zone = RefZone::new();
    let mut mem = vec![Slot::EMPTY; 16];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    assert_eq!(c.alloc(&zone, O0, U), Err(AllocMiss::ZoneEmpty));
    assert_eq!(c.stats().misses, 1);
}

#[test]
fn small_slot_memory_never_loses_frames() {
    let zone = RefZone::with_blocks(O0, 0, 500);
    let mut mem = vec![Slot::EMPTY; 5];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    let mut held = Vec::new();
    for _ in 0..100 {
        held.push(c.alloc(&zone, O0, U).unwrap());
        assert!(c.count() <= 5);
    }
    for f in held.drain(..) {
        c.free(&zone, f, O0, M).unwrap();
        assert!(c.count() <= 5);
        c.validate().unwrap();
    }
    assert_eq!(zone.free_pages() + c.count() as u64, 500);
}

#[test]
fn alloc_bulk_fills_the_slice() {
    let zone = RefZone::with_blocks(O0, 0, 5000);
    let mut mem = vec![Slot::EMPTY; 512];
    let mut c = cache(&mut mem, sizing(63, 252, 400));
    let mut out = vec![pageframe_pcp::Pfn(0); 4096];
    assert_eq!(c.alloc_bulk(&zone, O0, U, &mut out), Ok(4096));
    let mut v: Vec<u64> = out.iter().map(|f| f.get()).collect();
    v.sort();
    v.dedup();
    assert_eq!(v.len(), 4096);
    assert_eq!(zone.free_pages() + c.count() as u64, 5000 - 4096);
    let mut rest = vec![pageframe_pcp::Pfn(0); 2000];
    let got = c.alloc_bulk(&zone, O0, U, &mut rest).unwrap();
    assert_eq!(got, 5000 - 4096);
    c.validate().unwrap();
}

/// A cache that keeps order-0 placement in regions of 16 frames.
fn homed(mem: &mut [Slot], s: PcpSizing) -> PerCpuPages<'_> {
    let config = PcpConfig::X86_64
        .with_home(Order::new_truncated(4))
        .unwrap();
    PerCpuPages::new(mem, s, config).unwrap()
}

#[test]
fn a_home_keeps_frees_inside_it_and_sends_the_others_back_in_batches() {
    // Frames 0..16 are region 0, 16..32 region 1, ...
    let zone = RefZone::with_blocks(O0, 0, 64);
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = homed(&mut mem, sizing(4, 64, 256));
    // The first refill (4 frames, 0..4) makes region 0 the home.
    let a = c.alloc(&zone, O0, U).unwrap();
    assert_eq!(a, pageframe_pcp::Pfn(0));
    // A free inside the home is cached and handed out again.
    assert_eq!(c.free(&zone, a, O0, U), Ok(FreeOutcome::Cached));
    assert_eq!((c.count(), c.foreign()), (4, 0));
    assert_eq!(c.alloc(&zone, O0, U), Ok(a));
    // Frees elsewhere (region 2) wait on the foreign list, are never handed
    // out, and go back to the zone once a batch (4) has gathered.
    let before = zone.free_blocks(O0);
    for f in 32..35 {
        assert_eq!(
            c.free(&zone, pageframe_pcp::Pfn(f), O0, U),
            Ok(FreeOutcome::Cached)
        );
    }
    assert_eq!((c.count(), c.foreign()), (6, 3));
    c.validate().unwrap();
    for want in 1..4 {
        assert_eq!(c.alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(want)));
    }
    assert_eq!(
        c.free(&zone, pageframe_pcp::Pfn(35), O0, U),
        Ok(FreeOutcome::Spilled(4))
    );
    assert_eq!(c.foreign(), 0);
    assert_eq!(zone.free_blocks(O0), before + 4);
    // Another type's list has a home of its own (none yet): its frees are
    // foreign.
    assert_eq!(c.free(&zone, a, O0, M), Ok(FreeOutcome::Cached));
    assert_eq!(c.foreign(), 1);
    c.validate().unwrap();
}

/// The foreign list goes back a batch at a time, however long the free
/// streak (frees into the home grow it too): a kernel giving back most of
/// what it holds leaves at most a batch of scattered frames waiting.
#[test]
fn foreign_frees_go_back_a_batch_at_a_time_in_a_free_streak() {
    let zone = RefZone::with_blocks(O0, 0, 64);
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = homed(&mut mem, sizing(4, 64, 256));
    // Twelve frames of region 0, all back home: a free streak of twelve.
    let got: Vec<_> = (0..12).map(|_| c.alloc(&zone, O0, U).unwrap()).collect();
    for &f in &got {
        assert_eq!(c.free(&zone, f, O0, U), Ok(FreeOutcome::Cached));
    }
    assert!(c.free_count() >= 12);
    // Frees of region 2, the streak going on: every fourth sends the
    // batch back.
    for f in 32..44 {
        let want = match f % 4 {
            3 => FreeOutcome::Spilled(4),
            _ => FreeOutcome::Cached,
        };
        assert_eq!(c.free(&zone, pageframe_pcp::Pfn(f), O0, U), Ok(want));
        assert!(c.foreign() < 4);
    }
    assert!(c.free_count() >= 24);
    c.validate().unwrap();
}

#[test]
fn the_home_moves_with_the_refill_and_idle_foreign_frees_leave() {
    let zone = RefZone::with_blocks(O0, 0, 128);
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = homed(&mut mem, sizing(4, 64, 256));
    // Take all of regions 0 to 3 (16 frames each) and the first frame of
    // region 4: each refill into the empty home moved it, and the fifth
    // took over the slot of region 0, the one moved to longest ago.
    let got: Vec<_> = (0..65).map(|_| c.alloc(&zone, O0, U).unwrap()).collect();
    assert_eq!(got[16], pageframe_pcp::Pfn(16));
    assert_eq!(got[64], pageframe_pcp::Pfn(64));
    // Region 0's frames are foreign now; those of the regions kept from
    // before (1 to 3) and of region 4 are held.
    let held = c.count();
    assert_eq!(c.free(&zone, got[0], O0, U), Ok(FreeOutcome::Cached));
    assert_eq!(c.foreign(), 1);
    for i in [16, 63, 64] {
        assert_eq!(c.free(&zone, got[i], O0, U), Ok(FreeOutcome::Cached));
    }
    assert_eq!((c.count(), c.foreign()), (held + 1 + 3, 1));
    c.validate().unwrap();
    // The current region's frames go out first (64 and what the last
    // refill brought after it), then the newest other region's.
    assert_eq!(c.alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(64)));
    for f in 65..65 + u64::from(held) {
        assert_eq!(c.alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(f)));
    }
    assert_eq!(c.alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(63)));
    assert_eq!(c.alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(16)));
    // A decay step sends foreign frees back even below a batch; a drain
    // empties the foreign list too.
    c.decay(&zone);
    assert_eq!(c.foreign(), 0);
    assert_eq!(c.free(&zone, got[1], O0, U), Ok(FreeOutcome::Cached));
    assert_eq!(c.foreign(), 1);
    c.drain(&zone);
    assert_eq!((c.count(), c.foreign()), (0, 0));
    c.validate().unwrap();
}

/// The foreign frames take no slot: a cache with a single slot still
/// holds a streak of them, and one whose batch is larger than
/// `FOREIGN_FRAMES` sends them back at that many, never losing one.
#[test]
fn foreign_frees_need_no_slot_and_go_back_at_the_stack_size() {
    let zone = RefZone::with_blocks(O0, 0, 8);
    let mut mem = vec![Slot::EMPTY; 1];
    let mut c = homed(&mut mem, sizing(100, 400, 1000));
    let a = c.alloc(&zone, O0, U).unwrap();
    let held = c.count();
    assert_eq!(held, 7, "a refill of eight, one handed out");
    let n = FOREIGN_FRAMES as u64;
    for f in 0..2 * n {
        let out = c.free(&zone, pageframe_pcp::Pfn(1000 + f), O0, U).unwrap();
        let want = if f % n == n - 1 {
            FreeOutcome::Spilled(n as u32)
        } else {
            FreeOutcome::Cached
        };
        assert_eq!(out, want, "free of {}", 1000 + f);
        assert_eq!(c.foreign() as u64, (f + 1) % n);
    }
    assert_eq!(c.count(), held);
    c.validate().unwrap();
    c.free(&zone, a, O0, U).unwrap();
    c.drain(&zone);
    assert_eq!(c.count(), 0);
    let mut back = zone.blocks(O0);
    back.sort();
    let want: Vec<u64> = (0..8).chain(1000..1000 + 2 * n).collect();
    assert_eq!(back, want);
}

/// Everything `try_alloc` may change, to compare before and after.
fn snapshot(c: &PerCpuPages<'_>) -> (u32, u32, u8, u32, pageframe_pcp::PcpStats) {
    (
        c.count(),
        c.high(),
        c.alloc_factor(),
        c.free_count(),
        c.stats(),
    )
}

/// With the zone free, `try_alloc` hands out what `alloc` hands out, and
/// leaves the cache as `alloc` leaves it: hits, refills and the tuning of
/// `high` alike.
#[test]
fn try_alloc_with_a_free_zone_is_alloc() {
    let (za, zb) = (
        RefZone::with_blocks(O0, 0, 1000),
        RefZone::with_blocks(O0, 0, 1000),
    );
    let (mut ma, mut mb) = (vec![Slot::EMPTY; 128], vec![Slot::EMPTY; 128]);
    let (mut a, mut b) = (
        cache(&mut ma, sizing(4, 16, 64)),
        cache(&mut mb, sizing(4, 16, 64)),
    );
    for i in 0..300 {
        // Frees now and then, so that streaks and spills play their part.
        if i % 7 == 3 {
            let f = pageframe_pcp::Pfn(5000 + i);
            a.free(&za, f, O0, U).unwrap();
            b.free(&zb, f, O0, U).unwrap();
        }
        assert_eq!(a.alloc(&za, O0, U), b.try_alloc(&zb, O0, U), "step {i}");
        assert_eq!(snapshot(&a), snapshot(&b), "step {i}");
    }
    assert!(b.stats().refills > 5);
    b.validate().unwrap();
}

/// The zone's lock is held (by this very thread: the interrupted holder
/// of an NMI): `try_alloc` on an empty list returns `Busy` at once and
/// changes nothing, neither the cache, its counters and tuning nor the
/// zone; with the lock free again it refills.
#[test]
fn try_alloc_with_the_zone_busy_changes_nothing() {
    let zone = RefZone::with_blocks(O0, 0, 100);
    let mut mem = vec![Slot::EMPTY; 64];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    // A hit needs no zone: one frame cached, taken while the lock is held.
    c.free(&zone, pageframe_pcp::Pfn(500), O0, U).unwrap();
    let held = zone.hold();
    assert_eq!(c.try_alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(500)));
    let before = snapshot(&c);
    assert_eq!(c.try_alloc(&zone, O0, U), Err(AllocMiss::Busy));
    assert_eq!(snapshot(&c), before);
    drop(held);
    assert_eq!(zone.free_blocks(O0), 100);
    assert_eq!(c.try_alloc(&zone, O0, U), Ok(pageframe_pcp::Pfn(0)));
    assert_eq!(c.stats().refills, 1);
    assert!(c.count() > 0);
    c.validate().unwrap();
}

/// A zone that never implemented `try_refill` refuses it: such a zone's
/// callers that must not wait get the cache's hits only.
#[test]
fn try_refill_is_refused_by_default() {
    struct Plain(RefZone);
    impl PcpZone for Plain {
        fn refill(&self, o: Order, mt: MigrateType, sink: &mut pageframe_pcp::RefillSink<'_, '_>) {
            self.0.refill(o, mt, sink)
        }
        fn spill(&self, batch: &mut pageframe_pcp::SpillBatch<'_, '_>) {
            self.0.spill(batch)
        }
    }
    let zone = Plain(RefZone::with_blocks(O0, 0, 100));
    let mut mem = vec![Slot::EMPTY; 64];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    assert_eq!(c.try_alloc(&zone, O0, U), Err(AllocMiss::Busy));
    assert_eq!((c.count(), c.stats().refills), (0, 0));
    assert_eq!(zone.0.free_blocks(O0), 100);
}

/// Every slot holds another list's block: a refill would spill a batch
/// first (the zone lock), so `try_alloc` returns `Busy` and nothing moves.
#[test]
fn try_alloc_never_spills_to_make_room() {
    let zone = RefZone::with_blocks(O0, 0, 100);
    let mut mem = vec![Slot::EMPTY; 4];
    let mut c = cache(&mut mem, sizing(4, 16, 64));
    for i in 0..4 {
        c.free(&zone, pageframe_pcp::Pfn(1000 + i), O0, M).unwrap();
    }
    assert_eq!(c.count(), 4);
    let before = snapshot(&c);
    assert_eq!(c.try_alloc(&zone, O0, U), Err(AllocMiss::Busy));
    assert_eq!(snapshot(&c), before);
    assert_eq!(zone.free_blocks(O0), 100);
    // The ordinary path spills to make room and refills.
    c.alloc(&zone, O0, U).unwrap();
    assert!(c.stats().spills > 0);
}

#[test]
fn runs_come_from_the_home_and_go_back_as_frame_by_frame_frees_would() {
    use pageframe_pcp::Pfn;
    let zone = RefZone::with_blocks(O0, 0, 64);
    let (mut mem, mut mem2) = (vec![Slot::EMPTY; 128], vec![Slot::EMPTY; 128]);
    let mut c = homed(&mut mem, sizing(8, 64, 256));
    // Out of range: nothing, not even a refill.
    assert_eq!(c.alloc_run(&zone, 1, U), None);
    assert_eq!(c.alloc_run(&zone, 65, U), None);
    assert_eq!(
        (c.count(), c.stats().allocs, zone.free_blocks(O0)),
        (0, 0, 64)
    );
    // No home yet: a refill of 8 (frames 0..8) makes region 0 the home,
    // and the run comes from it (not a local hit: the refill served it).
    assert_eq!(c.alloc_run(&zone, 3, U), Some(Pfn(0)));
    assert_eq!(
        (c.count(), c.stats().allocs, c.stats().local_hits),
        (5, 3, 0)
    );
    // The home holds frames: no refill for a run it lacks.
    assert_eq!(c.alloc_run(&zone, 6, U), None, "3..8 is five frames");
    assert_eq!(zone.free_blocks(O0), 56);
    assert_eq!(c.alloc_run(&zone, 5, U), Some(Pfn(3)));
    assert_eq!(
        (c.count(), c.stats().allocs, c.stats().local_hits),
        (0, 8, 5)
    );
    // Back as a run: the same books as three frees of one frame each.
    let mut d = homed(&mut mem2, sizing(8, 64, 256));
    let zone2 = RefZone::with_blocks(O0, 0, 64);
    for _ in 0..8 {
        d.alloc(&zone2, O0, U).unwrap();
    }
    assert_eq!(c.free_run(&zone, Pfn(1), 3, U), Some(FreeOutcome::Cached));
    for f in 1..4 {
        assert_eq!(d.free(&zone2, Pfn(f), O0, U), Ok(FreeOutcome::Cached));
    }
    assert_eq!(c.count(), d.count());
    assert_eq!(c.stats().frees, d.stats().frees);
    assert_eq!(c.high(), d.high());
    // A run held already, reaching outside the home, or across a word
    // while the home holds frames: refused whole, nothing changed; the
    // caller frees it frame by frame.
    assert_eq!(c.free_run(&zone, Pfn(3), 2, U), None);
    assert_eq!(c.free_run(&zone, Pfn(14), 4, U), None);
    assert_eq!(c.free_run(&zone, Pfn(20), 2, U), None, "another region");
    assert_eq!(c.count(), d.count());
    c.validate().unwrap();
    // An empty home moves to the region of a run given back to it (the
    // caller's next run comes from there rather than from the zone).
    assert_eq!(c.alloc_run(&zone, 3, U), Some(Pfn(1)));
    assert_eq!(c.count(), 0);
    assert_eq!(c.free_run(&zone, Pfn(5), 3, U), Some(FreeOutcome::Cached));
    assert_eq!(c.alloc_run(&zone, 2, U), Some(Pfn(5)), "no refill");
    assert_eq!(zone.free_blocks(O0), 56);
    c.validate().unwrap();
    c.drain(&zone);
    assert_eq!(zone.free_blocks(O0), 57, "frame 7 came back");
}

/// The home hit alone hands out what `alloc` hands out while the home
/// holds frames and leaves the cache as `alloc` leaves it; with the home
/// empty, or no home at all, it gives nothing and changes nothing (the
/// refill is `alloc`'s).
#[test]
fn a_home_hit_is_alloc_without_the_refill() {
    let (za, zb) = (
        RefZone::with_blocks(O0, 0, 64),
        RefZone::with_blocks(O0, 0, 64),
    );
    let (mut ma, mut mb) = (vec![Slot::EMPTY; 128], vec![Slot::EMPTY; 128]);
    let (mut a, mut b) = (
        homed(&mut ma, sizing(4, 64, 256)),
        homed(&mut mb, sizing(4, 64, 256)),
    );
    // No home yet: nothing.
    let before = snapshot(&a);
    assert_eq!(a.alloc_home_hit(U), None);
    assert_eq!(snapshot(&a), before);
    // Both refilled alike (4 frames, one handed out), then a free streak
    // that an allocation breaks.
    assert_eq!(a.alloc(&za, O0, U), b.alloc(&zb, O0, U));
    let (fa, fb) = (a.alloc(&za, O0, U).unwrap(), b.alloc(&zb, O0, U).unwrap());
    assert_eq!(fa, fb);
    assert_eq!(a.free(&za, fa, O0, U), b.free(&zb, fb, O0, U));
    assert!(a.free_count() > 0, "a free streak to break");
    for _ in 0..3 {
        let got = a.alloc_home_hit(U);
        assert!(got.is_some());
        assert_eq!(Ok(got.unwrap()), b.alloc(&zb, O0, U));
        assert_eq!(snapshot(&a), snapshot(&b));
    }
    // The home is empty now: nothing, nothing changed; `alloc` refills.
    let before = snapshot(&a);
    assert_eq!(a.alloc_home_hit(U), None);
    assert_eq!(snapshot(&a), before);
    assert_eq!(a.alloc(&za, O0, U), b.alloc(&zb, O0, U));
    assert_eq!(snapshot(&a), snapshot(&b));
    // Another type's list has no home yet; a cache without homes has none.
    assert_eq!(a.alloc_home_hit(M), None);
    let mut mc = vec![Slot::EMPTY; 128];
    let mut c = cache(&mut mc, sizing(4, 64, 256));
    c.alloc(&za, O0, U).unwrap();
    let before = snapshot(&c);
    assert_eq!(c.alloc_home_hit(U), None);
    assert_eq!(snapshot(&c), before);
    a.validate().unwrap();
}

/// The home free hit takes a frame of the home exactly as `free` does and
/// leaves the cache as `free` leaves it; every other free it leaves alone,
/// nothing changed: a frame outside the home (`Foreign`), a free that
/// would reach `high` or meets a zone under pressure, a frame the home
/// holds already, a cache without homes (`Other`).
#[test]
fn a_home_free_hit_is_free_without_the_spill() {
    use pageframe_pcp::HomeFree;
    let (za, zb) = (
        RefZone::with_blocks(O0, 0, 64),
        RefZone::with_blocks(O0, 0, 64),
    );
    let (mut ma, mut mb) = (vec![Slot::EMPTY; 128], vec![Slot::EMPTY; 128]);
    let (mut a, mut b) = (
        homed(&mut ma, sizing(4, 8, 256)),
        homed(&mut mb, sizing(4, 8, 256)),
    );
    // Both refilled alike: the home is region 0 (frames 0..16), three of
    // its frames cached, one handed out; then an allocation streak that a
    // free halves.
    let mut held = Vec::new();
    for _ in 0..3 {
        let (fa, fb) = (a.alloc(&za, O0, U).unwrap(), b.alloc(&zb, O0, U).unwrap());
        assert_eq!(fa, fb);
        held.push(fa);
    }
    assert!(a.alloc_factor() > 0, "an allocation streak to halve");
    // Each held frame back: the hit and `free` agree step by step.
    for &f in held.iter().rev() {
        assert_eq!(a.free_home_hit(&za, f, U), HomeFree::Hit);
        assert_eq!(b.free(&zb, f, O0, U), Ok(FreeOutcome::Cached));
        assert_eq!(snapshot(&a), snapshot(&b));
    }
    // The same frames come out of both, in the same order; the home still
    // holds the last.
    for _ in 0..3 {
        assert_eq!(a.alloc_home_hit(U), b.alloc_home_hit(U));
    }
    let last = held[2] + 1;
    // A frame held already; one of another region, and one of a list
    // whose home holds no region yet (both foreign): nothing changed.
    let before = snapshot(&a);
    assert_eq!(a.free_home_hit(&za, last, U), HomeFree::Other);
    let f = a.alloc_home_hit(U).unwrap();
    assert_eq!(f, last);
    assert_eq!(b.alloc_home_hit(U), Some(f));
    assert_ne!(snapshot(&a), before, "the allocation counted");
    let before = snapshot(&a);
    assert_eq!(
        a.free_home_hit(&za, pageframe_pcp::Pfn(40), U),
        HomeFree::Foreign
    );
    assert_eq!(a.free_home_hit(&za, f, M), HomeFree::Foreign);
    assert_eq!(snapshot(&a), before);
    // A zone under pressure: `free` decides (and may spill).
    za.set_flags(ZoneFlags::BELOW_HIGH);
    assert_eq!(a.free_home_hit(&za, f, U), HomeFree::Other);
    assert_eq!(snapshot(&a), before);
    za.set_flags(ZoneFlags::empty());
    // A free that reaches `high`: `free` decides.
    let zd = RefZone::with_blocks(O0, 0, 64);
    let mut md = vec![Slot::EMPTY; 128];
    let mut d = homed(&mut md, sizing(4, 4, 4));
    let got: Vec<_> = (0..3).map(|_| d.alloc(&zd, O0, U).unwrap()).collect();
    assert_eq!((d.count(), d.high()), (1, 4));
    assert_eq!(d.free_home_hit(&zd, got[2], U), HomeFree::Hit);
    assert_eq!(d.free_home_hit(&zd, got[1], U), HomeFree::Hit);
    let before = snapshot(&d);
    assert_eq!(d.free_home_hit(&zd, got[0], U), HomeFree::Other);
    assert_eq!(snapshot(&d), before);
    assert!(d.free(&zd, got[0], O0, U).is_ok());
    d.validate().unwrap();
    // A cache without homes has no hit.
    let mut mc = vec![Slot::EMPTY; 128];
    let mut c = cache(&mut mc, sizing(4, 64, 256));
    let g = c.alloc(&za, O0, U).unwrap();
    let before = snapshot(&c);
    assert_eq!(c.free_home_hit(&za, g, U), HomeFree::Other);
    assert_eq!(snapshot(&c), before);
    a.validate().unwrap();
}

/// Hot frames (spec 04 §5.7): a free of a frame of its home goes hot and
/// the next allocation of its type takes it back, newest first, before
/// the home; a frame outside the home, or one more than the stack holds,
/// does not go hot; a drain sends the hot frames to the zone with the
/// foreign list.
#[test]
fn hot_frames_come_back_first_and_drain_with_the_cache() {
    use pageframe_pcp::{HOT_FRAMES, HomeFree};
    let zone = RefZone::with_blocks(O0, 0, 64);
    let mut mem = vec![Slot::EMPTY; 128];
    let mut c = homed(&mut mem, sizing(16, 64, 256));
    let first = c.alloc(&zone, O0, U).unwrap();
    let held: Vec<_> = (0..HOT_FRAMES)
        .map(|_| c.alloc(&zone, O0, U).unwrap())
        .collect();
    let count = c.count();
    // The home's frames freed: hot, counted in the cache and as frees.
    let frees = c.stats().frees;
    for &f in &held {
        assert_eq!(c.free_hit(&zone, f, U), HomeFree::Hit);
    }
    assert_eq!(c.hot(), HOT_FRAMES as u32);
    assert_eq!(c.count(), count + HOT_FRAMES as u32);
    assert_eq!(c.stats().frees, frees + HOT_FRAMES as u64);
    c.validate().unwrap();
    // The stack is full: the next one goes into the home's bitmap.
    assert_eq!(c.free_hit(&zone, first, U), HomeFree::Hit);
    assert_eq!(c.hot(), HOT_FRAMES as u32);
    // A hot free is the last free, of order 0: a higher-order free's mark
    // goes (spec 04 §5.2), as any order-0 free clears it.
    let o1 = Order::new_truncated(1);
    c.free(&zone, pageframe_pcp::Pfn(128), o1, U).unwrap();
    assert!(c.flags().contains(PcpFlags::PREV_FREE_HIGH_ORDER));
    let back = c.alloc_hit(U, || true).unwrap();
    assert_eq!(c.free_hit(&zone, back, U), HomeFree::Hit);
    assert!(!c.flags().contains(PcpFlags::PREV_FREE_HIGH_ORDER));
    // A frame outside the home never goes hot.
    assert!(!c.hot_takes(pageframe_pcp::Pfn(40), U));
    // Newest first, only to its own type; the watermark closure is asked
    // only once the stack has nothing of the type.
    assert_eq!(c.alloc_hit(M, || true), None, "a movable list has no home");
    let newest = *held.last().unwrap();
    assert_eq!(c.alloc_hit(U, || unreachable!("hot first")), Some(newest));
    assert_eq!(c.hot(), HOT_FRAMES as u32 - 1);
    c.validate().unwrap();
    // A drain empties the stack too: every frame but the one still out
    // goes back to the zone.
    c.drain(&zone);
    assert_eq!((c.hot(), c.count()), (0, 0));
    assert_eq!(zone.free_blocks(O0), 64 - 1);
    assert_eq!(zone.free_blocks(o1), 1, "the order-1 block drained too");
    c.validate().unwrap();
}
