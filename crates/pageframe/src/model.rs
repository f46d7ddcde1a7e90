//! A reference model of a whole machine (two nodes, three zones with
//! holes, per-CPU caches for two CPUs, compaction with a content-moving
//! migrator) and an operation language over the public API, shared by the
//! property tests and the `machine_ops` fuzz target so both check the same
//! promises (host only, `std` feature):
//!
//! * no frame ever has two owners: every block handed out is disjoint from
//!   every block still owned, lies in one zone, is aligned to its order;
//! * no frame is lost: at every step, managed frames = free frames +
//!   frames in per-CPU caches + frames owned, and everything comes back at
//!   the end;
//! * bad input gets the expected typed error and changes nothing;
//! * compaction moves owners' blocks with their contents, and only them;
//! * `validate()` holds after every step.

use std::boxed::Box;
use std::collections::{BTreeMap, HashMap};
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

use core::mem::MaybeUninit;

use pageframe_buddy::{BlockInfo, FreeError, Order, Pfn, PfnRange};
use pageframe_compact::{MigrateError, MigrateMode, Migrator};
use pageframe_pcp::CpuId;

use crate::lock::SpinLock;
use crate::{
    AllocError, CmaId, ContigError, Gfp, Machine, MachineConfig, NodeId, NodePolicy, SlowPathHooks,
    ThpDefrag, ThpPolicy, Topology, Zone, ZoneKind,
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
    /// A bad free: `kind` picks double free, wrong order, tail, hole,
    /// misaligned, out of range or an arbitrary frame `raw`.
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
    /// Pin or unpin the `index`-th owned block (or, `raw`, any frame).
    Pin {
        /// Which block.
        index: usize,
        /// Pin or unpin.
        pinned: bool,
        /// Pin an arbitrary frame instead.
        raw: Option<u64>,
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
    /// Free the `index`-th range taken (`free_contig_range`), or, `raw`,
    /// an arbitrary range (zone, offset, len) as for `Contig`. Succeeds
    /// exactly when owned blocks tile the range.
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
    /// (as [`Machine::memmap_on_memory`] plans it). With `short`, first a
    /// try with too little metadata, which must change nothing. Once the
    /// zone is there, every further hot-add must fail.
    HotAdd {
        /// Pageblocks.
        blocks: u8,
        /// Try with too little metadata first.
        short: bool,
    },
    /// Set a tunable to an arbitrary value.
    Tunable {
        /// Which one.
        which: u8,
        /// The value.
        value: u32,
    },
}

/// A migrator whose contents are one token per owned block head, moved
/// with the block; records completed moves for the model.
#[derive(Default)]
struct Mover {
    token: HashMap<u64, u64>,
    refuse: bool,
    moves: Vec<(Pfn, Pfn, Order)>,
}

impl Migrator for Mover {
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        if self.refuse {
            return Err(MigrateError::Again);
        }
        let _ = order;
        if let Some(t) = self.token.remove(&src.get()) {
            self.token.insert(dst.get(), t);
        }
        Ok(())
    }

    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        self.moves.push((src, dst, order));
    }
}

impl SlowPathHooks for Mover {}

macro_rules! ensure {
    ($c:expr, $($t:tt)*) => { if !$c { return Err(format!($($t)*)); } };
}

/// The owners' view: live blocks by head, with their order and token.
struct Owners {
    blocks: BTreeMap<u64, (Order, u64)>,
    next_token: u64,
    /// Ranges taken by `Contig` (their blocks are in `blocks`).
    contigs: Vec<PfnRange>,
    /// Ranges taken offline.
    offline: Vec<PfnRange>,
    /// Heads of blocks `Contig` and `Cma` handed out and still owned (the
    /// only non-movable blocks allowed in the CMA area).
    contig_blocks: std::collections::BTreeSet<u64>,
    stats: RunStats,
    /// Managed frames, offline ranges included (grows by hot-adds).
    managed: u64,
}

