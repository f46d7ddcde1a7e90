//! A CPU's handle on the machine: its per-CPU cache of every zone, claimed
//! together (spec 04).
//!
//! Holding the handle is the proof that nothing else uses this CPU's
//! caches: it is handed out once per CPU ([`Machine::cpu`], one
//! compare-and-swap per zone) and given back when dropped. A kernel claims
//! each CPU's handle at bring-up, keeps it in that CPU's per-CPU area and
//! reaches it with preemption (and allocating interrupts) off; an interrupt
//! that finds the handle in use allocates through [`Machine::alloc`]
//! instead, as Linux's failed trylock falls back to the zone.

use core::mem::MaybeUninit;

use pageframe_buddy::{FreeError, Order, Pfn};
use pageframe_mobility::MigrateType;
use pageframe_pcp::{CpuId, PcpStats};

use crate::block::{Block, MachineId, RawError, Refused};
use crate::cache::{CacheFree, Claimed, Locals, Preferred, Traced};
use crate::debug::{Caller, NoHooks};
use crate::error::{AllocError, CpuError, PcpSetupError, SetupError};
use crate::gfp::Gfp;
use crate::lock::{Platform, SpinLock};
use crate::machine::{Machine, zonelist_of};
use crate::node_id::{MAX_CPUS, NodeId};
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind, ZoneRef};

/// One CPU's cache of one zone, as [`CpuCache::cache_info`] reports it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CacheInfo {
    /// Its counters.
    pub stats: PcpStats,
    /// Base pages it holds.
    pub count: u32,
    /// Its current `high` (spill threshold, in base pages).
    pub high: u32,
    /// The floor `high` decays to.
    pub high_min: u32,
    /// The ceiling `high` grows to.
    pub high_max: u32,
}

/// A CPU's handle: allocates and frees through its per-CPU caches. See the
/// module docs for the contract; without per-CPU caches
/// ([`Machine::enable_pcp`] not called) it allocates from the zones.
pub struct CpuCache<'m, 'a, P: Platform = (SpinLock, NoHooks)> {
    machine: &'m Machine<'a, P>,
    /// The machine's identity, kept here for the blocks' checks.
    id: MachineId,
    cpu: CpuId,
    node: NodeId,
    locals: Locals<'m, 'a, P::Lock>,
    /// By zonelist and highest zone: where in `locals` the claimed cache of
    /// the first zone such a request tries is (`Preferred::None` where the
    /// handle has none). A copy of the node's zonelists' heads, which
    /// cannot change while the handle borrows the machine (they are
    /// rebuilt only through `&mut Machine`): the hit path's zone in one
    /// load.
    preferred: [[Preferred; NR_ZONE_KINDS]; 2],
    /// The machine's hooks as this CPU's caches report to them, made once
    /// for the handle rather than on the stack at every operation.
    traced: Traced<'m, P::Hooks>,
    /// The zone index ([`ZoneRef::index`]) of the last
    /// [`CpuCache::free_raw`], tried first by the next.
    last_raw: usize,
}

/// # Per-CPU caches
///
/// Memory for the caches, each CPU's handle, and draining them.
impl<'a, P: Platform> Machine<'a, P> {
    /// Bytes [`Machine::enable_pcp`] needs for `cpus` CPUs, given the
    /// memory handed over so far (a zone's `batch` follows its size up to
    /// 1 MiB, and each CPU's cache of it gets `2 * (batch << 5) + 2` slots
    /// of 16 bytes: the order-0 frames it holds live in bitmaps of its home
    /// chunks, so the slots hold only its foreign frames and higher-order
    /// blocks; see the crate docs' table). `NoMemory` before any memory is
    /// handed over.
    pub fn pcp_bytes(&self, cpus: u32) -> Result<usize, SetupError> {
        if cpus == 0 || cpus as usize > MAX_CPUS {
            return Err(PcpSetupError::CpuCount.into());
        }
        if self.managed_pages() == 0 {
            return Err(PcpSetupError::NoMemory.into());
        }
        let mut total = 0usize;
        for z in self.all_zones() {
            let b = z.pcp_bytes(cpus, self.local_cpus(cpus))?;
            total = total.checked_add(b).ok_or(PcpSetupError::CpuCount)?;
        }
        Ok(total)
    }

    /// CPUs on a node, assuming CPUs spread evenly over the nodes that
    /// have them.
    pub(crate) fn local_cpus(&self, cpus: u32) -> u32 {
        let with_cpus = self
            .topology()
            .nodes()
            .filter(|&n| self.topology().has_cpus(n))
            .count()
            .max(1) as u32;
        (cpus / with_cpus).max(1)
    }

