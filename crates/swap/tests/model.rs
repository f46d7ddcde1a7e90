//! Property test: random operation sequences against a reference model of
//! every slot (map count, cache bit), the huge flag of every cluster and
//! the continuation-page budget. Checks spec 05 §12: counts never wrap, a
//! cluster's state matches its contents (`validate` after each step), a
//! huge allocation is a whole free aligned cluster, no slot is handed out
//! twice, refused operations change nothing, and freeing everything returns
//! every cluster to FREE.

mod common;

use common::{device, dump};
use pageframe_swap::{
    AllocError, ClusterFlag, ClusterIndex, FallbackReason, MthpSearch, Order, Slot, SlotState,
    SwapConfig, SwapCpu, SwapDevice, SwapError, SwapinDecision, SwapinPolicy, VmaFlags,
};
use proptest::prelude::*;

const CLUSTER_ORDER: u8 = 4; // 16-slot clusters keep the state space small
const CS: u32 = 1 << CLUSTER_ORDER;
const CLUSTERS: u32 = 6;
const SLOTS: u32 = CLUSTERS * CS - 3; // a padded last cluster
const POOL: usize = 2;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Dup,
    PutMap,
    PutCache,
    Free,
    Prepare,
}

#[derive(Clone, Debug)]
enum Target {
    /// A live entry, as allocated.
    Entry(usize),
    /// One slot of a live entry, order 0.
    Part(usize, u32),
    /// Anything.
    Raw(u32, u8),
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u8, usize),
    Ref(Kind, Target, u8),
    Split(usize),
    Swapin(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        3 => Just(Kind::Dup),
        2 => Just(Kind::PutMap),
        2 => Just(Kind::PutCache),
        1 => Just(Kind::Free),
        1 => Just(Kind::Prepare),
    ];
    let target = prop_oneof![
        4 => any::<usize>().prop_map(Target::Entry),
        2 => (any::<usize>(), 0..CS).prop_map(|(e, i)| Target::Part(e, i)),
        1 => (0..CLUSTERS * CS + 2, 0..CLUSTER_ORDER + 2).prop_map(|(s, k)| Target::Raw(s, k)),
    ];
    prop_oneof![
        3 => (prop_oneof![4 => Just(0u8), 2 => 1..CLUSTER_ORDER, 1 => Just(CLUSTER_ORDER)], 0..2usize)
            .prop_map(|(k, c)| Op::Alloc(k, c)),
        8 => (kind, target, 1..80u8).prop_map(|(k, t, r)| Op::Ref(k, t, r)),
        1 => any::<usize>().prop_map(Op::Split),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(e, w)| Op::Swapin(e, w)),
    ]
}

/// Model of one slot: None = free.
type SlotModel = Option<(u64, bool)>;

struct Model {
    slots: Vec<SlotModel>,
    huge: Vec<bool>,
    entries: Vec<(Slot, u8)>,
}

fn levels(count: u64) -> usize {
    let mut hi = count / 63;
    let mut l = 0;
    while hi > 0 {
        l += 1;
        hi /= 128;
    }
    l
}

/// Continuation levels an increment of `count` touches (spec 05 §6).
fn carry_depth(count: u64) -> Option<usize> {
    if count % 63 < 62 {
        return Some(0);
    }
    let mut hi = count / 63;
    for l in 1..=3 {
        if hi % 128 < 127 {
            return Some(l);
        }
        hi /= 128;
    }
    None
}

impl Model {
    fn new() -> Self {
        Model {
            slots: vec![None; SLOTS as usize],
            huge: vec![false; CLUSTERS as usize],
            entries: Vec::new(),
        }
    }

    fn attached(&self, c: usize) -> usize {
        let lo = c * CS as usize;
        let hi = ((c + 1) * CS as usize).min(SLOTS as usize);
        (lo..hi)
            .filter_map(|s| self.slots[s].map(|(n, _)| levels(n)))
            .max()
            .unwrap_or(0)
    }

