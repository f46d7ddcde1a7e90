//! mixed-churn (issue 4): the 2005 fragmentation-avoidance experiment. A
//! long-running mix of unmovable (10%), reclaimable (20%) and movable (70%)
//! allocations of orders 0-3 with heavy-tailed (Pareto) lifetimes, while a
//! second stream asks for order-10 blocks at a steady rate; then "at rest"
//! all movable and reclaimable memory is freed (as reclaim would) and every
//! possible order-10 block is allocated. Run with grouping off and on (and
//! with the placement policy) in one invocation.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::mem::MaybeUninit;

use pageframe_buddy::{BlockInfo, Order, Pfn, PfnRange};
use pageframe_mobility::{AllocMode, MigrateType, MobileZone, MobilityConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::table::{Table, f, pct};

const PB: u64 = 512;
const MAX_BLOCK: u64 = 1024;

struct Variant {
    name: &'static str,
    grouping: bool,
    placement: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "grouping off",
        grouping: false,
        placement: false,
    },
    Variant {
        name: "grouping on (Linux)",
        grouping: true,
        placement: false,
    },
    Variant {
        name: "grouping + placement",
        grouping: true,
        placement: true,
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
    stats: pageframe_mobility::FallbackStats,
}

struct Params {
    steps: u64,
    huge_every: u64,
    huge_hold: u64,
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

fn run_variant(v: &Variant, blocks: u64, p: &Params, seed: u64) -> Result<Outcome, String> {
    let frames = blocks * MAX_BLOCK;
    let span = PfnRange::new(Pfn(0), Pfn(frames));
    let cfg = MobilityConfig {
        grouping: v.grouping,
        placement: v.placement,
        ..MobilityConfig::default()
    };
    let mut meta: Box<[MaybeUninit<u8>]> =
        Box::new_uninit_slice(MobileZone::metadata_bytes(span, cfg));
    let mut z = MobileZone::new(span, cfg, &mut meta).map_err(|e| format!("{e:?}"))?;
    z.add_free_range(span).map_err(|e| format!("{e:?}"))?;
    let mut rng = SmallRng::seed_from_u64(seed);
    // Live objects: pfn -> (order, type); expiries in a min-heap.
    let mut live: std::collections::HashMap<u64, (Order, MigrateType)> = Default::default();
    let mut expiry: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut huge: Vec<(u64, Pfn)> = Vec::new();
    let (mut attempts, mut ok, mut small_failed) = (0u64, 0u64, 0u64);
    let warmup = p.steps / 5;
    let bar = crate::progress::bar(p.steps, v.name);
    for step in 0..p.steps {
        while let Some(&Reverse((t, pfn))) = expiry.peek() {
            if t > step {
                break;
            }
            expiry.pop();
            if let Some((o, _)) = live.remove(&pfn) {
                z.free(Pfn(pfn), o).map_err(|e| format!("{e:?}"))?;
            }
        }
        huge.retain(|&(t, pfn)| {
            if t <= step {
                z.free(pfn, Order::DEFAULT_MAX).is_err()
            } else {
                true
            }
        });
        let (mt, order) = (pick_type(&mut rng), pick_order(&mut rng));
        match z.alloc(order, mt, AllocMode::empty()) {
            Ok(pfn) => {
                live.insert(pfn.get(), (order, mt));
                expiry.push(Reverse((step + lifetime(&mut rng, p), pfn.get())));
            }
            Err(_) => small_failed += 1,
        }
        if step % p.huge_every == 0 && step >= warmup {
            attempts += 1;
            if let Ok(pfn) = z.alloc(Order::DEFAULT_MAX, MigrateType::Movable, AllocMode::empty()) {
                ok += 1;
                huge.push((step + p.huge_hold, pfn));
            }
        }
        if step % 4096 == 0 {
            bar.set_position(step);
        }
    }
    bar.finish_and_clear();
    let used: u64 =
        live.values().map(|(o, _)| o.pages()).sum::<u64>() + huge.len() as u64 * MAX_BLOCK;
    let occupancy = used as f64 / frames as f64;
    // At rest: reclaim frees all movable and reclaimable memory.
    for (pfn, o) in huge.drain(..) {
        z.free(o, Order::DEFAULT_MAX)
            .map_err(|e| format!("huge free {pfn}: {e:?}"))?;
    }
    let keep: Vec<(u64, (Order, MigrateType))> = live
        .drain()
        .filter(|(pfn, (o, mt))| {
            if *mt == MigrateType::Unmovable {
                true
            } else {
                z.free(Pfn(*pfn), *o).is_err()
            }
        })
        .collect();
    // Theoretical maximum: order-10 regions without unmovable frames.
    let mut dirty = vec![false; blocks as usize];
    let mut polluted_blocks = vec![false; (frames / PB) as usize];
    let mut unmovable_frames = 0u64;
    for &(pfn, (o, _)) in &keep {
        dirty[(pfn / MAX_BLOCK) as usize] = true;
        polluted_blocks[(pfn / PB) as usize] = true;
        unmovable_frames += o.pages();
    }
    let at_rest_max = dirty.iter().filter(|d| !**d).count() as u64;
    let mut at_rest = 0;
    while z
        .alloc(Order::DEFAULT_MAX, MigrateType::Movable, AllocMode::empty())
        .is_ok()
    {
        at_rest += 1;
    }
    z.validate().map_err(|e| format!("{e:?}"))?;
    debug_assert!(
        z.buddy()
            .walk(span)
            .all(|(_, b)| !matches!(b, BlockInfo::Hole))
    );
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
        stats: z.stats(),
    })
}

