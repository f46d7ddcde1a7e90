//! Several nodes: topology, zonelists (spec 01 §3.6), THISNODE, the slow
//! path's compaction with per-zone, per-node and machine-wide deferral
//! (spec 03 §7, §11.1), the THP defrag policy table, kcompactd, statistics.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::mem::MaybeUninit;

use pageframe::compact::{MigrateError, MigrateMode, Migrator};
use pageframe::mobility::{AllocMode, MigrateType};
use pageframe::{
    AllocError, Clock, CompactDriver, CompactPriority, CompactResult, CompactRun, CompactWork,
    Compactor, Deferral, Gfp, LOCAL_DISTANCE, MAX_DEFER_SHIFT, Machine, MachineError, NoClock,
    Node, NodeId, NodePolicy, Order, Pfn, PfnRange, SlowRequest, Suitability, ThpDefrag, ThpPolicy,
    Topology, TopologyError, Zone, ZoneKind, ZoneLayout, ZoneTarget, ZonelistKind,
    build_node_orders, suitability,
};
use proptest::prelude::*;

const PB: u64 = 512;
const HUGE: Order = Order::HUGE_2M;

fn n(i: usize) -> NodeId {
    NodeId::new(i).unwrap()
}

fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

fn meta(span: PfnRange) -> &'static mut [MaybeUninit<u8>] {
    Box::leak(Box::new_uninit_slice(Zone::metadata_bytes(span)))
}

/// Where node `i`'s memory starts: 1 GiB apart, so spans never meet.
fn base(i: usize) -> u64 {
    (i as u64 + 1) << 18
}

/// A node with one Normal zone of `blocks` free pageblocks.
fn normal_node(i: usize, blocks: u64) -> Node<'static> {
    let span = r(base(i), base(i) + blocks * PB);
    let mut node = Node::new();
    node.add_zone(Zone::new(ZoneKind::Normal, span, meta(span)).unwrap())
        .unwrap();
    node.add_free_range(span).unwrap();
    node
}

/// `nodes` nodes at uniform distance, each with one Normal zone.
fn machine(nodes: usize, blocks: u64) -> Machine<'static> {
    let mut m = Machine::new(Topology::uniform(nodes).unwrap());
    for i in 0..nodes {
        m.add_node(n(i), normal_node(i, blocks)).unwrap();
    }
    m
}

fn normal<'m>(m: &'m Machine<'static>, i: usize) -> &'m Zone<'static> {
    m.node(n(i)).unwrap().zone(ZoneKind::Normal).unwrap()
}

/// Fills node `i` with movable base pages and frees every other one: half
/// the memory free, no free block above order 0. Returns the frames still
/// held, grouped by pageblock.
fn fragment(m: &Machine<'static>, i: usize) -> Vec<Vec<Pfn>> {
    let z = normal(m, i);
    let mut held: Vec<Vec<Pfn>> = Vec::new();
    let frames: Vec<Pfn> = z.with_zone(|mz| {
        std::iter::from_fn(|| {
            mz.alloc(Order::ZERO, MigrateType::Movable, AllocMode::empty())
                .ok()
        })
        .collect()
    });
    let mut by_block: HashMap<u64, Vec<Pfn>> = HashMap::new();
    for p in frames {
        if p.get() % 2 == 1 {
            z.free(p, Order::ZERO).unwrap();
        } else {
            by_block.entry(p.get() / PB).or_default().push(p);
        }
    }
    let mut keys: Vec<u64> = by_block.keys().copied().collect();
    keys.sort_unstable();
    for k in keys {
        held.push(by_block.remove(&k).unwrap());
    }
    assert_eq!(z.free_blocks(HUGE), 0);
    held
}

/// A compactor whose outcome is scripted: a success frees one pageblock's
/// held frames (the block merges into a free huge page), a failure does
/// nothing. Records every call.
#[derive(Default)]
struct Scripted {
    held: HashMap<NodeId, Vec<Vec<Pfn>>>,
    /// Outcomes to use, in call order; `default_ok` once exhausted.
    script: Vec<bool>,
    next: usize,
    default_ok: bool,
    calls: Vec<(NodeId, CompactPriority)>,
    reclaims: u32,
}

