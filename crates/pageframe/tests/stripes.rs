//! The zone's order-0 stripes (reservations of whole chunks taken outside
//! the zone lock): when they find a chunk to reserve.

mod common;

use common::{PB, o, one_zone};
use pageframe::{Gfp, NodeId};

#[test]
fn a_contiguous_range_may_come_from_a_chunk_a_stripe_holds() {
    let m = one_zone(8 * PB);
    // Unmovable frames until a stripe holds a chunk: the one the first
    // frame's fallback claimed.
    let mut held = Vec::new();
    while m.inspect().stripe_frames() == 0 && held.len() < 100 {
        held.push(m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap());
    }
    assert!(
        m.inspect().stripe_frames() > 0,
        "no stripe reserved a chunk"
    );
    // First fit from the zone's start: the stripe's chunk is the lowest
    // with free frames, and the search must not pass over it.
    let lowest = held.iter().map(|b| b.pfn()).min().unwrap();
    assert_eq!(
        lowest.get() & (PB - 1),
        0,
        "the claim's chunk is the lowest"
    );
    let seg = m
        .alloc_contig(
            NodeId::ZERO,
            Gfp::KERNEL,
            4,
            1,
            &mut pageframe::compact::NoMigration,
        )
        .unwrap();
    assert_eq!(seg.range().start.get() >> 9, lowest.get() >> 9);
    m.free_segment(seg).unwrap();
    for b in held {
        m.free(b).unwrap();
    }
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), 8 * PB);
    m.validate().unwrap();
}
