//! Migration in batches through the machine (spec 03 §12): compaction and
//! contiguous ranges hand a kernel that moves batches itself many blocks at
//! once (up to a pageblock's for compaction), so that it can flush TLBs
//! once for them. A move the kernel refuses in a batch leaves the block the
//! kernel's where it was; a move it made leaves it the kernel's at the
//! destination; a kernel that panics in the middle of a batch keeps the
//! moves it reported and gets the other blocks back. Nothing is lost, and
//! nothing is freed before the kernel hears of its move.

mod common;

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use common::*;
use pageframe::{
    Block, ContigError, Gfp, Migrator, NodeId, Order, Pfn,
    compact::{MIGRATE_BATCH_MAX, MigrateError, MigrateMode, Move, SlowPathHooks},
};

/// A kernel that moves whole batches: [`Words`] underneath, plus the size
/// (frames) of each batch it was handed, a refusal of every
/// `refuse_every`-th move of a batch, and a panic once it made
/// `panic_after` moves of a batch.
#[derive(Default)]
struct Batches {
    words: Words,
    sizes: Vec<u64>,
    refuse_every: usize,
    panic_after: Option<usize>,
    /// Sources whose move it refused.
    refused: Vec<Pfn>,
}

impl Migrator for Batches {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        self.words.isolate(pfn, order)
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        self.words.migrate(src, dst, order, mode)
    }

    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        self.sizes
            .push(moves.iter().map(|m| m.order().pages()).sum::<u64>());
        for (k, m) in moves.iter_mut().enumerate() {
            if self.panic_after == Some(k) {
                self.panic_after = None;
                panic!("the kernel panics in the middle of a batch");
            }
            if self.refuse_every > 0 && k % self.refuse_every == self.refuse_every - 1 {
                self.refused.push(m.src());
                m.set(Err(MigrateError::Busy));
                continue;
            }
            m.set(self.words.migrate(m.src(), m.dst(), m.order(), mode));
        }
    }

    fn putback(&mut self, block: Block) {
        self.words.putback(block)
    }

    fn migrated(&mut self, block: Block, from: Pfn) {
        self.words.migrated(block, from)
    }
}

impl SlowPathHooks for Batches {}

/// A machine of one node with 16 pageblocks, fragmented: 128 movable
/// frames kept in each pageblock, held by the returned kernel.
fn fragmented() -> (&'static mut pageframe::Machine<'static>, Batches, u64) {
    let m = numa(1, 16);
    let free = m.inspect().free_pages();
    let mut k = Batches::default();
    fragment(m, 0, &mut k.words);
    (m, k, free)
}

/// Every block the kernel holds carries its word, and every word is once
/// at a block it holds: `kept` owners, none lost.
fn kernel_whole(k: &Batches, kept: usize) {
    let blocks: HashSet<u64> = k.words.blocks.keys().map(|p| p.get()).collect();
    let words: HashSet<u64> = k.words.word.keys().copied().collect();
    assert_eq!(blocks.len(), kept, "every block back with the kernel");
    assert_eq!(blocks, words, "every word with its block");
    let owners: HashSet<u64> = k.words.word.values().copied().collect();
    assert_eq!(owners.len(), kept, "every owner's word once");
}

/// Gives every block back and checks the machine is as it started.
fn back_to_start(m: &pageframe::Machine<'static>, k: &mut Batches, free: u64) {
    m.validate().unwrap();
    k.words.free_all(m);
    assert_eq!(m.inspect().free_pages(), free, "no frame lost");
    m.validate().unwrap();
}

#[test]
fn compaction_moves_a_pageblock_of_blocks_per_batch() {
    let (m, mut k, free) = fragmented();
    let kept = k.words.blocks.len();
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    let moved = k.words.moves;
    assert!(moved >= 8 * 128, "{moved} blocks moved");
    assert!(
        k.sizes.iter().all(|&f| f <= MIGRATE_BATCH_MAX),
        "{:?}",
        k.sizes
    );
    assert!(
        k.sizes.iter().filter(|&&f| f == 128).count() >= 8,
        "whole pageblocks: {:?}",
        k.sizes
    );
    assert!(k.sizes.len() as u64 * 32 < moved, "{:?}", k.sizes);
    kernel_whole(&k, kept);
    // Free memory now comes in whole pageblocks.
    let huge = m
        .alloc(NodeId::ZERO, Gfp::TRANSHUGE, Order::HUGE_2M)
        .unwrap();
    m.free(huge).unwrap();
    back_to_start(m, &mut k, free);
}

