//! Several nodes: topology, zonelists (spec 01 §3.6), THISNODE, the slow
//! path's compaction with per-zone, per-node and machine-wide deferral
//! (spec 03 §7, §11.1), the THP defrag policy table, kcompactd, statistics.
//! Compaction is the real engine; its outcome is steered by the migrator
//! (accepting moves lets it succeed on fragmented memory, refusing them,
//! as pinned memory does, makes it fail).

mod common;

use std::collections::HashMap;

use common::*;
use pageframe::{
    AllocError, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, SetupError,
    ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    topology::{
        LOCAL_DISTANCE, NodeMask, Topology, TopologyError, ZonelistKind, build_node_orders,
    },
    tune::{NodePolicy, ThpDefrag, ThpPolicy},
    zone::ZoneLayout,
};
use proptest::prelude::*;

const HUGE: Order = Order::HUGE_2M;

fn normal<'m>(m: &'m Machine<'static>, i: usize) -> &'m pageframe::zone::Zone<'static> {
    m.inspect()
        .node(n(i))
        .unwrap()
        .zone(ZoneKind::Normal)
        .unwrap()
}

/// Direct compaction runs on node `i`'s Normal zone so far.
fn runs(m: &Machine<'static>, i: usize) -> u64 {
    normal(m, i).compact_state().stats().runs
}

/// Hooks that count reclaim calls and read a clock that advances 1 µs a
/// read; migrations follow `words`.
#[derive(Default)]
struct Hooks {
    words: Words,
    reclaims: u32,
    clock: std::cell::Cell<u64>,
    modes: Vec<MigrateMode>,
}

impl Migrator for Hooks {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<pageframe::Block> {
        self.words.isolate(pfn, order)
    }
    fn putback(&mut self, b: pageframe::Block) {
        self.words.putback(b)
    }
    fn migrated(&mut self, b: pageframe::Block, from: Pfn) {
        self.words.migrated(b, from)
    }
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        if self.modes.last() != Some(&mode) {
            self.modes.push(mode);
        }
        if self.words.refuse {
            // Busy rather than pinned: the engine retries in its own mode.
            return Err(MigrateError::Again);
        }
        self.words.migrate(src, dst, order, mode)
    }
}

impl SlowPathHooks for Hooks {
    fn reclaim(&mut self, _: NodeId, _: ZoneKind, _: u64) -> u64 {
        self.reclaims += 1;
        0
    }
    fn now_ns(&self) -> u64 {
        self.clock.set(self.clock.get() + 1000);
        self.clock.get()
    }
}

// ---------------------------------------------------------------- topology

#[test]
fn topology_refuses_bad_tables() {
    assert_eq!(Topology::uniform(0), Err(TopologyError::NodeCount));
    assert_eq!(Topology::uniform(9), Err(TopologyError::NodeCount));
    assert_eq!(
        Topology::from_fn(2, |a, b| if a == b { 11 } else { 20 }),
        Err(TopologyError::LocalDistance)
    );
    assert_eq!(
        Topology::from_fn(2, |_, _| 10),
        Err(TopologyError::RemoteTooClose)
    );
    let mut t = Topology::uniform(2).unwrap();
    let before = t;
    assert_eq!(
        t.set_distance(n(0), n(2), 30),
        Err(TopologyError::NodeOutOfRange)
    );
    assert_eq!(
        t.set_distance(n(0), n(0), 20),
        Err(TopologyError::LocalDistance)
    );
    assert_eq!(t, before, "a refused change changes nothing");
    t.set_distance(n(0), n(1), 31).unwrap();
    assert_eq!(t.distance(n(0), n(1)), 31);
    assert_eq!(t.distance(n(1), n(0)), 20, "one direction only");
    assert_eq!(t.distance(n(0), n(0)), LOCAL_DISTANCE);
}

#[test]
fn zones_join_nodes_with_checks() {
    let m = machine_with(MachineConfig::new(Topology::uniform(2).unwrap()));
    let s0 = r(base(0), base(0) + 2 * PB);
    let meta = leak(m.zone_metadata_bytes(s0));
    assert_eq!(
        m.add_zone(n(2), ZoneKind::Normal, s0, meta).err(),
        Some(SetupError::NoSuchNode(n(2)))
    );
    zone(m, n(0), ZoneKind::Normal, s0, s0);
    assert_eq!(m.inspect().node_order(n(0)), &[n(0)]);
    assert_eq!(
        m.inspect().node_order(n(1)),
        &[n(0)],
        "a memoryless node uses its neighbours"
    );
    // Node 1 claiming node 0's frames.
    let meta = leak(m.zone_metadata_bytes(s0));
    assert_eq!(
        m.add_zone(n(1), ZoneKind::Normal, s0, meta).err(),
        Some(SetupError::OverlappingSpan(n(1), ZoneKind::Normal))
    );
    let s1 = r(base(1), base(1) + PB);
    zone(m, n(1), ZoneKind::Normal, s1, s1);
    assert_eq!(m.inspect().node_order(n(0)), &[n(0), n(1)]);
    assert_eq!(m.inspect().node_of(Pfn(base(1))), Some(n(1)));
    assert_eq!(m.inspect().node_of(Pfn(3)), None);
}

