//! thp-swap: the 2018 "swap out/in THP in one piece" experiment (spec 05
//! §10, Huang Ying's unmerged series), replayed on pageframe-swap.
//!
//! A RAM-backed swap device and 16 workers (simulated processes, run
//! round-robin on `--threads` host threads, one `SwapCpu` each) that each
//! write a region backed by 2 MiB pages, for 8 rounds. Each thread has a RAM
//! budget of half its workers' memory, so every round swaps everything out
//! and back in (LRU reclaim, like vm-scalability's swap-w-seq). Variants:
//!
//! * (a) `split`: every 2 MiB page is split into 512 base pages at
//!   swap-out (512 slot allocations, 512 writes) and faulted back one 4 KiB
//!   page at a time; the memory stays base pages;
//! * (b) `whole-out`: swap-out as one whole-cluster entry (one allocation,
//!   one write), swap-in split by `swapin_enabled = never`;
//! * (c) `whole`: out and in whole (`swapin_enabled = always`).
//!
//! What is real and what is simulated: the page data is real memory in
//! `mmap`ed regions (THP-advised, so the host backs them with 2 MiB pages
//! while they are huge), unmapped with `MADV_DONTNEED` at swap-out (per
//! 4 KiB page or per 2 MiB page, as the kernel unmaps them) so that
//! swap-in faults are real host page faults at the variant's granularity.
//! Slots come from pageframe-swap; the device is a RAM buffer copied with
//! memcpy (one copy per I/O); page tables, LRU and reclaim are the lab's.
//! Every swapped-in page is checked against the byte last written to it.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use pageframe_swap::{
    DeviceStats, Order, Slot, SwapConfig, SwapCpu, SwapDevice, SwapinDecision, SwapinPolicy,
    VmaFlags,
};

use crate::args::Opts;
use crate::plot;
use crate::progress;
use crate::table::{Table, f, pct};

const PAGE: usize = 4096;
const HPAGE: usize = 2 << 20;
const PER_HUGE: usize = HPAGE / PAGE;
const PRESENT: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Split,
    WholeOut,
    Whole,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Split => "(a) split",
            Variant::WholeOut => "(b) whole-out",
            Variant::Whole => "(c) whole",
        }
    }
}

// ---- host memory --------------------------------------------------------

/// An anonymous host mapping aligned to 2 MiB.
struct Region {
    map: *mut u8,
    map_len: usize,
    base: *mut u8,
}

impl Region {
    fn new(len: usize) -> Result<Region, String> {
        let map_len = len + HPAGE;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err("mmap failed".into());
        }
        let map = p.cast::<u8>();
        let base = map.wrapping_add(map.align_offset(HPAGE));
        advise(base, len, libc::MADV_HUGEPAGE);
        Ok(Region { map, map_len, base })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what mmap returned; no slice
        // into the mapping outlives the Region (units borrow it only inside
        // the thread that owns both).
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// `madvise` on part of a mapping; failures only cost realism, not safety.
fn advise(p: *mut u8, len: usize, advice: libc::c_int) {
    // SAFETY: callers pass ranges inside a live Region mapping; madvise with
    // these advices never invalidates Rust-visible data except
    // MADV_DONTNEED, which zero-fills pages no live slice refers to.
    unsafe { libc::madvise(p.cast(), len, advice) };
}

/// The RAM-backed swap device's data: one page per slot.
struct SwapData {
    ptr: *mut u8,
    pages: usize,
    _buf: Vec<u8>,
}

// SAFETY: threads only touch the pages of entries they allocated and have
// not freed (see `page_mut`), so accesses never overlap.
unsafe impl Sync for SwapData {}

impl SwapData {
    fn new(pages: usize) -> SwapData {
        let mut buf = vec![1u8; pages * PAGE]; // touched: no faults while timing
        SwapData {
            ptr: buf.as_mut_ptr(),
            pages,
            _buf: buf,
        }
    }

    /// The bytes of `n` slots from `s`.
    ///
    /// # Safety
    /// The caller owns the entry covering `[s, s + n)` (allocated by its
    /// thread, not freed) and holds no other slice of it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn page_mut(&self, s: Slot, n: usize) -> &mut [u8] {
        assert!(s.get() as usize + n <= self.pages);
        // SAFETY: in bounds (checked above); exclusive by the caller's
        // ownership of the slots.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(s.get() as usize * PAGE), n * PAGE) }
    }
}

// ---- the simulated mm ---------------------------------------------------

