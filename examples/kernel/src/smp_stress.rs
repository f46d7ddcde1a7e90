//! The `smp` mode: every CPU the ACPI tables list allocates and frees at
//! once through its own per-CPU page caches (spec 04), on its own NUMA
//! node, handing half of what it allocates to the next CPU (in a ring),
//! which checks the contents and frees it; at the end the machine must
//! hold exactly the frames it started with.
//!
//! Each CPU claims its handle on the machine ([`KernelMachine::cpu`]),
//! which holds its cache of every zone; the handle is the proof that
//! nothing else on that CPU uses them, so the fast path takes no lock and
//! no atomic read-modify-write on a hit. Frees of another CPU's frames go
//! through the freeing CPU's own cache.
//!
//! Every [`CONTIG_EVERY`] rounds each CPU also takes a contiguous range
//! ([`KernelMachine::alloc_contig`]) whose migrator drains every CPU's
//! caches with this CPU's handle: all CPUs drain at about the same time,
//! and each drain must end (a CPU waiting serves the others' requests; a
//! CPU that waits for the others to finish polls its handle).

use crate::bringup::KernelMachine;
use crate::irq_lock::IrqLock;
use crate::println;
use crate::smp;
use crate::time::{Cycles, Instant, TscRate};
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};
use pageframe::{
    Block, ContigError, CpuCache, Gfp, Migrator, Order, Pfn, ZoneKind,
    compact::{MigrateError, MigrateMode},
};
use pageframe::{CpuId, pcp::PcpStats};
use spin::Mutex;

/// Most CPUs taking part.
const CPUS: usize = smp::MAX_CPUS;
/// Rounds per CPU.
const ROUNDS: usize = 600;
/// Blocks allocated per round (one in eight of order 3, the rest order 0).
const BATCH: usize = 64;
/// Capacity of each CPU's outbox.
const OUTBOX: usize = 4096;
/// Rounds between two contiguous allocations of a CPU.
const CONTIG_EVERY: usize = 150;
/// Frames of each contiguous allocation (not a power of two).
const CONTIG_FRAMES: u64 = 1000;

/// Free frames the stress may hold at once on `cpus` CPUs: a full outbox
/// and a round's batch each (one block in eight of order 3), the caches'
/// fill, and a contiguous range per CPU.
pub fn frames_needed(cpus: usize) -> u64 {
    let per_block_x8 = 7 + 8; // frames of eight blocks
    let blocks = (OUTBOX + 2 * BATCH) as u64;
    let per_cpu = blocks * per_block_x8 / 8 + CONTIG_FRAMES;
    // The per-CPU caches may hold as much again.
    2 * per_cpu * cpus.max(1) as u64
}

/// A failed check.
#[derive(Debug, Clone, Copy)]
pub enum SmpStressError {
    /// Not enough memory to set the mode up.
    NoMemory(&'static str),
    /// The second CPU did not start.
    Ap(smp::SmpError),
    /// An allocation failed mid-stress.
    Alloc,
    /// A contiguous allocation failed mid-stress.
    Contig(ContigError),
    /// A free was refused.
    Free(Pfn),
    /// A frame's contents were not what its allocator wrote.
    Corrupt(Pfn),
    /// A CPU's handle could not be claimed.
    Claim,
    /// The machine's free count is not back to its start.
    Conservation { before: u64, after: u64 },
    /// The machine's invariants failed.
    Validate,
    /// A CPU's allocations did not come from its own node while that node
    /// had memory to spare.
    Remote {
        cpu: usize,
        local: u64,
        allocated: u64,
    },
}

impl fmt::Display for SmpStressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory(w) => write!(f, "out of memory for {w}"),
            Self::Ap(e) => write!(f, "{e}"),
            Self::Alloc => write!(f, "allocation failed during the stress"),
            Self::Contig(e) => write!(f, "contiguous allocation failed during the stress: {e}"),
            Self::Free(p) => write!(f, "free of {:#x} refused", p.get()),
            Self::Corrupt(p) => write!(f, "frame {:#x} corrupted", p.get()),
            Self::Claim => write!(f, "per-CPU handle already claimed"),
            Self::Conservation { before, after } => {
                write!(f, "free frames {before} before, {after} after")
            }
            Self::Validate => write!(f, "validation failed"),
            Self::Remote {
                cpu,
                local,
                allocated,
            } => write!(
                f,
                "cpu{cpu}: only {local} of {allocated} allocations from its own node"
            ),
        }
    }
}

