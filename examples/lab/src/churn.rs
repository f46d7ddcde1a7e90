//! The allocators the order-0 churn scenarios (`frag`, `scattered-movable`)
//! run side by side: pageframe's `Machine` as a kernel uses it (default
//! configuration, zone path, and through a CPU's per-CPU cache) and
//! `buddy_system_allocator`.
//! Each is asked the same questions: one frame, give one back, and how
//! much free memory is whole 2 MiB blocks.

use std::mem::MaybeUninit;

use buddy_system_allocator::FrameAllocator as Bsa;
use pageframe::{
    Block, CpuCache, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind,
};

/// Frames in a 2 MiB block.
pub const HUGE: u64 = 512;

/// One allocator under order-0 churn.
pub trait Churn {
    /// Row label.
    fn name(&self) -> &'static str;
    /// One frame; `None` when memory is exhausted.
    fn alloc(&mut self) -> Option<u64>;
    /// Gives a frame back.
    fn free(&mut self, pfn: u64);
    /// Frames in free, aligned 2 MiB blocks (the allocator's own count, or
    /// measured by taking such blocks until none is left and giving them
    /// back).
    fn huge_free(&mut self) -> u64;
}

/// Every allocator over `frames` frames from frame 0, all free.
pub fn all(frames: u64) -> Vec<Box<dyn Churn>> {
    vec![
        Box::new(MachineZone::new(frames)),
        Box::new(MachineCached::new(frames)),
        Box::new(Peer::new(frames)),
    ]
}

/// A one-node `Machine` with one Normal zone, default configuration,
/// allocating movable frames through `Machine::alloc`/`free`. Its
/// watermarks are zero (`min_free_kbytes` 0) so that it may be filled. The
/// blocks it holds are kept by frame number (a kernel's page array).
pub struct MachineZone {
    m: &'static Machine<'static>,
    held: Vec<Option<Block>>,
}

/// The one-node machine over `[0, frames)` the `Machine` rows use, with
/// per-CPU caches for one CPU if `pcp`.
fn machine(frames: u64, pcp: bool) -> &'static Machine<'static> {
    let span = PfnRange::new(Pfn(0), Pfn(frames));
    // Leaked with its metadata: the lab is a short-lived host program.
    let m: &'static mut Machine<'static> =
        Box::leak(pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed());
    let meta: &'static mut [MaybeUninit<u8>] =
        Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .expect("zone");
    m.add_free_range(span).expect("memory");
    m.tunables().set_min_free_kbytes(0);
    if pcp {
        let mem = Box::leak(Box::new_uninit_slice(m.pcp_bytes(1).expect("sizing")));
        m.enable_pcp(1, mem).expect("caches");
    }
    m
}

/// Frames in free, aligned 2 MiB blocks of the machine's zone.
fn machine_huge_free(m: &Machine<'static>) -> u64 {
    let z = m
        .inspect()
        .node(NodeId::ZERO)
        .and_then(|n| n.zone(ZoneKind::Normal))
        .expect("zone");
    z.inspect(|z| {
        z.nr_free()
            .iter()
            .enumerate()
            .skip(9)
            .map(|(o, n)| n << o)
            .sum()
    })
}

/// The same machine allocating through CPU 0's per-CPU cache
/// (`CpuCache::alloc`/`free`); its cache is drained before each count (the
/// frames it holds are free, but not the zone's).
pub struct MachineCached {
    m: &'static Machine<'static>,
    cpu: CpuCache<'static, 'static>,
    held: Vec<Option<Block>>,
}

impl MachineCached {
    /// The machine over `[0, frames)`, with caches.
    pub fn new(frames: u64) -> MachineCached {
        let m = machine(frames, true);
        MachineCached {
            m,
            cpu: m.cpu(CpuId(0), NodeId::ZERO).expect("CPU 0"),
            held: (0..frames).map(|_| None).collect(),
        }
    }
}

impl Churn for MachineCached {
    fn name(&self) -> &'static str {
        "pageframe Machine, per-CPU cache"
    }
    fn alloc(&mut self) -> Option<u64> {
        let b = self.cpu.alloc(Gfp::HIGHUSER_MOVABLE, Order::ZERO).ok()?;
        let p = b.pfn().get();
        self.held[p as usize] = Some(b);
        Some(p)
    }
    fn free(&mut self, pfn: u64) {
        let b = self.held[pfn as usize].take().expect("a held frame");
        self.cpu.free(b).expect("free");
    }
    fn huge_free(&mut self) -> u64 {
        self.cpu.drain();
        self.m.drain_stripes();
        machine_huge_free(self.m)
    }
}

impl MachineZone {
    /// The machine over `[0, frames)`.
    pub fn new(frames: u64) -> MachineZone {
        MachineZone {
            m: machine(frames, false),
            held: (0..frames).map(|_| None).collect(),
        }
    }
}

impl Churn for MachineZone {
    fn name(&self) -> &'static str {
        "pageframe Machine (default)"
    }
    fn alloc(&mut self) -> Option<u64> {
        let b = self
            .m
            .alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO)
            .ok()?;
        let p = b.pfn().get();
        self.held[p as usize] = Some(b);
        Some(p)
    }
    fn free(&mut self, pfn: u64) {
        let b = self.held[pfn as usize].take().expect("a held frame");
        self.m.free(b).expect("free");
    }
    fn huge_free(&mut self) -> u64 {
        machine_huge_free(self.m)
    }
}

/// `buddy_system_allocator` 0.11.
pub struct Peer {
    a: Bsa<33>,
}

impl Peer {
    /// The peer over `[0, frames)`.
    pub fn new(frames: u64) -> Peer {
        let mut a = Bsa::<33>::new();
        a.add_frame(0, frames as usize);
        Peer { a }
    }
}

impl Churn for Peer {
    fn name(&self) -> &'static str {
        "buddy_system_allocator 0.11"
    }
    fn alloc(&mut self) -> Option<u64> {
        self.a.alloc(1).map(|p| p as u64)
    }
    fn free(&mut self, pfn: u64) {
        self.a.dealloc(pfn as usize, 1);
    }
    fn huge_free(&mut self) -> u64 {
        let held: Vec<usize> = std::iter::from_fn(|| self.a.alloc(HUGE as usize)).collect();
        for &p in &held {
            self.a.dealloc(p, HUGE as usize);
        }
        held.len() as u64 * HUGE
    }
}
