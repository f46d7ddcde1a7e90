//! The zone's order-0 stripes (reservations of whole chunks taken outside
//! the zone lock): when they find a chunk to reserve.

mod common;

use common::{GIB, PB, o, one_zone};
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

/// A stripe reserves the chunk a small request would come from once a
/// sixty-fourth of it is free (8 frames of a pageblock), and leaves one
/// with a frame fewer to the zone lock, which fills it frame by frame.
#[test]
fn a_chunk_is_worth_a_stripe_from_a_sixty_fourth_free() {
    let least = PB / 64;
    for (left, reserved) in [(least, true), (least - 1, false), (PB / 8, true)] {
        reserve_with_free_left(one_zone(8 * PB), PB, left, reserved);
    }
}

/// In small chunks a stripe still wants two free frames: a reservation of
/// one would take the zone lock twice for it.
#[test]
fn a_single_free_frame_is_never_worth_a_stripe() {
    let pb = 16;
    let config = pageframe::MachineConfig {
        mobility: pageframe::zone::MobilityConfig {
            pageblock_order: o(4),
            ..pageframe::zone::MobilityConfig::DEFAULT
        },
        ..pageframe::MachineConfig::SINGLE_NODE
    };
    for (left, reserved) in [(1, false), (2, true)] {
        let m = common::machine_with(config);
        let span = common::r(4 * GIB, 4 * GIB + 64 * pb);
        common::zone(m, NodeId::ZERO, pageframe::ZoneKind::Normal, span, span);
        reserve_with_free_left(m, pb, left, reserved);
    }
}

/// Allocates unmovable frames from a fresh zone of pageblocks of `pb`
/// frames until the chunk they come from has `left` free, gives the
/// stripes' frames back and allocates one more: from that chunk, by a
/// stripe that reserved it if `reserved`.
fn reserve_with_free_left(m: &pageframe::Machine<'static>, pb: u64, left: u64, reserved: bool) {
    let total = m.inspect().free_pages();
    // The first unmovable frame claims a pageblock, which a stripe then
    // reserves and serves until `left` of its frames are free.
    let mut held: Vec<_> = (0..pb - left)
        .map(|_| m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap())
        .collect();
    let block = held[0].pfn().get() / pb;
    assert!(held.iter().all(|b| b.pfn().get() / pb == block));
    assert_eq!(m.inspect().stripe_frames(), left);
    // Given back, the chunk is the zone's fullest unmovable one.
    m.drain_stripes();
    assert_eq!(m.inspect().stripe_frames(), 0);
    let next = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(
        next.pfn().get() / pb,
        block,
        "left {left}: not the fullest chunk"
    );
    let expect = if reserved { left - 1 } else { 0 };
    assert_eq!(m.inspect().stripe_frames(), expect, "left {left}");
    // A frame of the chunk freed now reaches the zone's free lists only
    // if no stripe holds the chunk (a reservation keeps the chunk's
    // frees until it goes back, even one that handed out its last frame).
    let freed = held.pop().unwrap();
    let pfn = freed.pfn();
    m.free(freed).unwrap();
    let mut listed = false;
    m.inspect().for_each_free_block(|p, _| listed |= p == pfn);
    assert_eq!(listed, !reserved, "left {left}: the freed frame listed");
    held.push(next);
    for b in held {
        m.free(b).unwrap();
    }
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), total);
    m.validate().unwrap();
}

/// Fallbacks (claims and steals) so far in the machine's one zone.
fn fallbacks(m: &pageframe::Machine<'static>) -> u64 {
    let s = m.inspect().all_zones().next().unwrap().fallback_stats();
    s.claims_whole + s.claims_partial + s.steals
}

#[test]
fn a_request_the_stripes_do_not_serve_takes_their_frames_before_a_claim() {
    // Free memory in single pageblocks (every other one of the span), so
    // that a fallback claims one pageblock, not a larger free block.
    let m = common::machine_with(pageframe::MachineConfig::SINGLE_NODE);
    let span = common::r(4 * GIB, 4 * GIB + 64 * PB);
    let pb = |k: u64| common::r(4 * GIB + k * PB, 4 * GIB + (k + 1) * PB);
    common::zone(m, NodeId::ZERO, pageframe::ZoneKind::Normal, span, pb(1));
    for k in (3..64).step_by(2) {
        m.add_free_range(pb(k)).unwrap();
    }
    let bytes = m.pcp_bytes(1).unwrap();
    m.enable_pcp(1, common::leak(bytes)).unwrap();
    let first = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    let second = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(fallbacks(m), 1);
    assert_eq!(m.inspect().stripe_frames(), PB - 2);
    // A CPU's cache refills under the zone lock, not from a stripe: the
    // unmovable lists are empty, the stripe holds the claimed pageblock's
    // free frames. They come back to the zone rather than a second
    // pageblock turning unmovable.
    let mut cpu = common::claim_cpu(m, 0, NodeId::ZERO);
    let third = cpu.alloc(Gfp::KERNEL, o(0)).unwrap();
    assert_eq!(fallbacks(m), 1, "the refill fell back");
    assert_eq!(m.inspect().stripe_frames(), 0);
    assert_eq!(third.pfn().get() >> 9, first.pfn().get() >> 9);
    for b in [first, second] {
        m.free(b).unwrap();
    }
    cpu.free(third).unwrap();
    cpu.drain();
    m.drain_stripes();
    assert_eq!(m.inspect().free_pages(), 32 * PB);
    m.validate().unwrap();
}

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
