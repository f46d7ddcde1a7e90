//! How a kernel lets the allocator move its memory (spec 03 §12): the
//! allocator knows frame numbers and free frames; copying contents and
//! switching mappings is the kernel's job, and so is knowing who owns a
//! movable block.
//!
//! Ownership moves with the block. To move a block the allocator asks the
//! kernel for it ([`Migrator::isolate`]): the kernel hands over the
//! [`Block`] it holds for those frames (from its records, or rebuilt from
//! the number in a page table with the `unsafe`
//! [`crate::Machine::block_from_raw`]). If the block moves, the kernel gets
//! the new block back ([`Migrator::migrated`]) and puts it where the old
//! one was; if not, it gets the old one back ([`Migrator::putback`]). A
//! block the kernel did not hand over never moves, so a block held as a
//! value anywhere stays true: nobody can keep a block whose frames were
//! moved to someone else.
//!
//! ```
//! use std::collections::HashMap;
//! use pageframe::{Block, Gfp, Migrator, NodeId, Order, Pfn, compact::{MigrateError, MigrateMode}};
//! # use pageframe::{Machine, MachineConfig, PfnRange, ZoneKind};
//! # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
//! # let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + (1 << 15)));
//! # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
//! # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
//! # m.add_free_range(span).unwrap();
//!
//! /// A kernel's user pages: blocks by first frame (its reverse map), and
//! /// their contents (here a word each).
//! #[derive(Default)]
//! struct Pages {
//!     blocks: HashMap<Pfn, Block>,
//!     data: HashMap<Pfn, u64>,
//! }
//!
//! impl Migrator for Pages {
//!     fn isolate(&mut self, pfn: Pfn, _: Order) -> Option<Block> {
//!         self.blocks.remove(&pfn) // ours to move: hand it over
//!     }
//!     fn migrate(&mut self, src: Pfn, dst: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
//!         let word = self.data.remove(&src).ok_or(MigrateError::Busy)?;
//!         self.data.insert(dst, word); // copy, then switch the mappings
//!         Ok(())
//!     }
//!     fn putback(&mut self, block: Block) {
//!         self.blocks.insert(block.pfn(), block);
//!     }
//!     fn migrated(&mut self, block: Block, _from: Pfn) {
//!         self.blocks.insert(block.pfn(), block);
//!     }
//! }
//!
//! let mut pages = Pages::default();
//! let a = m.alloc(NodeId::ZERO, Gfp::HIGHUSER_MOVABLE, Order::ZERO).unwrap();
//! pages.data.insert(a.pfn(), 42);
//! let at = a.pfn();
//! pages.blocks.insert(at, a);
//! // Take the 2 MiB around it for a device: the page moves out, its word
//! // with it, and the kernel holds the block of its new frame.
//! let pb = Order::HUGE_2M;
//! let range = PfnRange::new(at.align_down(pb), at.align_down(pb) + pb.pages());
//! let dma = m.alloc_contig_range(range, &mut pages).unwrap();
//! let (&now, b) = pages.blocks.iter().next().unwrap();
//! assert!(!range.contains(now) && b.pfn() == now && pages.data[&now] == 42);
//! m.free_segment(dma).unwrap();
//! ```
//!
//! Blocks move in batches ([`Migrator::migrate_batch`], up to
//! [`crate::compact::MIGRATE_BATCH_MAX`] frames, or one larger block
//! alone): a kernel whose other CPUs may hold translations unmaps the whole
//! batch, flushes TLBs once (one shootdown), then copies and remaps each
//! block; a kernel that implements only [`Migrator::migrate`] is asked
//! block by block.
//!
//! A kernel that never lets memory move uses [`NoMigration`].

use pageframe_buddy::{Order, Pfn};
use pageframe_compact::{MigrateError, MigrateMode, Move};

use crate::block::Block;