    /// Sets up per-CPU caches for CPUs `0..cpus` in every zone present,
    /// from `mem` (at least [`Machine::pcp_bytes`] bytes). Call after the
    /// memory is handed over (the caches are sized from it: `NoMemory`
    /// before) and before sharing the machine.
    pub fn enable_pcp(
        &mut self,
        cpus: u32,
        mem: &'a mut [MaybeUninit<u8>],
    ) -> Result<(), SetupError> {
        let needed = self.pcp_bytes(cpus)?;
        if self.cpus != 0 {
            return Err(PcpSetupError::AlreadyEnabled.into());
        }
        if mem.len() < needed {
            return Err(PcpSetupError::MemoryTooSmall {
                needed,
                given: mem.len(),
            }
            .into());
        }
        let local = self.local_cpus(cpus);
        let mut rest = mem;
        for node in self.nodes_mut() {
            for z in node.zones_mut() {
                rest = z.enable_pcp(cpus, local, rest)?;
            }
        }
        self.cpus = cpus;
        Ok(())
    }

    /// [`Machine::enable_pcp`] with the caches' memory taken from the
    /// machine itself: [`Machine::pcp_bytes`] of contiguous frames allocated
    /// with `gfp` (a contiguous range if one is free, else the block that
    /// holds them) and never freed, written through `virt`. Returns the
    /// frames taken. `gfp` says where they may come from: a kernel whose
    /// map covers only low memory passes [`Gfp::DMA32`].
    ///
    /// # Safety
    ///
    /// Every frame `gfp` may return is mapped writable at `virt` of its
    /// address, contiguously, for the machine's life (`'a`).
    pub unsafe fn enable_pcp_in_place(
        &mut self,
        cpus: u32,
        gfp: Gfp,
        virt: impl Fn(pageframe_buddy::PhysAddr) -> *mut u8,
    ) -> Result<pageframe_buddy::PfnRange, SetupError> {
        let needed = self.pcp_bytes(cpus)?;
        if self.cpus != 0 {
            return Err(PcpSetupError::AlreadyEnabled.into());
        }
        let pages = (needed as u64).div_ceil(pageframe_buddy::PAGE_SIZE);
        let node = NodeId::ZERO;
        let range = self
            .alloc_contig(node, gfp, pages, 1, &mut crate::migrator::NoMigration)
            .map(crate::block::Segment::into_raw)
            .ok()
            .or_else(|| {
                // A guest smaller than a pageblock has no range to isolate.
                let order = Order::for_pages(pages)?;
                let (p, _) = self.alloc(node, gfp, order).ok()?.into_raw();
                Some(pageframe_buddy::PfnRange::new(p, p + order.pages()))
            })
            .ok_or(PcpSetupError::NoRoom { needed })?;
        let at = virt(range.start.addr()).cast::<MaybeUninit<u8>>();
        // SAFETY: the frames were just allocated, never to be freed, and
        // the caller maps every frame `gfp` may return writable at `virt`,
        // contiguously, for `'a`.
        let mem = unsafe { core::slice::from_raw_parts_mut(at, needed) };
        if let Err(e) = self.enable_pcp(cpus, mem) {
            // SAFETY: allocated above, held only as this number.
            let back = unsafe { self.free_raw(range) };
            debug_assert!(back.is_ok(), "{back:?}");
            return Err(e);
        }
        Ok(range)
    }

    /// See [`crate::debug::Inspect::pcp_cpus`].
    pub(crate) fn pcp_cpus(&self) -> u32 {
        self.cpus
    }

    /// Claims CPU `cpu`'s caches of every zone, for a CPU on node `node`
    /// (the node its allocations prefer). `Busy` if the CPU's handle is
    /// already out, or, for a moment, while a [`Machine::drain_pcp`] on
    /// another CPU empties this unowned cache (claim handles before starting
    /// drainers, or retry); `NoSuchCpu` beyond the CPUs set up;
    /// `NoSuchNode` for a node outside the topology ([`CpuError`]). Without
    /// per-CPU caches the handle allocates from the zones.
    pub fn cpu(&self, cpu: CpuId, node: NodeId) -> Result<CpuCache<'_, 'a, P>, CpuError> {
        if !self.topology().contains(node) {
            return Err(CpuError::NoSuchNode(node));
        }
        let mut locals = Locals::new(cpu);
        // The zone a kernel's ordinary request tries first.
        let first = Gfp::KERNEL
            .request_zone()
            .and_then(|k| self.first_zone(node, zonelist_of(Gfp::KERNEL), k));
        for z in self.all_zones() {
            if let Some(set) = &z.pcp {
                // An error drops the caches claimed so far: all or nothing.
                let meta = Block::zone_meta(self.id, z.zone_ref());
                let c = (z, set.claim(cpu)?, meta);
                locals.insert(z.zone_ref().index(), c, first == Some(z.zone_ref()));
            }
        }
        let preferred = core::array::from_fn(|list| {
            ZoneKind::ALL.map(|highest| match self.first_zone(node, list, highest) {
                Some(r) => locals.preferred(r.index()),
                None => Preferred::None,
            })
        });
        Ok(CpuCache {
            machine: self,
            id: self.id,
            cpu,
            node,
            locals,
            preferred,
            traced: self.traced_cpu(Some(cpu)),
            last_raw: 0,
        })
    }

