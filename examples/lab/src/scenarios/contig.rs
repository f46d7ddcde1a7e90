//! contig: contiguous ranges and free page reporting after
//! mixed churn, through `Machine::alloc_contig` and
//! `Machine::report_free_pages`.
//!
//! Protocol: one Normal zone of `--gib` GiB (default 16), filled with
//! random allocations (order 0-3 mostly, some 2 MiB; 2% of them unmovable
//! kernel frames), then random held blocks freed down to `--full` (default
//! 90%) in use, then as many churn steps as the zone has frames (allocate
//! below the target, free above it): the free memory is scattered over
//! the whole zone. Then, `--attempts` times (default
//! 20): a 1 GiB page (262,144 frames, 1 GiB aligned) with every movable
//! frame migratable, checked (every owner's frame outside the range, moves
//! against the minimum: the fewest movable frames any 1 GiB candidate
//! holds), freed, and 2% of the zone churned again. (A 1 GiB page needs the
//! free memory outside its range to hold what the range holds: at 90% in
//! use that takes a zone of 10 GiB or more.) Likewise a range of
//! 3,000 frames (`--ranges` times, default 100). Then `--attempts` random
//! 256 MiB ranges holding only movable memory go offline and back online
//! (moves against the frames in use there). Finally the churn settles
//! (half of what is held is freed) and two reporting passes run: the share
//! of the free memory in blocks of 2 MiB or more that is reported.
//!
//! The migrator is the lab's: it moves each frame's owner id with it (no
//! page contents: the zone is too large to back with memory).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::time::Instant;

use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode},
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::table::{Table, f, pct};

const NODE: NodeId = NodeId::ZERO;
const GIANT: u64 = 1 << 18;
const RANGE: u64 = 3000;

/// The kernel: owner ids per frame, moved with the frames, and each
/// owner's block (handed over for a move, back when it is done).
struct Ids {
    owner: Vec<u32>,
    blocks: HashMap<u32, Block>,
    moved: u64,
}

impl Migrator for Ids {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        let id = self.owner[pfn.get() as usize];
        match self.blocks.get(&id) {
            Some(b) if b.pfn() == pfn && b.order() == order => self.blocks.remove(&id),
            _ => None,
        }
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, _: MigrateMode) -> Result<(), MigrateError> {
        for i in 0..o.pages() {
            let (s, d) = ((s.get() + i) as usize, (d.get() + i) as usize);
            self.owner[d] = std::mem::take(&mut self.owner[s]);
        }
        self.moved += o.pages();
        Ok(())
    }
    fn putback(&mut self, b: Block) {
        self.blocks.insert(self.owner[b.pfn().get() as usize], b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        // `migrate` moved the owner's id with the frames.
        self.blocks.insert(self.owner[b.pfn().get() as usize], b);
    }
}

struct World {
    m: &'static Machine<'static>,
    ids: Ids,
    keys: Vec<u32>,
    next: u32,
    used: u64,
    rng: SmallRng,
}

impl World {
    fn new(frames: u64, seed: u64) -> Result<World, String> {
        let span = PfnRange::new(Pfn(0), Pfn(frames));
        let m: &'static mut Machine<'static> =
            Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
        let meta: &'static mut [MaybeUninit<u8>] =
            Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
        m.add_zone(NODE, ZoneKind::Normal, span, meta)
            .map_err(|e| e.to_string())?;
        m.add_free_range(span).map_err(|e| e.to_string())?;
        Ok(World {
            m,
            ids: Ids {
                owner: vec![0; frames as usize],
                blocks: HashMap::new(),
                moved: 0,
            },
            keys: Vec::new(),
            next: 1,
            used: 0,
            rng: SmallRng::seed_from_u64(seed),
        })
    }

