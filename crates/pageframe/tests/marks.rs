//! Every mark one call puts on a block, against every transition the
//! block can go through: who clears the mark or carries it
//! (docs/block-state.md has the table; each test here is one cell, named
//! `<mark>_<transition>`).
//!
//! The marks: a compactor's mark on a block it moves, pageblock
//! isolation, the reported mark of free page reporting, the owner's pin,
//! the owner record, and poison. The transitions: split, partial free,
//! migration, free, a free into a CPU's cache, and the drain of a cache.

mod common;

use std::collections::HashMap;

use common::*;
use pageframe::compact::{MigrateError, MigrateMode};
use pageframe::{Block, ContigError, Gfp, Machine, Migrator, NodeId, Order, Pfn, PfnRange};

const MOVABLE: Gfp = Gfp::HIGHUSER_MOVABLE;

/// A kernel that, asked for a block to move, splits it instead and keeps
/// the halves (a driver that just now gave part of it back, or the owner's
/// thread splitting it at that moment).
struct SplitsOnIsolate<'m> {
    m: &'m Machine<'static>,
    blocks: HashMap<Pfn, Block>,
    halves: Vec<Block>,
}

impl Migrator for SplitsOnIsolate<'_> {
    fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<Block> {
        let b = self.blocks.remove(&pfn)?;
        let (lo, hi) = self.m.split(b).unwrap();
        self.halves.push(lo);
        self.halves.push(hi);
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }
    fn putback(&mut self, b: Block) {
        self.blocks.insert(b.pfn(), b);
    }
    fn migrated(&mut self, b: Block, _: Pfn) {
        self.blocks.insert(b.pfn(), b);
    }
}

/// The pageblock around `p`.
fn pageblock(p: Pfn) -> PfnRange {
    let s = p.align_down(Order::HUGE_2M);
    PfnRange::new(s, s + PB)
}

/// A block split while a contiguous allocation has it marked: the mark
/// stays with the head the compactor knows and is gone when the
/// compactor is; the upper half never had it.
#[test]
fn compaction_mark_split() {
    let m: &Machine<'static> = one_zone(16 * PB);
    let b = m.alloc(NodeId::ZERO, MOVABLE, o(3)).unwrap();
    let range = pageblock(b.pfn());
    let mut k = SplitsOnIsolate {
        m,
        blocks: HashMap::from([(b.pfn(), b)]),
        halves: Vec::new(),
    };
    let r = m.alloc_contig_range(range, &mut k);
    assert!(matches!(r, Err(ContigError::Busy { .. })), "{r:?}");
    assert_eq!(k.halves.len(), 2);
    m.validate().unwrap();
    // The halves are ordinary blocks: with them gone, the range is taken.
    for h in k.halves.drain(..) {
        m.free(h).unwrap();
    }
    let seg = m.alloc_contig_range(range, &mut k).unwrap();
    m.free_segment(seg).unwrap();
    m.validate().unwrap();
}

/// The same through compaction's migrate scanner.
#[test]
fn compaction_mark_split_by_compaction() {
    let m: &Machine<'static> = one_zone(16 * PB);
    let mut w = Words::default();
    let kept = fragment(m, 0, &mut w);
    // Every kept frame is order 0 (no halves): give the kernel order-1
    // blocks to move instead, one a pageblock.
    w.free_all(m);
    let mut k = SplitsOnIsolate {
        m,
        blocks: HashMap::new(),
        halves: Vec::new(),
    };
    for _ in 0..kept.len().min(64) {
        let b = m.alloc(NodeId::ZERO, MOVABLE, o(1)).unwrap();
        k.blocks.insert(b.pfn(), b);
    }
    m.compact_node(NodeId::ZERO, &mut k).unwrap();
    assert!(!k.halves.is_empty(), "compaction asked for blocks");
    m.validate().unwrap();
    for h in k.halves.drain(..).chain(k.blocks.drain().map(|(_, b)| b)) {
        m.free(h).unwrap();
    }
    assert_eq!(m.free_pages(), m.managed_pages());
}
