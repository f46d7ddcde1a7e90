//! A reference model for compaction, shared by the property tests and the
//! fuzz target (host only, `std` feature).
//!
//! [`TagMigrator`] plays the kernel: every live block has an owner and one
//! content word per frame; a migration copies the words and moves the
//! owner, and may be refused at random. [`World`] drives a zone through an
//! operation language ([`Op`]) and checks after every step that no frame
//! was lost, every owner finds its data, the books are clean (nothing left
//! isolated) and, for each compaction run, that the scanners never crossed,
//! every move went up across pageblocks and honoured skip hints were
//! respected.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::format;
use std::string::String;
use std::vec::Vec;

use pageframe_buddy::{BlockInfo, Order, Pfn, PfnRange};
use pageframe_mobility::{AllocMode, MigrateType, MobileZone, Watermarks, tag as mtag};

use pageframe_compact::{
    CompactResult, CompactState, FrameMover, Kcompactd, KcompactdWake, MIGRATE_BATCH_MAX,
    MigrateError, MigrateMode, Move as Moving, NodeZone, Priority, ZoneMarks, compact_memory, tag,
    try_to_compact_pages,
};

/// The word a frame holds after its block moved away or was freed.
pub const POISON: u64 = 0xdead_beef_dead_beef;

/// A live block as its owner sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Owned {
    /// Its order.
    pub order: u8,
    /// The owner's identity (the content words derive from it).
    pub id: u64,
    /// The type it was allocated as.
    pub mt: MigrateType,
}

/// One completed migration.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Move {
    /// Source head.
    pub src: u64,
    /// Destination head.
    pub dst: u64,
    /// Order.
    pub order: u8,
}

/// A kernel stand-in: owners, one content word per frame, a migration that
/// copies the words, and refusals at chosen rates. Protocol violations by
/// the compactor are collected in `errors`.
pub struct TagMigrator {
    base: u64,
    /// One content word per frame of the span.
    pub mem: Vec<u64>,
    /// Live blocks by head frame.
    pub owners: BTreeMap<u64, Owned>,
    isolated: BTreeSet<u64>,
    in_flight: BTreeMap<u64, u64>,
    next_id: u64,
    rng: u64,
    /// Percent of `isolate` calls refused.
    pub refuse_isolate: u8,
    /// Percent of `migrate` calls refused (as `Again`, `Busy` or `Pinned`).
    pub refuse_migrate: u8,
    /// Migrations done in the current run.
    pub moves: Vec<Move>,
    /// Checkpoints seen in the current run: (migrate pfn, free pfn).
    pub checkpoints: Vec<(u64, u64)>,
    /// Abort the run at this checkpoint index.
    pub abort_at: Option<usize>,
    /// Protocol violations seen.
    pub errors: Vec<String>,
    /// `drain_caches` calls.
    pub drains: u64,
    /// `isolate` calls.
    pub isolations: u64,
    /// Moves whole batches itself (every source checked and "unmapped",
    /// then each copied and reported), instead of the default `migrate`
    /// per move.
    pub batched: bool,
    /// Panics in the next batch it moves itself once it has made this many
    /// of its moves (the panic is the model's, caught by [`World::step`]).
    pub panic_in_batch: Option<usize>,
    /// Frames of each batch handed over in the current run.
    pub batches: Vec<u64>,
}

impl TagMigrator {
    /// A migrator for the frames of `span`, refusals driven by `seed`.
    pub fn new(span: PfnRange, seed: u64) -> Self {
        TagMigrator {
            base: span.start.get(),
            mem: std::vec![POISON; span.len() as usize],
            owners: BTreeMap::new(),
            isolated: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            next_id: 1,
            rng: seed | 1,
            refuse_isolate: 0,
            refuse_migrate: 0,
            moves: Vec::new(),
            checkpoints: Vec::new(),
            abort_at: None,
            errors: Vec::new(),
            drains: 0,
            isolations: 0,
            batched: false,
            panic_in_batch: None,
            batches: Vec::new(),
        }
    }

    /// A pseudo-random number (xorshift64).
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    fn roll(&mut self, percent: u8) -> bool {
        percent > 0 && self.next_u64() % 100 < u64::from(percent)
    }

    fn idx(&self, pfn: u64) -> usize {
        (pfn - self.base) as usize
    }

    fn word(id: u64, i: u64) -> u64 {
        (id << 16) | i
    }

