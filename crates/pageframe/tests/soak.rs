//! Soak: several threads, each a CPU with its handle on a two-node machine,
//! allocate and free at random through their per-CPU caches, the zone path
//! and the slow path, hand blocks to each other (cross-CPU frees), split
//! blocks, free parts of them by number, try bad frees, drain every CPU's
//! caches of every zone, take contiguous ranges (by size and by place;
//! their migrator drains with the CPU's own handle), take memory offline
//! and bring it back, and run free page reporting passes, while a
//! compactor thread runs kcompactd and whole-node compaction that moves
//! the workers' blocks under them, and a checker thread runs `validate()`
//! every few milliseconds, in the middle of all of it. A table proves
//! every frame has one owner at a time (claimed by compare-and-swap); at
//! every checkpoint (each second) and at the end the books balance: free +
//! cached + held = managed, and `validate()` passes at rest too. A
//! watchdog fails the run, naming the CPUs still inside a call, if any
//! call lasts over 10 s, and ends it at once, with the message, when any
//! thread panics.
//!
//! In `cargo test` it runs for 2 s with 4 CPUs; `cargo xtask soak --minutes
//! M [--cpus N]` runs it for longer in release (`PAGEFRAME_SOAK_SECS`,
//! `PAGEFRAME_SOAK_SEED`, `PAGEFRAME_SOAK_CPUS`).

mod common;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::watchdog::Watchdog;
use common::*;
use pageframe::{
    Block, CpuCache, Gfp, Machine, MachineConfig, Migrator, Order, Pfn, PfnRange, Segment,
    ZoneKind,
    compact::{MigrateError, MigrateMode, SlowPathHooks},
    topology::Topology,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Frames per zone; DMA32 and Normal on node 0, Normal on node 1, in one
/// contiguous range of frame numbers below and above 4 GiB.
const ZONE: u64 = 0x8000;
const BASE: u64 = 0x100000 - ZONE;
const FRAMES: u64 = ZONE * 3;
/// Block ids each worker starts with (live blocks a worker may hold).
const IDS: u32 = 1024;

/// Frame -> id of the block that owns it (0: none).
struct Owners(Vec<AtomicU32>);

impl Owners {
    fn slot(&self, pfn: u64) -> &AtomicU32 {
        &self.0[(pfn - BASE) as usize]
    }

    /// Claims every frame of `pages` frames just allocated or moved to:
    /// one already owned would be a frame handed out twice.
    fn claim(&self, pfn: u64, pages: u64, id: u32) {
        for f in pfn..pfn + pages {
            if let Err(other) = self.slot(f).compare_exchange(0, id, Relaxed, Relaxed) {
                panic!("frame {f:#x} handed to block {id} while block {other} owns it");
            }
        }
    }

    /// Gives `pages` frames up.
    fn release(&self, pfn: u64, pages: u64, id: u32) {
        for f in pfn..pfn + pages {
            assert_eq!(self.slot(f).swap(0, Relaxed), id, "owner of frame {f:#x}");
        }
    }
}

/// What a block id holds.
enum Thing {
    Block(Block),
    Segment(Segment),
    /// A run of single frames from a CPU's cache, held as numbers.
    Run(PfnRange),
}

impl Thing {
    fn start(&self) -> u64 {
        match self {
            Thing::Block(b) => b.pfn().get(),
            Thing::Segment(s) => s.start().get(),
            Thing::Run(r) => r.start.get(),
        }
    }
}

/// The shared books: owners by frame, and each block id's memory (empty
/// while the compactor holds it for a move, or while the id is free).
struct Books {
    owners: Owners,
    slots: Vec<Mutex<Option<Thing>>>,
}

impl Books {
    /// Takes what id `id` holds, if it holds it now.
    fn take(&self, id: u32) -> Option<Thing> {
        self.slots[id as usize].lock().unwrap().take()
    }

    /// Puts `t` back as id `id`'s.
    fn put(&self, id: u32, t: Thing) {
        let old = self.slots[id as usize].lock().unwrap().replace(t);
        assert!(old.is_none(), "id {id} held two things");
    }
}

/// The kernel side of compaction: a block is handed over only by the id
/// holding it (an owner freeing it meanwhile finds its slot empty and
/// retries), moves with its id, and comes back into its slot. A worker's
/// mover drains every CPU's caches with that worker's handle when asked.
struct Mover<'b, 'c, 'm> {
    books: &'b Books,
    moves: u64,
    cpu: Option<&'c mut CpuCache<'m, 'static>>,
}

