//! Giving back part of an allocation by its frame numbers: the contract of
//! frame allocators that hand out and take back ranges rather than blocks
//! (OSTD's `GlobalFrameAllocator::dealloc` returns any part of an
//! allocation, in any order, in several calls). The blocks holding the
//! range are split ([`Machine::split`]) until the range is whole blocks,
//! which are freed; the frames around it stay allocated, as blocks of
//! their own.

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange};

use crate::block::RawError;
use crate::frame_run::run_len;
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::zone_core::{Zone, ZoneInner};

/// Tries of one step before a racing change is taken for misuse: each
/// failed try means another CPU split or freed a block of the range's
/// neighbourhood, which it does at most a few times per block.
const RACE_TRIES: u32 = 64;

/// Blocks one hold of the zone lock covers at most, checked or freed: a
/// range of many blocks lets other CPUs take the lock in between, so the
/// time the lock is held stays bounded whatever the range.
const BLOCKS_A_HOLD: u32 = 64;

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
    /// nothing is freed. The check, the splits and the frees take the
    /// zone's lock once for up to 64 blocks (a frame an order-0 stripe
    /// handed out goes back to that stripe, outside it); a range of 2 to 64
    /// order-0 allocations inside one 64-frame word (a run
    /// [`crate::CpuCache::alloc_run_raw`] hands out) goes back in one step.
    /// Should another CPU change the range meanwhile (which only a breach
    /// of the contract below can do), the frames before the named one are
    /// freed and the rest are still allocated.
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
        // One critical section for the check, the splits and the frees of
        // up to `BLOCKS_A_HOLD` blocks.
        let mut z = zone.inner.lock();
        // A run of order-0 allocations (as a run allocation hands out) in
        // one step of the core, when nothing poisons the frames first.
        if let Some(n) = run_len(range)
            && !self.poisons_frees()
            && zone.free_frame_run_locked(&mut z, range.start, n)
        {
            zone.after_zone_op(&z);
            drop(z);
            self.freed_range(zone, range);
            return Ok(());
        }
        let max = z.buddy.buddy().max_order();
        // Every frame in a live allocation, before anything changes.
        let mut p = range.start;
        let mut blocks = 0;
        while p < range.end {
            let (head, order) = holding(zone, &z, max, p).map_err(|why| err(p, why))?;
            p = head + order.pages();
            blocks += 1;
            if blocks % BLOCKS_A_HOLD == 0 {
                drop(z);
                z = zone.inner.lock();
            }
        }
        if self.poisons_frees() {
            // The hook writes the frames: not under the zone lock.
            drop(z);
            self.poison_free(range);
            z = zone.inner.lock();
        }
        let mut p = range.start;
        let mut tries = 0;
        let mut at = holding(zone, &z, max, p).map_err(|why| err(p, why));
        while p < range.end {
            let (head, order) = match at {
                Ok(block) => block,
                Err(e) => {
                    // Frames freed before it keep the zone's hints true.
                    zone.after_zone_op(&z);
                    return Err(e);
                }
            };
            let step = if head == p && head + order.pages() <= range.end {
                let freed = if order == Order::ZERO && zone.stripes.holds(head) {
                    // A stripe's frame goes back through the stripe, whose
                    // lock comes before the zone's.
                    drop(z);
                    let r = zone.free(head, order);
                    z = zone.inner.lock();
                    r
                } else {
                    zone.free_locked(&mut z, head, order)
                };
                freed.map(|()| None)
            } else {
                // The half holding `p` is the next block to look at: no
                // look-up needed.
                zone.split_locked(&mut z, head, order).map(|upper| {
                    let half = Order::new_truncated(order.get() - 1);
                    Some((if p >= upper { upper } else { head }, half))
                })
            };
            match step {
                Ok(next) => {
                    tries = 0;
                    at = match next {
                        Some(half) => Ok(half),
                        None => {
                            p = head + order.pages();
                            if p >= range.end {
                                break;
                            }
                            blocks += 1;
                            if blocks % BLOCKS_A_HOLD == 0 {
                                zone.after_zone_op(&z);
                                drop(z);
                                z = zone.inner.lock();
                            }
                            holding(zone, &z, max, p).map_err(|why| err(p, why))
                        }
                    };
                }
                // Another CPU changed this block between the look-up and
                // the step (a cache's free of a part of it, or a split while
                // the lock was let go for a stripe's frame): look again (the
                // look-up names a frame that is really not allocated).
                Err(
                    FreeError::WrongOrder { .. }
                    | FreeError::AlreadyFree
                    | FreeError::NotBlockHead { .. },
                ) if tries < RACE_TRIES => {
                    tries += 1;
                    at = holding(zone, &z, max, p).map_err(|why| err(p, why));
                }
                Err(why) => {
                    zone.after_zone_op(&z);
                    return Err(err(p, why));
                }
            }
        }
        zone.after_zone_op(&z);
        drop(z);
        self.freed_range(zone, range);
        Ok(())
    }
}

/// The live allocation holding `pfn` in `zone` (blocks of at most `max`),
/// or why there is none. The caller holds the zone lock (`z`), so the
/// look-up never sees a split half done.
fn holding<R: RawMutex>(
    zone: &Zone<'_, R>,
    z: &ZoneInner<'_>,
    max: Order,
    pfn: Pfn,
) -> Result<(Pfn, Order), FreeError> {
    match zone.states.live_block_holding(pfn, max) {
        Some(found) => found,
        None => Err(match zone.check_live_locked(z, pfn, Order::ZERO) {
            Err(e) => e,
            Ok(()) => FreeError::Busy,
        }),
    }
}
