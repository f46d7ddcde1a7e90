//! The zone's order-0 stripes (reservations of whole chunks taken outside
//! the zone lock): when they find a chunk to reserve.

mod common;

use common::{PB, o, one_zone};
use pageframe::{Gfp, NodeId};

#[test]
fn a_claimed_pageblock_feeds_the_stripes_at_once() {
    let m = one_zone(8 * PB);
    // Every pageblock starts movable: the first unmovable frame finds no
    // chunk of its type to reserve, and the zone claims a pageblock for it
    // (a fallback, under the zone lock).
    let first = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(m.inspect().stripe_frames(), 0);
    // The claimed pageblock is unmovable now: the next frame comes from a
    // stripe that reserved a chunk of it, not from the zone lock again.
    let second = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    assert!(
        m.inspect().stripe_frames() > 0,
        "no stripe reserved a chunk"
    );
    for b in [first, second] {
        m.free(b).unwrap();
    }
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), 8 * PB);
    m.validate().unwrap();
}