    /// One random allocation (2% of them unmovable), its frames marked
    /// with a new owner id; `false` if the zone refused it.
    fn alloc_one(&mut self) -> bool {
        let order = Order::new([0, 0, 0, 0, 0, 1, 2, 3, 9][self.rng.gen_range(0..9)]).unwrap();
        let unmovable = self.rng.gen_bool(0.02);
        let (gfp, order) = if unmovable {
            (Gfp::KERNEL, Order::ZERO)
        } else {
            (Gfp::HIGHUSER_MOVABLE, order)
        };
        let Ok(a) = self.m.alloc(NODE, gfp, order) else {
            return false;
        };
        let id = self.next;
        self.next += 1;
        for i in 0..order.pages() {
            self.ids.owner[(a.pfn().get() + i) as usize] = id;
        }
        self.ids.blocks.insert(id, a);
        self.keys.push(id);
        self.used += order.pages();
        true
    }

    fn free_one(&mut self) {
        if self.keys.is_empty() {
            return;
        }
        let k = self.rng.gen_range(0..self.keys.len());
        let id = self.keys.swap_remove(k);
        let b = self.ids.blocks.remove(&id).expect("held");
        let (head, order) = (b.pfn().get(), b.order());
        for i in 0..order.pages() {
            self.ids.owner[(head + i) as usize] = 0;
        }
        self.m.free(b).expect("a held block frees");
        self.used -= order.pages();
    }

    /// `steps` churn steps holding the zone at `target` frames in use.
    fn churn(&mut self, steps: u64, target: u64) {
        for _ in 0..steps {
            if self.used < target {
                if !self.alloc_one() {
                    self.free_one();
                }
            } else {
                self.free_one();
            }
        }
    }

    /// The fewest movable frames any 1 GiB candidate holds (None: every
    /// candidate is blocked).
    fn min_giant_cost(&self) -> Option<u64> {
        let z = self.m.inspect().node(NODE)?.zone(ZoneKind::Normal)?;
        let span = z.span();
        (0..span.len() / GIANT)
            .filter_map(|k| {
                let r = PfnRange::new(Pfn(k * GIANT), Pfn((k + 1) * GIANT));
                z.inspect(|m| m.range_usage(r).ok())
            })
            .min()
    }
}

