//! The `giant` and `hotplug` modes: a 1 GiB page from
//! `Machine::alloc_contig`, and 256 MiB taken offline and back online.
//!
//! Mapped movable "user" pages fill the Normal zone and three of every four
//! are freed (by frame number), so every 1 GiB range holds user data. Then
//! `alloc_contig` takes 262,144 frames aligned to 1 GiB: it isolates the
//! range's pageblocks and the kernel's migrator moves the user pages out of
//! it (copy, switch the PTE, flush). The range is mapped with one level-3
//! (1 GiB) page-table entry, a word is written in every 4 KiB of it through
//! that mapping and read back through the direct map, every user page is
//! checked through its (possibly new) mapping, and everything is freed.
//!
//! `hotplug` fills the zone the same way, then takes the first 256 MiB
//! range with nothing unmovable in it offline (`Machine::offline_range`:
//! the user pages in it migrate out, the frames leave the zone), checks
//! every user page and that new allocations come from elsewhere while the
//! range is out, and brings it back (`Machine::add_free_range`).

use crate::bringup::{KernelMachine, NODE};
use crate::irq_lock::IrqLock;
use crate::migrate::{CHECKED, pattern};
use crate::time::Instant;
use crate::user_pages::{GIANT_BASE, GiantMapping, Tables, UserMigrator, user_addr};
use alloc::vec::Vec;
use core::fmt;
use pageframe::{ContigError, Gfp, Order, Pfn, PfnRange, ZoneKind, zone::Zone};

/// Frames in 1 GiB.
const GIANT: u64 = 1 << 18;

/// What failed.
#[derive(Debug)]
pub enum GiantError {
    /// No heap or frame for bookkeeping or page tables.
    NoMemory(&'static str),
    /// The allocator could not take a 1 GiB range.
    Contig(ContigError),
    /// The 1 GiB mapping read back wrong at this frame of the range.
    Mismatch(u64),
    /// A user page lost its data.
    Corrupt { vpn: u64, word: usize },
    /// A user page still maps a frame of the 1 GiB range.
    LeftInRange(u64),
    /// Frames leaked or appeared across the run.
    Conservation { before: u64, after: u64 },
    /// The allocator refused a free or failed validation.
    Allocator(&'static str),
}

impl fmt::Display for GiantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory(w) => write!(f, "out of memory for {w}"),
            Self::Contig(e) => write!(f, "alloc_contig: {e}"),
            Self::Mismatch(i) => write!(f, "1 GiB page reads wrong at frame {i}"),
            Self::Corrupt { vpn, word } => write!(f, "user page {vpn} word {word} corrupt"),
            Self::LeftInRange(v) => write!(f, "user page {v} still maps into the range"),
            Self::Conservation { before, after } => {
                write!(f, "free frames {before} before, {after} after")
            }
            Self::Allocator(w) => write!(f, "allocator: {w}"),
        }
    }
}

/// What the run measured.
#[derive(Debug, Clone, Default)]
pub struct GiantReport {
    /// User pages mapped, and kept after the three-in-four free.
    pub filled: u64,
    pub kept: u64,
    /// The 1 GiB range.
    pub range: Option<PfnRange>,
    /// Its zone.
    pub zone: Option<ZoneKind>,
    /// Frames migrated out of it.
    pub moved: u64,
    /// Cycles `alloc_contig` (or `offline_range`) took.
    pub cycles: u64,
    /// The offlined range came back online.
    pub onlined: bool,
    /// How the 1 GiB page was mapped.
    pub mapping: Option<GiantMapping>,
}

/// Whether the CPU maps 1 GiB pages.
fn has_giant_pages() -> bool {
    // Leaf 0x8000_0001 exists on every x86-64 CPU (it reports long mode).
    let r = core::arch::x86_64::__cpuid(0x8000_0001);
    r.edx & (1 << 26) != 0
}

/// Which scenario runs on the filled zone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Target {
    /// A 1 GiB page.
    Giant,
    /// 256 MiB offline and back online.
    Hotplug,
}

