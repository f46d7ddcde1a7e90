//! A "user" region: movable 4 KiB pages mapped in the kernel's own page
//! tables at virtual addresses away from the direct map, a reverse map from
//! frame to virtual page, and the [`Migrator`] that moves them a batch at a
//! time, as compaction asks (spec 03 §12): every source's entry becomes a
//! migration entry (not present), one TLB flush covers the batch (one
//! shootdown to the other CPU), then each frame is copied and its entry
//! points at the destination. A CPU that touches a page while it moves
//! faults and waits in [`wait_for_migration`] until its entry is back.
//!
//! A mapped page's block lives in its page-table entry as a frame number
//! (`Block::into_raw`): when the allocator asks to move it, the reverse map
//! says whose it is and the number becomes a block again
//! (`Machine::block_from_raw`), handed over; the block that comes back
//! (the old one, or the new frame's) goes into the entry as a number.
//!
//! A second region holds 2 MiB mappings of blocks the allocator hands out
//! whole (transparent huge pages in a real kernel).
//!
//! Table walks go through the direct map (identity: physical address ==
//! virtual address for all RAM), so a table frame is reachable at its own
//! physical address.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};
use pageframe::{
    Block, Gfp, Migrator, Order, Pfn,
    compact::{MigrateError, MigrateMode, Move, SlowPathHooks},
};

use crate::bringup::{KernelMachine, NODE};
use x86_64::instructions::tlb;
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::page_table::PageTableEntry;
use x86_64::structures::paging::{PageTable, PageTableFlags as F};
use x86_64::{PhysAddr, VirtAddr};

/// Base of the 4 KiB user region (level-4 slot 2, clear of the direct map).
pub const USER_BASE: u64 = 2 << 39;
/// Base of the 2 MiB region (level-4 slot 4).
pub const HUGE_BASE: u64 = 4 << 39;
/// Base of the 1 GiB mapping (level-4 slot 6).
pub const GIANT_BASE: u64 = 6 << 39;
const PAGE: u64 = 4096;
const HUGE: u64 = 2 << 20;

/// Flags of a user 4 KiB page (data only: never executable).
const PTE_FLAGS: F = F::PRESENT.union(F::WRITABLE).union(F::NO_EXECUTE);
/// Flags of intermediate tables (permissive; the leaf decides).
const TABLE_FLAGS: F = F::PRESENT.union(F::WRITABLE);
/// A migration entry (Linux's): not present, a bit the CPU ignores set, the
/// source frame's address kept. A CPU never caches a non-present entry, so
/// making it present again needs no flush.
const MIGRATING: F = F::BIT_9;
/// The address bits of an entry.
const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;

/// Faults that waited on a migration entry.
static MIGRATION_WAITS: AtomicU64 = AtomicU64::new(0);

/// A table frame could not be allocated, or a huge page is in the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTableFrame;

/// The live page tables (the root CR3 points at), walked through the
/// identity direct map.
pub struct Tables {
    root: *mut PageTable,
    /// Table frames allocated for the user regions.
    pub table_frames: u64,
}

impl Tables {
    /// The tables CR3 currently points at.
    pub fn current() -> Tables {
        let (frame, _) = Cr3::read();
        Tables {
            root: frame.start_address().as_u64() as *mut PageTable,
            table_frames: 0,
        }
    }

    /// The next-level table behind `e`, created (zeroed, from `alloc`) if
    /// absent and `alloc` is given.
    fn next(
        e: &mut PageTableEntry,
        alloc: &mut Option<&mut dyn FnMut() -> Option<u64>>,
        count: &mut u64,
    ) -> Result<Option<*mut PageTable>, NoTableFrame> {
        if e.flags().contains(F::HUGE_PAGE) {
            return Err(NoTableFrame);
        }
        if e.is_unused() {
            let Some(alloc) = alloc.as_deref_mut() else {
                return Ok(None);
            };
            let phys = alloc().ok_or(NoTableFrame)?;
            // SAFETY: a fresh frame from the allocator, reachable through the
            // identity direct map; nothing references it yet.
            unsafe { (phys as *mut PageTable).write(PageTable::new()) };
            e.set_addr(PhysAddr::new(phys), TABLE_FLAGS);
            *count += 1;
        }
        Ok(Some(e.addr().as_u64() as *mut PageTable))
    }

