//! thp-numa: the 2018 linux-mm THP/NUMA debate on a simulated
//! two-node machine. A task on node 0 takes `--faults` huge-page faults in
//! an `MADV_HUGEPAGE` region (defrag `always`), keeping every huge page it
//! gets, under three policies:
//!
//! * `thisnode+compact`: `__GFP_THISNODE`, direct compaction and reclaim on
//!   the local node only;
//! * `remote-fallback`: the whole zonelist: any free huge page first, then
//!   compaction (and reclaim) of every node;
//! * `node-aware`: compact only (no reclaim), local node first, remote
//!   nodes after, each node deferred after a failure, and remote compaction
//!   backing off machine-wide after a request that failed on every node.
//!
//! Three memory states: (a) node 0 fully fragmented (every pageblock holds
//! a pinned frame, half its other frames free), node 1 free; (b) both nodes
//! fully fragmented; (c) node 0 partly fragmented (half its pageblocks
//! hold a pinned frame), node 1 free.
//!
//! How compaction cost is modelled: it is not modelled, it is done. Every
//! frame is backed by 4 KiB of real memory; the faults go through the
//! machine's `alloc_thp` (its slow path, direct compaction by
//! `pageframe-compact`), and each migration copies the frame's 4 KiB and
//! updates the owner map.
//! Direct reclaim (the non-compact-only policies) writes up to 32 movable
//! frames of the zone, oldest first, to a swap buffer (a 4 KiB copy each)
//! and frees them. Latency is wall time per fault, allocation included.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::time::Instant;

use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, PAGE_SIZE, Pfn, PfnRange,
    ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    topology::{NodeStats, Topology},
    tune::ThpPolicy,
};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::table::{Table, f, pct};

const PB: u64 = 512;
const PAGE: usize = PAGE_SIZE as usize;

/// Who holds a frame (the lab's reverse map).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Owner {
    Free,
    /// Anonymous memory: movable, reclaimable by swapping out.
    Anon,
    /// Pinned (DMA, long-term GUP): neither moves nor swaps.
    Pinned,
    /// Part of a huge page the task got.
    Huge,
}

/// The kernel side: page contents, the owner map, swap-out.
struct Kernel {
    machine: &'static Machine<'static>,
    start: Instant,
    mem: Vec<u8>,
    owner: Vec<Owner>,
    /// Anonymous frames in the order they were faulted in (the LRU);
    /// entries that moved or went away are skipped when met.
    lru: VecDeque<u64>,
    swap: Vec<u8>,
    swap_slot: usize,
    swapped: u64,
}

impl Kernel {
    fn page(&mut self, pfn: u64) -> &mut [u8] {
        let i = pfn as usize * PAGE;
        &mut self.mem[i..i + PAGE]
    }
}

/// The kernel keeps its frames as numbers (the `owner` array is its page
/// table): a block is made again from the number when the allocator asks
/// to move it, and given up once it is back or moved.
impl Migrator for Kernel {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        let p = pfn.get() as usize;
        if order != Order::ZERO || self.owner[p] != Owner::Anon {
            return None;
        }
        // SAFETY: an anonymous page this kernel maps: its number is the
        // page table's, and the block goes back to a number in `putback`
        // or `migrated`.
        unsafe { self.machine.block_from_raw(pfn, order) }.ok()
    }

    fn putback(&mut self, b: Block) {
        let _ = b.into_raw();
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        let len = order.pages() as usize * PAGE;
        let s = src.get() as usize * PAGE;
        self.mem.copy_within(s..s + len, dst.get() as usize * PAGE);
        Ok(())
    }

    fn migrated(&mut self, b: Block, src: Pfn) {
        let (dst, order) = b.into_raw();
        for i in 0..order.pages() as usize {
            let (s, d) = (src.get() as usize + i, dst.get() as usize + i);
            self.owner[d] = self.owner[s];
            self.owner[s] = Owner::Free;
            if self.owner[d] == Owner::Anon {
                self.lru.push_back(d as u64);
            }
        }
    }
}