enum Pmd {
    /// Never touched.
    Empty,
    /// Resident, mapped by one PMD (host THP).
    Huge,
    /// Swapped out whole: a PMD swap entry.
    HugeSwap(Slot),
    /// Split: 512 PTEs, each present or a swap slot.
    Ptes(Box<[u32; PER_HUGE]>),
}

struct Unit {
    base: *mut u8,
    pmd: Pmd,
    resident: usize,
    pattern: u8,
}

impl Unit {
    fn mem(&mut self, off: usize, len: usize) -> &mut [u8] {
        assert!(off + len <= HPAGE);
        // SAFETY: `base` is the start of this unit's 2 MiB inside a Region
        // owned by the same thread for the whole run; `&mut self` makes this
        // the only slice of it.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), len) }
    }
}

#[derive(Default, Clone, Copy)]
struct Counters {
    bytes_out: u64,
    bytes_in: u64,
    slot_allocs: u64,
    huge_out: u64,
    huge_in: u64,
    fallback: u64,
    bad_pages: u64,
}

struct Cpu<'d> {
    dev: &'d SwapDevice<'d>,
    data: &'d SwapData,
    variant: Variant,
    swap: SwapCpu,
    units: Vec<Unit>,
    lru: VecDeque<(u64, usize)>,
    stamp: Vec<u64>,
    clock: u64,
    resident: usize,
    budget: usize,
    c: Counters,
}

