//! Soak: several threads, each a CPU with its handle on a two-node machine,
//! allocate and free at random through their per-CPU caches, the zone path
//! and the slow path, hand blocks to each other (cross-CPU frees) and try
//! bad frees, while a compactor thread runs kcompactd and whole-node
//! compaction that moves the workers' blocks under them. A table proves
//! every frame has one owner at a time (claimed by compare-and-swap), and
//! at every checkpoint and at the end the books balance: free + cached +
//! held = managed, and `validate()` passes.
//!
//! In `cargo test` it runs for 2 s; `cargo xtask soak --minutes M` runs it
//! for longer in release (`PAGEFRAME_SOAK_SECS`, `PAGEFRAME_SOAK_SEED`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use common::*;
use pageframe::pcp::CpuId;
use pageframe::{
    CpuCache, FreeError, Gfp, Machine, MachineConfig, MigrateError, MigrateMode, Migrator, Order,
    Pfn, SlowPathHooks, Topology, ZoneKind,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Worker threads (CPUs with caches).
const WORKERS: u32 = 4;
/// Frames per zone; DMA32 and Normal on node 0, Normal on node 1, in one
/// contiguous range of frame numbers below and above 4 GiB.
const ZONE: u64 = 0x8000;
const BASE: u64 = 0x100000 - ZONE;
const FRAMES: u64 = ZONE * 3;
/// Block ids each worker starts with (live blocks a worker may hold).
const IDS: u32 = 1024;
/// A handle being freed or moved.
const LOCK: u64 = 1 << 63;

/// Frame -> id of the block that owns it (0: none).
struct Owners(Vec<AtomicU32>);

impl Owners {
    fn slot(&self, pfn: u64) -> &AtomicU32 {
        &self.0[(pfn - BASE) as usize]
    }

    /// Claims every frame of a block just allocated or moved to: one
    /// already owned would be a frame handed out twice.
    fn claim(&self, pfn: u64, order: Order, id: u32) {
        for f in pfn..pfn + order.pages() {
            if let Err(other) = self.slot(f).compare_exchange(0, id, Relaxed, Relaxed) {
                panic!("frame {f:#x} handed to block {id} while block {other} owns it");
            }
        }
    }

    /// Gives a block's frames up.
    fn release(&self, pfn: u64, order: Order, id: u32) {
        for f in pfn..pfn + order.pages() {
            assert_eq!(self.slot(f).swap(0, Relaxed), id, "owner of frame {f:#x}");
        }
    }
}

/// The shared books: owners by frame, and where each block id is.
struct Books {
    owners: Owners,
    /// Block id -> its first frame (`LOCK` set while its owner frees it or
    /// the compactor moves it).
    at: Vec<AtomicU64>,
}

impl Books {
    /// Locks block `id`'s handle; `None` if someone else holds it.
    fn lock(&self, id: u32) -> Option<u64> {
        let h = &self.at[id as usize];
        let v = h.load(Relaxed);
        (v & LOCK == 0 && h.compare_exchange(v, v | LOCK, Relaxed, Relaxed).is_ok()).then_some(v)
    }

    fn unlock(&self, id: u32, pfn: u64) {
        self.at[id as usize].store(pfn, Relaxed);
    }
}

/// The kernel side of compaction: a block moves with its owner's id, under
/// its handle's lock (an owner freeing it meanwhile gets `Busy` from the
/// machine, which isolated it first).
struct Mover<'b> {
    books: &'b Books,
    moves: u64,
}

impl Migrator for Mover<'_> {
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        _: MigrateMode,
    ) -> Result<(), MigrateError> {
        let id = self.books.owners.slot(src.get()).load(Relaxed);
        // No owner: its owner is giving it up right now; leave it.
        let Some(at) = (id != 0).then(|| self.books.lock(id)).flatten() else {
            return Err(MigrateError::Busy);
        };
        if at != src.get() {
            self.books.unlock(id, at);
            return Err(MigrateError::Busy);
        }
        self.books.owners.release(src.get(), order, id);
        self.books.owners.claim(dst.get(), order, id);
        self.books.unlock(id, dst.get());
        self.moves += 1;
        Ok(())
    }
}

