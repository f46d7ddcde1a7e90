//! Splitting an allocated block in two (Linux `split_page`): the halves are
//! live allocations of their own, freed apart in any order, and bad input
//! changes nothing.

mod common;

use common::{config, linked, meta, o, snapshot};
use pageframe_buddy::{
    BlockInfo, BuddyConfig, BuddyZone, FreeError, ListId, Pfn, PfnRange, SingleList,
};
use std::mem::MaybeUninit;

const L: ListId = ListId::DEFAULT;

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

/// Splits the order-`k` block at `p` down to single frames and frees them
/// in a scrambled order, checking the books at each step.
fn split_all_and_free_scrambled(z: &mut BuddyZone<'_, SingleList>, p: Pfn, k: u8) {
    let mut blocks = vec![(p, k)];
    while let Some(&(q, j)) = blocks.iter().find(|b| b.1 > 0) {
        blocks.retain(|b| *b != (q, j));
        let upper = z.split_allocated(q, o(j)).unwrap();
        assert_eq!(upper, q + (1u64 << (j - 1)));
        for h in [q, upper] {
            match z.block_at(h) {
                Some(BlockInfo::Allocated { head, order, tag }) => {
                    assert_eq!((head, order, tag), (h, o(j - 1), 0x5a));
                }
                other => panic!("{h:?} after split: {other:?}"),
            }
        }
        blocks.push((q, j - 1));
        blocks.push((upper, j - 1));
        z.validate().unwrap();
    }
    assert_eq!(blocks.len(), 1 << k);
    // Odd frames first, then even ones from the top.
    blocks.sort();
    let (odd, even): (Vec<_>, Vec<_>) = blocks.iter().partition(|b| b.0.get() % 2 == 1);
    for (q, j) in odd.into_iter().chain(even.into_iter().rev()) {
        z.free(q, o(j)).unwrap();
    }
    z.validate().unwrap();
}

#[test]
fn every_order_splits_to_frames_that_free_apart_into_the_whole_zone() {
    for cfg in [config(10), linked(10)] {
        for k in 1..=10u8 {
            let span = r(0, 4096);
            let mut m: Box<[MaybeUninit<u8>]> =
                Box::new_uninit_slice(BuddyZone::<SingleList>::metadata_bytes(span, cfg));
            let mut z = BuddyZone::new(span, cfg, &mut m, SingleList).unwrap();
            z.add_free_range(span).unwrap();
            let before = snapshot(&z);
            let p = z.alloc_tagged(o(k), L, 0x5a).unwrap();
            split_all_and_free_scrambled(&mut z, p, k);
            assert_eq!(
                snapshot(&z),
                before,
                "order {k}, chunk order {:?}",
                cfg.chunk_order
            );
            assert_eq!(z.free_pages(), 4096);
        }
    }
}

#[test]
fn a_half_kept_stays_allocated_while_the_other_merges_back() {
    let span = r(0, 1024);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let p = z.alloc(o(10), L).unwrap();
    let upper = z.split_allocated(p, o(10)).unwrap();
    // The whole block's order no longer frees it; each half's does.
    assert_eq!(
        z.free(p, o(10)),
        Err(FreeError::WrongOrder { allocated: o(9) })
    );
    z.free(upper, o(9)).unwrap();
    assert_eq!(z.free_pages(), 512);
    assert_eq!(z.free_blocks(o(9)), 1);
    // Split the kept half again, free its lower quarter: 768 free frames.
    let q = z.split_allocated(p, o(9)).unwrap();
    z.free(p, o(8)).unwrap();
    assert_eq!(z.free_pages(), 768);
    assert!(matches!(z.block_at(q), Some(BlockInfo::Allocated { head, .. }) if head == q));
    z.validate().unwrap();
    z.free(q, o(8)).unwrap();
    assert_eq!(z.free_blocks(o(10)), 1);
    z.validate().unwrap();
}

#[test]
fn bad_splits_are_refused_and_change_nothing() {
    let span = r(0, 2048);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, BuddyConfig::new(o(10)), &mut m, SingleList).unwrap();
    z.add_free_range(r(0, 1024)).unwrap();
    let one = z.alloc(o(0), L).unwrap();
    let four = z.alloc(o(2), L).unwrap();
    let before = snapshot(&z);
    assert_eq!(z.split_allocated(one, o(0)), Err(FreeError::SingleFrame));
    assert_eq!(
        z.split_allocated(four, o(1)),
        Err(FreeError::WrongOrder { allocated: o(2) })
    );
    assert!(matches!(
        z.split_allocated(four + 1, o(0)),
        Err(FreeError::NotBlockHead { .. })
    ));
    assert_eq!(
        z.split_allocated(Pfn(512), o(9)),
        Err(FreeError::AlreadyFree)
    );
    assert_eq!(z.split_allocated(Pfn(1024), o(1)), Err(FreeError::Hole));
    assert_eq!(
        z.split_allocated(Pfn(4096), o(1)),
        Err(FreeError::OutOfRange)
    );
    assert_eq!(
        z.split_allocated(four + 2, o(2)),
        Err(FreeError::Misaligned)
    );
    assert_eq!(
        z.split_allocated(Pfn(0), o(11)),
        Err(FreeError::OrderTooLarge)
    );
    assert_eq!(snapshot(&z), before);
    z.validate().unwrap();
}
