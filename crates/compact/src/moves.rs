//! A batch of moves (spec 03 §12, Linux `migrate_pages_batch`): the kernel
//! is handed many blocks at once, so that it can unmap every source, flush
//! TLBs once for all of them, then copy and remap each, instead of one
//! flush (a shootdown on every other CPU) per block. Each move carries its
//! outcome, which the kernel reports as soon as it is known.

use pageframe_buddy::{Order, Pfn};

use crate::MigrateError;

/// Most base pages a batch asks the kernel to move at once. Linux batches
/// up to `HPAGE_PMD_NR` pages (spec 03 §12): 512 with 4 KiB pages. Here a
/// batch's moves and sources live on the compacting caller's stack (about
/// 40 bytes a page), so the cap is a quarter of that: some 5 KiB, which a
/// 16 KiB kernel stack affords, and still one TLB flush per 128 pages.
pub const MIGRATE_BATCH_MAX: u64 = 128;

/// Whether a block of `order` joins a batch already holding `frames`: the
/// batch stays within [`MIGRATE_BATCH_MAX`] frames, except that a block
/// larger than that goes alone, as the only move of its batch.
pub(crate) fn fits_batch(frames: u64, order: Order) -> bool {
    frames == 0 || frames + order.pages() <= MIGRATE_BATCH_MAX
}

/// One move of a batch: the `2^order` frames at [`Move::src`] go to
/// [`Move::dst`], and the kernel says how that went with [`Move::set`].
///
/// ```
/// use pageframe_compact::{MigrateError, Move};
/// use pageframe_buddy::{Order, Pfn};
///
/// let mut m = Move::new(Pfn(10), Pfn(700), Order::ZERO);
/// assert_eq!(m.outcome(), None);
/// m.set(Err(MigrateError::Again));
/// assert!(!m.moved());
/// m.set(Ok(()));
/// assert!(m.moved());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Move {
    src: Pfn,
    dst: Pfn,
    order: Order,
    outcome: Option<Result<(), MigrateError>>,
}

impl Move {
    /// The move of the `2^order` frames at `src` to `dst`, without an
    /// outcome yet.
    pub const fn new(src: Pfn, dst: Pfn, order: Order) -> Self {
        Move {
            src,
            dst,
            order,
            outcome: None,
        }
    }

    /// The block to move (its first frame).
    pub const fn src(&self) -> Pfn {
        self.src
    }

    /// Where it goes: free frames the allocator took for it.
    pub const fn dst(&self) -> Pfn {
        self.dst
    }

    /// The block's order.
    pub const fn order(&self) -> Order {
        self.order
    }

    /// What the kernel reported; `None` before it did.
    pub const fn outcome(&self) -> Option<Result<(), MigrateError>> {
        self.outcome
    }

    /// Reports the outcome: `Ok` once the contents are at `dst` and every
    /// mapping of `src` names `dst`; an error if nothing changed (the
    /// source mapped and intact, the destination untouched).
    pub fn set(&mut self, outcome: Result<(), MigrateError>) {
        self.outcome = Some(outcome);
    }

    /// Whether the kernel reported the move made.
    pub const fn moved(&self) -> bool {
        matches!(self.outcome, Some(Ok(())))
    }
}
