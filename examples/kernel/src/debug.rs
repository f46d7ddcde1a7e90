//! The `debug` mode (built with `--features debug`): the allocator's
//! debugging tools at work on the guest's RAM: vmstat and zoneinfo, the
//! owner records finding a leak, trace events turned into a latency
//! histogram and a count by order, the self-test under fault injection, and
//! a use after free caught by page poisoning.

use crate::bringup::{KernelMachine, NODE};
use crate::memmap::RangeSet;
use crate::time::{Instant, TscRate};
use crate::{or_fail, println, selftest};
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering::Relaxed};
use pageframe::debug::fail::FailConfig;
use pageframe::debug::{Event, Hooks, PAGE_POISON, Poisoning};
use pageframe::{CpuId, Gfp, Order, PAGE_SIZE, Pfn, PfnRange, PhysAddr};

/// Buckets of the latency histogram: powers of two of TSC cycles.
const BUCKETS: usize = 24;
/// Orders counted (0..=10).
const ORDERS: usize = 11;
/// CPUs whose allocation start is remembered (by CPU number).
const START_SLOTS: usize = 64;

/// The kernel's hooks: trace events into a histogram and counts (while
/// `tracing`), poisoning through the identity map of RAM (while switched
/// on).
pub struct KernelHooks {
    tracing: AtomicBool,
    poisoning: AtomicU8,
    start: [AtomicU64; START_SLOTS],
    latency: [AtomicU64; BUCKETS],
    allocs: [AtomicU64; ORDERS],
    failures: AtomicU64,
    frees: AtomicU64,
    fallbacks: AtomicU64,
    refills: AtomicU64,
    spills: AtomicU64,
    migrations: AtomicU64,
    use_after_free: spin::Mutex<Option<Event>>,
}

impl KernelHooks {
    /// Everything off.
    pub const fn new() -> Self {
        KernelHooks {
            tracing: AtomicBool::new(false),
            poisoning: AtomicU8::new(0),
            start: [const { AtomicU64::new(0) }; START_SLOTS],
            latency: [const { AtomicU64::new(0) }; BUCKETS],
            allocs: [const { AtomicU64::new(0) }; ORDERS],
            failures: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            refills: AtomicU64::new(0),
            spills: AtomicU64::new(0),
            migrations: AtomicU64::new(0),
            use_after_free: spin::Mutex::new(None),
        }
    }

    fn slot(cpu: Option<CpuId>) -> usize {
        cpu.map_or(0, |c| c.0 as usize % START_SLOTS)
    }

    fn frames(frames: PfnRange) -> *mut u8 {
        // The kernel maps all RAM at its physical address.
        frames.start.addr().get() as *mut u8
    }

    fn len(frames: PfnRange) -> usize {
        (frames.len() * PAGE_SIZE) as usize
    }
}

/// The hooks every machine of this kernel reports to.
pub static HOOKS: KernelHooks = KernelHooks::new();

impl Hooks for KernelHooks {
    fn event(&self, e: &Event) {
        if let Event::UseAfterFree { .. } = e {
            *self.use_after_free.lock() = Some(*e);
        }
        if !self.tracing.load(Relaxed) {
            return;
        }
        match *e {
            Event::AllocStart { cpu, .. } => {
                self.start[Self::slot(cpu)].store(Instant::now().cycles(), Relaxed);
            }
            Event::Alloc { order, cpu, .. } => {
                let took = Instant::now()
                    .cycles()
                    .wrapping_sub(self.start[Self::slot(cpu)].load(Relaxed));
                let bucket = (u64::BITS - took.leading_zeros()) as usize;
                self.latency[bucket.min(BUCKETS - 1)].fetch_add(1, Relaxed);
                if let Some(n) = self.allocs.get(usize::from(order.get())) {
                    n.fetch_add(1, Relaxed);
                }
            }
            Event::AllocFail { .. } => {
                self.failures.fetch_add(1, Relaxed);
            }
            Event::Free { .. } => {
                self.frees.fetch_add(1, Relaxed);
            }
            Event::Fallback { .. } => {
                self.fallbacks.fetch_add(1, Relaxed);
            }
            Event::PcpRefill { .. } => {
                self.refills.fetch_add(1, Relaxed);
            }
            Event::PcpSpill { .. } => {
                self.spills.fetch_add(1, Relaxed);
            }
            Event::Migrate { .. } => {
                self.migrations.fetch_add(1, Relaxed);
            }
            _ => {}
        }
    }

    fn poisoning(&self) -> Poisoning {
        Poisoning::from_bits_truncate(self.poisoning.load(Relaxed))
    }

