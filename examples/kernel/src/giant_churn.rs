//! The `giant-churn` mode: 1 GiB pages after a churn with unmovable
//! memory, under the placement the command line names
//! (`placement=superpageblock`, the default, `neighbour` or `linux`).
//!
//! Mapped movable "user" pages stand for the page cache: the Normal zone
//! is filled with them, and each round the oldest quarter is evicted
//! (unmapped and freed) and the zone filled again; memory short in the
//! slow path evicts the oldest too (its reclaim). Interleaved with the
//! refill, unmovable kernel blocks (orders 0-3, through `alloc_slow`, whose
//! migrator moves user pages) grow from 5% to 10% of the zone over the
//! rounds, a quarter of them freed at random and replaced each round.
//! Then every user page but one in eight is evicted (dropping the cache),
//! memory is compacted, and `alloc_contig` takes 1 GiB pages until it
//! fails: the user pages still in the way migrate out (copied, their page
//! table entries switched). Each page is written and read back a word a
//! 4 KiB, every kept user page is checked, everything is freed, and no
//! frame may be lost.

use crate::bringup::{KernelMachine, NODE};
use crate::giant::{GiantError, UserSpace, user_space};
use crate::migrate::{CHECKED, pattern};
use crate::permutation::splitmix64;
use crate::time::Instant;
use crate::user_pages::{UserMigrator, user_addr};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use pageframe::{
    Block, Gfp, Migrator, NodeId, Order, Pfn, Segment, ZoneKind,
    compact::{MigrateError, MigrateMode, Move, SlowPathHooks},
    tune::Placement,
    zone::SuperpageblockCounts,
};

/// Frames in 1 GiB.
const GIANT: u64 = 1 << 18;
/// Rounds of the churn.
const ROUNDS: u32 = 8;

/// What the run measured.
#[derive(Debug, Clone, Default)]
pub struct ChurnReport {
    /// The placement in force.
    pub placement: Placement,
    /// User pages evicted over the churn (reclaim's included).
    pub evicted: u64,
    /// Unmovable frames at the end, in the Normal zone and in all.
    pub unmovable_normal: u64,
    pub unmovable: u64,
    /// The Normal zone's superpageblocks at the end of the churn.
    pub counts: SuperpageblockCounts,
    /// Its map, one character a superpageblock.
    pub map: Vec<u8>,
    /// Pageblocks emptied to make room for unmovable memory.
    pub room_made: u64,
    /// User pages kept through the end, and those moved for the 1 GiB pages
    /// (compaction's and `alloc_contig`'s).
    pub kept: u64,
    pub moved: u64,
    /// 1 GiB pages taken.
    pub taken: u64,
    /// Cycles of the churn and of taking the pages.
    pub churn_cycles: u64,
    pub take_cycles: u64,
}

/// The kernel's side: user pages by age, their tables and migrator, the
/// slow path's reclaim.
struct Churn<'t> {
    machine: &'static KernelMachine,
    mig: UserMigrator<'t>,
    /// Mapped user pages, oldest first.
    lru: VecDeque<u32>,
    /// User page numbers free for reuse.
    spare: Vec<u32>,
    evicted: u64,
}

impl Churn<'_> {
    /// Maps one more user page (its checked words written); `false` when
    /// the zone has no frame for it.
    fn map_one(&mut self) -> Result<bool, GiantError> {
        let Ok(a) = self.machine.alloc(NODE, Gfp::HIGHUSER_MOVABLE, Order::ZERO) else {
            return Ok(false);
        };
        let Some(vpn) = self.spare.pop() else {
            self.machine
                .free(a)
                .map_err(|_| GiantError::Allocator("free"))?;
            return Ok(false);
        };
        // Mapped: the page-table entry keeps the block as its number.
        let (pfn, _) = a.into_raw();
        if !self.mig.tables.map_user(u64::from(vpn), pfn) {
            return Err(GiantError::NoMemory("user page table"));
        }
        self.mig.rmap[pfn.get() as usize] = vpn + 1;
        let page = user_addr(u64::from(vpn));
        for w in CHECKED {
            // SAFETY: `page` maps a frame just allocated for this page.
            unsafe { page.add(w).write_volatile(pattern(u64::from(vpn), w)) };
        }
        self.lru.push_back(vpn);
        Ok(true)
    }

    /// Unmaps and frees the oldest user page; its frame count (0 if none).
    fn evict_one(&mut self) -> u64 {
        let Some(vpn) = self.lru.pop_front() else {
            return 0;
        };
        let Some(pfn) = self.mig.tables.user_frame(u64::from(vpn)) else {
            return 0;
        };
        self.mig.tables.unmap_user(u64::from(vpn));
        self.mig.rmap[pfn.get() as usize] = 0;
        self.spare.push(vpn);
        self.evicted += 1;
        // SAFETY: the entry held the page's number and is gone: the block
        // is this kernel's, used by nothing else.
        match unsafe { self.machine.block_from_raw(pfn, Order::ZERO) } {
            Ok(b) => u64::from(self.machine.free(b).is_ok()),
            Err(_) => 0,
        }
    }
}