impl Compactor for Scripted {
    fn compact(
        &mut self,
        t: ZoneTarget<'_, '_>,
        order: Order,
        prio: CompactPriority,
    ) -> CompactRun {
        let (node, zone) = (t.node, t.zone);
        assert_eq!(order, HUGE);
        self.calls.push((node, prio));
        let ok = self
            .script
            .get(self.next)
            .copied()
            .unwrap_or(self.default_ok);
        self.next += 1;
        let block = if ok {
            self.held.get_mut(&node).and_then(|b| b.pop())
        } else {
            None
        };
        match block {
            Some(frames) => {
                for p in &frames {
                    zone.free(*p, Order::ZERO).unwrap();
                }
                CompactRun {
                    result: CompactResult::Success,
                    captured: None,
                    work: CompactWork {
                        scanned: PB,
                        migrated: frames.len() as u64,
                    },
                }
            }
            None => CompactRun {
                result: CompactResult::Complete,
                captured: None,
                work: CompactWork {
                    scanned: 4 * PB,
                    migrated: 0,
                },
            },
        }
    }

    fn reclaim(&mut self, _: NodeId, _: &Zone<'_>, _: u64) -> u64 {
        self.reclaims += 1;
        0
    }
}

/// A clock that advances 1 µs each time it is read.
#[derive(Default)]
struct Ticks(Cell<u64>);

impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        self.0.set(self.0.get() + 1000);
        self.0.get()
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
fn machine_refuses_bad_nodes() {
    let mut m = Machine::new(Topology::uniform(2).unwrap());
    assert_eq!(
        m.add_node(n(2), normal_node(2, 1)).unwrap_err(),
        MachineError::NodeOutOfRange
    );
    assert_eq!(
        m.add_node(n(0), Node::new()).unwrap_err(),
        MachineError::NoZones
    );
    m.add_node(n(0), normal_node(0, 2)).unwrap();
    assert_eq!(
        m.add_node(n(0), normal_node(1, 1)).unwrap_err(),
        MachineError::DuplicateNode
    );
    // Node 1 claiming node 0's frames.
    assert_eq!(
        m.add_node(n(1), normal_node(0, 1)).unwrap_err(),
        MachineError::OverlappingSpan
    );
    assert_eq!(m.node_order(n(0)), &[n(0)]);
    m.add_node(n(1), normal_node(1, 1)).unwrap();
    assert_eq!(m.node_order(n(0)), &[n(0), n(1)]);
}

// --------------------------------------------------------------- zonelists

#[test]
fn zonelist_order_uniform_four_nodes_rotates_ties() {
    // spec 01 §3.6 worked by hand: equidistant nodes take turns as the
    // second choice because the first pick of each distance group is
    // charged a load.
    let t = Topology::uniform(4).unwrap();
    let all = (0..4).fold(pageframe::NodeMask::EMPTY, |m, i| m.with(n(i)));
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
    let all = (0..3).fold(pageframe::NodeMask::EMPTY, |m, i| m.with(n(i)));
    let orders = build_node_orders(&t, all);
    assert_eq!(orders[0].as_slice(), &[n(0), n(2), n(1)]);
    // A node without memory is in nobody's list, not even its own.
    let mem = pageframe::NodeMask::EMPTY.with(n(0)).with(n(2));
    let orders = build_node_orders(&t, mem);
    assert_eq!(orders[1].as_slice(), &[n(2), n(0)]);
    assert!(!orders[0].as_slice().contains(&n(1)));
}