/// What compaction, contiguous allocations, CMA and offlining ask of the
/// kernel to move a movable block. The allocator holds no lock while a
/// method here runs, so implementations may take their own (page table,
/// LRU) and may sleep in the blocking modes. A method must not panic; if
/// one does, the allocator gives back what it held before the panic goes
/// on (blocks handed over come back through [`Migrator::putback`]); a
/// move the kernel made but was not yet told of through
/// [`Migrator::migrated`] keeps its new frames allocated (the kernel maps
/// them): lost, never handed out again.
pub trait Migrator {
    /// The allocator would move the movable block `(pfn, order)`: hand
    /// over its [`Block`] to let it move, or `None` to keep it (busy,
    /// pinned, or not the kernel's to move). A block of other frames, or of
    /// another machine, is refused and given back at once.
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block>;

    /// Copy the `2^order` frames at `src` to `dst` and switch every mapping
    /// of `src` to `dst`. On error nothing may have changed.
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError>;

    /// Move a batch of handed-over blocks (spec 03 §12): each [`Move`] as
    /// [`Migrator::migrate`] would make it, its outcome reported with
    /// [`Move::set`] as soon as it is known. The allocator hands over up to
    /// [`crate::compact::MIGRATE_BATCH_MAX`] frames at once (a block larger
    /// than that comes alone), so that a kernel can unmap every source,
    /// flush TLBs once (one shootdown for the batch instead of one per
    /// block), then copy and remap each. A move
    /// left without an outcome counts as failed: it must not have happened.
    /// If this panics, the moves reported `Ok` count as made and the others
    /// as not. Default: [`Migrator::migrate`] for each move, in order.
    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        for m in moves {
            m.set(self.migrate(m.src(), m.dst(), m.order(), mode));
        }
    }

    /// The block did not move: it is the kernel's again.
    fn putback(&mut self, block: Block);

    /// The block moved: `block` holds the new frames (its contents are the
    /// old block's). The frames at `from` go back to the allocator when
    /// this returns, not before: books the kernel keeps by frame (a reverse
    /// map) are settled before anyone can be handed them.
    fn migrated(&mut self, block: Block, from: Pfn);

    /// Called between pageblocks with the scanners' positions; `true`
    /// aborts the run (a fatal signal, contention, a stop request;
    /// `need_resched` in async mode), which then ends after giving
    /// everything back. Default: never abort.
    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        let _ = (migrate_pfn, free_pfn);
        false
    }

    /// A run ended without success: flush the per-CPU caches so freed
    /// frames can merge (spec 03 §5 drain, §11.2). With `pageframe`,
    /// [`crate::Machine::drain_pcp`], passing this CPU's handle if it
    /// holds one ([`crate::lock`]). Default: nothing to flush.
    fn drain_caches(&mut self) {}
}

impl<M: Migrator + ?Sized> Migrator for &mut M {
    fn isolate(&mut self, pfn: Pfn, order: Order) -> Option<Block> {
        (**self).isolate(pfn, order)
    }
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        (**self).migrate(src, dst, order, mode)
    }
    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        (**self).migrate_batch(moves, mode)
    }
    fn putback(&mut self, block: Block) {
        (**self).putback(block)
    }
    fn migrated(&mut self, block: Block, from: Pfn) {
        (**self).migrated(block, from)
    }
    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        (**self).checkpoint(migrate_pfn, free_pfn)
    }
    fn drain_caches(&mut self) {
        (**self).drain_caches()
    }
}

/// A migrator for a kernel whose memory never moves: every block stays
/// where it is (compaction and contiguous allocations then work with free
/// memory only).
#[derive(Clone, Copy, Default, Debug)]
pub struct NoMigration;

impl Migrator for NoMigration {
    fn isolate(&mut self, _: Pfn, _: Order) -> Option<Block> {
        None
    }
    fn migrate(&mut self, _: Pfn, _: Pfn, _: Order, _: MigrateMode) -> Result<(), MigrateError> {
        Err(MigrateError::Busy)
    }
    fn putback(&mut self, block: Block) {
        // Never handed over; kept as the kernel's would be.
        let _ = block.into_raw();
    }
    fn migrated(&mut self, block: Block, _: Pfn) {
        let _ = block.into_raw();
    }
}
