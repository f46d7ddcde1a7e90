//! Giving back part of an allocation by its frame numbers: the contract of
//! frame allocators that hand out and take back ranges rather than blocks
//! (OSTD's `GlobalFrameAllocator::dealloc` returns any part of an
//! allocation, in any order, in several calls). The blocks holding the
//! range are split ([`Machine::split`]) until the range is whole blocks,
//! which are freed; the frames around it stay allocated, as blocks of
//! their own.

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange};

use crate::block::RawError;
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::zone_core::Zone;

/// Tries of one step before a racing change is taken for misuse: each
/// failed try means another CPU split or freed a block of the range's
/// neighbourhood, which it does at most a few times per block.
const RACE_TRIES: u32 = 64;

impl<'a, P: Platform> Machine<'a, P> {
    /// Frees the frames of `range`, any part of the caller's allocations:
    /// the blocks holding them are split until `range` is made of whole
    /// blocks, and those are freed; frames of those blocks outside `range`
    /// stay allocated, as blocks of their own (numbers the caller may free
    /// the same way later, or turn back into blocks with
    /// [`Machine::block_from_raw`] at their new orders). Several CPUs may
    /// free disjoint parts of one allocation at once.
    ///
    /// Checked before anything changes: `range` lies in one zone and every
    /// frame of it is in a live allocation; otherwise a [`RawError`] names
    /// the first frame that is not (free, a hole, cached, being moved) and
    /// nothing is freed. Should another CPU change the range meanwhile
    /// (which only a breach of the contract below can do), the frames
    /// before the named one are freed and the rest are still allocated.
    ///
    /// ```
    /// # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x1000), Pfn(0x5000));
    /// # let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// let free = m.inspect().free_pages();
    /// let (pfn, order) = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(4).unwrap()).unwrap().into_raw();
    /// // SAFETY: the sixteen frames are ours, held only as this number.
    /// unsafe {
    ///     m.free_raw(PfnRange::new(pfn + 3, pfn + 11)).unwrap(); // the middle
    ///     m.free_raw(PfnRange::new(pfn + 11, pfn + 16)).unwrap(); // the top
    ///     m.free_raw(PfnRange::new(pfn, pfn + 3)).unwrap(); // the rest
    /// }
    /// assert_eq!(m.inspect().free_pages(), free);
    /// ```
    ///
    /// # Safety
    ///
    /// Every frame of `range` is the caller's: allocated from this machine
    /// to it, held only as numbers (no [`crate::Block`] or
    /// [`crate::Segment`] of it exists), and not freed since. A frame the
    /// caller freed before and someone else was handed since passes the
    /// check and is taken from its new owner.
    pub unsafe fn free_raw(&self, range: PfnRange) -> Result<(), RawError> {
        if range.is_empty() {
            return Ok(());
        }
        let err = |pfn, why| RawError { pfn, why };
        let zone = self
            .zone_of(range.start)
            .ok_or(err(range.start, FreeError::OutOfRange))?;
        if !zone.span().contains_range(&range) {
            let outside = zone.span().end.max(range.start);
            return Err(err(outside, FreeError::OutOfRange));
        }
        // Every frame in a live allocation, before anything changes.
        let mut p = range.start;
        while p < range.end {
            let (head, order) = holding(zone, p).map_err(|why| err(p, why))?;
            p = head + order.pages();
        }
        self.poison_free(range);
        let mut p = range.start;
        let mut tries = 0;
        while p < range.end {
            let (head, order) = holding(zone, p).map_err(|why| err(p, why))?;
            let step = if head == p && head + order.pages() <= range.end {
                zone.free(head, order).map(|()| head + order.pages())
            } else {
                zone.split(head, order).map(|_| p)
            };
            match step {
                Ok(next) => {
                    p = next;
                    tries = 0;
                }
                // Another CPU split this block, or freed a part of it, between
                // the look-up and the step: look again (the look-up names a
                // frame that is really not allocated).
                Err(
                    FreeError::WrongOrder { .. }
                    | FreeError::AlreadyFree
                    | FreeError::NotBlockHead { .. },
                ) if tries < RACE_TRIES => {
                    tries += 1;
                }
                Err(why) => return Err(err(p, why)),
            }
        }
        self.freed_range(zone, range);
        Ok(())
    }
}

/// The live allocation holding `pfn` in `zone`, or why there is none. The
/// look-up runs under the zone lock, so it never sees a split half done.
fn holding<R: RawMutex>(zone: &Zone<'_, R>, pfn: Pfn) -> Result<(Pfn, Order), FreeError> {
    let found = {
        let z = zone.inner.lock();
        zone.states
            .live_block_holding(pfn, z.buddy.buddy().max_order())
    };
    match found {
        Some(found) => found,
        None => Err(match zone.check_live(pfn, Order::ZERO) {
            Err(e) => e,
            Ok(()) => FreeError::Busy,
        }),
    }
}