impl SlowPathHooks for Mover<'_> {}

fn machine() -> &'static Machine<'static> {
    let m = machine_with(MachineConfig::new(Topology::uniform(2).unwrap()));
    let z = |i: u64| r(BASE + i * ZONE, BASE + (i + 1) * ZONE);
    zone(m, n(0), ZoneKind::Dma32, z(0), z(0));
    zone(m, n(0), ZoneKind::Normal, z(1), z(1));
    zone(m, n(1), ZoneKind::Normal, z(2), z(2));
    m.enable_pcp(WORKERS, leak(m.pcp_bytes(WORKERS).unwrap()))
        .unwrap();
    m
}

/// One worker: a CPU with its handle, its blocks and its free ids.
struct Worker<'m, 'b> {
    m: &'m Machine<'static>,
    cpu: CpuCache<'m, 'static>,
    books: &'b Books,
    held: Vec<(u32, Order)>,
    ids: Vec<u32>,
    rng: SmallRng,
    /// Successful allocations and frees.
    done: u64,
}

impl Worker<'_, '_> {
    fn alloc(&mut self, mover: &mut Mover<'_>) {
        let Some(&id) = self.ids.last() else { return };
        let order = Order::new([0, 0, 0, 0, 0, 0, 1, 2, 3, 9][self.rng.gen_range(0..10)]).unwrap();
        let gfp = [
            Gfp::KERNEL,
            Gfp::KERNEL | Gfp::DMA32,
            Gfp::HIGHUSER_MOVABLE,
            Gfp::HIGHUSER_MOVABLE,
        ][self.rng.gen_range(0..4)];
        let node = self.cpu.node();
        let got = match self.rng.gen_range(0..20) {
            0..=12 => self.cpu.alloc(gfp, order),
            13..=18 => self.m.alloc(node, gfp, order),
            _ => self
                .m
                .alloc_slow(node, gfp | Gfp::RETRY_MAYFAIL, order, mover),
        };
        if let Ok(a) = got {
            self.ids.pop();
            self.books.owners.claim(a.pfn.get(), order, id);
            self.books.unlock(id, a.pfn.get());
            self.held.push((id, order));
            self.done += 1;
        }
    }

    /// Frees block `i` of `held` through the cache or the zone path; false
    /// if it is being moved (the machine says `Busy`: retry later).
    fn free(&mut self, i: usize) -> bool {
        let (id, order) = self.held[i];
        let Some(pfn) = self.books.lock(id) else {
            return false;
        };
        let core = self
            .m
            .zone_of(Pfn(pfn))
            .unwrap()
            .inspect(|z| z.buddy().block_at(Pfn(pfn)));
        match core {
            Some(pageframe::BlockInfo::Allocated { head, order: o, .. })
                if head == Pfn(pfn) && o == order => {}
            other => panic!(
                "held block {pfn:#x}/{} (id {id}) is {other:?} in the core",
                order.get()
            ),
        }
        self.books.owners.release(pfn, order, id);
        let r = if self.rng.gen_bool(0.7) {
            self.cpu.free(Pfn(pfn), order)
        } else {
            self.m.free(Pfn(pfn), order)
        };
        match r {
            Ok(()) => {
                self.held.swap_remove(i);
                self.ids.push(id);
                self.done += 1;
                true
            }
            Err(FreeError::Busy) => {
                // Isolated by the compactor, which could not lock the
                // handle and will put it back: still ours.
                self.books.owners.claim(pfn, order, id);
                self.books.unlock(id, pfn);
                false
            }
            Err(e) => panic!("free of held block {pfn:#x} order {}: {e}", order.get()),
        }
    }

