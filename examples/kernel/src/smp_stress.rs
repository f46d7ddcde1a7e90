//! The `smp` mode: both CPUs allocate and free at once through their own
//! per-CPU page caches (spec 04), handing half of what they allocate to
//! the other CPU, which checks the contents and frees it; at the end the
//! zone must hold exactly the frames it started with.
//!
//! The caches front a zone of their own (with the per-frame states the
//! cached paths need, `Zone::with_frame_states`) built over 64 MiB of
//! blocks taken from the node, so the boot zones keep their layout. Each
//! CPU reaches its cache through [`PerCpu`], the kernel's implementation of
//! the `CpuLocal` contract: indexed by APIC id, interrupts off while used.

use crate::println;
use crate::smp;
use crate::time::{Cycles, Instant, TscRate};
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU32, Ordering};
use pageframe::pcp::{
    CpuId, CpuLocal, LocalPcp, PcpConfig, PcpSet, PcpSizing, PcpSlot, PcpStats, PerCpuPages, Slot,
    ZoneGeometry,
};
use pageframe::{Gfp, Node, Order, Pfn, PfnRange, Zone, ZoneKind};
use spin::Mutex;

/// CPUs taking part.
const CPUS: usize = 2;
/// Rounds per CPU.
const ROUNDS: usize = 600;
/// Blocks allocated per round (one in eight of order 3, the rest order 0).
const BATCH: usize = 64;
/// Order-10 blocks making the stress zone (64 MiB).
const ZONE_BLOCKS: usize = 16;
/// Order-10 blocks taken to find [`ZONE_BLOCKS`] adjacent ones.
const CANDIDATES: usize = 64;
/// Capacity of each CPU's outbox.
const OUTBOX: usize = 4096;

/// A failed check.
#[derive(Debug, Clone, Copy)]
pub enum SmpStressError {
    /// Not enough memory to set the mode up.
    NoMemory(&'static str),
    /// The second CPU did not start.
    Ap(smp::SmpError),
    /// An allocation failed mid-stress.
    Alloc,
    /// A free was refused.
    Free(Pfn),
    /// A frame's contents were not what its allocator wrote.
    Corrupt(Pfn),
    /// A CPU's cache could not be claimed.
    Claim,
    /// The zone's free count is not back to its start.
    Conservation { before: u64, after: u64 },
    /// The zone's invariants failed.
    Validate,
}

impl fmt::Display for SmpStressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory(w) => write!(f, "out of memory for {w}"),
            Self::Ap(e) => write!(f, "{e}"),
            Self::Alloc => write!(f, "allocation failed during the stress"),
            Self::Free(p) => write!(f, "free of {:#x} refused", p.get()),
            Self::Corrupt(p) => write!(f, "frame {:#x} corrupted", p.get()),
            Self::Claim => write!(f, "per-CPU cache already claimed"),
            Self::Conservation { before, after } => {
                write!(f, "zone free frames {before} before, {after} after")
            }
            Self::Validate => write!(f, "zone validation failed"),
        }
    }
}

/// The kernel's per-CPU storage for the cache handles (the `CpuLocal`
/// contract of `pageframe-pcp`).
pub struct PerCpu<'s, 'm> {
    locals: [UnsafeCell<Option<LocalPcp<'s, 'm>>>; CPUS],
}

// SAFETY: each slot is only touched by the CPU whose APIC id indexes it,
// with interrupts off (`with_local`), so no two contexts share one.
unsafe impl Sync for PerCpu<'_, '_> {}

impl<'s, 'm> CpuLocal<Option<LocalPcp<'s, 'm>>> for PerCpu<'s, 'm> {
    fn cpu_id(&self) -> CpuId {
        CpuId(smp::cpu_id())
    }

    fn with_local<R>(&self, f: impl FnOnce(&mut Option<LocalPcp<'s, 'm>>) -> R) -> R {
        x86_64::instructions::interrupts::without_interrupts(|| {
            let id = (smp::cpu_id() as usize).min(CPUS - 1);
            // SAFETY: slot `id` belongs to this CPU alone and interrupts are
            // off, so nothing else on this CPU can reach it meanwhile.
            f(unsafe { &mut *self.locals[id].get() })
        })
    }
}

