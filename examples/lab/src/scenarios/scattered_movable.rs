//! scattered-movable (issue 4): order-0 movable churn over a large zone, and
//! how much free memory stays usable as 2 MiB blocks, with and without the
//! placement policy. Migratetypes alone cannot help here (every frame is
//! movable); the placement policy (fill the fullest pageblocks first) can.
//!
//! Protocol: allocate 90% of the zone's frames at order 0 (movable), free a
//! random half, then iterate: free a random 10% of the zone's frames (from
//! the allocated ones) and allocate as many again. After each iteration:
//! huge-frame availability = free frames in free blocks of order >= 9 /
//! all free frames, and the compaction debt = the fewest 4 KiB moves that
//! would turn all free memory into whole 2 MiB blocks (greedy: empty the
//! least-used pageblocks into the holes of the fullest).

use std::path::Path;
use std::time::Instant;

use std::mem::MaybeUninit;

use pageframe::{
    Gfp, Machine, MachineConfig, MobileZone, MobilityConfig, NodeId, Order, Pfn, PfnRange, ZoneKind,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::plot::{self, Series};
use crate::table::{Table, f, pct};

/// Frames per pageblock (2 MiB).
const PB: u64 = 512;

struct Variant {
    name: &'static str,
    grouping: bool,
}

const VARIANTS: [Variant; 2] = [
    Variant {
        name: "grouping off",
        grouping: false,
    },
    Variant {
        name: "grouping on (default)",
        grouping: true,
    },
];

struct Outcome {
    availability: Vec<f64>,
    debt: Vec<u64>,
    ns_per_op: f64,
}

/// Free frames in blocks of order >= 9 over all free frames.
fn availability(z: &MobileZone<'_>) -> f64 {
    let nr = z.nr_free();
    let free: u64 = nr.iter().enumerate().map(|(o, n)| n << o).sum();
    let huge: u64 = nr.iter().enumerate().skip(9).map(|(o, n)| n << o).sum();
    if free == 0 {
        0.0
    } else {
        huge as f64 / free as f64
    }
}

/// Fewest frames to move so that all free memory is whole pageblocks.
fn debt(used: &[u64]) -> u64 {
    let free: u64 = used.iter().map(|u| PB - u).sum();
    let mut sorted = used.to_vec();
    sorted.sort_unstable();
    sorted.iter().take((free / PB) as usize).sum()
}

fn run_variant(v: &Variant, frames: u64, iters: usize, seed: u64) -> Result<Outcome, String> {
    let span = PfnRange::new(Pfn(0), Pfn(frames));
    let cfg = MobilityConfig {
        grouping: v.grouping,
        ..MobilityConfig::DEFAULT
    };
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> = Box::leak(Machine::new_boxed(MachineConfig {
        mobility: cfg,
        ..MachineConfig::SINGLE_NODE
    }));
    let meta: &'static mut [MaybeUninit<u8>] =
        Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    let node = NodeId::ZERO;
    m.add_zone(node, ZoneKind::Normal, span, meta)
        .map_err(|e| e.to_string())?;
    m.add_free_range(span).map_err(|e| e.to_string())?;
    let m: &'static Machine<'static> = m;
    let zone = m
        .node(node)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or("zone")?;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut used = vec![0u64; (frames / PB) as usize];
    let mut live: Vec<Pfn> = Vec::with_capacity(frames as usize);
    let alloc = |used: &mut [u64], live: &mut Vec<Pfn>| -> Result<(), String> {
        let p = m
            .alloc(node, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .map_err(|e| e.to_string())?
            .pfn;
        used[(p.get() / PB) as usize] += 1;
        live.push(p);
        Ok(())
    };
    for _ in 0..frames * 9 / 10 {
        alloc(&mut used, &mut live)?;
    }
    let free_one = |used: &mut [u64], live: &mut Vec<Pfn>, rng: &mut SmallRng| {
        let p = live.swap_remove(rng.gen_range(0..live.len()));
        used[(p.get() / PB) as usize] -= 1;
        m.free(p, Order::ZERO).map_err(|e| e.to_string())
    };
    for _ in 0..live.len() / 2 {
        free_one(&mut used, &mut live, &mut rng)?;
    }
    let mut out = Outcome {
        availability: vec![zone.inspect(availability)],
        debt: vec![debt(&used)],
        ns_per_op: 0.0,
    };
    let churn = frames / 10;
    let bar = crate::progress::bar(iters as u64, v.name);
    let mut ops = 0u64;
    let t = Instant::now();
    for _ in 0..iters {
        for _ in 0..churn {
            free_one(&mut used, &mut live, &mut rng)?;
        }
        for _ in 0..churn {
            alloc(&mut used, &mut live)?;
        }
        ops += 2 * churn;
        out.availability.push(zone.inspect(availability));
        out.debt.push(debt(&used));
        bar.inc(1);
    }
    out.ns_per_op = t.elapsed().as_nanos() as f64 / ops as f64;
    bar.finish_and_clear();
    m.validate().map_err(|e| e.to_string())?;
    Ok(out)
}

/// Runs every variant and prints the table.
pub fn run(opts: &Opts) -> Result<(), String> {
    let gib: u64 = opts.get("gib", if opts.quick { 2 } else { 16 })?;
    let iters: usize = opts.get("iters", 100)?;
    let frames = gib << 18;
    println!(
        "scattered-movable: {gib} GiB ({frames} frames), 90% allocated at order 0, half freed, then {iters} iterations of \
         free 10% of the zone / reallocate; seed {}",
        opts.seed
    );
    let mut results = Vec::new();
    for v in &VARIANTS {
        results.push((v, run_variant(v, frames, iters, opts.seed)?));
    }
    let marks: Vec<usize> = [0, 10, 30, 50, iters - 1, iters]
        .into_iter()
        .filter(|&i| i <= iters)
        .collect();
    let mut head = vec!["variant".to_string()];
    head.extend(marks.iter().map(|i| format!("avail @{i}")));
    head.push(format!("debt @{iters} (moves)"));
    head.push("ns/op".into());
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(&head_ref);
    for (v, o) in &results {
        let mut row = vec![v.name.to_string()];
        row.extend(marks.iter().map(|&i| pct(o.availability[i], 1)));
        row.push(o.debt[iters].to_string());
        row.push(f(o.ns_per_op, 1));
        t.row(row);
    }
    println!(
        "\nhuge-frame availability after iteration i (free frames in free blocks of order >= 9 / all free frames):\n"
    );
    println!("{}", t.render());
    println!(
        "goal (grouping + placement): >= 93% at iteration 99, >= 80% at iteration 30, without compaction"
    );
    if !opts.no_plot {
        let series: Vec<Series> = results
            .iter()
            .map(|(v, o)| Series {
                label: v.name.to_string(),
                points: o
                    .availability
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (i as f64, a * 100.0))
                    .collect(),
            })
            .collect();
        let path = opts.out.join("mobility-scattered.svg");
        plot::lines(
            Path::new(&path),
            "scattered-movable: huge-frame availability",
            "iteration",
            "% of free memory in 2 MiB blocks",
            &series,
        )?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
