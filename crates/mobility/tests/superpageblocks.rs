//! Superpageblocks: fallbacks for memory that cannot move keep to the
//! regions it taints already (then the least free clean one), and the
//! taint counts follow every change of a pageblock's type. Small regions
//! here: pageblocks of 16 frames, maximum-order blocks of 64, regions of
//! 256 (16 pageblocks).

use std::mem::MaybeUninit;

use pageframe_buddy::{BuddyConfig, Order, Pfn, PfnRange};
use pageframe_mobility::{AllocMode, MigrateType as M, MobileZone, MobilityConfig, Placement};

const PB: u64 = 16;
const REGION: u64 = 256;

fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

fn config() -> MobilityConfig {
    MobilityConfig {
        buddy: BuddyConfig::new(o(6)),
        pageblock_order: o(4),
        superpageblock_shift: 8,
        ..MobilityConfig::DEFAULT
    }
}

/// A zone over `span`, all of it handed over.
fn zone(span: PfnRange, meta: &mut Box<[MaybeUninit<u8>]>) -> MobileZone<'_> {
    let mut z = MobileZone::new(span, config(), meta).unwrap();
    z.add_free_range(span).unwrap();
    z
}

fn meta(span: PfnRange) -> Box<[MaybeUninit<u8>]> {
    Box::new_uninit_slice(MobileZone::metadata_bytes(span, config()))
}

/// Every frame taken as movable order 0.
fn fill_movable(z: &mut MobileZone<'_>) {
    while z.alloc(o(0), M::Movable, AllocMode::empty()).is_ok() {}
    assert_eq!(z.free_pages(), 0);
}

/// Frees the (order-0, allocated) frames `a..b`.
fn free_frames(z: &mut MobileZone<'_>, a: u64, b: u64) {
    for p in a..b {
        z.free(Pfn(p), o(0)).unwrap();
    }
}

/// Which region each of the zone's regions is: its taint count.
fn counts(z: &MobileZone<'_>) -> Vec<u32> {
    let s = z.mobility().pageblocks().superpageblocks();
    (0..s.len()).map(|i| s.count(i)).collect()
}

/// Four whole regions, full of movable memory, with free memory in three:
/// region 0 two pageblocks (one order-5 block), region 1 one pageblock
/// (pageblock 17), region 3 four (one order-6 block, the largest).
fn four_regions(z: &mut MobileZone<'_>) {
    fill_movable(z);
    free_frames(z, 0, 2 * PB);
    free_frames(z, REGION + PB, REGION + 2 * PB);
    free_frames(z, 3 * REGION, 3 * REGION + 4 * PB);
    assert_eq!(counts(z), [0, 0, 0, 0]);
}