/// What one CPU did.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuReport {
    /// Its cache's counters.
    pub stats: PcpStats,
    /// Its cache's auto-tuned `high` at the end of the stress.
    pub high: u32,
    /// Blocks it freed that the other CPU allocated.
    pub cross_frees: u64,
    /// Blocks it allocated.
    pub allocated: u64,
}

/// The mode's result.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmpReport {
    /// Per CPU.
    pub cpus: [CpuReport; CPUS],
    /// Frames in the stress zone.
    pub zone_frames: u64,
    /// `high` bounds from the sizing: min, max.
    pub high_bounds: (u32, u32),
    /// Wall time of the stress (both CPUs).
    pub cycles: u64,
}

struct Shared<'z, 's, 'm> {
    zone: &'z Zone<'z>,
    set: &'s PcpSet<'s, 'm>,
    percpu: PerCpu<'s, 'm>,
    outbox: [Mutex<Vec<(Pfn, Order)>>; CPUS],
    inbox_scratch: [Mutex<Vec<(Pfn, Order)>>; CPUS],
    mine: [Mutex<Vec<(Pfn, Order)>>; CPUS],
    finished: AtomicU32,
    result: [Mutex<Option<Result<CpuReport, SmpStressError>>>; CPUS],
}

fn tag(cpu: usize, pfn: Pfn) -> u64 {
    ((cpu as u64 + 1) << 56) ^ pfn.get().wrapping_mul(0x9e37_79b9)
}

fn frame_word(pfn: Pfn) -> *mut u64 {
    (pfn.get() * 4096) as *mut u64
}

impl Shared<'_, '_, '_> {
    fn free_checked(
        &self,
        local: &mut LocalPcp<'_, '_>,
        owner: usize,
        (pfn, order): (Pfn, Order),
    ) -> Result<(), SmpStressError> {
        // SAFETY: the frame is allocated to this stress and handed to this
        // CPU (by itself or through an outbox); identity-mapped RAM.
        if unsafe { frame_word(pfn).read_volatile() } != tag(owner, pfn) {
            return Err(SmpStressError::Corrupt(pfn));
        }
        self.zone
            .free_cached(local, pfn, order)
            .map_err(|_| SmpStressError::Free(pfn))
    }

    fn work(&self, cpu: usize) -> Result<CpuReport, SmpStressError> {
        let other = 1 - cpu;
        let claimed = self
            .set
            .claim(CpuId(cpu as u32))
            .map_err(|_| SmpStressError::Claim)?;
        self.percpu.with_local(|l| *l = Some(claimed));
        let mut rep = CpuReport::default();
        let mut mine = self.mine[cpu].lock();
        let mut taken = self.inbox_scratch[cpu].lock();
        let movable = Gfp::KERNEL | Gfp::MOVABLE;
        let r = self.percpu.with_local(|l| {
            let local = l.as_mut().ok_or(SmpStressError::Claim)?;
            for _ in 0..ROUNDS {
                for i in 0..BATCH {
                    let order = Order::new(if i % 8 == 7 { 3 } else { 0 }).expect("order");
                    let pfn = self
                        .zone
                        .alloc_cached(local, movable, order)
                        .map_err(|_| SmpStressError::Alloc)?;
                    // SAFETY: just allocated to this CPU; identity-mapped.
                    unsafe { frame_word(pfn).write_volatile(tag(cpu, pfn)) };
                    mine.push((pfn, order));
                    rep.allocated += 1;
                }
                // Half to the other CPU (while its outbox has room).
                {
                    let mut ob = self.outbox[cpu].lock();
                    while ob.len() < OUTBOX && mine.len() > BATCH / 2 {
                        if let Some(x) = mine.pop() {
                            ob.push(x);
                        }
                    }
                }
                while let Some(x) = mine.pop() {
                    self.free_checked(local, cpu, x)?;
                }
                // What the other CPU handed over.
                core::mem::swap(&mut *self.outbox[other].lock(), &mut *taken);
                while let Some(x) = taken.pop() {
                    self.free_checked(local, other, x)?;
                    rep.cross_frees += 1;
                }
            }
            rep.high = local.high();
            Ok(())
        });
        r?;
        // Wait for the other CPU to stop handing over, then take the rest.
        self.finished.fetch_add(1, Ordering::AcqRel);
        while self.finished.load(Ordering::Acquire) < CPUS as u32 {
            core::hint::spin_loop();
        }
        let r = self.percpu.with_local(|l| {
            let local = l.as_mut().ok_or(SmpStressError::Claim)?;
            core::mem::swap(&mut *self.outbox[other].lock(), &mut *taken);
            while let Some(x) = taken.pop() {
                self.free_checked(local, other, x)?;
                rep.cross_frees += 1;
            }
            rep.stats = local.stats();
            local.drain(self.zone);
            Ok(())
        });
        // Release the handle (a CPU going idle would keep it; the mode ends).
        self.percpu.with_local(|l| *l = None);
        r.map(|()| rep)
    }
}

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), SmpStressError> {
    v.try_reserve_exact(n)
        .map_err(|_| SmpStressError::NoMemory("buffers"))
}