impl<'b> Mover<'b, '_, '_> {
    fn new(books: &'b Books) -> Self {
        Mover {
            books,
            moves: 0,
            cpu: None,
        }
    }
}

impl Migrator for Mover<'_, '_, '_> {
    fn drain_caches(&mut self) {
        if let Some(c) = self.cpu.as_deref_mut() {
            let m = c.machine();
            m.drain_pcp(Some(c), |_| std::thread::yield_now());
        }
    }

    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        let id = self.books.owners.slot(pfn.get()).load(Relaxed);
        // No owner: it is being freed right now; leave it.
        if id == 0 {
            return None;
        }
        let mut slot = self.books.slots[id as usize].lock().unwrap();
        match slot.take() {
            Some(Thing::Block(b)) if b.pfn() == pfn && b.order() == order => Some(b),
            other => {
                *slot = other;
                None
            }
        }
    }

    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Ok(())
    }

    fn putback(&mut self, b: Block) {
        let id = self.books.owners.slot(b.pfn().get()).load(Relaxed);
        self.books.put(id, Thing::Block(b));
    }

    fn migrated(&mut self, b: Block, from: Pfn) {
        let pages = b.order().pages();
        let id = self.books.owners.slot(from.get()).load(Relaxed);
        self.books.owners.release(from.get(), pages, id);
        self.books.owners.claim(b.pfn().get(), pages, id);
        self.books.put(id, Thing::Block(b));
        self.moves += 1;
    }
}

impl SlowPathHooks for Mover<'_, '_, '_> {}

fn machine(workers: u32) -> &'static Machine<'static> {
    let m = machine_with(MachineConfig::new(Topology::uniform(2).unwrap()));
    let z = |i: u64| r(BASE + i * ZONE, BASE + (i + 1) * ZONE);
    zone(m, n(0), ZoneKind::Dma32, z(0), z(0));
    zone(m, n(0), ZoneKind::Normal, z(1), z(1));
    zone(m, n(1), ZoneKind::Normal, z(2), z(2));
    m.enable_pcp(workers, leak(m.pcp_bytes(workers).unwrap()))
        .unwrap();
    m
}

/// A block a worker holds: its id, its frames, and whether it is a
/// contiguous range (freed with `free_segment`).
type Held = (u32, u64, bool);

/// The calls the watchdog names.
const CALLS: &[&str] = &[
    "alloc",
    "free",
    "drain_pcp",
    "alloc_contig",
    "report_free_pages",
    "tick",
    "kcompactd",
    "bad free",
    "split",
    "free_raw",
    "alloc_contig_range",
    "offline_range",
    "add_free_range",
    "validate",
];

/// One worker: a CPU with its handle, its blocks and its free ids.
struct Worker<'m, 'b> {
    m: &'m Machine<'static>,
    cpu: CpuCache<'m, 'static>,
    books: &'b Books,
    held: Vec<Held>,
    ids: Vec<u32>,
    rng: SmallRng,
    /// Successful allocations and frees.
    done: u64,
    /// Runs of single frames taken.
    runs: u64,
}

impl Worker<'_, '_> {
    fn alloc(&mut self) {
        let Some(&id) = self.ids.last() else { return };
        let order = Order::new([0, 0, 0, 0, 0, 0, 1, 2, 3, 9][self.rng.gen_range(0..10)]).unwrap();
        let gfp = [
            Gfp::KERNEL,
            Gfp::KERNEL | Gfp::DMA32,
            Gfp::HIGHUSER_MOVABLE,
            Gfp::HIGHUSER_MOVABLE,
        ][self.rng.gen_range(0..4)];
        let node = self.cpu.node();
        let got = match self.rng.gen_range(0..22) {
            0..=12 => self.cpu.alloc(gfp, order),
            13..=18 => self.m.alloc(node, gfp, order),
            19..=20 => {
                let k = self.rng.gen_range(2..=16);
                if let Some(p) = self.cpu.alloc_run_raw(gfp, k) {
                    self.ids.pop();
                    self.runs += 1;
                    self.keep(id, Thing::Run(PfnRange::new(p, p + k)));
                }
                return;
            }
            _ => {
                let mut mover = Mover {
                    cpu: Some(&mut self.cpu),
                    ..Mover::new(self.books)
                };
                self.m
                    .alloc_slow(node, gfp | Gfp::RETRY_MAYFAIL, order, &mut mover)
            }
        };
        if let Ok(a) = got {
            self.ids.pop();
            self.keep(id, Thing::Block(a));
        }
    }