#[test]
fn zonelists_are_node_major_highest_zone_first() {
    // Two nodes, each with DMA32 and Normal; node 1 far from 0 in a 3-node
    // table where node 2 is nearer.
    let t = Topology::from_fn(3, |a, b| match (a, b) {
        (a, b) if a == b => 10,
        (0, 1) | (1, 0) => 30,
        _ => 20,
    })
    .unwrap();
    let mut m = Machine::new(t);
    for i in 0..3 {
        let lo = r(base(i), base(i) + 2 * PB);
        let hi = r(base(i) + 2 * PB, base(i) + 4 * PB);
        let mut node = Node::new();
        node.add_zone(Zone::new(ZoneKind::Dma32, lo, meta(lo)).unwrap())
            .unwrap();
        node.add_zone(Zone::new(ZoneKind::Normal, hi, meta(hi)).unwrap())
            .unwrap();
        node.add_free_range(r(base(i), base(i) + 4 * PB)).unwrap();
        m.add_node(n(i), node).unwrap();
    }
    let fb: Vec<(usize, ZoneKind)> = m
        .zonelist(n(0), ZonelistKind::Fallback)
        .as_slice()
        .iter()
        .map(|z| (z.node.index(), z.kind))
        .collect();
    use ZoneKind::{Dma32, Normal};
    assert_eq!(
        fb,
        [
            (0, Normal),
            (0, Dma32),
            (2, Normal),
            (2, Dma32),
            (1, Normal),
            (1, Dma32)
        ]
    );
    let nf: Vec<(usize, ZoneKind)> = m
        .zonelist(n(1), ZonelistKind::NoFallback)
        .as_slice()
        .iter()
        .map(|z| (z.node.index(), z.kind))
        .collect();
    assert_eq!(nf, [(1, Normal), (1, Dma32)]);
    // GFP zone selection filters the list: DMA32 requests see DMA32 zones only.
    let dma: Vec<usize> = m
        .zonelist(n(0), ZonelistKind::Fallback)
        .eligible(ZoneKind::Dma32)
        .map(|z| {
            assert_eq!(z.kind, Dma32);
            z.node.index()
        })
        .collect();
    assert_eq!(dma, [0, 2, 1]);
    // And an allocation follows it: exhaust node 0's DMA32, the next DMA32
    // request comes from node 2's DMA32, never from a Normal zone.
    let gfp = Gfp::KERNEL | Gfp::DMA32;
    let mut got = Vec::new();
    loop {
        let a = m.alloc(n(0), gfp, Order::ZERO).unwrap();
        assert_eq!(a.zone, Dma32);
        got.push(a);
        if a.node != n(0) {
            break;
        }
    }
    assert_eq!(got.last().unwrap().node, n(2));
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
        let all = (0..nodes).fold(pageframe::NodeMask::EMPTY, |m, i| m.with(n(i)));
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
    /// same requests do spill over once the local node is full.
    #[test]
    fn thisnode_never_returns_a_remote_frame(
        ops in proptest::collection::vec((0usize..3, 0u8..=9, any::<bool>(), any::<bool>()), 1..120),
    ) {
        let m = machine(3, 4);
        let mut live: Vec<(Pfn, Order)> = Vec::new();
        let mut spilled = false;
        for (local, order, thisnode, free) in ops {
            if free && !live.is_empty() {
                let (p, o) = live.swap_remove(order as usize % live.len());
                m.free(p, o).unwrap();
                continue;
            }
            let order = Order::new(order).unwrap();
            let gfp = if thisnode { Gfp::KERNEL | Gfp::THISNODE } else { Gfp::KERNEL };
            match m.alloc(n(local), gfp, order) {
                Ok(a) => {
                    prop_assert_eq!(m.node_of(a.pfn), Some(a.node));
                    if thisnode {
                        prop_assert_eq!(a.node, n(local));
                    }
                    spilled |= a.node != n(local);
                    live.push((a.pfn, order));
                }
                Err(e) => prop_assert_eq!(e, AllocError::OutOfMemory),
            }
        }
        let _ = spilled;
        m.validate().unwrap();
        for (p, o) in live {
            m.free(p, o).unwrap();
        }
        prop_assert_eq!(m.free_pages(), 3 * 4 * PB);
    }
}

