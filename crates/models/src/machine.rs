//! A reference model of a whole machine (two nodes, three zones with
//! holes, per-CPU caches for two CPUs, compaction with a content-moving
//! migrator) and an operation language over the public API, shared by the
//! property tests and the `machine_ops` fuzz target so both check the same
//! promises (host only, `std` feature):
//!
//! * no frame ever has two owners: every block handed out is disjoint from
//!   every block still owned, lies in one zone, is aligned to its order;
//!   the model holds every [`pageframe::Block`], [`pageframe::Segment`]
//!   and [`pageframe::contig::CmaBuffer`] it is given, and gives each back
//!   exactly once;
//! * ownership moves with migration: the model's migrator hands a block
//!   over only when asked for one it holds, and takes back the new block;
//! * a migrator that panics leaves the machine as a refusal would;
//! * no frame is lost: at every step, managed frames = free frames +
//!   frames in per-CPU caches + frames owned, and everything comes back at
//!   the end;
//! * bad numbers (the `unsafe` raw paths, used within their contract) get
//!   the expected typed error and change nothing;
//! * compaction moves owners' blocks with their contents, and only them;
//! * `validate()` holds after every step.

use std::boxed::Box;
use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

use core::mem::MaybeUninit;

use pageframe_buddy::{BlockInfo, FreeError, Order, Pfn, PfnRange};
use pageframe_compact::{MIGRATE_BATCH_MAX, MigrateError, MigrateMode, Move};
use pageframe_pcp::CpuId;

use pageframe::lock::SpinLock;
use pageframe::{
    AllocError, Block, ContigError, Gfp, Machine, MachineConfig, Migrator, NodeId, RawError,
    Segment, ZoneKind,
    compact::SlowPathHooks,
    contig::{CmaBuffer, CmaId},
    topology::Topology,
    tune::{NodePolicy, Placement, ThpDefrag, ThpPolicy},
    zone::Zone,
};

/// A zone of the model machine: (node, kind, span, usable ranges).
type ModelZone = (usize, ZoneKind, (u64, u64), [(u64, u64); 2]);

/// The zones of the model machine.
const ZONES: [ModelZone; 3] = [
    (
        0,
        ZoneKind::Dma32,
        (256, 256 + 2048),
        [(256, 1500), (1600, 256 + 2048)],
    ),
    (
        0,
        ZoneKind::Normal,
        (1 << 20, (1 << 20) + 4096),
        [
            (1 << 20, (1 << 20) + 3000),
            ((1 << 20) + 3100, (1 << 20) + 4096),
        ],
    ),
    (
        1,
        ZoneKind::Normal,
        (2 << 20, (2 << 20) + 4096),
        [(2 << 20, (2 << 20) + 4096), (0, 0)],
    ),
];

/// The model machine's CMA area: two pageblocks of node 1's zone.
pub const CMA_AREA: PfnRange = PfnRange::new(Pfn((2 << 20) + 2048), Pfn((2 << 20) + 3072));

/// Where node 1 may get a Movable zone at run time (`HotAdd`): eight
/// pageblocks, declared at set-up.
pub const HOTPLUG_RANGE: PfnRange = PfnRange::new(Pfn(4 << 20), Pfn((4 << 20) + 4096));

/// Request flags the operations choose from (the last two are bad input).
pub const GFPS: [Gfp; 11] = [
    Gfp::KERNEL,
    Gfp::KERNEL.union(Gfp::MOVABLE),
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::ATOMIC,
    Gfp::KERNEL.union(Gfp::DMA32),
    Gfp::KERNEL.union(Gfp::THISNODE),
    Gfp::NOWAIT,
    Gfp::KERNEL.union(Gfp::MEMALLOC),
    Gfp::DMA.union(Gfp::DMA32),
    Gfp::KERNEL.union(Gfp::DMA),
];

