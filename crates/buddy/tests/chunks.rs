//! The chunked representation: where small blocks are placed, how free
//! memory moves between lists chunk by chunk, and the paths that skip or
//! add checks.

mod common;

use common::{config, meta, o, snapshot};
use pageframe_buddy::{
    BlockInfo, BuddyZone, FreeError, ListId, MergePolicy, Pfn, PfnRange, SingleList,
};

const L: ListId = ListId::DEFAULT;
const CHUNK: u64 = 512;

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

/// A zone of `chunks` default chunks, all handed over, then every frame
/// taken at order 0 and those of `free_per_chunk[k]` frames of chunk `k`
/// (its lowest ones) given back.
fn zone_with_fill<'m>(
    m: &'m mut [std::mem::MaybeUninit<u8>],
    free_per_chunk: &[u64],
) -> BuddyZone<'m> {
    let span = r(0, free_per_chunk.len() as u64 * CHUNK);
    let mut z = BuddyZone::new(span, config(10), m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let all: Vec<Pfn> = std::iter::from_fn(|| z.alloc(o(0), L).ok()).collect();
    assert_eq!(all.len() as u64, span.len());
    for (k, &n) in free_per_chunk.iter().enumerate() {
        for i in 0..n {
            z.free(Pfn(k as u64 * CHUNK + i * 2), o(0)).unwrap();
        }
    }
    z.validate().unwrap();
    z
}

#[test]
fn small_requests_fill_the_fullest_chunk_and_spare_the_emptiest() {
    // Chunk 0: 200 single free frames; chunk 1: 3; chunk 2: 100; chunk 3: 50.
    // Every free frame is an order-0 block (every other frame).
    let mut m = meta(r(0, 4 * CHUNK), 10);
    let mut z = zone_with_fill(&mut m, &[200, 3, 100, 50]);
    let order: Vec<u64> = (0..153)
        .map(|_| z.alloc(o(0), L).unwrap().get() / CHUNK)
        .collect();
    assert!(order[..3].iter().all(|&k| k == 1), "{order:?}");
    assert!(order[3..53].iter().all(|&k| k == 3), "{order:?}");
    assert!(order[53..].iter().all(|&k| k == 2), "{order:?}");
    z.validate().unwrap();
}

