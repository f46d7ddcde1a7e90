//! `Machine::free_raw`: any part of an allocation given back by number, in
//! any order and from several threads; bad ranges refused with nothing
//! freed.

mod common;

use std::sync::Barrier;

use common::{PB, o, one_zone, r, two_zones};
use pageframe::{FreeError, Gfp, NodeId, Pfn, PfnRange};

fn pr(a: Pfn, b: Pfn) -> PfnRange {
    PfnRange::new(a, b)
}

#[test]
fn parts_freed_out_of_order_merge_back_into_the_whole_zone() {
    let m = one_zone(4 * PB);
    let total = m.inspect().free_pages();
    // Every way to cut sixteen frames into three parts, freed in the order
    // middle, top, bottom.
    for a in 1..15u64 {
        for b in a + 1..16u64 {
            let (p, k) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(4)).unwrap().into_raw();
            assert_eq!(k, o(4));
            // SAFETY: the block's frames are this test's, held as numbers.
            unsafe {
                m.free_raw(pr(p + a, p + b)).unwrap();
                assert_eq!(m.inspect().free_pages(), total - 16 + (b - a));
                m.free_raw(pr(p + b, p + 16)).unwrap();
                m.free_raw(pr(p, p + a)).unwrap();
            }
            assert_eq!(m.inspect().free_pages(), total, "cut at {a}, {b}");
        }
    }
    m.validate().unwrap();
    // Everything merged: two order-10 blocks.
    assert_eq!(
        m.inspect()
            .all_zones()
            .map(|z| z.free_blocks(o(10)))
            .sum::<u64>(),
        2
    );
}

#[test]
fn the_frames_kept_are_blocks_of_their_own() {
    let m = one_zone(4 * PB);
    let (p, _) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(3)).unwrap().into_raw();
    // SAFETY: frames 2..5 of the test's block, held as numbers.
    unsafe { m.free_raw(pr(p + 2, p + 5)) }.unwrap();
    // Kept: 0..2 (order 1), 5 (order 0), 6..8 (order 1).
    for (at, k) in [(0, 1), (5, 0), (6, 1)] {
        // SAFETY: each piece is the test's, made a block once.
        let b = unsafe { m.block_from_raw(p + at, o(k)) }.unwrap();
        m.free(b).unwrap();
    }
    assert_eq!(m.inspect().free_pages(), 4 * PB);
    m.validate().unwrap();
}

#[test]
fn runs_of_single_frames_go_back_by_range_through_their_stripes() {
    let m = one_zone(4 * PB);
    let total = m.inspect().free_pages();
    // Order-0 allocations come from the zone's stripes (pageblocks the
    // stripes hold outside the zone lock); a range over several of them
    // is several allocations given back at once, each frame to the stripe
    // that holds its chunk.
    let mut got: Vec<Pfn> = (0..300)
        .map(|_| {
            m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0))
                .unwrap()
                .into_raw()
                .0
        })
        .collect();
    got.sort();
    let held = m.inspect().stripe_frames();
    assert!(held > 0, "no stripe holds a chunk");
    let mut runs = 0;
    let mut i = 0;
    while i < got.len() {
        let mut j = i + 1;
        while j < got.len() && got[j] == got[j - 1] + 1 {
            j += 1;
        }
        // SAFETY: frames the test allocated, held as numbers, given back
        // once.
        unsafe { m.free_raw(pr(got[i], got[j - 1] + 1)) }.unwrap();
        runs += 1;
        i = j;
    }
    assert!(
        runs < got.len() / 4,
        "{runs} runs: the frames were not adjacent"
    );
    // The frames of the chunks the stripes still hold went back to them.
    assert!(m.inspect().stripe_frames() > held);
    assert_eq!(m.inspect().free_pages(), total);
    m.validate().unwrap();
}

#[test]
fn a_range_with_a_frame_not_allocated_frees_nothing() {
    let m = two_zones(4 * PB, 4 * PB);
    let low = m.inspect().zone_of(Pfn(256)).unwrap().span();
    let (p, k) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap().into_raw();
    let (q, _) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap().into_raw();
    let free = m.inspect().free_pages();
    let cases = [
        // Runs past the block into free memory.
        (pr(p + 2, p + 64), Some(FreeError::AlreadyFree)),
        // Holes of the low zone's span (its memory ends at 256 + 4 PB).
        (
            r(256 + 4 * PB - 1, 256 + 4 * PB + 1),
            Some(FreeError::AlreadyFree),
        ),
        (r(256 + 4 * PB, 256 + 4 * PB + 1), Some(FreeError::Hole)),
        // Across the two zones.
        (
            r(low.end.get() - 1, low.end.get() + 1),
            Some(FreeError::OutOfRange),
        ),
        // Outside every zone.
        (r(1, 2), Some(FreeError::OutOfRange)),
        (pr(p, p), None),
    ];
    for (range, want) in cases {
        // SAFETY: refused ranges change nothing; the empty one is a no-op.
        let got = unsafe { m.free_raw(range) };
        assert_eq!(got.err().map(|e| e.why), want, "{range:?}");
        assert_eq!(m.inspect().free_pages(), free);
    }
    // Both blocks are still whole: their own order frees them.
    for b in [p, q] {
        // SAFETY: the test's blocks, made blocks once.
        let b = unsafe { m.block_from_raw(b, k) }.unwrap();
        m.free(b).unwrap();
    }
    m.validate().unwrap();
}

#[test]
fn a_frame_freed_twice_is_refused() {
    let m = one_zone(4 * PB);
    let (p, _) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap().into_raw();
    // SAFETY: the test's frames; the second call is the double free the
    // check catches (nobody was handed the frame in between).
    unsafe {
        m.free_raw(pr(p + 1, p + 2)).unwrap();
        let e = m.free_raw(pr(p, p + 4)).unwrap_err();
        assert_eq!((e.pfn, e.why), (p + 1, FreeError::AlreadyFree));
        m.free_raw(pr(p, p + 1)).unwrap();
        m.free_raw(pr(p + 2, p + 4)).unwrap();
    }
    assert_eq!(m.inspect().free_pages(), 4 * PB);
    m.validate().unwrap();
}

#[test]
fn threads_free_disjoint_parts_of_the_same_blocks_at_once() {
    let m: &'static _ = one_zone(64 * PB);
    let total = m.inspect().free_pages();
    for round in 0..5 {
        let mut blocks = Vec::new();
        while let Ok(b) = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(6)) {
            blocks.push(b.into_raw().0);
        }
        assert!(blocks.len() > 400);
        let blocks: &'static [Pfn] = Box::leak(blocks.into_boxed_slice());
        let barrier: &'static Barrier = Box::leak(Box::new(Barrier::new(2)));
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                std::thread::spawn(move || {
                    barrier.wait();
                    for &p in blocks {
                        // Thread 0 frees the even frames from the bottom,
                        // thread 1 the odd ones from the top.
                        let frames: Vec<u64> = if t == 0 {
                            (0..64).step_by(2).collect()
                        } else {
                            (0..32).rev().map(|i| 2 * i + 1).collect()
                        };
                        for f in frames {
                            // SAFETY: each frame is freed once, by one thread.
                            unsafe { m.free_raw(pr(p + f, p + f + 1)) }.unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(m.inspect().free_pages(), total, "round {round}");
        m.validate().unwrap();
    }
}