    fn pool_used(&self) -> usize {
        (0..CLUSTERS as usize).map(|c| self.attached(c)).sum()
    }

    fn cluster_free(&self, c: usize) -> bool {
        let lo = c * CS as usize;
        let hi = (c + 1) * CS as usize;
        hi <= SLOTS as usize && lo > 0 && (lo..hi).all(|s| self.slots[s].is_none())
    }

    fn locate(&self, slot: Slot, k: u8) -> Result<(usize, usize), SwapError> {
        if k > CLUSTER_ORDER {
            return Err(SwapError::BadOrder);
        }
        let n = 1usize << k;
        let s = slot.get() as usize;
        if s + n > SLOTS as usize {
            return Err(SwapError::OutOfRange);
        }
        if !s.is_multiple_of(n) {
            return Err(SwapError::Misaligned);
        }
        Ok((s, n))
    }

    fn check_range(&self, s: usize, n: usize) -> Result<(), SwapError> {
        if self.huge[s / CS as usize] && n != CS as usize {
            return Err(SwapError::HugeEntry);
        }
        for i in s..s + n {
            if i == 0 {
                return Err(SwapError::BadSlot(Slot::HEADER));
            }
            if self.slots[i].is_none() {
                return Err(SwapError::NotInUse(Slot::new(i as u32)));
            }
        }
        Ok(())
    }

    /// Predicts and applies a reference operation; returns the expected result.
    fn apply(&mut self, kind: Kind, slot: Slot, k: u8) -> Result<u32, SwapError> {
        let (s, n) = self.locate(slot, k)?;
        self.check_range(s, n)?;
        let r = s..s + n;
        let at = |i: usize| Slot::new(i as u32);
        let mut freed = 0;
        match kind {
            Kind::Dup => {
                let mut depth = 0;
                let mut first = at(s);
                for i in r.clone() {
                    match carry_depth(self.slots[i].unwrap().0) {
                        None => return Err(SwapError::CountOverflow(at(i))),
                        Some(d) if d > depth => {
                            depth = d;
                            first = at(i);
                        }
                        Some(_) => {}
                    }
                }
                let c = s / CS as usize;
                let missing = depth.saturating_sub(self.attached(c));
                if missing > POOL - self.pool_used() {
                    return Err(SwapError::CountOverflow(first));
                }
                for i in r {
                    self.slots[i].as_mut().unwrap().0 += 1;
                }
            }
            Kind::PutMap => {
                if let Some(i) = r.clone().find(|&i| self.slots[i].unwrap().0 == 0) {
                    return Err(SwapError::CountUnderflow(at(i)));
                }
                for i in r {
                    let v = self.slots[i].as_mut().unwrap();
                    v.0 -= 1;
                    if *v == (0, false) {
                        self.slots[i] = None;
                        freed += 1;
                    }
                }
            }
            Kind::PutCache | Kind::Free => {
                for i in r.clone() {
                    let (cnt, cache) = self.slots[i].unwrap();
                    if !cache {
                        return Err(SwapError::NoCache(at(i)));
                    }
                    if kind == Kind::Free && cnt > 0 {
                        return Err(SwapError::StillMapped(at(i)));
                    }
                }
                for i in r {
                    let v = self.slots[i].as_mut().unwrap();
                    v.1 = false;
                    if v.0 == 0 {
                        self.slots[i] = None;
                        freed += 1;
                    }
                }
            }
            Kind::Prepare => {
                if let Some(i) = r.clone().find(|&i| self.slots[i].unwrap().1) {
                    return Err(SwapError::CacheExists(at(i)));
                }
                for i in r {
                    self.slots[i].as_mut().unwrap().1 = true;
                }
            }
        }
        self.tidy();
        Ok(if kind == Kind::Free { 0 } else { freed })
    }

    /// Clears huge flags of empty clusters and forgets dead entries.
    fn tidy(&mut self) {
        for c in 0..CLUSTERS as usize {
            if self.cluster_free(c) {
                self.huge[c] = false;
            }
        }
        let slots = &self.slots;
        self.entries.retain(|&(s, k)| {
            let s = s.get() as usize;
            slots[s..s + (1 << k)].iter().any(|x| x.is_some())
        });
    }

