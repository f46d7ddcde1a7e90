//! scattered-movable: order-0 movable churn over a large zone, and
//! how much free memory stays usable as 2 MiB blocks. Migratetypes alone
//! cannot help here (every frame is movable); filling the fullest pageblock
//! first (the buddy core's default) can, through the zone and through a
//! CPU's cache. `buddy_system_allocator` runs beside it.
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

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::churn::{self, Churn};
use crate::plot::{self, Series};
use crate::table::{Table, f, pct};

/// Frames per pageblock (2 MiB).
const PB: u64 = churn::HUGE;

struct Outcome {
    name: &'static str,
    availability: Vec<f64>,
    debt: Vec<u64>,
    ns_per_op: f64,
}

/// Fewest frames to move so that all free memory is whole pageblocks.
fn debt(used: &[u64]) -> u64 {
    let free: u64 = used.iter().map(|u| PB - u).sum();
    let mut sorted = used.to_vec();
    sorted.sort_unstable();
    sorted.iter().take((free / PB) as usize).sum()
}

fn run_one(a: &mut dyn Churn, frames: u64, iters: usize, seed: u64) -> Result<Outcome, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut used = vec![0u64; frames.div_ceil(PB) as usize];
    let mut live: Vec<u64> = Vec::with_capacity(frames as usize);
    let alloc = |a: &mut dyn Churn, used: &mut [u64], live: &mut Vec<u64>| -> Result<(), String> {
        let p = a.alloc().ok_or("out of memory")?;
        used[(p / PB) as usize] += 1;
        live.push(p);
        Ok(())
    };
    for _ in 0..frames * 9 / 10 {
        alloc(a, &mut used, &mut live)?;
    }
    let free_one =
        |a: &mut dyn Churn, used: &mut [u64], live: &mut Vec<u64>, rng: &mut SmallRng| {
            let p = live.swap_remove(rng.gen_range(0..live.len()));
            used[(p / PB) as usize] -= 1;
            a.free(p);
        };
    for _ in 0..live.len() / 2 {
        free_one(a, &mut used, &mut live, &mut rng);
    }
    let avail = |a: &mut dyn Churn, live: &[u64]| {
        a.huge_free() as f64 / (frames - live.len() as u64) as f64
    };
    let mut out = Outcome {
        name: a.name(),
        availability: vec![avail(a, &live)],
        debt: vec![debt(&used)],
        ns_per_op: 0.0,
    };
    let churn = frames / 10;
    let bar = crate::progress::bar(iters as u64, a.name());
    let (mut ops, mut spent) = (0u64, std::time::Duration::ZERO);
    for _ in 0..iters {
        let t = Instant::now();
        for _ in 0..churn {
            free_one(a, &mut used, &mut live, &mut rng);
        }
        for _ in 0..churn {
            alloc(a, &mut used, &mut live)?;
        }
        spent += t.elapsed();
        ops += 2 * churn;
        out.availability.push(avail(a, &live));
        out.debt.push(debt(&used));
        bar.inc(1);
    }
    out.ns_per_op = spent.as_nanos() as f64 / ops as f64;
    bar.finish_and_clear();
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
    for mut a in churn::all(frames) {
        results.push(run_one(a.as_mut(), frames, iters, opts.seed)?);
    }
    let marks: Vec<usize> = [0, 10, 30, 50, iters - 1, iters]
        .into_iter()
        .filter(|&i| i <= iters)
        .collect();
    let mut head = vec!["allocator".to_string()];
    head.extend(marks.iter().map(|i| format!("avail @{i}")));
    head.push(format!("debt @{iters} (moves)"));
    head.push("ns/op".into());
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(&head_ref);
    for o in &results {
        let mut row = vec![o.name.to_string()];
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
        "goal (the default): >= 93% at iteration 99, >= 80% at iteration 30, without compaction"
    );
    if !opts.no_plot {
        let series: Vec<Series> = results
            .iter()
            .map(|o| Series {
                label: o.name.to_string(),
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