/// What a run did (so that tests can check their scripts reach the paths
/// they mean to).
#[derive(Clone, Copy, Default, Debug)]
pub struct RunStats {
    /// Ranges `Contig` took.
    pub contig_taken: u32,
    /// Ranges `FreeContig` freed.
    pub contig_freed: u32,
    /// Blocks compaction or range evacuation moved.
    pub moved: u64,
    /// Ranges taken offline.
    pub offlined: u32,
    /// Frames onlined by a hot-add.
    pub hot_added: u64,
}

impl Owners {
    fn pages(&self) -> u64 {
        self.blocks.values().map(|(o, _)| o.pages()).sum()
    }

    /// Adds a block handed out; refuses one that overlaps an owned block.
    fn take(&mut self, pfn: Pfn, order: Order) -> Result<u64, String> {
        let (s, e) = (pfn.get(), pfn.get() + order.pages());
        ensure!(pfn.is_aligned(order), "{pfn:?} is not aligned to {order:?}");
        if let Some((&h, &(o, _))) = self.blocks.range(..e).next_back() {
            ensure!(
                h + o.pages() <= s,
                "{pfn:?}/{order:?} overlaps the owned block at {h:#x}/{o:?}"
            );
        }
        self.next_token += 1;
        self.blocks.insert(s, (order, self.next_token));
        Ok(self.next_token)
    }

    /// Whether owned blocks tile `range` exactly.
    fn tiles(&self, range: PfnRange) -> bool {
        let mut at = range.start.get();
        for (&h, &(o, _)) in self.blocks.range(range.start.get()..range.end.get()) {
            if h != at {
                return false;
            }
            at = h + o.pages();
        }
        at == range.end.get() && !range.is_empty()
    }

    fn nth(&self, index: usize) -> Option<(Pfn, Order)> {
        if self.blocks.is_empty() {
            return None;
        }
        let (&h, &(o, _)) = self.blocks.iter().nth(index % self.blocks.len())?;
        Some((Pfn(h), o))
    }
}

/// Runs `ops` on a fresh model machine and checks every promise after each
/// step. `Err` describes the first broken one.
pub fn run(ops: &[Op]) -> Result<RunStats, String> {
    let mut metas: Vec<Vec<MaybeUninit<u8>>> = Vec::new();
    let cfg = MachineConfig::new(Topology::uniform(2).map_err(|e| format!("{e}"))?);
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
    let m = Machine::new_in(&mut slot, cfg);
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
    let managed = m.managed_pages();
    let mut owners = Owners {
        blocks: BTreeMap::new(),
        next_token: 0,
        contigs: Vec::new(),
        offline: Vec::new(),
        contig_blocks: std::collections::BTreeSet::new(),
        stats: RunStats::default(),
        managed,
    };
    let mut mover = Mover::default();
    for (step, op) in ops.iter().enumerate() {
        let r = match *op {
            Op::HotAdd { blocks, short } => hot_add(m, blocks, short, &mut hot_meta, &mut owners),
            _ => apply(m, op, &mut owners, &mut mover),
        };
        r.map_err(|e| format!("step {step} {op:?}: {e}"))?;
        let offline: u64 = owners.offline.iter().map(|r| r.len()).sum();
        check(m, &owners, &mover, owners.managed - offline)
            .map_err(|e| format!("after step {step} {op:?}: {e}"))?;
    }
    // Everything comes back.
    for r in owners.offline.drain(..) {
        m.add_free_range(r)
            .map_err(|e| format!("onlining {r:?} at the end: {e}"))?;
    }
    let all: Vec<(Pfn, Order)> = owners
        .blocks
        .iter()
        .map(|(&h, &(o, _))| (Pfn(h), o))
        .collect();
    for (p, o) in all {
        let _ = m.set_pinned(p, false);
        m.free(p, o)
            .map_err(|e| format!("final free of {p:?}/{o:?}: {e}"))?;
    }
    m.drain_pcp(None, |_| {});
    m.drain_stripes();
    ensure!(
        m.free_pages() == owners.managed,
        "{} of {} frames free at the end",
        m.free_pages(),
        owners.managed
    );
    m.validate().map_err(|e| format!("{e}"))?;
    Ok(owners.stats)
}