/// What one CPU did.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuReport {
    /// Its cache's counters (of the zone its allocations came from).
    pub stats: PcpStats,
    /// Its cache's auto-tuned `high` at the end of the stress.
    pub high: u32,
    /// The bounds `high` tunes between.
    pub high_bounds: (u32, u32),
    /// Blocks it freed that the other CPU allocated.
    pub cross_frees: u64,
    /// Blocks it allocated.
    pub allocated: u64,
    /// Of those, blocks its own NUMA node served.
    pub local: u64,
    /// Contiguous ranges taken (with drains of every CPU's caches).
    pub contig: u32,
    /// Its node.
    pub node: u32,
}

/// The mode's result.
#[derive(Debug, Clone, Copy, Default)]
pub struct SmpReport {
    /// Per CPU (the first `n`).
    pub cpus: [CpuReport; CPUS],
    /// CPUs that took part.
    pub n: usize,
    /// Frames the machine manages.
    pub managed: u64,
    /// The zone the movable allocations came from.
    pub zone: Option<ZoneKind>,
    /// Wall time of the stress (both CPUs).
    pub cycles: u64,
}

struct Shared {
    machine: &'static KernelMachine,
    n: usize,
    outbox: [Mutex<Vec<Block>>; CPUS],
    inbox_scratch: [Mutex<Vec<Block>>; CPUS],
    mine: [Mutex<Vec<Block>>; CPUS],
    finished: AtomicU32,
    /// The zone of the first allocation (both CPUs prefer the same one).
    zone: Mutex<Option<ZoneKind>>,
    result: [Mutex<Option<Result<CpuReport, SmpStressError>>>; CPUS],
}

type Handle = CpuCache<'static, 'static, (IrqLock, crate::bringup::KernelHooks)>;

/// The migrator of the stress's contiguous ranges: the stress's blocks
/// are in flight between CPUs, so nothing moves (the range comes from free
/// memory and what the caches give back); before a range is taken, every
/// CPU's caches are drained through this CPU's handle, which it serves
/// while it waits.
struct Draining<'h> {
    handle: &'h mut Handle,
}

impl Migrator for Draining<'_> {
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<Block> {
        None
    }

    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }

    fn putback(&mut self, b: Block) {
        let _ = b.into_raw(); // never handed over
    }

    fn migrated(&mut self, b: Block, _: Pfn) {
        let _ = b.into_raw(); // never handed over
    }

    fn drain_caches(&mut self) {
        let machine = self.handle.machine();
        machine.drain_pcp(Some(self.handle), |_| core::hint::spin_loop());
    }
}

fn tag(cpu: usize, pfn: Pfn) -> u64 {
    ((cpu as u64 + 1) << 56) ^ pfn.get().wrapping_mul(0x9e37_79b9)
}

fn frame_word(pfn: Pfn) -> *mut u64 {
    (pfn.get() * 4096) as *mut u64
}

impl Shared {
    fn free_checked(
        &self,
        handle: &mut Handle,
        owner: usize,
        block: Block,
    ) -> Result<(), SmpStressError> {
        let pfn = block.pfn();
        // SAFETY: the frame is allocated to this stress and handed to this
        // CPU (by itself or through an outbox); identity-mapped RAM.
        if unsafe { frame_word(pfn).read_volatile() } != tag(owner, pfn) {
            return Err(SmpStressError::Corrupt(pfn));
        }
        handle.free(block).map_err(|_| SmpStressError::Free(pfn))
    }