#[test]
fn small_requests_take_the_best_fitting_chunk_before_the_fullest() {
    // Chunk 0 keeps a free order-2 block and nothing else; chunk 1 keeps
    // 40 single frames. An order-0 request goes to chunk 1 (its largest
    // block is order 0), so chunk 0's order-2 block stays for an order-2
    // request.
    let span = r(0, 2 * CHUNK);
    let mut m = meta(span, 10);
    let mut z = BuddyZone::new(span, config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let all: Vec<Pfn> = std::iter::from_fn(|| z.alloc(o(0), L).ok()).collect();
    assert_eq!(all.len(), 1024);
    for p in [8, 9, 10, 11] {
        z.free(Pfn(p), o(0)).unwrap();
    }
    for i in 0..40 {
        z.free(Pfn(CHUNK + 2 * i), o(0)).unwrap();
    }
    assert_eq!(z.alloc(o(0), L).unwrap().get() / CHUNK, 1);
    assert_eq!(z.alloc(o(2), L).unwrap(), Pfn(8));
    z.validate().unwrap();
}

#[test]
fn a_chunk_whose_last_frame_comes_back_is_a_free_block_again() {
    let mut m = meta(r(0, 4 * CHUNK), 10);
    let mut z = zone_with_fill(&mut m, &[0, 0, 0, 0]);
    assert_eq!(snapshot(&z), vec![0; 11]);
    for p in 0..CHUNK {
        z.free(Pfn(p), o(0)).unwrap();
    }
    // One order-9 block; with its buddy chunk freed too, one order-10 block.
    assert_eq!(z.free_blocks(o(9)), 1);
    for p in CHUNK..2 * CHUNK {
        z.free(Pfn(p), o(0)).unwrap();
    }
    assert_eq!((z.free_blocks(o(9)), z.free_blocks(o(10))), (0, 1));
    assert_eq!(z.free_pages(), 2 * CHUNK);
    z.validate().unwrap();
}

/// Two lists: chunk 1 (frames 512..1024) on list 1, the rest on list 0.
struct ChunkOneOnList1;

impl MergePolicy for ChunkOneOnList1 {
    fn list_for(&self, pfn: Pfn) -> ListId {
        ListId::new(u8::from(pfn.get() / CHUNK == 1)).unwrap()
    }
}

#[test]
fn free_memory_moves_between_lists_a_chunk_at_a_time() {
    let span = r(0, 4 * CHUNK);
    let mut m = vec![
        std::mem::MaybeUninit::uninit();
        BuddyZone::<ChunkOneOnList1>::metadata_bytes(span, config(10))
    ];
    let mut z = BuddyZone::new(span, config(10), &mut m, ChunkOneOnList1).unwrap();
    z.add_free_range(span).unwrap();
    let l1 = ListId::new(1).unwrap();
    assert_eq!(z.free_pages_in(l1), CHUNK);
    // A small allocation from list 1 splits chunk 1.
    let p = z.alloc(o(3), l1).unwrap();
    assert_eq!(p, Pfn(CHUNK));
    assert_eq!(z.free_pages_in(l1), CHUNK - 8);
    // Moving one small free block moves all the chunk's free memory.
    let head = z.first_free(o(3), l1).unwrap();
    assert_eq!(z.move_free_block(head, L), Some((head, o(3))));
    assert_eq!(
        (z.free_pages_in(l1), z.free_pages_in(L)),
        (0, 4 * CHUNK - 8)
    );
    assert_eq!(
        z.block_at(Pfn(CHUNK + 256)),
        Some(BlockInfo::Free {
            head: Pfn(CHUNK + 256),
            order: o(8),
            list: L
        })
    );
    // The moved memory is found on its new list and goes back as a whole.
    assert_eq!(z.move_free_range(r(CHUNK, 2 * CHUNK), l1), CHUNK - 8);
    assert_eq!(z.free_pages_in(l1), CHUNK - 8);
    // move_free_range carves a large free block at the range's edge.
    assert_eq!(z.move_free_range(r(2 * CHUNK, 3 * CHUNK), l1), CHUNK);
    assert_eq!(z.free_blocks_in(o(9), l1), 1);
    assert_eq!(z.free_blocks_in(o(9), L), 2);
    z.validate().unwrap();
}

#[test]
fn unchecked_free_matches_the_checked_one() {
    let mut m1 = meta(r(0, 4 * CHUNK), 10);
    let mut m2 = meta(r(0, 4 * CHUNK), 10);
    let mut a = zone_with_fill(&mut m1, &[10, 20, 0, 5]);
    let mut b = zone_with_fill(&mut m2, &[10, 20, 0, 5]);
    for p in [1, 3, 5, CHUNK + 1, 3 * CHUNK + 7] {
        a.free(Pfn(p), o(0)).unwrap();
        // SAFETY: `p` heads a live order-0 block of `b` (same history as `a`,
        // where the checked free just accepted it).
        unsafe { b.free_unchecked(Pfn(p), o(0)) };
    }
    assert_eq!(snapshot(&a), snapshot(&b));
    assert_eq!(a.free_pages(), b.free_pages());
    b.validate().unwrap();
    assert_eq!(a.free(Pfn(1), o(0)), Err(FreeError::AlreadyFree));
}

#[test]
fn reporting_below_the_chunk_order_marks_blocks_until_reused() {
    let mut m = meta(r(0, 2 * CHUNK), 10);
    let mut z = zone_with_fill(&mut m, &[0, 0]);
    // Free an order-4 block and an order-3 block in chunk 0.
    for p in (0..16).chain(32..40) {
        z.free(Pfn(p), o(0)).unwrap();
    }
    let mut out = [(Pfn(0), o(0)); 8];
    let n = z.take_unreported(o(3), L, &mut out, 1 << 20);
    assert_eq!(n, 2);
    let mut taken: Vec<_> = out[..n].to_vec();
    taken.sort();
    assert_eq!(taken, vec![(Pfn(0), o(4)), (Pfn(32), o(3))]);
    assert_eq!(z.free_pages(), 0);
    for &(p, k) in &taken {
        z.return_reported(p, k, true).unwrap();
    }
    assert!(z.is_reported(Pfn(0)) && z.is_reported(Pfn(32)));
    assert_eq!(z.reported_pages(o(3), L), (24, 24));
    assert_eq!(z.take_unreported(o(3), L, &mut out, 1 << 20), 0);
    // Reused and freed again, a block is unreported.
    let p = z.alloc(o(3), L).unwrap();
    assert_eq!(p, Pfn(32));
    z.free(p, o(3)).unwrap();
    assert!(!z.is_reported(Pfn(32)));
    assert_eq!(z.reported_pages(o(3), L), (24, 16));
    // Its buddy freed, a reported block merges with it: the merged block is
    // unreported.
    for p in 16..32 {
        z.free(Pfn(p), o(0)).unwrap();
    }
    assert_eq!(
        z.block_at(Pfn(0)),
        Some(BlockInfo::Free {
            head: Pfn(0),
            order: o(5),
            list: L
        })
    );
    assert!(!z.is_reported(Pfn(0)));
    z.validate().unwrap();
}

#[test]
fn free_room_counts_a_range_and_finds_its_largest_block() {
    let mut m = meta(r(0, 4 * CHUNK), 10);
    // Chunk 0: five single frames (0, 2, .., 8); chunk 1: an order-2 block
    // at 512; chunks 2 and 3: wholly free, one order-10 block.
    let mut z = zone_with_fill(&mut m, &[5, 0, 0, 0]);
    for p in 512..516 {
        z.free(Pfn(p), o(0)).unwrap();
    }
    for p in 2 * CHUNK..4 * CHUNK {
        z.free(Pfn(p), o(0)).unwrap();
    }
    z.validate().unwrap();
    let room = |z: &BuddyZone<'_>, a, b| z.free_room(r(a, b), L);
    assert_eq!(room(&z, 0, CHUNK), (5, Some((Pfn(0), o(0)))));
    assert_eq!(room(&z, CHUNK, 2 * CHUNK), (4, Some((Pfn(512), o(2)))));
    assert_eq!(room(&z, 0, 2 * CHUNK), (9, Some((Pfn(512), o(2)))));
    assert_eq!(
        room(&z, 2 * CHUNK, 4 * CHUNK),
        (1024, Some((Pfn(1024), o(10))))
    );
    // A block reaching past the range is not the range's.
    assert_eq!(room(&z, 2 * CHUNK, 3 * CHUNK), (0, None));
    assert_eq!(room(&z, 0, 4 * CHUNK).0, z.free_pages());
    // Only the list asked about; outside the span nothing.
    assert_eq!(
        z.free_room(r(0, 4 * CHUNK), ListId::new(1).unwrap()),
        (0, None)
    );
    assert_eq!(room(&z, 4 * CHUNK, 8 * CHUNK), (0, None));
}

/// Four chunks: chunk 0 holds five single free frames (0, 2, .., 8),
/// chunk 1 seven (512, ..) and an order-2 block at 1020, chunks 2 and 3
/// one free order-10 block.
fn zone_with_rooms(m: &mut [std::mem::MaybeUninit<u8>]) -> BuddyZone<'_> {
    let mut z = zone_with_fill(m, &[5, 7, 0, 0]);
    for p in (1020..1024).chain(2 * CHUNK..4 * CHUNK) {
        z.free(Pfn(p), o(0)).unwrap();
    }
    z
}

