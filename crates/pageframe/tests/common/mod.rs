//! Shared set-up for the facade's tests: machines over simulated frames
//! (numbers, never touched), their metadata leaked for the test's life.
#![allow(dead_code)]

use std::mem::MaybeUninit;

pub mod watchdog;

use pageframe::{
    Block, CpuCache, CpuId, Machine, MachineConfig, Migrator, NodeId, Order, Pfn, PfnRange,
    ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    topology::Topology,
};

/// Frames per GiB.
pub const GIB: u64 = 1 << 18;
/// Frames per pageblock.
pub const PB: u64 = 512;

pub fn r(a: u64, b: u64) -> PfnRange {
    PfnRange::new(Pfn(a), Pfn(b))
}

pub fn n(i: usize) -> NodeId {
    NodeId::new(i).unwrap()
}

pub fn o(k: u8) -> Order {
    Order::new(k).unwrap()
}

/// Memory for the test's whole run.
pub fn leak(bytes: usize) -> &'static mut [MaybeUninit<u8>] {
    Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice())
}

/// CPU `cpu`'s handle, for a CPU on `node`. A thread that starts while
/// others already drain every CPU's caches finds its unowned cache `Busy`
/// for the moment a drainer empties it: it retries, as the docs say.
pub fn claim_cpu<'m>(m: &'m Machine<'static>, cpu: u32, node: NodeId) -> CpuCache<'m, 'static> {
    loop {
        match m.cpu(CpuId(cpu), node) {
            Ok(c) => return c,
            Err(pageframe::pcp::CpuError::Pcp(pageframe::pcp::PcpError::Busy)) => {
                std::thread::yield_now()
            }
            Err(e) => panic!("CPU {cpu}'s handle: {e:?}"),
        }
    }
}

/// An empty machine for `config`, on the heap, for the test's whole run.
pub fn machine_with(config: MachineConfig) -> &'static mut Machine<'static> {
    Box::leak(pageframe::boot::Builder::new(config).build_boxed())
}

/// Adds zone `kind` over `span` on `node` and hands `free` over.
pub fn zone<P: pageframe::lock::Platform>(
    m: &mut Machine<'static, P>,
    node: NodeId,
    kind: ZoneKind,
    span: PfnRange,
    free: PfnRange,
) {
    let meta = leak(m.zone_metadata_bytes(span));
    m.add_zone(node, kind, span, meta).unwrap();
    if !free.is_empty() {
        m.add_free_range(free).unwrap();
    }
}

/// One node: DMA32 of `low` frames from 1 MiB, Normal of `high` frames
/// from 4 GiB (spans to 4 GiB and 8 GiB, the rest holes).
pub fn two_zones(low: u64, high: u64) -> &'static mut Machine<'static> {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Dma32,
        r(256, 4 * GIB),
        r(256, 256 + low),
    );
    zone(
        m,
        NodeId::ZERO,
        ZoneKind::Normal,
        r(4 * GIB, 8 * GIB),
        r(4 * GIB, 4 * GIB + high),
    );
    m
}

/// One node with one Normal zone of `frames` frames at 4 GiB, all free.
pub fn one_zone(frames: u64) -> &'static mut Machine<'static> {
    let m = machine_with(MachineConfig::SINGLE_NODE);
    let span = r(4 * GIB, 4 * GIB + frames);
    zone(m, NodeId::ZERO, ZoneKind::Normal, span, span);
    m
}

/// `nodes` uniform nodes, node `i` with a Normal zone of `blocks`
/// pageblocks at `base(i)`, all free.
pub fn numa(nodes: usize, blocks: u64) -> &'static mut Machine<'static> {
    let m = machine_with(MachineConfig::new(Topology::uniform(nodes).unwrap()));
    for i in 0..nodes {
        let span = r(base(i), base(i) + blocks * PB);
        zone(m, n(i), ZoneKind::Normal, span, span);
    }
    m
}

/// Where node `i`'s memory starts (above 4 GiB, 64 GiB apart).
pub fn base(i: usize) -> u64 {
    (4 + 64 * i as u64) * GIB
}

/// A kernel over simulated contents: the movable blocks it owns (by first
/// frame) and one word per frame, moved with its block. It is the
/// migrator: it hands over a block only when it holds it, and keeps the
/// new block after a move. `refuse` makes every migration fail (pinned
/// memory).
#[derive(Default)]
pub struct Words {
    pub blocks: std::collections::HashMap<Pfn, Block>,
    pub word: std::collections::HashMap<u64, u64>,
    pub refuse: bool,
    pub moves: u64,
}

impl Words {
    /// Keeps `b` (movable from now on), with a word in its first frame.
    pub fn keep(&mut self, b: Block) -> Pfn {
        let p = b.pfn();
        self.word.insert(p.get(), p.get() ^ 0xabcd);
        self.blocks.insert(p, b);
        p
    }

    /// Gives back every block it holds to `m`.
    pub fn free_all(&mut self, m: &Machine<'static>) {
        for (_, b) in self.blocks.drain() {
            m.free(b).unwrap();
        }
        self.word.clear();
    }
}

impl Migrator for Words {
    fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<Block> {
        self.blocks.remove(&pfn)
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        if self.refuse {
            return Err(MigrateError::Pinned);
        }
        for i in 0..order.pages() {
            if let Some(w) = self.word.remove(&(src.get() + i)) {
                self.word.insert(dst.get() + i, w);
            }
        }
        self.moves += 1;
        Ok(())
    }

    fn putback(&mut self, block: Block) {
        self.blocks.insert(block.pfn(), block);
    }

    fn migrated(&mut self, block: Block, _from: Pfn) {
        self.blocks.insert(block.pfn(), block);
    }
}

impl SlowPathHooks for Words {}

/// Fills node `i`'s Normal zone with movable frames and frees 3 of every 4
/// in each pageblock: free memory is plentiful but no free pageblock is
/// left. The frames kept go to `w` (each with its word); returns them.
pub fn fragment(m: &Machine<'static>, i: usize, w: &mut Words) -> Vec<Pfn> {
    let mut all = Vec::new();
    while let Ok(a) = m.alloc(
        n(i),
        pageframe::Gfp::HIGHUSER_MOVABLE | pageframe::Gfp::THISNODE | pageframe::Gfp::MEMALLOC,
        Order::ZERO,
    ) {
        all.push(a);
    }
    let mut kept = Vec::new();
    for b in all {
        if b.pfn().get() % 4 == 0 {
            kept.push(w.keep(b));
        } else {
            m.free(b).unwrap();
        }
    }
    kept
}