/// The slow path's hooks: reclaim by swapping out, and the wall clock.
impl SlowPathHooks for Kernel {
    fn reclaim(&mut self, node: NodeId, kind: ZoneKind, pages: u64) -> u64 {
        let Some(span) = self
            .machine
            .inspect()
            .node(node)
            .and_then(|n| n.zone(kind))
            .map(|z| z.span())
        else {
            return 0;
        };
        let mut freed = 0;
        let mut looked = 0;
        let max_look = self.lru.len();
        while freed < pages && looked < max_look {
            let Some(p) = self.lru.pop_front() else { break };
            looked += 1;
            if self.owner[p as usize] != Owner::Anon {
                continue; // stale entry: moved or gone
            }
            if !span.contains(Pfn(p)) {
                self.lru.push_back(p);
                continue;
            }
            let slot = self.swap_slot % 64;
            self.swap_slot += 1;
            let src = p as usize * PAGE;
            let (mem, swap) = (&self.mem, &mut self.swap);
            swap[slot * PAGE..(slot + 1) * PAGE].copy_from_slice(&mem[src..src + PAGE]);
            // SAFETY: an anonymous page this kernel maps: its number is
            // the page table's, swapped out and unmapped here.
            let gone = match unsafe { self.machine.block_from_raw(Pfn(p), Order::ZERO) } {
                Ok(b) => self.machine.free(b).is_ok(),
                Err(_) => false,
            };
            if gone {
                self.owner[p as usize] = Owner::Free;
                self.swapped += 1;
                freed += 1;
            }
        }
        freed
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Free memory only.
    Free,
    /// Every pageblock pinned; half the rest free.
    Fragmented,
    /// Half the pageblocks pinned; half of every block's frames free.
    Partly,
}

struct Case {
    name: &'static str,
    about: &'static str,
    nodes: [State; 2],
}

const CASES: [Case; 3] = [
    Case {
        name: "a",
        about: "local fully fragmented, remote free",
        nodes: [State::Fragmented, State::Free],
    },
    Case {
        name: "b",
        about: "all nodes fully fragmented",
        nodes: [State::Fragmented, State::Fragmented],
    },
    Case {
        name: "c",
        about: "local partly fragmented, remote free",
        nodes: [State::Partly, State::Free],
    },
];

const POLICIES: [(&str, ThpPolicy); 3] = [
    ("thisnode+compact", ThpPolicy::THISNODE_COMPACT),
    ("remote-fallback", ThpPolicy::REMOTE_FALLBACK),
    ("node-aware", ThpPolicy::NODE_AWARE),
];

#[derive(Default)]
struct Outcome {
    faults: u64,
    local: u64,
    remote: u64,
    lat_ns: Vec<u64>,
    stats: NodeStats,
    swapped: u64,
    /// kcompactd's share of the compaction work, and its time.
    bg_runs: u64,
    bg_migrated: u64,
    bg_ns: u64,
    /// Each node's fragmentation score before the first fault.
    scores: [u32; 2],
}

impl Outcome {
    fn mean_us(&self) -> f64 {
        self.lat_ns.iter().sum::<u64>() as f64 / self.lat_ns.len().max(1) as f64 / 1e3
    }

    fn p99_us(&self) -> f64 {
        let mut v = self.lat_ns.clone();
        v.sort_unstable();
        let i = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len().max(1)) - 1;
        v.get(i).copied().unwrap_or(0) as f64 / 1e3
    }

    fn success(&self) -> f64 {
        (self.local + self.remote) as f64 / self.faults.max(1) as f64
    }
}

/// Lays out one node's memory: every frame allocated movable, then pinned
/// frames and freed frames per `state`. Returns the anonymous frames.
fn populate(
    m: &Machine<'static>,
    node: NodeId,
    span: PfnRange,
    state: State,
    owner: &mut [Owner],
    rng: &mut SmallRng,
) -> Result<Vec<u64>, String> {
    if state == State::Free {
        return Ok(Vec::new());
    }
    let mut anon = Vec::new();
    let gfp = Gfp::HIGHUSER_MOVABLE | Gfp::THISNODE | Gfp::MEMALLOC;
    let frames: Vec<Block> = std::iter::from_fn(|| m.alloc(node, gfp, Order::ZERO).ok()).collect();
    if frames.len() as u64 != span.len() {
        return Err(format!(
            "populate: got {} of {} frames",
            frames.len(),
            span.len()
        ));
    }
    let blocks = span.len() / PB;
    let mut pinned_blocks: Vec<bool> = (0..blocks)
        .map(|b| match state {
            State::Fragmented => true,
            State::Partly => b % 2 == 0,
            State::Free => false,
        })
        .collect();
    if state == State::Partly {
        pinned_blocks.shuffle(rng);
    }
    let mut held: Vec<Option<Block>> = (0..span.len()).map(|_| None).collect();
    for f in frames {
        let i = (f.pfn().get() - span.start.get()) as usize;
        held[i] = Some(f);
    }
    let mut take = |p: u64| {
        held[(p - span.start.get()) as usize]
            .take()
            .ok_or("a frame twice")
    };
    for b in 0..blocks {
        let start = span.start.get() + b * PB;
        let pin = pinned_blocks[b as usize].then(|| start + rng.gen_range(0..PB));
        let mut others: Vec<u64> = (start..start + PB).filter(|&p| Some(p) != pin).collect();
        others.shuffle(rng);
        let (free, keep) = others.split_at(others.len() / 2);
        for &p in free {
            m.free(take(p)?).map_err(|e| e.to_string())?;
        }
        if let Some(p) = pin {
            let b = take(p)?;
            m.set_pinned(&b, true).map_err(|e| e.to_string())?;
            let _ = b.into_raw(); // mapped: the page table keeps the number
            owner[p as usize] = Owner::Pinned;
        }
        for &p in keep {
            let _ = take(p)?.into_raw(); // mapped: the page table keeps the number
            owner[p as usize] = Owner::Anon;
            anon.push(p);
        }
    }
    Ok(anon)
}

