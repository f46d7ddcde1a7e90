//! Shared set-up for the pageframe benchmarks: simulated zones (frames are
//! numbers, never touched) and the peer allocator behind one small trait, so
//! every scenario runs the same code against each allocator. The rows that
//! stand for what users get go through [`Machine`]'s public API: its zone
//! path ([`Machine::alloc`]) and a CPU's cached path ([`CpuCache`]).
#![forbid(unsafe_code)]

use std::mem::MaybeUninit;

use buddy_system_allocator::FrameAllocator as Peer;
use pageframe::CpuId;
use pageframe::debug::{Hooks, NoHooks};
use pageframe::lock::SpinLock;
use pageframe::{
    Block, CpuCache, Gfp, Machine, MachineConfig, NodeId, ZoneKind, zone::MobilityConfig,
};
use pageframe_buddy::{BuddyConfig, BuddyZone, ListId, Order, Pfn, PfnRange, SingleList};
use pageframe_mobility::{AllocMode, MigrateType, MobileZone};

/// Frames in 4 GiB.
pub const FRAMES_4G: u64 = 1 << 20;

/// What the benchmarks need of an allocator: its own handle for a block
/// (a frame number for the peers and the cores, an owning [`Block`] for
/// the machine, so that its rows go through the API users have).
pub trait Frames {
    /// What an allocation hands out.
    type Handle;
    /// Allocates `2^order` frames; `None` when out of memory.
    fn alloc(&mut self, order: u8) -> Option<Self::Handle>;
    /// Frees a block.
    fn free(&mut self, block: Self::Handle, order: u8);
    /// The block's first frame.
    fn pfn(block: &Self::Handle) -> u64;
}

/// An owned, untouched metadata buffer big enough for a buddy core over
/// `span`.
pub fn meta(span: PfnRange) -> Box<[MaybeUninit<u8>]> {
    Box::new_uninit_slice(BuddyZone::<SingleList>::metadata_bytes(
        span,
        BuddyConfig::default(),
    ))
}

/// The span of a zone of `frames` frames starting at 4 GiB.
pub fn span(frames: u64) -> PfnRange {
    PfnRange::new(Pfn(FRAMES_4G), Pfn(FRAMES_4G + frames))
}

/// The buddy core over `span`, all of it free.
pub fn core_zone(span: PfnRange, meta: &mut [MaybeUninit<u8>]) -> BuddyZone<'_> {
    let mut z = BuddyZone::new(span, BuddyConfig::default(), meta, SingleList).expect("zone");
    z.add_free_range(span).expect("range");
    z
}

/// A one-node machine with one Normal zone over `span`, all of it free,
/// and per-CPU caches for `cpus` CPUs (none for 0). Leaked: benchmarks keep
/// it for the whole run.
pub fn machine(span: PfnRange, cpus: u32, mobility: MobilityConfig) -> &'static Machine<'static> {
    machine_with_hooks(span, cpus, mobility, NoHooks)
}

/// [`machine`] reporting to `hooks` (`pageframe::debug`).
pub fn machine_with_hooks<H: Hooks>(
    span: PfnRange,
    cpus: u32,
    mobility: MobilityConfig,
    hooks: H,
) -> &'static Machine<'static, (SpinLock, H)> {
    let m: &'static mut Machine<'static, (SpinLock, H)> = Box::leak(
        pageframe::boot::Builder::new(MachineConfig {
            mobility,
            ..MachineConfig::SINGLE_NODE
        })
        .hooks(hooks)
        .build_boxed(),
    );
    let meta = Box::leak(Box::new_uninit_slice(m.zone_metadata_bytes(span)));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
        .expect("zone");
    m.add_free_range(span).expect("range");
    if cpus > 0 {
        let mem = Box::leak(Box::new_uninit_slice(m.pcp_bytes(cpus).expect("sizing")));
        m.enable_pcp(cpus, mem).expect("caches");
    }
    m
}

/// The peer over the same frames.
pub fn peer(span: PfnRange) -> Peer<33> {
    let mut p = Peer::<33>::new();
    p.add_frame(span.start.get() as usize, span.end.get() as usize);
    p
}

impl Frames for BuddyZone<'_> {
    type Handle = u64;
    #[inline]
    fn pfn(block: &u64) -> u64 {
        *block
    }
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<u64> {
        BuddyZone::alloc(self, Order::new(order)?, ListId::DEFAULT)
            .ok()
            .map(Pfn::get)
    }
    #[inline]
    fn free(&mut self, pfn: u64, order: u8) {
        BuddyZone::free(self, Pfn(pfn), Order::new(order).expect("order")).expect("free");
    }
}

/// The machine's zone path (lock, watermark check, mobility layer, buddy
/// core), with watermarks lifted so benchmarks may fill it.
pub struct Facade<H: Hooks + 'static = NoHooks>(pub &'static Machine<'static, (SpinLock, H)>);

