//! The per-CPU page cache in front of a zone ([`pageframe_pcp`], spec 04):
//! the zone side of its protocol (refill and spill under one lock
//! acquisition each) and the cached allocation and free paths.
//!
//! The cache hands out and takes back frames without the zone lock, so it
//! cannot read the buddy's metadata to refuse a bad free. The zone keeps a
//! byte per frame instead ([`FrameStates`]): allocated with its order and
//! type, cached, or free. Those bytes are read and written with plain
//! atomic loads and stores (no read-modify-write): each frame is touched
//! only by the CPU that holds it, which the caller's own hand-over between
//! CPUs orders. A free through the cache that does not match a live
//! allocation gets the same typed error as a zone free, and changes nothing.

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange};
use pageframe_mobility::MigrateType;
use pageframe_pcp::{AllocMiss, LocalPcp, PcpZone, RefillSink, SpillBatch, ZoneFlags};

use crate::error::AllocError;
use crate::gfp::Gfp;
use crate::zone::{Zone, ZoneInner};

const FREE: u8 = 0;
const CACHED: u8 = 0x80;
/// Allocated: bits 0..=3 order + 1, bits 4..=5 the migratetype.
const fn allocated(order: Order, mt: MigrateType) -> u8 {
    (order.get() + 1) | ((mt as u8 & 3) << 4)
}

/// One byte per frame of a zone's span: who holds the frame.
pub struct FrameStates<'a> {
    base: Pfn,
    bytes: &'a [AtomicU8],
}

impl<'a> FrameStates<'a> {
    /// Bytes needed for `span`.
    pub const fn bytes(span: PfnRange) -> usize {
        span.len() as usize
    }

    fn new(span: PfnRange, mem: &'a mut [MaybeUninit<u8>]) -> Option<FrameStates<'a>> {
        let mem = mem.get_mut(..Self::bytes(span))?;
        for b in mem.iter_mut() {
            b.write(FREE);
        }
        // SAFETY: every byte was just initialised; `AtomicU8` has the size
        // and alignment of `u8`, and the exclusive borrow of `mem` for 'a
        // becomes a shared borrow of atomics, which only allow atomic access.
        let bytes = unsafe { &*(mem as *mut [MaybeUninit<u8>] as *const [AtomicU8]) };
        Some(FrameStates {
            base: span.start,
            bytes,
        })
    }

    #[inline]
    fn slot(&self, pfn: Pfn) -> Option<&AtomicU8> {
        self.bytes
            .get(pfn.get().checked_sub(self.base.get())? as usize)
    }

    #[inline]
    pub(crate) fn set_allocated(&self, pfn: Pfn, order: Order, mt: MigrateType) {
        if let Some(s) = self.slot(pfn) {
            s.store(allocated(order, mt), Relaxed);
        }
    }

    #[inline]
    pub(crate) fn set_free(&self, pfn: Pfn, _order: Order) {
        if let Some(s) = self.slot(pfn) {
            s.store(FREE, Relaxed);
        }
    }

    #[inline]
    fn set_cached(&self, pfn: Pfn) {
        if let Some(s) = self.slot(pfn) {
            s.store(CACHED, Relaxed);
        }
    }

    /// A block moved by compaction: `dst` takes `src`'s allocated state and
    /// `src` becomes free.
    pub(crate) fn moved(&self, src: Pfn, dst: Pfn, _order: Order) {
        if let (Some(s), Some(d)) = (self.slot(src), self.slot(dst)) {
            d.store(s.load(Relaxed), Relaxed);
            s.store(FREE, Relaxed);
        }
    }

    /// Refuses a frame that sits in a per-CPU cache (a double free).
    #[inline]
    pub(crate) fn check_not_cached(&self, pfn: Pfn) -> Result<(), FreeError> {
        match self.slot(pfn).map(|s| s.load(Relaxed)) {
            Some(CACHED) => Err(FreeError::AlreadyFree),
            _ => Ok(()),
        }
    }

    /// The migratetype of a live allocation of `order` at `pfn`, if that is
    /// what the frame holds.
    #[inline]
    fn live(&self, pfn: Pfn, order: Order) -> Option<MigrateType> {
        let v = self.slot(pfn)?.load(Relaxed);
        let mt = match (v >> 4) & 3 {
            1 => MigrateType::Movable,
            2 => MigrateType::Reclaimable,
            _ => MigrateType::Unmovable,
        };
        (v & CACHED == 0 && v & 0xf == order.get() + 1).then_some(mt)
    }
}

/// Orders the per-CPU cache holds: 0..=3 and the pageblock order (spec 04 §2.2).
fn cached_order(order: Order) -> bool {
    order.get() <= 3 || order == Order::HUGE_2M
}

impl<'a> Zone<'a> {
    /// Bytes [`Zone::with_frame_states`] needs for a zone over `span`.
    pub const fn frame_state_bytes(span: PfnRange) -> usize {
        FrameStates::bytes(span)
    }

    /// Enables the per-CPU cache paths ([`Zone::alloc_cached`],
    /// [`Zone::free_cached`]): the zone keeps one byte per frame of its span
    /// in `mem`. Call before the first allocation.
    pub fn with_frame_states(
        mut self,
        mem: &'a mut [MaybeUninit<u8>],
    ) -> Result<Self, pageframe_buddy::InitError> {
        let needed = FrameStates::bytes(self.span());
        let given = mem.len();
        self.states = Some(
            FrameStates::new(self.span(), mem)
                .ok_or(pageframe_buddy::InitError::MetadataTooSmall { needed, given })?,
        );
        Ok(self)
    }