    /// Records `t` as id `id`'s, held by this worker.
    fn keep(&mut self, id: u32, t: Thing) {
        let (pfn, pages, contig) = match &t {
            Thing::Block(b) => (b.pfn().get(), b.order().pages(), false),
            Thing::Segment(s) => (s.start().get(), s.len(), true),
            Thing::Run(r) => (r.start.get(), r.len(), true),
        };
        self.books.owners.claim(pfn, pages, id);
        self.books.put(id, t);
        self.held.push((id, pages, contig));
        self.done += 1;
    }

    /// Takes the block of `held[i]` out of the books (its frames given up
    /// in the owner table), unless the compactor holds it or it is a
    /// range: `None`, nothing changed.
    fn take_block(&mut self, i: usize) -> Option<Block> {
        let (id, pages, contig) = self.held[i];
        if contig {
            return None;
        }
        let Thing::Block(b) = self.books.take(id)? else {
            unreachable!("id {id} holds a block")
        };
        self.books.owners.release(b.pfn().get(), pages, id);
        self.held.swap_remove(i);
        self.ids.push(id);
        Some(b)
    }

    /// Splits block `held[i]` into its halves, each a block of its own.
    fn split(&mut self, i: usize) {
        // The halves need the block's id and one more.
        if self.ids.is_empty() {
            return;
        }
        let Some(b) = self.take_block(i) else { return };
        match self.m.split(b) {
            Ok((lo, hi)) => {
                for half in [lo, hi] {
                    let id = self.ids.pop().unwrap();
                    self.keep(id, Thing::Block(half));
                }
            }
            // One frame, or a block a compactor is moving: still ours.
            Err(refused) => {
                let id = self.ids.pop().unwrap();
                self.keep(id, Thing::Block(refused.into_inner()));
            }
        }
    }

    /// Frees a random part of block `held[i]` by number; the rest stays
    /// allocated as the blocks that tile it, made blocks again (or freed
    /// by number too, when this worker is short of ids).
    fn free_part(&mut self, i: usize) {
        let Some(b) = self.take_block(i) else { return };
        let (p, order) = b.into_raw();
        let n = order.pages();
        let a = self.rng.gen_range(0..n);
        let e = self.rng.gen_range(a + 1..=n);
        let part = PfnRange::new(p + a, p + e);
        // SAFETY: the block was this worker's, held only as this number
        // from here on (its frames left the owner table, so the mover
        // leaves it alone).
        unsafe { self.m.free_raw(part) }.unwrap();
        self.done += 1;
        let rest = [PfnRange::new(p, p + a), PfnRange::new(p + e, p + n)];
        for r in rest {
            if r.is_empty() {
                continue;
            }
            if self.ids.len() < 32 {
                // SAFETY: as above: still this worker's, as numbers.
                unsafe { self.m.free_raw(r) }.unwrap();
                continue;
            }
            for (q, o) in r.blocks(order) {
                // SAFETY: a piece of the block the partial free left
                // allocated (the blocks tiling the rest), this worker's.
                let piece = unsafe { self.m.block_from_raw(q, o) }.unwrap_or_else(|e| {
                    panic!(
                        "piece {q:?}/{} of {p:?}/{} freed in {part:?}: {e}",
                        o.get(),
                        order.get()
                    )
                });
                let id = self.ids.pop().unwrap();
                self.keep(id, Thing::Block(piece));
            }
        }
    }

    /// A contiguous range at a random place of a random zone (any length
    /// up to two pageblocks, any alignment), its blocks moved out of the
    /// way by a migrator that drains the caches with this CPU's handle.
    fn alloc_contig_range(&mut self) -> bool {
        let Some(&id) = self.ids.last() else {
            return false;
        };
        let len = self.rng.gen_range(1..=1024);
        let start = BASE + self.rng.gen_range(0..FRAMES - len);
        let range = PfnRange::new(Pfn(start), Pfn(start + len));
        let mut mover = Mover {
            cpu: Some(&mut self.cpu),
            ..Mover::new(self.books)
        };
        let Ok(s) = self.m.alloc_contig_range(range, &mut mover) else {
            return false;
        };
        assert_eq!(s.range(), range);
        self.ids.pop();
        self.keep(id, Thing::Segment(s));
        true
    }