    /// Records a newly allocated block and writes its owner's words.
    pub fn adopt(&mut self, head: u64, order: u8, mt: MigrateType) {
        let id = self.next_id;
        self.next_id += 1;
        for i in 0..1u64 << order {
            let k = self.idx(head + i);
            self.mem[k] = Self::word(id, i);
        }
        self.owners.insert(head, Owned { order, id, mt });
    }

    /// Forgets a block being freed, poisoning its words.
    pub fn release(&mut self, head: u64) -> Option<Owned> {
        let o = self.owners.remove(&head)?;
        for i in 0..1u64 << o.order {
            let k = self.idx(head + i);
            self.mem[k] = POISON;
        }
        Some(o)
    }

    /// Whether `[p, p + 2^order)` overlaps a live block.
    fn overlaps_owner(&self, p: u64, order: u8) -> bool {
        let end = p + (1 << order);
        self.owners
            .range(..end)
            .next_back()
            .is_some_and(|(&q, o)| q + (1 << o.order) > p)
    }

    /// Every owner finds its words.
    pub fn check_contents(&self) -> Result<(), String> {
        for (&h, o) in &self.owners {
            for i in 0..1u64 << o.order {
                let w = self.mem[self.idx(h + i)];
                if w != Self::word(o.id, i) {
                    return Err(format!(
                        "owner {} lost its data at frame {:#x}: {w:#x}",
                        o.id,
                        h + i
                    ));
                }
            }
        }
        Ok(())
    }
}

impl FrameMover for TagMigrator {
    fn isolate(&mut self, pfn: Pfn, order: Order, _tag: u32) -> bool {
        let p = pfn.get();
        self.isolations += 1;
        match self.owners.get(&p) {
            Some(o) if o.order == order.get() && o.mt == MigrateType::Movable => {}
            other => {
                self.errors
                    .push(format!("isolate of {p:#x}/{order:?}: owner {other:?}"));
                return false;
            }
        }
        if !self.isolated.insert(p) {
            self.errors.push(format!("{p:#x} isolated twice"));
        }
        if self.roll(self.refuse_isolate) {
            self.isolated.remove(&p);
            return false;
        }
        true
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        let (s, d, k) = (src.get(), dst.get(), order.get());
        if !self.isolated.contains(&s) {
            self.errors.push(format!("migrate of non-isolated {s:#x}"));
            return Err(MigrateError::Busy);
        }
        if !dst.is_aligned(order) || self.overlaps_owner(d, k) {
            self.errors
                .push(format!("destination {d:#x}/{k} misaligned or owned"));
            return Err(MigrateError::Busy);
        }
        if let Some(e) = self.refusal() {
            return Err(e);
        }
        self.copy(src, dst, order)
    }

    fn migrate_batch(&mut self, moves: &mut [Moving], mode: MigrateMode) {
        let frames: u64 = moves.iter().map(|m| m.order().pages()).sum();
        self.batches.push(frames);
        if frames > MIGRATE_BATCH_MAX && moves.len() > 1 {
            self.errors.push(format!(
                "a batch of {frames} frames, over {MIGRATE_BATCH_MAX}"
            ));
        }
        if !self.batched {
            for m in moves {
                m.set(self.migrate(m.src(), m.dst(), m.order(), mode));
            }
            return;
        }
        // Unmap: every source isolated, every destination free, none twice;
        // refusals are decided here, before anything changes.
        for (i, m) in moves.iter().enumerate() {
            let (s, d, k) = (m.src().get(), m.dst().get(), m.order().get());
            let twice = moves[..i].iter().any(|o| {
                o.src() == m.src()
                    || (o.dst().get() < d + (1 << k) && d < o.dst().get() + o.order().pages())
            });
            if twice
                || !self.isolated.contains(&s)
                || !m.dst().is_aligned(m.order())
                || self.overlaps_owner(d, k)
            {
                self.errors.push(format!(
                    "batch move {m:?} repeats a frame or is not movable"
                ));
            }
        }
        for m in moves.iter_mut() {
            if let Some(e) = self.refusal() {
                m.set(Err(e));
            }
        }
        // Copy and remap each, reporting as it goes.
        for (made, m) in moves
            .iter_mut()
            .filter(|m| m.outcome().is_none())
            .enumerate()
        {
            if self.panic_in_batch == Some(made) {
                self.panic_in_batch = None;
                panic!("the model's migrator panics in the middle of a batch");
            }
            m.set(self.copy(m.src(), m.dst(), m.order()));
        }
    }