    fn aligned_free_run(&self, k: u8) -> bool {
        let n = 1usize << k;
        (0..SLOTS as usize / n)
            .any(|j| (j * n..(j + 1) * n).all(|i| i > 0 && self.slots[i].is_none()))
    }
}

fn check_state(dev: &mut SwapDevice<'_>, m: &Model) -> Result<(), TestCaseError> {
    for (i, v) in m.slots.iter().enumerate() {
        let want = match v {
            _ if i == 0 => SlotState::Bad,
            None => SlotState::Free,
            Some((c, cache)) => SlotState::InUse {
                map_count: *c,
                cached: *cache,
            },
        };
        prop_assert_eq!(
            dev.slot_state(Slot::new(i as u32)).unwrap(),
            want,
            "slot {}",
            i
        );
    }
    for c in 0..CLUSTERS {
        prop_assert_eq!(
            dev.cluster(ClusterIndex::new(c)).unwrap().huge,
            m.huge[c as usize]
        );
    }
    prop_assert_eq!(dev.stats().cont_pages_used as usize, m.pool_used());
    prop_assert_eq!(dev.validate(), Ok(()));
    Ok(())
}

fn run(ops: Vec<Op>, search: MthpSearch) -> Result<(), TestCaseError> {
    let cfg = SwapConfig::new(SLOTS)
        .with_cluster_order(CLUSTER_ORDER)
        .with_mthp_search(search);
    let mut dev = device(cfg, POOL);
    let mut cpus = [SwapCpu::new(), SwapCpu::new()];
    let mut m = Model::new();
    for op in ops {
        let before = dump(&dev);
        match op {
            Op::Alloc(k, c) => match dev.alloc(&mut cpus[c], Order::new(k).unwrap()) {
                Ok(s) => {
                    let (s0, n) = (s.get() as usize, 1usize << k);
                    prop_assert!(
                        s0 % n == 0 && s0 + n <= SLOTS as usize,
                        "misaligned {} for order {}",
                        s0,
                        k
                    );
                    // No slot handed out twice.
                    prop_assert!(
                        m.slots[s0..s0 + n].iter().all(|x| x.is_none()) && s0 > 0,
                        "{} reused",
                        s0
                    );
                    let cl = dev.cluster(ClusterIndex::new(s.get() / CS)).unwrap();
                    if k == CLUSTER_ORDER {
                        prop_assert!(cl.huge && cl.flag == ClusterFlag::Full);
                        m.huge[s0 / CS as usize] = true;
                    } else if k > 0 && search == MthpSearch::Linux {
                        prop_assert_eq!(
                            cl.order,
                            k,
                            "order-{} entry in a cluster of order {}",
                            k,
                            cl.order
                        );
                    }
                    m.slots[s0..s0 + n].fill(Some((0, true)));
                    m.entries.push((s, k));
                }
                Err(AllocError::NoSpace(reason)) => {
                    prop_assert_eq!(dump(&dev).slots, before.slots);
                    match (k, reason) {
                        (CLUSTER_ORDER, FallbackReason::NoFreeCluster) => {
                            prop_assert!(!(0..CLUSTERS as usize).any(|c| m.cluster_free(c)))
                        }
                        (0, FallbackReason::DeviceFull) => {
                            prop_assert!(m.slots[1..].iter().all(|x| x.is_some()))
                        }
                        (_, FallbackReason::NoAlignedRun) if search == MthpSearch::Exhaustive => {
                            prop_assert!(
                                !m.aligned_free_run(k),
                                "order {} failed with a free run",
                                k
                            )
                        }
                        (_, FallbackReason::NoAlignedRun) => {}
                        other => prop_assert!(false, "unexpected failure {:?}", other),
                    }
                }
                Err(e) => prop_assert!(false, "unexpected {:?}", e),
            },
            Op::Ref(kind, target, reps) => {
                let (slot, k) = match target {
                    Target::Entry(e) if !m.entries.is_empty() => m.entries[e % m.entries.len()],
                    Target::Part(e, i) if !m.entries.is_empty() => {
                        let (s, k) = m.entries[e % m.entries.len()];
                        (Slot::new(s.get() + i % (1 << k)), 0)
                    }
                    Target::Raw(s, k) => (Slot::new(s), k),
                    _ => continue,
                };
                let reps = if kind == Kind::Dup || kind == Kind::PutMap {
                    reps
                } else {
                    1
                };
                for _ in 0..reps {
                    let before = dump(&dev);
                    let order = Order::new(k).unwrap();
                    let got = match kind {
                        Kind::Dup => dev.duplicate(slot, order).map(|_| 0),
                        Kind::PutMap => dev.put_map(slot, order),
                        Kind::PutCache => dev.put_cache(slot, order),
                        Kind::Free => dev.free(slot, order).map(|_| 0),
                        Kind::Prepare => dev.swapcache_prepare(slot, order).map(|_| 0),
                    };
                    let want = m.apply(kind, slot, k);
                    prop_assert_eq!(got, want, "{:?} {:?} order {}", kind, slot, k);
                    if got.is_err() {
                        prop_assert_eq!(dump(&dev), before);
                        break;
                    }
                }
            }
            Op::Split(e) | Op::Swapin(e, _) if !m.entries.is_empty() => {
                let (s, _) = m.entries[e % m.entries.len()];
                let head = Slot::new(s.get() & !(CS - 1));
                let c = (head.get() / CS) as usize;
                let got = match op {
                    Op::Swapin(_, whole) => {
                        let policy = if whole {
                            SwapinPolicy::Always
                        } else {
                            SwapinPolicy::Never
                        };
                        dev.swapin_huge(head, policy, VmaFlags::empty())
                            .map(|d| d == SwapinDecision::Split)
                    }
                    _ => dev.split_huge(head).map(|_| true),
                };
                if head.get() + CS > SLOTS {
                    prop_assert_eq!(got, Err(SwapError::OutOfRange));
                } else if !m.huge[c] {
                    prop_assert_eq!(got, Err(SwapError::NotHuge));
                } else {
                    prop_assert!(got.is_ok());
                    if got == Ok(true) {
                        m.huge[c] = false;
                        // Split: the huge entry's slots become base entries.
                        m.entries
                            .retain(|&(x, k)| !(x == head && k == CLUSTER_ORDER));
                        m.entries
                            .extend((0..CS).map(|i| (Slot::new(head.get() + i), 0)));
                    }
                }
            }
            _ => {}
        }
        check_state(&mut dev, &m)?;
    }
    // Drop every reference: every cluster returns to FREE (spec 05 §12.7).
    for i in 1..SLOTS as usize {
        let c = i / CS as usize;
        if m.huge[c] {
            dev.split_huge(Slot::new((c as u32) * CS)).unwrap();
            m.huge[c] = false;
        }
        if let Some((count, cache)) = m.slots[i] {
            for _ in 0..count {
                dev.put_map(Slot::new(i as u32), Order::ZERO).unwrap();
            }
            if cache {
                dev.put_cache(Slot::new(i as u32), Order::ZERO).unwrap();
            }
            m.slots[i] = None;
        }
    }
    prop_assert_eq!(dev.inuse_slots(), 0);
    for c in 1..CLUSTERS - 1 {
        prop_assert_eq!(
            dev.cluster(ClusterIndex::new(c)).unwrap().flag,
            ClusterFlag::Free
        );
    }
    prop_assert_eq!(dev.stats().cont_pages_used, 0);
    prop_assert_eq!(dev.validate(), Ok(()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn linux_search_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, MthpSearch::Linux)?;
    }

    #[test]
    fn exhaustive_search_matches_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops, MthpSearch::Exhaustive)?;
    }
}
