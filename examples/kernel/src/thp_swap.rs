//! The `thp-swap` mode: a RAM-disk swap device (blocks reserved from the
//! allocator) managed by `pageframe-swap`, and a mapped 2 MiB page swapped
//! out into one whole cluster and back in (spec 05 §8, §10).
//!
//! Three paths, each timed out and in (median of [`ROUNDS`]):
//! * whole: out into one cluster (`alloc_huge`), unmap the 2 MiB entry,
//!   free the block; in as one 2 MiB block read from the cluster and mapped
//!   with one 2 MiB entry (`swapin_huge` decides `Whole`);
//! * split in: out whole, but the swap-in policy is `Never`, so the entry
//!   is split and read back as 512 base pages mapped with 4 KiB entries;
//! * split out: the page goes out as 512 base slots and comes back as 512
//!   base pages (no huge entry at all).
//!
//! Every path verifies every word of the 2 MiB through its new mapping.

use crate::bringup::{KernelMachine, NODE};
use crate::println;
use crate::time::{Cycles, Instant, TscRate};
use crate::user_pages::{HUGE_BASE, Tables, USER_BASE, huge_addr, user_addr};
use alloc::vec::Vec;
use core::fmt;
use core::mem::MaybeUninit;
use pageframe::swap::{
    Slot, SwapConfig, SwapCpu, SwapDevice, SwapinDecision, SwapinPolicy, VmaFlags,
};
use pageframe::{Gfp, Order};

/// Timed repetitions of each path.
pub const ROUNDS: usize = 15;
/// Clusters of the RAM disk (2 MiB each).
const CLUSTERS: u32 = 8;

/// Free frames the mode needs: the disk, the huge page it swaps, and room
/// for its split half.
pub const FRAMES_NEEDED: u64 = (CLUSTERS as u64 + 3) * 512;
const PAGE: u64 = 4096;
/// Words in 2 MiB.
const HUGE_WORDS: usize = 512 * 512;

/// Why the mode failed.
#[derive(Debug)]
pub enum ThpSwapError {
    /// Out of memory for the disk, its metadata or a page.
    NoMemory(&'static str),
    /// The swap device refused an operation.
    Swap(&'static str),
    /// The swap-in decision was not the one the path needs.
    Decision(SwapinDecision),
    /// Data did not survive the round trip.
    Corrupt { path: &'static str, word: usize },
    /// Frames or slots leaked.
    Leak(&'static str),
}

impl fmt::Display for ThpSwapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory(w) => write!(f, "out of memory for {w}"),
            Self::Swap(w) => write!(f, "swap device refused {w}"),
            Self::Decision(d) => write!(f, "unexpected swap-in decision {d:?}"),
            Self::Corrupt { path, word } => write!(f, "{path}: word {word} corrupt"),
            Self::Leak(w) => write!(f, "leak: {w}"),
        }
    }
}

/// Medians of one path, in cycles.
#[derive(Debug, Clone, Copy, Default)]
pub struct PathTimes {
    /// Swap-out (slot allocation, copy, unmap, free).
    pub out: u64,
    /// Swap-in (decision, allocation, copy, map).
    pub r#in: u64,
}

/// The mode's result.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThpSwapReport {
    /// Whole out, whole in.
    pub whole: PathTimes,
    /// Whole out, split in.
    pub split_in: PathTimes,
    /// Base slots out, base pages in.
    pub split_out: PathTimes,
    /// Huge swap-ins read back whole.
    pub huge_swapin: u64,
    /// Huge swap-ins that fell back to base pages.
    pub huge_swapin_fallback: u64,
    /// Huge entries split.
    pub splits: u64,
}

