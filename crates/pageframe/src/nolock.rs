//! Allocation from any context (Linux 6.15's `alloc_pages_nolock`): an
//! NMI handler, a tracer or profiler, code that may have interrupted the
//! machine on its own CPU in the middle of an allocation. Such a caller
//! cannot wait for any lock, since the holder may be the code it
//! interrupted; so every lock here is taken with `try_lock`, and a call
//! that would wait fails instead ([`crate::AllocError::Busy`]).
//!
//! The call reuses the ordinary paths' pieces, each in a variant that
//! never waits: a CPU's cache claimed by compare-and-swap and served
//! without its mailbox ([`pageframe_pcp::LocalPcp::try_alloc`]), refilled
//! under the zone's `try_lock` ([`NoWait`]); a stripe's reservation taken
//! without a new one ([`crate::stripe::Stripes::try_alloc`]); a block of
//! the zone's pageblock pool; the zone's free lists under its `try_lock`.

use pageframe_buddy::{Order, Pfn};
use pageframe_mobility::MigrateType;
use pageframe_pcp::{AllocMiss, CpuId, PcpZone, RefillSink, SpillBatch, ZoneFlags};

use crate::block::Block;
use crate::cache::cached_order;
use crate::debug::{Caller, NoHooks};
use crate::error::AllocError;
use crate::gfp::{AllocFlags, Gfp};
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::node_id::NodeId;
use crate::zone_core::Zone;
use crate::zone_kind::ZoneKind;
use crate::zone_kind::ZoneRef;

/// The flags [`Machine::try_alloc`] accepts: where the block comes from
/// and what the caller does with it. The others ask for what the call
/// never does: sleep, reclaim or wake the reclaimer (Linux allows no
/// reclaim bit here), dip into reserves, or retry.
const ANY_CONTEXT: Gfp = Gfp::DMA
    .union(Gfp::DMA32)
    .union(Gfp::HIGHMEM)
    .union(Gfp::MOVABLE)
    .union(Gfp::RECLAIMABLE)
    .union(Gfp::THISNODE)
    .union(Gfp::HARDWALL)
    .union(Gfp::NOWARN)
    .union(Gfp::ZERO)
    .union(Gfp::COMP)
    .union(Gfp::NOMEMALLOC);

