//! backoff: proactive compaction against memory it cannot fix.
//! Every frame is allocated movable, 3/4 of every 2 MiB block is freed, and
//! every remaining frame is pinned, so compaction can move nothing and the
//! fragmentation score stays at its maximum. kcompactd (proactiveness 20)
//! ticks every 500 ms of simulated time; after a run that does not lower
//! the score it must back off for 500 ms << 6 (about 32 s) instead of
//! rescanning the zone twice a second. Halfway through, the frames are
//! unpinned: the next check after the back-off must compact.
//!
//! CPU time is the wall time spent inside `tick` (the zone scans are real);
//! the "no back-off" column is what the same ticks would cost if every
//! check ran a compaction at the measured cost per run.
//!
//! Options: `--gib N` (default 0.5), `--seconds S` simulated (default 600),
//! `--unpin-at S` (default half of `--seconds`).

use std::path::Path;
use std::time::Instant;

use super::compact_common::{LabMigrator, NODE, PB, Pattern, World};
use crate::args::Opts;
use crate::plot::{self, Series};
use crate::table::{Table, f};

const TICK_NS: u64 = 500_000_000;

pub fn run(opts: &Opts) -> Result<(), String> {
    let gib: f64 = opts.get("gib", if opts.quick { 0.125 } else { 0.5 })?;
    let seconds: u64 = opts.get("seconds", if opts.quick { 200 } else { 600 })?;
    let unpin_at: u64 = opts.get("unpin-at", seconds / 2)?;
    let frames = ((gib * (1u64 << 30) as f64) as u64 / 4096) / PB * PB;
    if frames < 16 * PB {
        return Err("--gib too small (at least 32 MiB)".into());
    }
    let mut m = World::new(frames)?;
    m.fragment(Pattern::Stride, opts.seed);
    m.machine
        .tunables()
        .set_proactiveness(20)
        .map_err(|e| e.to_string())?;
    let pinned = m.set_pins(true);
    println!(
        "backoff: {} MiB zone, {} frames in use, all pinned until t = {unpin_at} s; kcompactd proactiveness 20, a tick every 500 ms for {seconds} s (simulated)",
        frames >> 8,
        pinned
    );
    let mut mig = LabMigrator::new(&m);
    let mut cpu_ms = 0.0f64;
    let mut run_costs = Vec::new();
    let mut cum = Vec::new();
    let mut runs_log = Vec::new();
    let (mut pinned_ticks, mut pinned_cpu) = (0u64, 0.0f64);
    let mut recovered: Option<(f64, u32, u32)> = None;
    let mut unpinned = false;
    let ticks = seconds * 1_000_000_000 / TICK_NS;
    for i in 0..=ticks {
        let now = i * TICK_NS;
        if !unpinned && now >= unpin_at * 1_000_000_000 {
            m.set_pins(false);
            unpinned = true;
        }
        let t = Instant::now();
        let rep = m.machine.kcompactd_tick(NODE, now, &mut mig);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        cpu_ms += ms;
        if !unpinned {
            pinned_ticks += 1;
            pinned_cpu += ms;
        }
        if let Some((before, after)) = rep.proactive {
            runs_log.push((now as f64 / 1e9, before, after, ms));
            if !unpinned {
                run_costs.push(ms);
            } else if recovered.is_none() {
                recovered = Some((now as f64 / 1e9, before, after));
            }
        }
        cum.push((now as f64 / 1e9, cpu_ms));
    }
    m.owners.verify(&m.mem)?;
    let st = m.machine.inspect().stats(NODE).kcompactd;
    let per_run = run_costs.iter().sum::<f64>() / run_costs.len().max(1) as f64;
    let every_check_ms = per_run * pinned_ticks as f64;
    let mut t = Table::new(&["t (s)", "score before", "score after", "run ms"]);
    for &(ts, b, a, ms) in &runs_log {
        t.row(vec![f(ts, 1), b.to_string(), a.to_string(), f(ms, 2)]);
    }
    println!("\nproactive runs:\n\n{}", t.render());
    let mut t = Table::new(&["while pinned", "value"]);
    t.row(vec!["ticks".into(), pinned_ticks.to_string()]);
    t.row(vec!["proactive runs".into(), run_costs.len().to_string()]);
    t.row(vec![
        "CPU in kcompactd".into(),
        format!(
            "{} ms ({} ms per simulated minute)",
            f(pinned_cpu, 1),
            f(pinned_cpu / (unpin_at.max(1) as f64 / 60.0), 2)
        ),
    ]);
    t.row(vec![
        "cost of one run (full zone scan)".into(),
        format!("{} ms", f(per_run, 2)),
    ]);
    t.row(vec![
        "same ticks without back-off (estimated)".into(),
        format!("{} ms", f(every_check_ms, 1)),
    ]);
    t.row(vec![
        "saved by the back-off".into(),
        format!("{}x", f(every_check_ms / pinned_cpu.max(1e-9), 1)),
    ]);
    println!("{}", t.render());
    let mut t = Table::new(&["kcompactd counters (whole run)", "value"]);
    t.row(vec!["checks".into(), st.proactive_checks.to_string()]);
    t.row(vec!["runs".into(), st.proactive_runs.to_string()]);
    t.row(vec!["back-offs".into(), st.backoffs.to_string()]);
    t.row(vec![
        "ticks skipped (idle)".into(),
        st.idle_ticks.to_string(),
    ]);
    t.row(vec![
        "  of which inside a back-off".into(),
        st.backoff_ticks.to_string(),
    ]);
    match recovered {
        Some((ts, b, a)) => t.row(vec![
            "after unpinning".into(),
            format!(
                "first run at t = {} s ({} s after unpinning): score {b} -> {a}",
                f(ts, 1),
                f(ts - unpin_at as f64, 1)
            ),
        ]),
        None => t.row(vec!["after unpinning".into(), "no run".into()]),
    }
    let final_score = m.machine.inspect().fragmentation_score(NODE).unwrap_or(0);
    t.row(vec!["final node score".into(), final_score.to_string()]);
    println!("{}", t.render());
    if !opts.no_plot {
        let path = opts.out.join("compact-backoff.svg");
        let without: Vec<(f64, f64)> = cum
            .iter()
            .enumerate()
            .filter(|(_, p)| p.0 <= unpin_at as f64)
            .map(|(i, p)| (p.0, per_run * (i + 1) as f64))
            .collect();
        plot::lines(
            Path::new(&path),
            "backoff: kcompactd CPU time with every frame pinned",
            "simulated time (s)",
            "cumulative CPU ms",
            &[
                Series {
                    label: "with back-off (measured)".into(),
                    points: cum.clone(),
                },
                Series {
                    label: "every 500 ms check compacting (estimated)".into(),
                    points: without,
                },
            ],
        )?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