#[test]
fn a_fallback_taints_the_least_free_region_then_keeps_to_it() {
    let span = r(0, 4 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    four_regions(&mut z);
    // No region is tainted: the least free one with a block to give.
    let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(p.get() / PB, 17, "pageblock 17, region 1's only free one");
    assert_eq!(z.block_type(p), Some(M::Unmovable));
    assert_eq!(counts(&z), [0, 1, 0, 0]);
    let s = z.stats();
    assert_eq!((s.claims_whole, s.superpageblock_tainting), (1, 1));
    // Its other frames serve unmovable requests as their own.
    for _ in 1..PB {
        let q = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
        assert_eq!(q.get() / PB, 17);
    }
    // A pageblock freed in region 1 is claimed next, though Linux's rule
    // would take region 3's larger block.
    free_frames(&mut z, REGION + 4 * PB, REGION + 5 * PB);
    let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(p.get() / PB, 20);
    assert_eq!(counts(&z), [0, 2, 0, 0]);
    assert_eq!(z.stats().superpageblock_kept, 1);
    for _ in 1..PB {
        z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    }
    // Region 1 has nothing left: region 0 (32 free) before region 3 (64).
    let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(p.get() < 2 * PB, "{p:?}");
    assert_eq!(counts(&z), [2, 2, 0, 0], "its order-5 block, claimed whole");
    assert_eq!(z.mobility().pageblocks().superpageblocks().tainted(), 2);
    z.validate().unwrap();
}

#[test]
fn linux_and_neighbour_placements_take_the_largest_block_anywhere() {
    for placement in [Placement::Linux, Placement::Neighbour] {
        let span = r(0, 4 * REGION);
        let mut m = meta(span);
        let mut z = zone(span, &mut m);
        z.set_placement(placement);
        four_regions(&mut z);
        let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
        assert_eq!(
            p.get() / REGION,
            3,
            "{placement:?}: region 3's order-6 block"
        );
        // The whole order-6 block was claimed: four pageblocks taint region 3.
        assert_eq!(counts(&z), [0, 0, 0, 4]);
        assert_eq!(z.stats().superpageblock_tainting, 0);
        z.validate().unwrap();
    }
}

#[test]
fn a_region_that_never_is_a_1gib_page_is_tainted_first() {
    // Region 0 reaches below the zone: it can never be a 1 GiB page, so it
    // is tainted first though it has more free memory than region 2.
    let span = r(REGION / 2, 3 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    fill_movable(&mut z);
    free_frames(&mut z, REGION / 2, REGION / 2 + 4 * PB);
    free_frames(&mut z, 2 * REGION, 2 * REGION + PB);
    let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(p.get() < REGION, "{p:?}");
    assert_eq!(counts(&z), [4, 0, 0]);
    z.validate().unwrap();
}

#[test]
fn nothing_is_stolen_each_fallback_retypes_a_pageblock() {
    // Only scattered frames free, below half of any pageblock: Linux's rule
    // steals one without retyping, which would hide the taint. Here the
    // roomiest pageblock is claimed, and the next requests fill it.
    let span = r(0, 2 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    fill_movable(&mut z);
    free_frames(&mut z, REGION + 3 * PB, REGION + 3 * PB + 4);
    free_frames(&mut z, REGION + 5 * PB, REGION + 5 * PB + 2);
    // Under NOFRAGMENT a clean region is not fragmented.
    assert!(
        z.alloc(o(0), M::Reclaimable, AllocMode::NOFRAGMENT)
            .is_err()
    );
    let p = z.alloc(o(0), M::Reclaimable, AllocMode::empty()).unwrap();
    assert_eq!(p.get() / PB, REGION / PB + 3);
    assert_eq!(z.block_type(p), Some(M::Reclaimable));
    assert_eq!(counts(&z), [0, 1]);
    assert_eq!((z.stats().steals, z.stats().claims_partial), (0, 1));
    for _ in 0..3 {
        let q = z.alloc(o(0), M::Reclaimable, AllocMode::empty()).unwrap();
        assert_eq!(q.get() / PB, REGION / PB + 3);
    }
    // Inside a tainted region the roomiest fallback pageblock is claimed
    // whatever it holds (region 0's eight free frames stay where they are:
    // it is clean). Under NOFRAGMENT neither happens: the slow path makes
    // room first (`room_to_make`).
    free_frames(&mut z, 8, 16);
    free_frames(&mut z, REGION + 8 * PB, REGION + 8 * PB + 3);
    assert!(z.alloc(o(0), M::Unmovable, AllocMode::NOFRAGMENT).is_err());
    let q = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(q.get() / PB, REGION / PB + 8, "3 free frames against 2");
    assert_eq!(z.block_type(q), Some(M::Unmovable));
    assert_eq!(counts(&z), [0, 2]);
    let s = z.stats();
    assert_eq!(
        (s.steals, s.superpageblock_kept, s.superpageblock_tainting),
        (0, 1, 1)
    );
    z.validate().unwrap();
}

#[test]
fn frees_that_merge_pageblocks_retaint_or_clean_their_region() {
    let span = r(0, 2 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    fill_movable(&mut z);
    // Region 1's pageblock 16 unmovable, its frames all taken.
    free_frames(&mut z, REGION, REGION + PB);
    let mine: Vec<Pfn> = (0..PB)
        .map(|_| z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap())
        .collect();
    assert_eq!(counts(&z), [0, 1]);
    // The unmovable frames go back: the pageblock is free but still typed
    // unmovable (the region stays tainted, ready for more).
    for p in mine {
        z.free(p, o(0)).unwrap();
    }
    assert_eq!(counts(&z), [0, 1]);
    // Its movable buddy pageblock is freed last: the two merge as movable,
    // and the region is clean again.
    free_frames(&mut z, REGION + PB, REGION + 2 * PB);
    assert_eq!(z.block_type(Pfn(REGION)), Some(M::Movable));
    assert_eq!(counts(&z), [0, 0]);
    let spb = z.mobility().pageblocks().superpageblocks();
    assert_eq!((spb.tainted(), spb.events()), (0, (1, 1)));
    z.validate().unwrap();
}

#[test]
fn a_movable_claim_never_cleans_a_region_that_holds_unmovable_memory() {
    for (placement, cleaned) in [
        (Placement::Superpageblock, false),
        (Placement::Neighbour, true),
    ] {
        let span = r(0, 2 * REGION);
        let mut m = meta(span);
        let mut z = zone(span, &mut m);
        z.set_placement(placement);
        fill_movable(&mut z);
        // Region 1's only unmovable pageblock holds one unmovable frame
        // and is otherwise free: a movable claim passes the half rule.
        free_frames(&mut z, REGION, REGION + PB);
        let u = z.set_block_type(Pfn(REGION), M::Unmovable).unwrap();
        assert_eq!(u, PB);
        let kept = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
        assert_eq!(counts(&z), [0, 1]);
        let p = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
        assert_eq!(p.get() / PB, REGION / PB);
        assert_eq!(counts(&z) == [0, 0], cleaned, "{placement:?}");
        assert_eq!(z.allocated_type(kept), Some(M::Unmovable));
        z.validate().unwrap();
    }
}

#[test]
fn the_highatomic_reserve_grows_only_in_tainted_regions() {
    // Large enough for a reserve: 1% of the zone is at least a pageblock.
    let span = r(0, 8 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    let mv = z.alloc(o(1), M::Movable, AllocMode::empty()).unwrap();
    assert!(!z.reserve_highatomic(mv, o(1)), "a clean region");
    let u = z.alloc(o(1), M::Unmovable, AllocMode::HIGHATOMIC).unwrap();
    assert!(z.reserve_highatomic(u, o(1)));
    assert_eq!(z.block_type(u), Some(M::HighAtomic));
    z.validate().unwrap();
    z.set_placement(Placement::Neighbour);
    assert!(
        z.reserve_highatomic(mv, o(1)),
        "anywhere under Linux's rule"
    );
    z.validate().unwrap();
}

#[test]
fn memory_taken_offline_taints_nothing() {
    let span = r(0, 2 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    let region = r(REGION, 2 * REGION);
    // Region 1: an unmovable pageblock, emptied again, then offline.
    z.set_block_type(Pfn(REGION + 5 * PB), M::Unmovable)
        .unwrap();
    z.set_block_type(Pfn(REGION + 6 * PB), M::Reclaimable)
        .unwrap();
    assert_eq!(counts(&z), [0, 2]);
    z.isolate_range(region).unwrap();
    z.take_free_range(region, M::Unmovable).unwrap();
    z.remove_range(region).unwrap();
    z.unisolate_range(region).unwrap();
    assert_eq!(counts(&z), [0, 0]);
    z.validate().unwrap();
    // Back online: clean.
    z.add_free_range(region).unwrap();
    assert_eq!(counts(&z), [0, 0]);
    assert_eq!(z.free_pages(), 2 * REGION);
    z.validate().unwrap();
}

#[test]
fn compaction_targets_do_not_clean_a_region_with_unmovable_memory() {
    let span = r(0, 2 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    fill_movable(&mut z);
    // Region 1's only tainting pageblock: unmovable, its upper half free,
    // one unmovable frame in its lower half.
    free_frames(&mut z, REGION, REGION + PB);
    z.set_block_type(Pfn(REGION), M::Unmovable).unwrap();
    let kept = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(kept.get() < REGION + PB / 2, "{kept:?}");
    let upper = Pfn(REGION + PB / 2);
    // A free block of half a pageblock taken as a migration target would
    // retype its pageblock movable (Linux's rule): not this one.
    assert_eq!(z.take_free_block(upper, M::Movable), Ok(o(3)));
    assert_eq!(z.block_type(kept), Some(M::Unmovable));
    assert_eq!(counts(&z), [0, 1]);
    z.validate().unwrap();
}

#[test]
fn movable_memory_fills_the_clean_regions_first() {
    let span = r(0, 4 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    let u = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(u.get() < REGION);
    assert_eq!(counts(&z), [4, 0, 0, 0], "region 0's first order-6 block");
    // Every pageblock of regions 1-3 goes to movable requests before any
    // of region 0's twelve free ones.
    for i in 0..3 * REGION / PB {
        let p = z.alloc(o(4), M::Movable, AllocMode::empty()).unwrap();
        assert!(p.get() >= REGION, "pageblock {i} at {p:?}");
    }
    let p = z.alloc(o(4), M::Movable, AllocMode::empty()).unwrap();
    assert!(p.get() < REGION);
    // Freed memory of a tainted region goes last too, even freed last.
    z.free(Pfn(3 * REGION), o(4)).unwrap();
    z.free(p, o(4)).unwrap();
    let q = z.alloc(o(4), M::Movable, AllocMode::empty()).unwrap();
    assert_eq!(q, Pfn(3 * REGION));
    z.validate().unwrap();
}

/// A search of the tainted regions under NOFRAGMENT that found nothing is
/// not repeated while nothing changed (a zone over a lower one asks under
/// NOFRAGMENT on every allocation), and is repeated once a fallback block
/// of a pageblock goes free in one of them.
#[test]
fn a_futile_nofragment_search_is_remembered_until_a_block_goes_free() {
    let span = r(0, 4 * REGION);
    let mut m = meta(span);
    let mut z = zone(span, &mut m);
    fill_movable(&mut z);
    free_frames(&mut z, 0, PB);
    free_frames(&mut z, REGION, 4 * REGION);
    let nofrag = AllocMode::NOFRAGMENT;
    // Region 0, the least free, is tainted by claiming its free pageblock.
    for _ in 0..PB {
        let p = z.alloc(o(0), M::Unmovable, nofrag).unwrap();
        assert!(p.get() < PB, "{p:?}");
    }
    assert_eq!(counts(&z), [1, 0, 0, 0]);
    // It has nothing left, and NOFRAGMENT keeps the clean regions clean.
    let searches = |z: &MobileZone<'_>| z.stats().superpageblock_searches;
    assert!(z.alloc(o(0), M::Unmovable, nofrag).is_err());
    let first = searches(&z);
    assert!(first >= 1);
    for _ in 0..10 {
        assert!(z.alloc(o(0), M::Unmovable, nofrag).is_err());
    }
    assert_eq!(searches(&z), first, "nothing changed: no second search");
    // A movable pageblock goes free in region 0, away from the unmovable
    // one: the next request searches again and claims it.
    free_frames(&mut z, 8 * PB, 9 * PB);
    let p = z.alloc(o(0), M::Unmovable, nofrag).unwrap();
    assert_eq!(p.get() / PB, 8);
    assert_eq!(searches(&z), first + 1);
    assert_eq!(counts(&z), [2, 0, 0, 0]);
    z.validate().unwrap();
}