/// Frames offlined by the hotplug scenario (256 MiB).
const OFFLINE: u64 = 1 << 16;

/// What a run that fills the Normal zone with user pages sets up first.
pub struct UserSpace {
    /// The Normal zone the pages fill.
    pub normal: &'static Zone<'static, IrqLock>,
    /// The Normal zone's free frames: the most user pages there can be.
    pub cap: u64,
    /// The owner of each frame (a user page's number), 0 for none.
    pub rmap: Vec<u32>,
    /// The user page tables, with a table for every page up to `cap`.
    pub tables: Tables,
}

/// Bookkeeping and tables before the fill, so that filling takes no
/// frame for them. The reverse map of a large guest is more than the
/// largest block: the heap takes it as a contiguous range. Table frames
/// stay in the tables (as numbers) for the kernel's life.
pub fn user_space(machine: &'static KernelMachine, pfn_end: u64) -> Result<UserSpace, GiantError> {
    let normal = machine
        .inspect()
        .node(NODE)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or(GiantError::NoMemory(
            "a Normal zone (boot with -m 4G or more)",
        ))?;
    let cap = normal.free_pages();
    let mut rmap = Vec::new();
    rmap.try_reserve_exact(pfn_end as usize)
        .map_err(|_| GiantError::NoMemory("reverse map"))?;
    rmap.resize(pfn_end as usize, 0u32);
    let mut tables = Tables::current();
    let mut take = || crate::user_pages::table_frame(machine);
    for vpn in (0..cap).step_by(512) {
        tables
            .entry(
                crate::user_pages::USER_BASE + vpn * 4096,
                1,
                Some(&mut take),
            )
            .map_err(|_| GiantError::NoMemory("user page tables"))?;
    }
    Ok(UserSpace {
        normal,
        cap,
        rmap,
        tables,
    })
}

