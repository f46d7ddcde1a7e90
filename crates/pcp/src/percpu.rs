//! Ownership of a CPU's cache, remote drains and sizing updates.
//!
//! # The contract
//!
//! The fast path takes no lock and no atomic read-modify-write.
//! That is sound because exactly one [`LocalPcp`] handle exists per CPU cache
//! at a time, and every operation needs `&mut LocalPcp`:
//!
//! * [`PcpSet::claim`] hands out the handle once (one atomic compare-exchange on
//!   an ownership flag) and dropping the handle gives it back. Claiming is the
//!   only way to reach a cache, so two owners cannot exist; this is the whole
//!   of the memory-safety argument and it does not depend on which CPU runs
//!   the code.
//! * Being *local* is the embedding's job: a kernel claims each CPU's handle
//!   once, keeps it in that CPU's per-CPU area and reaches it with
//!   preemption and (allocating) interrupts off, which is what turns `&mut`
//!   into "only this CPU touches it". A host test
//!   or benchmark gives each thread its own handle.
//! * An interrupt that cannot get the handle (it is borrowed by the code it
//!   interrupted) must use the zone path, like Linux's failed trylock
//!   (spec 04 §9, §12(9)).
//!
//! # Remote work: requests the owner honours
//!
//! Another CPU never touches a cache it does not own. To drain one or change
//! its sizing it posts a request in the slot's mailbox (atomics, off the fast
//! path); the owner checks the mailbox with one relaxed load at the start of
//! every operation and honours it there (this is Linux's pre-6.0 design:
//! per-CPU work plus a flush). A drainer waits for the owner's
//! acknowledgement, and takes the handle itself if the owner released it
//! (CPU offline, thread exit), so a drain completes as long as every owner
//! either keeps operating, runs its periodic [`LocalPcp::decay`], or
//! releases its handle.
//!
//! A CPU that waits for others honours the requests addressed to its own
//! caches meanwhile, in every zone it holds one of: then two drainers
//! never wait on each other. A caller with caches of several zones posts
//! its requests in every zone first ([`PcpSet::request_drain_all`]) and
//! then waits in each ([`PcpSet::wait_drain_all`]) with a callback that
//! polls all of its caches. `tests/loom.rs` model-checks this protocol,
//! two zones and two concurrent drainers included:
//! `RUSTFLAGS="--cfg loom" cargo test -p pageframe-pcp --test loom --release`.

use crate::error::{AllocMiss, PcpError};
use crate::free::{FreeOutcome, HomeFree};
use crate::pcp::PerCpuPages;
use crate::sizing::PcpSizing;
use crate::stats::PcpStats;
use crate::sync::{AtomicBool, AtomicU32, Ordering, UnsafeCell, spin_hint};
use crate::types::{CpuId, MigrateType, Order, Pfn};
use crate::zone::PcpZone;

const REQ_DRAIN: u32 = 1 << 0;
const REQ_RESIZE: u32 = 1 << 1;
const FHB_BIT: u32 = 1 << 31;

/// One CPU's cache for one zone plus its mailbox. Put one per CPU in the
/// zone (any memory the caller owns) and view them as a [`PcpSet`]. In
/// the declared order: the mailbox word every operation reads first, then
/// the cache, whose own hot fields come first (a hit touches one end of
/// the slot, not both).
#[repr(C, align(64))]
pub struct PcpSlot<'m> {
    pending: AtomicU32,
    owned: AtomicBool,
    drain_requested: AtomicU32,
    drain_completed: AtomicU32,
    new_batch: AtomicU32,
    new_high_min: AtomicU32,
    new_high_max: AtomicU32,
    cache: UnsafeCell<PerCpuPages<'m>>,
}

// SAFETY: the cache inside the `UnsafeCell` is only reached through a
// `LocalPcp`, and at most one `LocalPcp` per slot exists at a time (the
// `owned` flag is taken with an acquiring compare-exchange and released with a releasing
// store, which also orders the cache contents between successive owners).
// Every other field is atomic. `PerCpuPages` is `Send` (it holds a
// `&mut [Slot]` of plain data), so moving access between threads is fine.
unsafe impl Sync for PcpSlot<'_> {}