    fn fill(&self, frames: PfnRange, byte: u8) {
        // SAFETY: the allocator passes frames it owns or the caller is
        // giving up: RAM, identity-mapped writable, used by nobody else now.
        unsafe { core::ptr::write_bytes(Self::frames(frames), byte, Self::len(frames)) };
    }

    fn check(&self, frames: PfnRange, byte: u8) -> Option<PhysAddr> {
        // SAFETY: as for `fill`: the block is being handed out, nobody else
        // reads or writes it.
        let bytes = unsafe { core::slice::from_raw_parts(Self::frames(frames), Self::len(frames)) };
        let i = bytes.iter().position(|&b| b != byte)?;
        Some(PhysAddr::new(frames.start.addr().get() + i as u64))
    }
}

/// Something the debug mode found wrong.
#[derive(Debug)]
pub enum DebugError {
    /// The trace's count differs from what the workload did.
    Trace(&'static str, u64, u64),
    /// The leak was not found, or more than it.
    Leak(usize),
    /// Injected failures and handled ones differ.
    Injected(u64, u64),
    /// The use after free went unreported.
    Uaf,
}

impl fmt::Display for DebugError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Trace(what, want, got) => write!(f, "trace: {want} {what} done, {got} traced"),
            Self::Leak(n) => write!(f, "owner records: {n} blocks left instead of the one leak"),
            Self::Injected(a, b) => write!(f, "fault injection: {a} injected, {b} handled"),
            Self::Uaf => f.write_str("poisoning: the write after the free went unreported"),
        }
    }
}

/// A driver that forgets one block (the leak the owner records find).
#[inline(never)]
fn leaky_driver(m: &KernelMachine) -> Option<pageframe::Block> {
    let keep = m.alloc(NODE, Gfp::KERNEL, Order::new(3)?).ok()?;
    Some(keep)
}