/// # Allocation from any context
impl<'a, P: Platform> Machine<'a, P> {
    /// Allocates `2^order` frames for a caller that must never wait (Linux's
    /// `alloc_pages_nolock`): an NMI handler, a tracing or profiling hook, a
    /// BPF-like program, anything that may have interrupted this machine on
    /// its own CPU while it held a zone's lock, CPU `cpu`'s cache or a
    /// stripe. Every lock is taken with `try_lock`; where one is held the
    /// call goes on to the next source, and if none serves it returns
    /// [`AllocError::Busy`] at once, with nothing changed.
    ///
    /// For each zone of `node`'s zonelist, at the low watermark, it takes:
    /// 1. a block from CPU `cpu`'s cache (orders 0..=3 and the pageblock
    ///    order), or from a refill of it, when the cache is free (claimed
    ///    for this call, as [`Machine::alloc_on`] does) and no other CPU's
    ///    request is pending on it. A pending drain would spill to the
    ///    zone, and a drain acknowledged with frames left behind would let
    ///    its requester go on too early, so such a cache is left alone: its
    ///    owner honours the request, or the requester once it is released;
    /// 2. an order-0 frame from an order-0 stripe's reservation, when a
    ///    stripe is free and has one (never a new reservation);
    /// 3. a block from the zone's free lists, when its lock is free.
    ///
    /// Never anything else: no compaction, reclaim, drain or wake-up, no
    /// reserves below the low watermark. A block from here is an
    /// ordinary block, freed by any free call from a context that may wait.
    ///
    /// `gfp` may hold a zone selector (`DMA`, `DMA32`, `HIGHMEM`), a
    /// mobility bit, `THISNODE`, `HARDWALL`, `NOWARN`, `ZERO` (the caller
    /// zeroes), `COMP` and `NOMEMALLOC`; the usual request is
    /// `Gfp::empty()`, unmovable memory of the Normal zone. Any other flag
    /// asks for what the call never does (sleeping, reclaim, waking the
    /// reclaimer: `KERNEL`, `ATOMIC` and `NOWAIT` all have one; the reserves
    /// of `HIGH` and `MEMALLOC`; the retries of `NOFAIL`) and is refused:
    /// [`AllocError::InvalidGfp`].
    ///
    /// Name the CPU the caller runs on: any CPU is correct, but another
    /// CPU's cache is usually claimed by its owner. The zones' lock type
    /// does not matter here (no lock is waited for), so a kernel whose
    /// zones take a plain spin lock may call this from interrupt handlers.
    ///
    /// Of the debugging tools ([`crate::debug`]), fault injection, the
    /// counters and the owner records work as for every allocation (atomics
    /// in the machine's memory). Poisoning checks and initialises the block
    /// through [`crate::debug::Hooks::check`] and
    /// [`crate::debug::Hooks::fill`], which touch memory and nothing else;
    /// a write found is counted
    /// ([`crate::debug::Inspect::use_after_free_reports`]) but not
    /// reported, and no trace event is raised:
    /// [`crate::debug::Hooks::event`] is the kernel's code, which may take
    /// locks. On targets without 64-bit atomics (riscv32imac) the
    /// zones' free counts and the counters sit behind a lock-based
    /// fallback: there the call is not safe in an NMI handler.
    ///
    /// ```
    /// # use pageframe::{AllocError, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x1000), Pfn(0x9000));
    /// # let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// # let bytes = m.pcp_bytes(2).unwrap();
    /// # m.enable_pcp(2, Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice())).unwrap();
    /// // In an NMI handler on CPU 1: a page for the profiler's buffer, or nothing.
    /// let page = match m.try_alloc(CpuId(1), NodeId::ZERO, Gfp::empty(), Order::ZERO) {
    ///     Ok(page) => page,
    ///     Err(AllocError::Busy | AllocError::OutOfMemory) => return, // drop the sample
    ///     Err(e) => panic!("{e}"),
    /// };
    /// // Later, where waiting is allowed:
    /// m.free(page).unwrap();
    /// // A request that may sleep or reclaim is not one for this call.
    /// assert_eq!(m.try_alloc(CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap_err(), AllocError::InvalidGfp);
    /// ```
    #[inline]
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn try_alloc(
        &self,
        cpu: CpuId,
        node: NodeId,
        gfp: Gfp,
        order: Order,
    ) -> Result<Block, AllocError> {
        self.accounted(gfp, order, Some(cpu), Caller::here(), false, || {
            self.try_alloc_untraced(cpu, node, gfp, order)
        })
    }

    #[inline(always)]
    fn try_alloc_untraced(
        &self,
        cpu: CpuId,
        node: NodeId,
        gfp: Gfp,
        order: Order,
    ) -> Result<Block, AllocError> {
        if !ANY_CONTEXT.contains(gfp) {
            return Err(AllocError::InvalidGfp);
        }
        // The common case first, as in `Machine::alloc_on`: CPU `cpu`'s
        // cache of the first zone the request tries.
        let mut busy = false;
        let first = self.preferred(node, gfp);
        if let Some((r, highest)) = first
            && let Some(z) = self.zone(r)
        {
            match self.try_cache(
                z,
                cpu,
                gfp,
                order,
                self.fast_flags_at(node, gfp, r),
                highest,
            ) {
                Ok(pfn) => return Ok(Block::new(self.id, r, pfn, order)),
                Err(b) => busy = b,
            }
        }
        self.try_zones(cpu, node, gfp, order, first.map(|(r, _)| r), busy)
    }