impl<H: Hooks> Frames for Facade<H> {
    type Handle = Block;
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<Block> {
        self.0
            .alloc(
                NodeId::ZERO,
                Gfp::KERNEL | Gfp::MEMALLOC,
                Order::new(order)?,
            )
            .ok()
    }
    #[inline]
    fn free(&mut self, block: Block, _: u8) {
        self.0.free(block).expect("free");
    }
    #[inline]
    fn pfn(block: &Block) -> u64 {
        block.pfn().get()
    }
}

/// A CPU's cached path on a machine with per-CPU caches (movable requests,
/// watermarks as the zone has them).
pub struct Cached<H: Hooks + 'static = NoHooks>(pub CpuCache<'static, 'static, (SpinLock, H)>);

impl<H: Hooks> Cached<H> {
    /// CPU `cpu`'s handle on `m`.
    pub fn new(m: &'static Machine<'static, (SpinLock, H)>, cpu: u32) -> Cached<H> {
        Cached(m.cpu(CpuId(cpu), NodeId::ZERO).expect("handle"))
    }
}

impl<H: Hooks> Frames for Cached<H> {
    type Handle = Block;
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<Block> {
        self.0
            .alloc(Gfp::KERNEL | Gfp::MOVABLE, Order::new(order)?)
            .ok()
    }
    #[inline]
    fn free(&mut self, block: Block, _: u8) {
        self.0.free(block).expect("free");
    }
    #[inline]
    fn pfn(block: &Block) -> u64 {
        block.pfn().get()
    }
}

/// The per-CPU path for callers that keep no handle
/// (`Machine::alloc_on`/`free_on`: one claim of the preferred zone's cache
/// per call), as a global allocator's entry points use it.
pub struct OnCpu(pub &'static Machine<'static>, pub u32);

impl Frames for OnCpu {
    type Handle = Block;
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<Block> {
        self.0
            .alloc_on(
                CpuId(self.1),
                NodeId::ZERO,
                Gfp::KERNEL | Gfp::MOVABLE,
                Order::new(order)?,
            )
            .ok()
    }
    #[inline]
    fn free(&mut self, block: Block, _: u8) {
        self.0.free_on(CpuId(self.1), block).expect("free");
    }
    #[inline]
    fn pfn(block: &Block) -> u64 {
        block.pfn().get()
    }
}

/// Allocation from any context (`Machine::try_alloc`: the CPU's cache
/// claimed for the call, every lock by `try_lock`), freed through the
/// same CPU's cache (`Machine::free_on`), as a tracer's buffer pages would
/// be.
pub struct AnyContext(pub &'static Machine<'static>, pub u32);

impl Frames for AnyContext {
    type Handle = Block;
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<Block> {
        self.0
            .try_alloc(
                CpuId(self.1),
                NodeId::ZERO,
                Gfp::MOVABLE,
                Order::new(order)?,
            )
            .ok()
    }
    #[inline]
    fn free(&mut self, block: Block, _: u8) {
        self.0.free_on(CpuId(self.1), block).expect("free");
    }
    #[inline]
    fn pfn(block: &Block) -> u64 {
        block.pfn().get()
    }
}

impl Frames for Peer<33> {
    type Handle = u64;
    #[inline]
    fn pfn(block: &u64) -> u64 {
        *block
    }
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<u64> {
        Peer::alloc(self, 1 << order).map(|p| p as u64)
    }
    #[inline]
    fn free(&mut self, pfn: u64, order: u8) {
        self.dealloc(pfn as usize, 1 << order)
    }
}

/// Allocates blocks of `order` until none is left.
pub fn fill<F: Frames>(a: &mut F, order: u8) -> Vec<F::Handle> {
    std::iter::from_fn(|| a.alloc(order)).collect()
}

/// A mobility zone over `span` (all free).
pub fn mobile_zone(span: PfnRange, meta: &mut [MaybeUninit<u8>]) -> MobileZone<'_> {
    let mut z = MobileZone::new(span, MobilityConfig::DEFAULT, meta).expect("zone");
    z.add_free_range(span).expect("range");
    z
}

/// Metadata for a mobility zone over `span`.
pub fn mobile_meta(span: PfnRange) -> Box<[MaybeUninit<u8>]> {
    Box::new_uninit_slice(MobileZone::metadata_bytes(span, MobilityConfig::DEFAULT))
}

impl Frames for MobileZone<'_> {
    type Handle = u64;
    #[inline]
    fn pfn(block: &u64) -> u64 {
        *block
    }
    #[inline]
    fn alloc(&mut self, order: u8) -> Option<u64> {
        MobileZone::alloc(
            self,
            Order::new(order)?,
            MigrateType::Movable,
            AllocMode::empty(),
        )
        .ok()
        .map(Pfn::get)
    }
    #[inline]
    fn free(&mut self, pfn: u64, order: u8) {
        MobileZone::free(self, Pfn(pfn), Order::new(order).expect("order")).expect("free");
    }
}