pub fn run(opts: &Opts) -> Result<(), String> {
    let gib: u64 = opts.get("gib", if opts.quick { 4 } else { 16 })?;
    let full: f64 = opts.get("full", 0.9)?;
    let attempts: u32 = opts.get("attempts", if opts.quick { 5 } else { 20 })?;
    let ranges: u32 = opts.get("ranges", if opts.quick { 20 } else { 100 })?;
    let frames = gib * GIANT;
    let mut w = World::new(frames, opts.seed)?;
    let target = (frames as f64 * full) as u64;
    let t0 = Instant::now();
    // Fill the zone, then free at random down to the target, then churn:
    // free memory is scattered over the whole zone.
    let mut fails = 0;
    while fails < 64 {
        fails = if w.alloc_one() { 0 } else { fails + 1 };
    }
    let peak = w.used;
    while w.used > target {
        w.free_one();
    }
    w.churn(frames, target);
    println!(
        "contig: {gib} GiB zone, filled to {}, churned at {} in use ({} held blocks) in {:.1} s; seed {}",
        pct(peak as f64 / frames as f64, 1),
        pct(w.used as f64 / frames as f64, 1),
        w.ids.blocks.len(),
        t0.elapsed().as_secs_f64(),
        opts.seed
    );

    let mut t = Table::new(&[
        "request",
        "attempts",
        "succeeded",
        "frames moved / minimum",
        "first attempt: moved / minimum",
        "median ms",
        "max ms",
    ]);
    for (name, want, align, n) in [
        ("1 GiB page", GIANT, GIANT, attempts),
        ("3000 frames", RANGE, 1, ranges),
    ] {
        let (mut ok, mut moved, mut minimum) = (0u32, 0u64, 0u64);
        let mut ms = Vec::new();
        let mut first = String::from("failed");
        for k in 0..n {
            let min = if want == GIANT {
                w.min_giant_cost()
            } else {
                None
            };
            let before = w.ids.moved;
            let t = Instant::now();
            let r =
                w.m.alloc_contig(NODE, Gfp::HIGHUSER_MOVABLE, want, align, &mut w.ids);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            if let Ok(a) = r {
                ok += 1;
                moved += w.ids.moved - before;
                minimum += min.unwrap_or(w.ids.moved - before);
                if k == 0 {
                    first = match min {
                        Some(mn) => format!("{} / {mn}", w.ids.moved - before),
                        None => format!("{} / -", w.ids.moved - before),
                    };
                }
                let range = a.range();
                if w.ids
                    .blocks
                    .values()
                    .any(|b| b.pfn() < range.end && b.pfn() + b.order().pages() > range.start)
                {
                    return Err(format!("an owner's block is inside {range:?}"));
                }
                w.m.free_segment(a).map_err(|e| e.to_string())?;
            }
            w.churn(frames / 50, target);
        }
        ms.sort_by(f64::total_cmp);
        let q = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
        t.row(vec![
            name.into(),
            n.to_string(),
            pct(ok as f64 / n as f64, 1),
            if want != GIANT {
                format!("{moved} / -")
            } else if minimum > 0 {
                format!(
                    "{moved} / {minimum} = {}",
                    f(moved as f64 / minimum as f64, 3)
                )
            } else {
                format!("{moved} / 0")
            },
            first,
            f(q(0.5), 1),
            f(q(1.0), 1),
        ]);
    }
    println!("{}", t.render());
    w.m.validate().map_err(|e| e.to_string())?;

    // Offline: 256 MiB ranges holding only movable memory (no unmovable
    // frame, no hole), chosen at random, taken offline and back online.
    const OFF: u64 = 1 << 16;
    let z =
        w.m.inspect()
            .node(NODE)
            .and_then(|n| n.zone(ZoneKind::Normal))
            .ok_or("zone")?;
    let (mut tried, mut ok, mut moved, mut used) = (0u32, 0u32, 0u64, 0u64);
    let mut ms = Vec::new();
    for _ in 0..200 {
        if tried == attempts {
            break;
        }
        let k = w.rng.gen_range(0..frames / OFF);
        let range = PfnRange::new(Pfn(k * OFF), Pfn((k + 1) * OFF));
        let Some(Ok(in_use)) = Some(z.inspect(|m| m.range_usage(range))) else {
            continue;
        };
        tried += 1;
        let before = w.ids.moved;
        let t = Instant::now();
        let r = w.m.offline_range(range, &mut w.ids);
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        if r.is_ok() {
            ok += 1;
            moved += w.ids.moved - before;
            used += in_use;
            w.m.add_free_range(range).map_err(|e| e.to_string())?;
        }
        w.churn(frames / 50, target);
    }
    ms.sort_by(f64::total_cmp);
    let mut o = Table::new(&[
        "offline 256 MiB (movable only)",
        "succeeded",
        "frames moved / in use",
        "median ms",
        "max ms",
    ]);
    o.row(vec![
        tried.to_string(),
        pct(ok as f64 / tried.max(1) as f64, 1),
        format!(
            "{moved} / {used} = {}",
            f(moved as f64 / used.max(1) as f64, 3)
        ),
        f(ms.get(ms.len() / 2).copied().unwrap_or(0.0), 1),
        f(ms.last().copied().unwrap_or(0.0), 1),
    ]);
    println!("{}", o.render());
    w.m.validate().map_err(|e| e.to_string())?;

    // Reporting after the workload settles.
    let _ = w.m.report_free_pages(Order::HUGE_2M, |_| true);
    w.churn(frames / 4, target);
    let n = w.ids.blocks.len() / 2;
    for _ in 0..n {
        w.free_one();
    }
    let mut r = Table::new(&[
        "reporting pass",
        "blocks reported",
        "MiB",
        "ms",
        "reported / free in >= 2 MiB blocks",
    ]);
    for pass in 1..=2 {
        let t = Instant::now();
        let s = w.m.report_free_pages(Order::HUGE_2M, |_| true);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (big, rep) = w.m.inspect().reported_pages(Order::HUGE_2M);
        r.row(vec![
            pass.to_string(),
            s.blocks.to_string(),
            (s.pages >> 8).to_string(),
            f(ms, 2),
            pct(rep as f64 / big.max(1) as f64, 2),
        ]);
    }
    println!("{}", r.render());
    w.m.validate().map_err(|e| e.to_string())?;
    Ok(())
}