impl Migrator for Churn<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.mig.isolate(pfn, order)
    }
    fn migrate(&mut self, s: Pfn, d: Pfn, o: Order, m: MigrateMode) -> Result<(), MigrateError> {
        self.mig.migrate(s, d, o, m)
    }
    fn migrate_batch(&mut self, moves: &mut [Move], m: MigrateMode) {
        self.mig.migrate_batch(moves, m)
    }
    fn putback(&mut self, b: Block) {
        self.mig.putback(b)
    }
    fn migrated(&mut self, b: Block, from: Pfn) {
        self.mig.migrated(b, from)
    }
    fn drain_caches(&mut self) {
        self.mig.drain_caches()
    }
}

/// The slow path's reclaim evicts the oldest user pages.
impl SlowPathHooks for Churn<'_> {
    fn reclaim(&mut self, _: NodeId, _: ZoneKind, pages: u64) -> u64 {
        let mut freed = 0;
        while freed < pages && !self.lru.is_empty() {
            freed += self.evict_one();
        }
        freed
    }
    fn now_ns(&self) -> u64 {
        crate::timer::now_ns()
    }
}

/// An unmovable block's order: 0 mostly, up to 3.
fn unmovable_order(rng: &mut u64) -> Order {
    let o = match splitmix64(rng) % 20 {
        0..=13 => 0,
        14..=16 => 1,
        17..=18 => 2,
        _ => 3,
    };
    Order::new(o).unwrap_or_default()
}