    fn putback(&mut self, src: Pfn, _order: Order) {
        if !self.isolated.remove(&src.get()) {
            self.errors
                .push(format!("putback of non-isolated {:#x}", src.get()));
        }
    }

    fn migrated(&mut self, src: Pfn, dst: Pfn, _order: Order) {
        if self.in_flight.remove(&dst.get()) != Some(src.get()) || !self.isolated.remove(&src.get())
        {
            self.errors.push(format!(
                "migrated({:#x} -> {:#x}) without a matching move",
                src.get(),
                dst.get()
            ));
        }
    }

    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        self.checkpoints.push((migrate_pfn.get(), free_pfn.get()));
        self.abort_at == Some(self.checkpoints.len() - 1)
    }

    fn drain_caches(&mut self) {
        self.drains += 1;
    }
}

impl TagMigrator {
    /// A refusal at the chosen rate (`Again`, `Busy` or `Pinned`), or none.
    fn refusal(&mut self) -> Option<MigrateError> {
        self.roll(self.refuse_migrate)
            .then(|| match self.next_u64() % 3 {
                0 => MigrateError::Again,
                1 => MigrateError::Busy,
                _ => MigrateError::Pinned,
            })
    }

    /// Copies the words of the block at `src` to `dst` and moves its owner.
    fn copy(&mut self, src: Pfn, dst: Pfn, order: Order) -> Result<(), MigrateError> {
        let (s, d, k) = (src.get(), dst.get(), order.get());
        let Some(o) = self.owners.remove(&s) else {
            self.errors.push(format!("migrate of unowned {s:#x}"));
            return Err(MigrateError::Busy);
        };
        for i in 0..1u64 << k {
            let (a, b) = (self.idx(s + i), self.idx(d + i));
            self.mem[b] = self.mem[a];
            self.mem[a] = POISON;
        }
        self.owners.insert(d, o);
        self.in_flight.insert(d, s);
        self.moves.push(Move {
            src: s,
            dst: d,
            order: k,
        });
        Ok(())
    }
}

/// One operation of the model.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Allocate a block of this order (mod the zone's maximum + 1) as type
    /// value (mod 3; 1 = movable) — movable twice as often.
    Alloc(u8, u8),
    /// Free the n-th live block.
    Free(usize),
    /// Pin or unpin the n-th live block.
    Pin(usize, bool),
    /// Set or clear the n-th pageblock's skip hint.
    Skip(usize, bool),
    /// Direct compaction for an order, priority (mod 3) and type (mod 3),
    /// then an allocation attempt.
    Direct(u8, u8, u8),
    /// `compact_memory`.
    Full,
    /// A kcompactd tick after this many milliseconds, at this proactiveness
    /// (mod 101).
    Tick(u16, u8),
    /// Wake kcompactd for an order.
    Wake(u8),
    /// Set the refusal rates (percent, mod 101) for isolation and migration.
    Refuse(u8, u8),
    /// Abort the next run at its n-th checkpoint.
    Abort(u8),
    /// The migrator moves whole batches itself (`true`) or takes the
    /// default, `migrate` per move (`false`).
    Batched(bool),
    /// A whole-zone compaction whose migrator, moving batches itself,
    /// panics in its first batch after making this many of its moves (mod
    /// 64); the panic is caught and the zone must be whole. A no-op where
    /// panics abort.
    PanicInBatch(u8),
}

/// A zone with its compaction state, a kcompactd and the kernel stand-in.
pub struct World<'a> {
    /// The zone.
    pub zone: RefCell<MobileZone<'a>>,
    /// Its compaction state.
    pub state: CompactState,
    /// The node's daemon.
    pub kcd: Kcompactd,
    /// Its pending wake-up.
    pub wake: KcompactdWake,
    /// The kernel side.
    pub mig: TagMigrator,
    /// Watermarks used for every request.
    pub marks: ZoneMarks,
    /// The clock, in nanoseconds.
    pub now: u64,
    /// Results of the compaction runs so far, by kind of operation.
    pub results: BTreeMap<&'static str, BTreeMap<CompactResult, u64>>,
    /// Blocks captured by direct compaction.
    pub captured: u64,
}

impl<'a> World<'a> {
    /// A world over `zone` (whose free memory may already be handed over);
    /// watermarks scale with the zone.
    pub fn new(zone: MobileZone<'a>, seed: u64) -> Self {
        let managed = zone.buddy().managed_pages();
        let min = (managed / 64).max(4);
        let marks = ZoneMarks {
            wmark: Watermarks::with_gap(min, min / 4),
            reserve: 0,
        };
        let mig = TagMigrator::new(zone.span(), seed);
        World {
            zone: RefCell::new(zone),
            state: CompactState::new(),
            kcd: Kcompactd::new(),
            wake: KcompactdWake::new(),
            mig,
            marks,
            now: 0,
            results: BTreeMap::new(),
            captured: 0,
        }
    }