    /// The entry of `virt` at level 1 (4 KiB), 2 (2 MiB) or 3 (1 GiB),
    /// creating the tables above it with `alloc` when given.
    pub fn entry(
        &mut self,
        virt: u64,
        level: u8,
        mut alloc: Option<&mut dyn FnMut() -> Option<u64>>,
    ) -> Result<Option<&mut PageTableEntry>, NoTableFrame> {
        let v = VirtAddr::new(virt);
        let count = &mut self.table_frames;
        // SAFETY: CR3's root and (below) the tables of the user regions,
        // which this module created, identity-mapped; `&mut self` is the
        // only path to them, and each reference lives only until the next
        // level is found.
        let l4 = unsafe { &mut *self.root };
        let Some(l3) = Self::next(&mut l4[v.p4_index()], &mut alloc, count)? else {
            return Ok(None);
        };
        // SAFETY: as above.
        let l3 = unsafe { &mut *l3 };
        if level == 3 {
            return Ok(Some(&mut l3[v.p3_index()]));
        }
        let Some(l2) = Self::next(&mut l3[v.p3_index()], &mut alloc, count)? else {
            return Ok(None);
        };
        // SAFETY: as above.
        let l2 = unsafe { &mut *l2 };
        if level == 2 {
            return Ok(Some(&mut l2[v.p2_index()]));
        }
        let Some(l1) = Self::next(&mut l2[v.p2_index()], &mut alloc, count)? else {
            return Ok(None);
        };
        // SAFETY: as above.
        let l1 = unsafe { &mut *l1 };
        Ok(Some(&mut l1[v.p1_index()]))
    }

    /// Maps user page `vpn` to `pfn` (its tables must exist).
    pub fn map_user(&mut self, vpn: u64, pfn: Pfn) -> bool {
        match self.entry(USER_BASE + vpn * PAGE, 1, None) {
            Ok(Some(e)) => {
                e.set_addr(PhysAddr::new(pfn.get() * PAGE), PTE_FLAGS);
                true
            }
            _ => false,
        }
    }

    /// The frame user page `vpn` maps, if any.
    pub fn user_frame(&mut self, vpn: u64) -> Option<Pfn> {
        match self.entry(USER_BASE + vpn * PAGE, 1, None) {
            Ok(Some(e)) if !e.is_unused() => Some(Pfn::new(e.addr().as_u64() / PAGE)),
            _ => None,
        }
    }

    /// The entry of user page `vpn` as an atomic word: the entries a batch
    /// rewrites are read meanwhile by the other CPU's page walker and
    /// fault handler. `None` if its tables do not exist.
    fn user_entry(&mut self, vpn: u64) -> Option<&AtomicU64> {
        let e = self.entry(USER_BASE + vpn * PAGE, 1, None).ok()??;
        // SAFETY: a page-table entry is one aligned u64 (the crate's type
        // is a transparent wrapper); the table frame lives as long as the
        // tables, which outlive `&mut self`.
        Some(unsafe { &*(e as *mut PageTableEntry as *const AtomicU64) })
    }

    /// Turns user page `vpn`'s entry into a migration entry (the caller
    /// flushes TLBs before touching the frame).
    fn mark_migrating(&mut self, vpn: u64) {
        if let Some(e) = self.user_entry(vpn) {
            let v = e.load(Ordering::Relaxed);
            e.store(
                (v & ADDR_MASK) | (MIGRATING | F::NO_EXECUTE).bits(),
                Ordering::Release,
            );
        }
    }

    /// Points user page `vpn`'s (migration) entry at `pfn`, present again.
    fn map_migrated(&mut self, vpn: u64, pfn: Pfn) {
        if let Some(e) = self.user_entry(vpn) {
            e.store((pfn.get() * PAGE) | PTE_FLAGS.bits(), Ordering::Release);
        }
    }

    /// Unmaps user page `vpn` and flushes its TLB entry.
    pub fn unmap_user(&mut self, vpn: u64) {
        let virt = USER_BASE + vpn * PAGE;
        if let Ok(Some(e)) = self.entry(virt, 1, None) {
            e.set_unused();
            tlb::flush(VirtAddr::new(virt));
            crate::smp::flush_remote(virt);
        }
    }