fn word(seed: u64, i: usize) -> u64 {
    (seed << 32 | i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0xa5a5
}

/// The RAM disk: one 2 MiB block per cluster, reserved from the allocator.
struct RamDisk {
    blocks: Vec<pageframe::Block>,
}

impl RamDisk {
    fn slot_addr(&self, s: Slot) -> *mut u8 {
        let s = u64::from(s.get());
        ((self.blocks[(s / 512) as usize].pfn().get() + s % 512) * PAGE) as *mut u8
    }

    /// Copies `pages` pages at physical `from` to the slots from `s`.
    fn write(&self, s: Slot, from: u64, pages: u64) {
        for i in 0..pages {
            // SAFETY: `from` is a frame the caller owns and the slot's page
            // lies in a block reserved for the disk; both are RAM reachable
            // through the identity direct map and do not overlap.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    (from + i * PAGE) as *const u8,
                    self.slot_addr(Slot::new(s.get() + i as u32)),
                    PAGE as usize,
                )
            };
        }
    }

    /// Copies the slots from `s` to `pages` pages at physical `to`.
    fn read(&self, s: Slot, to: u64, pages: u64) {
        for i in 0..pages {
            // SAFETY: as in `write`, in the other direction.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    self.slot_addr(Slot::new(s.get() + i as u32)),
                    (to + i * PAGE) as *mut u8,
                    PAGE as usize,
                )
            };
        }
    }
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Runs the mode; the machine's free count is back where it started after,
/// but for the page-table frames the mode created (they stay, empty, for
/// later modes).
pub fn run(machine: &'static KernelMachine) -> Result<ThpSwapReport, ThpSwapError> {
    let free0 = machine.inspect().free_pages();
    let (rep, tables) = run_inner(machine)?;
    if machine.inspect().free_pages() + tables != free0 {
        return Err(ThpSwapError::Leak("frames"));
    }
    Ok(rep)
}

fn run_inner(machine: &'static KernelMachine) -> Result<(ThpSwapReport, u64), ThpSwapError> {
    let cfg = SwapConfig::new(CLUSTERS * 512);
    let mut meta: Vec<MaybeUninit<u8>> = Vec::new();
    meta.try_reserve_exact(SwapDevice::metadata_bytes(&cfg))
        .map_err(|_| ThpSwapError::NoMemory("swap metadata"))?;
    meta.resize(SwapDevice::metadata_bytes(&cfg), MaybeUninit::uninit());
    let mut dev =
        SwapDevice::new(cfg, &mut meta, None).map_err(|_| ThpSwapError::Swap("set-up"))?;
    let mut cpu = SwapCpu::new();
    let mut disk = RamDisk { blocks: Vec::new() };
    disk.blocks
        .try_reserve_exact(CLUSTERS as usize)
        .map_err(|_| ThpSwapError::NoMemory("disk list"))?;
    for _ in 0..CLUSTERS {
        let b = machine
            .alloc(NODE, Gfp::KERNEL, Order::HUGE_2M)
            .map_err(|_| ThpSwapError::NoMemory("RAM disk"))?;
        // Touched once now, so the host's first-touch faults on the disk
        // are not part of any timed trip.
        // SAFETY: the block was just reserved for the disk; RAM reachable
        // through the identity direct map.
        unsafe { core::ptr::write_bytes(b.addr().get() as *mut u8, 0, 512 * PAGE as usize) };
        disk.blocks.push(b);
    }
    let mut tables = Tables::current();
    // Table frames stay in the tables (as numbers) for the kernel's life.
    let mut take = || crate::user_pages::table_frame(machine);
    tables
        .entry(HUGE_BASE, 2, Some(&mut take))
        .map_err(|_| ThpSwapError::NoMemory("page tables"))?;
    tables
        .entry(USER_BASE, 1, Some(&mut take))
        .map_err(|_| ThpSwapError::NoMemory("page tables"))?;
    let mut slots: Vec<Slot> = Vec::new();
    slots
        .try_reserve_exact(512)
        .map_err(|_| ThpSwapError::NoMemory("slot list"))?;

    let mut rep = ThpSwapReport::default();
    let mut times = [[0u64; ROUNDS]; 6];
    // Round 0 warms up (first touches of the pages, tables and caches) and
    // is not timed.
    for round in 0..=ROUNDS {
        for path in 0..3 {
            let seed = (round * 3 + path) as u64 + 1;
            let (out, inn) = one_trip(
                machine,
                &dev,
                &mut cpu,
                &disk,
                &mut tables,
                &mut slots,
                path,
                seed,
            )?;
            if round > 0 {
                times[path * 2][round - 1] = out;
                times[path * 2 + 1][round - 1] = inn;
            }
        }
    }
    let t = |i: usize, times: &mut [[u64; ROUNDS]; 6]| median(&mut times[i]);
    rep.whole = PathTimes {
        out: t(0, &mut times),
        r#in: t(1, &mut times),
    };
    rep.split_in = PathTimes {
        out: t(2, &mut times),
        r#in: t(3, &mut times),
    };
    rep.split_out = PathTimes {
        out: t(4, &mut times),
        r#in: t(5, &mut times),
    };
    let st = dev.stats();
    rep.huge_swapin = st.huge_swapin;
    rep.huge_swapin_fallback = st.huge_swapin_fallback;
    rep.splits = st.splits;
    if dev.inuse_slots() != 0 {
        return Err(ThpSwapError::Leak("swap slots"));
    }
    dev.validate().map_err(|_| ThpSwapError::Swap("validate"))?;
    for b in disk.blocks.drain(..) {
        machine
            .free(b)
            .map_err(|_| ThpSwapError::Leak("RAM disk free refused"))?;
    }
    Ok((rep, tables.table_frames))
}

