//! mixed-churn: the 2005 fragmentation-avoidance experiment. A
//! long-running mix of unmovable (10%), reclaimable (20%) and movable (70%)
//! allocations of orders 0-3 with heavy-tailed (Pareto) lifetimes, while a
//! second stream asks for order-10 blocks at a steady rate; then "at rest"
//! all movable and reclaimable memory is freed (as reclaim would) and every
//! possible order-10 block is allocated. Run with grouping off and on (and
//! with `defrag_mode`) in one invocation.
//!
//! The order-10 blocks are held until the load ends (as the 2005 test's
//! module did). Everything goes through a `pageframe` machine's slow path
//! (`alloc_slow`), whose direct reclaim is the lab's: memory runs full, so
//! a small request's reclaim evicts random movable and reclaimable objects
//! (page cache, shrinkable caches), and an order-10 request's reclaim picks
//! up to `--reclaim-tries` random 4 MiB regions and evicts the objects of
//! the first that holds no unmovable frame. There is no compaction (every
//! migration is refused): grouping alone decides how many regions stay
//! usable. `defrag_mode` is the machine's tunable.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::mem::MaybeUninit;

use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    zone::{MigrateType, MobilityConfig},
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::table::{Table, f, pct};

const PB: u64 = 512;
const MAX_BLOCK: u64 = 1024;

struct Variant {
    name: &'static str,
    grouping: bool,
    /// `vm.defrag_mode=1` (spec 02 §5.5): no fragmenting fallback until
    /// reclaim has failed.
    defrag_mode: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "grouping off",
        grouping: false,
        defrag_mode: false,
    },
    Variant {
        name: "grouping, defrag_mode off (Linux)",
        grouping: true,
        defrag_mode: false,
    },
    Variant {
        name: "grouping + defrag_mode (default)",
        grouping: true,
        defrag_mode: true,
    },
];

struct Outcome {
    huge_attempts: u64,
    huge_ok: u64,
    small_failed: u64,
    at_rest: u64,
    at_rest_max: u64,
    blocks: u64,
    polluted: u64,
    polluted_min: u64,
    occupancy: f64,
    reclaimed: u64,
    stats: pageframe::zone::FallbackStats,
    /// The zone's pageblocks at the end of the load and at rest.
    maps: (
        Vec<pageframe::zone::PageblockUse>,
        Vec<pageframe::zone::PageblockUse>,
    ),
}

struct Params {
    steps: u64,
    huge_every: u64,
    huge_hold: u64,
    reclaim_tries: u32,
    lifetime_min: f64,
    alpha: f64,
}

fn pick_type(rng: &mut SmallRng) -> MigrateType {
    match rng.gen_range(0..10) {
        0 => MigrateType::Unmovable,
        1 | 2 => MigrateType::Reclaimable,
        _ => MigrateType::Movable,
    }
}

fn pick_order(rng: &mut SmallRng) -> Order {
    let k = match rng.gen_range(0..20) {
        0..=13 => 0,
        14..=16 => 1,
        17..=18 => 2,
        _ => 3,
    };
    Order::new(k).unwrap_or_default()
}

/// Pareto(x_min, alpha) lifetime in steps.
fn lifetime(rng: &mut SmallRng, p: &Params) -> u64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    (p.lifetime_min / u.powf(1.0 / p.alpha)).min(1e12) as u64
}

/// The lab's direct reclaim for the machine's slow path, over the live
/// objects: see the module docs. Migrations are refused (no compaction).
struct Reclaim<'m> {
    machine: &'m Machine<'static>,
    live: BTreeMap<u64, (Block, MigrateType)>,
    /// Huge blocks held, with the step they are given back at.
    huge: Vec<(u64, Block)>,
    rng: SmallRng,
    /// Serving an order-10 request: evict whole regions.
    regions: bool,
    reclaim_tries: u32,
    blocks: u64,
    reclaimed: u64,
}

