//! The per-CPU caches keep the zone's placement: after the scattered test
//! (every frame allocated, a random half freed, then churn that frees a
//! random frame and allocates one), allocating through a CPU's cache
//! leaves as many whole 2 MiB blocks free as allocating through the zone,
//! nearly every one the free memory could make. Linux's LIFO lists would
//! recycle every freed frame and leave none.

mod common;

use common::*;
use pageframe::{Block, Gfp, Machine, NodeId, Order, ZoneKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Frames of the zone: 256 MiB, 128 pageblocks.
const FRAMES: u64 = 1 << 16;

fn machine() -> &'static Machine<'static> {
    let m = machine_with(pageframe::MachineConfig::SINGLE_NODE);
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Normal,
        r(4 * GIB, 4 * GIB + FRAMES),
        r(4 * GIB, 4 * GIB + FRAMES),
    );
    // Every frame can be allocated: the test fills the zone.
    m.tunables().set_min_free_kbytes(0);
    m.enable_pcp(2, leak(m.pcp_bytes(2).unwrap())).unwrap();
    m
}

/// Free 2 MiB blocks (an order-10 block counts two).
fn huge_blocks(m: &Machine<'static>) -> u64 {
    let z = m.inspect().zone_of(pageframe::Pfn(4 * GIB)).unwrap();
    z.free_blocks(o(9)) + 2 * z.free_blocks(o(10))
}

/// The scattered test through `alloc`/`free`; returns the 2 MiB blocks
/// free before and after `drain` empties the caches, and the free frames.
fn scattered(
    m: &'static Machine<'static>,
    mut alloc: impl FnMut() -> Option<Block>,
    mut free: impl FnMut(Block),
    drain: impl FnOnce(),
) -> (u64, u64, u64) {
    let mut rng = SmallRng::seed_from_u64(0x5ca7);
    let mut live = Vec::new();
    while let Some(b) = alloc() {
        live.push(b);
    }
    assert!(
        live.len() as u64 > FRAMES * 99 / 100,
        "filled {}",
        live.len()
    );
    for _ in 0..live.len() / 2 {
        free(live.swap_remove(rng.gen_range(0..live.len())));
    }
    for _ in 0..FRAMES * 12 {
        free(live.swap_remove(rng.gen_range(0..live.len())));
        live.push(alloc().expect("a frame was just freed"));
    }
    let before = huge_blocks(m);
    drain();
    m.drain_stripes();
    let after = huge_blocks(m);
    let free_frames = m.inspect().free_pages();
    for b in live {
        free(b);
    }
    (before, after, free_frames)
}

#[test]
fn caches_keep_as_many_huge_blocks_as_the_zone_path() {
    let zm = machine();
    let gfp = Gfp::HIGHUSER_MOVABLE;
    let zone = scattered(
        zm,
        || zm.alloc(NodeId::ZERO, gfp, Order::ZERO).ok(),
        |b| zm.free(b).unwrap(),
        || {},
    );
    let cm = machine();
    let cpu = std::cell::RefCell::new(cm.cpu(pageframe::CpuId(0), NodeId::ZERO).unwrap());
    let cached = scattered(
        cm,
        || cpu.borrow_mut().alloc(gfp, Order::ZERO).ok(),
        |b| cpu.borrow_mut().free(b).unwrap(),
        || {
            cpu.borrow_mut().drain();
        },
    );
    println!(
        "2 MiB blocks free of {} possible: zone path {} (before draining {}), \
         per-CPU cache {} (before draining {})",
        cached.2 / 512,
        zone.1,
        zone.0,
        cached.1,
        cached.0
    );
    let possible = cached.2 / 512;
    assert!(
        cached.1 * 100 >= possible * 95,
        "through the cache {} of {possible} 2 MiB blocks",
        cached.1
    );
    assert!(
        cached.1 + 2 >= zone.1,
        "cache {} against zone {}",
        cached.1,
        zone.1
    );
    cm.validate().unwrap();
}