impl Cpu<'_> {
    fn huge(&self) -> Order {
        self.dev.huge_order()
    }

    fn touch(&mut self, u: usize) {
        self.clock += 1;
        self.stamp[u] = self.clock;
        self.lru.push_back((self.clock, u));
    }

    /// Reclaim least-recently-used units until `need` more pages fit.
    fn make_room(&mut self, need: usize, current: usize) -> Result<(), String> {
        while self.resident + need > self.budget {
            let (stamp, u) = self.lru.pop_front().ok_or("nothing left to reclaim")?;
            if stamp != self.stamp[u] || u == current || self.units[u].resident == 0 {
                continue;
            }
            self.swap_out(u)?;
        }
        Ok(())
    }

    fn split(&mut self, u: usize, ptes: [u32; PER_HUGE]) {
        let unit = &mut self.units[u];
        unit.pmd = Pmd::Ptes(Box::new(ptes));
        // From now on the host maps this range with 4 KiB pages too.
        advise(unit.base, HPAGE, libc::MADV_NOHUGEPAGE);
    }

    fn swap_out(&mut self, u: usize) -> Result<(), String> {
        let k = self.huge();
        if matches!(self.units[u].pmd, Pmd::Huge) {
            if self.variant != Variant::Split {
                match self.dev.alloc_huge(&mut self.swap) {
                    Ok(s) => {
                        // SAFETY: `s` is a fresh whole-cluster entry of this thread.
                        let dst = unsafe { self.data.page_mut(s, PER_HUGE) };
                        dst.copy_from_slice(self.units[u].mem(0, HPAGE));
                        self.dev.duplicate(s, k).map_err(|e| e.to_string())?; // the PMD swap entry
                        self.dev.put_cache(s, k).map_err(|e| e.to_string())?; // write done, folio freed
                        let unit = &mut self.units[u];
                        advise(unit.base, HPAGE, libc::MADV_DONTNEED);
                        unit.pmd = Pmd::HugeSwap(s);
                        unit.resident = 0;
                        self.resident -= PER_HUGE;
                        self.c.bytes_out += HPAGE as u64;
                        self.c.slot_allocs += 1;
                        self.c.huge_out += 1;
                        return Ok(());
                    }
                    // thp_swpout_fallback: split and go out as base pages.
                    Err(_) => self.c.fallback += 1,
                }
            }
            self.split(u, [PRESENT; PER_HUGE]);
        }
        let Pmd::Ptes(mut ptes) = std::mem::replace(&mut self.units[u].pmd, Pmd::Empty) else {
            return Err("swap-out of a unit that is not resident".into());
        };
        for (i, pte) in ptes.iter_mut().enumerate() {
            if *pte != PRESENT {
                continue;
            }
            let s = self
                .dev
                .alloc(&mut self.swap, Order::ZERO)
                .map_err(|e| format!("swap full: {e}"))?;
            // SAFETY: `s` is a fresh order-0 entry of this thread.
            let dst = unsafe { self.data.page_mut(s, 1) };
            dst.copy_from_slice(self.units[u].mem(i * PAGE, PAGE));
            self.dev
                .duplicate(s, Order::ZERO)
                .map_err(|e| e.to_string())?;
            self.dev
                .put_cache(s, Order::ZERO)
                .map_err(|e| e.to_string())?;
            advise(
                self.units[u].base.wrapping_add(i * PAGE),
                PAGE,
                libc::MADV_DONTNEED,
            );
            *pte = s.get();
            self.c.bytes_out += PAGE as u64;
            self.c.slot_allocs += 1;
        }
        let unit = &mut self.units[u];
        self.resident -= unit.resident;
        unit.resident = 0;
        unit.pmd = Pmd::Ptes(ptes);
        Ok(())
    }

    /// Fault the unit in before the workload writes it.
    fn fault_in(&mut self, u: usize) -> Result<(), String> {
        let k = self.huge();
        let policy = if self.variant == Variant::Whole {
            SwapinPolicy::Always
        } else {
            SwapinPolicy::Never
        };
        match self.units[u].pmd {
            Pmd::Huge | Pmd::Ptes(_) if self.units[u].resident == PER_HUGE => return Ok(()),
            Pmd::Empty => {
                self.make_room(PER_HUGE, u)?;
                let unit = &mut self.units[u];
                unit.pmd = Pmd::Huge;
                unit.resident = PER_HUGE;
                self.resident += PER_HUGE;
                return Ok(());
            }
            Pmd::HugeSwap(s) => match self
                .dev
                .swapin_huge(s, policy, VmaFlags::HUGEPAGE)
                .map_err(|e| e.to_string())?
            {
                SwapinDecision::Whole => {
                    self.make_room(PER_HUGE, u)?;
                    self.dev
                        .swapcache_prepare(s, k)
                        .map_err(|e| e.to_string())?;
                    // SAFETY: the huge entry belongs to this unit's thread.
                    let src = unsafe { self.data.page_mut(s, PER_HUGE) };
                    let unit = &mut self.units[u];
                    unit.mem(0, HPAGE).copy_from_slice(src);
                    self.dev.put_map(s, k).map_err(|e| e.to_string())?; // PMD mapped again
                    self.dev.put_cache(s, k).map_err(|e| e.to_string())?; // whole cluster freed
                    unit.pmd = Pmd::Huge;
                    unit.resident = PER_HUGE;
                    self.resident += PER_HUGE;
                    self.c.bytes_in += HPAGE as u64;
                    self.c.huge_in += 1;
                    self.check(u, 0..PER_HUGE);
                    return Ok(());
                }
                SwapinDecision::Split => {
                    let ptes = std::array::from_fn(|i| s.get() + i as u32);
                    self.split(u, ptes);
                }
            },
            _ => {}
        }
        let Pmd::Ptes(mut ptes) = std::mem::replace(&mut self.units[u].pmd, Pmd::Empty) else {
            return Err("fault on a unit in an unexpected state".into());
        };
        let mut faulted = Vec::new();
        for (i, pte) in ptes.iter_mut().enumerate() {
            if *pte == PRESENT {
                continue;
            }
            self.make_room(1, u)?;
            let s = Slot::new(*pte);
            self.dev
                .swapcache_prepare(s, Order::ZERO)
                .map_err(|e| e.to_string())?;
            // SAFETY: the slot belongs to this unit's thread.
            let src = unsafe { self.data.page_mut(s, 1) };
            self.units[u].mem(i * PAGE, PAGE).copy_from_slice(src);
            self.dev
                .put_map(s, Order::ZERO)
                .map_err(|e| e.to_string())?;
            self.dev
                .put_cache(s, Order::ZERO)
                .map_err(|e| e.to_string())?;
            *pte = PRESENT;
            self.units[u].resident += 1;
            self.resident += 1;
            self.c.bytes_in += PAGE as u64;
            faulted.push(i);
        }
        self.units[u].pmd = Pmd::Ptes(ptes);
        for i in faulted {
            self.check(u, i..i + 1);
        }
        Ok(())
    }

    /// Swapped-in pages must hold what was written last.
    fn check(&mut self, u: usize, pages: std::ops::Range<usize>) {
        let unit = &mut self.units[u];
        let want = unit.pattern;
        for i in pages {
            if unit.mem(i * PAGE, PAGE)[PAGE - 1] != want {
                self.c.bad_pages += 1;
            }
        }
    }
}

// ---- one run ------------------------------------------------------------

struct Params {
    workers: usize,
    threads: usize,
    region: usize,
    ram: usize,
    rounds: usize,
}

struct RunResult {
    secs: f64,
    c: Counters,
    stats: DeviceStats,
    huge_share: f64,
    resident_huge_share: f64,
    host_anon_huge_kib: Option<u64>,
}

