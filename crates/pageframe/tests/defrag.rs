//! `defrag_mode`, on by default: unmovable requests reclaim before they
//! fragment a movable pageblock; with it off (Linux's default) they steal.

mod common;

use std::collections::HashMap;

use common::*;
use pageframe::{
    Block, Gfp, Machine, Migrator, NodeId, Order, Pfn, ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    tune::Placement,
    zone::MigrateType,
};

/// A kernel holding movable frames, whose reclaim frees those of one
/// pageblock, counting calls; nothing migrates.
struct Reclaim<'m> {
    m: &'m Machine<'static>,
    held: HashMap<Pfn, Block>,
    block: Pfn,
    calls: u32,
}

impl Migrator for Reclaim<'_> {
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<Block> {
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }
    fn putback(&mut self, b: Block) {
        self.held.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        self.held.insert(b.pfn(), b);
    }
}

impl SlowPathHooks for Reclaim<'_> {
    fn reclaim(&mut self, _: NodeId, _: ZoneKind, _: u64) -> u64 {
        self.calls += 1;
        let mut freed = 0;
        for i in 0..PB {
            if let Some(b) = self.held.remove(&(self.block + i)) {
                self.m.free(b).unwrap();
                freed += 1;
            }
        }
        freed
    }
}

/// Eight pageblocks, every frame allocated movable, then ten frames of
/// pageblock 3 freed: an unmovable request has no pageblock to claim and
/// can only steal, or wait for reclaim. The kernel reclaiming pageblock
/// `block` holds the rest.
fn full_machine(block: u64) -> Reclaim<'static> {
    let m = one_zone(8 * PB);
    m.tunables().set_min_free_kbytes(0);
    let m: &'static Machine<'static> = m;
    let base = 4 * GIB;
    let mut held = HashMap::new();
    for _ in 0..8 * PB {
        let b = m
            .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .unwrap();
        held.insert(b.pfn(), b);
    }
    for i in 0..10 {
        m.free(held.remove(&Pfn(base + 3 * PB + 2 * i)).unwrap())
            .unwrap();
    }
    Reclaim {
        m,
        held,
        block: Pfn(base + block * PB),
        calls: 0,
    }
}

fn block_of(p: Pfn) -> u64 {
    (p.get() - 4 * GIB) / PB
}

#[test]
fn unmovable_requests_reclaim_before_they_fragment_by_default() {
    let mut r = full_machine(5);
    let m = r.m;
    assert!(m.tunables().defrag_mode(), "on by default");
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap();
    let a = m
        .alloc_slow(NodeId::ZERO, Gfp::KERNEL, Order::ZERO, &mut r)
        .unwrap();
    assert!(r.calls > 0, "reclaim ran first");
    assert_eq!(block_of(a.pfn()), 5, "served from the reclaimed pageblock");
    assert_eq!(
        z.inspect(|z| z.block_type(Pfn(4 * GIB + 5 * PB))),
        Some(MigrateType::Unmovable)
    );
    assert_eq!(
        z.inspect(|z| z.block_type(Pfn(4 * GIB + 3 * PB))),
        Some(MigrateType::Movable)
    );
    assert_eq!(z.fallback_stats().steals, 0);
    m.validate().unwrap();
}

#[test]
fn without_defrag_mode_unmovable_requests_steal_first() {
    // Under Linux's placement the steal leaves pageblock 3 movable; under
    // the default one it is the first unmovable memory of its 1 GiB
    // region, and the steal claims the pageblock so that the region counts
    // as tainted.
    for (placement, mt) in [
        (Placement::Linux, MigrateType::Movable),
        (Placement::Superpageblock, MigrateType::Unmovable),
    ] {
        let mut r = full_machine(5);
        let m = r.m;
        m.tunables().set_defrag_mode(false);
        m.tunables().set_fallback_placement(placement);
        let z = m
            .inspect()
            .node(NodeId::ZERO)
            .unwrap()
            .zone(ZoneKind::Normal)
            .unwrap();
        let a = m
            .alloc_slow(NodeId::ZERO, Gfp::KERNEL, Order::ZERO, &mut r)
            .unwrap();
        assert_eq!(r.calls, 0, "no reclaim: the fast path stole");
        assert_eq!(block_of(a.pfn()), 3);
        assert_eq!(z.inspect(|z| z.block_type(a.pfn())), Some(mt));
        let s = z.fallback_stats();
        assert_eq!(s.steals + s.claims_partial, 1, "{placement:?}");
        m.validate().unwrap();
    }
}

#[test]
fn without_hooks_the_last_pass_still_serves_the_request() {
    // `Machine::alloc` has no reclaim to wait for: under defrag_mode its
    // last pass may fragment, so the request is served as without it.
    let m = full_machine(5).m;
    let a = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(block_of(a.pfn()), 3);
    m.validate().unwrap();
}

#[test]
fn order_zero_requests_reclaim_when_memory_is_full() {
    // spec 01 §10: direct reclaim is for every order (compaction is not):
    // a full zone serves an order-0 request once reclaim freed a frame,
    // and a request that may not reclaim fails.
    for defrag in [true, false] {
        let mut r = full_machine(6);
        let m = r.m;
        m.tunables().set_defrag_mode(defrag);
        for i in 0..10 {
            let b = m
                .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
                .unwrap_or_else(|e| panic!("refill {i}: {e:?}"));
            r.held.insert(b.pfn(), b);
        }
        assert_eq!(m.inspect().free_pages(), 0);
        assert!(
            m.alloc_slow(NodeId::ZERO, Gfp::ATOMIC, Order::ZERO, &mut r)
                .is_err()
        );
        assert_eq!(r.calls, 0, "an atomic request does not reclaim");
        let a = m
            .alloc_slow(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO, &mut r)
            .unwrap();
        assert_eq!(r.calls, 1, "defrag_mode {defrag}");
        assert_eq!(block_of(a.pfn()), 6);
        m.validate().unwrap();
    }
}