/// `room` sees the same memory per order: below the chunk order the chunk
/// with the most free frames that has a block of that order, from the
/// chunk order up the lowest block; totals for every list and the one
/// asked about; whether the range is all managed memory inside the zone.
#[test]
fn room_finds_a_block_of_each_order_in_the_roomiest_chunk() {
    use pageframe_buddy::{Order, Room};
    let mut m = meta(r(0, 4 * CHUNK), 10);
    let z = zone_with_rooms(&mut m);
    let all = z.room(r(0, 4 * CHUNK), L);
    assert_eq!((all.free, all.on_list, all.whole), (1040, 1040, true));
    // Order 0 from chunk 1 (11 free frames against 5), order 2 there too.
    assert_eq!(all.block(o(0)), Some(Pfn(512)));
    assert_eq!(all.block(o(2)), Some(Pfn(1020)));
    assert_eq!(all.block(o(1)), None);
    assert_eq!(all.block(o(10)), Some(Pfn(1024)));
    assert!(all.has_at_or_above(o(3)) && !all.has_at_or_above(Order::new(11).unwrap()));
    // Two halves merged give the whole.
    let (mut lo, hi) = (
        z.room(r(0, 2 * CHUNK), L),
        z.room(r(2 * CHUNK, 4 * CHUNK), L),
    );
    assert_eq!(lo.block(o(10)), None);
    lo.merge(&hi);
    assert_eq!(lo, all);
    // Another list: the totals of the range, nothing of its own.
    let other = z.room(r(0, 4 * CHUNK), ListId::new(1).unwrap());
    assert_eq!(
        (other.free, other.on_list, other.block(o(0))),
        (1040, 0, None)
    );
    // A block reaching past the range is not the range's; a range reaching
    // past the zone is not whole, and nothing outside it counts.
    assert_eq!(z.room(r(2 * CHUNK, 3 * CHUNK), L).free, 0);
    let past = z.room(r(2 * CHUNK, 8 * CHUNK), L);
    assert_eq!((past.free, past.whole), (1024, false));
    assert_eq!(z.room(r(4 * CHUNK, 8 * CHUNK), L), Room::EMPTY);
}