    /// Bad frees of a block this worker holds (under its handle's lock, so
    /// it cannot change meanwhile): of a frame inside it, and of its head
    /// with the wrong order, through the cache or the zone path. Refused,
    /// and the block stays ours. (A true double free races with other CPUs
    /// that may get the frame again at once; the unit and loom tests cover
    /// it.)
    fn bad_free(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let (id, order) = self.held[self.rng.gen_range(0..self.held.len())];
        let Some(pfn) = self.books.lock(id) else {
            return;
        };
        let wrong = Order::new(order.get() ^ 1).unwrap();
        let mut tries = vec![(pfn, wrong)];
        if order.get() > 0 {
            tries.push((pfn + 1, Order::ZERO));
        }
        for (p, o) in tries {
            let r = if self.rng.gen_bool(0.5) {
                self.cpu.free(Pfn(p), o)
            } else {
                self.m.free(Pfn(p), o)
            };
            assert!(
                r.is_err(),
                "bad free {p:#x}/{} of block {pfn:#x}/{} accepted",
                o.get(),
                order.get()
            );
        }
        self.books.unlock(id, pfn);
    }

    /// Base pages this worker holds, and those in its caches.
    fn pages(&mut self) -> (u64, u64) {
        let held = self.held.iter().map(|&(_, o)| o.pages()).sum();
        let cached = self
            .m
            .all_zones()
            .filter_map(|z| self.cpu.cache_info(z.node(), z.kind()))
            .map(|i| u64::from(i.count))
            .sum();
        (held, cached)
    }
}

/// Threads meet at barriers: one that panics would leave the others
/// waiting forever, so a panic ends the process (the test fails, loudly).
struct AbortOnPanic;

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("soak: a thread panicked; aborting");
            std::process::abort();
        }
    }
}

