//! pageframe's four columns, through its public API only: the zone path
//! (`Machine::alloc`/`free`) or a CPU's cached path (`CpuCache`), each
//! keeping allocations as frame numbers (`Block::into_raw`, then
//! `Machine::block_from_raw` to free) or as `Block` values.

use std::mem::MaybeUninit;

use pageframe::{
    Block, CpuCache, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind,
};

use crate::frames::{Frames, HUGE_FRAMES, Settled};

/// The zone's frames: `[0, frames)`.
pub fn span(frames: u64) -> PfnRange {
    PfnRange::new(Pfn(0), Pfn(frames))
}

/// Runs `f` on a one-node machine with one Normal zone over `frames`
/// frames, all free, its watermarks at zero (so that a fill reaches every
/// frame, as LLFree's does), and, for `cpus` > 0, per-CPU caches for that
/// many CPUs. Its metadata lives in buffers this call owns and drops.
pub fn with_machine<T>(frames: u64, cpus: u32, f: impl FnOnce(&Machine<'_>) -> T) -> T {
    let span = span(frames);
    // Declared before the machine, which borrows them: dropped after it.
    let mut meta: Box<[MaybeUninit<u8>]>;
    let mut pcp: Box<[MaybeUninit<u8>]>;
    let mut m: Box<Machine<'_>> =
        pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    meta = Box::new_uninit_slice(m.zone_metadata_bytes(span));
    m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, &mut meta)
        .expect("zone");
    m.add_free_range(span).expect("free range");
    m.tunables().set_min_free_kbytes(0);
    if cpus > 0 {
        pcp = Box::new_uninit_slice(m.pcp_bytes(cpus).expect("cache sizing"));
        m.enable_pcp(cpus, &mut pcp).expect("caches");
    }
    f(&m)
}

/// Metadata bytes of the zone over `frames` frames, and of the per-CPU
/// caches for `cpus` CPUs.
pub fn metadata_bytes(frames: u64, cpus: u32) -> (usize, usize) {
    with_machine(frames, 0, |m| {
        (
            m.zone_metadata_bytes(span(frames)),
            m.pcp_bytes(cpus).expect("cache sizing"),
        )
    })
}

/// A way into the machine that hands out and takes back `Block`s.
pub trait Path<'a> {
    /// The machine.
    fn machine(&self) -> &Machine<'a>;
    /// One block, or `None` when none is left.
    fn alloc(&mut self, order: Order) -> Option<Block>;
    /// Gives a block back.
    fn free(&mut self, block: Block);
    /// Empties this path's caches into the zone.
    fn drain(&mut self);
}

/// The zone path: `Machine::alloc`/`Machine::free`.
pub struct ZonePath<'m, 'a>(pub &'m Machine<'a>);

impl<'a> Path<'a> for ZonePath<'_, 'a> {
    fn machine(&self) -> &Machine<'a> {
        self.0
    }
    #[inline]
    fn alloc(&mut self, order: Order) -> Option<Block> {
        self.0.alloc(NodeId::ZERO, Gfp::KERNEL, order).ok()
    }
    #[inline]
    fn free(&mut self, block: Block) {
        self.0.free(block).expect("free");
    }
    fn drain(&mut self) {}
}

/// A CPU's cached path: its `CpuCache` handle.
pub struct CachePath<'m, 'a>(pub CpuCache<'m, 'a>);

impl<'m, 'a> CachePath<'m, 'a> {
    /// CPU `cpu`'s handle on `m`.
    pub fn claim(m: &'m Machine<'a>, cpu: usize) -> CachePath<'m, 'a> {
        CachePath(m.cpu(CpuId(cpu as u32), NodeId::ZERO).expect("cpu handle"))
    }
}

impl<'a> Path<'a> for CachePath<'_, 'a> {
    fn machine(&self) -> &Machine<'a> {
        self.0.machine()
    }
    #[inline]
    fn alloc(&mut self, order: Order) -> Option<Block> {
        self.0.alloc(Gfp::KERNEL, order).ok()
    }
    #[inline]
    fn free(&mut self, block: Block) {
        self.0.free(block).expect("free");
    }
    fn drain(&mut self) {
        self.0.drain();
    }
}

fn order(o: u8) -> Order {
    Order::new(o).expect("order")
}

/// After draining `path`'s caches and the zone's order-0 stripes: free
/// frames, and free 2 MiB blocks on the free lists.
fn settle<'a>(path: &mut impl Path<'a>) -> Settled {
    path.drain();
    let m = path.machine();
    m.drain_stripes();
    let mut huge = 0;
    m.inspect().for_each_free_block(|_, o| {
        if o.pages() >= HUGE_FRAMES {
            huge += o.pages() / HUGE_FRAMES;
        }
    });
    Settled {
        frames: m.inspect().free_pages(),
        huge_blocks: huge,
    }
}

/// Allocations kept as frame numbers, as a kernel keeps them in its page
/// tables or its own records.
pub struct Numbers<P>(pub P);

impl<'a, P: Path<'a>> Frames for Numbers<P> {
    type Handle = u64;
    #[inline]
    fn alloc(&mut self, o: u8) -> Option<u64> {
        self.0.alloc(order(o)).map(|b| b.into_raw().0.get())
    }
    #[inline]
    fn free(&mut self, pfn: u64, o: u8) {
        // SAFETY: `pfn` came from `Block::into_raw` of a block of order `o`
        // this column allocated, and each number is made a block once, here,
        // just before it is freed.
        let b = unsafe { self.0.machine().block_from_raw(Pfn(pfn), order(o)) };
        self.0.free(b.expect("a live allocation"));
    }
    #[inline]
    fn pfn(pfn: &u64) -> u64 {
        *pfn
    }
    fn settle(&mut self) -> Settled {
        settle(&mut self.0)
    }
}

/// Allocations kept as the owning `Block` values.
pub struct Blocks<P>(pub P);

impl<'a, P: Path<'a>> Frames for Blocks<P> {
    type Handle = Block;
    #[inline]
    fn alloc(&mut self, o: u8) -> Option<Block> {
        self.0.alloc(order(o))
    }
    #[inline]
    fn free(&mut self, block: Block, _: u8) {
        self.0.free(block);
    }
    #[inline]
    fn pfn(block: &Block) -> u64 {
        block.pfn().get()
    }
    fn settle(&mut self) -> Settled {
        settle(&mut self.0)
    }
}
