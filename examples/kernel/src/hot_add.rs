//! Memory hot-add (part of the `hotplug` mode). Bring-up kept the top
//! 256 MiB of RAM out of every zone and declared it hotpluggable as the
//! node's Movable zone, as firmware declares a DIMM slot. Here that memory
//! "arrives": the zone is hot-added at run time with its metadata carved
//! from its own first frames (`Inspect::memmap_on_memory`), onlined, and a
//! workload writes data into it. Then its upper half goes offline again
//! (the data there migrates into the lower half, copied by this kernel),
//! every word is checked, and the half comes back online.

use crate::bringup::{KernelMachine, NODE};
use crate::migrate::{CHECKED, pattern};
use crate::time::{Cycles, Instant};
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use pageframe::{
    Block, Gfp, Migrator, Order, PAGE_SIZE, Pfn, PfnRange, ZoneKind,
    compact::{MigrateError, MigrateMode},
};

/// What went wrong.
#[derive(Debug)]
pub enum HotAddError {
    /// Bring-up declared no hotpluggable range (the guest needs RAM above
    /// 4.5 GiB).
    NotDeclared,
    /// The range cannot hold its own metadata.
    TooSmall,
    /// The allocator refused a step.
    Allocator(&'static str),
    /// A word read back wrong.
    Corrupt(u64),
    /// Frames leaked or appeared.
    Conservation { before: u64, after: u64 },
}

impl core::fmt::Display for HotAddError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotDeclared => f.write_str("no hotpluggable range (boot with -m 6G)"),
            Self::TooSmall => f.write_str("the range cannot hold its metadata"),
            Self::Allocator(w) => write!(f, "allocator: {w}"),
            Self::Corrupt(id) => write!(f, "page {id} read back wrong"),
            Self::Conservation { before, after } => {
                write!(f, "free frames {before} before, {after} after")
            }
        }
    }
}

/// What the run did.
#[derive(Debug, Clone, Copy)]
pub struct HotAddReport {
    /// The hot-added range, the frames holding its metadata, the frames
    /// onlined.
    pub range: PfnRange,
    pub metadata: PfnRange,
    pub online: PfnRange,
    /// Cycles to hot-add and online it.
    pub add_cycles: Cycles,
    /// Pages the workload wrote into it.
    pub pages: u64,
    /// Pages migrated out of the offlined half, and cycles the offline took.
    pub moved: u64,
    pub offline_cycles: Cycles,
}

/// The workload's index: page id + 1 for each frame of the hot-added
/// range (0: not the workload's).
struct Owners {
    base: u64,
    id: Vec<u64>,
}

impl Owners {
    fn slot(&mut self, pfn: Pfn) -> Option<&mut u64> {
        let i = pfn.get().checked_sub(self.base)?;
        self.id.get_mut(usize::try_from(i).ok()?)
    }

    /// (frame, page id) of every page.
    fn pages(&self) -> impl Iterator<Item = (Pfn, u64)> + '_ {
        self.id
            .iter()
            .enumerate()
            .filter(|e| *e.1 != 0)
            .map(|(i, &id)| (Pfn::new(self.base + i as u64), id - 1))
    }
}

/// Copies frames through the direct map and keeps the index up to date.
/// The workload's pages are kept as numbers in the index: a page is made a
/// block again when the allocator asks to move it, and given up as a
/// number once it is back or moved.
struct Copier<'i> {
    machine: &'static KernelMachine,
    owner: &'i mut Owners,
}

impl Migrator for Copier<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        if self.owner.slot(pfn).is_none_or(|id| *id == 0) {
            return None;
        }
        // SAFETY: a workload page: the index holds its number, and the
        // block goes back to a number in `putback` or `migrated`.
        unsafe { self.machine.block_from_raw(pfn, order) }.ok()
    }

    fn putback(&mut self, b: Block) {
        let _ = b.into_raw();
    }

    fn migrated(&mut self, b: Block, _: Pfn) {
        // `migrate` moved the page's id in the index already.
        let _ = b.into_raw();
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        if self.owner.slot(dst).is_none() {
            // Destinations come from the range's own zone.
            return Err(MigrateError::Busy);
        }
        let bytes = (order.pages() * PAGE_SIZE) as usize;
        // SAFETY: the direct map identity-maps all RAM; `src` is a block
        // the allocator isolated for migration and `dst` a block it just
        // allocated for it, so nothing else touches either.
        unsafe {
            core::ptr::copy_nonoverlapping(
                src.addr().get() as *const u8,
                dst.addr().get() as *mut u8,
                bytes,
            )
        };
        let id = self.owner.slot(src).map_or(0, core::mem::take);
        if let Some(d) = self.owner.slot(dst) {
            *d = id;
        }
        Ok(())
    }
}

fn write_page(pfn: Pfn, id: u64) {
    let p = pfn.addr().get() as *mut u64;
    for w in CHECKED {
        // SAFETY: direct-mapped RAM of a frame the workload owns.
        unsafe { p.add(w).write_volatile(pattern(id, w)) };
    }
}

fn page_ok(pfn: Pfn, id: u64) -> bool {
    let p = pfn.addr().get() as *const u64;
    // SAFETY: as in `write_page`.
    CHECKED
        .iter()
        .all(|&w| unsafe { p.add(w).read_volatile() } == pattern(id, w))
}