    /// The zonelist walk after a miss in the first zone's cache (`tried`):
    /// each zone's cache, stripes and free lists.
    #[inline(never)]
    fn try_zones(
        &self,
        cpu: CpuId,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        tried: Option<ZoneRef>,
        mut busy: bool,
    ) -> Result<Block, AllocError> {
        let (list, highest) = self.prepare(node, gfp)?;
        // As the fast path of `Machine::alloc`: first without fragmenting
        // fallbacks where it would (spec 02 §5.5), then with them.
        let mut flags = self.fast_flags(node, gfp);
        let mut caches = true;
        loop {
            let mut last = AllocError::NoEligibleZone;
            for r in list.eligible(highest) {
                let Some(z) = self.zone(r) else { continue };
                if caches && Some(r) != tried {
                    match self.try_cache(z, cpu, gfp, order, flags, highest) {
                        Ok(pfn) => return Ok(Block::new(self.id, r, pfn, order)),
                        Err(b) => busy |= b,
                    }
                }
                match self.try_free_lists(z, gfp, order, flags, highest) {
                    Ok(pfn) => return Ok(Block::new(self.id, r, pfn, order)),
                    Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
                    Err(e) => {
                        busy |= e == AllocError::Busy;
                        last = e;
                    }
                }
            }
            if !flags.contains(AllocFlags::NOFRAGMENT) {
                // A held lock may be why nothing served.
                return Err(match last {
                    AllocError::OutOfMemory if busy => AllocError::Busy,
                    e => e,
                });
            }
            flags.remove(AllocFlags::NOFRAGMENT);
            // A refill takes no notice of NOFRAGMENT: the caches had their
            // chance.
            caches = false;
        }
    }

    /// A block from CPU `cpu`'s cache of `z` (refilled if the zone's lock
    /// is free), or whether a held lock or a pending request was why not.
    #[inline(always)]
    fn try_cache(
        &self,
        z: &Zone<'a, P::Lock>,
        cpu: CpuId,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, bool> {
        let Some(set) = &z.pcp else { return Err(false) };
        if !(cached_order(order) && z.watermark_fast(order, flags, highest)) {
            return Err(false);
        }
        let mt = gfp.migratetype();
        match set.claim(cpu) {
            Ok(mut local) => {
                let zone = NoWait::new(z, cpu);
                match local.try_alloc(&zone, order, mt) {
                    Ok(p) => {
                        // Off our own list: ours alone.
                        z.states.set_allocated(p, order, mt);
                        zone.count_hit();
                        Ok(p)
                    }
                    Err(AllocMiss::Busy) => Err(true),
                    Err(AllocMiss::NotCached | AllocMiss::ZoneEmpty) => Err(false),
                }
            }
            // Held further up this CPU's stack, or by a drainer.
            Err(pageframe_pcp::PcpError::Busy) => Err(true),
            Err(_) => Err(false),
        }
    }

    /// A block of the pageblock order from the zone's pool, an order-0
    /// frame from a stripe's reservation, or a block from the zone's free
    /// lists under its `try_lock` (`Busy` when it is held).
    fn try_free_lists(
        &self,
        z: &Zone<'a, P::Lock>,
        gfp: Gfp,
        order: Order,
        flags: AllocFlags,
        highest: ZoneKind,
    ) -> Result<Pfn, AllocError> {
        if let Some(p) = z.pool_alloc(gfp, order, flags, highest) {
            return Ok(p);
        }
        let mt = gfp.migratetype();
        if z.striped(order, flags, highest)
            && let Some(p) = z
                .stripes
                .try_alloc(mt, |p| z.states.set_allocated(p, order, mt))
        {
            return Ok(p);
        }
        match z.inner.try_lock() {
            Some(locked) => z.alloc_locked(locked, &NoHooks, gfp, order, flags, highest),
            None => Err(AllocError::Busy),
        }
    }
}

/// A zone as a cache that must not wait reaches it: refills under the
/// zone's `try_lock`, counted but not traced.
struct NoWait<'z, 'a, R: RawMutex> {
    zone: &'z Zone<'a, R>,
    #[cfg(feature = "vmstat")]
    cpu: CpuId,
    /// Whether the call refilled the cache (its block was no hit).
    #[cfg(feature = "vmstat")]
    refilled: core::cell::Cell<bool>,
}

impl<'z, 'a, R: RawMutex> NoWait<'z, 'a, R> {
    fn new(zone: &'z Zone<'a, R>, cpu: CpuId) -> Self {
        let _ = cpu;
        NoWait {
            zone,
            #[cfg(feature = "vmstat")]
            cpu,
            #[cfg(feature = "vmstat")]
            refilled: core::cell::Cell::new(false),
        }
    }