    fn note(&mut self, kind: &'static str, r: CompactResult) {
        *self.results.entry(kind).or_default().entry(r).or_default() += 1;
    }

    /// Allocates `order` as `mt`, recording the owner. `None` if out of memory.
    pub fn alloc(&mut self, order: Order, mt: MigrateType) -> Option<Pfn> {
        let p = self
            .zone
            .borrow_mut()
            .alloc(order, mt, AllocMode::empty())
            .ok()?;
        let mt = self.zone.borrow().allocated_type(p).unwrap_or(mt);
        self.mig.adopt(p.get(), order.get(), mt);
        Some(p)
    }

    /// Fills the zone with blocks of orders up to `max_order` (one in
    /// `unmovable_in` unmovable, one in `pin_in` of the rest pinned), then
    /// frees each with probability `free_pct`: a random fragmented state.
    pub fn fragment(&mut self, max_order: u8, unmovable_in: u64, pin_in: u64, free_pct: u64) {
        loop {
            let r = self.mig.next_u64();
            let order = Order::new((r % u64::from(max_order + 1)) as u8).unwrap_or_default();
            let mt = if unmovable_in > 0 && (r >> 8).is_multiple_of(unmovable_in) {
                MigrateType::Unmovable
            } else {
                MigrateType::Movable
            };
            let Some(p) = self.alloc(order, mt) else {
                if order == Order::ZERO {
                    break;
                }
                continue;
            };
            if mt == MigrateType::Movable && pin_in > 0 && (r >> 20).is_multiple_of(pin_in) {
                self.zone.borrow_mut().set_pinned(p, true);
            }
        }
        let heads: Vec<(u64, u8)> = self.mig.owners.iter().map(|(&h, o)| (h, o.order)).collect();
        for (h, k) in heads {
            if self.mig.next_u64() % 100 < free_pct {
                self.free_block(h, k);
            }
        }
    }

    fn free_block(&mut self, h: u64, k: u8) {
        let mut z = self.zone.borrow_mut();
        z.set_pinned(Pfn(h), false);
        if z.free(Pfn(h), Order::new(k).unwrap_or_default()).is_ok() {
            self.mig.release(h);
        }
    }

    fn nth_live(&self, n: usize) -> Option<(u64, u8)> {
        let len = self.mig.owners.len();
        (len > 0).then(|| {
            let (&h, o) = self.mig.owners.iter().nth(n % len).unwrap_or((
                &0,
                &Owned {
                    order: 0,
                    id: 0,
                    mt: MigrateType::Movable,
                },
            ));
            (h, o.order)
        })
    }

    fn skip_map(&self) -> Vec<bool> {
        let z = self.zone.borrow();
        let b = z.mobility().pageblocks();
        (0..b.len()).map(|i| b.skip(b.block_start(i))).collect()
    }

