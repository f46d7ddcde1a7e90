//! giant-churn: 1 GiB pages after a long mixed churn, with the
//! superpageblock placement (the default), with only the 4 MiB neighbour
//! rule (the placement before superpageblocks), and with Linux's rules,
//! side by side.
//!
//! Protocol: one Normal zone of `--gib` GiB (default 64) of simulated
//! frames, through a `Machine`'s slow path. Three populations churn:
//! unmovable kernel objects of orders 0-3, whose share of memory grows
//! evenly from `--unmovable-start` (default 5%) to `--unmovable` (10%)
//! over the run (at its share, each unmovable step frees a random one and
//! the next allocates again), anonymous memory (`--anon`, default 30%; 4 KiB
//! pages and 2 MiB pages, half its frames each way, freed at random once
//! at its target) and the page cache, which takes the rest: one read of
//! 4, 16 or 64 KiB a step, and when memory runs short the slow path's
//! reclaim evicts the oldest (a FIFO as LRU). Steps run until the page
//! cache has read `--turns` times the memory (default 3). Direct
//! compaction migrates through the lab's migrator, which moves an owner
//! id per frame (the frames hold no data).
//!
//! Then: tainted 1 GiB regions (a pageblock typed unmovable, reclaimable
//! or highatomic) against the fewest the unmovable memory needs, and the
//! regions holding unmovable memory by content; the page cache is dropped
//! and memory compacted (as an administrator does before taking 1 GiB
//! pages: `drop_caches`, `compact_memory`), every clean region is taken
//! with `alloc_contig_range` and given back, and finally `alloc_contig`
//! takes 1 GiB pages until it fails, moving anonymous memory out of their
//! way. The variants: "grouping on" is
//! `Placement::Superpageblock` with `defrag_mode` (the defaults), "grouping
//! off" `Placement::Neighbour` with `defrag_mode`, "Linux's rules"
//! `Placement::Linux` without it.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::time::Instant;

use pageframe::{
    Block, Gfp, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    tune::Placement,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::args::Opts;
use crate::table::{Table, pct};

const NODE: NodeId = NodeId::ZERO;
/// Frames in 1 GiB.
const GIANT: u64 = 1 << 18;

struct Variant {
    name: &'static str,
    /// `--variants` calls it this.
    key: &'static str,
    placement: Placement,
    defrag_mode: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "grouping on (default)",
        key: "on",
        placement: Placement::Superpageblock,
        defrag_mode: true,
    },
    Variant {
        name: "grouping off",
        key: "off",
        placement: Placement::Neighbour,
        defrag_mode: true,
    },
    Variant {
        name: "Linux's rules",
        key: "linux",
        placement: Placement::Linux,
        defrag_mode: false,
    },
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Unmovable,
    Anon,
    Cache,
}

struct Obj {
    block: Option<Block>,
    kind: Kind,
    /// Index in its population's list (unmovable and anonymous).
    pos: u32,
}

/// The kernel: objects, who owns each frame, the populations, the page
/// cache's age order. It is the machine's migrator and its reclaim.
struct Kernel {
    m: &'static Machine<'static>,
    objs: Vec<Obj>,
    spare: Vec<u32>,
    /// Per frame: the owning object's id + 1 (0: none).
    owner: Vec<u32>,
    unmovable: Vec<u32>,
    anon: Vec<u32>,
    cache: VecDeque<u32>,
    used: [u64; 3],
    moved: u64,
    reclaimed: u64,
}

impl Kernel {
    fn add(&mut self, b: Block, kind: Kind) {
        let id = match self.spare.pop() {
            Some(id) => id,
            None => {
                self.objs.push(Obj {
                    block: None,
                    kind,
                    pos: 0,
                });
                self.objs.len() as u32 - 1
            }
        };
        let (p, n) = (b.pfn().get() as usize, b.order().pages() as usize);
        self.owner[p..p + n].fill(id + 1);
        self.used[kind as usize] += n as u64;
        let pos = match kind {
            Kind::Unmovable => {
                self.unmovable.push(id);
                self.unmovable.len() - 1
            }
            Kind::Anon => {
                self.anon.push(id);
                self.anon.len() - 1
            }
            Kind::Cache => {
                self.cache.push_back(id);
                0
            }
        };
        self.objs[id as usize] = Obj {
            block: Some(b),
            kind,
            pos: pos as u32,
        };
    }