/// Runs the mode: starts the second CPU if needed, stresses, checks.
pub fn run(node: &Node<'_>, rate: &TscRate) -> Result<SmpReport, SmpStressError> {
    smp::start_ap(node, rate).map_err(SmpStressError::Ap)?;
    // The zone's RAM: order-10 blocks from the node. Its metadata grows
    // with the span, so keep the longest run of adjacent blocks among up to
    // CANDIDATES taken (at most ZONE_BLOCKS of it) and give the rest back.
    let top = Order::new(10).expect("order 10");
    let mut taken: Vec<Pfn> = Vec::new();
    reserve(&mut taken, CANDIDATES)?;
    for _ in 0..CANDIDATES {
        match node.alloc(Gfp::KERNEL, top) {
            Ok(b) => taken.push(b),
            Err(_) => break,
        }
    }
    taken.sort_unstable();
    let (mut best, mut best_len, mut start) = (0, 0, 0);
    for i in 0..taken.len() {
        if i == 0 || taken[i].get() != taken[i - 1].get() + top.pages() {
            start = i;
        }
        if i + 1 - start > best_len {
            (best, best_len) = (start, i + 1 - start);
        }
    }
    let keep = best..best + best_len.min(ZONE_BLOCKS);
    let mut blocks: Vec<Pfn> = Vec::new();
    reserve(&mut blocks, ZONE_BLOCKS)?;
    for (i, &b) in taken.iter().enumerate() {
        if keep.contains(&i) {
            blocks.push(b);
        } else {
            node.free(b, top).map_err(|_| SmpStressError::Free(b))?;
        }
    }
    let result = stress(&blocks, rate);
    for &b in &blocks {
        node.free(b, top).map_err(|_| SmpStressError::Free(b))?;
    }
    result
}