/// One operation on the machine. Numbers are reduced into range where an
/// index is meant (`index % owned`), and left as they are where bad input
/// is the point.
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate through CPU `cpu`'s handle (0, 1) or the machine (else).
    Alloc {
        /// Requesting node (2 and up: not a node).
        node: u8,
        /// CPU handle, or none.
        cpu: u8,
        /// Index into [`GFPS`].
        gfp: u8,
        /// Order (above 10: too large).
        order: u8,
    },
    /// Free the `index`-th owned block, through CPU `cpu` or the machine.
    Free {
        /// Which block.
        index: usize,
        /// CPU handle, or none.
        cpu: u8,
    },
    /// A frame number turned back into a block (`block_from_raw`, within
    /// its contract): `kind` picks a wrong order, a tail, a hole, a frame
    /// out of range, a misaligned one or an arbitrary frame `raw` (each a
    /// typed error, nothing changed), or an owned block's own number
    /// (given up with `into_raw` first), freed through CPU `cpu` or the
    /// machine and then tried again (refused: its block is gone).
    BadFree {
        /// What kind of bad.
        kind: u8,
        /// Which block it is derived from.
        index: usize,
        /// An arbitrary frame number.
        raw: u64,
        /// CPU handle, or none.
        cpu: u8,
    },
    /// The slow path, compacting with a migrator that refuses if `refuse`.
    Slow {
        /// Requesting node.
        node: u8,
        /// Index into [`GFPS`].
        gfp: u8,
        /// Order.
        order: u8,
        /// Migrations fail.
        refuse: bool,
    },
    /// A huge page under policy `policy` (index into the policy table).
    Thp {
        /// Requesting node.
        node: u8,
        /// `MADV_HUGEPAGE`.
        madvised: bool,
        /// Policy index.
        policy: u8,
        /// Migrations fail.
        refuse: bool,
    },
    /// A kcompactd tick on `node` at time `now` (ms).
    Kcompactd {
        /// Node.
        node: u8,
        /// Milliseconds.
        now: u32,
    },
    /// Whole-node compaction.
    CompactNode {
        /// Node.
        node: u8,
    },
    /// Split the `index`-th owned block into its halves
    /// (`Machine::split`), both kept.
    Split {
        /// Which block.
        index: usize,
    },
    /// Give back frames `from..to` (taken modulo the block's size) of the
    /// `index`-th owned block by number (`Machine::free_raw`); the frames
    /// kept become blocks of their own, made again with `block_from_raw`.
    FreePart {
        /// Which block.
        index: usize,
        /// First frame given back, within the block.
        from: u16,
        /// Frames given back (at least one).
        len: u16,
    },
    /// A run of `frames` single frames (0..=70, bad input outside 2..=64)
    /// from CPU `cpu`'s cache (`CpuCache::alloc_run_raw`): each frame must
    /// be an order-0 allocation of its own, none owned already.
    AllocRun {
        /// CPU (0 or 1).
        cpu: u8,
        /// Frames.
        frames: u8,
    },
    /// Give back through CPU `cpu`'s cache (`CpuCache::free_range_raw`)
    /// the `index`-th owned block, if of order 0, with up to `len` owned
    /// single frames right after it; with `overrun`, one more frame that
    /// nobody owns, which must get the range refused with nothing changed.
    FreeRun {
        /// Which block.
        index: usize,
        /// Frames after it, at most.
        len: u8,
        /// CPU (0 or 1).
        cpu: u8,
        /// Reach one frame past what is owned.
        overrun: bool,
    },
    /// Pin or unpin the `index`-th owned block.
    Pin {
        /// Which block.
        index: usize,
        /// Pin or unpin.
        pinned: bool,
    },
    /// Drain CPU `cpu`'s caches, or (2 and up) every CPU's.
    Drain {
        /// CPU, or all.
        cpu: u8,
    },
    /// The per-CPU periodic step.
    Tick {
        /// CPU.
        cpu: u8,
    },
    /// Take the range of `len` frames at `offset` into zone `zone`'s span
    /// (`alloc_contig_range`; past the span's end is bad input), migrating
    /// with a migrator that refuses if `refuse`.
    Contig {
        /// Index into the model's zones.
        zone: u8,
        /// First frame, from the span's start.
        offset: u16,
        /// Frames (0: bad input).
        len: u16,
        /// Migrations fail.
        refuse: bool,
    },
    /// Free the `index`-th segment or CMA buffer held, or, `raw`, turn an
    /// arbitrary range (zone, offset, len, as for `Contig`) into a segment
    /// (`segment_from_raw`, within its contract: the model gives up the
    /// plain blocks that tile it first) and free it. The raw range is
    /// taken exactly when owned plain blocks tile it.
    FreeContig {
        /// Which range.
        index: usize,
        /// An arbitrary range instead.
        raw: Option<(u8, u16, u16)>,
    },
    /// Take `blocks` pageblocks (modulo 4, plus one) at pageblock `block` of
    /// zone `zone` offline, with a migrator that refuses if `refuse`.
    Offline {
        /// Index into the model's zones.
        zone: u8,
        /// First pageblock, from the span's start (modulo the span).
        block: u8,
        /// Pageblocks.
        blocks: u8,
        /// Migrations fail.
        refuse: bool,
    },
    /// Bring the `index`-th offline range back online.
    Online {
        /// Which range.
        index: usize,
    },
    /// A contiguous request of `1 + frames % 1024` frames on the CMA area,
    /// with a migrator that refuses if `refuse`.
    Cma {
        /// Frames.
        frames: u16,
        /// Migrations fail.
        refuse: bool,
    },
    /// A free page reporting pass from order `min` (reduced modulo 11); the
    /// callback refuses the batches if `refuse`. Every block offered must be
    /// free: disjoint from every owned block.
    Report {
        /// Reporting order.
        min: u8,
        /// Refuse every batch.
        refuse: bool,
        /// Traffic inside the callback, every batch: `churn % 4` order-0
        /// allocations and, when `churn >= 4`, the free of an owned block
        /// (a balloon driver handing pages back). The pass must still end.
        churn: u8,
    },
    /// Hot-add node 1's Movable zone over the first `1 + blocks % 8`
    /// pageblocks of [`HOTPLUG_RANGE`] and online what its metadata leaves
    /// (as [`pageframe::debug::Inspect::memmap_on_memory`] plans it). With `short`, first a
    /// try with too little metadata, which must change nothing. Once the
    /// zone is there, every further hot-add must fail.
    HotAdd {
        /// Pageblocks.
        blocks: u8,
        /// Try with too little metadata first.
        short: bool,
    },
    /// A compaction of node `node` whose migrator panics at its `at`-th
    /// call (caught): the machine must end as if the call had failed, and
    /// every block handed over must come back.
    Panic {
        /// Node.
        node: u8,
        /// Which migrator call panics (from the first, modulo 8).
        at: u8,
        /// Through a contiguous range of the node's zone instead.
        contig: bool,
    },
    /// From now on the migrator moves whole batches itself (`on`; else
    /// `migrate` per move), refusing every `refuse_every`-th move of a
    /// batch (0: none). Each move of a batch counts as one migrator call
    /// for [`Op::Panic`], so a panic can come in the middle of a batch.
    Batching {
        /// Batches moved by the migrator itself.
        on: bool,
        /// Which moves of a batch it refuses.
        refuse_every: u8,
    },
    /// Set a tunable to an arbitrary value.
    Tunable {
        /// Which one.
        which: u8,
        /// The value.
        value: u32,
    },
}

macro_rules! ensure {
    ($c:expr, $($t:tt)*) => { if !$c { return Err(format!($($t)*)); } };
}

/// An owned block: its order, its token (its contents, moved with it) and,
/// for a plain block, the [`Block`] itself (`None` while it is handed over
/// to the allocator for a move, and for the pieces of a segment, whose
/// [`Segment`] or [`CmaBuffer`] is held whole).
struct Owned {
    order: Order,
    token: u64,
    block: Option<Block>,
}

/// The allocated blocks whose heads lie in `range`, as the core sees them
/// (the pieces of a segment, or what is left of a block given back in
/// part). None in an empty range, wherever it starts (the range kept after
/// a part that ends a zone's last block starts past the zone).
fn allocated_in(m: &Machine<'_>, range: PfnRange) -> Result<Vec<(Pfn, Order)>, String> {
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let z = m
        .inspect()
        .zone_of(range.start)
        .ok_or("memory in no zone")?;
    Ok(z.inspect(|mz| {
        mz.buddy()
            .walk(range)
            .filter_map(|(p, info)| match info {
                BlockInfo::Allocated { head, order, .. } if head == p => Some((p, order)),
                _ => None,
            })
            .collect()
    }))
}

/// The kernel of the model: it owns every block, segment and CMA buffer
/// handed out, keeps one token of contents per block head, and is the
/// migrator (blocks move with their tokens; `refuse` makes migrations
/// fail, `panic_at` makes the given call panic).
struct World {
    blocks: BTreeMap<u64, Owned>,
    next_token: u64,
    segments: Vec<Segment>,
    cmas: Vec<CmaBuffer>,
    /// Ranges taken offline.
    offline: Vec<PfnRange>,
    stats: RunStats,
    /// Managed frames, offline ranges included (grows by hot-adds).
    managed: u64,
    refuse: bool,
    /// Migrator calls left before one panics (`Op::Panic`).
    panic_at: Option<u32>,
    /// Moves whole batches itself (`Op::Batching`).
    batched: bool,
    /// Refuses every n-th move of a batch it moves itself (0: none).
    refuse_every: u8,
    /// Protocol breaches the migrator saw (it cannot return errors).
    faults: Vec<String>,
}

impl World {
    fn pages(&self) -> u64 {
        self.blocks.values().map(|o| o.order.pages()).sum()
    }

    /// Records `2^order` frames at `pfn` handed out (a block, or a piece of
    /// a segment); refuses them if they overlap an owned block.
    fn take(&mut self, pfn: Pfn, order: Order, block: Option<Block>) -> Result<(), String> {
        let (s, e) = (pfn.get(), pfn.get() + order.pages());
        ensure!(pfn.is_aligned(order), "{pfn:?} is not aligned to {order:?}");
        if let Some((&h, o)) = self.blocks.range(..e).next_back() {
            ensure!(
                h + o.order.pages() <= s,
                "{pfn:?}/{order:?} overlaps the owned block at {h:#x}/{:?}",
                o.order
            );
        }
        self.next_token += 1;
        let token = self.next_token;
        self.blocks.insert(
            s,
            Owned {
                order,
                token,
                block,
            },
        );
        Ok(())
    }

    /// A block handed out: checked and kept.
    fn take_block(&mut self, b: Block) -> Result<(), String> {
        let (p, o) = (b.pfn(), b.order());
        self.take(p, o, Some(b))
    }