    /// [`CpuCache::alloc`] for a caller that keeps no handle (a global
    /// allocator's entry point, reached from any CPU with no per-CPU
    /// state): claims CPU `cpu`'s cache of the zone the request prefers
    /// for this one call, for a CPU on `node`. If it is out (held further
    /// up this CPU's stack, by an interrupted call, or for a moment by
    /// another CPU's drain), `cpu` has no caches or the request is not one
    /// the cache serves, the call goes to the zones
    /// ([`Machine::alloc`]), as Linux's failed trylock does. Name the CPU
    /// the caller runs on, with preemption off: any CPU is correct, but
    /// only the caller's own keeps its cache warm and unshared.
    ///
    /// ```
    /// # use pageframe::{CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x1000), Pfn(0x9000));
    /// # let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// let bytes = m.pcp_bytes(2).unwrap();
    /// m.enable_pcp(2, Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice())).unwrap();
    /// // In the kernel's allocator entry point, interrupts off, on CPU 1:
    /// let frame = m.alloc_on(CpuId(1), NodeId::ZERO, Gfp::KERNEL, Order::ZERO).unwrap();
    /// m.free_on(CpuId(1), frame).unwrap();
    /// ```
    #[inline]
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_on(
        &self,
        cpu: CpuId,
        node: NodeId,
        gfp: Gfp,
        order: Order,
    ) -> Result<Block, AllocError> {
        self.traced(
            node,
            gfp,
            order,
            Some(cpu),
            Caller::here(),
            #[inline(always)]
            || self.alloc_on_untraced(cpu, node, gfp, order),
        )
    }

    #[inline(always)]
    fn alloc_on_untraced(
        &self,
        cpu: CpuId,
        node: NodeId,
        gfp: Gfp,
        order: Order,
    ) -> Result<Block, AllocError> {
        // Only the cache of the first zone the request would try is
        // claimed: a claim of every zone's (a handle) costs more than the
        // allocation. A request that cache does not serve goes to the zones.
        if let Some((r, highest)) = self.preferred(node, gfp)
            && let Some(z) = self.zone(r)
            && let Some(set) = &z.pcp
            && let Ok(mut local) = set.claim(cpu)
        {
            let flags = self.fast_flags_at(node, gfp, r);
            let hooks = self.traced_cpu(Some(cpu));
            // An order-0 request as a handle's hit first: a hot frame, then
            // the home (spec 04 §5.7); a refill after that.
            if order == Order::ZERO
                && let Some(pfn) = z.cache_home_hit(&hooks, &mut local, gfp, flags, highest)
            {
                return Ok(Block::new(self.id, r, pfn, order));
            }
            if let Some(pfn) = z.cache_hit(&hooks, &mut local, gfp, order, flags, highest) {
                return Ok(Block::new(self.id, r, pfn, order));
            }
        }
        self.alloc_fast(node, gfp, order, None)
    }

    /// [`CpuCache::free`] for a caller that keeps no handle: claims CPU
    /// `cpu`'s cache of the block's zone for this one call, or frees to the
    /// zone ([`Machine::free`]) if it is out. See [`Machine::alloc_on`].
    #[inline]
    pub fn free_on(&self, cpu: CpuId, block: Block) -> Result<(), Refused<Block>> {
        let Some(z) = self.zone_of_block(&block) else {
            return Err(Refused::new(block, FreeError::Foreign));
        };
        if let Some(set) = &z.pcp
            && let Ok(mut local) = set.claim(cpu)
        {
            let hooks = self.traced_cpu(Some(cpu));
            let (pfn, order) = (block.pfn(), block.order());
            self.poison_block_free(z, pfn, order);
            // An order-0 frame as a handle's free first: hot, or back into
            // its home (spec 04 §5.7), or onto the foreign list.
            let freed =
                match (order == Order::ZERO).then(|| z.cache_home_free(&hooks, &mut local, pfn)) {
                    Some(CacheFree::Hit) => Ok(()),
                    Some(CacheFree::Foreign(mt)) => z.cache_foreign(&hooks, &mut local, pfn, mt),
                    _ => z.free_cached(&hooks, &mut local, pfn, order),
                };
            return match freed {
                Ok(()) => {
                    self.freed(z, pfn, order, Some(cpu));
                    Ok(())
                }
                Err(e) => Err(Refused::new(block, e)),
            };
        }
        self.free(block)
    }