    /// Updates the flags the caches read lock-free after a zone operation
    /// (nothing to do for a zone without per-CPU caches).
    #[inline]
    pub(crate) fn after_zone_op(&self, z: &ZoneInner<'_>) {
        if self.states.is_none() {
            return;
        }
        let below = z.buddy.free_pages() < z.wmark.high;
        self.pcp_flags.store(
            if below {
                ZoneFlags::BELOW_HIGH.bits()
            } else {
                0
            },
            Relaxed,
        );
    }

    /// Allocates through this CPU's cache when the order is cached (0..=3
    /// and 2 MiB) and the request is ordinary (no reserve access asked);
    /// otherwise, or when the cache and a refill come back empty, through
    /// the zone. `local` is this CPU's cache of this zone: holding it is the
    /// proof that nothing else on this CPU uses it (see [`pageframe_pcp`]).
    pub fn alloc_cached(
        &self,
        local: &mut LocalPcp<'_, '_>,
        gfp: Gfp,
        order: Order,
    ) -> Result<Pfn, AllocError> {
        let ordinary = !gfp.intersects(Gfp::HIGH | Gfp::MEMALLOC) && gfp.is_valid();
        if let (Some(st), true, true) = (&self.states, ordinary, cached_order(order)) {
            match local.alloc(self, order, gfp.migratetype()) {
                Ok(p) => {
                    st.set_allocated(p, order, gfp.migratetype());
                    return Ok(p);
                }
                Err(AllocMiss::NotCached | AllocMiss::ZoneEmpty) => {}
            }
        }
        self.alloc(gfp, order)
    }

    /// Frees through this CPU's cache; the cache spills to the zone in
    /// batches. Bad input (a frame that is not a live allocation of this
    /// order: double free, wrong order, free frame, hole, out of range) gets
    /// the zone's typed error and changes nothing. Without frame states the
    /// free goes straight to the zone.
    pub fn free_cached(
        &self,
        local: &mut LocalPcp<'_, '_>,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        let Some(st) = &self.states else {
            return self.free(pfn, order);
        };
        if !cached_order(order) {
            return self.free(pfn, order);
        }
        let Some(mt) = st.live(pfn, order) else {
            // Name the problem precisely: the zone knows why.
            st.check_not_cached(pfn)?;
            return match self.inner.lock().buddy.buddy().would_free(pfn, order) {
                Err(e) => Err(e),
                // Allocated but not as recorded (e.g. through the buddy
                // directly): let the zone path take it.
                Ok(()) => self.free(pfn, order),
            };
        };
        st.set_cached(pfn);
        if local.free(self, pfn, order, mt).is_err() {
            st.set_allocated(pfn, order, mt);
            return self.free(pfn, order);
        }
        Ok(())
    }
}

impl PcpZone for Zone<'_> {
    /// `rmqueue_bulk`: one lock acquisition; stops at the low watermark.
    fn refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        let mut z = self.inner.lock();
        while sink.remaining() > 0 && z.buddy.free_pages() > z.wmark.low + order.pages() {
            let Ok(p) = z
                .buddy
                .alloc(order, mt, pageframe_mobility::AllocMode::empty())
            else {
                break;
            };
            if let Err(back) = sink.push(p) {
                let _ = z.buddy.free(back, order);
                break;
            }
            if let Some(st) = &self.states {
                st.set_cached(p);
            }
        }
        self.after_zone_op(&z);
    }

    /// `free_pcppages_bulk`: one lock acquisition; the buddy re-reads each
    /// block's pageblock type (spec 04 §5.1).
    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let mut z = self.inner.lock();
        for (pfn, order) in batch {
            if z.buddy.free(pfn, order).is_ok()
                && let Some(st) = &self.states
            {
                st.set_free(pfn, order);
            }
        }
        self.after_zone_op(&z);
    }

    fn flags(&self) -> ZoneFlags {
        ZoneFlags::from_bits_truncate(self.pcp_flags.load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_states_track_holders() {
        let span = PfnRange::new(Pfn(100), Pfn(164));
        let mut mem = [MaybeUninit::<u8>::uninit(); 64];
        let st = FrameStates::new(span, &mut mem).unwrap();
        let o2 = Order::new(2).unwrap();
        assert_eq!(st.live(Pfn(104), o2), None, "starts free");
        st.set_allocated(Pfn(104), o2, MigrateType::Reclaimable);
        assert_eq!(st.live(Pfn(104), o2), Some(MigrateType::Reclaimable));
        assert_eq!(st.live(Pfn(104), Order::ZERO), None, "other order");
        st.set_cached(Pfn(104));
        assert_eq!(st.check_not_cached(Pfn(104)), Err(FreeError::AlreadyFree));
        assert_eq!(st.live(Pfn(104), o2), None);
        st.set_free(Pfn(104), o2);
        assert_eq!(st.check_not_cached(Pfn(104)), Ok(()));
        // Out of the span: ignored on write, nothing live on read.
        st.set_cached(Pfn(10));
        assert_eq!(st.live(Pfn(10), o2), None);
        let mut short = [MaybeUninit::<u8>::uninit(); 8];
        assert!(FrameStates::new(span, &mut short).is_none());
    }
}