fn soak_for(duration: Duration, seed: u64) {
    let m = machine();
    let managed = m.managed_pages();
    let books = Books {
        owners: Owners((0..FRAMES).map(|_| AtomicU32::new(0)).collect()),
        at: (0..=WORKERS * IDS).map(|_| AtomicU64::new(0)).collect(),
    };
    let books = &books;
    let stop = AtomicBool::new(false);
    let pause = AtomicBool::new(false);
    // Workers and the compactor meet the clock at checkpoints.
    let barrier = Barrier::new(WORKERS as usize + 2);
    let mailboxes: Vec<Mutex<Vec<(u32, Order)>>> =
        (0..WORKERS).map(|_| Mutex::new(Vec::new())).collect();
    let counted = AtomicU64::new(0);
    let (ops, checkpoints, moves) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let start = Instant::now();

    std::thread::scope(|s| {
        let _guard = AbortOnPanic;
        for w in 0..WORKERS {
            let (stop, pause, barrier, mailboxes) = (&stop, &pause, &barrier, &mailboxes);
            let (counted, ops) = (&counted, &ops);
            s.spawn(move || {
                let _guard = AbortOnPanic;
                let mut me = Worker {
                    m,
                    cpu: m.cpu(CpuId(w), n(w as usize % 2)).unwrap(),
                    books,
                    held: Vec::new(),
                    ids: (1 + w * IDS..=(w + 1) * IDS).collect(),
                    rng: SmallRng::seed_from_u64(seed ^ (u64::from(w) << 32)),
                    done: 0,
                };
                let mut mover = Mover { books, moves: 0 };
                while !stop.load(Relaxed) {
                    if pause.load(Relaxed) {
                        let (held, cached) = me.pages();
                        counted.fetch_add(held + cached, Relaxed);
                        barrier.wait();
                        barrier.wait();
                        continue;
                    }
                    match me.rng.gen_range(0..100) {
                        0..=44 => me.alloc(&mut mover),
                        45..=84 if !me.held.is_empty() => {
                            let i = me.rng.gen_range(0..me.held.len());
                            me.free(i);
                        }
                        85..=89 if !me.held.is_empty() => {
                            // Hand a block (and its id) to the next CPU.
                            let i = me.rng.gen_range(0..me.held.len());
                            let b = me.held.swap_remove(i);
                            mailboxes[((w + 1) % WORKERS) as usize]
                                .lock()
                                .unwrap()
                                .push(b);
                        }
                        90..=93 => {
                            let got = std::mem::take(&mut *mailboxes[w as usize].lock().unwrap());
                            me.held.extend(got);
                        }
                        94..=96 => me.bad_free(),
                        _ => me.cpu.tick(),
                    }
                }
                // The end: everything back, twice (hand-overs made after
                // the first pass land before the second).
                for _ in 0..2 {
                    let got = std::mem::take(&mut *mailboxes[w as usize].lock().unwrap());
                    me.held.extend(got);
                    while !me.held.is_empty() {
                        let i = me.held.len() - 1;
                        me.free(i);
                    }
                    barrier.wait();
                }
                me.cpu.drain();
                ops.fetch_add(me.done, Relaxed);
            });
        }
        // The compactor: kcompactd of both nodes and whole-node compaction.
        {
            let (stop, pause, barrier, moves) = (&stop, &pause, &barrier, &moves);
            s.spawn(move || {
                let _guard = AbortOnPanic;
                m.set_proactiveness(50).unwrap();
                let mut mover = Mover { books, moves: 0 };
                let mut rng = SmallRng::seed_from_u64(seed);
                while !stop.load(Relaxed) {
                    if pause.load(Relaxed) {
                        barrier.wait();
                        barrier.wait();
                        continue;
                    }
                    let node = n(rng.gen_range(0..2));
                    if rng.gen_bool(0.05) {
                        m.compact_node(node, &mut mover);
                    } else {
                        m.kcompactd_tick(node, start.elapsed().as_nanos() as u64, &mut mover);
                    }
                    std::thread::yield_now();
                }
                moves.store(mover.moves, Relaxed);
                barrier.wait();
                barrier.wait();
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
            barrier.wait();
            let mailed: u64 = mailboxes
                .iter()
                .map(|mb| {
                    mb.lock()
                        .unwrap()
                        .iter()
                        .map(|&(_, o)| o.pages())
                        .sum::<u64>()
                })
                .sum();
            let in_use = counted.load(Relaxed) + mailed;
            assert_eq!(
                m.free_pages() + in_use,
                managed,
                "checkpoint: free + held/cached/mailed"
            );
            m.validate().unwrap();
            checkpoints.fetch_add(1, Relaxed);
            pause.store(false, Relaxed);
            barrier.wait();
            next = Instant::now() + Duration::from_secs(1);
        }
        stop.store(true, Relaxed);
        barrier.wait();
        barrier.wait();
    });
    assert_eq!(m.free_pages(), managed, "frames lost");
    assert!(
        books.owners.0.iter().all(|o| o.load(Relaxed) == 0),
        "a frame kept an owner"
    );
    m.validate().unwrap();
    let c = m.total_stats().compact;
    println!(
        "soak: {} allocations and frees by {WORKERS} CPUs in {:.1} s, {} checkpoints; compaction moved {} blocks (migrate_success {}, runs {})",
        ops.load(Relaxed),
        start.elapsed().as_secs_f64(),
        checkpoints.load(Relaxed),
        moves.load(Relaxed),
        c.migrate_success,
        c.runs
    );
    assert!(checkpoints.load(Relaxed) >= 1, "no checkpoint ran");
}

#[test]
fn soak() {
    let var = |k: &str| std::env::var(k).ok().and_then(|s| s.parse().ok());
    let secs = var("PAGEFRAME_SOAK_SECS").unwrap_or(2);
    let seed = var("PAGEFRAME_SOAK_SEED").unwrap_or(0x50a6);
    soak_for(Duration::from_secs(secs), seed);
}