#[test]
fn moves_refused_in_a_batch_stay_where_they_were() {
    let (m, mut k, free) = fragmented();
    let kept = k.words.blocks.len();
    k.refuse_every = 3;
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(k.words.moves > 0 && !k.refused.is_empty());
    // Some sources were refused for good in every pass they met; each
    // still holds its block and word unless a later pass moved it.
    kernel_whole(&k, kept);
    back_to_start(m, &mut k, free);
    // A kernel that refuses every move of every batch: nothing moves.
    let (m, mut k, free) = fragmented();
    let before: HashSet<Pfn> = k.words.blocks.keys().copied().collect();
    k.refuse_every = 1;
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(!k.sizes.is_empty() && k.words.moves == 0);
    let after: HashSet<Pfn> = k.words.blocks.keys().copied().collect();
    assert_eq!(before, after, "every block where it was");
    kernel_whole(&k, before.len());
    back_to_start(m, &mut k, free);
}

#[test]
fn a_kernel_panicking_mid_batch_keeps_the_moves_it_made() {
    for made in [0, 1, 40, 127] {
        let (m, mut k, free) = fragmented();
        let kept = k.words.blocks.len();
        k.panic_after = Some(made);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = catch_unwind(AssertUnwindSafe(|| m.compact_node(NodeId::ZERO, &mut k)));
        std::panic::set_hook(hook);
        assert!(r.is_err(), "the kernel's panic goes on");
        // The moves made before the panic count: their blocks came back at
        // the destinations; the others came back where they were.
        assert_eq!(k.words.moves, made as u64);
        kernel_whole(&k, kept);
        m.validate().unwrap();
        // Compaction goes on from there.
        m.compact_node(NodeId::ZERO, &mut k).unwrap();
        assert!(k.words.moves > made as u64);
        kernel_whole(&k, kept);
        back_to_start(m, &mut k, free);
    }
}

#[test]
fn a_contiguous_range_moves_its_blocks_out_in_batches() {
    let (m, mut k, free) = fragmented();
    let kept = k.words.blocks.len();
    let base = common::base(0);
    // Four pageblocks: 512 kept blocks to move out.
    let range = r(base + 4 * PB, base + 8 * PB);
    k.refuse_every = 2;
    assert!(matches!(
        m.alloc_contig_range(range, &mut k),
        Err(ContigError::Refused { .. })
    ));
    kernel_whole(&k, kept);
    k.refuse_every = 0;
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    assert!(k.sizes.len() > 1, "{:?}", k.sizes);
    assert!(k.sizes.iter().any(|&f| f > 1), "{:?}", k.sizes);
    assert!(k.words.blocks.keys().all(|&p| !range.contains(p)));
    kernel_whole(&k, kept);
    m.free_segment(seg).unwrap();
    back_to_start(m, &mut k, free);
}

/// A contiguous range of larger blocks still hands the kernel at most
/// `MIGRATE_BATCH_MAX` frames a batch: 32 blocks of 8 frames would be 256.
#[test]
fn a_contiguous_range_of_larger_blocks_keeps_batches_within_the_cap() {
    let m = numa(1, 16);
    let free = m.inspect().free_pages();
    let mut k = Batches::default();
    let gfp = Gfp::HIGHUSER_MOVABLE | Gfp::THISNODE;
    while let Ok(b) = m.alloc(NodeId::ZERO, gfp, Order::new(3).unwrap()) {
        k.words.keep(b);
    }
    // Give back every other block, so that destinations exist.
    let all: Vec<Pfn> = k.words.blocks.keys().copied().collect();
    for p in all.iter().filter(|p| p.get() / 8 % 2 == 1) {
        let b = k.words.blocks.remove(p).unwrap();
        k.words.word.remove(&p.get());
        m.free(b).unwrap();
    }
    let kept = k.words.blocks.len();
    let base = common::base(0);
    let range = r(base + 4 * PB, base + 6 * PB);
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    assert!(
        k.sizes.iter().all(|&f| f <= MIGRATE_BATCH_MAX),
        "{:?}",
        k.sizes
    );
    assert!(
        k.sizes.contains(&MIGRATE_BATCH_MAX),
        "full batches: {:?}",
        k.sizes
    );
    assert!(k.words.blocks.keys().all(|&p| !range.contains(p)));
    kernel_whole(&k, kept);
    m.free_segment(seg).unwrap();
    back_to_start(m, &mut k, free);
}
