//! pcp-tune: two CPUs, one allocating bursts of order-0 frames
//! and the other freeing them, through a machine's per-CPU caches (each
//! CPU's handle); `high` auto-tuned vs fixed (`percpu_pagelist_high_fraction`
//! set so that `high` stays at what auto-tuning starts from). Prints
//! zone-lock acquisitions per 1000 operations and plots `high` over the run.

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use pageframe::CpuId;
use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};

use crate::args::Opts;
use crate::plot::{self, Series};
use crate::table::{Table, f, pct};

struct Run {
    allocs: u64,
    reached_zone: u64,
    zone_locks: u64,
    ops: u64,
    ns_per_op: f64,
    high0: Vec<(f64, f64)>,
    high1: Vec<(f64, f64)>,
    idle: Vec<(u32, u32, u32)>,
}

fn run_one(frames: u64, burst: usize, total: usize, fixed: bool) -> Result<Run, String> {
    let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + frames));
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> =
        Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
    let meta: &'static mut [MaybeUninit<u8>] =
        Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .map_err(|e| e.to_string())?;
    m.add_free_range(span).map_err(|e| e.to_string())?;
    let bytes = m.pcp_bytes(2).map_err(|e| e.to_string())?;
    m.enable_pcp(2, Box::leak(Box::new_uninit_slice(bytes)))
        .map_err(|e| e.to_string())?;
    let m: &'static Machine<'static> = m;
    let zone = m
        .inspect()
        .node(NodeId::ZERO)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or("zone")?;
    if fixed {
        // Fixed high = managed / fraction / CPUs: the fraction that keeps
        // it where auto-tuning starts (high_min = the low watermark / CPUs).
        let fraction = (frames / zone.watermarks().low.max(1)).max(8) as u32;
        m.tunables()
            .set_pcp_high_fraction(fraction)
            .map_err(|e| e.to_string())?;
    }
    let rounds = (total / burst).max(20);
    let warm = rounds / 10;
    let every = (rounds / 100).max(1);
    let (tx, rx) = mpsc::sync_channel::<Vec<pageframe::Block>>(2);
    let stats = |c: &mut pageframe::CpuCache<'_, 'static>| {
        c.cache_info(NodeId::ZERO, ZoneKind::Normal)
            .map(|s| s.stats)
            .unwrap_or_default()
    };
    let high = |c: &mut pageframe::CpuCache<'_, 'static>| {
        c.cache_info(NodeId::ZERO, ZoneKind::Normal)
            .map_or(0, |s| s.high)
    };
    let (a, b) = std::thread::scope(|sc| {
        let producer = sc.spawn(move || -> Result<_, String> {
            let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).map_err(|e| e.to_string())?;
            let (mut base, mut t0, mut series) = (stats(&mut cpu), Instant::now(), Vec::new());
            for r in 0..rounds {
                if r == warm {
                    base = stats(&mut cpu);
                    t0 = Instant::now();
                }
                let mut v = Vec::with_capacity(burst);
                for _ in 0..burst {
                    v.push(
                        cpu.alloc(Gfp::KERNEL | Gfp::MOVABLE, Order::ZERO)
                            .map_err(|e| e.to_string())?,
                    );
                }
                if r % every == 0 {
                    series.push((r as f64, f64::from(high(&mut cpu))));
                }
                tx.send(v).map_err(|e| e.to_string())?;
            }
            drop(tx);
            let st = stats(&mut cpu);
            cpu.drain();
            Ok((st, base, series, t0.elapsed()))
        });
        let consumer = sc.spawn(move || -> Result<_, String> {
            let mut cpu = m.cpu(CpuId(1), NodeId::ZERO).map_err(|e| e.to_string())?;
            let (mut base, mut r, mut series) = (stats(&mut cpu), 0usize, Vec::new());
            while let Ok(v) = rx.recv() {
                if r == warm {
                    base = stats(&mut cpu);
                }
                for b in v {
                    cpu.free(b).map_err(|e| e.to_string())?;
                }
                if r % every == 0 {
                    series.push((r as f64, f64::from(high(&mut cpu))));
                }
                r += 1;
            }
            // Idle: only the 1-second decay runs (spec 04 §6).
            let count_high = |c: &mut pageframe::CpuCache<'_, 'static>| {
                c.cache_info(NodeId::ZERO, ZoneKind::Normal)
                    .map_or((0, 0), |s| (s.count, s.high))
            };
            let (c0, h0) = count_high(&mut cpu);
            let mut idle = vec![(0, c0, h0)];
            for tick in 1..=32u32 {
                cpu.tick();
                let (c, h) = count_high(&mut cpu);
                idle.push((tick, c, h));
            }
            let st = stats(&mut cpu);
            cpu.drain();
            Ok((st, base, series, idle))
        });
        (producer.join(), consumer.join())
    });
    let (pa, pb, high0, elapsed) = a.map_err(|_| "producer panicked".to_string())??;
    let (ca, cb, high1, idle) = b.map_err(|_| "consumer panicked".to_string())??;
    m.validate().map_err(|e| e.to_string())?;
    if zone.free_pages() != zone.managed_pages() {
        return Err(format!(
            "frames lost: {} free of {}",
            zone.free_pages(),
            zone.managed_pages()
        ));
    }
    let allocs = pa.allocs - pb.allocs;
    let frees = ca.frees - cb.frees;
    Ok(Run {
        allocs,
        reached_zone: allocs - (pa.local_hits - pb.local_hits),
        zone_locks: (pa.zone_lock_acquisitions - pb.zone_lock_acquisitions)
            + (ca.zone_lock_acquisitions - cb.zone_lock_acquisitions),
        ops: allocs + frees,
        ns_per_op: elapsed.as_nanos() as f64 / (allocs + frees).max(1) as f64,
        high0,
        high1,
        idle,
    })
}