#[test]
fn thisnode_fails_where_fallback_goes_remote() {
    let m = machine(2, 2);
    // Fill node 0 (the min-watermark pass takes it down to min).
    let mut n0 = 0;
    while let Ok(a) = m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO) {
        assert_eq!(a.node, n(0));
        n0 += 1;
    }
    assert!(n0 > 900);
    assert_eq!(
        m.alloc(n(0), Gfp::KERNEL | Gfp::THISNODE, Order::ZERO),
        Err(AllocError::OutOfMemory)
    );
    assert_eq!(m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap().node, n(1));
    let thp = ThpPolicy::THISNODE_COMPACT;
    let mut c = Scripted::default();
    assert!(
        m.alloc_thp(n(0), HUGE, true, &thp, &mut c, &NoClock)
            .is_err()
    );
    let a = m
        .alloc_thp(
            n(0),
            HUGE,
            true,
            &ThpPolicy::REMOTE_FALLBACK,
            &mut c,
            &NoClock,
        )
        .unwrap();
    assert_eq!(a.node, n(1));
    let s = m.stats(n(0));
    assert_eq!(
        (s.thp_attempts, s.thp_failed, s.thp_success_remote),
        (2, 1, 1)
    );
    // Bad input: an unknown local node, an invalid GFP.
    assert_eq!(
        m.alloc(n(5), Gfp::KERNEL, Order::ZERO),
        Err(AllocError::NoEligibleZone)
    );
    assert_eq!(
        m.alloc(n(0), Gfp::DMA | Gfp::DMA32, Order::ZERO),
        Err(AllocError::InvalidGfp)
    );
    assert_eq!(
        m.free(Pfn(3), Order::ZERO),
        Err(pageframe::FreeError::OutOfRange)
    );
}

// ---------------------------------------------------------------- deferral

/// spec 03 §7, written out as the reference model.
#[derive(Clone, Copy, Default, Debug)]
struct ModelDefer {
    considered: u32,
    shift: u8,
    order_failed: u8,
}

impl ModelDefer {
    fn defer(&mut self, order: u8) {
        self.considered = 0;
        self.shift = (self.shift + 1).min(6);
        self.order_failed = self.order_failed.min(order);
    }
    fn deferred(&mut self, order: u8) -> bool {
        if order < self.order_failed {
            return false;
        }
        self.considered += 1;
        if self.considered >= 1 << self.shift {
            self.considered = 1 << self.shift;
            return false;
        }
        true
    }
    fn reset(&mut self, order: u8, ok: bool) {
        if ok {
            self.considered = 0;
            self.shift = 0;
        }
        if order >= self.order_failed {
            self.order_failed = order + 1;
        }
    }
}