// --------------------------------------------------------------- zonelists

#[test]
fn zonelist_order_uniform_four_nodes_rotates_ties() {
    // spec 01 §3.6 worked by hand: equidistant nodes take turns as the
    // second choice because the first pick of each distance group is
    // charged a load.
    let t = Topology::uniform(4).unwrap();
    let all = (0..4).fold(NodeMask::EMPTY, |m, i| m.with(n(i)));
    let orders = build_node_orders(&t, all);
    let want = [[0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2]];
    for (i, w) in want.iter().enumerate() {
        let got: Vec<usize> = orders[i].as_slice().iter().map(|x| x.index()).collect();
        assert_eq!(got, w, "node {i}");
    }
}

#[test]
fn zonelist_prefers_headless_nodes_and_skips_memoryless() {
    let mut t = Topology::uniform(3).unwrap();
    t.set_has_cpus(n(2), false).unwrap();
    let all = (0..3).fold(NodeMask::EMPTY, |m, i| m.with(n(i)));
    let orders = build_node_orders(&t, all);
    assert_eq!(orders[0].as_slice(), &[n(0), n(2), n(1)]);
    // A node without memory is in nobody's list, not even its own.
    let mem = NodeMask::EMPTY.with(n(0)).with(n(2));
    let orders = build_node_orders(&t, mem);
    assert_eq!(orders[1].as_slice(), &[n(2), n(0)]);
    assert!(!orders[0].as_slice().contains(&n(1)));
}

