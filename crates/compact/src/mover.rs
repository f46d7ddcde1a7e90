//! The hook a kernel implements to move pages (spec 03 §12): the allocator
//! only knows frame numbers; copying contents and switching mappings is the
//! kernel's job, and it may refuse.

use core::fmt;

use pageframe_buddy::{Order, Pfn};

use crate::{MigrateMode, Move};

/// Why a block could not be migrated. Whatever the error, the kernel must
/// have left the source exactly as it was (mapped, contents intact) and not
/// touched the destination.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MigrateError {
    /// Transient: someone holds an extra reference or a lock; a later pass
    /// may succeed (Linux `-EAGAIN`).
    Again,
    /// The block is pinned (e.g. DMA) and cannot move for now.
    Pinned,
    /// Permanent for this run: under writeback in a non-blocking mode, a
    /// mapping that cannot migrate, and the like (Linux `-EBUSY`).
    Busy,
}

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MigrateError::Again => "the block is busy for now; a later pass may move it",
            MigrateError::Pinned => "the block is pinned",
            MigrateError::Busy => "the block cannot move in this mode",
        })
    }
}

impl core::error::Error for MigrateError {}

/// What compaction asks of the kernel. The zone lock is never held while a
/// method here runs, so implementations may take their own locks (page
/// table, LRU) and may sleep in the blocking modes.
///
/// Protocol for one source block (spec 03 §12): [`FrameMover::isolate`] (the
/// kernel takes a reference so the block cannot be freed under the
/// compactor), then either [`FrameMover::migrate`] into a destination the
/// compactor took from the free lists followed by [`FrameMover::migrated`]
/// once the allocator's books are updated (the source is then free and the
/// destination is the owner's), or [`FrameMover::putback`] if the block did
/// not move. Between `isolate` and `migrated`/`putback` the kernel must not
/// free the source; after `migrate` returns `Ok` and until `migrated` it must
/// not free the destination.
///
/// The allocator moves isolated blocks in batches
/// ([`FrameMover::migrate_batch`], up to [`crate::MIGRATE_BATCH_MAX`] frames,
/// or one larger block alone):
/// a kernel that implements it unmaps the whole batch, flushes TLBs once,
/// then copies and remaps each block; one that does not gets
/// [`FrameMover::migrate`] per block.
pub trait FrameMover {
    /// Take the block `(pfn, order)`, allocated movable with tag word `tag`,
    /// off the kernel's lists so it can move. `false` refuses (busy, being
    /// freed, pinned since the scanner looked). Default: accept.
    fn isolate(&mut self, pfn: Pfn, order: Order, tag: u32) -> bool {
        let _ = (pfn, order, tag);
        true
    }

    /// Copy `2^order` frames from `src` to `dst` and switch every mapping of
    /// `src` to `dst` (copy + remap). On error nothing may have changed.
    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError>;

    /// Moves a batch of isolated blocks (spec 03 §12,
    /// `migrate_pages_batch`): each [`Move`] as [`FrameMover::migrate`] would
    /// make it, its outcome reported with [`Move::set`] as soon as it is
    /// known. One call lets a kernel unmap every source, flush TLBs once for
    /// the batch, then copy and remap each block. A move left without an
    /// outcome counts as failed (`Busy`), so it must not have happened. If
    /// the call panics, the moves reported `Ok` count as made and the others
    /// as not. Default: [`FrameMover::migrate`] for each move, in order.
    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        for m in moves {
            m.set(self.migrate(m.src(), m.dst(), m.order(), mode));
        }
    }

    /// The block `src` did not move: give it back to the kernel's lists and
    /// drop the isolation reference. Default: nothing to do.
    fn putback(&mut self, src: Pfn, order: Order) {
        let _ = (src, order);
    }

    /// The move `src` -> `dst` is complete in the allocator's books: `src` is
    /// free, `dst` is allocated with the source's tag. Drop any references
    /// held for the move. Default: nothing to do.
    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        let _ = (src, dst, order);
    }

    /// [`FrameMover::migrated`] for every move of a batch that was made (each
    /// reported `Ok`), once the allocator's books show them all; their
    /// sources are freed after this returns. Default: `migrated` for each,
    /// in order.
    fn migrated_batch(&mut self, moves: &[Move]) {
        for m in moves {
            self.migrated(m.src(), m.dst(), m.order());
        }
    }

    /// Called between pageblocks with the scanners' positions; `true` aborts
    /// the run (a fatal signal, contention, a stop request; `need_resched` in
    /// async mode). The run then ends `Contended` after putting everything
    /// back. Default: never abort.
    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        let _ = (migrate_pfn, free_pfn);
        false
    }

    /// A run ended without success: flush per-CPU free-page caches of the
    /// zone so freed frames can merge (spec 03 §5 drain, §11.2). Default:
    /// nothing to flush.
    ///
    /// The allocator holds no lock while it calls this, and the caller's
    /// own per-CPU handle is not borrowed by the allocator: a kernel drains
    /// every CPU's caches here, passing this CPU's handle if it holds one
    /// (with `pageframe`, `Machine::drain_pcp(Some(handle), kick)`; a cache
    /// this CPU holds but cannot serve while it waits would never empty).
    fn drain_caches(&mut self) {}
}

impl<M: FrameMover + ?Sized> FrameMover for &mut M {
    fn isolate(&mut self, pfn: Pfn, order: Order, tag: u32) -> bool {
        (**self).isolate(pfn, order, tag)
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
    fn putback(&mut self, src: Pfn, order: Order) {
        (**self).putback(src, order)
    }
    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        (**self).migrated(src, dst, order)
    }
    fn migrated_batch(&mut self, moves: &[Move]) {
        (**self).migrated_batch(moves)
    }
    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        (**self).checkpoint(migrate_pfn, free_pfn)
    }
    fn drain_caches(&mut self) {
        (**self).drain_caches()
    }
}
