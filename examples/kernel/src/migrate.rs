//! The `migrate` and `unmovable` modes: real page migration under
//! compaction, in the kernel's own page tables.
//!
//! One run: fill free memory with movable 4 KiB "user" pages, each mapped
//! in the user region and holding data derived from its virtual page
//! number; free three of every four (by frame number, so every 2 MiB block
//! keeps a page every 16 KiB and no order-2 block is free); if proactive
//! compaction is on, let kcompactd's proactive check run (spec 03 §11.3);
//! then allocate 2 MiB blocks until failure, each allocation falling back to
//! direct compaction with capture (async, then sync-light, spec 03 §9);
//! map each block with a 2 MiB entry and check it through that mapping;
//! verify every surviving user page through its (possibly new) mapping;
//! free everything and check conservation.
//!
//! The `unmovable` variant interleaves unmovable kernel allocations with
//! the fill and with the 2 MiB allocations, and reports the mobility
//! layer's fallback counters and pageblock types (spec 02).

use crate::bringup::{KernelMachine, NODE};
use crate::println;
use crate::time::{Cycles, Instant, TscRate};
use crate::user_pages::{Tables, UserMigrator, huge_addr, user_addr};
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use pageframe::{
    Block, Gfp, Order, Pfn,
    zone::{FallbackStats, MigrateType},
};

/// Words per 4 KiB page.
const WORDS: usize = 512;

/// A check that failed, or a resource that ran out.
#[derive(Debug)]
pub enum MigrateModeError {
    /// No heap or frame for the scenario's bookkeeping or tables.
    NoMemory(&'static str),
    /// A user page's data did not survive.
    Corrupt { vpn: u64, word: usize, found: u64 },
    /// A 2 MiB block did not read back through its mapping.
    HugeMismatch(Pfn),
    /// The reverse map disagrees with the page tables.
    Rmap(u64),
    /// The second CPU read stale data through the user mapping.
    StaleRead(u64),
    /// Frames leaked or appeared across the run.
    Conservation { before: u64, after: u64 },
    /// The allocator refused a free or failed validation.
    Allocator(&'static str),
}

impl fmt::Display for MigrateModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory(w) => write!(f, "out of memory for {w}"),
            Self::Corrupt { vpn, word, found } => {
                write!(f, "user page {vpn} word {word} reads {found:#x}")
            }
            Self::HugeMismatch(p) => write!(f, "2 MiB block {:#x} reads wrong", p.get()),
            Self::StaleRead(n) => write!(f, "second CPU read {n} stale words"),
            Self::Rmap(v) => write!(f, "reverse map wrong for user page {v}"),
            Self::Conservation { before, after } => {
                write!(f, "free frames {before} before, {after} after")
            }
            Self::Allocator(w) => write!(f, "allocator: {w}"),
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    /// `vm.compaction_proactiveness` of the run.
    pub proactiveness: u32,
    /// User pages mapped by the fill.
    pub filled: u64,
    /// User pages left after freeing three quarters.
    pub kept: u64,
    /// Unmovable frames taken during the run (pressure variant).
    pub unmovable: u64,
    /// Free frames when the 2 MiB allocations started.
    pub free_before: u64,
    /// 2 MiB blocks obtained.
    pub blocks: u64,
    /// Of those, blocks captured by direct compaction.
    pub captured: u64,
    /// Pages migrated (proactive plus direct).
    pub migrated: u64,
    /// Of those, by the proactive check.
    pub migrated_proactive: u64,
    /// Node fragmentation score before/after the proactive run.
    pub score: Option<(u32, u32)>,
    /// Timer ticks waited for kcompactd.
    pub ticks: u64,
    /// Time of the proactive phase.
    pub proactive_cycles: u64,
    /// Latency percentiles of the order-9 allocations (cycles): p50, p90,
    /// p99, max; and the mean.
    pub latency: [u64; 4],
    /// Mean latency (cycles).
    pub mean: u64,
    /// Pages the second CPU read during compaction.
    pub ap_reads: u64,
    /// Of its reads, words that did not match (must be 0).
    pub ap_mismatches: u64,
    /// TLB shootdowns sent to the second CPU.
    pub shootdowns: u64,
    /// Batches the migrator moved (one TLB flush each).
    pub batches: u64,
    /// Faults of the second CPU on a page being migrated (it waited).
    pub migration_waits: u64,
    /// Pageblocks holding a non-movable allocation before the fill.
    pub polluted_before: u64,
    /// The same with everything allocated (after the 2 MiB allocations).
    pub polluted_peak: u64,
    /// Unmovable frames of this run inside pageblocks typed movable.
    pub unmovable_in_movable: u64,
    /// Fallback counters at the end of the run, summed over zones.
    pub fallback: FallbackStats,
}

/// The scenario's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Proactiveness for kcompactd (0: off).
    pub proactiveness: u32,
    /// One unmovable allocation per this many movable ones (0: none).
    pub unmovable_every: u64,
    /// Unmovable allocations before each 2 MiB allocation.
    pub unmovable_per_block: u64,
    /// Print the pageblock types while everything is allocated.
    pub show_peak: bool,
    /// Have the second CPU (if up) read the kept pages during compaction.
    pub ap_reader: bool,
    /// Print the highest zone's fragmentation map before and after the
    /// proactive phase.
    pub show_map: bool,
}