impl<'m> PcpSlot<'m> {
    /// Wraps a cache (unowned, no request pending).
    pub fn new(cache: PerCpuPages<'m>) -> PcpSlot<'m> {
        PcpSlot {
            owned: AtomicBool::new(false),
            pending: AtomicU32::new(0),
            drain_requested: AtomicU32::new(0),
            drain_completed: AtomicU32::new(0),
            new_batch: AtomicU32::new(0),
            new_high_min: AtomicU32::new(0),
            new_high_max: AtomicU32::new(0),
            cache: UnsafeCell::new(cache),
        }
    }

    /// Whether a [`LocalPcp`] currently owns this cache (a racy snapshot).
    pub fn is_owned(&self) -> bool {
        self.owned.load(Ordering::Relaxed)
    }

    #[inline]
    fn claim(&self) -> Option<LocalPcp<'_, 'm>> {
        // A failed claim must not write the flag (it would only bounce the
        // cache line), hence a compare-exchange rather than a swap.
        match self
            .owned
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => Some(LocalPcp { slot: self }),
            Err(_) => None,
        }
    }

    /// Posts a drain request; returns its ticket.
    fn request_drain(&self) -> u32 {
        let t = self
            .drain_requested
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        self.pending.fetch_or(REQ_DRAIN, Ordering::Release);
        t
    }

    fn drained_since(&self, ticket: u32) -> bool {
        let done = self.drain_completed.load(Ordering::Acquire);
        // Wrapping comparison: done is at or after the ticket.
        (done.wrapping_sub(ticket) as i32) >= 0
    }
}

/// Proof of a drain request, to poll with [`PcpSet::is_drained`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainTicket {
    cpu: CpuId,
    ticket: u32,
}

/// All CPUs' caches of one zone, indexed by [`CpuId`].
pub struct PcpSet<'s, 'm> {
    slots: &'s [PcpSlot<'m>],
    updating: AtomicBool,
}