fn stress(blocks: &[Pfn], rate: &TscRate) -> Result<SmpReport, SmpStressError> {
    let _ = rate;
    let top = Order::new(10).expect("order 10");
    let lo = blocks
        .iter()
        .map(|p| p.get())
        .min()
        .ok_or(SmpStressError::NoMemory("zone RAM"))?;
    let hi = blocks
        .iter()
        .map(|p| p.get() + top.pages())
        .max()
        .unwrap_or(lo);
    let span = PfnRange::new(Pfn::new(lo), Pfn::new(hi));
    let mut meta: Vec<MaybeUninit<u8>> = Vec::new();
    let mut states: Vec<MaybeUninit<u8>> = Vec::new();
    reserve(&mut meta, Zone::metadata_bytes(span))?;
    reserve(&mut states, Zone::frame_state_bytes(span))?;
    meta.resize(Zone::metadata_bytes(span), MaybeUninit::uninit());
    states.resize(Zone::frame_state_bytes(span), MaybeUninit::uninit());
    let zone = Zone::new(ZoneKind::Normal, span, &mut meta)
        .map_err(|_| SmpStressError::NoMemory("zone metadata"))?
        .with_frame_states(&mut states)
        .map_err(|_| SmpStressError::NoMemory("frame states"))?;
    for &b in blocks {
        zone.add_free_range(PfnRange::new(b, Pfn::new(b.get() + top.pages())))
            .map_err(|_| SmpStressError::NoMemory("zone range"))?;
    }
    let before = zone.free_pages();

    let sizing = PcpSizing::for_zone(ZoneGeometry {
        managed_pages: zone.managed_pages(),
        low_wmark: zone.watermarks().low,
        page_size: 4096,
        local_cpus: CPUS as u32,
        high_fraction: 0,
    })
    .map_err(|_| SmpStressError::NoMemory("pcp sizing"))?;
    let mut slot_mem: [Vec<Slot>; CPUS] = [Vec::new(), Vec::new()];
    for m in slot_mem.iter_mut() {
        reserve(m, sizing.suggested_slots())?;
        m.resize(sizing.suggested_slots(), Slot::EMPTY);
    }
    let [m0, m1] = &mut slot_mem;
    let caches = [
        PcpSlot::new(
            PerCpuPages::new(m0, sizing, PcpConfig::X86_64)
                .map_err(|_| SmpStressError::NoMemory("pcp"))?,
        ),
        PcpSlot::new(
            PerCpuPages::new(m1, sizing, PcpConfig::X86_64)
                .map_err(|_| SmpStressError::NoMemory("pcp"))?,
        ),
    ];
    let set = PcpSet::new(&caches);
    let mut bufs: [Vec<(Pfn, Order)>; 6] = Default::default();
    for (i, b) in bufs.iter_mut().enumerate() {
        reserve(b, if i < 4 { OUTBOX } else { BATCH })?;
    }
    let [o0, o1, s0, s1, b0, b1] = bufs;
    let shared = Shared {
        zone: &zone,
        set: &set,
        percpu: PerCpu {
            locals: [UnsafeCell::new(None), UnsafeCell::new(None)],
        },
        outbox: [Mutex::new(o0), Mutex::new(o1)],
        inbox_scratch: [Mutex::new(s0), Mutex::new(s1)],
        mine: [Mutex::new(b0), Mutex::new(b1)],
        finished: AtomicU32::new(0),
        result: [Mutex::new(None), Mutex::new(None)],
    };
    let t = Instant::now();
    smp::run_both(&|| {
        let cpu = (smp::cpu_id() as usize).min(CPUS - 1);
        let r = shared.work(cpu);
        *shared.result[cpu].lock() = Some(r);
    });
    let cycles = t.elapsed().0;
    let mut rep = SmpReport {
        zone_frames: zone.managed_pages(),
        high_bounds: (sizing.high_min(), sizing.high_max()),
        cycles,
        ..SmpReport::default()
    };
    for (i, r) in shared.result.iter().enumerate() {
        rep.cpus[i] = r.lock().take().ok_or(SmpStressError::Claim)??;
    }
    let after = zone.free_pages();
    if after != before {
        return Err(SmpStressError::Conservation { before, after });
    }
    zone.validate().map_err(|_| SmpStressError::Validate)?;
    Ok(rep)
}

/// Prints the table.
pub fn print(r: &SmpReport, rate: &TscRate) {
    println!(
        "smp: 2 CPUs up; stress zone {} frames; {} rounds x {} blocks per CPU in {}; pcp high bounds {}..{}",
        r.zone_frames,
        ROUNDS,
        BATCH,
        rate.duration(Cycles(r.cycles)),
        r.high_bounds.0,
        r.high_bounds.1
    );
    println!(
        "smp: cpu | allocs | pcp hits | hit rate | refills | spills | zone locks | cross-CPU frees | high"
    );
    for (i, c) in r.cpus.iter().enumerate() {
        let s = &c.stats;
        let rate_x100 = (s.local_hits * 10_000).checked_div(s.allocs).unwrap_or(0);
        println!(
            "smp: cpu{i} | {} | {} | {}.{:02}% | {} | {} | {} | {} | {}",
            s.allocs,
            s.local_hits,
            rate_x100 / 100,
            rate_x100 % 100,
            s.refills,
            s.spills,
            s.zone_lock_acquisitions,
            c.cross_frees,
            c.high
        );
    }
}