#[test]
fn zonelists_are_node_major_highest_zone_first() {
    // Three nodes, each with DMA32 and Normal; node 1 far from 0, node 2 nearer.
    let t = Topology::from_fn(3, |a, b| match (a, b) {
        (a, b) if a == b => 10,
        (0, 1) | (1, 0) => 30,
        _ => 20,
    })
    .unwrap();
    let m = machine_with(MachineConfig::new(t));
    for i in 0..3 {
        let lo = r(base(i), base(i) + 2 * PB);
        let hi = r(base(i) + 2 * PB, base(i) + 4 * PB);
        zone(m, n(i), ZoneKind::Dma32, lo, lo);
        zone(m, n(i), ZoneKind::Normal, hi, hi);
    }
    let list = |id: usize, kind| -> Vec<(usize, ZoneKind)> {
        m.inspect()
            .zonelist(n(id), kind)
            .as_slice()
            .iter()
            .map(|z| (z.node.index(), z.kind))
            .collect()
    };
    use ZoneKind::{Dma32, Normal};
    assert_eq!(
        list(0, ZonelistKind::Fallback),
        [
            (0, Normal),
            (0, Dma32),
            (2, Normal),
            (2, Dma32),
            (1, Normal),
            (1, Dma32)
        ]
    );
    assert_eq!(list(1, ZonelistKind::NoFallback), [(1, Normal), (1, Dma32)]);
    // GFP zone selection filters the list: DMA32 requests see DMA32 zones only.
    let dma: Vec<usize> = m
        .inspect()
        .zonelist(n(0), ZonelistKind::Fallback)
        .eligible(Dma32)
        .map(|z| {
            assert_eq!(z.kind, Dma32);
            z.node.index()
        })
        .collect();
    assert_eq!(dma, [0, 2, 1]);
    // And an allocation follows it: exhaust node 0's DMA32, the next DMA32
    // request comes from node 2's DMA32, never from a Normal zone.
    let gfp = Gfp::KERNEL | Gfp::DMA32;
    let last = loop {
        let a = m.alloc(n(0), gfp, Order::ZERO).unwrap();
        assert_eq!(a.zone(), Dma32);
        if a.node() != n(0) {
            break a;
        }
    };
    assert_eq!(last.node(), n(2));
    m.validate().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// After the local node, the order never goes back to a node with a
    /// smaller `distance + below-local + has-CPUs` key (the loads only break
    /// ties); with SLIT-like distances (multiples of 10) the distances
    /// themselves never decrease. Every memory node appears once.
    #[test]
    fn node_order_follows_distance(
        nodes in 1usize..=8,
        raw in proptest::collection::vec(2u8..=5, 64),
        headless in any::<u8>(),
    ) {
        let d = |a: usize, b: usize| {
            if a == b { 10 } else { raw[a.min(b) * 8 + a.max(b)] * 10 }
        };
        let mut t = Topology::from_fn(nodes, d).unwrap();
        for i in 0..nodes {
            t.set_has_cpus(n(i), headless & (1 << i) == 0).unwrap();
        }
        let all = (0..nodes).fold(NodeMask::EMPTY, |m, i| m.with(n(i)));
        let orders = build_node_orders(&t, all);
        for (local, order) in orders.iter().enumerate().take(nodes) {
            let o = order.as_slice();
            prop_assert_eq!(o.len(), nodes);
            prop_assert_eq!(o[0], n(local));
            let mut seen: Vec<usize> = o.iter().map(|x| x.index()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..nodes).collect::<Vec<_>>());
            let key = |x: NodeId| {
                u32::from(t.distance(n(local), x)) + u32::from(x.index() < local)
                    + u32::from(t.has_cpus(x))
            };
            for w in o[1..].windows(2) {
                prop_assert!(key(w[0]) <= key(w[1]), "{:?} from {}", o, local);
                prop_assert!(t.distance(n(local), w[0]) <= t.distance(n(local), w[1]));
            }
        }
    }

    /// spec 01 §13.9: with `__GFP_THISNODE` no frame ever comes from
    /// another node, whatever the mix of requests and frees; without it the
    /// same requests spill over once the local node is full.
    #[test]
    fn thisnode_never_returns_a_remote_frame(
        ops in proptest::collection::vec((0usize..3, 0u8..=9, any::<bool>(), any::<bool>()), 1..120),
    ) {
        let m = numa(3, 4);
        let mut live: Vec<pageframe::Block> = Vec::new();
        for (local, order, thisnode, free) in ops {
            if free && !live.is_empty() {
                let b = live.swap_remove(order as usize % live.len());
                m.free(b).unwrap();
                continue;
            }
            let order = Order::new(order).unwrap();
            let gfp = if thisnode { Gfp::KERNEL | Gfp::THISNODE } else { Gfp::KERNEL };
            match m.alloc(n(local), gfp, order) {
                Ok(a) => {
                    prop_assert_eq!(m.inspect().node_of(a.pfn()), Some(a.node()));
                    if thisnode {
                        prop_assert_eq!(a.node(), n(local));
                    }
                    live.push(a);
                }
                Err(e) => prop_assert_eq!(e, AllocError::OutOfMemory),
            }
        }
        // Whatever came before: THISNODE requests for node 0 stop at node
        // 0's watermark, and ordinary ones then go remote.
        loop {
            match m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO) {
                Ok(a) => {
                    prop_assert_eq!(a.node(), n(0));
                    live.push(a);
                }
                Err(e) => {
                    prop_assert_eq!(e, AllocError::OutOfMemory);
                    break;
                }
            }
        }
        let spilled = m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap();
        prop_assert!(spilled.node() != n(0), "a full node 0 spills to a remote node");
        live.push(spilled);
        m.validate().unwrap();
        for b in live {
            m.free(b).unwrap();
        }
        prop_assert_eq!(m.inspect().free_pages(), 3 * 4 * PB);
    }
}

#[test]
fn thisnode_fails_where_fallback_goes_remote() {
    let m = numa(2, 2);
    let mut n0 = 0;
    while let Ok(a) = m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO) {
        assert_eq!(a.node(), n(0));
        n0 += 1;
    }
    assert!(n0 > 900);
    assert_eq!(
        m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO),
        Err(AllocError::OutOfMemory)
    );
    assert_eq!(
        m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap().node(),
        n(1)
    );
    let mut h = Hooks::default();
    m.tunables().set_thp_policy(ThpPolicy::THISNODE_COMPACT);
    assert!(m.alloc_thp(n(0), true, &mut h).is_err());
    m.tunables().set_thp_policy(ThpPolicy::REMOTE_FALLBACK);
    assert_eq!(m.alloc_thp(n(0), true, &mut h).unwrap().node(), n(1));
    let s = m.inspect().stats(n(0));
    assert_eq!(
        (s.thp_attempts, s.thp_failed, s.thp_success_remote),
        (2, 1, 1)
    );
    // Bad input: an unknown local node, an invalid GFP.
    assert_eq!(
        m.alloc(n(5), Gfp::KERNEL, Order::ZERO),
        Err(AllocError::NoSuchNode)
    );
    assert_eq!(
        m.alloc(n(0), Gfp::DMA | Gfp::DMA32, Order::ZERO),
        Err(AllocError::InvalidGfp)
    );
}