    /// Empties every CPU's cache of every zone back into the zones
    /// (`drain_all_pages`, spec 04 §7): caches nobody holds are drained
    /// here; holders are asked and this waits until each has done it at
    /// its next operation (`kick(cpu)` is called while waiting: a kernel
    /// sends an IPI, a host test yields).
    ///
    /// `local` is the caller's own handle: pass it if this CPU holds one.
    /// While it waits, the drain honours every request addressed to that
    /// handle, in every zone, so any number of CPUs may drain at once (two
    /// drainers each serve the other). What the call needs to end:
    /// - every other handle's holder keeps operating, calls
    ///   [`CpuCache::tick`], answers `kick`, or drops its handle;
    /// - the caller holds no handle it did not pass (one borrowed further
    ///   up its stack, as from a [`crate::Migrator`] called by an
    ///   allocation through that handle): that cache's requests would never
    ///   be served, and this call, or another CPU's drain, would wait for
    ///   it forever;
    /// - the caller holds no lock that a holder may wait for without
    ///   polling (the zone locks are never held here).
    pub fn drain_pcp(
        &self,
        mut local: Option<&mut CpuCache<'_, 'a, P>>,
        mut kick: impl FnMut(CpuId),
    ) {
        // Requests to every cache of every zone first, so that owners drain
        // in parallel and nothing waits before every request is out.
        for z in self.all_zones() {
            let Some(set) = &z.pcp else { continue };
            let own = local
                .as_deref_mut()
                .and_then(|c| c.locals.get(z.zone_ref()));
            set.request_drain_all(&self.traced_cpu(None).on(z), own);
        }
        let me = local.as_deref().map(|c| c.cpu);
        for z in self.all_zones() {
            let Some(set) = &z.pcp else { continue };
            set.wait_drain_all(&self.traced_cpu(None).on(z), me, |cpu| {
                if let Some(c) = local.as_deref_mut() {
                    c.poll();
                }
                kick(cpu)
            });
        }
    }
}

impl<'m, 'a, P: Platform> CpuCache<'m, 'a, P> {
    /// The CPU.
    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// The node its allocations prefer.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// [`Machine::alloc`] through this CPU's caches: orders 0..=3 and the
    /// pageblock order of ordinary requests come from the cache when it
    /// has them (refilled from the zone in batches); everything else goes
    /// to the zones. Never compacts.
    #[inline]
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc(&mut self, gfp: Gfp, order: Order) -> Result<Block, AllocError> {
        self.alloc_as(gfp, order, Caller::here())
    }

    /// [`CpuCache::alloc`] recording `tag` as the block's owner
    /// ([`crate::debug::owner`], feature `page-owner`).
    #[cfg(feature = "page-owner")]
    #[track_caller]
    pub fn alloc_tagged(&mut self, gfp: Gfp, order: Order, tag: u64) -> Result<Block, AllocError> {
        self.alloc_as(gfp, order, Caller::tagged(tag))
    }

    #[inline(always)]
    fn alloc_as(&mut self, gfp: Gfp, order: Order, caller: Caller) -> Result<Block, AllocError> {
        let (m, node, cpu) = (self.machine, self.node, self.cpu);
        m.traced(
            node,
            gfp,
            order,
            Some(cpu),
            caller,
            #[inline(always)]
            || {
                // The common case first, inline at the caller (whose request is
                // usually a constant): a hit in this CPU's cache of the first
                // zone the request would try. Anything else walks the zonelist.
                match self.hit(gfp, order) {
                    Some(b) => Ok(b),
                    None => self.miss(gfp, order),
                }
            },
        )
    }

    /// A block from this CPU's cache of the first zone the request tries,
    /// if that is the first zone of a kernel's ordinary request (the hit
    /// path then needs no index; any other zone's cache is the miss's);
    /// for order 0 from its home alone ([`Zone::cache_home_hit`]: no call
    /// on the way), the refill left to [`CpuCache::miss`].
    #[inline(always)]
    fn hit(&mut self, gfp: Gfp, order: Order) -> Option<Block> {
        self.hit_with(gfp, order, order != Order::ZERO, false)
    }

    /// The cache the request tries first: [`Preferred::First`] for a
    /// request whose first zone is [`Locals::first`]'s.
    #[inline(always)]
    fn preferred_of(&self, gfp: Gfp) -> Option<(Preferred, ZoneKind)> {
        let highest = gfp.request_zone()?;
        Some((self.preferred[zonelist_of(gfp)][highest.index()], highest))
    }

