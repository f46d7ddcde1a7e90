//! `Machine::split`: an owned block becomes two owned halves, each freed on
//! its own (through the zone or a per-CPU cache) and each moved on its own
//! by compaction; bad input hands the block back unchanged.

mod common;

use common::{PB, Words, leak, n, o, one_zone};
use pageframe::{CpuId, FreeError, Gfp, Machine, NodeId, Order};

/// Free 2 MiB blocks (order 10 counts two).
fn huge_free(m: &Machine<'static>) -> u64 {
    m.inspect()
        .all_zones()
        .map(|z| z.free_blocks(o(9)) + 2 * z.free_blocks(o(10)))
        .sum()
}

#[test]
fn a_block_split_to_frames_frees_back_through_zone_and_cache() {
    let m = one_zone(4 * PB);
    let bytes = m.pcp_bytes(1).unwrap();
    m.enable_pcp(1, leak(bytes)).unwrap();
    let m = &*m;
    let before = m.inspect().free_pages();
    let big = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).unwrap();
    let start = big.pfn();
    let mut todo = vec![big];
    let mut frames = Vec::new();
    while let Some(b) = todo.pop() {
        if b.order() == Order::ZERO {
            frames.push(b);
            continue;
        }
        let (lo, hi) = m.split(b).unwrap();
        assert_eq!(lo.range().end, hi.pfn());
        assert_eq!(lo.order(), hi.order());
        todo.push(lo);
        todo.push(hi);
    }
    frames.sort_by_key(|b| b.pfn());
    assert_eq!(frames.len(), 512);
    assert!(
        frames
            .iter()
            .enumerate()
            .all(|(i, b)| b.pfn() == start + i as u64)
    );
    assert_eq!(m.inspect().free_pages(), before - 512);
    m.validate().unwrap();
    // Half the frames through the cache, half through the zone, interleaved.
    let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    for (i, f) in frames.into_iter().enumerate() {
        if i % 2 == 0 {
            cpu.free(f).unwrap();
        } else {
            m.free(f).unwrap();
        }
    }
    cpu.drain();
    drop(cpu);
    assert_eq!(m.inspect().free_pages(), before);
    m.validate().unwrap();
    // Merged back: the pageblock is whole again.
    let again = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(9)).unwrap();
    m.free(again).unwrap();
}

#[test]
fn the_old_order_no_longer_frees_a_split_block() {
    let m = one_zone(4 * PB);
    let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, o(4)).unwrap();
    let (p, order) = b.into_raw();
    // SAFETY: the number came from `into_raw` just above and is used once.
    let b = unsafe { m.block_from_raw(p, order) }.unwrap();
    let (lo, hi) = m.split(b).unwrap();
    // SAFETY: a number of a block that is now two: refused, nothing made.
    let stale = unsafe { m.block_from_raw(p, order) };
    assert_eq!(
        stale.unwrap_err().why,
        FreeError::WrongOrder { allocated: o(3) }
    );
    m.free(hi).unwrap();
    m.free(lo).unwrap();
    m.validate().unwrap();
    assert_eq!(m.inspect().free_pages(), 4 * PB);
}

#[test]
fn bad_splits_hand_the_block_back_unchanged() {
    let m = one_zone(4 * PB);
    let other = one_zone(PB);
    let one = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    let refused = m.split(one).unwrap_err();
    assert_eq!(refused.reason(), FreeError::SingleFrame);
    // The message names the call that refused, not a free.
    assert!(
        refused.to_string().starts_with("split of Block(")
            && refused
                .to_string()
                .ends_with(": a block of one frame cannot be split"),
        "{refused}"
    );
    let one = refused.into_inner();
    let foreign = other.alloc(NodeId::ZERO, Gfp::KERNEL, o(2)).unwrap();
    let refused = m.split(foreign).unwrap_err();
    assert_eq!(refused.reason(), FreeError::Foreign);
    let refused = m.guard(refused.into_inner()).unwrap_err();
    assert!(
        refused.to_string().starts_with("guard of Block("),
        "{refused}"
    );
    let refused = m.free(refused.into_inner()).unwrap_err();
    assert!(
        refused.to_string().starts_with("free of Block("),
        "{refused}"
    );
    other.free(refused.into_inner()).unwrap();
    m.free(one).unwrap();
    assert_eq!(m.inspect().free_pages(), 4 * PB);
    m.validate().unwrap();
}

#[test]
fn pinned_blocks_split_into_pinned_halves() {
    let m = one_zone(4 * PB);
    let b = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, o(1)).unwrap();
    m.set_pinned(&b, true).unwrap();
    let (lo, hi) = m.split(b).unwrap();
    // Both halves are live allocations that can be unpinned on their own.
    m.set_pinned(&lo, false).unwrap();
    m.set_pinned(&hi, false).unwrap();
    m.free(lo).unwrap();
    m.free(hi).unwrap();
    m.validate().unwrap();
}

#[test]
fn compaction_moves_each_half_of_a_split_block_on_its_own() {
    // A movable order-3 block per pageblock, split into frames of which
    // the kernel keeps every other one: compaction moves the kept frames
    // one by one and frees whole pageblocks.
    let m = one_zone(8 * PB);
    let mut w = Words::default();
    let mut fill = Vec::new();
    while let Ok(b) = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, o(3)) {
        fill.push(b);
    }
    let mut kept = 0;
    for (i, b) in fill.into_iter().enumerate() {
        if i % 64 != 0 {
            m.free(b).unwrap();
            continue;
        }
        let (lo, hi) = m.split(b).unwrap();
        let (a, b2) = m.split(lo).unwrap();
        m.free(b2).unwrap();
        let (c, d) = m.split(hi).unwrap();
        m.free(c).unwrap();
        w.keep(a);
        w.keep(d);
        kept += 2;
    }
    assert_eq!(huge_free(m), 0);
    m.validate().unwrap();
    let words: Vec<(u64, u64)> = {
        let mut v: Vec<_> = w.word.iter().map(|(&k, &v)| (k, v)).collect();
        v.sort();
        v
    };
    m.compact_node(NodeId::ZERO, &mut w).unwrap();
    assert!(w.moves > 0, "nothing moved");
    assert_eq!(w.blocks.len(), kept);
    // Every word survived its move.
    let mut after: Vec<u64> = w.word.values().copied().collect();
    after.sort();
    let mut was: Vec<u64> = words.iter().map(|x| x.1).collect();
    was.sort();
    assert_eq!(after, was);
    assert!(huge_free(m) > 0);
    m.validate().unwrap();
    w.free_all(m);
    assert_eq!(m.inspect().free_pages(), 8 * PB);
}