// ------------------------------------------------------ node-aware policy

/// spec 03 §7, as the model of one deferral (see the compaction crate's
/// tests for the rule itself).
#[derive(Clone, Copy, Default, Debug)]
struct ModelDefer {
    considered: u32,
    shift: u8,
}

impl ModelDefer {
    fn defer(&mut self) {
        self.considered = 0;
        self.shift = (self.shift + 1).min(6);
    }
    fn deferred(&mut self) -> bool {
        self.considered += 1;
        if self.considered >= 1 << self.shift {
            self.considered = 1 << self.shift;
            return false;
        }
        true
    }
    fn reset(&mut self) {
        self.considered = 0;
        self.shift = 0;
    }
}

/// The node-aware policy against a model of its bookkeeping: per-node
/// deferral of the local node, the machine-wide back-off for remote
/// compaction, kcompactd wake-ups. Every node is fragmented; whether the
/// local compaction can succeed is scripted through the migrator.
fn node_aware_model_case(nodes: usize, requests: &[(usize, bool)]) -> Result<(), TestCaseError> {
    let m = numa(nodes, 32);
    m.tunables().set_thp_policy(ThpPolicy::NODE_AWARE);
    let mut h = Hooks::default();
    for i in 0..nodes {
        fragment(m, i, &mut h.words);
    }
    let mut node_defer = vec![ModelDefer::default(); nodes];
    let mut global = ModelDefer::default();
    let mut woken = vec![0u64; nodes];
    for &(local, can) in requests {
        let local = local % nodes;
        h.words.refuse = !can;
        let runs_before: Vec<u64> = (0..nodes).map(|i| runs(m, i)).collect();
        let got = m.alloc_thp(n(local), true, &mut h);
        // Model: the local node compacts (async) unless deferred; remote
        // nodes have nothing free and are only woken, when the machine-wide
        // back-off allows, which a request failing everywhere renews.
        let order: Vec<usize> = m
            .inspect()
            .node_order(n(local))
            .iter()
            .map(|x| x.index())
            .collect();
        let mut ran_local = false;
        if !node_defer[local].deferred() {
            ran_local = true;
        }
        let local_ok = got.as_ref().is_ok_and(|a| a.node() == n(local));
        prop_assert!(got.is_err() || local_ok, "nothing free remotely: {got:?}");
        if ran_local {
            if local_ok {
                node_defer[local].reset();
            } else {
                node_defer[local].defer();
            }
        }
        prop_assert_eq!(runs(m, local) > runs_before[local], ran_local, "local run");
        if !local_ok {
            let allowed = !global.deferred();
            if allowed {
                for &x in &order[1..] {
                    woken[x] += 1;
                }
                global.defer();
            }
        }
        for (x, before) in runs_before.iter().enumerate() {
            if x != local {
                prop_assert_eq!(runs(m, x), *before, "no direct run on a remote node");
            }
        }
        for (x, d) in node_defer.iter().enumerate() {
            let s = m.inspect().node(n(x)).unwrap().deferral();
            prop_assert_eq!(
                (s.considered, s.shift),
                (d.considered, d.shift),
                "node {} deferral",
                x
            );
        }
        let g = m.inspect().global_deferral();
        prop_assert_eq!((g.considered, g.shift), (global.considered, global.shift));
        for (x, w) in woken.iter().enumerate() {
            prop_assert_eq!(
                m.inspect().stats(n(x)).kcompactd_wakes,
                *w,
                "wakes of node {}",
                x
            );
        }
    }
    prop_assert_eq!(h.reclaims, 0, "compact only never reclaims");
    m.validate().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn node_aware_deferral_matches_model(
        nodes in 2usize..=3,
        requests in proptest::collection::vec((0usize..3, prop::bool::weighted(0.3)), 1..20),
    ) {
        node_aware_model_case(nodes, &requests)?;
    }
}