/// A thread's counters, huge units, resident huge pages, resident pages and
/// the host's AnonHugePages when it finished.
type ThreadOut = (Counters, usize, usize, usize, Option<u64>);

fn host_anon_huge_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn run_variant(
    variant: Variant,
    p: &Params,
    pb: &indicatif::ProgressBar,
) -> Result<RunResult, String> {
    let units_per_worker = p.region / HPAGE;
    let total_units = p.workers * units_per_worker;
    // Room for every unit plus the header cluster.
    let slots = ((total_units + 1) * PER_HUGE) as u32;
    let cfg = SwapConfig::new(slots);
    let mut meta = vec![MaybeUninit::uninit(); SwapDevice::metadata_bytes(&cfg)];
    let dev = SwapDevice::new(cfg, &mut meta, None).map_err(|e| format!("{e:?}"))?;
    let data = SwapData::new(slots as usize);
    let per_thread = p.workers / p.threads;
    let budget = p.ram / PAGE / p.threads;
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    let outcome: Vec<Result<ThreadOut, String>> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..p.threads)
            .map(|t| {
                let (dev, data, done) = (&dev, &data, &done);
                sc.spawn(
                    move || -> Result<(Counters, usize, usize, usize, Option<u64>), String> {
                        let regions: Vec<Region> = (0..per_thread)
                            .map(|_| Region::new(p.region))
                            .collect::<Result<_, _>>()?;
                        let units: Vec<Unit> = regions
                            .iter()
                            .flat_map(|r| {
                                (0..units_per_worker).map(move |i| r.base.wrapping_add(i * HPAGE))
                            })
                            .map(|base| Unit {
                                base,
                                pmd: Pmd::Empty,
                                resident: 0,
                                pattern: 0,
                            })
                            .collect();
                        let n = units.len();
                        let mut cpu = Cpu {
                            dev,
                            data,
                            variant,
                            swap: SwapCpu::new(),
                            units,
                            lru: VecDeque::new(),
                            stamp: vec![0; n],
                            clock: 0,
                            resident: 0,
                            budget,
                            c: Counters::default(),
                        };
                        for round in 0..p.rounds {
                            // Workers of this thread take turns, each writing
                            // its whole region sequentially.
                            for w in 0..per_thread {
                                for i in 0..units_per_worker {
                                    let u = w * units_per_worker + i;
                                    cpu.fault_in(u)?;
                                    let pattern =
                                        (round as u8).wrapping_mul(31).wrapping_add(t as u8 + 7);
                                    let unit = &mut cpu.units[u];
                                    unit.mem(0, HPAGE).fill(pattern);
                                    unit.pattern = pattern;
                                    cpu.touch(u);
                                }
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            if t == 0 {
                                pb.set_position(done.load(Ordering::Relaxed));
                            }
                        }
                        let host = host_anon_huge_kib();
                        let huge = cpu
                            .units
                            .iter()
                            .filter(|u| matches!(u.pmd, Pmd::Huge | Pmd::HugeSwap(_)))
                            .count();
                        let res_huge = cpu
                            .units
                            .iter()
                            .filter(|u| matches!(u.pmd, Pmd::Huge))
                            .count()
                            * PER_HUGE;
                        Ok((cpu.c, huge, res_huge, cpu.resident, host))
                    },
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into())))
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    let mut c = Counters::default();
    let (mut huge, mut res_huge, mut resident, mut host) = (0, 0, 0, None);
    for r in outcome {
        let (cc, h, rh, res, hk) = r?;
        c.bytes_out += cc.bytes_out;
        c.bytes_in += cc.bytes_in;
        c.slot_allocs += cc.slot_allocs;
        c.huge_out += cc.huge_out;
        c.huge_in += cc.huge_in;
        c.fallback += cc.fallback;
        c.bad_pages += cc.bad_pages;
        huge += h;
        res_huge += rh;
        resident += res;
        host = host.max(hk);
    }
    if c.bad_pages > 0 {
        return Err(format!(
            "{}: {} swapped-in pages held wrong data",
            variant.name(),
            c.bad_pages
        ));
    }
    Ok(RunResult {
        secs,
        c,
        stats: dev.stats(),
        huge_share: huge as f64 / total_units as f64,
        resident_huge_share: res_huge as f64 / resident.max(1) as f64,
        host_anon_huge_kib: host,
    })
}