/// [`Op::HotAdd`]: the metadata buffer can be lent once, so the first
/// successful hot-add takes it.
fn hot_add<'a>(
    m: &Machine<'a>,
    blocks: u8,
    short: bool,
    meta: &mut Option<&'a mut [MaybeUninit<u8>]>,
    owners: &mut Owners,
) -> Result<(), String> {
    let node = node_of(1);
    let span = PfnRange::new(
        HOTPLUG_RANGE.start,
        Pfn(HOTPLUG_RANGE.start.get() + (1 + u64::from(blocks) % 8) * 512),
    );
    let before = (m.managed_pages(), m.free_pages());
    let Some(buf) = meta.take() else {
        let r = m.hot_add_zone(node, ZoneKind::Movable, span, &mut []);
        ensure!(r.is_err(), "a second hot-add of one slot succeeded");
        ensure!(
            (m.managed_pages(), m.free_pages()) == before,
            "a refused hot-add changed the machine"
        );
        return Ok(());
    };
    let Some(plan) = m.memmap_on_memory(span) else {
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
                Err(crate::SetupError::Zone(
                    pageframe_buddy::InitError::MetadataTooSmall { .. }
                ))
            ),
            "too little metadata: {:?}",
            r.map(|z| z.span())
        );
        ensure!(
            m.zone_of(span.start).is_none(),
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
        m.managed_pages() == before.0 + plan.online.len(),
        "managed {} -> {} after onlining {:?}",
        before.0,
        m.managed_pages(),
        plan.online
    );
    owners.managed += plan.online.len();
    owners.stats.hot_added += plan.online.len();
    Ok(())
}

fn node_of(n: u8) -> NodeId {
    NodeId::new(usize::from(n)).unwrap_or(NodeId::ZERO)
}

/// Applies the moves compaction completed to the owners' view.
fn settle(owners: &mut Owners, mover: &mut Mover) -> Result<(), String> {
    for (src, dst, order) in mover.moves.drain(..) {
        let (o, t) = owners
            .blocks
            .remove(&src.get())
            .ok_or_else(|| format!("compaction moved {src:?}, which nobody owned"))?;
        ensure!(o == order, "moved {src:?} as {order:?}, owned as {o:?}");
        owners.stats.moved += 1;
        ensure!(
            mover.token.get(&dst.get()) == Some(&t),
            "the contents of {src:?} did not reach {dst:?}"
        );
        owners.blocks.insert(dst.get(), (o, t));
    }
    // Re-check disjointness after the moves.
    let mut end = 0;
    for (&h, &(o, _)) in &owners.blocks {
        ensure!(h >= end, "owned blocks overlap at {h:#x}");
        end = h + o.pages();
    }
    Ok(())
}

