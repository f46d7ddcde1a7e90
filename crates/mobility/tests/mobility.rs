//! Migratetype grouping: fallback order, claiming vs stealing, hygiene,
//! highatomic reserve, isolation, merge rule, indices.

use std::mem::MaybeUninit;

use pageframe_buddy::{AllocError, Order, Pfn, PfnRange};
use pageframe_mobility::{
    AllocMode, BlockError, Blocker, MigrateType as M, MobileZone, MobilityConfig, Placement,
    fallbacks, fragindex, tag,
};

const PB: u64 = 512;

fn o(n: u8) -> Order {
    Order::new(n).unwrap()
}

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

fn meta(span: PfnRange, c: MobilityConfig) -> Box<[MaybeUninit<u8>]> {
    Box::new_uninit_slice(MobileZone::metadata_bytes(span, c))
}

/// A zone of `blocks` pageblocks, all free.
macro_rules! zone {
    ($m:ident, $z:ident, $blocks:expr) => {
        zone!($m, $z, $blocks, MobilityConfig::default())
    };
    ($m:ident, $z:ident, $blocks:expr, $cfg:expr) => {
        let span = r(0, $blocks * PB);
        let mut $m = meta(span, $cfg);
        #[allow(unused_mut)]
        let mut $z = MobileZone::new(span, $cfg, &mut $m).unwrap();
        $z.add_free_range(span).unwrap();
    };
}

#[test]
fn fallback_table() {
    // spec 02 §5.1.
    assert_eq!(fallbacks(M::Unmovable), &[M::Reclaimable, M::Movable]);
    assert_eq!(fallbacks(M::Movable), &[M::Reclaimable, M::Unmovable]);
    assert_eq!(fallbacks(M::Reclaimable), &[M::Unmovable, M::Movable]);
    for t in [M::HighAtomic, M::Cma, M::Isolate] {
        assert!(fallbacks(t).is_empty());
        assert!(!t.is_mergeable());
    }
}

#[test]
fn unmovable_claims_the_largest_block_and_then_stays_in_it() {
    zone!(m, z, 8);
    let a = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    let s = z.stats();
    assert_eq!((s.claims_whole, s.own), (1, 0));
    // The claim took a max-order (two-pageblock) block: both retyped.
    let head = a.align_down(o(10));
    assert_eq!(z.block_type(head), Some(M::Unmovable));
    assert_eq!(z.block_type(head + PB), Some(M::Unmovable));
    for _ in 0..1000 {
        let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
        assert_eq!(p.align_down(o(10)), head, "unmovable memory stays grouped");
    }
    assert_eq!(z.stats().own, 1000);
    assert_eq!(z.allocated_type(a), Some(M::Unmovable));
    z.validate().unwrap();
}