/// Runs the workload for three burst sizes, auto-tuned and fixed.
pub fn run(opts: &Opts) -> Result<(), String> {
    let frames: u64 = opts.get("frames", 1 << 18)?;
    let total: usize = opts.get("ops", if opts.quick { 100_000 } else { 400_000 })?;
    println!(
        "pcp-tune: {} MiB zone (a machine with per-CPU caches), CPU 0 allocates bursts of order-0 frames, \
         CPU 1 frees them; {total} allocations per run, counters after a warm-up of a tenth",
        frames / 256
    );
    let mut t = Table::new(&[
        "burst",
        "high",
        "allocs",
        "reached the zone",
        "zone locks / 1000 ops",
        "ns/op",
    ]);
    let mut plots = Vec::new();
    for burst in [32usize, 256, 4096] {
        for fixed in [false, true] {
            let r = run_one(frames, burst, total, fixed)?;
            t.row(vec![
                burst.to_string(),
                (if fixed {
                    "fixed (high_min)"
                } else {
                    "auto-tuned"
                })
                .into(),
                r.allocs.to_string(),
                pct(r.reached_zone as f64 / r.allocs.max(1) as f64, 3),
                f(1000.0 * r.zone_locks as f64 / r.ops.max(1) as f64, 3),
                f(r.ns_per_op, 1),
            ]);
            if burst == 4096 {
                plots.push((fixed, r));
            }
        }
    }
    println!("\n{}", t.render());
    println!("goal: <= 5% of allocations reach the zone after warm-up (auto-tuned)");
    if let Some((_, r)) = plots.iter().find(|(fixed, _)| !fixed) {
        let line: Vec<String> = r
            .idle
            .iter()
            .filter(|i| [0, 1, 2, 4, 8, 16, 32].contains(&i.0))
            .map(|(t, c, h)| format!("{t}s: {c}/{h}"))
            .collect();
        println!(
            "idle decay on CPU 1 (count/high per 1 s tick): {}",
            line.join("  ")
        );
    }
    if !opts.no_plot {
        let mut series = Vec::new();
        for (fixed, r) in &plots {
            let tag = if *fixed { "fixed" } else { "auto" };
            series.push(Series {
                label: format!("CPU 0 (allocating), {tag}"),
                points: r.high0.clone(),
            });
            series.push(Series {
                label: format!("CPU 1 (freeing), {tag}"),
                points: r.high1.clone(),
            });
        }
        let path = opts.out.join("pcp-tune-high.svg");
        plot::lines(
            Path::new(&path),
            "pcp-tune: high over the run (burst 4096)",
            "burst round",
            "high (pages)",
            &series,
        )?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