    /// Frees object `id` (already out of its population list).
    fn release(&mut self, id: u32) -> u64 {
        let o = &mut self.objs[id as usize];
        let Some(b) = o.block.take() else { return 0 };
        let (p, n) = (b.pfn().get() as usize, b.order().pages() as usize);
        self.owner[p..p + n].fill(0);
        self.used[o.kind as usize] -= n as u64;
        self.m.free(b).expect("a held block frees");
        self.spare.push(id);
        n as u64
    }

    /// Frees a random member of `kind`'s list (unmovable or anonymous).
    fn free_random(&mut self, kind: Kind, rng: &mut SmallRng) {
        let list = match kind {
            Kind::Unmovable => &mut self.unmovable,
            _ => &mut self.anon,
        };
        if list.is_empty() {
            return;
        }
        let i = rng.gen_range(0..list.len());
        let id = list.swap_remove(i);
        if let Some(&moved) = list.get(i) {
            self.objs[moved as usize].pos = i as u32;
        }
        self.release(id);
    }

    /// Evicts the oldest page cache until `pages` frames are free.
    fn evict(&mut self, pages: u64) -> u64 {
        let mut freed = 0;
        while freed < pages {
            let Some(id) = self.cache.pop_front() else {
                break;
            };
            freed += self.release(id);
        }
        self.reclaimed += freed;
        freed
    }
}

impl Migrator for Kernel {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        let id = self.owner.get(pfn.get() as usize)?.checked_sub(1)?;
        let o = &mut self.objs[id as usize];
        match &o.block {
            Some(b) if b.pfn() == pfn && b.order() == order && o.kind != Kind::Unmovable => {
                o.block.take()
            }
            _ => None,
        }
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, _: MigrateMode) -> Result<(), MigrateError> {
        let (s, d, n) = (s.get() as usize, d.get() as usize, o.pages() as usize);
        let id = self.owner[s];
        self.owner[s..s + n].fill(0);
        self.owner[d..d + n].fill(id);
        self.moved += n as u64;
        Ok(())
    }
    fn putback(&mut self, b: Block) {
        let id = self.owner[b.pfn().get() as usize] - 1;
        self.objs[id as usize].block = Some(b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        self.putback(b);
    }
}

impl SlowPathHooks for Kernel {
    fn reclaim(&mut self, _: NodeId, _: ZoneKind, pages: u64) -> u64 {
        self.evict(pages)
    }
}

struct Params {
    frames: u64,
    /// The unmovable share at the start and at the end of the churn (it
    /// grows evenly between them).
    unmovable_start: f64,
    unmovable: f64,
    anon: f64,
    turns: f64,
}

struct Outcome {
    tainted: u64,
    minimum: u64,
    by_content: u64,
    whole: u64,
    clean: u64,
    clean_taken: u64,
    /// Clean regions `alloc_contig_range` refused, and why.
    refused: Vec<(Pfn, pageframe::ContigError)>,
    giant: u64,
    giant_moved: u64,
    compacted: u64,
    churn_moved: u64,
    unmovable_share: f64,
    failed: u64,
    map: String,
    regions: Vec<pageframe::zone::SuperpageblockUse>,
    stats: pageframe::zone::FallbackStats,
    secs: f64,
}

fn pick(rng: &mut SmallRng, weights: &[(u32, u8)]) -> Order {
    let total: u32 = weights.iter().map(|w| w.0).sum();
    let mut x = rng.gen_range(0..total);
    for &(w, k) in weights {
        if x < w {
            return Order::new(k).unwrap_or_default();
        }
        x -= w;
    }
    Order::ZERO
}