#[test]
fn node_aware_backs_off_when_every_node_fails() {
    // Everything fragmented and pinned: over 400 requests the node-aware
    // policy compacts the local node only about once per 64 requests (its
    // own deferral) and never stalls on the remote node, whose kcompactd it
    // wakes under the machine-wide back-off; remote fallback, with Linux's
    // per-zone deferral only, compacts every node far more often.
    let count = |policy: ThpPolicy| {
        let m = numa(2, 8);
        m.tunables().set_thp_policy(policy);
        let mut h = Hooks::default();
        for i in 0..2 {
            fragment(m, i, &mut h.words);
        }
        h.words.refuse = true;
        for _ in 0..400 {
            assert!(m.alloc_thp(n(0), true, &mut h).is_err());
        }
        (runs(m, 0), runs(m, 1), m)
    };
    let (l, r, m) = count(ThpPolicy::NODE_AWARE);
    // 6 doublings (1+2+...+32 skipped) then one run every 64 requests.
    assert!((6..=6 + 400 / 64 + 1).contains(&l), "local runs {l}");
    assert_eq!(r, 0, "no direct compaction of a remote node");
    let wakes = m.inspect().stats(n(1)).kcompactd_wakes;
    assert!(
        (6..=6 + 400 / 64 + 1).contains(&wakes),
        "remote wakes {wakes}"
    );
    assert_eq!(
        m.inspect().global_deferral().shift,
        pageframe::compact::COMPACT_MAX_DEFER_SHIFT
    );
    assert_eq!(m.inspect().stats(n(0)).thp_failed, 400);
    assert!(m.inspect().stats(n(0)).global_skips > 300);
    let (fl, fr, _) = count(ThpPolicy::REMOTE_FALLBACK);
    assert!(
        fl > l && fr > 0,
        "fallback runs {fl}/{fr} vs node-aware {l}/{r}"
    );
    let (tl, tr, _) = count(ThpPolicy::THISNODE_COMPACT);
    assert_eq!(tr, 0, "THISNODE never compacts a remote node");
    assert!(tl > l);
}

#[test]
fn node_aware_gets_remote_pages_made_by_kcompactd() {
    // Both nodes fragmented; node 0's memory is pinned. The first fault
    // fails and wakes node 1's kcompactd; once it has run, the next fault
    // finds a remote huge page and the machine-wide back-off ends.
    let m = numa(2, 16);
    m.tunables().set_thp_policy(ThpPolicy::NODE_AWARE);
    let mut h = Hooks::default();
    fragment(m, 0, &mut h.words);
    let mut kc = Words::default();
    fragment(m, 1, &mut kc);
    h.words.refuse = true;
    assert!(m.alloc_thp(n(0), true, &mut h).is_err());
    assert!(m.inspect().node(n(1)).unwrap().kcompactd_pending());
    assert_eq!(m.inspect().global_deferral().shift, 1);
    m.tunables().set_proactiveness(0).unwrap();
    let rep = m.kcompactd_tick(n(1), 0, &mut kc);
    assert!(rep.work);
    assert!(normal(m, 1).free_blocks(HUGE) > 0);
    let a = m.alloc_thp(n(0), true, &mut h).unwrap();
    assert_eq!(a.node(), n(1));
    assert_eq!(m.inspect().global_deferral().shift, 0);
    assert_eq!(
        runs(m, 1),
        1,
        "the remote node was compacted by its kcompactd only"
    );
}

#[test]
fn node_aware_prefers_local_compaction_then_remote_free_pages() {
    // Local fragmented but compactable; remote has free huge pages.
    let m = numa(2, 16);
    let mut h = Hooks::default();
    fragment(m, 0, &mut h.words);
    m.tunables().set_thp_policy(ThpPolicy::NODE_AWARE);
    let a = m.alloc_thp(n(0), true, &mut h).unwrap();
    assert_eq!(a.node(), n(0), "compacted locally rather than going remote");
    // Remote fallback takes the remote free page without compacting.
    m.tunables().set_thp_policy(ThpPolicy::REMOTE_FALLBACK);
    let before = runs(m, 0);
    let b = m.alloc_thp(n(0), true, &mut h).unwrap();
    assert_eq!((b.node(), runs(m, 0)), (n(1), before));
    // Local compaction failing: node-aware then takes the remote page.
    h.words.refuse = true;
    m.tunables().set_thp_policy(ThpPolicy::NODE_AWARE);
    let d = m.alloc_thp(n(0), true, &mut h).unwrap();
    assert_eq!(d.node(), n(1));
    let s = m.inspect().stats(n(0));
    assert_eq!((s.thp_success_local, s.thp_success_remote), (1, 2));
    assert_eq!(m.inspect().node(n(0)).unwrap().deferral().shift, 1);
}