impl<'s, 'm> PcpSet<'s, 'm> {
    /// A set over the zone's slots (`slots[i]` belongs to CPU `i`).
    pub fn new(slots: &'s [PcpSlot<'m>]) -> PcpSet<'s, 'm> {
        PcpSet {
            slots,
            updating: AtomicBool::new(false),
        }
    }

    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when the set has no CPUs.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline]
    fn slot(&self, cpu: CpuId) -> Result<&'s PcpSlot<'m>, PcpError> {
        self.slots.get(cpu.0 as usize).ok_or(PcpError::NoSuchCpu)
    }

    /// Takes ownership of CPU `cpu`'s cache. `Busy` if someone holds it,
    /// which includes a [`PcpSet::drain_all`] or [`PcpSet::drain_cpu`] that
    /// is, for a moment, draining this unowned cache itself.
    #[inline]
    pub fn claim(&self, cpu: CpuId) -> Result<LocalPcp<'s, 'm>, PcpError> {
        self.slot(cpu)?.claim().ok_or(PcpError::Busy)
    }

    /// Asks the owner of `cpu`'s cache to drain it at its next operation.
    pub fn request_drain(&self, cpu: CpuId) -> Result<DrainTicket, PcpError> {
        let ticket = self.slot(cpu)?.request_drain();
        Ok(DrainTicket { cpu, ticket })
    }

    /// Whether the drain behind `t` has been carried out.
    pub fn is_drained(&self, t: DrainTicket) -> bool {
        self.slot(t.cpu)
            .map(|s| s.drained_since(t.ticket))
            .unwrap_or(true)
    }

    /// Drains `cpu`'s cache: directly if nobody owns it (offline CPU), else
    /// by request, waiting for the owner. While waiting it honours requests
    /// on `local` (so two CPUs draining each other cannot deadlock) and calls
    /// `kick(cpu)` (a kernel sends an IPI or yields; a host test yields).
    pub fn drain_cpu<Z: PcpZone>(
        &self,
        zone: &Z,
        cpu: CpuId,
        mut local: Option<&mut LocalPcp<'s, 'm>>,
        mut kick: impl FnMut(CpuId),
    ) -> Result<(), PcpError> {
        let slot = self.slot(cpu)?;
        if let Some(l) = local.as_deref_mut()
            && core::ptr::eq(l.slot, slot)
        {
            l.drain(zone);
            return Ok(());
        }
        if let Some(mut l) = slot.claim() {
            l.drain(zone);
            return Ok(());
        }
        let t = slot.request_drain();
        self.wait(zone, slot, cpu, t, &mut |c| {
            if let Some(l) = local.as_deref_mut() {
                l.poll(zone);
            }
            kick(c)
        });
        Ok(())
    }

    /// Waits until `slot`'s drain `target` is done, finishing it here if the
    /// owner released the handle. `idle(cpu)` runs between checks: it must
    /// honour every request addressed to the caller's own caches (in every
    /// zone), which is what makes concurrent drains end.
    fn wait<Z: PcpZone>(
        &self,
        zone: &Z,
        slot: &'s PcpSlot<'m>,
        cpu: CpuId,
        target: u32,
        idle: &mut impl FnMut(CpuId),
    ) {
        loop {
            if slot.drained_since(target) {
                return;
            }
            // The owner released the handle before honouring: finish it here.
            if let Some(mut l) = slot.claim() {
                l.poll(zone);
                return;
            }
            idle(cpu);
            spin_hint();
        }
    }

    /// The CPU whose cache `local` is, if it is one of this set's.
    fn cpu_of(&self, local: &LocalPcp<'s, 'm>) -> Option<CpuId> {
        let i = self
            .slots
            .iter()
            .position(|s| core::ptr::eq(s, local.slot))?;
        Some(CpuId(i as u32))
    }

    /// `__drain_all_pages(zone, force_all_cpus)` (spec 04 §7) for one zone:
    /// [`PcpSet::request_drain_all`], then [`PcpSet::wait_drain_all`]
    /// honouring requests on `local` while it waits. A caller with caches
    /// of several zones drains them with those two steps instead (see
    /// [`PcpSet::wait_drain_all`]).
    pub fn drain_all<Z: PcpZone>(
        &self,
        zone: &Z,
        mut local: Option<&mut LocalPcp<'s, 'm>>,
        mut kick: impl FnMut(CpuId),
    ) {
        let me = local.as_deref().and_then(|l| self.cpu_of(l));
        self.request_drain_all(zone, local.as_deref_mut());
        self.wait_drain_all(zone, me, |cpu| {
            if let Some(l) = local.as_deref_mut() {
                l.poll(zone);
            }
            kick(cpu)
        });
    }

    /// The first step of a drain of every CPU's cache: caches nobody owns
    /// are drained here, every owned one gets a request (so the owners
    /// drain in parallel), and `local`, the caller's own cache of this
    /// zone, is drained. Never waits.
    pub fn request_drain_all<Z: PcpZone>(&self, zone: &Z, local: Option<&mut LocalPcp<'s, 'm>>) {
        let local_slot = local.as_deref().map(|l| l.slot as *const PcpSlot<'m>);
        for s in self.slots {
            if local_slot.is_some_and(|p| core::ptr::eq(p, s)) {
                continue;
            }
            match s.claim() {
                Some(mut l) => {
                    l.drain(zone);
                }
                None => {
                    s.request_drain();
                }
            }
        }
        if let Some(l) = local {
            l.drain(zone);
        }
    }

    /// The second step: returns once every cache but CPU `me`'s has been
    /// emptied after [`PcpSet::request_drain_all`] began (spec 04 §12(10),
    /// absent concurrent frees).
    ///
    /// `idle(cpu)` runs while CPU `cpu` has yet to honour its request. It
    /// must honour every request addressed to the caller's own caches, in
    /// every zone the caller holds one of ([`LocalPcp::poll`] on each), and
    /// may kick `cpu` (an IPI). Then the wait ends: a waiting CPU serves
    /// everyone waiting on it, so drainers never wait on each other, and
    /// the others are owners at work (who poll at their next operation or
    /// tick) or released caches (drained here). A caller that owns a cache
    /// it does not poll in `idle` (a handle borrowed further up its stack)
    /// can wait forever for itself, or for a drainer waiting on it.
    pub fn wait_drain_all<Z: PcpZone>(
        &self,
        zone: &Z,
        me: Option<CpuId>,
        mut idle: impl FnMut(CpuId),
    ) {
        for (i, s) in self.slots.iter().enumerate() {
            let cpu = CpuId(i as u32);
            if me == Some(cpu) {
                continue;
            }
            // Every request posted before this call has a ticket <= this
            // value.
            let target = s.drain_requested.load(Ordering::Relaxed);
            self.wait(zone, s, cpu, target, &mut idle);
        }
    }

    /// `pageset_update` for every CPU (spec 04 §2.3): new zone-level values,
    /// applied by each owner at its next operation (or right away for
    /// unowned caches). Updaters are serialised here, as by Linux's
    /// `pcp_batch_high_lock`, so an owner never sees a mix of two updates.
    pub fn update_sizing(&self, sizing: PcpSizing) {
        while self
            .updating
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_hint();
        }
        for s in self.slots {
            let fhb = if sizing.free_high_batch() { FHB_BIT } else { 0 };
            s.new_batch.store(sizing.batch() | fhb, Ordering::Relaxed);
            s.new_high_min.store(sizing.high_min(), Ordering::Relaxed);
            s.new_high_max.store(sizing.high_max(), Ordering::Relaxed);
            s.pending.fetch_or(REQ_RESIZE, Ordering::Release);
            if let Some(mut l) = s.claim() {
                l.apply_requests_without_zone();
            }
        }
        self.updating.store(false, Ordering::Release);
    }
}

