//! Superpageblocks through the machine: the placement tunable reaches
//! every zone, and when memory that cannot move finds no room in the
//! regions it taints already, the slow path migrates movable memory out of
//! one of their pageblocks rather than taint a clean region.

mod common;

use std::collections::HashMap;

use common::*;
use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    tune::Placement,
    zone::MigrateType,
};

/// Regions of four pageblocks (2^11 frames), so that a small zone has
/// several.
const SHIFT: u8 = 11;
const REGION: u64 = 1 << SHIFT;

/// A kernel holding movable frames by number, moving them when asked.
#[derive(Default)]
struct Kernel {
    held: HashMap<Pfn, Block>,
    moved: u64,
}

impl Migrator for Kernel {
    fn isolate(&mut self, p: Pfn, _: Order) -> Option<Block> {
        self.held.remove(&p)
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, o: Order, _: MigrateMode) -> Result<(), MigrateError> {
        self.moved += o.pages();
        Ok(())
    }
    fn putback(&mut self, b: Block) {
        self.held.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        self.held.insert(b.pfn(), b);
    }
}

impl SlowPathHooks for Kernel {}

/// A zone of four regions at 4 GiB, every frame held by the kernel as a
/// movable page; then region 0's first pageblock is freed and taken by
/// unmovable memory (tainting region 0), and 100 frames of its third
/// pageblock (outside the 4 MiB block of the first, so no neighbour rule
/// applies) and all of region 2's first are freed.
fn tainted_and_full(placement: Placement) -> (&'static Machine<'static>, Kernel) {
    let mut config = MachineConfig::SINGLE_NODE;
    config.mobility.superpageblock_shift = SHIFT;
    let m = machine_with(config);
    let base = 4 * GIB;
    let span = r(base, base + 4 * REGION);
    zone(m, n(0), ZoneKind::Normal, span, span);
    m.tunables().set_min_free_kbytes(0);
    let m: &'static Machine<'static> = m;
    m.tunables().set_fallback_placement(placement);
    let mut k = Kernel::default();
    while let Ok(b) = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, Order::ZERO) {
        k.held.insert(b.pfn(), b);
    }
    let free = |k: &mut Kernel, a: u64, b: u64| {
        for p in a..b {
            m.free(k.held.remove(&Pfn(base + p)).unwrap()).unwrap();
        }
    };
    free(&mut k, 0, PB);
    for _ in 0..PB {
        let u = m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap();
        assert!(u.pfn().get() < base + PB);
        let _ = u.into_raw(); // kept by the kernel for good
    }
    free(&mut k, 2 * PB, 2 * PB + 100);
    free(&mut k, 2 * REGION, 2 * REGION + PB);
    (m, k)
}

fn counts(m: &Machine<'static>) -> Vec<u32> {
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    z.inspect(|mz| {
        let s = mz.mobility().pageblocks().superpageblocks();
        (0..s.len()).map(|i| s.count(i)).collect()
    })
}

#[test]
fn the_slow_path_makes_room_in_a_tainted_region_before_tainting_a_clean_one() {
    let (m, mut k) = tainted_and_full(Placement::Superpageblock);
    let base = 4 * GIB;
    assert_eq!(counts(m), [1, 0, 0, 0]);
    // The free lists alone would taint region 2; NOFRAGMENT (defrag_mode)
    // holds that back, and the slow path empties region 0's roomiest
    // movable pageblock (412 pages moved) for the request to claim.
    let a = m
        .alloc_slow(NodeId::ZERO, Gfp::KERNEL, Order::ZERO, &mut k)
        .unwrap();
    assert_eq!((a.pfn().get() - base) / PB, 2, "{:?}", a.pfn());
    assert_eq!(counts(m), [2, 0, 0, 0]);
    assert_eq!(k.moved, PB - 100);
    assert!(
        k.held
            .keys()
            .all(|p| (p.get() - base) / PB != 2 && p.get() >= base),
        "no page left in the emptied pageblock"
    );
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    assert_eq!(z.fallback_stats().superpageblock_room_made, 1);
    assert_eq!(
        z.inspect(|mz| mz.block_type(a.pfn())),
        Some(MigrateType::Unmovable)
    );
    m.free(a).unwrap();
    m.validate().unwrap();
}

#[test]
fn without_the_superpageblock_placement_a_clean_region_is_tainted() {
    let (m, mut k) = tainted_and_full(Placement::Neighbour);
    let a = m
        .alloc_slow(NodeId::ZERO, Gfp::KERNEL, Order::ZERO, &mut k)
        .unwrap();
    assert_eq!(
        a.pfn().get() - 4 * GIB,
        2 * REGION,
        "region 2's free pageblock"
    );
    assert_eq!(counts(m), [1, 0, 1, 0]);
    assert_eq!(k.moved, 0);
    m.validate().unwrap();
}

#[test]
fn the_placement_reaches_every_zone_and_zones_added_later() {
    let m = two_zones(8 * PB, 8 * PB);
    assert_eq!(
        m.tunables().fallback_placement(),
        Placement::Superpageblock,
        "the default"
    );
    m.tunables().set_fallback_placement(Placement::Linux);
    assert_eq!(m.tunables().fallback_placement(), Placement::Linux);
    assert!(
        m.inspect()
            .all_zones()
            .all(|z| z.inspect(|mz| mz.placement()) == Placement::Linux)
    );
    // A zone hot-added afterwards gets it too.
    let range = r(16 * GIB, 16 * GIB + 4 * PB);
    m.declare_hotplug(NodeId::ZERO, ZoneKind::Movable, range)
        .unwrap();
    let z = m
        .hot_add_zone(
            NodeId::ZERO,
            ZoneKind::Movable,
            range,
            leak(m.zone_metadata_bytes(range)),
        )
        .unwrap();
    assert_eq!(z.inspect(|mz| mz.placement()), Placement::Linux);
}

/// Filling a machine whose Normal zone sits over a DMA32 zone: once the
/// tainted regions of Normal are full, each allocation asks Normal under
/// NOFRAGMENT first and is served by DMA32. Normal searches its tainted
/// regions again only after something changed there, not on every one of
/// those allocations (each search reads every chunk of the regions).
#[test]
fn filling_over_a_lower_zone_searches_the_tainted_regions_only_after_a_change() {
    let mut config = MachineConfig::SINGLE_NODE;
    config.mobility.superpageblock_shift = SHIFT;
    let m = machine_with(config);
    let low = r(256, 256 + 4 * REGION);
    zone(m, n(0), ZoneKind::Dma32, r(256, 4 * GIB), low);
    let high = r(4 * GIB, 4 * GIB + 4 * REGION);
    zone(m, n(0), ZoneKind::Normal, high, high);
    let m: &'static Machine<'static> = m;
    let mut dma32 = 0u64;
    while let Ok(b) = m.alloc(n(0), Gfp::KERNEL, Order::ZERO) {
        dma32 += u64::from(b.pfn().get() < 4 * GIB);
        let _ = b.into_raw();
    }
    assert!(dma32 > 2 * REGION, "DMA32 served {dma32}");
    let normal = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap()
        .fallback_stats();
    // A search follows a claim (the lists changed) at most once each, and
    // the first search after each region is tainted.
    let changes = normal.claims_whole + normal.claims_partial + 4;
    assert!(
        normal.superpageblock_searches <= changes,
        "{} searches for {changes} changes while DMA32 served {dma32}",
        normal.superpageblock_searches
    );
    m.validate().unwrap();
}