    /// Maps huge slot `i` to the 2 MiB block at `pfn` (its level-2 table
    /// must exist).
    pub fn map_huge(&mut self, i: u64, pfn: Pfn) -> bool {
        let virt = HUGE_BASE + i * HUGE;
        match self.entry(virt, 2, None) {
            Ok(Some(e)) if e.is_unused() => {
                e.set_addr(PhysAddr::new(pfn.get() * PAGE), PTE_FLAGS | F::HUGE_PAGE);
                true
            }
            _ => false,
        }
    }

    /// Unmaps huge slot `i` and flushes its TLB entry.
    pub fn unmap_huge(&mut self, i: u64) {
        let virt = HUGE_BASE + i * HUGE;
        if let Ok(Some(e)) = self.entry(virt, 2, None) {
            e.set_unused();
            tlb::flush(VirtAddr::new(virt));
        }
    }
}

/// Entries that map the 1 GiB page.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum GiantMapping {
    /// One level-3 entry (the CPU has 1 GiB pages).
    OneGiB,
    /// 512 level-2 entries of 2 MiB (a CPU without `pdpe1gb`).
    TwoMiB,
}

impl Tables {
    /// Maps the 1 GiB page at `GIANT_BASE` to the 1 GiB-aligned range at
    /// `pfn` the way `how` says (the tables above the entries must exist:
    /// level 3 for one entry, level 2 for 2 MiB ones).
    pub fn map_giant(&mut self, pfn: Pfn, how: GiantMapping) -> bool {
        let (level, step, n) = match how {
            GiantMapping::OneGiB => (3, 0, 1),
            GiantMapping::TwoMiB => (2, HUGE, 512),
        };
        for i in 0..n {
            match self.entry(GIANT_BASE + i * step, level, None) {
                Ok(Some(e)) if e.is_unused() => e.set_addr(
                    PhysAddr::new(pfn.get() * PAGE + i * step),
                    PTE_FLAGS | F::HUGE_PAGE,
                ),
                _ => return false,
            }
        }
        true
    }

    /// Unmaps the 1 GiB page and flushes its TLB entries.
    pub fn unmap_giant(&mut self, how: GiantMapping) {
        let (level, step, n) = match how {
            GiantMapping::OneGiB => (3, 0, 1),
            GiantMapping::TwoMiB => (2, HUGE, 512),
        };
        for i in 0..n {
            let virt = GIANT_BASE + i * step;
            if let Ok(Some(e)) = self.entry(virt, level, None) {
                e.set_unused();
                tlb::flush(VirtAddr::new(virt));
            }
        }
    }
}

/// A zeroed frame for a page table of the user regions, kept in the tables
/// (as its number) for the kernel's life: from below 4 GiB while there is
/// room, so that the kernel's long-lived unmovable memory stays out of the
/// Normal zone's 1 GiB ranges.
pub fn table_frame(machine: &KernelMachine) -> Option<u64> {
    let gfp = Gfp::KERNEL | Gfp::ZERO;
    machine
        .alloc(NODE, gfp | Gfp::DMA32, Order::ZERO)
        .or_else(|_| machine.alloc(NODE, gfp, Order::ZERO))
        .ok()
        .map(|a| a.into_raw().0.get() * PAGE)
}

/// The address of user page `vpn`.
pub fn user_addr(vpn: u64) -> *mut u64 {
    (USER_BASE + vpn * PAGE) as *mut u64
}

/// The address of huge slot `i`.
pub fn huge_addr(i: u64) -> *mut u64 {
    (HUGE_BASE + i * HUGE) as *mut u64
}