#[test]
fn linux_slow_path_defers_zones_and_reclaims_unless_compact_only() {
    let m = numa(2, 8);
    let mut h = Hooks::default();
    for i in 0..2 {
        fragment(m, i, &mut h.words);
    }
    h.words.refuse = true;
    assert!(m.alloc_slow(n(0), Gfp::TRANSHUGE, HUGE, &mut h).is_err());
    // Async over both nodes, reclaim, then sync-light over both (which fail
    // and defer their zones).
    assert_eq!((runs(m, 0), runs(m, 1)), (2, 2));
    assert!(h.reclaims > 0);
    for i in 0..2 {
        assert_eq!(normal(m, i).compact_state().deferral().state().shift, 1);
    }
    let s = m.inspect().stats(n(0));
    assert_eq!(s.stalls, 1, "one request stalled");
    assert!(s.stall_ns > 0);
    // Linux counts `compact_stall` per direct compaction attempt: two here.
    assert_eq!((s.compact.stall, s.compact.fail), (2, 2));
    // Compact only: no reclaim. Both zones deferred at the async attempt
    // (the counts reach 2 = 1 << 1 at the sync attempt, which runs).
    let reclaims = h.reclaims;
    m.tunables().set_thp_policy(ThpPolicy {
        defrag: ThpDefrag::Always,
        nodes: NodePolicy::RemoteFallback,
        compact_only: true,
    });
    assert!(m.alloc_thp(n(0), true, &mut h).is_err());
    assert_eq!((runs(m, 0), runs(m, 1)), (3, 3));
    assert_eq!(h.reclaims, reclaims, "compact only: no reclaim");
    // THISNODE keeps even compaction local.
    let before = runs(m, 1);
    let _ = m.alloc_slow(n(0), Gfp::TRANSHUGE | Gfp::THISNODE, HUGE, &mut h);
    assert_eq!(runs(m, 1), before);
}

// ------------------------------------------------------------ policy table

#[test]
fn defrag_policy_table() {
    // (setting, madvised) -> (direct compaction, wake kcompactd, one round)
    let table = [
        (ThpDefrag::Always, false, (true, false, true)),
        (ThpDefrag::Always, true, (true, false, false)),
        (ThpDefrag::Defer, false, (false, true, false)),
        (ThpDefrag::Defer, true, (false, true, false)),
        (ThpDefrag::DeferMadvise, false, (false, true, false)),
        (ThpDefrag::DeferMadvise, true, (true, false, false)),
        (ThpDefrag::Madvise, false, (false, false, false)),
        (ThpDefrag::Madvise, true, (true, false, false)),
        (ThpDefrag::Never, false, (false, false, false)),
        (ThpDefrag::Never, true, (false, false, false)),
    ];
    for (d, mad, (direct, wake, once)) in table {
        let a = d.action(mad);
        assert_eq!(
            (a.direct_compaction, a.wake_kcompactd, a.one_round),
            (direct, wake, once),
            "{} madvised={mad}",
            d.name()
        );
        let g = d.gfp(mad);
        assert!(g.is_valid());
        assert!(g.contains(Gfp::COMP | Gfp::MOVABLE | Gfp::NOWARN));
        assert_eq!(ThpDefrag::parse(d.name()), Some(d));
    }
    assert_eq!(ThpDefrag::parse("sometimes"), None);
    assert!(
        ThpPolicy::THISNODE_COMPACT
            .gfp(true)
            .contains(Gfp::THISNODE)
    );
    assert!(!ThpPolicy::REMOTE_FALLBACK.gfp(true).contains(Gfp::THISNODE));
    assert!(!ThpPolicy::NODE_AWARE.gfp(true).contains(Gfp::THISNODE));
    for nodes in [
        NodePolicy::ThisNode,
        NodePolicy::RemoteFallback,
        NodePolicy::NodeAware,
    ] {
        for defrag in ThpDefrag::ALL {
            for compact_only in [false, true] {
                let p = ThpPolicy {
                    defrag,
                    nodes,
                    compact_only,
                };
                let m = one_zone(PB);
                m.tunables().set_thp_policy(p);
                assert_eq!(
                    m.tunables().thp_policy(),
                    p,
                    "policies round-trip through the machine"
                );
            }
        }
    }
}