/// Runs every variant and prints the table.
pub fn run(opts: &Opts) -> Result<(), String> {
    let blocks: u64 = opts.get("blocks", 160)?;
    let steps: u64 = opts.get("steps", if opts.quick { 200_000 } else { 1_000_000 })?;
    let occupancy: f64 = opts.get("occupancy", 0.6)?;
    let alpha: f64 = opts.get("alpha", 1.5)?;
    // Mean frames per allocation (orders 0-3 weighted 14/3/2/1 out of 20)
    // times the Pareto mean lifetime (alpha * min / (alpha - 1)) gives the
    // steady-state occupancy: solve for the minimum lifetime.
    let mean_pages = (14.0 + 3.0 * 2.0 + 2.0 * 4.0 + 8.0) / 20.0;
    let frames = (blocks * MAX_BLOCK) as f64;
    let lifetime_min = occupancy * frames / mean_pages * (alpha - 1.0) / alpha;
    let p = Params {
        steps,
        huge_every: opts.get("huge-every", 500)?,
        huge_hold: opts.get("huge-hold", 2000)?,
        lifetime_min,
        alpha,
    };
    println!(
        "mixed-churn: {blocks} order-10 blocks ({} MiB), {steps} steps of one allocation each (10% unmovable, 20% \
         reclaimable, 70% movable; orders 0-3), Pareto lifetimes (alpha {alpha}, min {:.0} steps, target occupancy \
         {:.0}%), an order-10 request every {} steps held {} steps; seed {}",
        blocks * 4,
        lifetime_min,
        occupancy * 100.0,
        p.huge_every,
        p.huge_hold,
        opts.seed
    );
    let mut t = Table::new(&[
        "variant",
        "order-10 under load",
        "at rest",
        "at rest / theoretical",
        "pollution",
        "occupancy",
        "claims whole/partial",
        "steals",
        "small allocs failed",
    ]);
    for v in &VARIANTS {
        let o = run_variant(v, blocks, &p, opts.seed)?;
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
            format!("{}/{}", o.stats.claims_whole, o.stats.claims_partial),
            o.stats.steals.to_string(),
            o.small_failed.to_string(),
        ]);
    }
    println!("\n{}", t.render());
    println!(
        "published (2005, Linux 2.6.14): without grouping 18% under load and 45/160 at rest; with grouping 47% and 159/160.\n\
         goal with grouping: >= 70% under load, >= 99% of the theoretical maximum at rest, pollution <= 1.2"
    );
    Ok(())
}