/// One round trip of the 2 MiB page on `path` (0 whole, 1 split in,
/// 2 split out); returns the out and in cycles.
#[allow(clippy::too_many_arguments)]
fn one_trip(
    machine: &KernelMachine,
    dev: &SwapDevice<'_>,
    cpu: &mut SwapCpu,
    disk: &RamDisk,
    tables: &mut Tables,
    slots: &mut Vec<Slot>,
    path: usize,
    seed: u64,
) -> Result<(u64, u64), ThpSwapError> {
    let thp = Order::HUGE_2M;
    let k = dev.huge_order();
    let base = Order::ZERO;
    let movable = Gfp::KERNEL | Gfp::MOVABLE;
    let name = ["whole", "split in", "split out"][path];

    // The page, mapped with one 2 MiB entry and filled through it.
    let block = machine
        .alloc(NODE, movable, thp)
        .map_err(|_| ThpSwapError::NoMemory("the 2 MiB page"))?;
    let blk = block.pfn();
    if !tables.map_huge(0, blk) {
        return Err(ThpSwapError::NoMemory("2 MiB mapping"));
    }
    let va = huge_addr(0);
    for i in 0..HUGE_WORDS {
        // SAFETY: the block is ours and mapped at `va`.
        unsafe { va.add(i).write(word(seed, i)) };
    }

    // Swap out.
    let t = Instant::now();
    slots.clear();
    if path < 2 {
        let s = dev
            .alloc_huge(cpu)
            .map_err(|_| ThpSwapError::Swap("a whole cluster"))?;
        disk.write(s, blk.get() * PAGE, 512);
        dev.duplicate(s, k)
            .map_err(|_| ThpSwapError::Swap("the huge swap entry"))?;
        slots.push(s);
    } else {
        for i in 0..512u64 {
            let s = dev
                .alloc(cpu, base)
                .map_err(|_| ThpSwapError::Swap("a base slot"))?;
            disk.write(s, (blk.get() + i) * PAGE, 1);
            dev.duplicate(s, base)
                .map_err(|_| ThpSwapError::Swap("a base swap entry"))?;
            slots.push(s);
        }
    }
    tables.unmap_huge(0);
    let drop_cache = |s: Slot, o: Order| {
        dev.put_cache(s, o)
            .map_err(|_| ThpSwapError::Swap("dropping the swap cache"))
    };
    if path < 2 {
        drop_cache(slots[0], k)?;
    } else {
        for &s in slots.iter() {
            drop_cache(s, base)?;
        }
    }
    machine
        .free(block)
        .map_err(|_| ThpSwapError::Leak("free of the swapped-out page"))?;
    let out = t.elapsed().0;

    // Swap in.
    let t = Instant::now();
    if path == 0 {
        let s = slots[0];
        let d = dev
            .swapin_huge(s, SwapinPolicy::Always, VmaFlags::HUGEPAGE)
            .map_err(|_| ThpSwapError::Swap("the huge swap-in"))?;
        if d != SwapinDecision::Whole {
            return Err(ThpSwapError::Decision(d));
        }
        let new_block = machine
            .alloc(NODE, movable, thp)
            .map_err(|_| ThpSwapError::NoMemory("the 2 MiB page"))?;
        let nb = new_block.pfn();
        dev.swapcache_prepare(s, k)
            .map_err(|_| ThpSwapError::Swap("swap cache"))?;
        disk.read(s, nb.get() * PAGE, 512);
        if !tables.map_huge(0, nb) {
            return Err(ThpSwapError::NoMemory("2 MiB mapping"));
        }
        dev.put_map(s, k)
            .and_then(|_| dev.put_cache(s, k))
            .map_err(|_| ThpSwapError::Swap("releasing the cluster"))?;
        let inn = t.elapsed().0;
        for i in 0..HUGE_WORDS {
            // SAFETY: the new block is mapped at `va`.
            if unsafe { va.add(i).read() } != word(seed, i) {
                return Err(ThpSwapError::Corrupt {
                    path: name,
                    word: i,
                });
            }
        }
        tables.unmap_huge(0);
        machine
            .free(new_block)
            .map_err(|_| ThpSwapError::Leak("free of the swapped-in page"))?;
        return Ok((out, inn));
    }
    if path == 1 {
        let d = dev
            .swapin_huge(slots[0], SwapinPolicy::Never, VmaFlags::HUGEPAGE)
            .map_err(|_| ThpSwapError::Swap("the huge swap-in"))?;
        if d != SwapinDecision::Split {
            return Err(ThpSwapError::Decision(d));
        }
        let first = slots[0].get();
        slots.clear();
        slots.extend((0..512).map(|i| Slot::new(first + i)));
    }
    for (i, &s) in slots.iter().enumerate() {
        // Mapped: the page-table entry keeps the block as its number.
        let (f, _) = machine
            .alloc(NODE, movable, Order::ZERO)
            .map_err(|_| ThpSwapError::NoMemory("a base page"))?
            .into_raw();
        dev.swapcache_prepare(s, base)
            .map_err(|_| ThpSwapError::Swap("swap cache"))?;
        disk.read(s, f.get() * PAGE, 1);
        if !tables.map_user(i as u64, f) {
            return Err(ThpSwapError::NoMemory("4 KiB mapping"));
        }
        dev.put_map(s, base)
            .and_then(|_| dev.put_cache(s, base))
            .map_err(|_| ThpSwapError::Swap("releasing a slot"))?;
    }
    let inn = t.elapsed().0;
    for p in 0..512usize {
        let page = user_addr(p as u64);
        for w in 0..512usize {
            // SAFETY: user page `p` is mapped to the frame read back above.
            if unsafe { page.add(w).read() } != word(seed, p * 512 + w) {
                return Err(ThpSwapError::Corrupt {
                    path: name,
                    word: p * 512 + w,
                });
            }
        }
        let f = tables
            .user_frame(p as u64)
            .ok_or(ThpSwapError::Leak("mapping"))?;
        tables.unmap_user(p as u64);
        // SAFETY: the entry held the page's number and is gone.
        let b = unsafe { machine.block_from_raw(f, Order::ZERO) }
            .map_err(|_| ThpSwapError::Leak("a base page's number"))?;
        machine
            .free(b)
            .map_err(|_| ThpSwapError::Leak("free of a base page"))?;
    }
    Ok((out, inn))
}

/// Prints the table.
pub fn print(r: &ThpSwapReport, rate: &TscRate) {
    let us = |c: u64| rate.duration(Cycles(c)).0;
    println!(
        "thp-swap: path | swap-out (us) | swap-in (us) | median of {ROUNDS}, 2 MiB verified word by word"
    );
    for (name, p) in [
        ("whole", r.whole),
        ("split in", r.split_in),
        ("split out", r.split_out),
    ] {
        println!("thp-swap: {name:<9} | {} | {}", us(p.out), us(p.r#in));
    }
    println!(
        "thp-swap: device counters: huge swap-ins {} fallbacks {} splits {}",
        r.huge_swapin, r.huge_swapin_fallback, r.splits
    );
}