    /// A segment handed out: its pieces recorded (they must tile it).
    fn take_pieces(&mut self, m: &Machine<'_>, range: PfnRange) -> Result<(), String> {
        for (p, o) in allocated_in(m, range)? {
            self.take(p, o, None)?;
        }
        ensure!(self.tiles(range), "{range:?} not tiled by its blocks");
        Ok(())
    }

    /// Forgets the pieces of `range` (a segment given back).
    fn drop_pieces(&mut self, range: PfnRange) {
        let heads: Vec<u64> = self
            .blocks
            .range(range.start.get()..range.end.get())
            .map(|(&h, _)| h)
            .collect();
        for h in heads {
            self.blocks.remove(&h);
        }
    }

    /// Whether owned blocks tile `range` exactly.
    fn tiles(&self, range: PfnRange) -> bool {
        let mut at = range.start.get();
        for (&h, o) in self.blocks.range(range.start.get()..range.end.get()) {
            if h != at {
                return false;
            }
            at = h + o.order.pages();
        }
        at == range.end.get() && !range.is_empty()
    }

    /// The `index`-th plain block held (not handed over).
    fn nth_block(&self, index: usize) -> Option<(Pfn, Order)> {
        let plain: Vec<(u64, Order)> = self
            .blocks
            .iter()
            .filter(|(_, o)| o.block.is_some())
            .map(|(&h, o)| (h, o.order))
            .collect();
        let &(h, o) = plain.get(index % plain.len().max(1))?;
        Some((Pfn(h), o))
    }

    /// Takes the `index`-th plain block out of the records.
    fn remove_block(&mut self, index: usize) -> Option<Block> {
        let (p, _) = self.nth_block(index)?;
        self.blocks.remove(&p.get())?.block
    }

    /// One migrator call: panics if this is the chosen one.
    fn tick(&mut self) {
        if let Some(n) = self.panic_at.as_mut() {
            if *n == 0 {
                self.panic_at = None;
                panic!("the model's migrator panics on purpose");
            }
            *n -= 1;
        }
    }
}

impl Migrator for World {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.tick();
        match self.blocks.get_mut(&pfn.get()) {
            Some(o) if o.order == order => o.block.take(),
            _ => None,
        }
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        self.tick();
        if self.refuse {
            return Err(MigrateError::Again);
        }
        match self.blocks.get(&src.get()) {
            Some(o) if o.order == order && o.block.is_none() => Ok(()),
            _ => {
                self.faults.push(format!(
                    "asked to move {src:?}/{order:?}, never handed over"
                ));
                Err(MigrateError::Busy)
            }
        }
        .map(|()| {
            let _ = dst;
        })
    }

    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        if !self.batched {
            for m in moves {
                m.set(self.migrate(m.src(), m.dst(), m.order(), mode));
            }
            return;
        }
        self.stats.batches += 1;
        let frames: u64 = moves.iter().map(|m| m.order().pages()).sum();
        if frames > MIGRATE_BATCH_MAX && moves.len() > 1 {
            self.faults.push(format!(
                "a batch of {frames} frames, over {MIGRATE_BATCH_MAX}"
            ));
        }
        for (k, m) in moves.iter().enumerate() {
            let (d, end) = (m.dst().get(), m.dst().get() + m.order().pages());
            if moves[..k].iter().any(|o| {
                o.src() == m.src() || (o.dst().get() < end && d < o.dst().get() + o.order().pages())
            }) {
                self.faults.push(format!(
                    "{m:?} repeats a source or a destination of its batch"
                ));
            }
        }
        let every = usize::from(self.refuse_every);
        for (k, m) in moves.iter_mut().enumerate() {
            if every > 0 && k % every == every - 1 {
                m.set(Err(MigrateError::Busy));
                continue;
            }
            m.set(self.migrate(m.src(), m.dst(), m.order(), mode));
        }
    }

    fn putback(&mut self, block: Block) {
        match self.blocks.get_mut(&block.pfn().get()) {
            Some(o) if o.block.is_none() && o.order == block.order() => o.block = Some(block),
            _ => self
                .faults
                .push(format!("{block:?} put back, never handed over")),
        }
    }

    fn migrated(&mut self, block: Block, from: Pfn) {
        let Some(o) = self.blocks.remove(&from.get()) else {
            self.faults.push(format!("{from:?} moved, never owned"));
            return;
        };
        if o.block.is_some() || o.order != block.order() {
            self.faults.push(format!(
                "{from:?} moved to {block:?}, not handed over as that"
            ));
        }
        self.stats.moved += 1;
        let (p, order, token) = (block.pfn().get(), o.order, o.token);
        if let Some((&h, other)) = self.blocks.range(..p + order.pages()).next_back()
            && h + other.order.pages() > p
        {
            self.faults.push(format!(
                "{from:?} moved onto owned {h:#x}/{:?}",
                other.order
            ));
        }
        self.blocks.insert(
            p,
            Owned {
                order,
                token,
                block: Some(block),
            },
        );
    }
}

impl SlowPathHooks for World {}

/// What a run did (so that tests can check their scripts reach the paths
/// they mean to).
#[derive(Clone, Copy, Default, Debug)]
pub struct RunStats {
    /// Ranges `Contig` and `Cma` took.
    pub contig_taken: u32,
    /// Ranges `FreeContig` freed.
    pub contig_freed: u32,
    /// Blocks compaction or range evacuation moved.
    pub moved: u64,
    /// Ranges taken offline.
    pub offlined: u32,
    /// Frames onlined by a hot-add.
    pub hot_added: u64,
    /// Migrator panics caught.
    pub panics: u32,
    /// Batches the migrator moved itself.
    pub batches: u64,
    /// Runs of single frames a CPU's cache handed out.
    pub runs: u32,
    /// Ranges of owned single frames given back through a cache.
    pub runs_freed: u32,
    /// Runs reaching past the owned frames, refused.
    pub runs_refused: u32,
}