/// One run.
pub fn run(
    machine: &'static KernelMachine,
    pfn_end: u64,
    seed: u64,
) -> Result<ChurnReport, GiantError> {
    let mut rep = ChurnReport {
        placement: machine.tunables().fallback_placement(),
        ..ChurnReport::default()
    };
    // Bookkeeping and tables first (see `giant::user_space`).
    let UserSpace {
        normal,
        cap,
        rmap,
        mut tables,
    } = user_space(machine, pfn_end)?;
    let mut lru = VecDeque::new();
    lru.try_reserve_exact(cap as usize)
        .map_err(|_| GiantError::NoMemory("user page list"))?;
    let mut spare = Vec::new();
    spare
        .try_reserve_exact(cap as usize)
        .map_err(|_| GiantError::NoMemory("user page numbers"))?;
    spare.extend((0..cap as u32).rev());
    // Heap memory comes from the allocator: everything the run keeps is
    // reserved before the count of free frames it must give back.
    let mut giants: Vec<Segment> = Vec::new();
    giants
        .try_reserve_exact((cap / GIANT + 1) as usize)
        .map_err(|_| GiantError::NoMemory("1 GiB page list"))?;
    let mut kernel: Vec<Block> = Vec::new();
    kernel
        .try_reserve_exact((cap / 8) as usize)
        .map_err(|_| GiantError::NoMemory("unmovable list"))?;
    // Frames parked in per-CPU caches and order-0 stripes count once they
    // are back: the same before and after.
    machine.drain_pcp(None, |_| core::hint::spin_loop());
    machine.drain_stripes();
    let base_free = machine.inspect().free_pages();
    let mut c = Churn {
        machine,
        mig: UserMigrator {
            drains: true,
            ..UserMigrator::new(machine, &mut tables, rmap)
        },
        lru,
        spare,
        evicted: 0,
    };
    let mut rng = seed;
    let mut unmovable = 0u64;

    // The churn.
    let t0 = Instant::now();
    for round in 0..ROUNDS {
        // A quarter of the kernel's blocks replaced at random, and its share
        // up by a step: 5% of the zone in round 0, 10% in the last.
        for _ in 0..kernel.len() / 4 {
            let i = (splitmix64(&mut rng) % kernel.len() as u64) as usize;
            let b = kernel.swap_remove(i);
            unmovable -= b.order().pages();
            machine
                .free(b)
                .map_err(|_| GiantError::Allocator("free of a kernel block"))?;
        }
        let target = cap * (5 + 5 * u64::from(round) / u64::from(ROUNDS - 1)) / 100;
        // The oldest quarter of the page cache evicted, then the zone
        // filled again, the kernel's blocks allocated along the way.
        for _ in 0..c.lru.len() / 4 {
            c.evict_one();
        }
        let refill = cap.saturating_sub(c.lru.len() as u64);
        let every = (refill / target.saturating_sub(unmovable).max(1)).max(1);
        let mut n = 0u64;
        let mut full = false;
        loop {
            if unmovable < target && (full || n.is_multiple_of(every)) {
                let order = unmovable_order(&mut rng);
                match machine.alloc_slow(NODE, Gfp::KERNEL, order, &mut c) {
                    Ok(b) => {
                        unmovable += b.order().pages();
                        kernel.push(b);
                    }
                    Err(_) => return Err(GiantError::NoMemory("an unmovable block")),
                }
            }
            n += 1;
            full = !c.map_one()?;
            if full && unmovable >= target {
                break;
            }
        }
    }
    rep.churn_cycles = t0.elapsed().0;
    rep.evicted = c.evicted;
    rep.counts = normal.superpageblock_counts();
    rep.map = normal.superpageblocks().map(|u| u.symbol() as u8).collect();
    rep.room_made = normal.fallback_stats().superpageblock_room_made;
    rep.unmovable = unmovable;
    rep.unmovable_normal = kernel
        .iter()
        .filter(|b| b.zone() == ZoneKind::Normal)
        .map(|b| b.order().pages())
        .sum();

    // The cache dropped but for one page in eight, memory compacted, and
    // 1 GiB pages taken until none is left.
    let t1 = Instant::now();
    for i in 0..c.lru.len() {
        if i % 8 == 0 {
            c.lru.rotate_left(1);
        } else {
            c.evict_one();
        }
    }
    rep.kept = c.lru.len() as u64;
    let moved_before = c.mig.moved;
    machine.compact_node(NODE, &mut c);
    while giants.len() < giants.capacity()
        && let Ok(s) = machine.alloc_contig(NODE, Gfp::HIGHUSER_MOVABLE, GIANT, GIANT, &mut c)
    {
        giants.push(s);
    }
    rep.take_cycles = t1.elapsed().0;
    rep.moved = c.mig.moved - moved_before;
    rep.taken = giants.len() as u64;
    // Each page is ours: a word a 4 KiB written and read back through the
    // direct map.
    for (k, g) in giants.iter().enumerate() {
        let base = g.start().addr().get() as *mut u64;
        for i in 0..GIANT {
            let v = pattern(i, k);
            // SAFETY: the direct map covers all RAM; the range is ours.
            unsafe { base.add((i * 512 + i % 512) as usize).write_volatile(v) };
        }
        for i in 0..GIANT {
            // SAFETY: as above.
            let v = unsafe { base.add((i * 512 + i % 512) as usize).read_volatile() };
            if v != pattern(i, k) {
                return Err(GiantError::Mismatch(i));
            }
        }
    }
    // The kept user pages kept their data through every move.
    for &vpn in &c.lru {
        let v = u64::from(vpn);
        let pfn = c
            .mig
            .tables
            .user_frame(v)
            .ok_or(GiantError::Allocator("a kept page lost its mapping"))?;
        if giants.iter().any(|g| g.range().contains(pfn)) {
            return Err(GiantError::LeftInRange(v));
        }
        for w in CHECKED {
            // SAFETY: a mapped user page.
            if unsafe { user_addr(v).add(w).read_volatile() } != pattern(v, w) {
                return Err(GiantError::Corrupt { vpn: v, word: w });
            }
        }
    }

    // Everything back.
    for g in giants.drain(..) {
        machine
            .free_segment(g)
            .map_err(|_| GiantError::Allocator("free_segment"))?;
    }
    while !c.lru.is_empty() {
        c.evict_one();
    }
    for b in kernel.drain(..) {
        machine
            .free(b)
            .map_err(|_| GiantError::Allocator("free of a kernel block"))?;
    }
    machine.drain_pcp(None, |_| core::hint::spin_loop());
    machine.drain_stripes();
    machine
        .validate()
        .map_err(|_| GiantError::Allocator("validate"))?;
    let after = machine.inspect().free_pages();
    if after != base_free {
        return Err(GiantError::Conservation {
            before: base_free,
            after,
        });
    }
    Ok(rep)
}

/// Prints the report.
pub fn print(r: &ChurnReport, rate: &crate::time::TscRate) {
    let map = core::str::from_utf8(&r.map).unwrap_or("?");
    crate::println!(
        "giant-churn: placement {}: {} rounds, {} user pages evicted, unmovable {} frames ({} in Normal), {} pageblocks emptied for it, churn {}",
        r.placement.name(),
        ROUNDS,
        r.evicted,
        r.unmovable,
        r.unmovable_normal,
        r.room_made,
        rate.duration(crate::time::Cycles(r.churn_cycles))
    );
    crate::println!(
        "giant-churn: Normal zone 1 GiB regions: {} could be 1 GiB pages, {} tainted (the unmovable memory in it needs {}), {} clean: {map} ({})",
        r.counts.whole,
        r.counts.tainted,
        r.unmovable_normal.div_ceil(GIANT),
        r.counts.clean,
        pageframe::zone::SUPERPAGEBLOCK_LEGEND
    );
    crate::println!(
        "giant-churn: {} 1 GiB pages taken, {} user pages moved for them ({} kept, all checked), {}",
        r.taken,
        r.moved,
        r.kept,
        rate.duration(crate::time::Cycles(r.take_cycles))
    );
}