#[test]
fn deferral_skips_two_to_the_shift_minus_one() {
    let d = Deferral::new();
    assert!(!d.is_deferred(HUGE), "nothing failed yet");
    for shift in 1..=8u32 {
        d.defer(HUGE);
        let s = shift.min(u32::from(MAX_DEFER_SHIFT));
        let skipped = (0..200).take_while(|_| d.is_deferred(HUGE)).count() as u32;
        assert_eq!(skipped, (1 << s) - 1, "after {shift} failures");
        assert!(!d.is_deferred(HUGE), "allowed until the next failure");
    }
    d.reset(HUGE, true);
    assert!(!d.is_deferred(HUGE));
    assert_eq!(d.state().shift, 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn deferral_matches_the_spec_model(
        ops in proptest::collection::vec((0u8..4, 1u8..=10), 1..300),
    ) {
        let d = Deferral::new();
        let mut m = ModelDefer::default();
        for (op, order) in ops {
            let o = Order::new(order).unwrap();
            match op {
                0 => { d.defer(o); m.defer(order); }
                1 => { d.reset(o, true); m.reset(order, true); }
                2 => { d.reset(o, false); m.reset(order, false); }
                _ => prop_assert_eq!(d.is_deferred(o), m.deferred(order)),
            }
            let s = d.state();
            prop_assert_eq!((s.considered, s.shift, s.order_failed), (m.considered, m.shift, m.order_failed));
        }
    }
}

/// The node-aware policy against a model: per-node deferral for every
/// node, the machine-wide back-off for remote compaction. All nodes are
/// fragmented; compaction outcomes come from a script.
fn node_aware_model_case(
    nodes: usize,
    requests: &[usize],
    script: &[bool],
) -> Result<(), TestCaseError> {
    let m = machine(nodes, 32);
    let mut c = Scripted::default();
    for i in 0..nodes {
        let held = fragment(&m, i);
        c.held.insert(n(i), held);
    }
    c.script = script.to_vec();
    let mut node_defer = vec![ModelDefer::default(); nodes];
    let mut global = ModelDefer::default();
    let mut woken = vec![0u64; nodes];
    let mut next = 0usize;
    let policy = ThpPolicy::NODE_AWARE;
    for &local in requests {
        let local = local % nodes;
        let calls_before = c.calls.len();
        let got = m.alloc_thp(n(local), HUGE, true, &policy, &mut c, &NoClock);
        // The model's expectation: the local node compacts (async) unless
        // deferred; remote nodes have nothing free and are only woken, when
        // the machine-wide back-off allows, which a failed request renews.
        let mut want_calls = Vec::new();
        let mut want: Option<usize> = None;
        let mut global_ok: Option<bool> = None;
        for (i, &x) in m.node_order(n(local)).iter().enumerate() {
            let x = x.index();
            if i > 0 {
                if *global_ok.get_or_insert_with(|| !global.deferred(9)) {
                    woken[x] += 1;
                }
                continue;
            }
            if node_defer[x].deferred(9) {
                continue;
            }
            want_calls.push((n(x), CompactPriority::Async));
            let ok = script.get(next).copied().unwrap_or(false);
            next += 1;
            if ok {
                node_defer[x].reset(9, true);
                want = Some(x);
                break;
            }
            node_defer[x].defer(9);
        }
        if want.is_none() && global_ok == Some(true) {
            global.defer(9);
        }
        prop_assert_eq!(&c.calls[calls_before..], &want_calls[..]);
        prop_assert_eq!(got.ok().map(|a| a.node.index()), want);
        for (x, d) in node_defer.iter().enumerate() {
            let s = m.node_deferral(n(x));
            prop_assert_eq!((s.considered, s.shift), (d.considered, d.shift));
        }
        let g = m.global_deferral();
        prop_assert_eq!((g.considered, g.shift), (global.considered, global.shift));
        for (x, w) in woken.iter().enumerate() {
            prop_assert_eq!(m.stats(n(x)).kcompactd_wakes, *w);
        }
    }
    prop_assert_eq!(c.reclaims, 0, "compact only never reclaims");
    m.validate().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn node_aware_deferral_matches_model(
        nodes in 2usize..=3,
        requests in proptest::collection::vec(0usize..3, 1..20),
        script in proptest::collection::vec(prop::bool::weighted(0.3), 0..40),
    ) {
        node_aware_model_case(nodes, &requests, &script)?;
    }
}

#[test]
fn node_aware_backs_off_when_every_node_fails() {
    // Everything fragmented, compaction never succeeds: over 400 requests
    // the node-aware policy compacts the local node only about once per 64
    // requests (its own deferral) and never stalls on the remote node,
    // whose kcompactd it wakes under the machine-wide back-off; remote
    // fallback, with only Linux's per-zone deferral (counted at both its
    // async and its sync attempt), compacts every node far more often.
    let count = |policy: ThpPolicy| {
        let m = machine(2, 8);
        let mut c = Scripted::default();
        for i in 0..2 {
            fragment(&m, i);
        }
        for _ in 0..400 {
            assert!(
                m.alloc_thp(n(0), HUGE, true, &policy, &mut c, &NoClock)
                    .is_err()
            );
        }
        let per_node = |x: usize| c.calls.iter().filter(|(k, _)| *k == n(x)).count();
        (per_node(0), per_node(1), m)
    };
    let (l, r, m) = count(ThpPolicy::NODE_AWARE);
    // 6 doublings (1+2+...+32 skipped) then one run every 64 requests.
    assert!((6..=6 + 400 / 64 + 1).contains(&l), "local runs {l}");
    assert_eq!(r, 0, "no direct compaction of a remote node");
    let wakes = m.stats(n(1)).kcompactd_wakes as usize;
    assert!(
        (6..=6 + 400 / 64 + 1).contains(&wakes),
        "remote wakes {wakes}"
    );
    assert_eq!(m.global_deferral().shift, MAX_DEFER_SHIFT);
    assert_eq!(m.stats(n(0)).thp_failed, 400);
    assert!(m.stats(n(0)).compact_global_skips > 300);
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
    // Both nodes fragmented; the remote one is compactable. The first
    // fault fails and wakes node 1's kcompactd; once it has run, the next
    // fault finds a remote huge page and the machine-wide back-off ends.
    let m = machine(2, 8);
    let mut c = Scripted::default();
    fragment(&m, 0);
    c.held.insert(n(1), fragment(&m, 1));
    c.script = vec![false, true];
    let p = ThpPolicy::NODE_AWARE;
    assert!(m.alloc_thp(n(0), HUGE, true, &p, &mut c, &NoClock).is_err());
    assert!(m.kcompactd_pending(n(1)));
    assert_eq!(m.global_deferral().shift, 1);
    let rep = m.run_kcompactd(n(1), &mut c);
    assert_eq!(rep.successes, 1);
    let a = m.alloc_thp(n(0), HUGE, true, &p, &mut c, &NoClock).unwrap();
    assert_eq!(a.node, n(1));
    assert_eq!(m.global_deferral().shift, 0);
    assert_eq!(
        c.calls,
        [
            (n(0), CompactPriority::Async),
            (n(1), CompactPriority::SyncLight)
        ]
    );
}

#[test]
fn node_aware_prefers_local_compaction_then_remote_free_pages() {
    // Local fragmented but compactable; remote has free huge pages.
    let m = machine(2, 8);
    let mut c = Scripted {
        default_ok: true,
        ..Scripted::default()
    };
    c.held.insert(n(0), fragment(&m, 0));
    let a = m
        .alloc_thp(n(0), HUGE, true, &ThpPolicy::NODE_AWARE, &mut c, &NoClock)
        .unwrap();
    assert_eq!(a.node, n(0), "compacted locally rather than going remote");
    // Remote fallback takes the remote free page without compacting.
    let calls = c.calls.len();
    let b = m
        .alloc_thp(
            n(0),
            HUGE,
            true,
            &ThpPolicy::REMOTE_FALLBACK,
            &mut c,
            &NoClock,
        )
        .unwrap();
    assert_eq!((b.node, c.calls.len()), (n(1), calls));
    // Local compaction failing: node-aware then takes the remote page.
    c.default_ok = false;
    let d = m
        .alloc_thp(n(0), HUGE, true, &ThpPolicy::NODE_AWARE, &mut c, &NoClock)
        .unwrap();
    assert_eq!(d.node, n(1));
    let s = m.stats(n(0));
    assert_eq!((s.thp_success_local, s.thp_success_remote), (1, 2));
    assert_eq!(m.node_deferral(n(0)).shift, 1);
}

#[test]
fn linux_slow_path_defers_zones_and_reclaims_unless_compact_only() {
    let m = machine(2, 8);
    let mut c = Scripted::default();
    for i in 0..2 {
        fragment(&m, i);
    }
    let clock = Ticks::default();
    let req = SlowRequest {
        local: n(0),
        gfp: Gfp::TRANSHUGE,
        order: HUGE,
        nodes: NodePolicy::RemoteFallback,
        compact_only: false,
    };
    assert!(m.alloc_slow(&req, &mut c, &clock).is_err());
    // Async over both nodes, reclaim, then sync-light over both.
    use CompactPriority::{Async, SyncLight};
    assert_eq!(
        c.calls,
        [
            (n(0), Async),
            (n(1), Async),
            (n(0), SyncLight),
            (n(1), SyncLight)
        ]
    );
    assert!(c.reclaims > 0);
    assert_eq!(m.zone_deferral(n(0), ZoneKind::Normal).shift, 1);
    assert_eq!(m.zone_deferral(n(1), ZoneKind::Normal).shift, 1);
    let s = m.stats(n(0));
    assert_eq!((s.compact_stall, s.compact_fail), (1, 1));
    assert!(s.compact_stall_ns > 0);
    assert_eq!(m.stats(n(1)).compact_runs, 2);
    // Next request: both zones deferred at the async attempt (the counts
    // reach 2 = 1 << 1 at the sync attempt, which runs).
    c.calls.clear();
    let reclaims = c.reclaims;
    let only = SlowRequest {
        compact_only: true,
        ..req
    };
    assert!(m.alloc_slow(&only, &mut c, &clock).is_err());
    assert_eq!(c.calls, [(n(0), SyncLight), (n(1), SyncLight)]);
    assert_eq!(c.reclaims, reclaims, "compact only: no reclaim");
    // THISNODE keeps even compaction local.
    c.calls.clear();
    let local = SlowRequest {
        gfp: Gfp::TRANSHUGE | Gfp::THISNODE,
        ..req
    };
    let _ = m.alloc_slow(&local, &mut c, &clock);
    assert!(c.calls.iter().all(|(x, _)| *x == n(0)));
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
}

#[test]
fn defrag_policy_behaviour_on_a_fragmented_machine() {
    use CompactPriority::{Async, SyncLight};
    for d in ThpDefrag::ALL {
        for mad in [false, true] {
            let m = machine(2, 8);
            let mut c = Scripted::default();
            for i in 0..2 {
                fragment(&m, i);
            }
            let policy = ThpPolicy {
                defrag: d,
                nodes: NodePolicy::ThisNode,
                compact_only: false,
            };
            let r = m.alloc_thp(n(0), HUGE, mad, &policy, &mut c, &NoClock);
            assert!(r.is_err());
            let a = d.action(mad);
            let prios: Vec<CompactPriority> = c.calls.iter().map(|x| x.1).collect();
            let want: &[CompactPriority] = match (a.direct_compaction, a.one_round) {
                (false, _) => &[],
                // NORETRY: the async run ran (not skipped/deferred), so one
                // more round stays async, then the request gives up.
                (true, true) => &[Async, Async],
                (true, false) => &[Async, SyncLight],
            };
            assert_eq!(prios, want, "{} madvised={mad}", d.name());
            assert_eq!(
                m.kcompactd_pending(n(0)),
                a.wake_kcompactd,
                "{} madvised={mad}",
                d.name()
            );
            assert_eq!(m.stats(n(0)).compact_stall, u64::from(a.direct_compaction));
        }
    }
}

// --------------------------------------------------------------- kcompactd

#[test]
fn kcompactd_runs_what_it_was_woken_for() {
    let m = machine(2, 8);
    let held = fragment(&m, 1);
    assert_eq!(suitability(normal(&m, 1), HUGE), Suitability::Continue);
    assert_eq!(suitability(normal(&m, 0), HUGE), Suitability::Ready);
    let mut c = Scripted {
        default_ok: true,
        ..Scripted::default()
    };
    c.held.insert(n(1), held);
    // Nothing recorded: nothing to do.
    assert_eq!(m.run_kcompactd(n(1), &mut c).runs, 0);
    // Order 0 is ignored; node 0 does not need it (a free huge page is there).
    assert!(!m.wakeup_kcompactd(n(1), Order::ZERO, ZoneKind::Normal));
    assert!(!m.wakeup_kcompactd(n(0), HUGE, ZoneKind::Normal));
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    let rep = m.run_kcompactd(n(1), &mut c);
    assert_eq!((rep.order, rep.runs, rep.successes), (9, 1, 1));
    assert!(!m.kcompactd_pending(n(1)));
    assert_eq!(normal(&m, 1).free_blocks(HUGE), 1);
    let s = m.stats(n(1));
    assert_eq!(
        (s.kcompactd_wakes, s.kcompactd_runs, s.compact_stall),
        (1, 1, 0)
    );
    // A failing pass defers the zone for the next one.
    c.default_ok = false;
    m.alloc(n(1), Gfp::TRANSHUGE_LIGHT | Gfp::THISNODE, HUGE)
        .unwrap();
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    assert_eq!(m.run_kcompactd(n(1), &mut c).runs, 1);
    assert!(m.wakeup_kcompactd(n(1), HUGE, ZoneKind::Normal));
    let rep = m.run_kcompactd(n(1), &mut c);
    assert_eq!((rep.runs, rep.deferred), (0, 1));
}

#[test]
fn fragmentation_score_tracks_free_memory_outside_huge_blocks() {
    let m = machine(2, 8);
    assert_eq!(m.fragmentation_score(n(0)), Some(0));
    fragment(&m, 0);
    let s = m.fragmentation_score(n(0)).unwrap();
    assert!(s >= 99, "score {s}");
    assert_eq!(m.fragmentation_score(n(1)), Some(0));
    assert_eq!(m.fragmentation_score(n(7)), None);
}

/// Counters add up across a mixed run, through a shared `RefCell` compactor
/// (the lab's pattern).
#[test]
fn stats_add_up() {
    let m = machine(2, 8);
    let c = RefCell::new(Scripted {
        default_ok: true,
        ..Scripted::default()
    });
    c.borrow_mut().held.insert(n(0), fragment(&m, 0));
    let mut ok = 0;
    for i in 0..30 {
        let policy = [ThpPolicy::NODE_AWARE, ThpPolicy::REMOTE_FALLBACK][i % 2];
        ok += u64::from(
            m.alloc_thp(n(0), HUGE, true, &policy, &mut *c.borrow_mut(), &NoClock)
                .is_ok(),
        );
    }
    let s = m.stats(n(0));
    assert_eq!(s.thp_attempts, 30);
    assert_eq!(s.thp_success(), ok);
    assert_eq!(s.thp_success() + s.thp_failed, 30);
    assert_eq!(m.total_stats().thp_attempts, 30);
    m.validate().unwrap();
}

// ------------------------------------------------- real compaction driver

/// The kernel side for the driver: one word of "contents" per frame, keyed
/// by frame number; a migration moves the words.
#[derive(Default)]
struct Words(HashMap<u64, u64>, u64);

impl Migrator for Words {
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        for i in 0..order.pages() {
            if let Some(w) = self.0.remove(&(src.get() + i)) {
                self.0.insert(dst.get() + i, w);
            }
        }
        self.1 += order.pages();
        Ok(())
    }
}