/// Runs `ops` on a fresh model machine and checks every promise after each
/// step. `Err` describes the first broken one.
pub fn run(ops: &[Op]) -> Result<RunStats, String> {
    let mut metas: Vec<Vec<MaybeUninit<u8>>> = Vec::new();
    let mut cfg = MachineConfig::new(Topology::uniform(2).map_err(|e| format!("{e}"))?);
    // Superpageblocks of two pageblocks (the least the maximum order
    // allows): every zone has several, so fallbacks choose between them.
    cfg.mobility.superpageblock_shift = 10;
    let mut slot: Box<MaybeUninit<Machine<'_>>> = Box::new_uninit();
    // Metadata first, so the machine can borrow all of it.
    for &(_, _, (a, b), _) in &ZONES {
        let span = PfnRange::new(Pfn(a), Pfn(b));
        metas.push(vec![
            MaybeUninit::uninit();
            Zone::<SpinLock>::metadata_bytes(span, cfg.mobility)
        ]);
    }
    let mut pcp_mem: Vec<MaybeUninit<u8>> = Vec::new();
    let mut hot_meta =
        vec![MaybeUninit::uninit(); Zone::<SpinLock>::metadata_bytes(HOTPLUG_RANGE, cfg.mobility)];
    let m = pageframe::boot::Builder::new(cfg).build_in(&mut slot);
    for (meta, &(node, kind, (a, b), _)) in metas.iter_mut().zip(&ZONES) {
        let id = NodeId::new(node).ok_or("node")?;
        m.add_zone(id, kind, PfnRange::new(Pfn(a), Pfn(b)), meta)
            .map_err(|e| format!("{e}"))?;
    }
    for &(_, _, _, ranges) in &ZONES {
        for (a, b) in ranges.into_iter().filter(|r| r.1 > r.0) {
            m.add_free_range(PfnRange::new(Pfn(a), Pfn(b)))
                .map_err(|e| format!("{e}"))?;
        }
    }
    pcp_mem.resize(
        m.pcp_bytes(2).map_err(|e| format!("{e}"))?,
        MaybeUninit::uninit(),
    );
    m.enable_pcp(2, &mut pcp_mem).map_err(|e| format!("{e}"))?;
    // Node 1's zone has a CMA area: movable memory may land there, and
    // `Cma` takes it back.
    m.add_cma_area(CMA_AREA).map_err(|e| format!("{e}"))?;
    let hot_node = NodeId::new(1).ok_or("node")?;
    m.declare_hotplug(hot_node, ZoneKind::Movable, HOTPLUG_RANGE)
        .map_err(|e| format!("{e}"))?;
    let mut hot_meta = Some(hot_meta.as_mut_slice());
    let m: &Machine<'_> = m;
    let managed = m.inspect().managed_pages();
    let mut w = World {
        blocks: BTreeMap::new(),
        next_token: 0,
        segments: Vec::new(),
        cmas: Vec::new(),
        offline: Vec::new(),
        stats: RunStats::default(),
        managed,
        refuse: false,
        panic_at: None,
        batched: false,
        refuse_every: 0,
        faults: Vec::new(),
    };
    for (step, op) in ops.iter().enumerate() {
        let r = match *op {
            Op::HotAdd { blocks, short } => hot_add(m, blocks, short, &mut hot_meta, &mut w),
            _ => apply(m, op, &mut w),
        };
        r.map_err(|e| format!("step {step} {op:?}: {e}"))?;
        let offline: u64 = w.offline.iter().map(|r| r.len()).sum();
        let managed = w.managed - offline;
        check(m, &mut w, managed).map_err(|e| format!("after step {step} {op:?}: {e}"))?;
    }
    // Everything comes back.
    for r in w.offline.drain(..) {
        m.add_free_range(r)
            .map_err(|e| format!("onlining {r:?} at the end: {e}"))?;
    }
    let blocks: Vec<Block> = std::mem::take(&mut w.blocks)
        .into_values()
        .filter_map(|o| o.block)
        .collect();
    for b in blocks {
        let _ = m.set_pinned(&b, false);
        m.free(b).map_err(|e| format!("final free: {e}"))?;
    }
    for s in w.segments.drain(..) {
        m.free_segment(s).map_err(|e| format!("final free: {e}"))?;
    }
    for c in w.cmas.drain(..) {
        m.cma_release(c)
            .map_err(|e| format!("final release: {e}"))?;
    }
    m.drain_pcp(None, |_| {});
    m.drain_stripes();
    ensure!(
        m.inspect().free_pages() == w.managed,
        "{} of {} frames free at the end",
        m.inspect().free_pages(),
        w.managed
    );
    m.validate().map_err(|e| format!("{e}"))?;
    Ok(w.stats)
}

/// [`Op::HotAdd`]: the metadata buffer can be lent once, so the first
/// successful hot-add takes it.
fn hot_add<'a>(
    m: &Machine<'a>,
    blocks: u8,
    short: bool,
    meta: &mut Option<&'a mut [MaybeUninit<u8>]>,
    owners: &mut World,
) -> Result<(), String> {
    let node = node_of(1);
    let span = PfnRange::new(
        HOTPLUG_RANGE.start,
        Pfn(HOTPLUG_RANGE.start.get() + (1 + u64::from(blocks) % 8) * 512),
    );
    let before = (m.inspect().managed_pages(), m.inspect().free_pages());
    let Some(buf) = meta.take() else {
        let r = m.hot_add_zone(node, ZoneKind::Movable, span, &mut []);
        ensure!(r.is_err(), "a second hot-add of one slot succeeded");
        ensure!(
            (m.inspect().managed_pages(), m.inspect().free_pages()) == before,
            "a refused hot-add changed the machine"
        );
        return Ok(());
    };
    let Some(plan) = m.inspect().memmap_on_memory(span) else {
        ensure!(span.len() <= 512, "no plan for {span:?}");
        *meta = Some(buf);
        return Ok(());
    };
    let needed = m.zone_metadata_bytes(span);
    ensure!(
        plan.metadata_bytes() >= needed as u64
            && plan.online.end == span.end
            && plan.online.start == plan.metadata.end
            && plan.online.start.is_aligned(Order::new_truncated(9)),
        "plan {plan:?} for {span:?} ({needed} bytes)"
    );
    if short {
        let r = m.hot_add_zone(node, ZoneKind::Movable, span, &mut []);
        ensure!(
            matches!(
                r,
                Err(pageframe::SetupError::Zone(
                    pageframe_buddy::InitError::MetadataTooSmall { .. }
                ))
            ),
            "too little metadata: {:?}",
            r.map(|z| z.span())
        );
        ensure!(
            m.inspect().zone_of(span.start).is_none(),
            "a zone after a refused hot-add"
        );
    }
    let z = m
        .hot_add_zone(node, ZoneKind::Movable, span, buf)
        .map_err(|e| format!("hot-add of {span:?}: {e}"))?;
    ensure!(
        z.span() == span && z.managed_pages() == 0,
        "hot-added zone {:?} with {} managed",
        z.span(),
        z.managed_pages()
    );
    m.add_free_range(plan.online)
        .map_err(|e| format!("online of {:?}: {e}", plan.online))?;
    ensure!(
        m.inspect().managed_pages() == before.0 + plan.online.len(),
        "managed {} -> {} after onlining {:?}",
        before.0,
        m.inspect().managed_pages(),
        plan.online
    );
    owners.managed += plan.online.len();
    owners.stats.hot_added += plan.online.len();
    Ok(())
}

fn node_of(n: u8) -> NodeId {
    NodeId::new(usize::from(n)).unwrap_or(NodeId::ZERO)
}

/// After a call that ran the migrator: the moves it saw broke nothing,
/// and owned blocks are still disjoint.
fn settle(w: &mut World) -> Result<(), String> {
    if let Some(f) = w.faults.first() {
        return Err(f.clone());
    }
    let mut end = 0;
    for (&h, o) in &w.blocks {
        ensure!(h >= end, "owned blocks overlap at {h:#x}");
        end = h + o.order.pages();
        // A block is held as a value, or is a piece of a held segment:
        // anything handed over for a move came back.
        let piece = w.segments.iter().any(|s| s.range().contains(Pfn(h)))
            || w.cmas.iter().any(|c| c.range().contains(Pfn(h)));
        ensure!(
            o.block.is_some() || piece,
            "block {h:#x} was not given back"
        );
    }
    Ok(())
}