fn run_one(
    case: &Case,
    policy: &ThpPolicy,
    frames_per_node: u64,
    faults: u64,
    seed: u64,
) -> Result<Outcome, String> {
    let topology = Topology::uniform(2).map_err(|e| e.to_string())?;
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> =
        Box::leak(pageframe::boot::Builder::new(MachineConfig::new(topology)).build_boxed());
    let span_of = |i: u64| PfnRange::new(Pfn(i * frames_per_node), Pfn((i + 1) * frames_per_node));
    for i in 0..2u64 {
        let span = span_of(i);
        let meta: &'static mut [MaybeUninit<u8>] =
            Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
        let id = NodeId::new(i as usize).ok_or("node id")?;
        m.add_zone(id, ZoneKind::Normal, span, meta)
            .map_err(|e| e.to_string())?;
        m.add_free_range(span).map_err(|e| e.to_string())?;
    }
    // kcompactd does the work the faults wake it for, nothing proactive.
    m.tunables()
        .set_proactiveness(0)
        .map_err(|e| e.to_string())?;
    m.tunables().set_thp_policy(*policy);
    let m: &'static Machine<'static> = m;
    let total = 2 * frames_per_node as usize;
    let mut kernel = Kernel {
        machine: m,
        start: Instant::now(),
        mem: vec![0u8; total * PAGE],
        owner: vec![Owner::Free; total],
        lru: VecDeque::new(),
        swap: vec![0u8; 64 * PAGE],
        swap_slot: 0,
        swapped: 0,
    };
    // Populated memory, as RAM is: no page fault inside a migration.
    for p in 0..total {
        kernel.mem[p * PAGE] = 1;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    for (i, &state) in case.nodes.iter().enumerate() {
        let id = NodeId::new(i).ok_or("node id")?;
        let anon = populate(m, id, span_of(i as u64), state, &mut kernel.owner, &mut rng)?;
        for p in anon {
            // Fault the page in with recognisable contents.
            kernel.page(p)[..8].copy_from_slice(&p.to_le_bytes());
            kernel.lru.push_back(p);
        }
    }
    let mut out = Outcome::default();
    for (i, score) in out.scores.iter_mut().enumerate() {
        *score = NodeId::new(i)
            .and_then(|id| m.inspect().fragmentation_score(id))
            .unwrap_or(0);
    }
    let local = NodeId::ZERO;
    let mut now = 0u64;
    for _ in 0..faults {
        let t0 = Instant::now();
        let r = m.alloc_thp(local, true, &mut kernel);
        out.lat_ns.push(t0.elapsed().as_nanos() as u64);
        out.faults += 1;
        // kcompactd threads run on other CPUs between faults: their work
        // is counted, not charged to the faulting task.
        for i in 0..2 {
            let id = NodeId::new(i).ok_or("node id")?;
            if m.inspect().node(id).is_some_and(|n| n.kcompactd_pending()) {
                let before = m.inspect().stats(id);
                let t1 = Instant::now();
                now += 1;
                m.kcompactd_tick(id, now, &mut kernel);
                out.bg_ns += t1.elapsed().as_nanos() as u64;
                let after = m.inspect().stats(id);
                out.bg_migrated += after.compact.migrate_success - before.compact.migrate_success;
                out.bg_runs += after.compact.runs - before.compact.runs;
            }
        }
        if let Ok(a) = r {
            let k = &mut kernel;
            let node = a.node();
            let (head, _) = a.into_raw(); // mapped: the page table keeps the number
            for p in head.get()..head.get() + PB {
                k.owner[p as usize] = Owner::Huge;
            }
            if node == local {
                out.local += 1;
            } else {
                out.remote += 1;
            }
        }
    }
    m.validate().map_err(|e| format!("{e:?}"))?;
    // Every anonymous page that is still resident kept its contents.
    let k = &mut kernel;
    let anon: Vec<u64> = (0..total as u64)
        .filter(|&p| k.owner[p as usize] == Owner::Anon)
        .collect();
    for p in anon {
        let w = u64::from_le_bytes(k.page(p)[..8].try_into().map_err(|_| "page")?);
        if w >= total as u64 {
            return Err(format!("frame {p}: contents lost ({w:#x})"));
        }
    }
    out.stats = m.inspect().total_stats();
    out.swapped = k.swapped;
    Ok(out)
}

/// Runs the scenario.
pub fn run(opts: &Opts) -> Result<(), String> {
    let q = opts.quick;
    let mib: u64 = opts.get("mib", if q { 64 } else { 256 })?;
    let frames = (mib << 20) / PAGE_SIZE;
    if mib < 16 || !frames.is_multiple_of(PB) {
        return Err("--mib must be an even number of MiB, at least 16".into());
    }
    let faults: u64 = opts.get("faults", (frames / PB) * 3 / 4)?;
    let rounds: u64 = opts.get("rounds", if q { 1 } else { 5 })?;
    println!(
        "## thp-numa: 2 nodes x {mib} MiB, {faults} THP faults from node 0 (MADV_HUGEPAGE, defrag=always), {rounds} round(s)\n"
    );
    // Rounds outermost, so the policies of a case run side by side and
    // share whatever else the machine is doing at the time.
    let mut summary: Vec<(usize, usize, Outcome)> = Vec::new();
    for (ci, _) in CASES.iter().enumerate() {
        for (pi, _) in POLICIES.iter().enumerate() {
            summary.push((ci, pi, Outcome::default()));
        }
    }
    for r in 0..rounds {
        for (ci, pi, agg) in summary.iter_mut() {
            let o = run_one(&CASES[*ci], &POLICIES[*pi].1, frames, faults, opts.seed + r)?;
            agg.faults += o.faults;
            agg.local += o.local;
            agg.remote += o.remote;
            agg.lat_ns.extend(o.lat_ns);
            agg.stats += o.stats;
            agg.swapped += o.swapped;
            agg.bg_runs += o.bg_runs;
            agg.bg_migrated += o.bg_migrated;
            agg.bg_ns += o.bg_ns;
            agg.scores = o.scores;
        }
    }
    let mut t = Table::new(&[
        "case",
        "policy",
        "THP ok",
        "local",
        "remote",
        "mean µs",
        "p99 µs",
        "direct runs",
        "direct migrated",
        "stall ms",
        "kcompactd runs",
        "kcompactd migrated",
        "kcompactd ms",
        "swapped",
    ]);
    for (ci, pi, o) in &summary {
        let s = &o.stats;
        t.row(vec![
            format!("({}) {}", CASES[*ci].name, CASES[*ci].about),
            POLICIES[*pi].0.to_string(),
            pct(o.success(), 1),
            o.local.to_string(),
            o.remote.to_string(),
            f(o.mean_us(), 1),
            f(o.p99_us(), 1),
            (s.compact.runs - o.bg_runs).to_string(),
            (s.compact.migrate_success - o.bg_migrated).to_string(),
            f(s.stall_ns as f64 / 1e6, 1),
            o.bg_runs.to_string(),
            o.bg_migrated.to_string(),
            f(o.bg_ns as f64 / 1e6, 1),
            o.swapped.to_string(),
        ]);
    }
    println!("{}", t.render());
    for (ci, case) in CASES.iter().enumerate() {
        if let Some((_, _, o)) = summary.iter().find(|x| x.0 == ci) {
            println!(
                "({}) fragmentation score before the faults (spec 03 §4.4): node 0 {}, node 1 {}",
                case.name, o.scores[0], o.scores[1]
            );
        }
    }
    println!();
    // The goal.
    let get = |c: usize, p: usize| {
        summary
            .iter()
            .find(|(ci, pi, _)| *ci == c && *pi == p)
            .map(|x| &x.2)
    };
    let aware = POLICIES.len() - 1;
    let mut ok = true;
    if let Some(b) = get(1, aware) {
        let cheapest = (0..POLICIES.len())
            .filter_map(|p| get(1, p).map(|o| o.mean_us()))
            .fold(f64::INFINITY, f64::min);
        let ratio = b.mean_us() / cheapest;
        let pass = ratio <= 1.1;
        ok &= pass;
        println!(
            "goal (b): node-aware mean {:.1} µs = {:.2} x the cheapest policy's {:.1} µs (<= 1.10): {}",
            b.mean_us(),
            ratio,
            cheapest,
            if pass { "PASS" } else { "FAIL" }
        );
    }
    for c in [0usize, 2] {
        let Some(a) = get(c, aware) else { continue };
        let best = (0..POLICIES.len())
            .filter_map(|p| get(c, p).map(Outcome::success))
            .fold(0.0, f64::max);
        let pass = a.success() >= best;
        ok &= pass;
        println!(
            "goal ({}): node-aware THP success {} vs best {} ({} local): {}",
            CASES[c].name,
            pct(a.success(), 1),
            pct(best, 1),
            a.local,
            if pass { "PASS" } else { "FAIL" }
        );
    }
    if !ok {
        println!("goal not met");
    }
    Ok(())
}