/// Exclusive ownership of one CPU's cache: the token the fast path needs.
///
/// Obtained from [`PcpSet::claim`]; released on drop. Every method checks
/// the mailbox with one relaxed load first.
pub struct LocalPcp<'s, 'm> {
    slot: &'s PcpSlot<'m>,
}

impl Drop for LocalPcp<'_, '_> {
    #[inline]
    fn drop(&mut self) {
        self.slot.owned.store(false, Ordering::Release);
    }
}

impl<'s, 'm> LocalPcp<'s, 'm> {
    #[inline(always)]
    fn with<R>(&mut self, f: impl FnOnce(&mut PerCpuPages<'m>) -> R) -> R {
        // SAFETY: `self` is the only `LocalPcp` for this slot (claimed with
        // an acquiring compare-exchange of `owned`, released only by `drop`), and we hold
        // `&mut self`, so no other reference to the cache exists for the
        // duration of `f`. Remote CPUs only touch the atomic mailbox fields.
        self.slot.cache.with_mut(|p| f(unsafe { &mut *p }))
    }

    #[inline(always)]
    fn has_requests(&self) -> bool {
        self.slot.pending.load(Ordering::Relaxed) != 0
    }

    /// Honours pending remote requests (resize, then drain). Called at the
    /// start of every operation; call it from idle loops too.
    #[inline]
    pub fn poll<Z: PcpZone>(&mut self, zone: &Z) {
        if self.has_requests() {
            self.serve(zone);
        }
    }

    fn apply_requests_without_zone(&mut self) {
        // A drain needs the zone; leave that bit for the next operation.
        if self.slot.pending.load(Ordering::Acquire) & REQ_RESIZE != 0 {
            self.slot.pending.fetch_and(!REQ_RESIZE, Ordering::Acquire);
            self.apply_resize();
        }
    }

    fn apply_resize(&mut self) {
        let b = self.slot.new_batch.load(Ordering::Relaxed);
        let lo = self.slot.new_high_min.load(Ordering::Relaxed);
        let hi = self.slot.new_high_max.load(Ordering::Relaxed);
        if let Ok(s) = PcpSizing::new(b & !FHB_BIT, lo, hi) {
            let s = s.with_free_high_batch(b & FHB_BIT != 0);
            self.with(|c| c.set_sizing(s));
        }
    }

    #[cold]
    #[inline(never)]
    fn serve<Z: PcpZone>(&mut self, zone: &Z) {
        let req = self.slot.pending.swap(0, Ordering::Acquire);
        if req & REQ_RESIZE != 0 {
            self.apply_resize();
        }
        if req & REQ_DRAIN != 0 {
            // Read after the acquiring swap: covers every request whose
            // pending bit we just consumed (their increments came first).
            let generation = self.slot.drain_requested.load(Ordering::Relaxed);
            self.with(|c| c.drain(zone));
            self.slot
                .drain_completed
                .store(generation, Ordering::Release);
        }
    }

    /// [`PerCpuPages::alloc`] on this CPU's cache.
    #[inline(always)]
    pub fn alloc<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
    ) -> Result<Pfn, AllocMiss> {
        self.poll(zone);
        self.with(|c| c.alloc(zone, order, mt))
    }