/// Hot-adds the declared range and exercises it.
pub fn run(machine: &'static KernelMachine) -> Result<HotAddReport, HotAddError> {
    let range = machine
        .inspect()
        .hotplug_range(NODE, ZoneKind::Movable)
        .ok_or(HotAddError::NotDeclared)?;
    let plan = machine
        .inspect()
        .memmap_on_memory(range)
        .ok_or(HotAddError::TooSmall)?;
    let managed = machine.inspect().managed_pages();
    let t0 = Instant::now();
    // SAFETY: bring-up kept `range` out of every zone and of the heap, so
    // nothing uses its first frames; the direct map covers them. They hold
    // the zone's metadata for the rest of the kernel's life.
    let meta: &'static mut [MaybeUninit<u8>] = unsafe {
        core::slice::from_raw_parts_mut(
            plan.metadata.start.addr().get() as *mut MaybeUninit<u8>,
            plan.metadata_bytes() as usize,
        )
    };
    machine
        .hot_add_zone(NODE, ZoneKind::Movable, range, meta)
        .map_err(|_| HotAddError::Allocator("hot_add_zone"))?;
    machine
        .add_free_range(plan.online)
        .map_err(|_| HotAddError::Allocator("online"))?;
    let add_cycles = t0.elapsed();
    if machine.inspect().managed_pages() != managed + plan.online.len() {
        return Err(HotAddError::Allocator("managed frames after hot-add"));
    }
    let base_free = machine.inspect().free_pages();

    // The workload: movable pages, each with its id written into it, until
    // half of the new memory is in use (movable requests prefer the
    // Movable zone); every other one freed again so that both halves hold
    // data and have room.
    let want = plan.online.len() / 2;
    let mut owner = Owners {
        base: range.start.get(),
        id: Vec::new(),
    };
    owner
        .id
        .try_reserve_exact(range.len() as usize)
        .map_err(|_| HotAddError::Allocator("workload index"))?;
    owner.id.resize(range.len() as usize, 0);
    let mut all = Vec::new();
    all.try_reserve_exact(want as usize * 2)
        .map_err(|_| HotAddError::Allocator("workload list"))?;
    while (all.len() as u64) < want * 2 {
        let a = machine
            .alloc(NODE, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .map_err(|_| HotAddError::Allocator("workload page"))?;
        if a.zone() != ZoneKind::Movable {
            machine
                .free(a)
                .map_err(|_| HotAddError::Allocator("free"))?;
            break;
        }
        all.push(a);
    }
    for (i, b) in all.drain(..).enumerate() {
        if i % 2 == 0 {
            // Kept as its number in the index from here on.
            let (p, _) = b.into_raw();
            write_page(p, i as u64);
            *owner
                .slot(p)
                .ok_or(HotAddError::Allocator("page outside the range"))? = i as u64 + 1;
        } else {
            machine
                .free(b)
                .map_err(|_| HotAddError::Allocator("free"))?;
        }
    }
    drop(all);
    let pages = owner.pages().count() as u64;

    // The upper half (whole pageblocks) goes out; its data moves down.
    let mid = (plan.online.start.get() + plan.online.len() / 2).next_multiple_of(512);
    let half = PfnRange::new(Pfn::new(mid), plan.online.end);
    let t1 = Instant::now();
    let moved = machine
        .offline_range(
            half,
            &mut Copier {
                machine,
                owner: &mut owner,
            },
        )
        .map_err(|_| HotAddError::Allocator("offline half"))?;
    let offline_cycles = t1.elapsed();
    if owner.pages().count() as u64 != pages {
        return Err(HotAddError::Allocator("a page lost its owner"));
    }
    for (pfn, id) in owner.pages() {
        if half.contains(pfn) || !page_ok(pfn, id) {
            return Err(HotAddError::Corrupt(id));
        }
    }
    for (pfn, _) in owner.pages() {
        // SAFETY: the index held the page's number; nothing uses it after.
        let b = unsafe { machine.block_from_raw(pfn, Order::ZERO) }
            .map_err(|_| HotAddError::Allocator("a workload page's number"))?;
        machine
            .free(b)
            .map_err(|_| HotAddError::Allocator("free of a workload page"))?;
    }
    machine
        .add_free_range(half)
        .map_err(|_| HotAddError::Allocator("online half"))?;
    drop(owner);
    machine.drain_pcp(None, |_| core::hint::spin_loop());
    let after = machine.inspect().free_pages();
    if after != base_free {
        return Err(HotAddError::Conservation {
            before: base_free,
            after,
        });
    }
    Ok(HotAddReport {
        range,
        metadata: plan.metadata,
        online: plan.online,
        add_cycles,
        pages,
        moved,
        offline_cycles,
    })
}

/// Prints the report.
pub fn print(r: &HotAddReport, rate: &crate::time::TscRate) {
    crate::println!(
        "hot-add: {} MiB at pfn {:#x} added as the Movable zone in {}; its metadata in its own first {} frames (memmap_on_memory), {} frames onlined",
        (r.range.len() * PAGE_SIZE) >> 20,
        r.range.start.get(),
        rate.duration(r.add_cycles),
        r.metadata.len(),
        r.online.len(),
    );
    crate::println!(
        "hot-add: {} pages written into it; upper half offline in {} ({} pages migrated down), every page verified, back online",
        r.pages,
        rate.duration(r.offline_cycles),
        r.moved,
    );
}