#[test]
fn compact_driver_makes_huge_pages_by_moving_contents() {
    // Node 0 fragmented with movable frames that carry data; node 1 too.
    // The node-aware policy with the real compaction engine gets local huge
    // pages, and every word survives at its frame's new place. (16 blocks:
    // compaction needs free memory above min + 2 huge pages to start.)
    let m = machine(2, 16);
    let mut words = Words::default();
    for i in 0..2 {
        for block in fragment(&m, i) {
            for p in block {
                words.0.insert(p.get(), p.get() * 7);
            }
        }
    }
    let before: u64 = words.0.values().sum();
    let mut driver = CompactDriver::new(words);
    let clock = Ticks::default();
    let mut local = 0;
    for _ in 0..3 {
        let a = m
            .alloc_thp(
                n(0),
                HUGE,
                true,
                &ThpPolicy::NODE_AWARE,
                &mut driver,
                &clock,
            )
            .unwrap();
        assert!(a.pfn.is_aligned(HUGE));
        local += u64::from(a.node == n(0));
    }
    assert_eq!(local, 3, "compaction made local huge pages");
    let s = m.stats(n(0));
    assert!(s.compact_migrated > 0 && s.compact_migrated == driver.migrator.1);
    assert_eq!(s.compact_stall, 3);
    assert!(s.compact_stall_ns > 0);
    assert_eq!(driver.migrator.0.values().sum::<u64>(), before);
    assert!(m.compact_state(n(0), ZoneKind::Normal).is_some());
    assert!(m.compact_state(n(0), ZoneKind::Dma32).is_none());
    m.validate().unwrap();
}