    /// Takes one or two pageblocks offline (their blocks moved out), or
    /// brings a range taken offline before back: which it did, if any.
    fn offline_or_online(&mut self, offline: &Mutex<Vec<PfnRange>>) -> Option<Onoff> {
        let back = {
            let mut o = offline.lock().unwrap();
            if !o.is_empty() && self.rng.gen_bool(0.5) {
                let k = self.rng.gen_range(0..o.len());
                Some(o.swap_remove(k))
            } else {
                None
            }
        };
        if let Some(r) = back {
            self.m.add_free_range(r).unwrap();
            return Some(Onoff::Online);
        }
        let zone = self.rng.gen_range(0..3);
        let blocks = self.rng.gen_range(1..=2);
        let first = self.rng.gen_range(0..ZONE / PB - blocks + 1);
        let start = BASE + zone * ZONE + first * PB;
        let range = PfnRange::new(Pfn(start), Pfn(start + blocks * PB));
        let mut mover = Mover {
            cpu: Some(&mut self.cpu),
            ..Mover::new(self.books)
        };
        self.m.offline_range(range, &mut mover).ok()?;
        offline.lock().unwrap().push(range);
        Some(Onoff::Offline)
    }

    /// A contiguous range of `2^k` frames (unmovable: compaction leaves
    /// it), taken with a migrator that moves the blocks in its way and
    /// drains every CPU's caches with this CPU's handle.
    fn alloc_contig(&mut self) {
        let Some(&id) = self.ids.last() else { return };
        let order = Order::new(self.rng.gen_range(0..=6)).unwrap();
        let node = n(self.rng.gen_range(0..2));
        let mut mover = Mover {
            cpu: Some(&mut self.cpu),
            ..Mover::new(self.books)
        };
        let pages = order.pages();
        if let Ok(a) = self
            .m
            .alloc_contig(node, Gfp::KERNEL, pages, pages, &mut mover)
        {
            assert_eq!(a.len(), pages);
            self.ids.pop();
            self.keep(id, Thing::Segment(a));
        }
    }

    /// A free page reporting pass whose callback allocates and frees an
    /// order-0 frame (a balloon driver at work).
    fn report(&mut self) {
        let min = Order::new([0, 3, 9][self.rng.gen_range(0..3)]).unwrap();
        let (m, node) = (self.m, self.cpu.node());
        m.report_free_pages(min, |_| {
            if let Ok(a) = m.alloc(node, Gfp::KERNEL, Order::ZERO) {
                m.free(a).unwrap();
            }
            true
        });
    }

    /// Frees block `i` of `held` through the cache or the zone path; false
    /// if the compactor holds it for a move (retry later).
    fn free(&mut self, i: usize) -> bool {
        let (id, pages, _) = self.held[i];
        let Some(thing) = self.books.take(id) else {
            return false;
        };
        let pfn = thing.start();
        self.books.owners.release(pfn, pages, id);
        match thing {
            Thing::Segment(s) => {
                assert_eq!(s.len(), pages);
                self.m.free_segment(s).unwrap();
            }
            Thing::Run(r) => {
                assert_eq!(r.len(), pages);
                // SAFETY: the run was this worker's (or handed to it), held
                // only as these numbers; given back once.
                unsafe { self.cpu.free_range_raw(r) }.unwrap();
            }
            Thing::Block(b) => {
                let core = self
                    .m
                    .inspect()
                    .zone_of(b.pfn())
                    .unwrap()
                    .inspect(|z| z.buddy().block_at(b.pfn()));
                match core {
                    Some(pageframe::zone::BlockInfo::Allocated { head, order: o, .. })
                        if head == b.pfn() && o.pages() == pages => {}
                    other => panic!(
                        "held block {pfn:#x} of {pages} frames (id {id}) is {other:?} in the core"
                    ),
                }
                let r = if self.rng.gen_bool(0.7) {
                    self.cpu.free(b)
                } else {
                    self.m.free(b)
                };
                r.unwrap();
            }
        }
        self.held.swap_remove(i);
        self.ids.push(id);
        self.done += 1;
        true
    }