/// Runs every tool once and prints what each shows.
pub fn run(
    m: &'static KernelMachine,
    managed: &RangeSet,
    pfn_end: u64,
    rate: &TscRate,
) -> Result<(), DebugError> {
    // vmstat and zoneinfo, as Linux prints them.
    println!("debug: vmstat");
    for line in alloc::format!("{}", m.inspect().vmstat()).lines() {
        println!("  {line}");
    }
    println!("debug: zoneinfo");
    for line in alloc::format!("{}", m.inspect().zoneinfo()).lines() {
        println!("  {line}");
    }

    // Trace events: a workload of known shape, counted by the hooks.
    HOOKS.tracing.store(true, Relaxed);
    let mut c = m.cpu(CpuId(0), NODE).ok();
    let (mut done, mut held) = ([0u64; ORDERS], Vec::new());
    for i in 0..4000u64 {
        let order = [0u8, 0, 0, 1, 2, 3, 9][(i % 7) as usize];
        let o = Order::new(order).unwrap_or(Order::ZERO);
        let b = match (&mut c, i % 2) {
            (Some(c), 0) => c.alloc(Gfp::KERNEL, o),
            _ => m.alloc(NODE, Gfp::KERNEL, o),
        };
        if let Ok(b) = b {
            done[usize::from(order)] += 1;
            held.push(b);
        }
        if held.len() > 64 {
            let b = held.swap_remove((i as usize * 7) % held.len());
            let _ = m.free(b);
        }
    }
    for b in held.drain(..) {
        let _ = m.free(b);
    }
    drop(c);
    HOOKS.tracing.store(false, Relaxed);
    println!("debug: trace: allocations by order (events / done)");
    for (k, want) in done.iter().enumerate() {
        let got = HOOKS.allocs[k].load(Relaxed);
        if *want > 0 || got > 0 {
            println!("  order {k:>2}: {got:>6} / {want}");
        }
        if got != *want {
            return Err(DebugError::Trace("allocations", *want, got));
        }
    }
    println!(
        "debug: trace: {} frees, {} failures, {} fallbacks, {} refills, {} spills",
        HOOKS.frees.load(Relaxed),
        HOOKS.failures.load(Relaxed),
        HOOKS.fallbacks.load(Relaxed),
        HOOKS.refills.load(Relaxed),
        HOOKS.spills.load(Relaxed),
    );
    println!("debug: trace: allocation latency (cycles: count)");
    for (b, n) in HOOKS.latency.iter().enumerate() {
        let n = n.load(Relaxed);
        if n > 0 {
            println!("  < {:>8}: {n:>6} {}", 1u64 << b, Bar(n, 4000));
        }
    }

    // Owner records: a leak among well-behaved allocations.
    let since = m.inspect().owner_seq();
    let mut fine = Vec::new();
    for t in 0..32u64 {
        if let Ok(b) = m.alloc_tagged(NODE, Gfp::KERNEL, Order::ZERO, 0x1000 + t % 4) {
            fine.push(b);
        }
    }
    let leaked = leaky_driver(m);
    for b in fine {
        let _ = m.free(b);
    }
    let mut left = Vec::new();
    m.inspect().for_each_owned(|b| {
        if b.owner.seq >= since {
            left.push(b);
        }
    });
    println!("debug: page owners (live blocks by owner, largest first)");
    for line in alloc::format!("{}", m.inspect().page_owners())
        .lines()
        .take(6)
    {
        println!("  {line}");
    }
    match left.as_slice() {
        [one] => {
            let site = one.owner.site.map_or(("?", 0), |l| (l.file(), l.line()));
            println!(
                "debug: leak found: order {} at pfn {:#x}, tag {:#x}, allocated at {}:{}",
                one.order.get(),
                one.pfn.get(),
                one.owner.tag,
                site.0,
                site.1
            );
        }
        _ => return Err(DebugError::Leak(left.len())),
    }
    if let Some(b) = leaked {
        let _ = m.free(b);
    }

    // The self-test under fault injection: every failure must be handled.
    m.inspect().fail_page_alloc().set(FailConfig {
        probability_ppm: 20_000,
        seed: 0xdeb6,
        ..FailConfig::ALWAYS
    });
    let before = m.inspect().fail_page_alloc().injected();
    let report = selftest::run_with(m, managed, pfn_end, 7, selftest::First::Ordinary);
    m.inspect().fail_page_alloc().disable();
    let report = or_fail(report, "selftest under fault injection");
    let injected = m.inspect().fail_page_alloc().injected() - before;
    report.print(rate);
    // Every injected failure was an ordinary request the self-test then
    // served from the reserves (the rest: the watermark reached).
    if injected == 0 || report.retried < injected {
        return Err(DebugError::Injected(injected, report.retried));
    }
    println!(
        "debug: fault injection: {injected} allocations failed on purpose, all handled; the self-test took every frame"
    );

    // Poisoning: free memory is filled, then a write after a free.
    m.drain_pcp(None, |_| {});
    m.drain_stripes();
    m.inspect().for_each_free_block(|head, order| {
        HOOKS.fill(PfnRange::new(head, head + order.pages()), PAGE_POISON);
    });
    HOOKS.poisoning.store(
        Poisoning::POISON.bits(),
        core::sync::atomic::Ordering::Release,
    );
    let victim = m
        .alloc_tagged(NODE, Gfp::KERNEL, Order::ZERO, 0x7a6)
        .map_err(|_| DebugError::Uaf)?;
    let pfn = victim.pfn();
    let _ = m.free(victim);
    let stale = (pfn.addr().get() + 64) as *mut u64;
    // SAFETY: not safe on purpose: the frame was freed just above; this is
    // the use after free the poisoning must catch (the frame is RAM,
    // identity-mapped, and nobody holds it now).
    unsafe { stale.write_volatile(0x0bad_c0de) };
    let mut again = Vec::new();
    let start = Instant::now();
    while HOOKS.use_after_free.lock().is_none() {
        match m.alloc(NODE, Gfp::KERNEL, Order::ZERO) {
            Ok(b) => again.push(b),
            Err(_) => break,
        }
    }
    let found = *HOOKS.use_after_free.lock();
    let tries = again.len();
    for b in again {
        let _ = m.free(b);
    }
    HOOKS.poisoning.store(0, Relaxed);
    match found {
        Some(Event::UseAfterFree {
            addr,
            pfn: got,
            last_owner,
            ..
        }) => println!(
            "debug: use after free caught: write at {:#x} in frame {:#x}, last owner tag {:#x}, found by allocation {} ({} cycles)",
            addr.get(),
            got.get(),
            last_owner.unwrap_or(0),
            tries,
            start.elapsed().0
        ),
        _ => return Err(DebugError::Uaf),
    }
    if got_frame(found) != Some(pfn) || m.inspect().use_after_free_reports() != 1 {
        return Err(DebugError::Uaf);
    }
    Ok(())
}

/// The frame a use-after-free report names.
fn got_frame(e: Option<Event>) -> Option<Pfn> {
    match e? {
        Event::UseAfterFree { addr, .. } => Some(addr.pfn_down()),
        _ => None,
    }
}

/// A bar of `#` proportional to `n` of `total` (at most 40).
struct Bar(u64, u64);

impl fmt::Display for Bar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = (self.0 * 40).div_ceil(self.1.max(1)).min(40);
        for _ in 0..w {
            f.write_str("#")?;
        }
        Ok(())
    }
}