    /// [`PerCpuPages::alloc_home_hit`] on this CPU's cache: `None`, nothing
    /// changed, also while a remote request waits (the caller's
    /// [`LocalPcp::alloc`] then honours it first).
    #[inline(always)]
    pub fn alloc_home_hit(&mut self, mt: MigrateType) -> Option<Pfn> {
        if self.has_requests() {
            return None;
        }
        self.with(
            #[inline(always)]
            |c| c.alloc_home_hit(mt),
        )
    }

    /// [`PerCpuPages::try_alloc`] on this CPU's cache, for a caller that
    /// must not wait (it may have interrupted a holder of the zone lock).
    /// Unlike every other operation it does not honour pending requests:
    /// a drain spills to the zone, which may mean waiting for its lock,
    /// and a drain acknowledged with frames left in the cache would let
    /// its requester go on too early. So while a request is pending it
    /// leaves the cache alone and returns [`AllocMiss::Busy`]; the owner,
    /// or the requester once the handle is released, honours it as
    /// before. Without a pending request, a block it takes or a refill it
    /// makes is what any allocation does between two drains: a drain
    /// requested meanwhile is honoured later, and empties the cache.
    #[inline]
    pub fn try_alloc<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
    ) -> Result<Pfn, AllocMiss> {
        if self.has_requests() {
            return Err(AllocMiss::Busy);
        }
        self.with(|c| c.try_alloc(zone, order, mt))
    }

    /// [`PerCpuPages::alloc_bulk`] on this CPU's cache.
    #[inline]
    pub fn alloc_bulk<Z: PcpZone>(
        &mut self,
        zone: &Z,
        order: Order,
        mt: MigrateType,
        out: &mut [Pfn],
    ) -> Result<usize, AllocMiss> {
        self.poll(zone);
        self.with(|c| c.alloc_bulk(zone, order, mt, out))
    }

    /// [`PerCpuPages::free`] on this CPU's cache.
    #[inline(always)]
    pub fn free<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frame: Pfn,
        order: Order,
        mt: MigrateType,
    ) -> Result<FreeOutcome, PcpError> {
        self.poll(zone);
        self.with(|c| c.free(zone, frame, order, mt))
    }

    /// [`PerCpuPages::free_home_hit`] on this CPU's cache:
    /// [`HomeFree::Other`], nothing changed, also while a remote request
    /// waits (the caller's [`LocalPcp::free`] then honours it first).
    #[inline(always)]
    pub fn free_home_hit<Z: PcpZone>(&mut self, zone: &Z, frame: Pfn, mt: MigrateType) -> HomeFree {
        if self.has_requests() {
            return HomeFree::Other;
        }
        self.with(
            #[inline(always)]
            |c| c.free_home_hit(zone, frame, mt),
        )
    }

    /// [`PerCpuPages::free_foreign`] on this CPU's cache, after a
    /// [`HomeFree::Foreign`] (which saw no remote request waiting).
    #[inline]
    pub fn free_foreign<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frame: Pfn,
    ) -> Result<FreeOutcome, PcpError> {
        self.with(|c| c.free_foreign(zone, frame))
    }

    /// [`PerCpuPages::alloc_hit`] on this CPU's cache: `None`, nothing
    /// changed, also while a remote request waits (the caller's
    /// [`LocalPcp::alloc`] then honours it first).
    #[inline(always)]
    pub fn alloc_hit(&mut self, mt: MigrateType, home_ok: impl FnOnce() -> bool) -> Option<Pfn> {
        if self.has_requests() {
            return None;
        }
        self.with(
            #[inline(always)]
            |c| c.alloc_hit(mt, home_ok),
        )
    }

    /// [`PerCpuPages::free_hit`] on this CPU's cache: [`HomeFree::Other`],
    /// nothing changed, also while a remote request waits (the caller's
    /// [`LocalPcp::free`] then honours it first).
    #[inline(always)]
    pub fn free_hit<Z: PcpZone>(&mut self, zone: &Z, frame: Pfn, mt: MigrateType) -> HomeFree {
        if self.has_requests() {
            return HomeFree::Other;
        }
        self.with(
            #[inline(always)]
            |c| c.free_hit(zone, frame, mt),
        )
    }

    /// [`PerCpuPages::alloc_run`] on this CPU's cache.
    #[inline]
    pub fn alloc_run<Z: PcpZone>(&mut self, zone: &Z, n: u32, mt: MigrateType) -> Option<Pfn> {
        self.poll(zone);
        self.with(|c| c.alloc_run(zone, n, mt))
    }

    /// [`PerCpuPages::free_run`] on this CPU's cache.
    #[inline]
    pub fn free_run<Z: PcpZone>(
        &mut self,
        zone: &Z,
        first: Pfn,
        n: u32,
        mt: MigrateType,
    ) -> Option<FreeOutcome> {
        self.poll(zone);
        self.with(|c| c.free_run(zone, first, n, mt))
    }

    /// [`PerCpuPages::free_bulk`] on this CPU's cache (one mailbox check).
    pub fn free_bulk<Z: PcpZone>(
        &mut self,
        zone: &Z,
        frames: &[Pfn],
        order: Order,
        mt: MigrateType,
    ) -> Result<usize, (usize, PcpError)> {
        self.poll(zone);
        self.with(|c| c.free_bulk(zone, frames, order, mt))
    }

    /// The periodic step (spec 04 §6): honours requests, then decays `high`.
    pub fn decay<Z: PcpZone>(&mut self, zone: &Z) -> bool {
        self.poll(zone);
        self.with(|c| c.decay(zone))
    }

    /// `drain_local_pages` for this zone: empties the cache.
    pub fn drain<Z: PcpZone>(&mut self, zone: &Z) -> u64 {
        self.poll(zone);
        self.with(|c| c.drain(zone))
    }

    /// Installs new sizing on this CPU's cache directly.
    pub fn set_sizing(&mut self, sizing: PcpSizing) {
        self.with(|c| c.set_sizing(sizing))
    }

    /// Read access to the cache (counters, `high`, `count`, validation).
    pub fn inspect<R>(&mut self, f: impl FnOnce(&PerCpuPages<'m>) -> R) -> R {
        self.with(|c| f(c))
    }

    /// Counters of this cache.
    pub fn stats(&mut self) -> PcpStats {
        self.with(|c| c.stats())
    }

    /// Base pages cached.
    pub fn count(&mut self) -> u32 {
        self.with(|c| c.count())
    }

    /// Current `high`.
    pub fn high(&mut self) -> u32 {
        self.with(|c| c.high())
    }
}