fn run_variant(v: &Variant, p: &Params, seed: u64) -> Result<Outcome, String> {
    let t0 = Instant::now();
    let span = PfnRange::new(Pfn(0), Pfn(p.frames));
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> =
        Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
    let meta: &'static mut [MaybeUninit<u8>] =
        Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    m.add_zone(NODE, ZoneKind::Normal, span, meta)
        .map_err(|e| e.to_string())?;
    m.add_free_range(span).map_err(|e| e.to_string())?;
    m.tunables().set_defrag_mode(v.defrag_mode);
    m.tunables().set_fallback_placement(v.placement);
    let m: &'static Machine<'static> = m;
    let zone = m
        .inspect()
        .node(NODE)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or("zone")?;
    let mut k = Kernel {
        m,
        objs: Vec::new(),
        spare: Vec::new(),
        owner: vec![0; p.frames as usize],
        unmovable: Vec::new(),
        anon: Vec::new(),
        cache: VecDeque::new(),
        used: [0; 3],
        moved: 0,
        reclaimed: 0,
    };
    let mut rng = SmallRng::seed_from_u64(seed);
    let u_target = |read: u64| {
        let t = read as f64 / (p.frames as f64 * p.turns);
        (p.frames as f64 * (p.unmovable_start + (p.unmovable - p.unmovable_start) * t)) as u64
    };
    let a_target = (p.frames as f64 * p.anon) as u64;
    let read_target = (p.frames as f64 * p.turns) as u64;
    let (mut read, mut failed) = (0u64, 0u64);
    let bar = crate::progress::bar(read_target, v.name);
    let mut step = 0u64;
    while read < read_target {
        step += 1;
        // Unmovable: to its target, then replaced one by one.
        if rng.gen_bool(0.3) {
            if k.used[Kind::Unmovable as usize] >= u_target(read) {
                k.free_random(Kind::Unmovable, &mut rng);
            }
            let order = pick(&mut rng, &[(70, 0), (15, 1), (10, 2), (5, 3)]);
            match m.alloc_slow(NODE, Gfp::KERNEL, order, &mut k) {
                Ok(b) => k.add(b, Kind::Unmovable),
                Err(_) => failed += 1,
            }
        }
        // Anonymous memory: half its frames in 2 MiB pages.
        if rng.gen_bool(0.2) {
            if k.used[Kind::Anon as usize] >= a_target {
                k.free_random(Kind::Anon, &mut rng);
            }
            let order = pick(&mut rng, &[(511, 0), (1, 9)]);
            let got = m
                .alloc_slow(NODE, Gfp::HIGHUSER_MOVABLE, order, &mut k)
                .or_else(|_| m.alloc_slow(NODE, Gfp::HIGHUSER_MOVABLE, Order::ZERO, &mut k));
            match got {
                Ok(b) => k.add(b, Kind::Anon),
                Err(_) => failed += 1,
            }
        }
        // A page cache read.
        let order = pick(&mut rng, &[(6, 0), (3, 2), (1, 4)]);
        match m.alloc_slow(NODE, Gfp::HIGHUSER_MOVABLE, order, &mut k) {
            Ok(b) => {
                read += b.order().pages();
                k.add(b, Kind::Cache);
            }
            Err(_) => failed += 1,
        }
        if step.is_multiple_of(4096) {
            bar.set_position(read);
        }
    }
    bar.finish_and_clear();
    m.validate().map_err(|e| e.to_string())?;
    let churn_moved = k.moved;

    // Tainted regions against the fewest the unmovable memory needs, and
    // the regions holding unmovable memory.
    let unmovable = k.used[Kind::Unmovable as usize];
    let minimum = unmovable.div_ceil(GIANT);
    let counts = zone.superpageblock_counts();
    let mut holding = std::collections::BTreeSet::new();
    for &id in &k.unmovable {
        if let Some(b) = &k.objs[id as usize].block {
            holding.insert(b.pfn().get() / GIANT);
        }
    }
    let regions: Vec<_> = zone.superpageblocks().collect();
    let map: String = regions.iter().map(|u| u.symbol()).collect();

    // Drop the page cache, then every clean region as a 1 GiB range.
    k.evict(u64::MAX);
    // And compact (`/proc/sys/vm/compact_memory`): the free memory the
    // page cache leaves is in holes between anonymous pages, and a 2 MiB
    // page moving out of a 1 GiB range needs a free 2 MiB block.
    let before = k.moved;
    m.compact_node(NODE, &mut k);
    let compacted = k.moved - before;
    let clean: Vec<PfnRange> = zone
        .superpageblocks()
        .filter(|u| u.whole && !u.is_tainted())
        .map(|u| u.range)
        .collect();
    let mut clean_taken = 0;
    let mut refused = Vec::new();
    for &r in &clean {
        match m.alloc_contig_range(r, &mut k) {
            Ok(s) => {
                clean_taken += 1;
                m.free_segment(s).map_err(|e| e.to_string())?;
            }
            Err(e) => refused.push((r.start, e)),
        }
    }
    // As many 1 GiB pages as alloc_contig takes, held.
    let before = k.moved;
    let mut giants = Vec::new();
    while let Ok(s) = m.alloc_contig(NODE, Gfp::HIGHUSER_MOVABLE, GIANT, GIANT, &mut k) {
        giants.push(s);
    }
    let giant = giants.len() as u64;
    let giant_moved = k.moved - before;
    for s in giants {
        m.free_segment(s).map_err(|e| e.to_string())?;
    }
    m.validate().map_err(|e| e.to_string())?;
    Ok(Outcome {
        tainted: counts.tainted,
        minimum,
        by_content: holding.len() as u64,
        whole: counts.whole,
        clean: clean.len() as u64,
        clean_taken,
        refused,
        giant,
        giant_moved,
        compacted,
        churn_moved,
        unmovable_share: unmovable as f64 / p.frames as f64,
        failed,
        map,
        regions,
        stats: zone.fallback_stats(),
        secs: t0.elapsed().as_secs_f64(),
    })
}