/// Moves user pages for compaction: the reverse map says which virtual
/// page maps a frame; only frames of the user region move.
pub struct UserMigrator<'t> {
    /// The machine the pages came from.
    pub machine: &'static KernelMachine,
    /// The page tables holding the user region.
    pub tables: &'t mut Tables,
    /// Frame number -> user page number + 1 (0: not a user page).
    pub rmap: Vec<u32>,
    /// Pages moved.
    pub moved: u64,
    /// Moves refused (not a user page, or a block larger than a page).
    pub refused: u64,
    /// Batches unmapped (each one TLB flush, one shootdown if the other
    /// CPU uses the user region).
    pub batches: u64,
    /// Called at every scanner checkpoint (the pressure mode's hook).
    pub on_checkpoint: Option<&'t mut dyn FnMut()>,
    /// Whether a request to drain the per-CPU caches drains every CPU's
    /// ([`crate::bringup::KernelMachine::drain_pcp`]): for callers that
    /// hold no CPU handle, so that frames parked in caches reach an
    /// isolated range.
    pub drains: bool,
}

impl<'t> UserMigrator<'t> {
    /// A migrator of the user pages `rmap` maps in `tables`, nothing moved
    /// yet, no hook, no draining.
    pub fn new(machine: &'static KernelMachine, tables: &'t mut Tables, rmap: Vec<u32>) -> Self {
        UserMigrator {
            machine,
            tables,
            rmap,
            moved: 0,
            refused: 0,
            batches: 0,
            on_checkpoint: None,
            drains: false,
        }
    }
}

impl UserMigrator<'_> {
    fn user_page(&self, pfn: Pfn) -> Option<u64> {
        match self.rmap.get(pfn.get() as usize) {
            Some(&v) if v != 0 => Some(u64::from(v - 1)),
            _ => None,
        }
    }

    /// The user page `m` may move: a 4 KiB page of the region mapped at its
    /// source, going to a frame the reverse map covers.
    fn movable(&mut self, m: &Move) -> Option<u64> {
        let vpn = self
            .user_page(m.src())
            .filter(|_| m.order() == Order::ZERO)?;
        (m.dst().get() < self.rmap.len() as u64 && self.tables.user_frame(vpn) == Some(m.src()))
            .then_some(vpn)
    }
}

impl Migrator for UserMigrator<'_> {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        let vpn = self.user_page(pfn).filter(|_| order == Order::ZERO)?;
        if self.tables.user_frame(vpn) != Some(pfn) {
            return None;
        }
        // SAFETY: a user page this kernel maps: the page-table entry holds
        // its number, and the block goes back into the entry (`putback`,
        // `migrated`) before anything else uses it.
        unsafe { self.machine.block_from_raw(pfn, order) }.ok()
    }

    fn putback(&mut self, block: Block) {
        // Still mapped where it was: the entry keeps the number.
        let _ = block.into_raw();
    }

    fn migrated(&mut self, block: Block, _from: Pfn) {
        // `migrate_batch` pointed the entry at the new frame already.
        let _ = block.into_raw();
    }

    fn drain_caches(&mut self) {
        if self.drains {
            self.machine.drain_pcp(None, |_| core::hint::spin_loop());
        }
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        let mut one = [Move::new(src, dst, order)];
        self.migrate_batch(&mut one, mode);
        one[0].outcome().unwrap_or(Err(MigrateError::Busy))
    }

    fn migrate_batch(&mut self, moves: &mut [Move], _mode: MigrateMode) {
        // Unmap: every source's entry becomes a migration entry.
        let mut unmapped = 0;
        let mut last = 0;
        for m in moves.iter_mut() {
            match self.movable(m) {
                Some(vpn) => {
                    self.tables.mark_migrating(vpn);
                    unmapped += 1;
                    last = USER_BASE + vpn * PAGE;
                }
                None => {
                    self.refused += 1;
                    m.set(Err(MigrateError::Busy));
                }
            }
        }
        if unmapped == 0 {
            return;
        }
        // One flush for the batch, here and (while it uses the user region)
        // on the other CPU, before any source is read for the copy: from
        // then on no CPU reaches a source through a user mapping.
        self.batches += 1;
        if unmapped == 1 {
            tlb::flush(VirtAddr::new(last));
            crate::smp::flush_remote(last);
        } else {
            tlb::flush_all();
            crate::smp::flush_remote_all();
        }
        // Copy and remap each.
        for m in moves.iter_mut().filter(|m| m.outcome().is_none()) {
            let (src, dst) = (m.src(), m.dst());
            let Some(vpn) = self.user_page(src) else {
                continue;
            };
            // SAFETY: both frames are RAM reachable through the identity
            // direct map; `src` is isolated (nobody frees it) and unmapped,
            // `dst` was just taken off the free lists by the compactor, so
            // they do not overlap and no one else touches either meanwhile.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (src.get() * PAGE) as *const u8,
                    (dst.get() * PAGE) as *mut u8,
                    PAGE as usize,
                )
            };
            self.tables.map_migrated(vpn, dst);
            // Poison the source (as `init_on_free` would): a CPU still
            // reading through a stale translation would see the poison, not
            // the old data.
            // SAFETY: `src` is still isolated (ours) and no mapping names
            // it now.
            unsafe { core::ptr::write_bytes((src.get() * PAGE) as *mut u8, 0xa5, PAGE as usize) };
            self.rmap[dst.get() as usize] = vpn as u32 + 1;
            self.rmap[src.get() as usize] = 0;
            self.moved += 1;
            m.set(Ok(()));
        }
    }

    fn checkpoint(&mut self, _migrate_pfn: Pfn, _free_pfn: Pfn) -> bool {
        if let Some(f) = self.on_checkpoint.as_deref_mut() {
            f();
        }
        false
    }
}

