//! Where the machine applies [`Poisoning`](crate::debug::Poisoning): the
//! writes on the way to free memory and the check on the way out.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::{Order, Pfn, PfnRange, PhysAddr};

use crate::block::Block;
use crate::debug::{Event, Hooks, PAGE_POISON, Poisoning};
use crate::lock::Platform;
use crate::machine::Machine;
use crate::zone_core::Zone;

/// The frames of the block at `pfn`.
fn frames(pfn: Pfn, order: Order) -> PfnRange {
    PfnRange::new(pfn, pfn + order.pages())
}

impl<'a, P: Platform> Machine<'a, P> {
    /// Whether freed frames are written with a poison byte.
    #[inline(always)]
    pub(crate) fn poisons_frees(&self) -> bool {
        self.hooks.poisoning().free_byte().is_some()
    }

    /// Frames about to become free, written as poisoning asks. The caller
    /// owns them until they are free.
    #[inline(always)]
    pub(crate) fn poison_free(&self, range: PfnRange) {
        if let Some(byte) = self.hooks.poisoning().free_byte() {
            self.hooks.fill(range, byte);
        }
    }

    /// A block its holder is freeing: written only once it is known to be
    /// a live allocation of `z` (the write touches memory only its owner
    /// may).
    #[inline(always)]
    pub(crate) fn poison_block_free(&self, z: &Zone<'a, P::Lock>, pfn: Pfn, order: Order) {
        if self.poisons_frees() && z.check_live(pfn, order).is_ok() {
            self.poison_free(frames(pfn, order));
        }
    }

    /// A range of live allocations its holder is freeing.
    #[inline(always)]
    pub(crate) fn poison_range_free(&self, z: &Zone<'a, P::Lock>, range: PfnRange) {
        if self.poisons_frees() && z.check_range(range).is_ok() {
            self.poison_free(range);
        }
    }

    /// A block being handed out: checked for writes since it was freed,
    /// then initialised. A write found is counted, and reported to the
    /// hooks' `event` with `events` (the any-context call calls only
    /// `fill` and `check`).
    #[inline(always)]
    pub(crate) fn poison_alloc(&self, b: &Block, events: bool) {
        let p = self.hooks.poisoning();
        if !p.is_empty() {
            self.check_and_init(b, p, events);
        }
    }

    #[cold]
    fn check_and_init(&self, b: &Block, p: Poisoning, events: bool) {
        let range = b.range();
        if p.contains(Poisoning::POISON)
            && let Some(addr) = self.hooks.check(range, PAGE_POISON)
        {
            self.uaf_reports.fetch_add(1, Relaxed);
            if events {
                self.report_use_after_free(b, addr);
            }
        }
        if p.contains(Poisoning::INIT_ON_ALLOC) {
            self.hooks.fill(range, 0);
        }
    }

    /// [`Event::UseAfterFree`] for `b`, whose byte at `addr` was written.
    fn report_use_after_free(&self, b: &Block, addr: PhysAddr) {
        #[cfg(feature = "page-owner")]
        let last_owner = self
            .zone(b.zone_ref())
            .and_then(|z| z.owners.get(addr.pfn_down()))
            .map(|o| o.tag);
        #[cfg(not(feature = "page-owner"))]
        let last_owner = None;
        self.hooks.event(&Event::UseAfterFree {
            addr,
            pfn: b.pfn(),
            order: b.order(),
            last_owner,
        });
    }

    /// See [`crate::debug::Inspect::use_after_free_reports`].
    pub(crate) fn use_after_free_reports(&self) -> u64 {
        self.uaf_reports.load(Relaxed)
    }
}