    fn work(&self, cpu: usize) -> Result<CpuReport, SmpStressError> {
        // This CPU hands to the next one and takes from the previous one.
        let other = (cpu + self.n - 1) % self.n;
        let node = smp::cpu_node(cpu);
        // This CPU's handle: claimed for the stress, given back when dropped
        // (a kernel keeps it in the CPU's per-CPU area from bring-up on).
        let mut handle = self
            .machine
            .cpu(CpuId(cpu as u32), node)
            .map_err(|_| SmpStressError::Claim)?;
        let mut rep = CpuReport {
            node: node.index() as u32,
            ..CpuReport::default()
        };
        // The cache's counters before the stress: the main job's earlier
        // modes used this CPU's caches too.
        let kinds = [
            ZoneKind::Dma,
            ZoneKind::Dma32,
            ZoneKind::Normal,
            ZoneKind::Movable,
        ];
        let start = kinds.map(|k| handle.cache_info(node, k).map(|i| i.stats));
        let mut mine = self.mine[cpu].lock();
        let mut taken = self.inbox_scratch[cpu].lock();
        let movable = Gfp::KERNEL | Gfp::MOVABLE;
        // The rounds, in a closure so that a CPU that fails still counts
        // itself finished: the others would otherwise wait for it forever
        // and the run end in a timeout instead of this CPU's error.
        let mut rounds = || -> Result<(), SmpStressError> {
            for round in 0..ROUNDS {
                if round % CONTIG_EVERY == CONTIG_EVERY - 1 {
                    let mut mig = Draining {
                        handle: &mut handle,
                    };
                    let range = self
                        .machine
                        .alloc_contig(node, Gfp::KERNEL, CONTIG_FRAMES, 1, &mut mig)
                        .map_err(SmpStressError::Contig)?;
                    let start = range.start();
                    self.machine
                        .free_segment(range)
                        .map_err(|_| SmpStressError::Free(start))?;
                    rep.contig += 1;
                }
                for i in 0..BATCH {
                    let order = Order::new(if i % 8 == 7 { 3 } else { 0 }).expect("order");
                    let a = handle
                        .alloc(movable, order)
                        .map_err(|_| SmpStressError::Alloc)?;
                    self.zone.lock().get_or_insert(a.zone());
                    rep.local += u64::from(a.node() == node);
                    // SAFETY: just allocated to this CPU; identity-mapped.
                    unsafe { frame_word(a.pfn()).write_volatile(tag(cpu, a.pfn())) };
                    mine.push(a);
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
                    self.free_checked(&mut handle, cpu, x)?;
                }
                // What the previous CPU handed over.
                core::mem::swap(&mut *self.outbox[other].lock(), &mut *taken);
                while let Some(x) = taken.pop() {
                    self.free_checked(&mut handle, other, x)?;
                    rep.cross_frees += 1;
                }
            }
            Ok(())
        };
        let stressed = rounds();
        self.finished.fetch_add(1, Ordering::AcqRel);
        stressed?;
        // Wait for every CPU to stop handing over, then take the rest.
        // Waiting, this CPU serves the drains the others may still ask of
        // its caches.
        while self.finished.load(Ordering::Acquire) < self.n as u32 {
            handle.poll();
            core::hint::spin_loop();
        }
        core::mem::swap(&mut *self.outbox[other].lock(), &mut *taken);
        while let Some(x) = taken.pop() {
            self.free_checked(&mut handle, other, x)?;
            rep.cross_frees += 1;
        }
        if let Some(kind) = *self.zone.lock()
            && let Some(info) = handle.cache_info(node, kind)
        {
            let before = kinds
                .iter()
                .position(|&k| k == kind)
                .and_then(|i| start[i])
                .unwrap_or_default();
            rep.stats = info.stats.since(&before);
            rep.high = info.high;
            rep.high_bounds = (info.high_min, info.high_max);
        }
        handle.drain();
        Ok(rep)
    }
}