    /// Numbers that are not a block, of a block this worker holds (its
    /// slot held meanwhile, so it cannot change): a frame inside it, and
    /// its head with the wrong order. Refused, and the block stays ours.
    fn bad_free(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let (id, _, contig) = self.held[self.rng.gen_range(0..self.held.len())];
        if contig {
            return;
        }
        let slot = self.books.slots[id as usize].lock().unwrap();
        let Some(Thing::Block(b)) = slot.as_ref() else {
            return;
        };
        let (pfn, order) = (b.pfn().get(), b.order());
        let wrong = Order::new(order.get() ^ 1).unwrap();
        let mut tries = vec![(pfn, wrong)];
        if order.get() > 0 {
            tries.push((pfn + 1, Order::ZERO));
        }
        for (p, o) in tries {
            // SAFETY: not a live allocation of that order (the block is
            // held with another): the call must refuse it.
            let r = unsafe { self.m.block_from_raw(Pfn(p), o) };
            assert!(
                r.is_err(),
                "bad number {p:#x}/{} of block {pfn:#x}/{} accepted",
                o.get(),
                order.get()
            );
        }
    }

    /// Base pages this worker holds, and those in its caches.
    fn pages(&mut self) -> (u64, u64) {
        let held = self.held.iter().map(|&(_, pages, _)| pages).sum();
        let cached = self
            .m
            .inspect()
            .all_zones()
            .filter_map(|z| self.cpu.cache_info(z.node(), z.kind()))
            .map(|i| u64::from(i.count))
            .sum();
        (held, cached)
    }
}

/// What [`Worker::offline_or_online`] did.
enum Onoff {
    Offline,
    Online,
}

/// What the run did, counted by its threads.
#[derive(Default)]
struct Counts {
    ops: AtomicU64,
    checkpoints: AtomicU64,
    moves: AtomicU64,
    drains: AtomicU64,
    contigs: AtomicU64,
    reports: AtomicU64,
    splits: AtomicU64,
    part_frees: AtomicU64,
    runs: AtomicU64,
    ranges: AtomicU64,
    ranges_taken: AtomicU64,
    offlines: AtomicU64,
    offlined: AtomicU64,
    onlined: AtomicU64,
    validations: AtomicU64,
}