fn apply(m: &Machine<'_>, op: &Op, owners: &mut Owners, mover: &mut Mover) -> Result<(), String> {
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
                        a.zone <= g.highest_zone().unwrap_or(ZoneKind::Normal),
                        "{a:?} above the GFP's zones"
                    );
                    if g.contains(Gfp::THISNODE) {
                        ensure!(a.node == node_of(node), "THISNODE served by {:?}", a.node);
                    }
                    let z = m.zone_of(a.pfn).ok_or("allocation in no zone")?;
                    ensure!(
                        z.node() == a.node && z.kind() == a.zone,
                        "{a:?} reported the wrong zone"
                    );
                    ensure!(
                        z.span().contains(a.pfn + (o.pages() - 1)),
                        "{a:?} crosses its zone"
                    );
                    let t = owners.take(a.pfn, o)?;
                    mover.token.insert(a.pfn.get(), t);
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
            let Some((p, o)) = owners.nth(index) else {
                return Ok(());
            };
            let r = if cpu < 2 {
                let mut c = m
                    .cpu(CpuId(u32::from(cpu)), NodeId::ZERO)
                    .map_err(|e| format!("{e}"))?;
                c.free(p, o)
            } else {
                m.free(p, o)
            };
            r.map_err(|e| format!("free of owned {p:?}/{o:?}: {e}"))?;
            owners.blocks.remove(&p.get());
            owners.contig_blocks.remove(&p.get());
            mover.token.remove(&p.get());
        }
        Op::BadFree {
            kind,
            index,
            raw,
            cpu,
        } => {
            let free_before = m.free_pages();
            let target = owners.nth(index);
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
                // Anything at all: an error unless it names an owned block.
                (5, _) => {
                    let p = Pfn(raw % ((4 << 20) + 8192));
                    let o = Order::new_truncated((raw >> 60) as u8 % 11);
                    if owners.blocks.get(&p.get()).is_some_and(|&(oo, _)| oo == o) {
                        return Ok(());
                    }
                    (p, o, None)
                }
                // A double free: free an owned block, then free it again.
                (_, Some((p, o))) => {
                    m.free(p, o).map_err(|e| format!("{e}"))?;
                    owners.blocks.remove(&p.get());
                    mover.token.remove(&p.get());
                    let free_mid = m.free_pages();
                    let r = m.free(p, o);
                    ensure!(r.is_err(), "double free of {p:?} accepted");
                    ensure!(
                        m.free_pages() == free_mid,
                        "a refused free changed the free count"
                    );
                    return Ok(());
                }
                _ => return Ok(()),
            };
            let r = if cpu < 2 {
                let mut c = m
                    .cpu(CpuId(u32::from(cpu)), NodeId::ZERO)
                    .map_err(|e| format!("{e}"))?;
                c.free(p, o)
            } else {
                m.free(p, o)
            };
            match (r, want) {
                (Ok(()), _) => return Err(format!("bad free of {p:?}/{o:?} accepted")),
                (Err(e), Some(w)) => {
                    ensure!(e == w, "bad free of {p:?}/{o:?}: {e:?}, expected {w:?}")
                }
                (Err(_), None) => {}
            }
            ensure!(
                m.free_pages() == free_before,
                "a refused free changed the free count"
            );
        }
        Op::Slow {
            node,
            gfp,
            order,
            refuse,
        } => {
            mover.refuse = refuse;
            let g = GFPS[usize::from(gfp) % 9];
            let o = Order::new_truncated(order % 11);
            let r = m.alloc_slow(node_of(node % 2), g, o, mover);
            settle(owners, mover)?;
            if let Ok(a) = r {
                let t = owners.take(a.pfn, o)?;
                mover.token.insert(a.pfn.get(), t);
            }
        }
        Op::Thp {
            node,
            madvised,
            policy,
            refuse,
        } => {
            mover.refuse = refuse;
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
            m.set_thp_policy(p);
            let r = m.alloc_thp(node_of(node % 2), madvised, mover);
            settle(owners, mover)?;
            if let Ok(a) = r {
                if p.nodes == NodePolicy::ThisNode {
                    ensure!(
                        a.node == node_of(node % 2),
                        "ThisNode policy served remotely"
                    );
                }
                let t = owners.take(a.pfn, Order::HUGE_2M)?;
                mover.token.insert(a.pfn.get(), t);
            }
        }
        Op::Kcompactd { node, now } => {
            mover.refuse = false;
            m.kcompactd_tick(node_of(node % 2), u64::from(now) * 1_000_000, mover);
            settle(owners, mover)?;
        }
        Op::CompactNode { node } => {
            mover.refuse = false;
            m.compact_node(node_of(node % 2), mover);
            settle(owners, mover)?;
        }
        Op::Pin { index, pinned, raw } => match raw {
            Some(raw) => {
                let p = Pfn(raw);
                let owned = owners.blocks.contains_key(&raw);
                let r = m.set_pinned(p, pinned);
                ensure!(
                    r.is_ok() == owned,
                    "pinning {p:?} (owned: {owned}) gave {r:?}"
                );
            }
            None => {
                let Some((p, _)) = owners.nth(index) else {
                    return Ok(());
                };
                m.set_pinned(p, pinned)
                    .map_err(|e| format!("pinning owned {p:?}: {e}"))?;
            }
        },
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
            mover.refuse = refuse;
            let r = m.alloc_contig_range(range, mover);
            // Moves made before a failure are real: settle them first.
            settle(owners, mover)?;
            match r {
                Ok(got) => {
                    ensure!(got.range == range, "took {:?} for {range:?}", got.range);
                    let z = m.zone_of(range.start).ok_or("taken range in no zone")?;
                    let blocks: Vec<(Pfn, Order)> = z.inspect(|mz| {
                        mz.buddy()
                            .walk(range)
                            .filter_map(|(p, info)| match info {
                                BlockInfo::Allocated { head, order, .. } if head == p => {
                                    Some((p, order))
                                }
                                _ => None,
                            })
                            .collect()
                    });
                    for (p, o) in blocks {
                        let t = owners.take(p, o)?;
                        mover.token.insert(p.get(), t);
                        owners.contig_blocks.insert(p.get());
                    }
                    ensure!(owners.tiles(range), "{range:?} not tiled by its blocks");
                    owners.contigs.push(range);
                    owners.stats.contig_taken += 1;
                }
                Err(ContigError::Invalid) => ensure!(range.is_empty(), "{range:?} is valid"),
                Err(ContigError::OutOfRange) => {
                    let z = m.zone_of(range.start);
                    let inside = z.is_some_and(|z| {
                        z.span().contains_range(&range)
                            && z.inspect(|mz| z.span().contains_range(&mz.pageblock_span(range)))
                    });
                    ensure!(!inside, "{range:?} is inside a zone's whole pageblocks");
                }
                Err(ContigError::Blocked { pfn, .. })
                | Err(ContigError::Refused { pfn })
                | Err(ContigError::Busy { pfn }) => {
                    ensure!(range.contains(pfn), "blocker {pfn:?} outside {range:?}")
                }
                Err(_) => {}
            }
        }
        Op::FreeContig { index, raw } => {
            let range = match raw {
                Some((zone, offset, len)) => {
                    let (_, _, (a, b), _) = ZONES[usize::from(zone) % ZONES.len()];
                    let start = a + u64::from(offset) % (b - a + 64);
                    PfnRange::new(Pfn(start), Pfn(start + u64::from(len) % 2048))
                }
                None if owners.contigs.is_empty() => return Ok(()),
                None => owners.contigs.swap_remove(index % owners.contigs.len()),
            };
            let tiled = owners.tiles(range);
            let r = if CMA_AREA.contains_range(&range) {
                m.cma_release(CmaId(0), range)
            } else {
                m.free_contig_range(range)
            };
            ensure!(
                r.is_ok() == tiled,
                "free of {range:?} (owned blocks tile it: {tiled}) gave {r:?}"
            );
            if r.is_ok() {
                owners.stats.contig_freed += 1;
                let heads: Vec<u64> = owners
                    .blocks
                    .range(range.start.get()..range.end.get())
                    .map(|(&h, _)| h)
                    .collect();
                for h in heads {
                    owners.blocks.remove(&h);
                    owners.contig_blocks.remove(&h);
                    mover.token.remove(&h);
                }
            }
        }
        Op::Cma { frames, refuse } => {
            mover.refuse = refuse;
            let want = 1 + u64::from(frames) % 1024;
            let r = m.cma_alloc(CmaId(0), want, 1, mover);
            settle(owners, mover)?;
            if let Ok(got) = r {
                ensure!(
                    CMA_AREA.contains_range(&got.range) && got.range.len() == want,
                    "cma_alloc of {want} gave {:?}",
                    got.range
                );
                let z = m.zone_of(got.range.start).ok_or("CMA range in no zone")?;
                let blocks: Vec<(Pfn, Order)> = z.inspect(|mz| {
                    mz.buddy()
                        .walk(got.range)
                        .filter_map(|(p, info)| match info {
                            BlockInfo::Allocated { head, order, .. } if head == p => {
                                Some((p, order))
                            }
                            _ => None,
                        })
                        .collect()
                });
                for (p, o) in blocks {
                    let t = owners.take(p, o)?;
                    mover.token.insert(p.get(), t);
                    owners.contig_blocks.insert(p.get());
                }
                owners.contigs.push(got.range);
                owners.stats.contig_taken += 1;
            }
            // Only movable memory, and ranges taken whole, are in the area.
            let z = m.zone_of(CMA_AREA.start).ok_or("CMA area in no zone")?;
            let bad = z.inspect(|mz| {
                mz.buddy().walk(CMA_AREA).find_map(|(p, info)| match info {
                    BlockInfo::Allocated { head, tag, .. }
                        if head == p
                            && tag & pageframe_mobility::tag::MT_MASK
                                != pageframe_mobility::MigrateType::Movable as u32
                            && !owners.contig_blocks.contains(&p.get()) =>
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
            mover.refuse = refuse;
            let before = m.managed_pages();
            let r = m.offline_range(range, mover);
            settle(owners, mover)?;
            match r {
                Ok(_) => {
                    ensure!(
                        m.managed_pages() == before - range.len(),
                        "offline of {range:?}: managed {before} -> {}",
                        m.managed_pages()
                    );
                    ensure!(
                        owners
                            .blocks
                            .range(..range.end.get())
                            .next_back()
                            .is_none_or(|(&h, &(o, _))| h + o.pages() <= range.start.get()
                                || h >= range.end.get()),
                        "an owned block is inside offlined {range:?}"
                    );
                    owners.offline.push(range);
                    owners.stats.offlined += 1;
                }
                Err(_) => ensure!(
                    m.managed_pages() == before,
                    "a failed offline changed managed"
                ),
            }
        }
        Op::Online { index } => {
            if owners.offline.is_empty() {
                return Ok(());
            }
            let r = owners.offline.swap_remove(index % owners.offline.len());
            m.add_free_range(r)
                .map_err(|e| format!("online of offlined {r:?}: {e}"))?;
        }
        Op::Report { min, refuse, churn } => {
            let min = Order::new_truncated(min % 11);
            let mut bad = None;
            let (free_before, mut freed, mut offered) = (m.free_pages(), 0, 0);
            let mut batches = 0usize;
            m.report_free_pages(min, |batch: &[(Pfn, Order)]| {
                for &(p, o) in batch {
                    let end = p.get() + o.pages();
                    offered += o.pages();
                    if o < min || !p.is_aligned(o) {
                        bad = Some(format!("offered {p:?}/{o:?} below {min:?} or misaligned"));
                    }
                    if let Some((&h, &(ho, _))) = owners.blocks.range(..end).next_back()
                        && h + ho.pages() > p.get()
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
                    if let Err(e) = apply(m, &alloc, owners, mover) {
                        bad.get_or_insert(format!("in the callback: {e}"));
                    }
                }
                if churn >= 4
                    && let Some((_, o)) = owners.nth(batches)
                {
                    let free = Op::Free {
                        index: batches,
                        cpu: 2,
                    };
                    match apply(m, &free, owners, mover) {
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
        // Needs the run's metadata buffer: `run` calls `hot_add`.
        Op::HotAdd { .. } => {}
        Op::Tunable { which, value } => match which % 4 {
            0 => m.set_min_free_kbytes(u64::from(value) % 4096),
            1 => {
                let r = m.set_watermark_scale_factor(value);
                ensure!(
                    r.is_ok() == (1..=3000).contains(&value),
                    "scale factor {value}: {r:?}"
                );
            }
            2 => {
                let r = m.set_proactiveness(value);
                ensure!(r.is_ok() == (value <= 100), "proactiveness {value}: {r:?}");
            }
            _ => {
                let r = m.set_extfrag_threshold(value);
                ensure!(
                    r.is_ok() == (value <= 1000),
                    "extfrag threshold {value}: {r:?}"
                );
            }
        },
    }
    Ok(())
}

fn check(m: &Machine<'_>, owners: &Owners, mover: &Mover, managed: u64) -> Result<(), String> {
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
    let free = m.free_pages();
    ensure!(
        free + cached + owners.pages() == managed,
        "{free} free (stripes' included) + {cached} cached + {} owned != {managed} managed",
        owners.pages()
    );
    for (&h, &(o, _)) in &owners.blocks {
        let z = m.zone_of(Pfn(h)).ok_or("owned block in no zone")?;
        let info = z.inspect(|mz| mz.buddy().block_at(Pfn(h)));
        ensure!(
            matches!(info, Some(BlockInfo::Allocated { head, order, .. }) if head == Pfn(h) && order == o),
            "owned {h:#x}/{o:?} is {info:?} in the core"
        );
    }
    ensure!(mover.moves.is_empty(), "moves not settled");
    Ok(())
}