/// `rooms` reads several lists in one pass and finds for each what `room`
/// finds for it alone: here chunk 0 (split) and chunk 3 (whole) on list 1,
/// the rest on the default list; a list named twice gets nothing more.
#[test]
fn rooms_of_several_lists_are_each_lists_room() {
    let mut m = meta(r(0, 4 * CHUNK), 10);
    let mut z = zone_with_rooms(&mut m);
    let l1 = ListId::new(1).unwrap();
    assert_eq!(z.move_free_range(r(0, CHUNK), l1), 5);
    assert_eq!(z.move_free_range(r(3 * CHUNK, 4 * CHUNK), l1), CHUNK);
    for range in [
        r(0, 4 * CHUNK),
        r(0, CHUNK),
        r(CHUNK, 3 * CHUNK),
        r(2 * CHUNK, 8 * CHUNK),
        r(4 * CHUNK, 8 * CHUNK),
    ] {
        let [a, b] = z.rooms(range, [L, l1]);
        assert_eq!((a, b), (z.room(range, L), z.room(range, l1)), "{range:?}");
        let [b2, a2] = z.rooms(range, [l1, L]);
        assert_eq!((a2, b2), (a, b));
    }
    let [a, b] = z.rooms(r(0, 4 * CHUNK), [L, l1]);
    assert_eq!(
        (a.free, a.on_list, b.on_list),
        (1040, 1040 - 5 - CHUNK, 5 + CHUNK)
    );
    assert_eq!(
        (b.block(o(0)), b.block(o(9))),
        (Some(Pfn(0)), Some(Pfn(3 * CHUNK)))
    );
    let [_, twice] = z.rooms(r(0, 4 * CHUNK), [L, L]);
    assert_eq!((twice.on_list, twice.block(o(0))), (0, None));
    z.validate().unwrap();
}