fn soak_for(duration: Duration, seed: u64, workers: u32) {
    let m = machine(workers);
    let managed = m.inspect().managed_pages();
    let books = Books {
        owners: Owners((0..FRAMES).map(|_| AtomicU32::new(0)).collect()),
        slots: (0..=workers * IDS).map(|_| Mutex::new(None)).collect(),
    };
    let books = &books;
    let stop = AtomicBool::new(false);
    let pause = AtomicBool::new(false);
    // Ranges taken offline, to bring back.
    let offline: Mutex<Vec<PfnRange>> = Mutex::new(Vec::new());
    // Workers, the compactor, the checker and the clock meet at
    // checkpoints; a worker waiting there keeps serving drain requests to
    // its caches. A thread that panics ends the run at once: the barriers
    // give up and the watchdog prints its message. A call may wait for
    // drains that other threads serve, and seven threads share the host's
    // cores with whatever else runs: 30 s tells a hang from a slow host.
    let dog = Watchdog::start(workers as usize + 2, CALLS, Duration::from_secs(30));
    let barrier = dog.barrier(workers as usize + 3);
    let mailboxes: Vec<Mutex<Vec<Held>>> = (0..workers).map(|_| Mutex::new(Vec::new())).collect();
    let counted = AtomicU64::new(0);
    let tally = Counts::default();
    let start = Instant::now();

    std::thread::scope(|s| {
        for w in 0..workers {
            let (stop, pause, barrier, mailboxes, dog, offline) =
                (&stop, &pause, &barrier, &mailboxes, &dog, &offline);
            let (counted, tally) = (&counted, &tally);
            s.spawn(move || {
                let i = w as usize;
                let _watched = dog.worker(i);
                let cpu = claim_cpu(m, w, n(i % 2));
                let mut me = Worker {
                    m,
                    cpu,
                    books,
                    held: Vec::new(),
                    ids: (1 + w * IDS..=(w + 1) * IDS).collect(),
                    rng: SmallRng::seed_from_u64(seed ^ (u64::from(w) << 32)),
                    done: 0,
                    runs: 0,
                };
                let count = |c: &AtomicU64| {
                    c.fetch_add(1, Relaxed);
                };
                while !stop.load(Relaxed) {
                    if pause.load(Relaxed) {
                        // Everyone at rest first: a drain another CPU is
                        // in must end (served while this one waits)
                        // before the caches are counted.
                        barrier.wait(|| me.cpu.poll());
                        let (held, cached) = me.pages();
                        counted.fetch_add(held + cached, Relaxed);
                        barrier.wait(|| me.cpu.poll());
                        barrier.wait(|| me.cpu.poll());
                        continue;
                    }
                    let some = |me: &mut Worker| me.rng.gen_range(0..me.held.len());
                    match me.rng.gen_range(0..1000) {
                        0..=409 => dog.call(i, 0, || me.alloc()),
                        410..=759 if !me.held.is_empty() => {
                            let k = some(&mut me);
                            dog.call(i, 1, || me.free(k));
                        }
                        760..=789 if !me.held.is_empty() => {
                            let k = some(&mut me);
                            dog.call(i, 8, || me.split(k));
                            count(&tally.splits);
                        }
                        790..=819 if !me.held.is_empty() => {
                            let k = some(&mut me);
                            dog.call(i, 9, || me.free_part(k));
                            count(&tally.part_frees);
                        }
                        820..=869 if !me.held.is_empty() => {
                            // Hand a block (and its id) to the next CPU.
                            let k = some(&mut me);
                            let b = me.held.swap_remove(k);
                            mailboxes[(w as usize + 1) % workers as usize]
                                .lock()
                                .unwrap()
                                .push(b);
                        }
                        870..=909 => {
                            let got = std::mem::take(&mut *mailboxes[i].lock().unwrap());
                            me.held.extend(got);
                        }
                        910..=929 => dog.call(i, 7, || me.bad_free()),
                        930..=939 => {
                            dog.call(i, 2, || {
                                m.drain_pcp(Some(&mut me.cpu), |_| std::thread::yield_now())
                            });
                            count(&tally.drains);
                        }
                        940..=949 => {
                            dog.call(i, 3, || me.alloc_contig());
                            count(&tally.contigs);
                        }
                        950..=959 => {
                            if dog.call(i, 10, || me.alloc_contig_range()) {
                                count(&tally.ranges_taken);
                            }
                            count(&tally.ranges);
                        }
                        960..=964 => {
                            match dog.call(i, 11, || me.offline_or_online(offline)) {
                                Some(Onoff::Offline) => count(&tally.offlined),
                                Some(Onoff::Online) => count(&tally.onlined),
                                None => {}
                            }
                            count(&tally.offlines);
                        }
                        965..=969 => {
                            dog.call(i, 4, || me.report());
                            count(&tally.reports);
                        }
                        _ => dog.call(i, 5, || me.cpu.tick()),
                    }
                }
                // The end: everything back, twice (hand-overs made after
                // the first pass land before the second), and every range
                // taken offline online again.
                for _ in 0..2 {
                    let got = std::mem::take(&mut *mailboxes[i].lock().unwrap());
                    me.held.extend(got);
                    while !me.held.is_empty() {
                        let k = me.held.len() - 1;
                        me.free(k);
                    }
                    barrier.wait(|| me.cpu.poll());
                }
                while let Some(r) = offline.lock().unwrap().pop() {
                    dog.call(i, 12, || m.add_free_range(r)).unwrap();
                }
                me.cpu.drain();
                tally.ops.fetch_add(me.done, Relaxed);
                tally.runs.fetch_add(me.runs, Relaxed);
            });
        }
        // The compactor: kcompactd of both nodes and whole-node compaction.
        {
            let (stop, pause, barrier, dog, tally) = (&stop, &pause, &barrier, &dog, &tally);
            s.spawn(move || {
                let me = workers as usize;
                let _watched = dog.worker(me);
                m.tunables().set_proactiveness(50).unwrap();
                let mut mover = Mover::new(books);
                let mut rng = SmallRng::seed_from_u64(seed);
                while !stop.load(Relaxed) {
                    if pause.load(Relaxed) {
                        for _ in 0..3 {
                            barrier.wait(|| {});
                        }
                        continue;
                    }
                    let node = n(rng.gen_range(0..2));
                    dog.call(me, 6, || {
                        if rng.gen_bool(0.05) {
                            m.compact_node(node, &mut mover);
                        } else {
                            m.kcompactd_tick(node, start.elapsed().as_nanos() as u64, &mut mover);
                        }
                    });
                    std::thread::yield_now();
                }
                tally.moves.store(mover.moves, Relaxed);
                barrier.wait(|| {});
                barrier.wait(|| {});
            });
        }
        // The checker: `validate()` every few milliseconds while everything
        // above runs (at rest, the clock checks too).
        {
            let (stop, pause, barrier, dog, tally) = (&stop, &pause, &barrier, &dog, &tally);
            s.spawn(move || {
                let me = workers as usize + 1;
                let _watched = dog.worker(me);
                while !stop.load(Relaxed) {
                    if pause.load(Relaxed) {
                        for _ in 0..3 {
                            barrier.wait(|| {});
                        }
                        continue;
                    }
                    if let Err(e) = dog.call(me, 13, || m.validate()) {
                        panic!(
                            "validate() while running, after {} passes: {e}",
                            tally.validations.load(Relaxed)
                        );
                    }
                    tally.validations.fetch_add(1, Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                }
                barrier.wait(|| {});
                barrier.wait(|| {});
            });
        }
        // The clock: a checkpoint every second, with everyone at rest.
        let mut next = Instant::now() + Duration::from_millis(500);
        while start.elapsed() < duration {
            std::thread::sleep(Duration::from_millis(10));
            if Instant::now() < next {
                continue;
            }
            counted.store(0, Relaxed);
            pause.store(true, Relaxed);
            barrier.wait(|| {});
            barrier.wait(|| {});
            let mailed: u64 = mailboxes
                .iter()
                .map(|mb| {
                    mb.lock()
                        .unwrap()
                        .iter()
                        .map(|&(_, pages, _)| pages)
                        .sum::<u64>()
                })
                .sum();
            let in_use = counted.load(Relaxed) + mailed;
            // Memory offline is neither free nor managed.
            let off: u64 = offline.lock().unwrap().iter().map(PfnRange::len).sum();
            assert_eq!(
                m.inspect().managed_pages() + off,
                managed,
                "checkpoint: managed"
            );
            assert_eq!(
                m.inspect().free_pages() + in_use,
                m.inspect().managed_pages(),
                "checkpoint: free + held/cached/mailed"
            );
            m.validate().unwrap();
            tally.checkpoints.fetch_add(1, Relaxed);
            pause.store(false, Relaxed);
            barrier.wait(|| {});
            next = Instant::now() + Duration::from_secs(1);
        }
        stop.store(true, Relaxed);
        barrier.wait(|| {});
        barrier.wait(|| {});
        dog.joining();
    });
    dog.stop();
    assert_eq!(m.inspect().managed_pages(), managed, "memory left offline");
    assert_eq!(m.inspect().free_pages(), managed, "frames lost");
    assert!(
        books.owners.0.iter().all(|o| o.load(Relaxed) == 0),
        "a frame kept an owner"
    );
    m.validate().unwrap();
    let c = m.inspect().total_stats().compact;
    let get = |a: &AtomicU64| a.load(Relaxed);
    println!(
        "soak: {} allocations and frees by {workers} CPUs in {:.1} s, {} checkpoints; {} validate() passes while running, 0 failed; {} splits, {} partial frees, {} runs of single frames, {} drains of every cache, {} contiguous allocations and {} ranges tried ({} ranges taken), {} offlines or onlines tried ({} offline, {} online), {} reporting passes; compaction moved {} blocks (migrate_success {}, runs {})",
        get(&tally.ops),
        start.elapsed().as_secs_f64(),
        get(&tally.checkpoints),
        get(&tally.validations),
        get(&tally.splits),
        get(&tally.part_frees),
        get(&tally.runs),
        get(&tally.drains),
        get(&tally.contigs),
        get(&tally.ranges),
        get(&tally.ranges_taken),
        get(&tally.offlines),
        get(&tally.offlined),
        get(&tally.onlined),
        get(&tally.reports),
        get(&tally.moves),
        c.migrate_success,
        c.runs
    );
    assert!(get(&tally.checkpoints) >= 1, "no checkpoint ran");
    assert!(
        get(&tally.validations) >= 1,
        "validate() never ran alongside"
    );
}

#[test]
fn soak() {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse().ok());
    let secs = var("PAGEFRAME_SOAK_SECS").unwrap_or(2);
    let seed = var("PAGEFRAME_SOAK_SEED").unwrap_or(0x50a6);
    let cpus = var("PAGEFRAME_SOAK_CPUS").map_or(4, |c: u64| c.clamp(2, 64) as u32);
    soak_for(Duration::from_secs(secs), seed, cpus);
}