/// Called from the page-fault handler with the faulting address and error
/// code: if `addr` is a user page whose entry was not present because the
/// page is being migrated, waits (interrupts on, so that shootdowns reach
/// this CPU) until its entry is back and returns `true`: the access is
/// retried. `false` for any other fault.
pub fn wait_for_migration(addr: u64, error: u64) -> bool {
    // Bit 0 of the error code: the entry was present (a protection fault).
    if !(USER_BASE..USER_BASE + (1 << 39)).contains(&addr) || error & 1 != 0 {
        return false;
    }
    let mut waited = false;
    loop {
        match user_entry_state(addr) {
            // Back (the move ended between the fault and this look).
            EntryState::Present => {
                if waited {
                    x86_64::instructions::interrupts::disable();
                }
                return true;
            }
            EntryState::Migrating if !waited => {
                waited = true;
                MIGRATION_WAITS.fetch_add(1, Ordering::Relaxed);
                x86_64::instructions::interrupts::enable();
            }
            EntryState::Migrating => core::hint::spin_loop(),
            EntryState::Absent => {
                if waited {
                    x86_64::instructions::interrupts::disable();
                }
                return false;
            }
        }
    }
}

/// Faults that waited on a migration entry so far.
pub fn migration_waits() -> u64 {
    MIGRATION_WAITS.load(Ordering::Relaxed)
}

/// What a user address's last-level entry holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EntryState {
    Present,
    /// A migration entry: the page is moving.
    Migrating,
    /// Nothing (or no table).
    Absent,
}

/// `addr`'s last-level entry, read through the live tables word by word
/// (another CPU may be rewriting the entry).
fn user_entry_state(addr: u64) -> EntryState {
    let v = VirtAddr::new(addr);
    let mut table = Cr3::read().0.start_address().as_u64();
    let indices = [v.p4_index(), v.p3_index(), v.p2_index(), v.p1_index()];
    for (level, i) in indices.into_iter().enumerate() {
        // SAFETY: `table` is a page-table frame of the live tables (CR3's
        // root, then the address in a present non-huge entry), reachable
        // through the identity direct map; an entry is an aligned u64.
        let e =
            unsafe { &*((table + u64::from(i) * 8) as *const AtomicU64) }.load(Ordering::Acquire);
        let flags = F::from_bits_truncate(e);
        if level == 3 {
            return if flags.contains(F::PRESENT) {
                EntryState::Present
            } else if flags.contains(MIGRATING) {
                EntryState::Migrating
            } else {
                EntryState::Absent
            };
        }
        if !flags.contains(F::PRESENT) || flags.contains(F::HUGE_PAGE) {
            return EntryState::Absent;
        }
        table = e & ADDR_MASK;
    }
    EntryState::Absent
}

/// The slow path moves pages through this migrator; this kernel has no
/// reclaim, and stall times are read from the timer.
impl SlowPathHooks for UserMigrator<'_> {
    fn now_ns(&self) -> u64 {
        crate::timer::now_ns()
    }
}
