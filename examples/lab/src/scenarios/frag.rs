//! frag: LLFree's fragmentation experiment (`frag.rs` of
//! llfree-rs, ATC'23), run on pageframe's default `Machine`, the old
//! default core and `buddy_system_allocator` side by side.
//!
//! Protocol: allocate every frame at order 0, free a random half, then
//! iterate: free a random 10% of the frames held and allocate as many
//! again. After each iteration: huge-page availability = free frames in
//! free, aligned 2 MiB blocks / all free frames. Churn ns/op = time of the
//! iterations' frees and allocations over their number.

use std::path::Path;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::churn::{self, Churn};
use crate::plot::{self, Series};
use crate::table::{Table, f, pct};

struct Outcome {
    name: &'static str,
    availability: Vec<f64>,
    ns_per_op: f64,
}

fn run_one(a: &mut dyn Churn, frames: u64, iters: usize, seed: u64) -> Result<Outcome, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut live: Vec<u64> = std::iter::from_fn(|| a.alloc()).collect();
    if live.len() as u64 != frames {
        return Err(format!("{}: filled {} of {frames}", a.name(), live.len()));
    }
    for _ in 0..frames / 2 {
        let p = live.swap_remove(rng.gen_range(0..live.len()));
        a.free(p);
    }
    let mut free = frames - live.len() as u64;
    let mut availability = vec![a.huge_free() as f64 / free as f64];
    let bar = crate::progress::bar(iters as u64, a.name());
    let (mut ops, mut spent) = (0u64, std::time::Duration::ZERO);
    for _ in 0..iters {
        let n = live.len() / 10;
        let t = Instant::now();
        for _ in 0..n {
            let p = live.swap_remove(rng.gen_range(0..live.len()));
            a.free(p);
        }
        for _ in 0..n {
            live.push(a.alloc().ok_or("out of memory while refilling")?);
        }
        spent += t.elapsed();
        ops += 2 * n as u64;
        free = frames - live.len() as u64;
        availability.push(a.huge_free() as f64 / free as f64);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(Outcome {
        name: a.name(),
        availability,
        ns_per_op: spent.as_nanos() as f64 / ops as f64,
    })
}

/// Runs every allocator and prints the table.
pub fn run(opts: &Opts) -> Result<(), String> {
    let gib: u64 = opts.get("gib", if opts.quick { 2 } else { 16 })?;
    let iters: usize = opts.get("iters", 100)?;
    let frames = gib << 18;
    println!(
        "frag (LLFree's frag.rs method): {gib} GiB ({frames} frames), all allocated at order 0, a random half freed, \
         then {iters} iterations each replacing a random 10% of the frames held; seed {}",
        opts.seed
    );
    let mut results = Vec::new();
    for mut a in churn::all(frames) {
        results.push(run_one(a.as_mut(), frames, iters, opts.seed)?);
    }
    let marks: Vec<usize> = [0, 10, 30, 50, iters.saturating_sub(1), iters]
        .into_iter()
        .filter(|&i| i <= iters)
        .collect();
    let mut head = vec!["allocator".to_string()];
    head.extend(marks.iter().map(|i| format!("avail @{i}")));
    head.push("churn ns/op".into());
    let head_ref: Vec<&str> = head.iter().map(String::as_str).collect();
    let mut t = Table::new(&head_ref);
    for o in &results {
        let mut row = vec![o.name.to_string()];
        row.extend(marks.iter().map(|&i| pct(o.availability[i], 1)));
        row.push(f(o.ns_per_op, 1));
        t.row(row);
    }
    println!(
        "\nhuge-page availability after iteration i (free frames in free 2 MiB blocks / all free frames):\n"
    );
    println!("{}", t.render());
    println!(
        "goal (default configuration): >= 98.5% at iteration 99, through the zone and through a CPU's cache"
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
        let path = opts.out.join("frag-availability.svg");
        plot::lines(
            Path::new(&path),
            "frag: huge-page availability under order-0 churn",
            "iteration",
            "% of free memory in 2 MiB blocks",
            &series,
        )?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