impl Reclaim<'_> {
    fn evict(&mut self, pfn: u64) -> u64 {
        let Some((b, _)) = self.live.remove(&pfn) else {
            return 0;
        };
        let pages = b.order().pages();
        if self.machine.free(b).is_err() {
            return 0;
        }
        self.reclaimed += pages;
        pages
    }
}

impl Migrator for Reclaim<'_> {
    // Nothing moves: the lab's reclaim frees instead.
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<Block> {
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }
    fn putback(&mut self, b: Block) {
        let _ = b.into_raw();
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        let _ = b.into_raw();
    }
}

impl SlowPathHooks for Reclaim<'_> {
    fn reclaim(&mut self, _: NodeId, _: ZoneKind, pages: u64) -> u64 {
        let mut freed = 0;
        if self.regions {
            for _ in 0..self.reclaim_tries {
                let region = self.rng.gen_range(0..self.blocks) * MAX_BLOCK;
                let range = region..region + MAX_BLOCK;
                let pinned = self
                    .live
                    .range(range.clone())
                    .any(|(_, (_, mt))| *mt == MigrateType::Unmovable)
                    || self
                        .huge
                        .iter()
                        .any(|(_, h)| range.contains(&h.pfn().get()));
                if pinned {
                    continue;
                }
                let evict: Vec<u64> = self.live.range(range).map(|(&p, _)| p).collect();
                for p in evict {
                    freed += self.evict(p);
                }
                break;
            }
            return freed;
        }
        for _ in 0..64 {
            if freed >= pages {
                break;
            }
            let at = self.rng.gen_range(0..self.blocks * MAX_BLOCK);
            let victim = self
                .live
                .range(at..)
                .chain(self.live.range(..at))
                .find(|(_, (_, t))| *t != MigrateType::Unmovable)
                .map(|(&pfn, _)| pfn);
            let Some(pfn) = victim else { break };
            freed += self.evict(pfn);
        }
        freed
    }
}

fn gfp_of(mt: MigrateType) -> Gfp {
    match mt {
        MigrateType::Movable => Gfp::KERNEL | Gfp::MOVABLE,
        MigrateType::Reclaimable => Gfp::KERNEL | Gfp::RECLAIMABLE,
        _ => Gfp::KERNEL,
    }
}

