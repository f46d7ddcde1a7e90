//! Runs of frames through the zone: `n` contiguous order-0 allocations
//! taken from one bitmap word of a chunk and given back together, for a
//! request of a count of frames that is no power of two (OSTD's frame
//! allocator). A block of the next power of two would cost a split of its
//! spare frames under the zone lock now and their merge at every free.

use pageframe_buddy::{MAX_RUN, Pfn, PfnRange};

use crate::gfp::Gfp;
use crate::lock::RawMutex;
use crate::zone_core::{Zone, ZoneGuard};

/// The length of `range` if it may be one run of frames: 2..=[`MAX_RUN`]
/// frames inside one aligned word of 64.
pub(crate) fn run_len(range: PfnRange) -> Option<u32> {
    let n = range.len();
    let one_word = range.start.get() / 64 == (range.end.get() - 1) / 64;
    ((2..=u64::from(MAX_RUN)).contains(&n) && one_word).then_some(n as u32)
}

impl<'a, R: RawMutex> Zone<'a, R> {
    /// `n` contiguous frames (2..=[`MAX_RUN`]) of the request's type from
    /// the zone, each an order-0 allocation (`BuddyZone::alloc_frame_run`),
    /// while the zone stays above its low mark with them gone (as a cache's
    /// refill does). `None`, nothing taken, otherwise or when no chunk of
    /// the type's own list has a free block holding `n`: the caller's block
    /// path then has the fallbacks, the reserves and reclaim.
    pub(crate) fn alloc_frame_run(&self, gfp: Gfp, n: u32) -> Option<Pfn> {
        let mt = gfp.migratetype();
        let mut z = self.inner.lock();
        if z.buddy.free_pages() <= z.wmark.low.saturating_add(u64::from(n)) {
            return None;
        }
        let p = z.buddy.alloc_frame_run(mt, n)?;
        self.states.set_allocated_run(p, n as usize, mt);
        self.after_zone_op(&z);
        Some(p)
    }

    /// Frees the `n` order-0 allocations from `first` (see [`run_len`]) in
    /// one step of the core, with the zone lock `z` held: `true` when they
    /// are freed. `false`, nothing changed, when one of them is not an
    /// unpinned live allocation of order 0 of the first one's type (frames
    /// of mixed types go back one by one), or the core would free them
    /// otherwise (a stripe's frames, which go back through the stripe): the
    /// caller's frame-by-frame path decides, and names what is wrong.
    pub(crate) fn free_frame_run_locked(
        &self,
        z: &mut ZoneGuard<'_, 'a, R>,
        first: Pfn,
        n: u32,
    ) -> bool {
        if n > MAX_RUN {
            return false;
        }
        // The bytes decide who frees, by compare-and-swap, as a free of one
        // frame does (a cache frees without this lock).
        let Some(mt) = self.states.take_run_for_free(first, n as usize) else {
            return false;
        };
        match z.buddy.free_frame_run(first, n) {
            Ok(()) => true,
            Err(_) => {
                self.states.give_back_run(first, n as usize, mt);
                false
            }
        }
    }
}
