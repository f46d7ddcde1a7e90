//! Behaviour of the buddy core: split, merge, order of blocks handed out, bad input.

mod common;

use common::{config, linked, meta, o, snapshot};
use pageframe_buddy::{
    AllocError, BlockInfo, BuddyZone, FreeError, InitError, ListId, Order, Pfn, PfnRange,
    RangeError, SingleList,
};

const L: ListId = ListId::DEFAULT;

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

#[test]
fn free_of_alloc_restores_exact_state() {
    // spec 01 §13.11, for every order, on a zone with an odd start and a hole.
    let span = r(0x1003, 0x3000);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(r(0x1003, 0x1c00)).unwrap();
    z.add_free_range(r(0x1d00, 0x3000)).unwrap();
    let before = snapshot(&z);
    for k in 0..=10 {
        let p = z.alloc(o(k), L).unwrap();
        assert!(p.is_aligned(o(k)));
        assert_ne!(snapshot(&z), before);
        z.free(p, o(k)).unwrap();
        assert_eq!(snapshot(&z), before, "order {k}");
        z.validate().unwrap();
    }
}

#[test]
fn split_returns_upper_halves_at_ascending_addresses() {
    // spec 01 §13.6: taking order k from an order-o block adds exactly one
    // free block of each order k..o, each above the returned block.
    let span = r(0, 1024);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let p = z.alloc(o(2), L).unwrap();
    assert_eq!(p, Pfn(0));
    for k in 2..10u8 {
        assert_eq!(z.free_blocks(o(k)), 1);
        assert_eq!(
            z.block_at(Pfn(1 << k)),
            Some(BlockInfo::Free {
                head: Pfn(1 << k),
                order: o(k),
                list: L
            })
        );
    }
    assert_eq!(z.free_blocks(o(10)), 0);
    // Repeated small allocations hand out ascending addresses.
    let next: Vec<u64> = (0..6).map(|_| z.alloc(o(2), L).unwrap().get()).collect();
    assert_eq!(next, vec![4, 8, 12, 16, 20, 24]);
    assert_eq!(z.stats().splits, 8 + 1 + 2 + 1);
    z.validate().unwrap();
}

#[test]
fn merges_stop_at_max_order_and_at_holes() {
    let span = r(0, 64);
    let mut m = meta(span, 3);
    let mut z = BuddyZone::new(span, config(3), &mut m, SingleList).unwrap();
    z.add_free_range(r(0, 64)).unwrap();
    assert_eq!(snapshot(&z), vec![0, 0, 0, 8]);
    // A hole at frame 9 keeps 8 and 10..16 from ever forming an order-3 block.
    let span2 = r(0, 16);
    let mut m2 = meta(span2, 3);
    let mut z2 = BuddyZone::new(span2, config(3), &mut m2, SingleList).unwrap();
    z2.add_free_range(r(0, 9)).unwrap();
    z2.add_free_range(r(10, 16)).unwrap();
    assert_eq!(snapshot(&z2), vec![1, 1, 1, 1]);
    let all: Vec<Pfn> = std::iter::from_fn(|| z2.alloc(o(0), L).ok()).collect();
    assert_eq!(all.len(), 15);
    assert!(!all.contains(&Pfn(9)), "a hole was handed out");
    for p in all {
        z2.free(p, o(0)).unwrap();
    }
    assert_eq!(snapshot(&z2), vec![1, 1, 1, 1]);
    z2.validate().unwrap();
}