    /// Applies `op`, then checks every invariant.
    pub fn step(&mut self, op: &Op) -> Result<(), String> {
        self.mig.moves.clear();
        self.mig.checkpoints.clear();
        self.mig.batches.clear();
        let max = self.zone.borrow().buddy().max_order().get();
        let order_of = |k: u8| Order::new(k % (max + 1)).unwrap_or_default();
        let mt_of = |t: u8| {
            [
                MigrateType::Unmovable,
                MigrateType::Movable,
                MigrateType::Reclaimable,
            ][(t % 3) as usize]
        };
        let mut honoured_skip: Option<Vec<bool>> = None;
        match *op {
            Op::Alloc(k, t) => {
                let mt = if t % 4 >= 2 {
                    MigrateType::Movable
                } else {
                    mt_of(t)
                };
                self.alloc(order_of(k), mt);
            }
            Op::Free(n) => {
                if let Some((h, k)) = self.nth_live(n) {
                    self.free_block(h, k);
                }
            }
            Op::Pin(n, on) => {
                if let Some((h, _)) = self.nth_live(n) {
                    self.zone.borrow_mut().set_pinned(Pfn(h), on);
                }
            }
            Op::Skip(n, on) => {
                let mut z = self.zone.borrow_mut();
                let len = z.mobility().pageblocks().len().max(1);
                let b = z.mobility().pageblocks().block_start(n % len);
                z.pageblocks_mut().set_skip(b, on);
            }
            Op::Direct(k, p, t) => {
                let order = Order::new(1 + k % max.max(1))
                    .unwrap_or(Order::HUGE_2M)
                    .min(Order::new(max).unwrap_or_default());
                let prio =
                    [Priority::SyncFull, Priority::SyncLight, Priority::Async][(p % 3) as usize];
                let mt = mt_of(t);
                // Hints a finished pass asked to clear are cleared before
                // the run: only hints that survive are checked.
                if prio != Priority::SyncFull
                    && self.state.deferral().state().shift
                        < pageframe_compact::COMPACT_MAX_DEFER_SHIFT
                    && !self.state.blockskip_flush()
                {
                    honoured_skip = Some(self.skip_map());
                }
                let node = [NodeZone::new(&self.zone, &self.state, self.marks)];
                let out = try_to_compact_pages(&node, order, mt, prio, &mut self.mig);
                let mut got = None;
                if let Some((_, c)) = out.captured {
                    let z = self.zone.borrow();
                    let ok = matches!(z.buddy().block_at(c), Some(BlockInfo::Allocated { head, order: o, .. }) if head == c && o == order);
                    let want = if z.mobility().grouping() {
                        mt
                    } else {
                        MigrateType::Unmovable
                    };
                    if !ok || z.allocated_type(c) != Some(want) {
                        return Err(format!(
                            "captured block {c:?} is not an allocated {order:?} {mt:?}"
                        ));
                    }
                    if self.mig.overlaps_owner(c.get(), order.get()) {
                        return Err(format!("captured block {c:?} overlaps an owner"));
                    }
                    drop(z);
                    self.mig.adopt(c.get(), order.get(), want);
                    self.captured += 1;
                    got = Some(0);
                } else if out.result == CompactResult::Success {
                    // spec 03 §14.4: after a success a suitable block exists.
                    match self.alloc(order, mt) {
                        Some(_) => got = Some(0),
                        None => {
                            return Err(format!(
                                "Success for {order:?} {mt:?} but the allocation failed"
                            ));
                        }
                    }
                }
                out.finish(&[NodeZone::new(&self.zone, &self.state, self.marks)], got);
                self.note("direct", out.result);
            }
            Op::Full => {
                let node = [NodeZone::new(&self.zone, &self.state, self.marks)];
                let out = compact_memory(&node, &mut self.mig);
                self.note("full", out.result);
            }
            Op::Tick(ms, p) => {
                let p = u32::from(p % 101);
                if u32::from(self.kcd.proactiveness()) != p {
                    self.kcd.set_proactiveness(p).map_err(|e| format!("{e}"))?;
                }
                self.now += u64::from(ms) * 1_000_000;
                let node = [NodeZone::new(&self.zone, &self.state, self.marks)];
                let rep = self.kcd.tick(self.now, &node, &self.wake, &mut self.mig);
                if p == 0 && rep.checked {
                    return Err("proactive check with proactiveness 0".into());
                }
                if let Some((before, _)) = rep.proactive
                    && before <= self.kcd.thresholds().high
                {
                    return Err(format!("proactive run at score {before} <= high"));
                }
            }
            Op::Wake(k) => {
                let node = [NodeZone::new(&self.zone, &self.state, self.marks)];
                self.wake.wakeup(
                    &node,
                    order_of(k),
                    0,
                    pageframe_compact::DEFAULT_EXTFRAG_THRESHOLD,
                );
            }
            Op::Refuse(i, m) => {
                self.mig.refuse_isolate = i % 101;
                self.mig.refuse_migrate = m % 101;
            }
            Op::Abort(n) => self.mig.abort_at = Some(usize::from(n)),
            Op::Batched(on) => self.mig.batched = on,
            Op::PanicInBatch(_) if !cfg!(panic = "unwind") => {}
            Op::PanicInBatch(n) => {
                let batched = core::mem::replace(&mut self.mig.batched, true);
                self.mig.panic_in_batch = Some(usize::from(n % 64));
                let node = [NodeZone::new(&self.zone, &self.state, self.marks)];
                let mig = &mut self.mig;
                let hook = std::panic::take_hook();
                std::panic::set_hook(std::boxed::Box::new(|_| {}));
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    compact_memory(&node, &mut *mig)
                }));
                std::panic::set_hook(hook);
                self.mig.batched = batched;
                let panicked = self.mig.panic_in_batch.take().is_none();
                match r {
                    Ok(out) if !panicked => self.note("full", out.result),
                    Ok(_) => return Err("the migrator panicked, the run returned".into()),
                    Err(_) if panicked => self.note("panicked", CompactResult::Contended),
                    Err(_) => return Err("a panic the model did not raise".into()),
                }
            }
        }
        if !self.mig.checkpoints.is_empty() || !self.mig.moves.is_empty() {
            self.mig.abort_at = None;
        }
        self.check_run(honoured_skip.as_deref())?;
        self.check()
    }

    /// Checks of the last run: cursors monotone and never crossed, moves
    /// upward across pageblocks, pre-set skip hints respected when honoured.
    fn check_run(&self, honoured_skip: Option<&[bool]>) -> Result<(), String> {
        let z = self.zone.borrow();
        let pb = z.pageblock_order().get();
        let blocks = z.mobility().pageblocks();
        let index = |p: u64| (p - blocks.block_start(0).get()) >> pb;
        let mut last: Option<(u64, u64)> = None;
        for &(m, f) in &self.mig.checkpoints {
            // The free scanner stays above the pageblock of the last frame
            // the migrate scanner scanned: its cursor's, or the one below
            // when the cursor sits at the start of a block it has not
            // scanned yet.
            if (m.max(1) - 1) >> pb >= f >> pb {
                return Err(format!(
                    "scanners crossed at a checkpoint: migrate {m:#x}, free {f:#x}"
                ));
            }
            if let Some((lm, lf)) = last
                && (m < lm || f >> pb > lf >> pb)
            {
                return Err(format!(
                    "cursor went backwards: ({lm:#x}, {lf:#x}) -> ({m:#x}, {f:#x})"
                ));
            }
            last = Some((m, f));
        }
        let start = z.span().start.get();
        for mv in &self.mig.moves {
            if mv.src >> pb >= mv.dst >> pb {
                return Err(format!("move {mv:?} does not go up across pageblocks"));
            }
            if let Some(skip) = honoured_skip {
                let partial_first = start & ((1 << pb) - 1) != 0 && mv.src >> pb == start >> pb;
                if (skip[index(mv.src) as usize] && !partial_first) || skip[index(mv.dst) as usize]
                {
                    return Err(format!("move {mv:?} touched a skip-marked pageblock"));
                }
            }
        }
        Ok(())
    }

    /// The invariants after every step: the zone validates, allocated
    /// blocks are exactly the owners' (nothing lost, nothing left isolated),
    /// frames are conserved, every owner finds its data, and the migrator
    /// saw no protocol violation.
    pub fn check(&self) -> Result<(), String> {
        if let Some(e) = self.mig.errors.first() {
            return Err(format!("protocol: {e}"));
        }
        if !self.mig.isolated.is_empty() || !self.mig.in_flight.is_empty() {
            return Err(format!(
                "left isolated: {:?}, in flight: {:?}",
                self.mig.isolated, self.mig.in_flight
            ));
        }
        let z = self.zone.borrow();
        z.validate().map_err(|e| format!("validate: {e:?}"))?;
        let mut allocated = 0u64;
        let mut seen = 0usize;
        for (_, info) in z.buddy().walk(z.span()) {
            if let BlockInfo::Allocated {
                head,
                order,
                tag: t,
            } = info
            {
                if t & tag::MASK != 0 {
                    return Err(format!("{head:?} still marked {t:#x}"));
                }
                match self.mig.owners.get(&head.get()) {
                    Some(o) if o.order == order.get() => {}
                    other => {
                        return Err(format!("allocated {head:?}/{order:?} has owner {other:?}"));
                    }
                }
                if (t & mtag::MT_MASK) as u8 != self.mig.owners[&head.get()].mt as u8 {
                    return Err(format!("{head:?} changed type"));
                }
                allocated += order.pages();
                seen += 1;
            }
        }
        if seen != self.mig.owners.len() {
            return Err(format!(
                "{} owners but {seen} allocated blocks",
                self.mig.owners.len()
            ));
        }
        let isolated = z.free_pages_of(MigrateType::Isolate);
        if z.free_pages() + isolated + allocated != z.buddy().managed_pages() {
            return Err(format!(
                "conservation: free {} + isolated {isolated} + allocated {allocated} != managed {}",
                z.free_pages(),
                z.buddy().managed_pages()
            ));
        }
        drop(z);
        self.mig.check_contents()
    }
}