/// Prints the fragmentation map of the machine's highest zone.
fn print_map(machine: &KernelMachine, when: &str) {
    if let Some(z) = machine.inspect().all_zones().last() {
        println!(
            "migrate: fragmentation map of zone {} {when}, one character a 2 MiB pageblock ({})",
            z.kind().name(),
            pageframe::zone::MAP_LEGEND
        );
        crate::print!("{}", z.fragmentation_map());
    }
}

/// The data word `w` of user page `vpn`.
pub(crate) fn pattern(vpn: u64, w: usize) -> u64 {
    (vpn << 20 | w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a
}

/// The words of a page written and checked: first, middle, last.
pub(crate) const CHECKED: [usize; 3] = [0, WORDS / 2, WORDS - 1];

fn sum_fallback(machine: &KernelMachine) -> FallbackStats {
    let mut s = FallbackStats::default();
    for z in machine.inspect().all_zones() {
        let f = z.fallback_stats();
        s.own += f.own;
        s.claims_whole += f.claims_whole;
        s.claims_partial += f.claims_partial;
        s.claims_refused += f.claims_refused;
        s.steals += f.steals;
        s.fragmenting += f.fragmenting;
        s.highatomic_used += f.highatomic_used;
        s.failures += f.failures;
    }
    s
}

/// Pageblocks holding at least one non-movable allocation, over all zones.
fn polluted(machine: &KernelMachine) -> u64 {
    machine
        .inspect()
        .all_zones()
        .map(|z| z.inspect(|m| m.polluted_pageblocks()))
        .sum()
}

/// Ticks of the timer the proactive phase waits at most.
const MAX_TICKS: u64 = 4;

/// One run of the scenario.
pub fn run(
    machine: &'static KernelMachine,
    pfn_end: u64,
    p: Params,
) -> Result<RunReport, MigrateModeError> {
    let start_free = machine.inspect().free_pages();
    let captured0 = machine.inspect().stats(NODE).compact.captured;
    let mut rep = RunReport {
        proactiveness: p.proactiveness,
        ..RunReport::default()
    };
    let fallback0 = sum_fallback(machine);
    rep.polluted_before = polluted(machine);
    let cap = start_free;
    let huge_cap = cap / 512 + 1;

    // Bookkeeping first: heap blocks come from the allocator, so they are
    // taken before the fill uses all memory.
    let mut rmap = Vec::new();
    rmap.try_reserve_exact(pfn_end as usize)
        .map_err(|_| MigrateModeError::NoMemory("reverse map"))?;
    rmap.resize(pfn_end as usize, 0u32);
    let mut blocks: Vec<Block> = Vec::new();
    let mut lat: Vec<u64> = Vec::new();
    let mut unmovable: Vec<Block> = Vec::new();
    let unmov_cap =
        cap.checked_div(p.unmovable_every).unwrap_or(0) + huge_cap * p.unmovable_per_block + 1;
    blocks
        .try_reserve_exact(huge_cap as usize)
        .and_then(|_| lat.try_reserve_exact(huge_cap as usize))
        .and_then(|_| unmovable.try_reserve_exact(unmov_cap as usize))
        .map_err(|_| MigrateModeError::NoMemory("bookkeeping"))?;
    // The kept pages' list, for the second CPU's reader (a quarter of the
    // fill; room for half).
    let mut kept: Vec<u32> = Vec::new();
    if p.ap_reader {
        kept.try_reserve_exact(cap as usize / 2)
            .map_err(|_| MigrateModeError::NoMemory("kept list"))?;
    }

    // Page tables of both regions, also before the fill. They stay mapped
    // (empty) after the run and are reused by the next one.
    let mut tables = Tables::current();
    // Table frames stay in the tables (as numbers) for the kernel's life.
    let mut take = || crate::user_pages::table_frame(machine);
    for vpn in (0..cap).step_by(512) {
        tables
            .entry(
                crate::user_pages::USER_BASE + vpn * 4096,
                1,
                Some(&mut take),
            )
            .map_err(|_| MigrateModeError::NoMemory("user page tables"))?;
    }
    for i in (0..huge_cap).step_by(512) {
        tables
            .entry(
                crate::user_pages::HUGE_BASE + i * (2 << 20),
                2,
                Some(&mut take),
            )
            .map_err(|_| MigrateModeError::NoMemory("huge page tables"))?;
    }
    let base_free = machine.inspect().free_pages();

    // Fill.
    let movable = Gfp::KERNEL | Gfp::MOVABLE;
    let mut vpn = 0u64;
    while vpn < cap {
        if p.unmovable_every > 0 && vpn.is_multiple_of(p.unmovable_every) {
            match machine.alloc(NODE, Gfp::KERNEL, Order::ZERO) {
                Ok(f) => unmovable.push(f),
                Err(_) => break,
            }
        }
        // Mapped: the page-table entry keeps the block as its number.
        let Ok((pfn, _)) = machine
            .alloc(NODE, movable, Order::ZERO)
            .map(Block::into_raw)
        else {
            break;
        };
        if !tables.map_user(vpn, pfn) {
            return Err(MigrateModeError::NoMemory("user page table"));
        }
        rmap[pfn.get() as usize] = vpn as u32 + 1;
        let page = user_addr(vpn);
        for w in CHECKED {
            // SAFETY: `page` maps a frame just allocated for this page.
            unsafe { page.add(w).write_volatile(pattern(vpn, w)) };
        }
        vpn += 1;
    }
    rep.filled = vpn;

    // Free three of every four, by frame number.
    for v in 0..rep.filled {
        let pfn = tables.user_frame(v).ok_or(MigrateModeError::Rmap(v))?;
        if pfn.get() % 4 != 0 {
            tables.unmap_user(v);
            rmap[pfn.get() as usize] = 0;
            free_user_page(machine, pfn)?;
        } else {
            rep.kept += 1;
        }
    }

    let mut mig = UserMigrator::new(machine, &mut tables, rmap);

    // With the second CPU up, it reads every kept page through the user
    // mapping while this CPU compacts: each move must shoot down its
    // translation before the source frame is reused.
    if p.ap_reader && crate::smp::ap_up() {
        for v in 0..rep.filled {
            if mig.tables.user_frame(v).is_some() && kept.len() < kept.capacity() {
                kept.push(v as u32);
            }
        }
    }
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let bad = AtomicU64::new(0);
    let reader = || {
        crate::smp::enter_user_regions();
        while !stop.load(Ordering::Acquire) {
            for &v in &kept {
                let v = u64::from(v);
                let page = user_addr(v);
                for w in CHECKED {
                    // SAFETY: kept pages stay mapped for the whole phase
                    // (migration remaps them, nothing unmaps them).
                    if unsafe { page.add(w).read_volatile() } != pattern(v, w) {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }
        crate::smp::leave_user_regions();
    };
    let shoot0 = crate::smp::shootdowns();
    let waits0 = crate::user_pages::migration_waits();
    let mut middle = || -> Result<(), MigrateModeError> {
        // Proactive phase: the machine's kcompactd is ticked by the timer
        // while the CPU idles.
        if p.proactiveness > 0 {
            machine
                .tunables()
                .set_proactiveness(p.proactiveness)
                .map_err(|_| MigrateModeError::Allocator("proactiveness"))?;
            if p.show_map {
                print_map(machine, "before proactive compaction");
            }
            let t0 = Instant::now();
            let before = machine.inspect().fragmentation_score(NODE);
            let mut last = crate::timer::ticks();
            while rep.ticks < MAX_TICKS {
                let now_ticks = crate::timer::wait_tick(last);
                rep.ticks += now_ticks - last;
                last = now_ticks;
                let r = machine.kcompactd_tick(NODE, crate::timer::now_ns(), &mut mig);
                if r.proactive.is_some() || r.checked {
                    break;
                }
            }
            rep.proactive_cycles = t0.elapsed().0;
            rep.score = before.zip(machine.inspect().fragmentation_score(NODE));
            rep.migrated_proactive = mig.moved;
            if p.show_map {
                print_map(machine, "after proactive compaction");
            }
            machine
                .tunables()
                .set_proactiveness(0)
                .map_err(|_| MigrateModeError::Allocator("proactiveness"))?;
        }

        // 2 MiB allocations until failure, direct compaction as the
        // fallback (the machine's slow path).
        rep.free_before = machine.inspect().free_pages();
        loop {
            for _ in 0..p.unmovable_per_block {
                if let Ok(f) = machine.alloc(NODE, Gfp::KERNEL, Order::ZERO) {
                    unmovable.push(f);
                }
            }
            let t = Instant::now();
            let got = alloc_huge(machine, &mut mig);
            let dt = t.elapsed().0;
            let Some(b) = got else { break };
            lat.push(dt);
            if blocks.len() == blocks.capacity() {
                machine
                    .free(b)
                    .map_err(|_| MigrateModeError::Allocator("free of a 2 MiB block"))?;
                break;
            }
            blocks.push(b);
        }
        Ok(())
    };
    if kept.is_empty() {
        middle()?;
    } else {
        crate::smp::with_ap_job(&reader, || {
            // Start once the reader runs, so every move is shot down to it.
            while !crate::smp::user_regions_shared() {
                core::hint::spin_loop();
            }
            let r = middle();
            stop.store(true, Ordering::Release);
            r
        })?;
        rep.ap_reads = reads.load(Ordering::Relaxed);
        rep.ap_mismatches = bad.load(Ordering::Relaxed);
        rep.shootdowns = crate::smp::shootdowns() - shoot0;
        rep.migration_waits = crate::user_pages::migration_waits() - waits0;
        if rep.ap_mismatches != 0 {
            return Err(MigrateModeError::StaleRead(rep.ap_mismatches));
        }
    }
    rep.blocks = blocks.len() as u64;
    rep.migrated = mig.moved;
    rep.batches = mig.batches;
    rep.captured = machine.inspect().stats(NODE).compact.captured - captured0;
    rep.polluted_peak = polluted(machine);
    rep.unmovable_in_movable = unmovable
        .iter()
        .map(Block::pfn)
        .filter(|&f| {
            machine
                .inspect()
                .zone_of(f)
                .and_then(|z| z.inspect(|m| m.block_type(f)))
                == Some(MigrateType::Movable)
        })
        .count() as u64;
    if p.show_peak {
        for z in machine.inspect().all_zones() {
            println!(
                "unmovable: pagetypeinfo zone {} with everything allocated:",
                z.kind().name()
            );
            crate::print!("{}", z.pagetypeinfo());
        }
    }
    rep.unmovable = unmovable.len() as u64;

    // Map each block with one 2 MiB entry, write through it, read back
    // through the direct map.
    for (i, b) in blocks.iter().enumerate() {
        let (i, pfn) = (i as u64, b.pfn());
        if !mig.tables.map_huge(i, pfn) {
            return Err(MigrateModeError::NoMemory("huge page table"));
        }
        let va = huge_addr(i);
        for k in 0..512usize {
            // SAFETY: the 2 MiB block is ours and mapped at `va`.
            unsafe { va.add(k * WORDS).write_volatile(pattern(pfn.get(), k)) };
        }
        for k in 0..512usize {
            let phys = ((pfn.get() + k as u64) * 4096) as *const u64;
            // SAFETY: the same RAM through the identity direct map.
            if unsafe { phys.read_volatile() } != pattern(pfn.get(), k) {
                return Err(MigrateModeError::HugeMismatch(pfn));
            }
        }
    }

    // Every surviving user page, through its (possibly new) mapping.
    for v in 0..rep.filled {
        let Some(pfn) = mig.tables.user_frame(v) else {
            continue;
        };
        if mig.rmap[pfn.get() as usize] != v as u32 + 1 {
            return Err(MigrateModeError::Rmap(v));
        }
        let page = user_addr(v);
        for w in CHECKED {
            // SAFETY: `page` is mapped to the frame the tables name.
            let found = unsafe { page.add(w).read_volatile() };
            if found != pattern(v, w) {
                return Err(MigrateModeError::Corrupt {
                    vpn: v,
                    word: w,
                    found,
                });
            }
        }
    }
    rep.fallback = sum_fallback(machine);
    rep.fallback.own -= fallback0.own;
    rep.fallback.claims_whole -= fallback0.claims_whole;
    rep.fallback.claims_partial -= fallback0.claims_partial;
    rep.fallback.claims_refused -= fallback0.claims_refused;
    rep.fallback.steals -= fallback0.steals;
    rep.fallback.fragmenting -= fallback0.fragmenting;
    rep.fallback.highatomic_used -= fallback0.highatomic_used;
    rep.fallback.failures -= fallback0.failures;

    // Tear down and check conservation (draining: the lists' own heap
    // blocks stay until after the count).
    for (i, b) in blocks.drain(..).enumerate() {
        mig.tables.unmap_huge(i as u64);
        machine
            .free(b)
            .map_err(|_| MigrateModeError::Allocator("free of a 2 MiB block"))?;
    }
    for v in 0..rep.filled {
        if let Some(pfn) = mig.tables.user_frame(v) {
            mig.tables.unmap_user(v);
            free_user_page(machine, pfn)?;
        }
    }
    for f in unmovable.drain(..) {
        machine
            .free(f)
            .map_err(|_| MigrateModeError::Allocator("free of an unmovable frame"))?;
    }
    let after = machine.inspect().free_pages();
    if after != base_free {
        return Err(MigrateModeError::Conservation {
            before: base_free,
            after,
        });
    }
    machine
        .validate()
        .map_err(|_| MigrateModeError::Allocator("validate after the run"))?;

    lat.sort_unstable();
    if !lat.is_empty() {
        let pick = |q: usize| lat[(lat.len() * q / 100).min(lat.len() - 1)];
        rep.latency = [pick(50), pick(90), pick(99), lat[lat.len() - 1]];
        rep.mean = lat.iter().sum::<u64>() / lat.len() as u64;
    }
    Ok(rep)
}

/// A 2 MiB block for a movable request that may retry: the free lists
/// first, then the machine's slow path, whose direct compaction moves user
/// pages through `mig` (async, then sync-light, with capture).
fn alloc_huge(machine: &KernelMachine, mig: &mut UserMigrator<'_>) -> Option<Block> {
    let gfp = Gfp::TRANSHUGE | Gfp::RETRY_MAYFAIL;
    let thp = Order::HUGE_2M;
    if let Ok(a) = machine.alloc(NODE, gfp, thp) {
        return Some(a);
    }
    machine.alloc_slow(NODE, gfp, thp, mig).ok()
}

/// Frees a user page this kernel has just unmapped (its number was the
/// page-table entry's).
fn free_user_page(machine: &KernelMachine, pfn: Pfn) -> Result<(), MigrateModeError> {
    // SAFETY: the entry held the page's number and is gone: the block is
    // this kernel's, used by nothing else.
    let b = unsafe { machine.block_from_raw(pfn, Order::ZERO) }
        .map_err(|_| MigrateModeError::Allocator("a user page's number"))?;
    machine
        .free(b)
        .map_err(|_| MigrateModeError::Allocator("free of a user page"))
}

/// Prints the side-by-side table of runs.
pub fn print(runs: &[RunReport], rate: &TscRate) {
    let us = |c: u64| rate.duration(Cycles(c)).0;
    println!(
        "migrate: proactiveness | user pages filled/kept | free before | 2M blocks | share of free as 2M | \
         captured | migrated (proactive) | score before->after | ticks, proactive phase (us) | \
         p50/p90/p99/max order-9 alloc (us) | mean (us)"
    );
    for r in runs {
        let share_x100 = (r.blocks * 512 * 10_000)
            .checked_div(r.free_before)
            .unwrap_or(0);
        let score = ScoreText(r.score);
        println!(
            "migrate: p={:<3} | {}/{} | {} | {} | {}.{:02}% | {} | {} ({}) | {} | {}, {} | {}/{}/{}/{} | {}",
            r.proactiveness,
            r.filled,
            r.kept,
            r.free_before,
            r.blocks,
            share_x100 / 100,
            share_x100 % 100,
            r.captured,
            r.migrated,
            r.migrated_proactive,
            score,
            r.ticks,
            us(r.proactive_cycles),
            us(r.latency[0]),
            us(r.latency[1]),
            us(r.latency[2]),
            us(r.latency[3]),
            us(r.mean),
        );
    }
}

/// The mobility layer's view after a run: fallback counters of the run and
/// the pageblock types now.
pub fn print_mobility(machine: &KernelMachine, r: &RunReport) {
    let f = &r.fallback;
    println!(
        "unmovable: {} unmovable frames interleaved; fallback: own {} claims whole {} partial {} refused {} \
         steals {} fragmenting {} failures {}",
        r.unmovable,
        f.own,
        f.claims_whole,
        f.claims_partial,
        f.claims_refused,
        f.steals,
        f.fragmenting,
        f.failures
    );
    println!(
        "unmovable: pollution: pageblocks holding non-movable allocations {} before the fill, {} with \
         everything allocated; unmovable frames of the run inside movable-typed pageblocks {}",
        r.polluted_before, r.polluted_peak, r.unmovable_in_movable
    );
    for z in machine.inspect().all_zones() {
        println!(
            "unmovable: pagetypeinfo zone {} after the run:",
            z.kind().name()
        );
        crate::print!("{}", z.pagetypeinfo());
    }
}

/// A score pair as `before->after`, or `-` when proactive compaction was off.
struct ScoreText(Option<(u32, u32)>);

impl fmt::Display for ScoreText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((b, a)) => write!(f, "{b}->{a}"),
            None => write!(f, "-"),
        }
    }
}