#[test]
fn likely_merge_goes_to_the_tail() {
    // spec 01 §5.1, for blocks on the free lists (single-frame chunks, so
    // every block is). Max order 4: one 16-frame block, all taken as order 0.
    let span = r(0, 16);
    let mut m = vec![
        std::mem::MaybeUninit::uninit();
        BuddyZone::<SingleList>::metadata_bytes(span, linked(4))
    ];
    let mut z = BuddyZone::new(span, linked(4), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    for _ in 0..16 {
        z.alloc(o(0), L).unwrap();
    }
    for p in [4, 5, 6, 7] {
        z.free(Pfn(p), o(0)).unwrap(); // order-2 block at 4
    }
    for p in [8, 9] {
        z.free(Pfn(p), o(0)).unwrap(); // order-1 at 8: its uncle (12) is busy -> head
    }
    for p in [2, 3] {
        z.free(Pfn(p), o(0)).unwrap(); // order-1 at 2: its uncle (4) is free -> tail
    }
    assert_eq!(z.free_blocks(o(1)), 2);
    // The block likely to merge soon is allocated last.
    assert_eq!(z.alloc(o(1), L).unwrap(), Pfn(8));
    assert_eq!(z.alloc(o(1), L).unwrap(), Pfn(2));
    z.validate().unwrap();
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let span = r(0x100, 0x900);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(r(0x100, 0x500)).unwrap();
    z.add_free_range(r(0x600, 0x900)).unwrap();
    let b = z.alloc(o(3), L).unwrap();
    let single = z.alloc(o(0), L).unwrap();
    let (before, stats) = (snapshot(&z), z.stats());
    let cases = [
        (b, o(11), FreeError::OrderTooLarge),
        (Pfn(0x900), o(0), FreeError::OutOfRange),
        (Pfn(0xff), o(0), FreeError::OutOfRange),
        (b + 1, o(3), FreeError::Misaligned),
        (Pfn(0x540), o(0), FreeError::Hole),
        (
            b + 2,
            o(0),
            FreeError::NotBlockHead {
                head: b,
                order: o(3),
            },
        ),
        (b, o(2), FreeError::WrongOrder { allocated: o(3) }),
        (b, o(4), FreeError::WrongOrder { allocated: o(3) }),
        (Pfn(0x700), o(0), FreeError::AlreadyFree),
        (z.first_free(o(8), L).unwrap(), o(8), FreeError::AlreadyFree),
    ];
    for (p, k, want) in cases {
        assert_eq!(z.free(p, k), Err(want), "free({p:?}, {k:?})");
        assert_eq!((snapshot(&z), z.stats()), (before.clone(), stats));
    }
    z.free(single, o(0)).unwrap();
    assert_eq!(
        z.free(single, o(0)),
        Err(FreeError::AlreadyFree),
        "double free"
    );
    z.free(b, o(3)).unwrap();
    z.validate().unwrap();
}

#[test]
fn order_above_the_zone_maximum_is_refused() {
    let span = r(0, 64);
    let mut m = meta(span, 3);
    let mut z = BuddyZone::new(span, config(3), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    assert_eq!(z.alloc(o(4), L), Err(AllocError::OrderTooLarge));
    assert_eq!(z.free(Pfn(0), o(4)), Err(FreeError::OrderTooLarge));
    assert!(Order::new(16).is_none());
}

#[test]
fn init_errors() {
    let span = r(0, 4096);
    let need = BuddyZone::<SingleList>::metadata_bytes(span, config(10));
    // A 4-byte word and two bits a frame, 44 bytes a 512-frame chunk, a
    // bit per chunk, and the list heads and counts (about 12 KiB: 16
    // orders x 8 lists for blocks from the chunk order up; 8 lists x 9
    // classes x 32 buckets for partly free chunks).
    assert!(
        need <= 4096 * 4 + 4096 / 4 + 8 * 44 + 64 + 13 * 1024,
        "about 4.3 bytes a frame: {need}"
    );
    let mut small = vec![std::mem::MaybeUninit::uninit(); need - 16];
    assert!(matches!(
        BuddyZone::new(span, config(10), &mut small, SingleList),
        Err(InitError::MetadataTooSmall { .. })
    ));
    let mut m = meta(span, 10);
    assert!(matches!(
        BuddyZone::new(r(5, 5), config(10), &mut m, SingleList),
        Err(InitError::EmptySpan)
    ));
    let huge = r(0, 1 << 40);
    assert_eq!(BuddyZone::<SingleList>::metadata_bytes(huge, config(10)), 0);
    assert!(matches!(
        BuddyZone::new(huge, config(10), &mut m, SingleList),
        Err(InitError::SpanTooLarge)
    ));
}

#[test]
fn add_free_range_rejects_overlap_and_out_of_span() {
    let span = r(0x10, 0x2010);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(r(0x10, 0x800)).unwrap();
    let before = (snapshot(&z), z.managed_pages());
    assert_eq!(
        z.add_free_range(r(0x7ff, 0x900)),
        Err(RangeError::Overlap { pfn: Pfn(0x7ff) })
    );
    assert_eq!(
        z.add_free_range(r(0x400, 0x401)),
        Err(RangeError::Overlap { pfn: Pfn(0x400) })
    );
    assert_eq!(
        z.add_free_range(r(0x2000, 0x2011)),
        Err(RangeError::OutOfSpan)
    );
    assert_eq!(z.add_free_range(r(0x900, 0x900)), Err(RangeError::Empty));
    assert_eq!((snapshot(&z), z.managed_pages()), before);
    // Whole max-order blocks added one by one and partially: all merge.
    z.add_free_range(r(0x800, 0xc00)).unwrap();
    z.add_free_range(r(0xc00, 0x2010)).unwrap();
    assert_eq!(z.managed_pages(), 0x2000);
    assert_eq!(
        z.add_free_range(r(0x1000, 0x1400)),
        Err(RangeError::Overlap { pfn: Pfn(0x1000) })
    );
    z.validate().unwrap();
    assert_eq!(z.free_blocks(o(10)), 7);
}

#[test]
fn alloc_at_carves_a_block_and_keeps_the_rest_free() {
    let span = r(0, 2048);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(r(0, 2000)).unwrap();
    let free0 = z.free_pages();
    z.alloc_at(Pfn(0x2c8), o(3)).unwrap();
    assert_eq!(z.free_pages(), free0 - 8);
    assert_eq!(
        z.block_at(Pfn(0x2cb)),
        Some(BlockInfo::Allocated {
            head: Pfn(0x2c8),
            order: o(3),
            tag: 0
        })
    );
    z.validate().unwrap();
    let snap = snapshot(&z);
    assert_eq!(z.alloc_at(Pfn(0x2c8), o(0)), Err(AllocError::Busy));
    assert_eq!(z.alloc_at(Pfn(0x2c0), o(4)), Err(AllocError::Busy));
    assert_eq!(z.alloc_at(Pfn(0x2c1), o(1)), Err(AllocError::Misaligned));
    assert_eq!(z.alloc_at(Pfn(2000), o(0)), Err(AllocError::Hole));
    assert_eq!(z.alloc_at(Pfn(2048), o(0)), Err(AllocError::OutOfRange));
    assert_eq!(z.alloc_at(Pfn(1024), o(11)), Err(AllocError::OrderTooLarge));
    assert_eq!(snapshot(&z), snap);
    z.free(Pfn(0x2c8), o(3)).unwrap();
    assert_eq!(z.free_pages(), free0);
    z.validate().unwrap();
}

#[test]
fn reserve_and_release_ranges() {
    let span = r(0, 4096);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(r(0, 3000)).unwrap();
    let before = snapshot(&z);
    // A kernel image at an odd place.
    z.reserve_range(r(0x123, 0x5a1)).unwrap();
    assert_eq!(z.free_pages(), 3000 - (0x5a1 - 0x123));
    z.validate().unwrap();
    let snap = snapshot(&z);
    assert_eq!(
        z.reserve_range(r(0x500, 0x600)),
        Err(RangeError::Busy { pfn: Pfn(0x500) })
    );
    assert_eq!(
        z.reserve_range(r(2990, 3010)),
        Err(RangeError::Hole { pfn: Pfn(3000) })
    );
    assert_eq!(z.reserve_range(r(4000, 4200)), Err(RangeError::OutOfSpan));
    assert_eq!(
        z.release_range(r(0x125, 0x5a1)),
        Err(RangeError::NotBlockAligned { pfn: Pfn(0x125) })
    );
    assert_eq!(
        z.release_range(r(0x120, 0x5a1)),
        Err(RangeError::Busy { pfn: Pfn(0x120) })
    );
    assert_eq!(
        z.release_range(r(0x123, 0x5a2)),
        Err(RangeError::Busy { pfn: Pfn(0x5a1) })
    );
    assert_eq!(snapshot(&z), snap);
    // No frame of the reserved range is ever handed out.
    let got: Vec<Pfn> = std::iter::from_fn(|| z.alloc(o(0), L).ok()).collect();
    assert!(got.iter().all(|p| !(0x123..0x5a1).contains(&p.get())));
    for p in got {
        z.free(p, o(0)).unwrap();
    }
    z.release_range(r(0x123, 0x5a1)).unwrap();
    assert_eq!(snapshot(&z), before);
    z.validate().unwrap();
}

#[test]
fn tags_live_on_allocated_heads_only() {
    let span = r(0, 1024);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let p = z.alloc(o(1), L).unwrap();
    assert_eq!(z.tag(p), Some(0));
    assert!(z.set_tag(p, 7));
    assert_eq!(z.tag(p), Some(7));
    assert!(!z.set_tag(p + 1, 7), "not a head");
    assert!(!z.set_tag(Pfn(512), 7), "free");
    z.free(p, o(1)).unwrap();
    assert_eq!(z.tag(p), None);
    let q = z.alloc(o(1), L).unwrap();
    assert_eq!(
        (q, z.tag(q)),
        (p, Some(0)),
        "a new allocation starts untagged"
    );
}

#[test]
fn tagged_allocations_carry_their_tag_at_every_size() {
    let span = r(0, 2048);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    // Below the chunk order (in a split chunk), at it, and above it.
    let mut got = Vec::new();
    for (order, tag) in [(0, 5), (3, 6), (9, 7), (10, 8)] {
        let p = z.alloc_tagged(o(order), L, tag).unwrap();
        assert_eq!(z.tag(p), Some(tag), "order {order}");
        got.push((p, order));
    }
    // Tags keep their low 24 bits, as set_tag keeps them.
    assert_eq!(
        z.alloc_tagged(o(0), L, 1 << 24 | 9).map(|p| z.tag(p)),
        Ok(Some(9))
    );
    // Bad requests change nothing.
    let snap = snapshot(&z);
    assert_eq!(z.alloc_tagged(o(11), L, 1), Err(AllocError::OrderTooLarge));
    assert_eq!(z.alloc_tagged(o(10), L, 1), Err(AllocError::OutOfMemory));
    assert_eq!(snapshot(&z), snap);
    for (p, order) in got {
        z.free(p, o(order)).unwrap();
    }
    z.validate().unwrap();
}

#[test]
fn has_block_in_sees_blocks_of_at_least_the_order() {
    let span = r(0, 1024);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    let other = ListId::new(1).unwrap();
    assert!(!z.has_block_in(o(0), L), "nothing handed over");
    z.add_free_range(span).unwrap();
    assert!((0..=10).all(|k| z.has_block_in(o(k), L)));
    assert!(!z.has_block_in(o(0), other), "another list");
    assert!(!z.has_block_in(o(11), L), "above the maximum");
    // Every frame taken but one order-2 block, then one order-0 frame.
    let all: Vec<Pfn> = std::iter::from_fn(|| z.alloc(o(0), L).ok()).collect();
    for &p in &all[..4] {
        z.free(p, o(0)).unwrap();
    }
    let have = |z: &BuddyZone<'_, SingleList>| {
        (0..=10)
            .map(|k| z.has_block_in(o(k), L))
            .collect::<Vec<_>>()
    };
    let mut want = vec![false; 11];
    want[..=2].fill(true);
    assert_eq!(have(&z), want);
    let p = z.alloc(o(2), L).unwrap();
    assert_eq!(have(&z), vec![false; 11]);
    z.free(p, o(2)).unwrap();
    for &p in &all[4..] {
        z.free(p, o(0)).unwrap();
    }
    assert!((0..=10).all(|k| z.has_block_in(o(k), L)));
}

#[test]
fn buddyinfo_lists_free_blocks_per_order() {
    let span = r(0, 1024 + 3);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let line = z.buddyinfo_labelled(&"zone    DMA32").to_string();
    let nums: Vec<u64> = line
        .split_whitespace()
        .skip(2)
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums, vec![1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    assert!(line.starts_with("zone    DMA32"));
}

#[test]
fn large_zone_sets_up_lazily_and_serves_everything() {
    // 64 GiB of frames: only max-order heads are written at init, so this is
    // fast even unoptimised; the metadata buffer stays mostly untouched.
    let frames = if cfg!(miri) { 1 << 16 } else { 16 << 20 };
    let span = r(0, frames);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    assert_eq!(z.free_blocks(o(10)), frames >> 10);
    let p = z.alloc(o(0), L).unwrap();
    z.free(p, o(0)).unwrap();
    assert_eq!(z.free_blocks(o(10)), frames >> 10);
    assert_eq!(z.free_blocks(o(0)), 0);
}

/// A policy with two lists where a frame's list is chosen by a table, to
/// drive the list-moving mechanisms as a mobility layer would.
struct TwoLists {
    upper_half_list1: bool,
}

impl pageframe_buddy::MergePolicy for TwoLists {
    fn list_for(&self, pfn: Pfn) -> ListId {
        ListId::new(u8::from(self.upper_half_list1 && pfn.get() >= 512)).unwrap()
    }
}

#[test]
fn policy_lists_keep_blocks_apart_and_mechanisms_move_them() {
    // Single-frame chunks: every block is on a free list, so lists move
    // block by block.
    let span = r(0, 1024);
    let mut m = vec![
        std::mem::MaybeUninit::uninit();
        BuddyZone::<TwoLists>::metadata_bytes(span, linked(10))
    ];
    let mut z = BuddyZone::new(
        span,
        linked(10),
        &mut m,
        TwoLists {
            upper_half_list1: true,
        },
    )
    .unwrap();
    // Handed over in halves: they land on different lists and never merge.
    z.add_free_range(r(0, 512)).unwrap();
    z.add_free_range(r(512, 1024)).unwrap();
    let l1 = ListId::new(1).unwrap();
    assert_eq!(
        (
            z.free_blocks(o(9)),
            z.free_blocks_in(o(9), l1),
            z.free_blocks(o(10))
        ),
        (2, 1, 0)
    );
    assert_eq!(z.first_free(o(9), l1), Some(Pfn(512)));
    assert_eq!(z.alloc(o(9), l1).unwrap(), Pfn(512));
    assert_eq!(
        z.alloc(o(0), l1),
        Err(AllocError::OutOfMemory),
        "list 1 is empty"
    );
    z.free(Pfn(512), o(9)).unwrap();
    z.validate().unwrap();

    // carve_free_block files a small piece of a big free block elsewhere.
    let l0 = ListId::DEFAULT;
    assert_eq!(
        z.carve_free_block(Pfn(700), o(3), l0),
        Some((Pfn(696), o(3)))
    );
    assert_eq!(
        z.block_at(Pfn(700)),
        Some(BlockInfo::Free {
            head: Pfn(696),
            order: o(3),
            list: l0
        })
    );
    assert_eq!(z.free_pages_in(l1), 504);
    z.validate().unwrap();

    // The walk visits each block once, low to high.
    let walked: Vec<_> = z.walk(r(680, 720)).collect();
    assert_eq!(walked.first().map(|w| w.0), Some(Pfn(680)));
    assert!(walked.contains(&(
        Pfn(696),
        BlockInfo::Free {
            head: Pfn(696),
            order: o(3),
            list: l0
        }
    )));
    let covered: u64 = walked
        .iter()
        .map(|(p, b)| match *b {
            BlockInfo::Free { head, order, .. } | BlockInfo::Allocated { head, order, .. } => {
                (head + order.pages()).get().min(720) - p.get()
            }
            BlockInfo::Hole => 1,
        })
        .sum();
    assert_eq!(covered, 40);

    // Moved back, it re-merges with its buddies on that list.
    assert_eq!(z.move_free_block(Pfn(696), l1), Some((Pfn(512), o(9))));
    assert_eq!(z.free_pages_in(l1), 512);
    assert_eq!(z.move_free_block(Pfn(697), l0), None, "not a head");
    assert_eq!(
        z.carve_free_block(Pfn(520), o(3), l1),
        Some((Pfn(512), o(9))),
        "own list: not split"
    );
    z.validate().unwrap();

    // take_free_block takes exactly the named free block.
    assert_eq!(
        z.carve_free_block(Pfn(700), o(3), l0),
        Some((Pfn(696), o(3)))
    );
    assert_eq!(z.take_free_block(Pfn(696)), Ok(o(3)));
    assert_eq!(z.take_free_block(Pfn(696)), Err(AllocError::Busy));
    assert_eq!(
        z.take_free_block(Pfn(513)),
        Err(AllocError::Busy),
        "inside a free block, not its head"
    );
    z.free(Pfn(696), o(3)).unwrap(); // the policy files it on list 1 again
    assert_eq!(z.free_blocks_in(o(9), l1), 1);
    z.validate().unwrap();

    // free_in_pieces frees each piece onto its own list.
    let pol = z.policy_mut();
    pol.upper_half_list1 = false;
    let whole = z.alloc(o(9), ListId::DEFAULT).unwrap();
    assert_eq!(whole, Pfn(0));
    z.policy_mut().upper_half_list1 = true;
    assert_eq!(
        z.free_in_pieces(whole, o(9), o(11)),
        Ok(()),
        "a piece order above the block frees it whole"
    );
    let big = z.alloc(o(9), ListId::DEFAULT).unwrap();
    assert_eq!(
        z.free_in_pieces(big, o(8), o(2)),
        Err(FreeError::WrongOrder { allocated: o(9) })
    );
    z.free_in_pieces(big, o(9), o(2)).unwrap();
    assert_eq!(
        z.free_blocks_in(o(9), ListId::DEFAULT),
        1,
        "pieces re-merged"
    );
    z.validate().unwrap();
}

#[test]
fn reported_marks_clear_when_a_block_is_reused_or_merged() {
    let span = r(0, 64);
    let mut m = meta(span, 3);
    let mut z = BuddyZone::new(span, config(3), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let mut out = [(Pfn(0), Order::ZERO); 16];
    // Eight order-3 blocks, at most 20 frames: two taken.
    assert_eq!(z.take_unreported(o(3), L, &mut out, 20), 2);
    assert_eq!(z.free_pages(), 48);
    let (a, b) = (out[0], out[1]);
    assert_eq!(
        z.free(a.0, a.1),
        Ok(()),
        "held as allocated by the reporter"
    );
    assert_eq!(z.take_unreported(o(3), L, &mut out, 64), 7);
    for &(p, k) in &out[..7] {
        z.return_reported(p, k, true).unwrap();
        assert!(z.is_reported(p));
    }
    z.return_reported(b.0, b.1, false).unwrap();
    assert!(!z.is_reported(b.0));
    assert_eq!(z.reported_pages(o(3), L), (64, 56));
    assert_eq!(
        z.take_unreported(o(3), L, &mut out, 64),
        1,
        "only the refused one"
    );
    z.return_reported(out[0].0, out[0].1, true).unwrap();
    // Allocating a reported block and freeing it: unreported again.
    let p = z.alloc(o(0), L).unwrap();
    z.free(p, o(0)).unwrap();
    assert_eq!(z.reported_pages(o(3), L), (64, 56));
    assert_eq!(
        z.return_reported(Pfn(8), o(3), true),
        Err(FreeError::AlreadyFree)
    );
    z.validate().unwrap();
}