#[test]
fn defrag_policy_behaviour_on_a_fragmented_machine() {
    for d in ThpDefrag::ALL {
        for mad in [false, true] {
            let m = numa(2, 8);
            let mut h = Hooks::default();
            for i in 0..2 {
                fragment(m, i, &mut h.words);
            }
            h.words.refuse = true;
            m.tunables().set_thp_policy(ThpPolicy {
                defrag: d,
                nodes: NodePolicy::ThisNode,
                compact_only: false,
            });
            assert!(m.alloc_thp(n(0), mad, &mut h).is_err());
            let a = d.action(mad);
            let sync = h.modes.contains(&MigrateMode::SyncLight);
            match (a.direct_compaction, a.one_round) {
                // No compaction at all.
                (false, _) => assert_eq!(runs(m, 0), 0, "{} madvised={mad}", d.name()),
                // NORETRY: the async run ran, so one more round stays async.
                (true, true) => assert!(runs(m, 0) == 2 && !sync, "{} madvised={mad}", d.name()),
                (true, false) => assert!(runs(m, 0) == 2 && sync, "{} madvised={mad}", d.name()),
            }
            assert_eq!(
                m.inspect().node(n(0)).unwrap().kcompactd_pending(),
                a.wake_kcompactd,
                "{} madvised={mad}",
                d.name()
            );
            assert_eq!(
                m.inspect().stats(n(0)).stalls,
                u64::from(a.direct_compaction)
            );
        }
    }
}

// --------------------------------------------------------------- kcompactd

#[test]
fn kcompactd_runs_what_it_was_woken_for() {
    let m = numa(2, 16);
    m.tunables().set_proactiveness(0).unwrap();
    let mut w = Words::default();
    fragment(m, 1, &mut w);
    // Nothing recorded: nothing to do.
    assert!(!m.kcompactd_tick(n(1), 0, &mut w).work);
    // Order 0 is ignored; node 0 does not need it (free huge pages are there).
    assert!(!m.wakeup_kcompactd(n(1), Order::ZERO, ZoneKind::Normal));
    assert!(!m.wakeup_kcompactd(n(0), HUGE, ZoneKind::Normal));
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    let rep = m.kcompactd_tick(n(1), 0, &mut w);
    assert!(rep.work);
    assert!(!m.inspect().node(n(1)).unwrap().kcompactd_pending());
    assert!(normal(m, 1).free_blocks(HUGE) >= 1);
    let s = m.inspect().stats(n(1));
    assert_eq!(
        (s.kcompactd_wakes, s.kcompactd.wakes, s.compact.stall),
        (1, 1, 0)
    );
    // A failing pass (pinned memory) defers the zone for the next one.
    while m
        .alloc(n(1), Gfp::TRANSHUGE_LIGHT | Gfp::THISNODE, HUGE)
        .is_ok()
    {}
    w.refuse = true;
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    let runs0 = runs(m, 1);
    m.kcompactd_tick(n(1), 1, &mut w);
    assert_eq!(runs(m, 1), runs0 + 1);
    assert!(normal(m, 1).compact_state().deferral().state().shift > 0);
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    m.kcompactd_tick(n(1), 2, &mut w);
    assert_eq!(runs(m, 1), runs0 + 1, "deferred: no second run");
}

#[test]
fn proactive_compaction_follows_the_machine_tunable() {
    let m = numa(1, 16);
    let mut w = Words::default();
    fragment(m, 0, &mut w);
    let score = m.inspect().fragmentation_score(n(0)).unwrap();
    assert!(score > 90, "{score}");
    m.tunables().set_proactiveness(0).unwrap();
    let rep = m.kcompactd_tick(n(0), 1_000_000_000, &mut w);
    assert!(!rep.checked, "proactiveness 0: no proactive check");
    m.tunables().set_proactiveness(90).unwrap();
    let rep = m.kcompactd_tick(n(0), 2_000_000_000, &mut w);
    let (before, after) = rep.proactive.expect("a proactive run");
    assert!(after < before, "{before} -> {after}");
    assert!(m.inspect().fragmentation_score(n(0)).unwrap() <= 20);
}

#[test]
fn fragmentation_score_tracks_free_memory_outside_huge_blocks() {
    let m = numa(2, 8);
    assert_eq!(m.inspect().fragmentation_score(n(0)), Some(0));
    fragment(m, 0, &mut Words::default());
    let s = m.inspect().fragmentation_score(n(0)).unwrap();
    assert!(s >= 99, "score {s}");
    assert_eq!(m.inspect().fragmentation_score(n(1)), Some(0));
    assert_eq!(m.inspect().fragmentation_score(n(7)), None);
}