fn run_variant(v: &Variant, blocks: u64, p: &Params, seed: u64) -> Result<Outcome, String> {
    let frames = blocks * MAX_BLOCK;
    let span = PfnRange::new(Pfn(0), Pfn(frames));
    let cfg = MobilityConfig {
        grouping: v.grouping,
        ..MobilityConfig::DEFAULT
    };
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> = Box::leak(
        pageframe::boot::Builder::new(MachineConfig {
            mobility: cfg,
            ..MachineConfig::SINGLE_NODE
        })
        .build_boxed(),
    );
    let meta: &'static mut [MaybeUninit<u8>] =
        Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    let node = NodeId::ZERO;
    m.add_zone(node, ZoneKind::Normal, span, meta)
        .map_err(|e| e.to_string())?;
    m.add_free_range(span).map_err(|e| e.to_string())?;
    m.tunables().set_defrag_mode(v.defrag_mode);
    let m: &'static Machine<'static> = m;
    let zone = m
        .inspect()
        .node(node)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or("zone")?;
    let mut r = Reclaim {
        machine: m,
        live: BTreeMap::new(),
        huge: Vec::new(),
        rng: SmallRng::seed_from_u64(seed),
        regions: false,
        reclaim_tries: p.reclaim_tries,
        blocks,
        reclaimed: 0,
    };
    // Expiries of live objects in a min-heap.
    let mut expiry: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let (mut attempts, mut ok, mut small_failed) = (0u64, 0u64, 0u64);
    let warmup = p.steps / 5;
    let huge_gfp = Gfp::KERNEL | Gfp::MOVABLE;
    let bar = crate::progress::bar(p.steps, v.name);
    for step in 0..p.steps {
        while let Some(&Reverse((t, pfn))) = expiry.peek() {
            if t > step {
                break;
            }
            expiry.pop();
            if let Some((b, _)) = r.live.remove(&pfn) {
                m.free(b).map_err(|e| e.to_string())?;
            }
        }
        let due: Vec<usize> = (0..r.huge.len())
            .rev()
            .filter(|&i| r.huge[i].0 <= step && r.huge[i].0 != u64::MAX)
            .collect();
        for i in due {
            let (_, b) = r.huge.swap_remove(i);
            m.free(b).map_err(|e| e.to_string())?;
        }
        let (mt, order) = (pick_type(&mut r.rng), pick_order(&mut r.rng));
        r.regions = false;
        match m.alloc_slow(node, gfp_of(mt), order, &mut r) {
            Ok(a) => {
                let pfn = a.pfn().get();
                r.live.insert(pfn, (a, mt));
                let life = lifetime(&mut r.rng, p);
                expiry.push(Reverse((step + life, pfn)));
            }
            Err(_) => small_failed += 1,
        }
        if step % p.huge_every == 0 && step >= warmup {
            attempts += 1;
            r.regions = true;
            if let Ok(a) = m.alloc_slow(node, huge_gfp, Order::DEFAULT_MAX, &mut r) {
                ok += 1;
                r.huge.push((step.saturating_add(p.huge_hold), a));
            }
        }
        if step % 4096 == 0 {
            bar.set_position(step);
        }
    }
    bar.finish_and_clear();
    let map_load: Vec<_> = zone.pageblocks().collect();
    let used: u64 = r.live.values().map(|(b, _)| b.order().pages()).sum::<u64>()
        + r.huge.len() as u64 * MAX_BLOCK;
    let occupancy = used as f64 / frames as f64;
    // At rest: reclaim frees all movable and reclaimable memory.
    for (t, b) in r.huge.drain(..) {
        m.free(b).map_err(|e| format!("huge free (due {t}): {e}"))?;
    }
    let mut keep: Vec<(u64, Order)> = Vec::new();
    for (pfn, (b, mt)) in std::mem::take(&mut r.live) {
        if mt == MigrateType::Unmovable {
            keep.push((pfn, b.order()));
            let _ = b.into_raw(); // held to the end of the run
        } else {
            m.free(b).map_err(|e| e.to_string())?;
        }
    }
    let map_rest: Vec<_> = zone.pageblocks().collect();
    let mut polluted_blocks = vec![false; (frames / PB) as usize];
    let mut unmovable_frames = 0u64;
    for &(pfn, o) in &keep {
        polluted_blocks[(pfn / PB) as usize] = true;
        unmovable_frames += o.pages();
    }
    // Theoretical maximum: the unmovable memory packed perfectly would
    // occupy ceil(frames / 1024) regions; every other region could be free.
    let at_rest_max = blocks - unmovable_frames.div_ceil(MAX_BLOCK);
    let mut at_rest = 0;
    while m
        .alloc(node, huge_gfp | Gfp::MEMALLOC, Order::DEFAULT_MAX)
        .is_ok()
    {
        at_rest += 1;
    }
    m.validate().map_err(|e| e.to_string())?;
    Ok(Outcome {
        huge_attempts: attempts,
        huge_ok: ok,
        small_failed,
        at_rest,
        at_rest_max,
        blocks,
        polluted: polluted_blocks.iter().filter(|b| **b).count() as u64,
        polluted_min: unmovable_frames.div_ceil(PB),
        occupancy,
        reclaimed: r.reclaimed,
        stats: zone.fallback_stats(),
        maps: (map_load, map_rest),
    })
}