    /// [`CpuCache::hit`], refilling the cache when it is empty if `refill`,
    /// from a cache other than the first's too if `other`.
    #[inline(always)]
    fn hit_with(&mut self, gfp: Gfp, order: Order, refill: bool, other: bool) -> Option<Block> {
        let (p, highest) = self.preferred_of(gfp)?;
        let (z, local, meta) = if p == Preferred::First {
            self.locals.first()?
        } else if other {
            self.locals.of(p)?
        } else {
            return None;
        };
        // The request's own flags: a hit needs only its mark and whether it
        // may use the reserves (a refill takes no fallback flags either).
        let flags = crate::gfp::AllocFlags::fast(gfp);
        let hooks = &self.traced;
        hooks.refilled.reset();
        let pfn = if refill {
            z.cache_hit(hooks, local, gfp, order, flags, highest)
        } else {
            z.cache_home_hit(hooks, local, gfp, flags, highest)
        }?;
        Some(Block::with_zone_meta(*meta, pfn, order))
    }

    /// After a miss: an order-0 request's refill of the cache it tried (a
    /// request of another zone's cache tried first here, at any order),
    /// then the zonelist walk.
    #[inline(never)]
    fn miss(&mut self, gfp: Gfp, order: Order) -> Result<Block, AllocError> {
        let first = matches!(self.preferred_of(gfp), Some((Preferred::First, _)));
        if (order == Order::ZERO || !first)
            && let Some(b) = self.hit_with(gfp, order, true, true)
        {
            return Ok(b);
        }
        self.machine
            .alloc_fast(self.node, gfp, order, Some(&mut self.locals))
    }

    /// [`Machine::free`] through this CPU's cache of the block's zone
    /// (spilled to the zone in batches). A block of another machine is
    /// refused and handed back.
    #[inline(always)]
    pub fn free(&mut self, block: Block) -> Result<(), Refused<Block>> {
        // The common case first, inline at the caller: a frame back into
        // its home in this CPU's cache. Anything else out of line.
        if block.machine() == self.id && block.order() == Order::ZERO {
            let (i, pfn) = (block.zone_index(), block.pfn());
            match self.free_fast(i, pfn) {
                CacheFree::Hit => return Ok(()),
                CacheFree::Foreign(mt) => {
                    return self
                        .free_foreign(i, pfn, mt)
                        .map_err(|e| Refused::new(block, e));
                }
                CacheFree::Miss => {}
            }
        }
        self.free_miss(block)
    }