    /// Counts a block that came off the cache without a refill.
    fn count_hit(&self) {
        #[cfg(feature = "vmstat")]
        if !self.refilled.get() {
            self.zone.vm(Some(self.cpu)).pcp_hit();
        }
    }
}

impl<R: RawMutex> PcpZone for NoWait<'_, '_, R> {
    /// Never waits: [`PcpZone::try_refill`], whatever it gets.
    fn refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        let _ = self.try_refill(order, mt, sink);
    }

    /// Never waits, so never spills: the blocks stay cached (nothing is
    /// lost; `LocalPcp::try_alloc` never spills anyway).
    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let _ = batch;
    }

    fn try_refill(&self, order: Order, mt: MigrateType, sink: &mut RefillSink<'_, '_>) -> bool {
        let Some(locked) = self.zone.inner.try_lock() else {
            return false;
        };
        self.zone.refill_locked(locked, &NoHooks, order, mt, sink);
        #[cfg(feature = "vmstat")]
        {
            self.refilled.set(true);
            self.zone.vm(Some(self.cpu)).pcp_refill(sink.taken() as u64);
        }
        true
    }

    fn flags(&self) -> ZoneFlags {
        self.zone.pcp_flags()
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::{AllocError, Block, CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn};
    use crate::{PfnRange, ZoneKind};

    fn machine() -> &'static Machine<'static> {
        let m: &'static mut Machine<'static> = std::boxed::Box::leak(
            crate::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed(),
        );
        let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + 2048));
        let meta = std::boxed::Box::leak(std::boxed::Box::new_uninit_slice(
            m.zone_metadata_bytes(span),
        ));
        m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta)
            .unwrap();
        m.add_free_range(span).unwrap();
        m
    }

    /// `m.try_alloc` as the code an NMI interrupted would see it: that
    /// code (this thread) waits for the call, as it cannot run until the
    /// handler returns. A call that waits for a lock this thread holds
    /// fails the test after 10 s instead of hanging it.
    fn interrupt(m: &'static Machine<'static>) -> Result<Block, AllocError> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(m.try_alloc(CpuId(0), NodeId::ZERO, Gfp::MOVABLE, Order::ZERO));
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the call waited for a lock its CPU holds")
    }

    /// The code it interrupted holds an order-0 stripe's lock (here, giving
    /// the stripe's reservation back): the call passes that stripe by and
    /// takes the zone; when that code holds the zone's lock as well (a
    /// stripe's refill takes it), `Busy`. Nothing is lost either way.
    #[test]
    fn with_a_stripe_held_by_its_own_cpu_it_never_waits() {
        let m = machine();
        let z = m.zone_of(Pfn(1 << 20)).unwrap();
        let first = m.alloc(NodeId::ZERO, Gfp::MOVABLE, Order::ZERO).unwrap();
        assert!(m.stripe_frames() > 0);
        let mut got = std::vec::Vec::new();
        let n = z.stripes.release(|r| {
            got.push(interrupt(m));
            let held = z.inner.lock();
            got.push(interrupt(m));
            drop(held);
            let mut zi = z.inner.lock();
            zi.buddy.unreserve(r).unwrap();
            z.after_zone_op(&zi);
        });
        assert_eq!(n, 1);
        let busy = got.pop().unwrap();
        assert_eq!(busy.unwrap_err(), AllocError::Busy);
        let served = got.pop().unwrap().unwrap();
        assert_ne!(served.pfn(), first.pfn());
        m.free(served).unwrap();
        m.free(first).unwrap();
        assert_eq!(m.free_pages(), m.managed_pages());
        m.validate().unwrap();
    }
}