/// One run.
pub fn run(
    machine: &'static KernelMachine,
    pfn_end: u64,
    target: Target,
) -> Result<GiantReport, GiantError> {
    let mut rep = GiantReport::default();
    // Without 1 GiB pages (CPUID 0x8000_0001 EDX bit 26; QEMU's `qemu64`
    // lacks `pdpe1gb`) the range is the same, mapped with 2 MiB entries.
    let how = if has_giant_pages() {
        GiantMapping::OneGiB
    } else {
        GiantMapping::TwoMiB
    };
    let UserSpace {
        cap,
        mut rmap,
        mut tables,
        ..
    } = user_space(machine, pfn_end)?;
    let level = match how {
        GiantMapping::OneGiB => 3,
        GiantMapping::TwoMiB => 2,
    };
    let mut take = || crate::user_pages::table_frame(machine);
    tables
        .entry(GIANT_BASE, level, Some(&mut take))
        .map_err(|_| GiantError::NoMemory("1 GiB table"))?;
    let base_free = machine.inspect().free_pages();

    // Fill the Normal zone with user pages.
    let mut vpn = 0u64;
    while vpn < cap {
        let Ok(a) = machine.alloc(NODE, Gfp::HIGHUSER_MOVABLE, Order::ZERO) else {
            break;
        };
        if a.zone() != ZoneKind::Normal {
            machine.free(a).map_err(|_| GiantError::Allocator("free"))?;
            break;
        }
        // Mapped: the page-table entry keeps the block as its number.
        let (pfn, _) = a.into_raw();
        if !tables.map_user(vpn, pfn) {
            return Err(GiantError::NoMemory("user page table"));
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
    for v in 0..rep.filled {
        let pfn = tables.user_frame(v).ok_or(GiantError::Allocator("rmap"))?;
        if pfn.get() % 4 != 0 {
            tables.unmap_user(v);
            rmap[pfn.get() as usize] = 0;
            free_user_page(machine, pfn)?;
        } else {
            rep.kept += 1;
        }
    }

    let mut mig = UserMigrator {
        drains: true,
        ..UserMigrator::new(machine, &mut tables, rmap)
    };
    let (range, giant) = match target {
        Target::Giant => {
            let g = giant_page(machine, &mut mig, &mut rep, how)?;
            (g.range(), Some(g))
        }
        Target::Hotplug => (hotplug(machine, &mut mig, &mut rep)?, None),
    };
    let tables = mig.tables;
    check_user_pages(tables, rep.filled, range)?;

    // Everything back.
    if let Some(g) = giant {
        machine
            .free_segment(g)
            .map_err(|_| GiantError::Allocator("free_segment"))?;
    }
    for v in 0..rep.filled {
        if let Some(pfn) = tables.user_frame(v) {
            tables.unmap_user(v);
            free_user_page(machine, pfn)?;
        }
    }
    machine.drain_pcp(None, |_| core::hint::spin_loop());
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

/// Frees a user page this kernel has just unmapped (its number was the
/// page-table entry's).
fn free_user_page(machine: &'static KernelMachine, pfn: Pfn) -> Result<(), GiantError> {
    // SAFETY: the entry held the page's number and is gone: the block is
    // this kernel's, used by nothing else.
    let b = unsafe { machine.block_from_raw(pfn, Order::ZERO) }
        .map_err(|_| GiantError::Allocator("a user page's number"))?;
    machine
        .free(b)
        .map_err(|_| GiantError::Allocator("free of a user page"))
}

/// Every user page kept its data, and none maps into `range`.
fn check_user_pages(tables: &mut Tables, filled: u64, range: PfnRange) -> Result<(), GiantError> {
    for v in 0..filled {
        let Some(pfn) = tables.user_frame(v) else {
            continue;
        };
        if range.contains(pfn) {
            return Err(GiantError::LeftInRange(v));
        }
        for w in CHECKED {
            // SAFETY: a mapped user page.
            if unsafe { user_addr(v).add(w).read_volatile() } != pattern(v, w) {
                return Err(GiantError::Corrupt { vpn: v, word: w });
            }
        }
    }
    Ok(())
}

/// The 1 GiB page: taken, mapped (`how`), written through the mapping and
/// read back through the direct map. Returns it (held).
fn giant_page(
    machine: &'static KernelMachine,
    mig: &mut UserMigrator<'_>,
    rep: &mut GiantReport,
    how: GiantMapping,
) -> Result<pageframe::Segment, GiantError> {
    // The 1 GiB page.
    let t0 = Instant::now();
    let got = machine.alloc_contig(NODE, Gfp::HIGHUSER_MOVABLE, GIANT, GIANT, mig);
    rep.cycles = t0.elapsed().0;
    let got = match got {
        Ok(g) => g,
        Err(e) => {
            // Say what stood in the way of each candidate.
            for z in machine.inspect().all_zones() {
                let span = z.span();
                let mut s = span.start.get().next_multiple_of(GIANT);
                while s + GIANT <= span.end.get() {
                    let cand = PfnRange::new(Pfn::new(s), Pfn::new(s + GIANT));
                    let b = z.inspect(|m| m.range_blocker(cand));
                    crate::println!("giant: candidate {cand:?} in {}: {b:?}", z.kind());
                    s += GIANT;
                }
            }
            return Err(GiantError::Contig(e));
        }
    };
    rep.range = Some(got.range());
    rep.zone = Some(got.zone());
    rep.moved = got.moved();
    let tables = &mut *mig.tables;
    if !tables.map_giant(got.start(), how) {
        return Err(GiantError::NoMemory("1 GiB entry in use"));
    }
    rep.mapping = Some(how);
    // A word in every 4 KiB, through the mapping...
    let giant = GIANT_BASE as *mut u64;
    for i in 0..GIANT {
        // SAFETY: the 1 GiB mapping covers the range, which is ours.
        unsafe {
            giant
                .add((i * 512 + i % 512) as usize)
                .write_volatile(pattern(i, 7))
        };
    }
    // ...read back through the direct map (physical address).
    let phys = got.start().addr().get() as *const u64;
    for i in 0..GIANT {
        // SAFETY: the direct map covers all RAM; the range is ours.
        let v = unsafe { phys.add((i * 512 + i % 512) as usize).read_volatile() };
        if v != pattern(i, 7) {
            return Err(GiantError::Mismatch(i));
        }
    }
    tables.unmap_giant(how);
    Ok(got)
}

/// 256 MiB of the Normal zone, holding user pages, offline (they migrate
/// out) and back online, with the user pages checked in between.
fn hotplug(
    machine: &'static KernelMachine,
    mig: &mut UserMigrator<'_>,
    rep: &mut GiantReport,
) -> Result<PfnRange, GiantError> {
    let normal = machine
        .inspect()
        .node(NODE)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .ok_or(GiantError::NoMemory("a Normal zone"))?;
    // The first 256 MiB-aligned range with nothing unmovable in it.
    let span = normal.span();
    let mut s = span.start.get().next_multiple_of(OFFLINE);
    let range = loop {
        if s + OFFLINE > span.end.get() {
            return Err(GiantError::Contig(ContigError::NotFound));
        }
        let cand = PfnRange::new(Pfn::new(s), Pfn::new(s + OFFLINE));
        if normal.inspect(|m| m.range_blocker(cand)).is_none() {
            break cand;
        }
        s += OFFLINE;
    };
    let managed = machine.inspect().managed_pages();
    let t0 = Instant::now();
    let moved = machine
        .offline_range(range, mig)
        .map_err(GiantError::Contig)?;
    rep.cycles = t0.elapsed().0;
    rep.range = Some(range);
    rep.zone = Some(ZoneKind::Normal);
    rep.moved = moved;
    if machine.inspect().managed_pages() != managed - OFFLINE {
        return Err(GiantError::Allocator("managed frames after offline"));
    }
    // The workload goes on while the range is out: its pages read back
    // through their new mappings, and new allocations come from elsewhere.
    check_user_pages(mig.tables, rep.filled, range)?;
    let mut probe = Vec::new();
    probe
        .try_reserve_exact(4096)
        .map_err(|_| GiantError::NoMemory("probe list"))?;
    while probe.len() < 4096 {
        let Ok(a) = machine.alloc(NODE, Gfp::HIGHUSER_MOVABLE, Order::ZERO) else {
            break;
        };
        if range.contains(a.pfn()) {
            return Err(GiantError::LeftInRange(a.pfn().get()));
        }
        probe.push(a);
    }
    for b in probe.drain(..) {
        machine
            .free(b)
            .map_err(|_| GiantError::Allocator("free of a probe frame"))?;
    }
    machine
        .add_free_range(range)
        .map_err(|_| GiantError::Allocator("online"))?;
    if machine.inspect().managed_pages() != managed {
        return Err(GiantError::Allocator("managed frames after online"));
    }
    rep.onlined = true;
    Ok(range)
}

/// Prints the report.
pub fn print(r: &GiantReport, rate: &crate::time::TscRate) {
    if r.onlined
        && let Some(range) = r.range
    {
        crate::println!(
            "hotplug: 256 MiB at pfn {:#x} offline, {} user pages migrated out of it ({} mapped, {} kept), offline_range {}",
            range.start.get(),
            r.moved,
            r.filled,
            r.kept,
            rate.duration(crate::time::Cycles(r.cycles))
        );
        crate::println!(
            "hotplug: user pages verified while offline, 4096 allocations served outside it, back online"
        );
        return;
    }
    if let Some(range) = r.range {
        crate::println!(
            "giant: 1 GiB page at pfn {:#x} (zone {}), {} user pages migrated out of it ({} mapped, {} kept), alloc_contig {}",
            range.start.get(),
            r.zone.map_or("?", |z| z.name()),
            r.moved,
            r.filled,
            r.kept,
            rate.duration(crate::time::Cycles(r.cycles))
        );
        match r.mapping {
            Some(GiantMapping::OneGiB) => crate::println!(
                "giant: written through one 1 GiB mapping, read back through the direct map"
            ),
            Some(GiantMapping::TwoMiB) => crate::println!(
                "giant: the CPU has no 1 GiB pages (no pdpe1gb): written through 512 2 MiB mappings of the range, read back through the direct map"
            ),
            None => {}
        }
    }
}