    /// [`CpuCache::free`] past its hit.
    #[inline(never)]
    fn free_miss(&mut self, block: Block) -> Result<(), Refused<Block>> {
        if block.machine() != self.id {
            return Err(Refused::new(block, FreeError::Foreign));
        }
        match self.free_in(block.zone_index(), block.pfn(), block.order()) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(Refused::new(block, e)),
            None => self.free_uncached(block),
        }
    }

    /// A block of a zone this handle has no cache of.
    #[inline(never)]
    fn free_uncached(&self, block: Block) -> Result<(), Refused<Block>> {
        self.machine.free(block)
    }

    /// [`CpuCache::free`] of a block the kernel kept as a number
    /// ([`Block::into_raw`]): the frame's zone is looked up once, where
    /// [`Machine::block_from_raw`] and a free would each look. A number
    /// that is not the head of a live allocation of `order` of this
    /// machine gets a [`RawError`] naming the frame and the problem, and
    /// changes nothing.
    ///
    /// # Safety
    ///
    /// As for [`Machine::block_from_raw`]: if `(pfn, order)` is a live
    /// allocation, it is the caller's (it came from this machine as a block
    /// the caller turned into this number, and the caller keeps no other
    /// block or number of it).
    #[inline(always)]
    pub unsafe fn free_raw(&mut self, pfn: Pfn, order: Order) -> Result<(), RawError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.free_raw_or(pfn, order, |_, e| Err(e)) }
    }

    /// [`CpuCache::free_raw`] handing a refusal, with this handle, to
    /// `refused`, whose answer is the call's. For an order-0 frame
    /// `refused` runs in the free's out-of-line part: a caller whose own
    /// fallback follows a refusal then keeps nothing across a call on its
    /// hit path (no register saved, no stack frame).
    ///
    /// # Safety
    ///
    /// As for [`CpuCache::free_raw`].
    #[inline(always)]
    pub unsafe fn free_raw_or<E>(
        &mut self,
        pfn: Pfn,
        order: Order,
        refused: impl FnOnce(&mut Self, RawError) -> Result<(), E>,
    ) -> Result<(), E> {
        // The common case first, inline at the caller: a frame of the zone
        // of the last such free (a kernel frees mostly into one zone) kept
        // hot or back into its home in this CPU's cache. The rest of an
        // order-0 free out of line, so that this path makes no call.
        if order == Order::ZERO {
            let i = self.last_raw;
            let foreign = match self.free_fast(i, pfn) {
                CacheFree::Hit => return Ok(()),
                CacheFree::Foreign(mt) => Some(mt),
                CacheFree::Miss => None,
            };
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.free_raw_cold(i, pfn, foreign, refused) };
        }
        // SAFETY: the caller's promise, passed on.
        match unsafe { self.free_raw_miss(pfn, order) } {
            Ok(()) => Ok(()),
            Err(e) => refused(self, e),
        }
    }

    /// [`CpuCache::free_raw_or`] of an order-0 frame past its hit: the
    /// cache of the zone of index `i` holds it now as a foreign frame of
    /// type `foreign`, or, `None`, nothing changed.
    ///
    /// # Safety
    ///
    /// As for [`CpuCache::free_raw`].
    #[inline(never)]
    unsafe fn free_raw_cold<E>(
        &mut self,
        i: usize,
        pfn: Pfn,
        foreign: Option<MigrateType>,
        refused: impl FnOnce(&mut Self, RawError) -> Result<(), E>,
    ) -> Result<(), E> {
        let r = match foreign {
            Some(mt) => self
                .free_foreign(i, pfn, mt)
                .map_err(|why| RawError { pfn, why }),
            // SAFETY: the caller's promise, passed on.
            None => unsafe { self.free_raw_miss(pfn, Order::ZERO) },
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) => refused(self, e),
        }
    }

    /// [`CpuCache::free_raw`] past its hit.
    ///
    /// # Safety
    ///
    /// As for [`CpuCache::free_raw`].
    #[inline(always)]
    unsafe fn free_raw_miss(&mut self, pfn: Pfn, order: Order) -> Result<(), RawError> {
        // The zone of the last such free first: its span is one compare
        // away.
        if let Some(entry) = self.locals.at(self.last_raw)
            && entry.0.span().contains(pfn)
        {
            return Self::free_at(self.machine, &self.traced, entry, pfn, order)
                .map_err(|why| RawError { pfn, why });
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.free_raw_elsewhere(pfn, order) }
    }

    /// [`CpuCache::free_raw`] of a frame outside the last such free's zone:
    /// the zone looked up, and remembered for the next.
    ///
    /// # Safety
    ///
    /// As for [`CpuCache::free_raw`].
    #[inline(never)]
    unsafe fn free_raw_elsewhere(&mut self, pfn: Pfn, order: Order) -> Result<(), RawError> {
        let err = |why| RawError { pfn, why };
        let i = self.free_zone_of(pfn).ok_or(err(FreeError::OutOfRange))?;
        match self.free_in(i, pfn, order) {
            Some(r) => r.map_err(err),
            // SAFETY: the caller's promise, passed on.
            None => unsafe { self.free_raw_uncached(pfn, order) },
        }
    }

    /// `frames` contiguous frames (2 to 64), each an order-0 allocation of
    /// its own, inside one 64-frame word of a bitmap: from this CPU's cache
    /// of the first zone the request tries when the cache's home holds such
    /// a run (a home that holds no frame is refilled first), else from that
    /// zone (the fullest chunk of the request's type
    /// with a free block of the power of two holding `frames`, taken while
    /// the zone stays above its low mark). A request of a few frames that
    /// is no power of two is so served without rounding it up to a block
    /// and splitting off the rest. Returns the first frame's number: the
    /// caller holds each frame `pfn + i` as [`Block::into_raw`] would have
    /// handed it over (order 0), and gives them back one by one
    /// ([`CpuCache::free_raw`]) or together ([`CpuCache::free_range_raw`]).
    /// `None`, nothing handed out (a refill of an empty home may have
    /// moved frames from the zone to the cache), when neither has such a
    /// run, or for a request
    /// [`CpuCache::alloc`] would not serve from the cache (reserves,
    /// watermarks checked for the power of two holding `frames`): allocate
    /// a block then. To the hooks each frame is an allocation of order 0.
    ///
    /// ```
    /// # use pageframe::{CpuId, Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # use core::mem::MaybeUninit;
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(0x1000), Pfn(0x9000));
    /// # let meta = Box::leak(vec![MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// # let bytes = m.pcp_bytes(1).unwrap();
    /// # m.enable_pcp(1, Box::leak(vec![MaybeUninit::uninit(); bytes].into_boxed_slice())).unwrap();
    /// let mut cpu = m.cpu(CpuId(0), NodeId::ZERO).unwrap();
    /// // Three frames in a row, or a block of four with the fourth given back.
    /// let first = match cpu.alloc_run_raw(Gfp::KERNEL, 3) {
    ///     Some(p) => p,
    ///     None => {
    ///         let (p, _) = cpu.alloc(Gfp::KERNEL, Order::new(2).unwrap()).unwrap().into_raw();
    ///         // SAFETY: the block was just allocated and is held only as `p`.
    ///         unsafe { cpu.free_range_raw(PfnRange::new(p + 3, p + 4)) }.unwrap();
    ///         p
    ///     }
    /// };
    /// // ... and back together, whichever way they came.
    /// // SAFETY: the three frames are ours, held only as these numbers.
    /// unsafe { cpu.free_range_raw(PfnRange::new(first, first + 3)) }.unwrap();
    /// ```
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_run_raw(&mut self, gfp: Gfp, frames: u64) -> Option<Pfn> {
        let n = u32::try_from(frames)
            .ok()
            .filter(|n| (2..=64).contains(n))?;
        let (m, cpu) = (self.machine, self.cpu);
        // The handle's own table of first zones, as the hit path looks.
        let (p, highest) = self.preferred_of(gfp)?;
        let (z, local, meta) = self.locals.of(p)?;
        let meta = *meta;
        if m.injects_failure(
            gfp,
            Order::new(frames.next_power_of_two().trailing_zeros() as u8)?,
        ) {
            return None;
        }
        let flags = crate::gfp::AllocFlags::fast(gfp);
        let hooks = &self.traced;
        hooks.refilled.reset();
        let p = z.cache_run(hooks, local, gfp, n, flags, highest)?;
        let blocks =
            (p.get()..p.get() + frames).map(|f| Block::with_zone_meta(meta, Pfn(f), Order::ZERO));
        m.run_allocated(gfp, Some(cpu), Caller::here(), blocks);
        Some(p)
    }

    /// [`Machine::free_raw`] through this CPU's cache: a range of up to 64
    /// order-0 allocations (as [`CpuCache::alloc_run_raw`] hands out) goes
    /// to the cache at once when all of it lies in the home of this
    /// handle's cache of its zone, or that home holds no frame (it moves
    /// to the range's region then; a single frame goes to the cache
    /// anywhere in that zone);
    /// any other range, and one the cache refuses whole, goes to
    /// [`Machine::free_raw`], which takes a run of order-0 allocations
    /// inside one 64-frame word back in one step and says what is wrong
    /// with anything it refuses. A range refused changes nothing.
    ///
    /// # Safety
    ///
    /// As for [`Machine::free_raw`].
    pub unsafe fn free_range_raw(
        &mut self,
        range: pageframe_buddy::PfnRange,
    ) -> Result<(), RawError> {
        let n = range.len();
        // The zone of the last free of a number first, as `free_raw` looks:
        // its span is one compare away. Another zone is remembered for the
        // next, as there.
        let i = match self.locals.at(self.last_raw) {
            Some((z, _, _)) if z.span().contains(range.start) => Some(self.last_raw),
            _ => self.free_zone_of(range.start),
        };
        if (1..=64).contains(&n)
            && let Some(i) = i
            && let Some((z, local, _)) = self.locals.at(i)
            && z.span().contains_range(&range)
        {
            let (m, cpu, hooks) = (self.machine, self.cpu, &self.traced);
            hooks.refilled.reset();
            let poison = |run| {
                if m.poisons_frees() {
                    m.poison_free(run);
                }
            };
            match z.free_run_cached(hooks, local, range.start, n as u32, poison) {
                Ok(true) => {
                    for f in range.start.get()..range.end.get() {
                        m.freed(z, Pfn(f), Order::ZERO, Some(cpu));
                    }
                    return Ok(());
                }
                Ok(false) => {}
                Err(why) => {
                    return Err(RawError {
                        pfn: range.start,
                        why,
                    });
                }
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.machine.free_raw(range) }
    }

    /// The index of the zone holding `pfn`, remembered as the zone of the
    /// last free of a number (the next free looks there first).
    #[inline(never)]
    fn free_zone_of(&mut self, pfn: Pfn) -> Option<usize> {
        let i = self.machine.zone_ref_of(pfn)?.index();
        self.last_raw = i;
        Some(i)
    }

    /// [`CpuCache::free_raw`] of a frame of a zone this handle has no
    /// cache of.
    ///
    /// # Safety
    ///
    /// As for [`CpuCache::free_raw`].
    #[inline(never)]
    unsafe fn free_raw_uncached(&self, pfn: Pfn, order: Order) -> Result<(), RawError> {
        // SAFETY: the caller's promise, passed on.
        let b = unsafe { self.machine.block_from_raw(pfn, order) }?;
        // A refused block goes back to being the caller's number.
        self.machine.free(b).map_err(|r| RawError {
            pfn,
            why: r.reason(),
        })
    }

    /// The order-0 free of `pfn`, a frame of the zone of index `i`, through
    /// this CPU's cache of that zone, as far as it goes with no call on
    /// the way ([`Zone::cache_home_free`]): [`CacheFree::Foreign`] leaves
    /// the rest to [`CpuCache::free_foreign`]; [`CacheFree::Miss`] (nothing
    /// changed) comes also without a cache of that zone or for a frame
    /// outside it.
    #[inline(always)]
    fn free_fast(&mut self, i: usize, pfn: Pfn) -> CacheFree {
        let Some((z, local, _)) = self.locals.at(i) else {
            return CacheFree::Miss;
        };
        // A frame outside the zone has no ownership byte there (the claim
        // below misses), and the poison checks its frame first.
        self.machine.poison_block_free(z, pfn, Order::ZERO);
        let r = z.cache_home_free(&self.traced, local, pfn);
        if r == CacheFree::Hit {
            self.machine.freed(z, pfn, Order::ZERO, self.traced.cpu);
        }
        r
    }

    /// The rest of an order-0 free [`CpuCache::free_fast`] found outside
    /// its home in this CPU's cache of the zone of index `i`
    /// ([`CacheFree::Foreign`]).
    #[inline(always)]
    fn free_foreign(&mut self, i: usize, pfn: Pfn, mt: MigrateType) -> Result<(), FreeError> {
        let (m, hooks) = (self.machine, &self.traced);
        let Some((z, local, _)) = self.locals.at(i) else {
            unreachable!("free_fast found the zone's cache");
        };
        z.cache_foreign(hooks, local, pfn, mt)
            .map(|()| m.freed(z, pfn, Order::ZERO, hooks.cpu))
    }

    /// Frees `(pfn, order)` through this CPU's cache of the zone of index
    /// `i`: `None` without a cache of that zone. The ownership byte decides
    /// (a frame that is no live allocation of `order` is refused, nothing
    /// changed).
    #[inline(always)]
    fn free_in(&mut self, i: usize, pfn: Pfn, order: Order) -> Option<Result<(), FreeError>> {
        let entry = self.locals.at(i)?;
        Some(Self::free_at(self.machine, &self.traced, entry, pfn, order))
    }

    /// Frees `(pfn, order)` through the handle's claimed cache `entry` of
    /// the frame's zone, reporting to `hooks` (see [`CpuCache::free_in`]).
    #[inline(always)]
    fn free_at(
        m: &'m Machine<'a, P>,
        hooks: &Traced<'m, P::Hooks>,
        (z, local, _): &mut Claimed<'m, 'a, P::Lock>,
        pfn: Pfn,
        order: Order,
    ) -> Result<(), FreeError> {
        hooks.refilled.reset();
        m.poison_block_free(z, pfn, order);
        z.free_cached(hooks, local, pfn, order)
            .map(|()| m.freed(z, pfn, order, hooks.cpu))
    }

    /// Honours the requests other CPUs posted to this CPU's caches (a
    /// drain, new sizing), in every zone. Every operation on the handle
    /// does it first; call it from an idle loop or the handler of the
    /// `kick` that [`Machine::drain_pcp`] sends.
    pub fn poll(&mut self) {
        for z in self.machine.all_zones() {
            if let Some(l) = self.locals.get(z.zone_ref()) {
                l.poll(&self.traced.on(z));
            }
        }
    }

    /// Empties this CPU's caches into the zones (`drain_local_pages`).
    /// Returns the frames given back.
    pub fn drain(&mut self) -> u64 {
        let mut n = 0;
        for z in self.machine.all_zones() {
            if let Some(l) = self.locals.get(z.zone_ref()) {
                n += l.drain(&self.traced.on(z));
            }
        }
        n
    }

    /// The periodic step (spec 04 §6): honours remote requests and decays
    /// each cache's `high` towards its floor. Call it from a timer, about
    /// once a second.
    pub fn tick(&mut self) {
        for z in self.machine.all_zones() {
            if let Some(l) = self.locals.get(z.zone_ref()) {
                l.decay(&self.traced.on(z));
            }
        }
    }

    /// Order-0 frames this CPU's cache of the zone `(node, kind)` keeps
    /// hot (spec 04 §5.7): each the frame of its home freed last, handed
    /// out again first, given back to the zone when the cache drains.
    pub fn hot_frames(&mut self, node: NodeId, kind: ZoneKind) -> u32 {
        self.locals
            .get(ZoneRef { node, kind })
            .map_or(0, |l| l.inspect(|p| p.hot()))
    }

    /// This CPU's cache of a zone: its counters, what it holds and its
    /// `high` with the bounds it tunes between. `None` without a cache of
    /// that zone.
    pub fn cache_info(&mut self, node: NodeId, kind: ZoneKind) -> Option<CacheInfo> {
        let l = self.locals.get(ZoneRef { node, kind })?;
        let sizing = l.inspect(|p| p.sizing());
        Some(CacheInfo {
            stats: l.stats(),
            count: l.count(),
            high: l.high(),
            high_min: sizing.high_min(),
            high_max: sizing.high_max(),
        })
    }

    /// The machine.
    pub fn machine(&self) -> &'m Machine<'a, P> {
        self.machine
    }
}