#[test]
fn would_fall_back_says_when_a_request_leaves_its_own_lists() {
    zone!(m, z, 8);
    // Every pageblock starts movable.
    assert!(z.would_fall_back(o(0), M::Unmovable));
    assert!(!z.would_fall_back(o(10), M::Movable));
    let a = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    let claims = z.stats().claims_whole;
    // The claimed two pageblocks hold 1023 free unmovable frames, but no
    // free unmovable block of order 10.
    assert!(!z.would_fall_back(o(0), M::Unmovable));
    assert!(!z.would_fall_back(o(9), M::Unmovable));
    assert!(z.would_fall_back(o(10), M::Unmovable));
    // What it says is what the allocation does.
    let b = z.alloc(o(9), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(z.stats().claims_whole, claims);
    let c = z.alloc(o(10), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(z.stats().claims_whole, claims + 1);
    for (p, k) in [(a, 0), (b, 9), (c, 10)] {
        z.free(p, o(k)).unwrap();
    }
    // Nothing falls back without grouping: there is one type.
    let cfg = MobilityConfig {
        grouping: false,
        ..MobilityConfig::default()
    };
    zone!(m2, z2, 2, cfg);
    assert!(!z2.would_fall_back(o(0), M::Movable));
    assert!(!z2.would_fall_back(o(0), M::Unmovable));
    z.validate().unwrap();
}

#[test]
fn small_movable_requests_steal_without_retyping() {
    // spec 02 §11.3: unmovable blocks with only single free frames; a
    // movable order-0 request cannot claim (orders below pageblock/2 are
    // "too small") and steals the smallest block instead.
    zone!(m, z, 2);
    for p in [0, PB] {
        z.set_block_type(Pfn(p), M::Unmovable).unwrap();
    }
    let all: Vec<Pfn> = (0..2 * PB)
        .map(|_| z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap())
        .collect();
    for p in all.iter().skip(PB as usize).step_by(2) {
        z.free(*p, o(0)).unwrap();
    }
    let got = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    assert_eq!(z.block_type(got), Some(M::Unmovable), "block not retyped");
    let s = z.stats();
    assert_eq!((s.steals, s.claims_partial + s.claims_whole), (1, 0));
    assert_eq!(z.allocated_type(got), Some(M::Movable));
    assert_eq!(z.free_pages_of(M::Movable), 0);
    z.validate().unwrap();
    // With NOFRAGMENT the same request fails instead, changing nothing.
    let before = z.free_pages();
    assert_eq!(
        z.alloc(o(0), M::Movable, AllocMode::NOFRAGMENT),
        Err(AllocError::OutOfMemory)
    );
    assert_eq!(z.free_pages(), before);
}

#[test]
fn movable_requests_claim_whole_free_blocks() {
    // spec 02 §5.3: at pageblock order and above the whole block is claimed.
    zone!(m, z, 2);
    for p in [0, PB] {
        z.set_block_type(Pfn(p), M::Unmovable).unwrap();
    }
    let got = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    assert_eq!(z.block_type(got), Some(M::Movable));
    assert_eq!(z.stats().claims_whole, 1);
    z.validate().unwrap();
}

#[test]
fn partial_claim_needs_half_the_block_free_or_alike() {
    zone!(m, z, 4);
    // Fill block 0 with movable order-0 frames (block 0 is the first
    // handed out), then free 300 of them: 300 free + 212 movable.
    let mut live: Vec<Pfn> = (0..PB)
        .map(|_| z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap())
        .collect();
    assert!(live.iter().all(|p| p.get() < PB));
    for p in live.drain(..300) {
        z.free(p, o(0)).unwrap();
    }
    // Retype the other blocks so only block 0 can serve a fallback.
    for b in 1..4 {
        z.set_block_type(Pfn(b * PB), M::Reclaimable).unwrap();
    }
    // Now take away every free frame of the reclaimable blocks... instead:
    // an unmovable request sees reclaimable first (its first fallback) and
    // claims a whole free block there.
    let u = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(u.get() >= PB);
    assert_eq!(z.stats().claims_whole, 1);
    z.validate().unwrap();

    // A movable-only zone where block 0 is half free: an unmovable claim of
    // block 0 counts free + non-movable (0 here) = 300 >= 256 -> claimed.
    zone!(m2, z2, 1);
    let live2: Vec<Pfn> = (0..PB)
        .map(|_| z2.alloc(o(0), M::Movable, AllocMode::empty()).unwrap())
        .collect();
    for p in &live2[..300] {
        z2.free(*p, o(0)).unwrap();
    }
    let u2 = z2.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(z2.block_type(u2), Some(M::Unmovable));
    assert_eq!(z2.stats().claims_partial, 1);
    assert_eq!(
        z2.free_pages_of(M::Movable),
        0,
        "its free frames moved along"
    );
    z2.validate().unwrap();

    // Only 100 free: 100 + 0 < 256 -> refused, the request steals instead
    // (Linux's rule; the superpageblock placement claims the block of a
    // steal that would taint a clean region: see `superpageblocks.rs`).
    zone!(m3, z3, 1);
    z3.set_placement(Placement::Neighbour);
    let live3: Vec<Pfn> = (0..PB)
        .map(|_| z3.alloc(o(0), M::Movable, AllocMode::empty()).unwrap())
        .collect();
    for p in &live3[..100] {
        z3.free(*p, o(0)).unwrap();
    }
    let u3 = z3.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(z3.block_type(u3), Some(M::Movable));
    let s = z3.stats();
    // The block is looked at once per order that has a free block in it.
    assert!(s.claims_refused >= 1);
    assert_eq!((s.steals, s.claims_partial), (1, 0));
    z3.validate().unwrap();
}

#[test]
fn cross_pageblock_merges_follow_the_type_rule() {
    zone!(m, z, 2);
    // Two pageblocks, one order-10 block. Split it into two order-9 blocks
    // of different mergeable types: freeing re-merges and retypes.
    let a = z.alloc(o(9), M::Movable, AllocMode::empty()).unwrap();
    let b = z.alloc(o(9), M::Movable, AllocMode::empty()).unwrap();
    z.set_block_type(b, M::Unmovable).unwrap();
    z.free(a, o(9)).unwrap();
    z.free(b, o(9)).unwrap();
    assert_eq!(
        z.buddy().free_blocks(o(10)),
        1,
        "unmovable and movable merge across pageblocks"
    );
    assert_eq!(
        z.block_type(a),
        z.block_type(b),
        "the merged buddy took the freed block's type"
    );
    z.validate().unwrap();
    // CMA (like HighAtomic and Isolate) never merges with another type.
    let a = z.alloc(o(9), M::Unmovable, AllocMode::empty()).unwrap();
    let b = z.alloc(o(9), M::Unmovable, AllocMode::empty()).unwrap();
    z.set_block_type(b, M::Cma).unwrap();
    z.free(a, o(9)).unwrap();
    z.free(b, o(9)).unwrap();
    assert_eq!(z.buddy().free_blocks(o(10)), 0);
    assert_eq!(z.buddy().free_blocks(o(9)), 2);
    z.set_block_type(b, M::Unmovable).unwrap();
    assert_eq!(
        z.buddy().free_blocks(o(10)),
        1,
        "retyped back, the free blocks re-merge"
    );
    z.validate().unwrap();
}

#[test]
fn blocks_above_a_pageblock_free_piecewise() {
    zone!(m, z, 2);
    let a = z.alloc(o(10), M::Movable, AllocMode::empty()).unwrap();
    z.set_block_type(a + PB, M::Cma).unwrap();
    z.free(a, o(10)).unwrap();
    // Each half went to its own pageblock's list.
    assert_eq!(z.free_blocks_of(o(9), M::Movable), 1);
    assert_eq!(z.free_blocks_of(o(9), M::Cma), 1);
    z.validate().unwrap();
}

#[test]
fn highatomic_reserve_and_unreserve() {
    zone!(m, z, 200);
    let p = z.alloc(o(3), M::Unmovable, AllocMode::HIGHATOMIC).unwrap();
    assert!(z.reserve_highatomic(p, o(3)));
    assert_eq!(z.block_type(p), Some(M::HighAtomic));
    assert_eq!(z.highatomic_reserved(), PB);
    z.validate().unwrap();
    // Ordinary requests do not see the reserve; reserve-eligible ones do.
    let q = z.alloc(o(3), M::Unmovable, AllocMode::HIGHATOMIC).unwrap();
    assert_eq!(
        q.align_down(o(9)),
        p.align_down(o(9)),
        "served from the reserve first"
    );
    // Second reserve from another block.
    let far = z.alloc(o(0), M::Reclaimable, AllocMode::empty()).unwrap();
    assert!(z.reserve_highatomic(far, o(0)));
    assert_eq!(z.highatomic_reserved(), 2 * PB);
    // At the cap: refused.
    let third = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    assert!(!z.reserve_highatomic(third, o(0)));
    z.validate().unwrap();
    // Unforced unreserve gives back one block but never the last.
    assert!(z.unreserve_highatomic(M::Movable, false));
    assert_eq!(z.highatomic_reserved(), PB);
    assert!(!z.unreserve_highatomic(M::Movable, false));
    assert!(
        z.unreserve_highatomic(M::Movable, true),
        "forced: the last one goes too"
    );
    assert_eq!(z.highatomic_reserved(), 0);
    z.validate().unwrap();
    // A small zone (< 100 pageblocks' worth of frames per block) reserves nothing.
    zone!(m2, z2, 4);
    let s = z2.alloc(o(1), M::Unmovable, AllocMode::HIGHATOMIC).unwrap();
    assert!(!z2.reserve_highatomic(s, o(1)));
}

#[test]
fn isolation_quarantines_free_memory_and_refuses_unmovable_blocks() {
    zone!(m, z, 4);
    let before = z.free_pages();
    // Block 0 gets a movable allocation, block 3 an unmovable one.
    let mv = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    assert!(mv.get() < PB);
    z.set_block_type(Pfn(3 * PB), M::Unmovable).unwrap();
    let um = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert!(um.get() >= 3 * PB);
    assert_eq!(z.isolate_block(um), Err(BlockError::Unmovable { pfn: um }));
    assert_eq!(z.isolate_block(Pfn(9999)), Err(BlockError::OutOfRange));
    assert_eq!(z.unisolate_block(mv), Err(BlockError::NotIsolated));
    let free_before = z.free_pages();
    z.isolate_block(mv).unwrap();
    assert_eq!(z.isolate_block(mv), Err(BlockError::AlreadyIsolated));
    assert_eq!(z.block_type(mv), Some(M::Isolate));
    assert_eq!(
        z.free_pages(),
        free_before - (PB - 1),
        "isolated memory is not free"
    );
    assert_eq!(z.set_block_type(mv, M::Unmovable), Err(BlockError::BadType));
    assert_eq!(
        z.set_block_type(Pfn(2 * PB), M::HighAtomic),
        Err(BlockError::BadType)
    );
    assert_eq!(
        z.set_block_type(Pfn(2 * PB), M::Isolate),
        Err(BlockError::BadType)
    );
    z.validate().unwrap();
    // Nothing allocates from it; frames freed inside it stay isolated.
    for _ in 0..100 {
        let p = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
        assert!(p.get() >= PB);
        z.free(p, o(0)).unwrap();
    }
    z.free(mv, o(0)).unwrap();
    assert_eq!(z.free_pages_of(M::Isolate), PB);
    z.validate().unwrap();
    z.unisolate_block(mv).unwrap();
    assert_eq!(
        z.block_type(mv),
        Some(M::Movable),
        "the type survived isolation"
    );
    z.free(um, o(0)).unwrap();
    assert_eq!(z.free_pages(), before);
    z.validate().unwrap();
    // A pinned movable block cannot be isolated either.
    let pinned = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    assert!(z.set_pinned(pinned, true));
    assert!(z.is_pinned(pinned));
    assert_eq!(
        z.buddy().tag(pinned).map(|t| t & tag::MT_MASK),
        Some(M::Movable as u32)
    );
    assert_eq!(
        z.isolate_block(pinned),
        Err(BlockError::Unmovable { pfn: pinned })
    );
    assert!(z.set_pinned(pinned, false));
    z.isolate_block(pinned).unwrap();
    z.unisolate_block(pinned).unwrap();
    assert!(!z.set_pinned(pinned + 1, true), "not a head");
    z.free(pinned, o(0)).unwrap();
    assert!(!z.set_pinned(pinned, true), "free");
    z.validate().unwrap();
}

#[test]
fn grouping_off_treats_everything_as_one_type() {
    let cfg = MobilityConfig {
        grouping: false,
        ..MobilityConfig::default()
    };
    zone!(m, z, 4, cfg);
    for mt in [M::Movable, M::Reclaimable, M::Unmovable] {
        let p = z.alloc(o(0), mt, AllocMode::empty()).unwrap();
        assert_eq!(z.block_type(p), Some(M::Unmovable));
        assert_eq!(z.allocated_type(p), Some(M::Unmovable));
    }
    let s = z.stats();
    assert_eq!(s.claims_whole + s.claims_partial + s.steals, 0);
    z.validate().unwrap();
}

#[test]
fn fragmentation_indices() {
    // spec 03 §4.4 on hand-made free lists.
    let nothing = [0u64; 11];
    assert_eq!(fragindex::fragmentation_index(&nothing, 3), 0);
    assert_eq!(fragindex::unusable_index(&nothing, 3), 1000);
    let mut only_small = [0u64; 11];
    only_small[0] = 512; // 512 single frames
    assert_eq!(fragindex::fragmentation_index(&only_small, 0), -1000);
    // 1000 - (1000 + 512*1000/512) / 512 = 1000 - 3 = 997: failure from fragmentation.
    assert_eq!(fragindex::fragmentation_index(&only_small, 9), 997);
    assert_eq!(fragindex::unusable_index(&only_small, 9), 1000);
    assert_eq!(fragindex::extfrag_percent(&only_small, 9), 100);
    let mut mixed = [0u64; 11];
    mixed[0] = 512;
    mixed[9] = 1;
    assert_eq!(fragindex::unusable_index(&mixed, 9), 500);
    assert_eq!(fragindex::extfrag_percent(&mixed, 9), 50);
    assert_eq!(fragindex::fragmentation_index(&mixed, 9), -1000);
    // One big hole short of memory: index near 0 means "lack of memory".
    let mut few = [0u64; 11];
    few[8] = 1;
    assert_eq!(
        fragindex::fragmentation_index(&few, 9),
        1000 - (1000 + 256 * 1000 / 512)
    );
}

#[test]
fn pagetypeinfo_counts_blocks_per_type() {
    zone!(m, z, 4);
    z.set_block_type(Pfn(0), M::Unmovable).unwrap();
    let text = z.pagetypeinfo(&"zone   Normal").to_string();
    let line = text
        .lines()
        .find(|l| l.starts_with("zone   Normal  "))
        .unwrap();
    let nums: Vec<u64> = line
        .split_whitespace()
        .skip(2)
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(nums, vec![1, 3, 0, 0, 0, 0]);
    assert!(text.contains("type    Unmovable"));
}

#[test]
fn compaction_entry_points() {
    zone!(m, z, 2);
    // take_free_block: a whole free block leaves the lists as an allocation.
    let head = Pfn(0);
    assert_eq!(z.take_free_block(head, M::Movable), Ok(o(10)));
    assert_eq!(z.allocated_type(head), Some(M::Movable));
    assert_eq!(z.take_free_block(head, M::Movable), Err(AllocError::Busy));
    z.free(head, o(10)).unwrap();
    // alloc_at a specific block; tags above the reserved bits are free to use.
    z.alloc_at(Pfn(64), o(3), M::Movable).unwrap();
    assert_eq!(z.alloc_at(Pfn(64), o(3), M::Movable), Err(AllocError::Busy));
    assert!(z.set_tag_bits(Pfn(64), 0x3f0 | tag::PINNED, 0x120 | tag::PINNED));
    assert_eq!(
        z.tag(Pfn(64)),
        Some(0x120 | M::Movable as u32),
        "reserved bits untouched"
    );
    assert!(!z.is_pinned(Pfn(64)));
    assert!(!z.set_tag_bits(Pfn(65), 0x3f0, 0));
    z.free(Pfn(64), o(3)).unwrap();
    z.validate().unwrap();
    // Taking a large free block of another type retypes it movable.
    z.set_block_type(Pfn(PB), M::Unmovable).unwrap();
    let (h, _) = (Pfn(PB), ());
    assert_eq!(z.take_free_block(h, M::Movable), Ok(o(9)));
    assert_eq!(z.block_type(h), Some(M::Movable));
    z.free(h, o(9)).unwrap();
    z.validate().unwrap();
}

#[test]
fn small_allocations_fill_the_fullest_pageblock_first() {
    zone!(m, z, 4);
    // Fill everything, then leave block 1 with 112 free frames and block 2
    // with 412, freed in interleaved order (block 2's last).
    let all: Vec<Pfn> = (0..4 * PB)
        .map(|_| z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap())
        .collect();
    for p in &all {
        let (b, k) = (p.get() / PB, p.get() % PB);
        if (b == 1 && k < 112) || (b == 2 && k < 412) {
            z.free(*p, o(0)).unwrap();
        }
    }
    // The next 112 allocations all land in block 1, the fuller, although
    // block 2's frames were freed last; then block 2 is used.
    for _ in 0..112 {
        assert_eq!(
            z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap().get() / PB,
            1
        );
    }
    assert_eq!(
        z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap().get() / PB,
        2
    );
    // An order-3 request skips blocks without a free order-3 block: block 2
    // has only order-0..2 holes after this.
    z.validate().unwrap();
}

#[test]
fn range_isolation_is_all_or_nothing_and_checks_only_the_range() {
    zone!(m, z, 8);
    let before = z.free_pages();
    // An unmovable block in pageblock 3, a movable one in pageblock 0.
    z.set_block_type(Pfn(3 * PB), M::Unmovable).unwrap();
    let um = Pfn(3 * PB + 100);
    z.alloc_at(um, o(0), M::Unmovable).unwrap();
    let mv = Pfn(16);
    z.alloc_at(mv, o(2), M::Movable).unwrap();
    // A range that touches pageblock 3 but not `um`: allowed (only the
    // range is checked), and the whole pageblock is isolated.
    let range = r(2 * PB + 7, um.get());
    assert_eq!(z.range_usage(range), Ok(0));
    z.isolate_range(range).unwrap();
    assert_eq!(z.block_type(Pfn(2 * PB)), Some(M::Isolate));
    assert_eq!(z.block_type(Pfn(3 * PB)), Some(M::Isolate));
    assert_eq!(z.block_type(Pfn(4 * PB)), Some(M::Movable));
    // An overlapping range: refused, and nothing of it stays isolated.
    assert_eq!(
        z.isolate_range(r(5, 2 * PB + 1)),
        Err(BlockError::AlreadyIsolated)
    );
    assert_eq!(z.block_type(Pfn(0)), Some(M::Movable));
    // Taking the range: the largest aligned blocks that tile it.
    z.take_free_range(range, M::Unmovable).unwrap();
    assert_eq!(
        z.take_free_range(range, M::Unmovable).map_err(|_| ()),
        Err(())
    );
    z.unisolate_range(range).unwrap();
    assert_eq!(z.unisolate_range(range), Err(BlockError::NotIsolated));
    assert_eq!(z.free_pages(), before - 1 - 4 - range.len());
    z.validate().unwrap();
    // Blockers and costs.
    assert_eq!(
        z.range_blocker(r(um.get(), um.get() + 9)),
        Some((um, Blocker::Unmovable))
    );
    assert_eq!(z.range_usage(r(mv.get(), mv.get() + 4)), Ok(4));
    assert!(z.set_pinned(mv, true));
    let b = mv.get() / PB * PB;
    assert_eq!(z.range_blocker(r(b, b + PB)), Some((mv, Blocker::Pinned)));
    assert_eq!(
        z.isolate_range(r(b, b + PB)),
        Err(BlockError::Unmovable { pfn: mv })
    );
    assert_eq!(z.isolate_range(r(0, 9 * PB)), Err(BlockError::OutOfRange));
    assert_eq!(z.isolate_range(r(4, 4)), Err(BlockError::OutOfRange));
    z.validate().unwrap();
}

/// Every frame allocated as movable order 0, in address order.
fn fill_movable(z: &mut MobileZone<'_>) -> Vec<Pfn> {
    let mut all: Vec<Pfn> =
        std::iter::from_fn(|| z.alloc(o(0), M::Movable, AllocMode::empty()).ok()).collect();
    all.sort();
    all
}

/// Frees frames `from..from + n` of pageblock `b`.
fn free_in(z: &mut MobileZone<'_>, b: u64, from: u64, n: u64) {
    for i in from..from + n {
        z.free(Pfn(b * PB + i), o(0)).unwrap();
    }
}

#[test]
fn unmovable_fallbacks_go_beside_unmovable_pageblocks_first() {
    // Four regions (order 10) of two pageblocks. Pageblocks 2 and 6 are
    // unmovable and full, so regions 1 and 3 are mixed; their movable
    // pageblocks 3 and 7 have 10 and 20 free frames, pageblock 5 (in a
    // region with no unmovable pageblock) 100.
    zone!(m, z, 8);
    let all = fill_movable(&mut z);
    assert_eq!(all.len() as u64, 8 * PB);
    z.set_block_type(Pfn(2 * PB), M::Unmovable).unwrap();
    z.set_block_type(Pfn(6 * PB), M::Unmovable).unwrap();
    free_in(&mut z, 3, 0, 10);
    free_in(&mut z, 7, 0, 20);
    free_in(&mut z, 5, 0, 100);
    let types = |z: &MobileZone<'_>| {
        (0..8)
            .map(|b| z.block_type(Pfn(b * PB)))
            .collect::<Vec<_>>()
    };
    // The request claims the pinned neighbour with the most room (7),
    // though it fails the half rule, rather than stealing from the
    // roomiest pageblock of all (5, in a region nothing pins yet).
    let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    assert_eq!(p.get() / PB, 7);
    let mut want = types(&z);
    assert_eq!(want[7], Some(M::Unmovable));
    assert_eq!((want[3], want[5]), (Some(M::Movable), Some(M::Movable)));
    assert_eq!((z.stats().claims_partial, z.stats().steals), (1, 0));
    // Its other free frames now serve unmovable requests as their own.
    for _ in 1..20 {
        let p = z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
        assert_eq!(p.get() / PB, 7);
    }
    assert_eq!(types(&z), want);
    // NOFRAGMENT does not hold back a claim inside a pinned region: the
    // next one takes pageblock 3, not a piece of pageblock 5.
    let p = z.alloc(o(0), M::Unmovable, AllocMode::NOFRAGMENT).unwrap();
    assert_eq!(p.get() / PB, 3);
    want[3] = Some(M::Unmovable);
    assert_eq!(types(&z), want);
    assert_eq!(z.stats().claims_partial, 2);
    // With no pinned neighbour left, NOFRAGMENT refuses to fragment.
    for _ in 1..10 {
        z.alloc(o(0), M::Unmovable, AllocMode::empty()).unwrap();
    }
    assert!(z.alloc(o(0), M::Unmovable, AllocMode::NOFRAGMENT).is_err());
    assert_eq!(types(&z), want);
    z.validate().unwrap();
}

/// The tag bits a layer above may set are those the buddy core keeps: a
/// value with a bit above them is refused whole, not cut short; the low
/// four bits stay this layer's whatever the mask says.
#[test]
fn tag_bits_above_the_kept_ones_are_refused_not_dropped() {
    zone!(m, z, 2);
    let a = z.alloc(o(0), M::Movable, AllocMode::empty()).unwrap();
    let before = z.tag(a).unwrap();
    let top = 1u32 << pageframe_buddy::TAG_BITS;
    assert_eq!(tag::KEPT, top - 1);
    assert!(!z.set_tag_bits(a, !tag::RESERVED, top | 1 << 8));
    assert_eq!(z.tag(a), Some(before), "nothing written");
    assert!(z.set_tag_bits(a, !0, 1 << 8 | 0xf));
    assert_eq!(z.tag(a), Some(before | 1 << 8), "the low four bits kept");
    assert!(z.set_tag_bits(a, 1 << 8, 0));
    assert_eq!(z.tag(a), Some(before));
    // A wide mask with a value inside the kept bits is fine.
    assert!(z.set_tag_bits(a, !tag::RESERVED, tag::KEPT & !tag::RESERVED));
    assert_eq!(z.tag(a), Some(before | (tag::KEPT & !tag::RESERVED)));
}

/// A split gives both halves this layer's bits (type, pin) and leaves the
/// bits a layer above set on the block (a compactor's mark) with the lower
/// half, whose head is the one the marker knows: the upper half starts
/// without them, so nothing is left marked that nobody will unmark.
#[test]
fn a_split_leaves_marks_from_above_with_the_head() {
    zone!(m, z, 2);
    let a = z.alloc(o(3), M::Movable, AllocMode::empty()).unwrap();
    assert!(z.set_pinned(a, true));
    assert!(z.set_tag_bits(a, 1 << 8, 1 << 8));
    let upper = z.split_allocated(a, o(3)).unwrap();
    assert_eq!(z.tag(a), Some(1 << 8 | tag::PINNED | M::Movable as u32));
    assert_eq!(z.tag(upper), Some(tag::PINNED | M::Movable as u32));
    z.validate().unwrap();
}