/// A run takes a chunk's lowest free frames after the one just allocated,
/// as many as asked, stops where the taker refuses, leaves the zone as
/// frame-by-frame allocations would, and takes nothing from a chunk of
/// another list or one not split into frames.
#[test]
fn a_run_takes_the_lowest_free_frames_of_one_chunk() {
    use pageframe_buddy::{ListId, Order, SingleList};
    let span = PfnRange::new(Pfn(0), Pfn(2048));
    let mut m = common::meta(span, 10);
    let mut z = BuddyZone::new(span, common::config(10), &mut m, SingleList).unwrap();
    z.add_free_range(span).unwrap();
    let l = ListId::DEFAULT;
    let p = z.alloc(Order::ZERO, l).unwrap();
    let free = z.free_pages();
    let mut got = Vec::new();
    let n = z.alloc_run(p, l, 10, 0, |base, bits| {
        assert_eq!(base.get() % 64, 0, "a word's first frame");
        got.extend((0..64).filter(|b| bits & 1 << b != 0).map(|b| base + b));
        bits
    });
    assert_eq!(n, 10);
    let chunk = p.get() & !511;
    let want: Vec<_> = (1..=10).map(|i| Pfn(chunk + i)).collect();
    assert_eq!(got, want, "the lowest free frames after the first");
    assert_eq!(z.free_pages(), free - 10);
    z.validate().unwrap();
    // A refusal ends the run, the refused frames free: here every frame
    // from the 14th of the chunk (and bits never offered are not taken).
    let n = z.alloc_run(p, l, 100, 0, |base, bits| {
        let below = (1u64 << (chunk + 14 - base.get())) - 1;
        (bits & below) | 1
    });
    assert_eq!(n, 3);
    assert!(z.free(Pfn(chunk + 14), Order::ZERO).is_err(), "still free");
    z.validate().unwrap();
    // Every frame taken is an order-0 block the zone frees as any other.
    for f in got.into_iter().chain((11..14).map(|i| Pfn(chunk + i))) {
        z.free(f, Order::ZERO).unwrap();
    }
    z.free(p, Order::ZERO).unwrap();
    z.validate().unwrap();
    assert_eq!(z.free_pages(), 2048);
    // A wholly free chunk (not split) and a frame outside the zone give
    // nothing; neither does a zero-length run.
    assert_eq!(z.alloc_run(Pfn(0), l, 5, 0, |_, b| b), 0);
    assert_eq!(z.alloc_run(Pfn(4096), l, 5, 0, |_, b| b), 0);
    let q = z.alloc(Order::ZERO, l).unwrap();
    assert_eq!(z.alloc_run(q, l, 0, 0, |_, b| b), 0);
    z.free(q, Order::ZERO).unwrap();
    z.validate().unwrap();
}

/// A policy that keeps the frames below `kept` for last.
struct KeepLow {
    kept: u64,
}

impl MergePolicy for KeepLow {
    fn list_for(&self, _: Pfn) -> ListId {
        L
    }
    fn keep_for_last(&self, pfn: Pfn, _: ListId) -> bool {
        pfn.get() < self.kept
    }
}

/// Blocks the policy keeps for last go to the tail of their list when
/// they are freed, and `requeue_last` sends the free ones of a range
/// there at once: the others are handed out first.
#[test]
fn memory_kept_for_last_is_handed_out_after_the_rest() {
    use pageframe_buddy::BuddyConfig;
    // Four chunks that never merge (maximum order = chunk order).
    let span = r(0, 4 * CHUNK);
    let cfg = BuddyConfig::new(o(9));
    let mut m =
        vec![std::mem::MaybeUninit::uninit(); BuddyZone::<KeepLow>::metadata_bytes(span, cfg)];
    let mut z = BuddyZone::new(span, cfg, &mut m, KeepLow { kept: 0 }).unwrap();
    z.add_free_range(span).unwrap();
    let order = |z: &mut BuddyZone<'_, KeepLow>| -> Vec<u64> {
        let got: Vec<Pfn> = std::iter::from_fn(|| z.alloc(o(9), L).ok()).collect();
        for &p in &got {
            z.free(p, o(9)).unwrap();
        }
        got.iter().map(|p| p.get() / CHUNK).collect()
    };
    let before = order(&mut z);
    assert_eq!(before.len(), 4);
    // Chunks 0 and 1 go last from now on: requeued, then freed again.
    z.policy_mut().kept = 2 * CHUNK;
    assert_eq!(z.requeue_last(r(0, 2 * CHUNK), L), 2);
    let after = order(&mut z);
    assert!(after[2..].iter().all(|&k| k < 2), "{after:?}");
    let again = order(&mut z);
    assert!(again[2..].iter().all(|&k| k < 2), "freed again: {again:?}");
    // Only whole blocks of the list inside the range move.
    assert_eq!(z.requeue_last(r(0, CHUNK / 2), L), 0);
    assert_eq!(z.requeue_last(r(0, 2 * CHUNK), ListId::new(1).unwrap()), 0);
    z.validate().unwrap();
}