fn apply(m: &Machine<'_>, op: &Op, w: &mut World) -> Result<(), String> {
    match *op {
        Op::Alloc {
            node,
            cpu,
            gfp,
            order,
        } => {
            let g = GFPS[usize::from(gfp) % GFPS.len()];
            let o = Order::new_truncated(order.min(15));
            let r = match (NodeId::new(usize::from(node)), cpu < 2 && node < 2) {
                (Some(n), true) => {
                    let mut c = m
                        .cpu(CpuId(u32::from(cpu)), n)
                        .map_err(|e| format!("claiming CPU {cpu}: {e}"))?;
                    c.alloc(g, o)
                }
                (Some(n), false) => m.alloc(n, g, o),
                (None, _) => Err(AllocError::NoSuchNode),
            };
            match r {
                Ok(a) => {
                    ensure!(
                        g.is_valid() && order <= 10 && node < 2,
                        "{g:?} order {order} node {node} succeeded"
                    );
                    ensure!(
                        a.zone() <= g.highest_zone().unwrap_or(ZoneKind::Normal),
                        "{a:?} above the GFP's zones"
                    );
                    if g.contains(Gfp::THISNODE) {
                        ensure!(
                            a.node() == node_of(node),
                            "THISNODE served by {:?}",
                            a.node()
                        );
                    }
                    ensure!(a.order() == o, "{a:?} is not of order {o:?}");
                    let z = m
                        .inspect()
                        .zone_of(a.pfn())
                        .ok_or("allocation in no zone")?;
                    ensure!(
                        z.node() == a.node() && z.kind() == a.zone(),
                        "{a:?} reported the wrong zone"
                    );
                    ensure!(
                        z.span().contains(a.pfn() + (o.pages() - 1)),
                        "{a:?} crosses its zone"
                    );
                    w.take_block(a)?;
                }
                Err(e) => {
                    let want = if !g.is_valid() {
                        AllocError::InvalidGfp
                    } else if node >= 2 {
                        AllocError::NoSuchNode
                    } else if g.contains(Gfp::DMA) {
                        AllocError::NoEligibleZone
                    } else if order > 10 {
                        AllocError::OrderTooLarge
                    } else {
                        AllocError::OutOfMemory
                    };
                    ensure!(e == want, "got {e:?}, expected {want:?}");
                }
            }
        }
        Op::Free { index, cpu } => {
            let Some(b) = w.remove_block(index) else {
                return Ok(());
            };
            let r = if cpu < 2 {
                let mut c = m
                    .cpu(CpuId(u32::from(cpu)), NodeId::ZERO)
                    .map_err(|e| format!("{e}"))?;
                c.free(b)
            } else {
                m.free(b)
            };
            r.map_err(|e| format!("free of an owned block: {e}"))?;
        }
        Op::BadFree {
            kind,
            index,
            raw,
            cpu,
        } => {
            let free_before = m.inspect().free_pages();
            let target = w.nth_block(index);
            let (p, o, want): (Pfn, Order, Option<FreeError>) = match (kind % 7, target) {
                // Wrong order of an owned block.
                (0, Some((p, o))) => {
                    let wrong = Order::new_truncated((o.get() + 1) % 4);
                    if wrong == o {
                        return Ok(());
                    }
                    let want = if !p.is_aligned(wrong) {
                        FreeError::Misaligned
                    } else {
                        FreeError::WrongOrder { allocated: o }
                    };
                    (p, wrong, Some(want))
                }
                // A tail frame of an owned block.
                (1, Some((p, o))) if o.get() > 0 => (
                    p + 1,
                    Order::ZERO,
                    Some(FreeError::NotBlockHead { head: p, order: o }),
                ),
                // A hole of the DMA32 zone, or between zones.
                (2, _) => (Pfn(1550), Order::ZERO, Some(FreeError::Hole)),
                (3, _) => (Pfn(3 << 20), Order::ZERO, Some(FreeError::OutOfRange)),
                (4, Some((p, o))) if o.get() < 10 => {
                    // Misaligned for a larger order.
                    let big = Order::new_truncated(o.get() + 1);
                    if p.is_aligned(big) {
                        return Ok(());
                    }
                    (p, big, Some(FreeError::Misaligned))
                }
                // Anything at all: an error unless it names an owned block
                // (asking for that one would make a second owner).
                (5, _) => {
                    let p = Pfn(raw % ((4 << 20) + 8192));
                    let o = Order::new_truncated((raw >> 60) as u8 % 11);
                    let owned = w.blocks.range(..p.get() + o.pages()).next_back();
                    if owned.is_some_and(|(&h, x)| h + x.order.pages() > p.get()) {
                        return Ok(());
                    }
                    (p, o, None)
                }
                // An owned block given up as a number and made a block
                // again, freed, then tried again.
                (_, Some(_)) => {
                    let b = w.remove_block(index).ok_or("the block went")?;
                    let (p, o) = b.into_raw();
                    // SAFETY: the model just gave up its only block of it.
                    let back = unsafe { m.block_from_raw(p, o) }
                        .map_err(|e| format!("the number of a block given up: {e}"))?;
                    ensure!(
                        (back.pfn(), back.order()) == (p, o),
                        "{p:?}/{o:?} came back as {back:?}"
                    );
                    let r = if cpu < 2 {
                        let mut c = m
                            .cpu(CpuId(u32::from(cpu)), NodeId::ZERO)
                            .map_err(|e| format!("{e}"))?;
                        c.free(back)
                    } else {
                        m.free(back)
                    };
                    r.map_err(|e| format!("{e}"))?;
                    let free_mid = m.inspect().free_pages();
                    // SAFETY: not an owner's block any more: the call must
                    // refuse it (a stale number is the contract's business;
                    // this one is freed and not handed out since).
                    let again = unsafe { m.block_from_raw(p, o) };
                    ensure!(again.is_err(), "a freed number made a block again");
                    ensure!(
                        m.inspect().free_pages() == free_mid,
                        "a refused number changed the free count"
                    );
                    return Ok(());
                }
                _ => return Ok(()),
            };
            // SAFETY: `p` heads no block the model owns with order `o`
            // (checked above for the arbitrary frame; the others are wrong
            // on purpose), so no second owner can come of it.
            let r = unsafe { m.block_from_raw(p, o) };
            match (r, want) {
                (Ok(b), _) => {
                    let _ = b.into_raw();
                    return Err(format!("bad number {p:?}/{o:?} made a block"));
                }
                (Err(RawError { pfn, why }), Some(want)) => {
                    ensure!(
                        pfn == p && why == want,
                        "bad number {p:?}/{o:?}: {why:?} at {pfn:?}, expected {want:?}"
                    )
                }
                (Err(_), None) => {}
            }
            ensure!(
                m.inspect().free_pages() == free_before,
                "a refused number changed the free count"
            );
        }
        Op::Slow {
            node,
            gfp,
            order,
            refuse,
        } => {
            w.refuse = refuse;
            let g = GFPS[usize::from(gfp) % 9];
            let o = Order::new_truncated(order % 11);
            let r = m.alloc_slow(node_of(node % 2), g, o, w);
            settle(w)?;
            if let Ok(a) = r {
                w.take_block(a)?;
            }
        }
        Op::Thp {
            node,
            madvised,
            policy,
            refuse,
        } => {
            w.refuse = refuse;
            let nodes = [
                NodePolicy::ThisNode,
                NodePolicy::RemoteFallback,
                NodePolicy::NodeAware,
            ];
            let p = ThpPolicy {
                defrag: ThpDefrag::ALL[usize::from(policy) % 5],
                nodes: nodes[usize::from(policy / 5) % 3],
                compact_only: policy & 0x80 != 0,
            };
            m.tunables().set_thp_policy(p);
            let r = m.alloc_thp(node_of(node % 2), madvised, w);
            settle(w)?;
            if let Ok(a) = r {
                if p.nodes == NodePolicy::ThisNode {
                    ensure!(
                        a.node() == node_of(node % 2),
                        "ThisNode policy served remotely"
                    );
                }
                ensure!(a.order() == Order::HUGE_2M, "{a:?} is no huge page");
                w.take_block(a)?;
            }
        }
        Op::Kcompactd { node, now } => {
            w.refuse = false;
            m.kcompactd_tick(node_of(node % 2), u64::from(now) * 1_000_000, w);
            settle(w)?;
        }
        Op::CompactNode { node } => {
            w.refuse = false;
            m.compact_node(node_of(node % 2), w);
            settle(w)?;
        }
        Op::Split { index } => {
            let Some(b) = w.remove_block(index) else {
                return Ok(());
            };
            let (p, o) = (b.pfn(), b.order());
            match m.split(b) {
                Ok((lo, hi)) => {
                    ensure!(
                        lo.pfn() == p
                            && hi.pfn() == lo.range().end
                            && lo.order().get() + 1 == o.get(),
                        "{p:?}/{o:?} split into {:?} and {:?}",
                        lo.range(),
                        hi.range()
                    );
                    w.take_block(lo)?;
                    w.take_block(hi)?;
                }
                Err(refused) => {
                    // One frame has no halves; a block being moved is busy.
                    let why = refused.reason();
                    ensure!(
                        matches!(why, FreeError::SingleFrame if o == Order::ZERO)
                            || why == FreeError::Busy,
                        "split of owned {p:?}/{o:?} refused: {why}"
                    );
                    w.take_block(refused.into_inner())?;
                }
            }
        }
        Op::FreePart { index, from, len } => {
            let Some(b) = w.remove_block(index) else {
                return Ok(());
            };
            let whole = b.range();
            let n = whole.len();
            let a = u64::from(from) % n;
            let e = (a + 1 + u64::from(len) % (n - a)).min(n);
            let part = PfnRange::new(whole.start + a, whole.start + e);
            let free_before = m.inspect().free_pages();
            let (p, o) = b.into_raw();
            // SAFETY: the block was the model's, held only as this number
            // from here; the frames kept are made blocks again below, once.
            unsafe { m.free_raw(part) }
                .map_err(|e| format!("free_raw {part:?} of owned {p:?}/{o:?}: {e}"))?;
            ensure!(
                m.inspect().free_pages() == free_before + part.len(),
                "free_raw of {part:?}: {} free frames, {} before",
                m.inspect().free_pages(),
                free_before
            );
            for kept in [
                PfnRange::new(whole.start, part.start),
                PfnRange::new(part.end, whole.end),
            ] {
                let mut covered = 0;
                for (q, k) in allocated_in(m, kept)? {
                    // SAFETY: a piece of the model's block that was not
                    // given back, made a block once.
                    let piece = unsafe { m.block_from_raw(q, k) }
                        .map_err(|e| format!("kept piece {q:?}/{k:?}: {e}"))?;
                    covered += k.pages();
                    w.take_block(piece)?;
                }
                ensure!(
                    covered == kept.len(),
                    "{kept:?} kept as {covered} frames of blocks"
                );
            }
        }
        Op::AllocRun { cpu, frames } => {
            let mut c = m
                .cpu(CpuId(u32::from(cpu % 2)), NodeId::ZERO)
                .map_err(|e| format!("claiming CPU {cpu}: {e}"))?;
            // Free in the zones or held in this CPU's caches: a refused run
            // hands out nothing (a refill of an empty home moves frames
            // from the one to the other).
            let unused = |c: &mut pageframe::CpuCache<'_, '_>| {
                let cached: u64 = (0..2)
                    .filter_map(NodeId::new)
                    .flat_map(|n| ZoneKind::ALL.map(|k| (n, k)))
                    .filter_map(|(n, k)| c.cache_info(n, k))
                    .map(|i| u64::from(i.count))
                    .sum();
                m.inspect().free_pages() + cached
            };
            let before = unused(&mut c);
            let Some(p) = c.alloc_run_raw(Gfp::KERNEL, u64::from(frames)) else {
                ensure!(unused(&mut c) == before, "a run refused handed out frames");
                return Ok(());
            };
            ensure!((2..=64).contains(&frames), "a run of {frames} frames");
            drop(c);
            w.stats.runs += 1;
            for f in p.get()..p.get() + u64::from(frames) {
                // SAFETY: the frames were just handed to the model, as
                // numbers, and are made blocks once.
                let b = unsafe { m.block_from_raw(Pfn(f), Order::ZERO) }
                    .map_err(|e| format!("frame {f:#x} of a run: {e}"))?;
                w.take_block(b)?;
            }
        }
        Op::FreeRun {
            index,
            len,
            cpu,
            overrun,
        } => {
            let Some((p, o)) = w.nth_block(index) else {
                return Ok(());
            };
            if o != Order::ZERO {
                return Ok(());
            }
            // The owned single frames right after `p`, up to 64 in all.
            let mut end = p.get() + 1;
            while end - p.get() < u64::from(len % 64) + 1
                && w.blocks
                    .get(&end)
                    .is_some_and(|b| b.order == Order::ZERO && b.block.is_some())
            {
                end += 1;
            }
            let beyond = end;
            let owned_beyond = w
                .blocks
                .range(..=beyond)
                .next_back()
                .is_some_and(|(&h, b)| h + b.order.pages() > beyond);
            let bad = overrun && !owned_beyond;
            let range = PfnRange::new(p, Pfn(if bad { beyond + 1 } else { end }));
            let free_before = m.inspect().free_pages();
            let mut frames = Vec::new();
            for f in p.get()..end {
                let b = w
                    .blocks
                    .remove(&f)
                    .and_then(|b| b.block)
                    .ok_or("a frame vanished")?;
                frames.push(b.into_raw().0);
            }
            let mut c = m
                .cpu(CpuId(u32::from(cpu % 2)), NodeId::ZERO)
                .map_err(|e| format!("claiming CPU {cpu}: {e}"))?;
            // SAFETY: the model's frames, held only as these numbers from
            // here; with `bad`, one more frame the model does not own, which
            // the call must refuse (changing nothing).
            let r = unsafe { c.free_range_raw(range) };
            drop(c);
            if bad {
                ensure!(
                    r.is_err(),
                    "{range:?} reaching past the owned frames was taken"
                );
                w.stats.runs_refused += 1;
                ensure!(
                    m.inspect().free_pages() == free_before,
                    "a refused run changed the free frames"
                );
                for f in frames {
                    // SAFETY: refused, so still the model's; made blocks once.
                    let b = unsafe { m.block_from_raw(f, Order::ZERO) }
                        .map_err(|e| format!("frame {f:?} of a refused run: {e}"))?;
                    w.take_block(b)?;
                }
            } else {
                r.map_err(|e| format!("free of owned frames {range:?}: {e}"))?;
                w.stats.runs_freed += 1;
            }
        }
        Op::Pin { index, pinned } => {
            let Some((p, _)) = w.nth_block(index) else {
                return Ok(());
            };
            let b = w
                .blocks
                .get(&p.get())
                .and_then(|o| o.block.as_ref())
                .ok_or("the block went")?;
            m.set_pinned(b, pinned)
                .map_err(|e| format!("pinning owned {p:?}: {e}"))?;
        }
        Op::Drain { cpu } => {
            if cpu < 2 {
                let mut c = m
                    .cpu(CpuId(u32::from(cpu)), NodeId::ZERO)
                    .map_err(|e| format!("{e}"))?;
                c.drain();
            } else {
                m.drain_pcp(None, |_| {});
            }
        }
        Op::Tick { cpu } => {
            let mut c = m
                .cpu(CpuId(u32::from(cpu % 2)), NodeId::ZERO)
                .map_err(|e| format!("{e}"))?;
            c.tick();
        }
        Op::Contig {
            zone,
            offset,
            len,
            refuse,
        } => {
            let (_, _, (a, b), _) = ZONES[usize::from(zone) % ZONES.len()];
            let start = a + u64::from(offset) % (b - a + 64);
            let range = PfnRange::new(Pfn(start), Pfn(start + u64::from(len) % 2048));
            w.refuse = refuse;
            let r = m.alloc_contig_range(range, w);
            // Moves made before a failure are real: they are settled.
            settle(w)?;
            match r {
                Ok(got) => {
                    ensure!(got.range() == range, "took {:?} for {range:?}", got.range());
                    w.take_pieces(m, range)?;
                    w.segments.push(got);
                    w.stats.contig_taken += 1;
                }
                Err(ContigError::Invalid) => ensure!(range.is_empty(), "{range:?} is valid"),
                Err(ContigError::OutOfRange { pfn }) => {
                    let z = m.inspect().zone_of(range.start);
                    ensure!(
                        !z.is_some_and(|z| z.span().contains_range(&range)),
                        "{range:?} is inside a zone"
                    );
                    ensure!(
                        range.contains(pfn) || pfn == range.start,
                        "{pfn:?} named for {range:?}"
                    );
                }
                Err(ContigError::PartialPageblock { pfn }) => {
                    let z = m.inspect().zone_of(range.start).ok_or("no zone")?;
                    let whole = z.inspect(|mz| z.span().contains_range(&mz.pageblock_span(range)));
                    ensure!(!whole, "{range:?} is inside its zone's whole pageblocks");
                    ensure!(range.contains(pfn), "{pfn:?} named for {range:?}");
                }
                Err(ContigError::Blocked { pfn, .. })
                | Err(ContigError::Refused { pfn })
                | Err(ContigError::Busy { pfn }) => {
                    ensure!(range.contains(pfn), "blocker {pfn:?} outside {range:?}")
                }
                Err(_) => {}
            }
        }
        Op::FreeContig { index, raw } => match raw {
            Some((zone, offset, len)) => {
                let (_, _, (a, b), _) = ZONES[usize::from(zone) % ZONES.len()];
                let start = a + u64::from(offset) % (b - a + 64);
                let range = PfnRange::new(Pfn(start), Pfn(start + u64::from(len) % 2048));
                let plain = w.tiles(range)
                    && w.blocks
                        .range(range.start.get()..range.end.get())
                        .all(|(_, o)| o.block.is_some());
                if plain {
                    // Give the blocks up first: the segment is their one
                    // owner from now on.
                    let heads: Vec<u64> = w
                        .blocks
                        .range(range.start.get()..range.end.get())
                        .map(|(&h, _)| h)
                        .collect();
                    for h in heads {
                        if let Some(b) = w.blocks.remove(&h).and_then(|o| o.block) {
                            let _ = m.set_pinned(&b, false);
                            let _ = b.into_raw();
                        }
                    }
                }
                let pieces_owned = w
                    .blocks
                    .range(..range.end.get())
                    .next_back()
                    .is_some_and(|(&h, o)| h + o.order.pages() > range.start.get());
                if pieces_owned {
                    // Owned by a block or segment the model keeps: asking
                    // for it would make a second owner.
                    return Ok(());
                }
                // SAFETY: no block or segment of the model covers the range
                // (a tiling of plain blocks was given up just above).
                let r = unsafe { m.segment_from_raw(range) };
                ensure!(
                    r.is_ok() == plain,
                    "raw segment {range:?} (given up blocks tile it: {plain}) gave {:?}",
                    r.as_ref().map(Segment::range)
                );
                if let Ok(seg) = r {
                    m.free_segment(seg)
                        .map_err(|e| format!("free of a raw segment: {e}"))?;
                    w.stats.contig_freed += 1;
                }
            }
            None => {
                let n = w.segments.len() + w.cmas.len();
                if n == 0 {
                    return Ok(());
                }
                let i = index % n;
                let range = if i < w.segments.len() {
                    let seg = w.segments.swap_remove(i);
                    let range = seg.range();
                    m.free_segment(seg)
                        .map_err(|e| format!("free of a held segment: {e}"))?;
                    range
                } else {
                    let c = w.cmas.swap_remove(i - w.segments.len());
                    let range = c.range();
                    m.cma_release(c)
                        .map_err(|e| format!("release of a held CMA buffer: {e}"))?;
                    range
                };
                w.drop_pieces(range);
                w.stats.contig_freed += 1;
            }
        },
        Op::Cma { frames, refuse } => {
            w.refuse = refuse;
            let want = 1 + u64::from(frames) % 1024;
            let held_before = m.inspect().cma_stats(CmaId(0)).ok_or("no CMA area")?.held;
            let r = m.cma_alloc(CmaId(0), want, 1, w);
            settle(w)?;
            if let Ok(got) = r {
                ensure!(
                    CMA_AREA.contains_range(&got.range()) && got.range().len() == want,
                    "cma_alloc of {want} gave {:?}",
                    got.range()
                );
                ensure!(
                    m.inspect().cma_stats(CmaId(0)).ok_or("no CMA area")?.held
                        == held_before + want,
                    "the area's held count missed {want} frames"
                );
                w.take_pieces(m, got.range())?;
                w.cmas.push(got);
                w.stats.contig_taken += 1;
            }
            // Only movable memory, and ranges taken whole, are in the area.
            let ranges = w
                .cmas
                .iter()
                .map(CmaBuffer::range)
                .chain(w.segments.iter().map(Segment::range));
            let pieces: std::collections::BTreeSet<u64> = ranges
                .flat_map(|r| w.blocks.range(r.start.get()..r.end.get()).map(|(&h, _)| h))
                .collect();
            let z = m
                .inspect()
                .zone_of(CMA_AREA.start)
                .ok_or("CMA area in no zone")?;
            let bad = z.inspect(|mz| {
                mz.buddy().walk(CMA_AREA).find_map(|(p, info)| match info {
                    BlockInfo::Allocated { head, tag, .. }
                        if head == p
                            && tag & pageframe_mobility::tag::MT_MASK
                                != pageframe_mobility::MigrateType::Movable as u32
                            && !pieces.contains(&p.get()) =>
                    {
                        Some(p)
                    }
                    _ => None,
                })
            });
            ensure!(bad.is_none(), "non-movable block {bad:?} in the CMA area");
        }
        Op::Offline {
            zone,
            block,
            blocks,
            refuse,
        } => {
            let (_, _, (a, b), _) = ZONES[usize::from(zone) % ZONES.len()];
            let pb = 512;
            let first = a.next_multiple_of(pb);
            let n = (b - first) / pb;
            let start = first + u64::from(block) % n.max(1) * pb;
            let range = PfnRange::new(Pfn(start), Pfn(start + (1 + u64::from(blocks) % 4) * pb));
            w.refuse = refuse;
            let before = m.inspect().managed_pages();
            let was_offline = w
                .offline
                .iter()
                .find(|r| !r.intersect(&range).is_empty())
                .copied();
            let r = m.offline_range(range, w);
            settle(w)?;
            match r {
                Ok(_) => {
                    ensure!(was_offline.is_none(), "{range:?} went offline twice");
                    ensure!(
                        m.inspect().managed_pages() == before - range.len(),
                        "offline of {range:?}: managed {before} -> {}",
                        m.inspect().managed_pages()
                    );
                    ensure!(
                        w.blocks
                            .range(..range.end.get())
                            .next_back()
                            .is_none_or(|(&h, o)| h + o.order.pages() <= range.start.get()
                                || h >= range.end.get()),
                        "an owned block is inside offlined {range:?}"
                    );
                    w.offline.push(range);
                    w.stats.offlined += 1;
                }
                Err(e) => {
                    ensure!(
                        m.inspect().managed_pages() == before,
                        "a failed offline changed managed"
                    );
                    if let Some(off) = was_offline {
                        ensure!(
                            matches!(e, ContigError::NotOnline { pfn } if range.contains(pfn)),
                            "offline of {range:?} over offline {off:?}: {e:?}"
                        );
                    }
                }
            }
        }
        Op::Online { index } => {
            if w.offline.is_empty() {
                return Ok(());
            }
            let r = w.offline.swap_remove(index % w.offline.len());
            m.add_free_range(r)
                .map_err(|e| format!("online of offlined {r:?}: {e}"))?;
        }
        Op::Report { min, refuse, churn } => {
            let min = Order::new_truncated(min % 11);
            let mut bad = None;
            let (free_before, mut freed, mut offered) = (m.inspect().free_pages(), 0, 0);
            let mut batches = 0usize;
            m.report_free_pages(min, |batch: &[(Pfn, Order)]| {
                for &(p, o) in batch {
                    let end = p.get() + o.pages();
                    offered += o.pages();
                    if o < min || !p.is_aligned(o) {
                        bad = Some(format!("offered {p:?}/{o:?} below {min:?} or misaligned"));
                    }
                    if let Some((&h, x)) = w.blocks.range(..end).next_back()
                        && h + x.order.pages() > p.get()
                    {
                        bad = Some(format!("offered {p:?}/{o:?}, which overlaps owned {h:#x}"));
                    }
                }
                batches += 1;
                for i in 0..churn % 4 {
                    let node = i % 2;
                    let alloc = Op::Alloc {
                        node,
                        cpu: 2,
                        gfp: 0,
                        order: 0,
                    };
                    if let Err(e) = apply(m, &alloc, w) {
                        bad.get_or_insert(format!("in the callback: {e}"));
                    }
                }
                if churn >= 4
                    && let Some((_, o)) = w.nth_block(batches)
                {
                    let free = Op::Free {
                        index: batches,
                        cpu: 2,
                    };
                    match apply(m, &free, w) {
                        Ok(()) => freed += o.pages(),
                        Err(e) => {
                            bad.get_or_insert(format!("in the callback: {e}"));
                        }
                    }
                }
                if let Err(e) = m.validate() {
                    bad.get_or_insert(format!("in the callback: {e}"));
                }
                !refuse
            });
            if let Some(e) = bad {
                return Err(e);
            }
            // A pass ends: it offers no more than was free when it began,
            // whatever its callback freed meanwhile.
            ensure!(
                offered <= free_before,
                "a pass offered {offered} frames, {free_before} free when it began ({freed} freed since)"
            );
        }
        Op::Panic { node, at, contig } => {
            if !cfg!(panic = "unwind") {
                return Ok(());
            }
            w.refuse = false;
            w.panic_at = Some(u32::from(at % 8));
            let node = node_of(node % 2);
            let hold = std::panic::take_hook();
            std::panic::set_hook(Box::new(|_| {}));
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                if contig {
                    let z = m.inspect().node(node).and_then(|n| n.zones().next_back());
                    if let Some(z) = z {
                        let pb = 512;
                        let s = z.span().start.get().next_multiple_of(pb);
                        let range = PfnRange::new(Pfn(s), Pfn(s + pb));
                        if let Ok(seg) = m.alloc_contig_range(range, &mut *w) {
                            w.take_pieces(m, range).unwrap_or(());
                            w.segments.push(seg);
                        }
                    }
                } else {
                    m.compact_node(node, &mut *w);
                }
            }));
            std::panic::set_hook(hold);
            if r.is_err() {
                w.stats.panics += 1;
            }
            w.panic_at = None;
            // Every block handed over came back (`settle`), and `check`
            // finds the machine whole.
            settle(w)?;
        }
        // Needs the run's metadata buffer: `run` calls `hot_add`.
        Op::HotAdd { .. } => {}
        Op::Batching { on, refuse_every } => {
            w.batched = on;
            w.refuse_every = refuse_every;
        }
        Op::Tunable { which, value } => match which % 5 {
            0 => m.tunables().set_min_free_kbytes(u64::from(value) % 4096),
            1 => {
                let r = m.tunables().set_watermark_scale_factor(value);
                ensure!(
                    r.is_ok() == (1..=3000).contains(&value),
                    "scale factor {value}: {r:?}"
                );
            }
            2 => {
                let r = m.tunables().set_proactiveness(value);
                ensure!(r.is_ok() == (value <= 100), "proactiveness {value}: {r:?}");
            }
            3 => {
                let r = m.tunables().set_extfrag_threshold(value);
                ensure!(
                    r.is_ok() == (value <= 1000),
                    "extfrag threshold {value}: {r:?}"
                );
            }
            _ => {
                let p = Placement::ALL[value as usize % Placement::ALL.len()];
                m.tunables().set_fallback_placement(p);
                ensure!(
                    m.tunables().fallback_placement() == p
                        && m.inspect()
                            .all_zones()
                            .all(|z| z.inspect(|mz| mz.placement()) == p),
                    "placement {p:?} not in force everywhere"
                );
            }
        },
    }
    Ok(())
}