/// Aggregate memcpy rate of `threads` threads copying `bytes` each, 4 times.
fn memcpy_rate(threads: usize, bytes: usize) -> f64 {
    let bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|_| (vec![1u8; bytes], vec![2u8; bytes]))
        .collect();
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        for (src, mut dst) in bufs {
            sc.spawn(move || {
                for _ in 0..4 {
                    dst.copy_from_slice(&src);
                    std::hint::black_box(&mut dst);
                }
            });
        }
    });
    (threads * bytes * 4) as f64 / t0.elapsed().as_secs_f64() / 1e9
}

/// Runs the scenario.
pub fn run(opts: &Opts) -> Result<(), String> {
    let q = opts.quick;
    let p = Params {
        workers: opts.get("workers", 16)?,
        threads: opts.get("threads", 2)?,
        region: opts.get::<usize>("region-mib", if q { 8 } else { 32 })? << 20,
        ram: opts.get::<usize>("ram-mib", if q { 64 } else { 256 })? << 20,
        rounds: opts.get("rounds", if q { 3 } else { 8 })?,
    };
    if p.threads == 0
        || !p.workers.is_multiple_of(p.threads)
        || !p.region.is_multiple_of(HPAGE)
        || p.region == 0
    {
        return Err(
            "--workers must be a multiple of --threads and --region-mib a multiple of 2".into(),
        );
    }
    let variants: Vec<Variant> = match opts.get_str("variant", "all") {
        "a" | "split" => vec![Variant::Split],
        "b" | "whole-out" => vec![Variant::WholeOut],
        "c" | "whole" => vec![Variant::Whole],
        _ => vec![Variant::Split, Variant::WholeOut, Variant::Whole],
    };
    println!(
        "## thp-swap: {} workers x {} MiB on {} threads, RAM {} MiB, {} rounds\n",
        p.workers,
        p.region >> 20,
        p.threads,
        p.ram >> 20,
        p.rounds
    );
    let memcpy = memcpy_rate(p.threads, if q { 32 << 20 } else { 128 << 20 });
    let mut results = Vec::new();
    for v in &variants {
        let pb = progress::bar((p.rounds * p.workers) as u64, v.name());
        let r = run_variant(*v, &p, &pb)?;
        pb.finish_and_clear();
        results.push((*v, r));
    }
    let memcpy_after = memcpy_rate(p.threads, if q { 32 << 20 } else { 128 << 20 });
    let memcpy = memcpy.max(memcpy_after);
    let base = results
        .iter()
        .find(|(v, _)| *v == Variant::Split)
        .map(|(_, r)| (r.c.bytes_out + r.c.bytes_in) as f64 / r.secs);
    let mut t = Table::new(&[
        "variant",
        "swap traffic GiB",
        "time s",
        "GB/s",
        "x (a)",
        "of memcpy",
        "slot allocs/GiB out",
        "huge out",
        "huge in",
        "fallbacks",
        "splits",
        "2M share (all)",
        "2M share (resident)",
        "host AnonHuge MiB",
    ]);
    let mut bars = Vec::new();
    for (v, r) in &results {
        let traffic = (r.c.bytes_out + r.c.bytes_in) as f64;
        let gbs = traffic / r.secs / 1e9;
        bars.push((v.name().to_string(), gbs));
        t.row(vec![
            v.name().into(),
            f(traffic / (1u64 << 30) as f64, 2),
            f(r.secs, 2),
            f(gbs, 2),
            base.map(|b| f(traffic / r.secs / b, 1))
                .unwrap_or_else(|| "-".into()),
            pct(gbs / memcpy, 0),
            f(
                r.c.slot_allocs as f64 / (r.c.bytes_out as f64 / (1u64 << 30) as f64),
                0,
            ),
            r.c.huge_out.to_string(),
            r.c.huge_in.to_string(),
            r.c.fallback.to_string(),
            r.stats.splits.to_string(),
            pct(r.huge_share, 1),
            pct(r.resident_huge_share, 1),
            r.host_anon_huge_kib
                .map(|k| (k / 1024).to_string())
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    print!("{}", t.render());
    println!(
        "\nmemcpy ({} threads, same run): {:.2} GB/s. Published (2018, kernel, pmem swap): 2.17 -> 24.04 GB/s (11x), THP share 4.5% -> 96.6%.",
        p.threads, memcpy
    );
    if !opts.no_plot {
        std::fs::create_dir_all(&opts.out).map_err(|e| e.to_string())?;
        let path = opts.out.join("swap-thp-swap.svg");
        plot::bars(
            &path,
            "THP swap: throughput of swap traffic (GB/s)",
            "GB/s",
            &bars,
            &[(format!("memcpy {memcpy:.2} GB/s"), memcpy)],
        )?;
        println!("\nplot: {}", path.display());
    }
    Ok(())
}