#[test]
fn stats_add_up() {
    let m = numa(2, 16);
    let mut h = Hooks::default();
    fragment(m, 0, &mut h.words);
    let mut ok = 0;
    for i in 0..30 {
        m.tunables()
            .set_thp_policy([ThpPolicy::NODE_AWARE, ThpPolicy::REMOTE_FALLBACK][i % 2]);
        ok += u64::from(m.alloc_thp(n(0), true, &mut h).is_ok());
    }
    let s = m.inspect().stats(n(0));
    assert_eq!(s.thp_attempts, 30);
    assert_eq!(s.thp_success(), ok);
    assert_eq!(s.thp_success() + s.thp_failed, 30);
    assert_eq!(m.inspect().total_stats().thp_attempts, 30);
    m.validate().unwrap();
}

#[test]
fn compaction_makes_huge_pages_by_moving_contents() {
    // Node 0 fragmented with movable frames that carry data; node 1 too.
    // The node-aware policy with the real compaction engine gets local huge
    // pages, and every word survives at its frame's new place.
    let m = numa(2, 16);
    m.tunables().set_thp_policy(ThpPolicy::NODE_AWARE);
    let mut h = Hooks::default();
    for i in 0..2 {
        fragment(m, i, &mut h.words);
    }
    let before: HashMap<u64, u64> = h.words.word.clone();
    let sum: u64 = before.values().sum();
    let mut local = 0;
    for _ in 0..3 {
        let a = m.alloc_thp(n(0), true, &mut h).unwrap();
        assert!(a.pfn().is_aligned(HUGE));
        local += u64::from(a.node() == n(0));
    }
    assert_eq!(local, 3, "compaction made local huge pages");
    let s = m.inspect().stats(n(0));
    assert!(s.compact.migrate_success > 0 && s.compact.migrate_success == h.words.moves);
    assert_eq!(s.stalls, 3);
    assert!(s.stall_ns > 0);
    assert_eq!(h.words.word.values().sum::<u64>(), sum);
    assert_eq!(h.words.word.len(), before.len());
    m.validate().unwrap();
}

// ------------------------------------------------------------ zone layout

#[test]
fn zone_layout_follows_the_memory_map() {
    let l = ZoneLayout::new(r(256, 6 * GIB), true, None);
    let spans: Vec<(ZoneKind, PfnRange)> = l.zones().collect();
    assert_eq!(
        spans,
        [
            (ZoneKind::Dma, r(256, 4096)),
            (ZoneKind::Dma32, r(4096, 4 * GIB)),
            (ZoneKind::Normal, r(4 * GIB, 6 * GIB)),
        ]
    );
    // No DMA zone: its memory joins DMA32. movablecore from 5 GiB.
    let l = ZoneLayout::new(r(256, 6 * GIB), false, Some(Pfn(5 * GIB)));
    assert_eq!(l.span(ZoneKind::Dma), None);
    assert_eq!(l.span(ZoneKind::Dma32), Some(r(256, 4 * GIB)));
    assert_eq!(l.span(ZoneKind::Normal), Some(r(4 * GIB, 5 * GIB)));
    assert_eq!(l.span(ZoneKind::Movable), Some(r(5 * GIB, 6 * GIB)));
    let hi = r(8 * GIB, 12 * GIB);
    assert_eq!(
        ZoneLayout::new(hi, true, None).zones().collect::<Vec<_>>(),
        [(ZoneKind::Normal, hi)]
    );
    assert_eq!(
        ZoneLayout::new(hi, true, Some(Pfn(GIB)))
            .zones()
            .collect::<Vec<_>>(),
        [(ZoneKind::Movable, hi)]
    );
    // The layout builds a node, whose zonelist puts Movable first for
    // movable user memory (HIGHUSER_MOVABLE may use it).
    let small = r(256, 4096 + 8 * PB);
    let l = ZoneLayout::new(small, true, Some(Pfn(4096 + 4 * PB)));
    let m = machine_with(MachineConfig::SINGLE_NODE);
    for (kind, span) in l.zones() {
        zone(m, NodeId::ZERO, kind, span, r(0, 0));
    }
    m.add_free_range(small).unwrap();
    let kinds: Vec<ZoneKind> = m
        .inspect()
        .zonelist(n(0), ZonelistKind::Fallback)
        .as_slice()
        .iter()
        .map(|z| z.kind)
        .collect();
    assert_eq!(kinds, [ZoneKind::Movable, ZoneKind::Dma32, ZoneKind::Dma]);
    let a = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, Order::ZERO).unwrap();
    assert_eq!(a.zone(), ZoneKind::Movable);
    let k = m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(
        k.zone(),
        ZoneKind::Dma32,
        "kernel memory never from Movable"
    );
}