fn check(m: &Machine<'_>, w: &mut World, managed: u64) -> Result<(), String> {
    m.validate().map_err(|e| format!("{e}"))?;
    let mut cached = 0u64;
    for cpu in 0..2 {
        let mut c = m
            .cpu(CpuId(cpu), NodeId::ZERO)
            .map_err(|e| format!("{e}"))?;
        for &(node, kind, _, _) in &ZONES {
            let id = NodeId::new(node).ok_or("node")?;
            cached += c.cache_info(id, kind).map_or(0, |s| u64::from(s.count));
        }
    }
    let free = m.inspect().free_pages();
    ensure!(
        free + cached + w.pages() == managed,
        "{free} free (stripes' included) + {cached} cached + {} owned != {managed} managed",
        w.pages()
    );
    for (&h, o) in &w.blocks {
        let z = m
            .inspect()
            .zone_of(Pfn(h))
            .ok_or("owned block in no zone")?;
        let info = z.inspect(|mz| mz.buddy().block_at(Pfn(h)));
        ensure!(
            matches!(info, Some(BlockInfo::Allocated { head, order, .. }) if head == Pfn(h) && order == o.order),
            "owned {h:#x}/{:?} is {info:?} in the core",
            o.order
        );
        ensure!(
            o.block
                .as_ref()
                .is_none_or(|b| b.pfn() == Pfn(h) && b.order() == o.order),
            "block record of {h:#x} disagrees"
        );
    }
    settle(w)
}