/// One buffer of held blocks per CPU.
type Buffers = [Mutex<Vec<Block>>; CPUS];

fn reserve<T>(v: &mut Vec<T>, n: usize) -> Result<(), SmpStressError> {
    v.try_reserve_exact(n)
        .map_err(|_| SmpStressError::NoMemory("buffers"))
}

/// Runs the mode: starts the other CPUs if needed, stresses, checks.
pub fn run(
    machine: &'static KernelMachine,
    rate: &TscRate,
    platform: &crate::acpi::Platform,
) -> Result<SmpReport, SmpStressError> {
    let n = smp::start_aps(machine, rate, platform).map_err(SmpStressError::Ap)?;
    let buffers = |size: usize| -> Result<Buffers, SmpStressError> {
        let mut out: Buffers = Default::default();
        for b in out.iter_mut().take(n) {
            reserve(b.get_mut(), size)?;
        }
        Ok(out)
    };
    let shared = Shared {
        machine,
        n,
        outbox: buffers(OUTBOX)?,
        inbox_scratch: buffers(OUTBOX)?,
        mine: buffers(BATCH)?,
        finished: AtomicU32::new(0),
        zone: Mutex::new(None),
        result: Default::default(),
    };
    // Counted after the buffers: the heap may have grown for them.
    let before = machine.inspect().free_pages();
    let t = Instant::now();
    smp::run_all(&|| {
        let cpu = smp::cpu_index();
        let r = shared.work(cpu);
        *shared.result[cpu].lock() = Some(r);
    });
    let cycles = t.elapsed().0;
    let mut rep = SmpReport {
        n,
        managed: machine.inspect().managed_pages(),
        zone: *shared.zone.lock(),
        cycles,
        ..SmpReport::default()
    };
    for (i, r) in shared.result.iter().enumerate().take(n) {
        rep.cpus[i] = r.lock().take().ok_or(SmpStressError::Claim)??;
    }
    // The stress holds a few MiB at most: every node serves its own CPUs.
    for (cpu, c) in rep.cpus.iter().enumerate().take(n) {
        if c.local != c.allocated {
            return Err(SmpStressError::Remote {
                cpu,
                local: c.local,
                allocated: c.allocated,
            });
        }
    }
    // Every cache was drained by its owner: every frame is back.
    let after = machine.inspect().free_pages();
    if after != before {
        return Err(SmpStressError::Conservation { before, after });
    }
    machine.validate().map_err(|_| SmpStressError::Validate)?;
    Ok(rep)
}

/// Prints the table.
pub fn print(r: &SmpReport, rate: &TscRate) {
    println!(
        "smp: {} CPUs up; machine {} frames, caches of zone {}; {} rounds x {} blocks per CPU in {}",
        r.n,
        r.managed,
        r.zone.map_or("-", ZoneKind::name),
        ROUNDS,
        BATCH,
        rate.duration(Cycles(r.cycles)),
    );
    println!(
        "smp: cpu | node | allocs | local | pcp hits | hit rate | refills | spills | zone locks | cross-CPU frees | high | high bounds | contiguous ranges (each draining every CPU)"
    );
    for (i, c) in r.cpus.iter().enumerate().take(r.n) {
        let s = &c.stats;
        let rate_x100 = (s.local_hits * 10_000).checked_div(s.allocs).unwrap_or(0);
        println!(
            "smp: cpu{i} | {} | {} | {} | {} | {}.{:02}% | {} | {} | {} | {} | {} | {}..{} | {}",
            c.node,
            s.allocs,
            c.local,
            s.local_hits,
            rate_x100 / 100,
            rate_x100 % 100,
            s.refills,
            s.spills,
            s.zone_lock_acquisitions,
            c.cross_frees,
            c.high,
            c.high_bounds.0,
            c.high_bounds.1,
            c.contig
        );
    }
}