// ------------------------------------------------------------ zone layout

#[test]
fn zone_layout_follows_the_memory_map() {
    const GIB: u64 = 1 << 18;
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
    // A second node above 4 GiB has Normal only; movable below its start
    // makes all of it Movable.
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
    // The layout builds a node, and the node's zonelist puts Movable first
    // for movable user memory (HIGHUSER_MOVABLE may use it).
    let mut node = Node::new();
    let small = r(256, 4096 + 8 * PB);
    let l = ZoneLayout::new(small, true, Some(Pfn(4096 + 4 * PB)));
    for (kind, span) in l.zones() {
        node.add_zone(Zone::new(kind, span, meta(span)).unwrap())
            .unwrap();
    }
    node.add_free_range(small).unwrap();
    let mut m = Machine::new(Topology::uniform(1).unwrap());
    m.add_node(n(0), node).unwrap();
    let kinds: Vec<ZoneKind> = m
        .zonelist(n(0), ZonelistKind::Fallback)
        .as_slice()
        .iter()
        .map(|z| z.kind)
        .collect();
    assert_eq!(kinds, [ZoneKind::Movable, ZoneKind::Dma32, ZoneKind::Dma]);
    let a = m.alloc(n(0), Gfp::HIGHUSER_MOVABLE, Order::ZERO).unwrap();
    assert_eq!(a.zone, ZoneKind::Movable);
    let k = m.alloc(n(0), Gfp::KERNEL, Order::ZERO).unwrap();
    assert_eq!(k.zone, ZoneKind::Dma32, "kernel memory never from Movable");
}