/// A run of frames comes whole from one word of the fullest chunk that has
/// room, as order-0 allocations, and goes back whole or frame by frame;
/// a bad run back changes nothing, and a run that empties its chunk makes
/// it a free block of the chunk order again.
#[test]
fn a_frame_run_comes_from_one_word_and_goes_back_whole() {
    use pageframe_buddy::{MAX_RUN, Order};
    let mut m = meta(r(0, 4 * CHUNK), 10);
    // Chunk 0 has 20 free frames (every second one of its lowest 40),
    // chunk 1 has 200, chunk 2 none, chunk 3 one.
    let mut z = zone_with_fill(&mut m, &[20, 200, 0, 1]);
    let free = z.free_pages();
    // No chunk has a run of 3 among every-second frames: none of them
    // is an aligned free block of order 2, so nothing is taken.
    assert_eq!(z.alloc_frame_run(L, 3, 0), None);
    assert_eq!(z.free_pages(), free);
    // Make room in chunk 0: frames 1, 3, 5 and 7 back, so 0..9 are free
    // (a free block of order 3 among them, which a run of 5 needs).
    for f in [1, 3, 5, 7] {
        z.free(Pfn(f), o(0)).unwrap();
    }
    let free = z.free_pages();
    assert_eq!(z.alloc_frame_run(L, 5, 7), Some(Pfn(0)), "the lowest run");
    assert_eq!(z.free_pages(), free - 5);
    z.validate().unwrap();
    for f in 0..5 {
        assert_eq!(z.tag(Pfn(f)), Some(7), "frame {f} an order-0 allocation");
    }
    assert_eq!(z.alloc_frame_run(L, 0, 0), None);
    assert_eq!(z.alloc_frame_run(L, MAX_RUN + 1, 0), None);
    // Bad runs back change nothing.
    let before = snapshot(&z);
    assert_eq!(z.free_frame_run(Pfn(0), 6), Err(FreeError::AlreadyFree));
    assert_eq!(z.free_frame_run(Pfn(60), 8), Err(FreeError::Misaligned));
    assert_eq!(z.free_frame_run(Pfn(0), 0), Err(FreeError::Misaligned));
    assert_eq!(
        z.free_frame_run(Pfn(0), MAX_RUN + 1),
        Err(FreeError::Misaligned)
    );
    assert_eq!(snapshot(&z), before);
    // Back whole, then the zone is as before the run.
    z.free_frame_run(Pfn(0), 5).unwrap();
    assert_eq!(z.free_pages(), free);
    z.validate().unwrap();
    // Or frame by frame, as any order-0 allocation.
    let p = z.alloc_frame_run(L, 4, 0).unwrap();
    for f in 0..4 {
        z.free(p + f, o(0)).unwrap();
    }
    assert_eq!(z.free_pages(), free);
    z.validate().unwrap();
    // A block of order 1 is no run of order-0 allocations.
    let b = z.alloc(Order::new(1).unwrap(), L).unwrap();
    let before = snapshot(&z);
    assert!(z.free_frame_run(b, 2).is_err());
    assert_eq!(snapshot(&z), before);
    z.free(b, Order::new(1).unwrap()).unwrap();
    // Chunk 3: every frame allocated but one; freeing them all as runs
    // makes it a free block of the chunk order.
    let (c3, large) = (3 * CHUNK, snapshot(&z)[9]);
    for w in 0..8 {
        let first = c3 + w * 64;
        let n = if w == 0 { 63 } else { 64 };
        z.free_frame_run(Pfn(first + 64 - n), n as u32).unwrap();
    }
    z.validate().unwrap();
    assert_eq!(snapshot(&z)[9], large + 1, "chunk 3 whole again");
}