/// Runs every variant and prints the table.
pub fn run(opts: &Opts) -> Result<(), String> {
    let blocks: u64 = opts.get("blocks", 160)?;
    let steps: u64 = opts.get("steps", if opts.quick { 200_000 } else { 1_000_000 })?;
    // Demand above memory: it stays full and reclaim runs, as with page cache.
    let occupancy: f64 = opts.get("occupancy", 1.1)?;
    let alpha: f64 = opts.get("alpha", 1.5)?;
    // Mean frames per allocation (orders 0-3 weighted 14/3/2/1 out of 20)
    // times the Pareto mean lifetime (alpha * min / (alpha - 1)) gives the
    // steady-state occupancy: solve for the minimum lifetime.
    let mean_pages = (14.0 + 3.0 * 2.0 + 2.0 * 4.0 + 8.0) / 20.0;
    let frames = (blocks * MAX_BLOCK) as f64;
    let lifetime_min = occupancy * frames / mean_pages * (alpha - 1.0) / alpha;
    let p = Params {
        steps,
        huge_every: opts.get("huge-every", (steps * 4 / 5 / 100).max(1))?,
        huge_hold: opts.get("huge-hold", u64::MAX)?,
        reclaim_tries: opts.get("reclaim-tries", 8)?,
        lifetime_min,
        alpha,
    };
    println!(
        "mixed-churn: {blocks} order-10 blocks ({} MiB), {steps} steps of one allocation each (10% unmovable, 20% \
         reclaimable, 70% movable; orders 0-3), Pareto lifetimes (alpha {alpha}, min {:.0} steps, target occupancy \
         {:.0}%, memory stays full and reclaim evicts movable/reclaimable objects), an order-10 request every {} \
         steps after warm-up, held to the end (direct reclaim tries {} regions); seed {}",
        blocks * 4,
        lifetime_min,
        occupancy * 100.0,
        p.huge_every,
        p.reclaim_tries,
        opts.seed
    );
    let mut t = Table::new(&[
        "variant",
        "order-10 under load",
        "at rest",
        "at rest / theoretical",
        "pollution",
        "occupancy",
        "reclaimed frames",
        "claims whole/partial",
        "steals",
        "small allocs failed",
    ]);
    let mut maps = Vec::new();
    for v in &VARIANTS {
        let o = run_variant(v, blocks, &p, opts.seed)?;
        maps.push((
            format!("{}: at the end of the load", v.name),
            o.maps.0.clone(),
        ));
        maps.push((
            format!(
                "{}: at rest (movable and reclaimable memory reclaimed)",
                v.name
            ),
            o.maps.1.clone(),
        ));
        t.row(vec![
            v.name.to_string(),
            format!(
                "{} ({}/{})",
                pct(o.huge_ok as f64 / o.huge_attempts.max(1) as f64, 1),
                o.huge_ok,
                o.huge_attempts
            ),
            format!("{}/{}", o.at_rest, o.blocks),
            pct(o.at_rest as f64 / o.at_rest_max.max(1) as f64, 1),
            format!(
                "{} ({}/{})",
                f(o.polluted as f64 / o.polluted_min.max(1) as f64, 2),
                o.polluted,
                o.polluted_min
            ),
            pct(o.occupancy, 1),
            o.reclaimed.to_string(),
            format!("{}/{}", o.stats.claims_whole, o.stats.claims_partial),
            o.stats.steals.to_string(),
            o.small_failed.to_string(),
        ]);
    }
    println!("\n{}", t.render());
    std::fs::create_dir_all(&opts.out).map_err(|e| e.to_string())?;
    let path = opts.out.join("mixed-churn-map.svg");
    crate::plot::pageblock_maps(&path, "mixed-churn: one square a 2 MiB pageblock", &maps)?;
    println!("fragmentation maps: {}", path.display());
    println!(
        "published (2005, Linux 2.6.14): without grouping 18% under load and 45/160 at rest; with grouping 47% and 159/160.\n\
         goal with grouping: >= 70% under load, >= 99% of the theoretical maximum at rest, pollution <= 1.2"
    );
    Ok(())
}