/// Runs every variant and prints the table.
pub fn run(opts: &Opts) -> Result<(), String> {
    let gib: u64 = opts.get("gib", if opts.quick { 8 } else { 64 })?;
    let p = Params {
        frames: gib * GIANT,
        unmovable_start: opts.get("unmovable-start", 0.05)?,
        unmovable: opts.get("unmovable", 0.10)?,
        anon: opts.get("anon", 0.3)?,
        turns: opts.get("turns", if opts.quick { 1.0 } else { 3.0 })?,
    };
    println!(
        "giant-churn: {gib} GiB, unmovable kernel objects (orders 0-3) growing from {} to {} of memory, \
         anonymous memory at {} (half in 2 MiB pages), the page cache the rest (reads of 4-64 KiB, the oldest \
         evicted when memory runs short) until it has read {} times the memory; then the page cache dropped and \
         memory compacted, every clean 1 GiB region taken with alloc_contig_range, and alloc_contig taking 1 GiB \
         pages until it fails; seed {}",
        pct(p.unmovable_start, 0),
        pct(p.unmovable, 0),
        pct(p.anon, 0),
        p.turns,
        opts.seed
    );
    let mut t = Table::new(&[
        "variant",
        "tainted regions",
        "minimum",
        "holding unmovable",
        "clean regions taken",
        "1 GiB pages taken",
        "frames compacted / moved for them",
        "fallbacks kept / tainting / room made",
        "frames migrated in the churn",
        "claims whole/partial",
        "steals",
        "requests failed",
        "s",
    ]);
    let mut maps = Vec::new();
    let mut svg = Vec::new();
    let only = opts.get_str("variants", "on,off,linux");
    for v in VARIANTS
        .iter()
        .filter(|v| only.split(',').any(|k| k == v.key))
    {
        let o = run_variant(v, &p, opts.seed)?;
        t.row(vec![
            v.name.to_string(),
            o.tainted.to_string(),
            format!("{} ({})", o.minimum, pct(o.unmovable_share, 1)),
            o.by_content.to_string(),
            format!("{}/{}", o.clean_taken, o.clean),
            format!("{}/{}", o.giant, o.whole),
            format!("{} / {}", o.compacted, o.giant_moved),
            format!(
                "{}/{}/{}",
                o.stats.superpageblock_kept,
                o.stats.superpageblock_tainting,
                o.stats.superpageblock_room_made
            ),
            o.churn_moved.to_string(),
            format!("{}/{}", o.stats.claims_whole, o.stats.claims_partial),
            o.stats.steals.to_string(),
            o.failed.to_string(),
            format!("{:.0}", o.secs),
        ]);
        svg.push((
            format!("{}: at the end of the churn", v.name),
            o.regions.clone(),
        ));
        maps.push((v.name, o.map));
        for (at, e) in &o.refused {
            println!("{}: the clean region at {at} was refused: {e}", v.name);
        }
    }
    println!("\n{}", t.render());
    println!(
        "1 GiB regions at the end of the churn ({}):",
        pageframe::zone::SUPERPAGEBLOCK_LEGEND
    );
    for (name, map) in maps {
        println!("  {map}  {name}");
    }
    if !opts.no_plot {
        std::fs::create_dir_all(&opts.out).map_err(|e| e.to_string())?;
        let path = opts.out.join("giant-churn-map.svg");
        crate::plot::superpageblock_maps(&path, "giant-churn: one square a 1 GiB region", &svg)?;
        println!("map: {}", path.display());
    }
    println!(
        "goal (grouping on): tainted <= minimum + 2, every clean region taken; no worse than grouping off and \
         Linux's rules"
    );
    Ok(())
}
