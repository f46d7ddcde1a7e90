//! Who holds each frame, as the facade sees it: one atomic byte per frame of
//! a zone's span, read and changed without the zone lock.
//!
//! The per-CPU caches hand frames out and take them back without the zone
//! lock, so they cannot ask the buddy core whether a free is legitimate.
//! This byte answers instead, and it is the single authority on ownership
//! above the core: every transition away from "allocated" is a
//! compare-and-swap, so of two CPUs that free the same frame at once exactly
//! one succeeds, and a block that compaction isolated for migration cannot
//! be freed (or isolated twice) behind its back.
//!
//! | state | meaning | left by |
//! |---|---|---|
//! | free | in the buddy core (free, a hole, or inside a block) | an allocation (store: the frame came from the core under the lock, or from the caller's own cache) |
//! | allocated(order, type) | the owner's block | free: CAS to free (zone, lock held) or to cached (per-CPU cache); isolation: CAS to isolated |
//! | allocated, pinned | the owner's block, pinned ([`crate::Machine::set_pinned`]) | free: CAS to free (zone only: the pin ends with the owner, in the core's books, so it never reaches a cache and the next owner); unpin |
//! | cached(order) | on one CPU's cache list | only that CPU (store) |
//! | isolated(order) | a migration source, or a destination being filled | the compactor: back to allocated, or moved out |
//! | moved out(order) | a source whose contents moved, books not yet settled | the compactor: free |
//!
//! A destination block compaction took from the free lists is "isolated"
//! while the kernel moves the source into it: the kernel may hand it to
//! the source's owner before the allocator's books show the move, and a
//! free of it then gets `Busy` until they do.

use core::sync::atomic::Ordering::Relaxed;

use crate::sync::AtomicU8;

use pageframe_buddy::{FreeError, Order, Pfn, PfnRange};
use pageframe_mobility::MigrateType;
use pageframe_types::prefetch::prefetch;

/// The kind in the high nibble, the order in the low one.
const KIND_SHIFT: u32 = 4;
/// An allocated kind with this bit is pinned.
const PINNED: u8 = 8 << KIND_SHIFT;
const FREE: u8 = 0;
const CACHED: u8 = 4;
const ISOLATED: u8 = 5;
const MOVED_OUT: u8 = 6;

/// What a frame's byte says.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum State {
    Free,
    Allocated(Order, MigrateType),
    Cached(Order),
    Isolated(Order),
    /// A migration source whose contents moved, waiting for the books.
    MovedOut(Order),
}

const fn encode(kind: u8, order: Order) -> u8 {
    (kind << KIND_SHIFT) | order.get()
}

/// Allocated kinds are 1..=3: the requested type's value plus one (requests
/// are always one of the three basic types).
const fn allocated(order: Order, mt: MigrateType) -> u8 {
    let kind = match mt {
        MigrateType::Movable => 2,
        MigrateType::Reclaimable => 3,
        _ => 1,
    };
    encode(kind, order)
}

/// The type an allocated kind records (1..=3, or 9..=11 pinned); `None`
/// for every other kind.
#[inline(always)]
const fn allocated_type(kind: u8) -> Option<MigrateType> {
    match kind {
        1 | 9 => Some(MigrateType::Unmovable),
        2 | 10 => Some(MigrateType::Movable),
        3 | 11 => Some(MigrateType::Reclaimable),
        _ => None,
    }
}

/// The type of `v` if it says "allocated at `order`, not pinned".
#[inline(always)]
const fn unpinned_allocation(v: u8, order: Order) -> Option<MigrateType> {
    if v & 0xf != order.get() || v & PINNED != 0 {
        return None;
    }
    allocated_type(v >> KIND_SHIFT)
}

const fn decode(v: u8) -> State {
    let order = Order::new_truncated(v & 0xf);
    if let Some(mt) = allocated_type(v >> KIND_SHIFT) {
        return State::Allocated(order, mt);
    }
    match v >> KIND_SHIFT {
        CACHED => State::Cached(order),
        ISOLATED => State::Isolated(order),
        MOVED_OUT => State::MovedOut(order),
        _ => State::Free,
    }
}

/// Bytes of a cache line, as far as sharing between CPUs goes.
const LINE_BYTES: usize = 64;

/// A block's byte read as an unpinned allocation, to be taken into a
/// per-CPU cache ([`FrameStates::cache_claim`]).
#[derive(Clone, Copy)]
pub(crate) struct CacheClaim<'s> {
    slot: &'s AtomicU8,
    v: u8,
    /// The type the allocation records.
    pub(crate) mt: MigrateType,
}

impl CacheClaim<'_> {
    /// Marks the block cached if its byte still reads as it did: `false`,
    /// nothing changed, if it does not (another CPU freed or isolated it).
    #[inline(always)]
    pub(crate) fn take(self) -> bool {
        self.slot
            .compare_exchange(
                self.v,
                encode(CACHED, Order::new_truncated(self.v & 0xf)),
                Relaxed,
                Relaxed,
            )
            .is_ok()
    }
}

/// One byte per frame of a zone's span.
pub(crate) struct FrameStates<'a> {
    base: Pfn,
    bytes: &'a [AtomicU8],
}

/// Where a zone's ownership bytes lie, as numbers ([`FrameStates::prefetcher`]).
#[derive(Clone, Copy)]
pub(crate) struct StatesPrefetch {
    base: Pfn,
    bytes: usize,
}

impl StatesPrefetch {
    /// Starts loading `pfn`'s byte ([`pageframe_types::prefetch`]); a
    /// frame outside the span names some other address, a wasted load at
    /// most.
    #[inline(always)]
    pub(crate) fn frame(&self, pfn: Pfn) {
        prefetch(core::ptr::without_provenance::<u8>(self.line(pfn)));
    }

    /// The address [`StatesPrefetch::frame`] hints for `pfn`.
    #[inline(always)]
    fn line(&self, pfn: Pfn) -> usize {
        let i = pfn.get().wrapping_sub(self.base.get()) as usize;
        self.bytes.wrapping_add(i)
    }
}

impl<'a> FrameStates<'a> {
    /// Bytes needed for `span` (one a frame).
    pub(crate) const fn bytes(span: PfnRange) -> usize {
        span.len() as usize
    }

    /// Takes `mem` (at least [`FrameStates::bytes`] long) and marks every
    /// frame free. `None` if `mem` is too short.
    #[cfg(not(loom))]
    pub(crate) fn new(span: PfnRange, mem: &'a mut [core::mem::MaybeUninit<u8>]) -> Option<Self> {
        let mem = mem.get_mut(..Self::bytes(span))?;
        for b in mem.iter_mut() {
            b.write(FREE);
        }
        // SAFETY: every byte was just initialised; `AtomicU8` has the size
        // and alignment of `u8`; the exclusive borrow of `mem` for 'a
        // becomes a shared borrow of atomics, which allow only atomic access.
        let bytes = unsafe { &*(mem as *mut [core::mem::MaybeUninit<u8>] as *const [AtomicU8]) };
        Some(FrameStates {
            base: span.start,
            bytes,
        })
    }

    /// Under loom the bytes are loom's atomics, which are not bytes: the
    /// model's zones are tiny and leak them (the transitions are the same
    /// code).
    #[cfg(loom)]
    pub(crate) fn new(span: PfnRange, mem: &'a mut [core::mem::MaybeUninit<u8>]) -> Option<Self> {
        mem.get(..Self::bytes(span))?;
        let v: std::vec::Vec<AtomicU8> = (0..Self::bytes(span))
            .map(|_| AtomicU8::new(FREE))
            .collect();
        Some(FrameStates {
            base: span.start,
            bytes: std::boxed::Box::leak(v.into_boxed_slice()),
        })
    }

    #[inline]
    fn slot(&self, pfn: Pfn) -> Option<&AtomicU8> {
        // One unsigned compare: a frame below the span wraps to an index
        // past any slice's length.
        let i = pfn.get().wrapping_sub(self.base.get());
        self.bytes.get(usize::try_from(i).ok()?)
    }

    /// Where the bytes lie, for starting to load one ahead of its use.
    #[inline(always)]
    pub(crate) fn prefetcher(&self) -> StatesPrefetch {
        StatesPrefetch {
            base: self.base,
            bytes: self.bytes.as_ptr().addr(),
        }
    }

    /// The cache line (by address) holding `pfn`'s byte: 64 frames share
    /// one, so two CPUs that keep writing the bytes of frames of one line
    /// make it bounce between them. `None` outside the span.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn line_of(&self, pfn: Pfn) -> Option<usize> {
        self.slot(pfn)
            .map(|s| core::ptr::from_ref(s).addr() / LINE_BYTES)
    }

    /// The frames whose bytes share `pfn`'s line ([`FrameStates::line_of`]),
    /// some of which may lie outside the span. `None` outside the span.
    #[inline]
    pub(crate) fn line_frames(&self, pfn: Pfn) -> Option<PfnRange> {
        let s = self.slot(pfn)?;
        #[cfg(not(loom))]
        let at = core::ptr::from_ref(s).addr() % LINE_BYTES;
        #[cfg(loom)]
        let at = {
            let _ = s;
            (pfn.get() - self.base.get()) as usize % LINE_BYTES
        };
        let start = Pfn(pfn.get().saturating_sub(at as u64));
        Some(PfnRange::new(start, start + LINE_BYTES as u64))
    }

    /// Under loom the bytes are loom's atomics at addresses that change
    /// from one explored execution to the next, and loom needs every
    /// execution to make the same choices: lines by index.
    #[cfg(loom)]
    pub(crate) fn line_of(&self, pfn: Pfn) -> Option<usize> {
        self.slot(pfn)?;
        Some((pfn.get() - self.base.get()) as usize / LINE_BYTES)
    }

    /// The state of `pfn` (free outside the span).
    #[inline]
    pub(crate) fn get(&self, pfn: Pfn) -> State {
        self.slot(pfn)
            .map_or(State::Free, |s| decode(s.load(Relaxed)))
    }

    /// The live allocation holding `pfn`, as `(head, order)`: the head is
    /// the nearest frame at or below `pfn`, aligned to some order up to
    /// `max`, whose byte names a block that reaches `pfn` (the bytes of the
    /// other frames of a block say "free"). A cached, isolated or moved-out
    /// block holding it gives the error a free of it would; `None` when no
    /// byte claims the frame (free in the core, a hole, or inside a block
    /// the allocator holds: the core knows which).
    pub(crate) fn live_block_holding(
        &self,
        pfn: Pfn,
        max: Order,
    ) -> Option<Result<(Pfn, Order), FreeError>> {
        // The heads aligned to each order up to `max`, each distinct one
        // once: `pfn` with its lowest set bits cleared one by one.
        let lowest = pfn.align_down(max);
        let mut head = pfn;
        loop {
            let (k, found) = match self.get(head) {
                State::Free if head == lowest => return None,
                State::Free => {
                    head = Pfn(head.get() & (head.get() - 1));
                    continue;
                }
                State::Allocated(k, _) => (k, Ok((head, k))),
                State::Cached(k) => (k, Err(FreeError::AlreadyFree)),
                State::Isolated(k) | State::MovedOut(k) => (k, Err(FreeError::Busy)),
            };
            // A block headed here that ends before `pfn`: no block of a
            // higher head can hold `pfn` (it would hold this one too).
            return (head + k.pages() > pfn).then_some(found);
        }
    }

    /// Records a block the caller now holds exclusively as allocated: taken
    /// from the core under the zone lock, or from the caller's own cache.
    #[inline]
    pub(crate) fn set_allocated(&self, pfn: Pfn, order: Order, mt: MigrateType) {
        if let Some(s) = self.slot(pfn) {
            s.store(allocated(order, mt), Relaxed);
        }
    }

    /// [`FrameStates::set_allocated`] of the `n` order-0 frames from `pfn`
    /// (a run handed out): the span checked once for the run.
    #[inline]
    pub(crate) fn set_allocated_run(&self, pfn: Pfn, n: usize, mt: MigrateType) {
        if let Some(slots) = self.run_slots(pfn, n) {
            Self::give_back(slots, allocated(Order::ZERO, mt));
        }
    }

    /// Records a block the caller holds exclusively as cached (a refill).
    #[inline]
    pub(crate) fn set_cached(&self, pfn: Pfn, order: Order) {
        if let Some(s) = self.slot(pfn) {
            s.store(encode(CACHED, order), Relaxed);
        }
    }

    /// [`FrameStates::set_cached`] of the order-0 frames `base + b` for each
    /// bit `b` of `bits`: a whole word of frames in one pass over their
    /// bytes, without a bit scan a frame.
    #[inline]
    pub(crate) fn set_cached_bits(&self, base: Pfn, bits: u64) {
        let v = encode(CACHED, Order::ZERO);
        if bits == u64::MAX
            && let Some(start) = base.get().checked_sub(self.base.get())
            && let Ok(start) = usize::try_from(start)
            && let Some(bytes) = self.bytes.get(start..start + 64)
        {
            for b in bytes {
                b.store(v, Relaxed);
            }
            return;
        }
        let mut rest = bits;
        while rest != 0 {
            self.set_cached(base + u64::from(rest.trailing_zeros()), Order::ZERO);
            rest &= rest - 1;
        }
    }

    /// Records a migration destination as being migrated: from when the
    /// kernel may publish it to its owner until the move is in the books,
    /// a free of it gets `Busy` (the same answer as a free of the source).
    #[inline]
    pub(crate) fn set_isolated(&self, pfn: Pfn, order: Order) {
        if let Some(s) = self.slot(pfn) {
            s.store(encode(ISOLATED, order), Relaxed);
        }
    }

    /// Records a block the caller held exclusively (cached, or isolated and
    /// now moved) as back in the core.
    #[inline]
    pub(crate) fn set_free(&self, pfn: Pfn) {
        if let Some(s) = self.slot(pfn) {
            s.store(FREE, Relaxed);
        }
    }

    /// Moves a live allocation of `order` from "allocated" to what `to`
    /// makes of its type and pin bit by compare-and-swap (`None` from `to`:
    /// refused, `Busy`): returns the type it was allocated as, or the
    /// reason it is not a live allocation of that order. Exactly one of
    /// several concurrent callers on one frame succeeds.
    #[inline]
    fn take(
        &self,
        pfn: Pfn,
        order: Order,
        to: impl Fn(MigrateType, u8) -> Option<u8>,
    ) -> Result<MigrateType, FreeError> {
        let s = self.slot(pfn).ok_or(FreeError::OutOfRange)?;
        let mut v = s.load(Relaxed);
        loop {
            match decode(v) {
                State::Allocated(o, mt) if o == order => {
                    let new = to(mt, v & PINNED).ok_or(FreeError::Busy)?;
                    match s.compare_exchange_weak(v, new, Relaxed, Relaxed) {
                        Ok(_) => return Ok(mt),
                        Err(now) => v = now,
                    }
                }
                State::Allocated(o, _) => return Err(FreeError::WrongOrder { allocated: o }),
                State::Cached(_) => return Err(FreeError::AlreadyFree),
                State::Isolated(_) | State::MovedOut(_) => return Err(FreeError::Busy),
                // The core knows why (hole, tail, free, or a block the
                // allocator holds mid-operation): the caller asks it.
                State::Free => return Err(FreeError::AlreadyFree),
            }
        }
    }

    /// A free of a live allocation of `order` (zone lock held, so the core
    /// can be told in the same critical section).
    #[inline]
    pub(crate) fn take_for_free(&self, pfn: Pfn, order: Order) -> Result<MigrateType, FreeError> {
        self.take(pfn, order, |_, _| Some(FREE))
    }

    /// A free into this CPU's cache: the block becomes cached. A pinned
    /// block is refused (`Busy`, nothing changed): its pin is in the
    /// core's books, which only a free to the zone clears, and a cache
    /// would hand it to the next owner still pinned.
    #[inline]
    pub(crate) fn take_for_cache(&self, pfn: Pfn, order: Order) -> Result<MigrateType, FreeError> {
        // The common case in one compare-and-swap without decoding;
        // anything else (and a lost race) the general path decides.
        match self.cache_claim(pfn, order) {
            Some(c) if c.take() => Ok(c.mt),
            _ => self.take_for_cache_checked(pfn, order),
        }
    }

    /// The common case of [`FrameStates::take_for_cache`], an unpinned
    /// allocation of `order`, as its byte reads now, not yet taken: `None`
    /// for anything else.
    #[inline(always)]
    pub(crate) fn cache_claim(&self, pfn: Pfn, order: Order) -> Option<CacheClaim<'_>> {
        let slot = self.slot(pfn)?;
        let v = slot.load(Relaxed);
        let mt = unpinned_allocation(v, order)?;
        Some(CacheClaim { slot, v, mt })
    }

    /// [`FrameStates::take_for_cache`] of the `n` order-0 allocations from
    /// `pfn`, all or none: see [`FrameStates::take_run`].
    #[inline]
    pub(crate) fn take_run_for_cache(&self, pfn: Pfn, n: usize) -> Option<MigrateType> {
        self.take_run(pfn, n, encode(CACHED, Order::ZERO))
    }

    /// [`FrameStates::take_for_free`] of the `n` order-0 allocations from
    /// `pfn` (zone lock held), all or none, pinned ones refused: see
    /// [`FrameStates::take_run`].
    #[inline]
    pub(crate) fn take_run_for_free(&self, pfn: Pfn, n: usize) -> Option<MigrateType> {
        self.take_run(pfn, n, FREE)
    }

    /// Moves each byte of the `n` frames from `pfn` from "allocated at
    /// order 0, not pinned, of the first one's type" to `to` by
    /// compare-and-swap, all or none: that type; `None`, every byte as it
    /// was, when one of them is no such allocation (of another type, or
    /// another CPU changed it meanwhile: the caller's frame-by-frame path
    /// says what is wrong), for no frame, or when one lies outside the
    /// span. The span is checked once for the run, the first byte decoded
    /// once: each frame is then one compare-and-swap against its value.
    #[inline]
    fn take_run(&self, pfn: Pfn, n: usize, to: u8) -> Option<MigrateType> {
        let slots = self.run_slots(pfn, n)?;
        let v = slots.first()?.load(Relaxed);
        let mt = unpinned_allocation(v, Order::ZERO)?;
        for (j, s) in slots.iter().enumerate() {
            if s.compare_exchange(v, to, Relaxed, Relaxed).is_err() {
                Self::give_back(&slots[..j], v);
                return None;
            }
        }
        Some(mt)
    }

    /// The bytes of the `n` frames from `pfn` taken by
    /// [`FrameStates::take_run`] (of type `mt`) back to "allocated at order
    /// 0".
    #[inline]
    pub(crate) fn give_back_run(&self, pfn: Pfn, n: usize, mt: MigrateType) {
        self.set_allocated_run(pfn, n, mt);
    }

    /// Stores `v` in each of `slots` (bytes the caller holds alone).
    #[inline]
    fn give_back(slots: &[AtomicU8], v: u8) {
        for s in slots {
            s.store(v, Relaxed);
        }
    }

    /// The bytes of the `n` frames from `pfn`, if all lie in the span.
    #[inline]
    fn run_slots(&self, pfn: Pfn, n: usize) -> Option<&[AtomicU8]> {
        let i = usize::try_from(pfn.get().wrapping_sub(self.base.get())).ok()?;
        self.bytes.get(i..i.checked_add(n)?)
    }

    #[cold]
    #[inline(never)]
    fn take_for_cache_checked(&self, pfn: Pfn, order: Order) -> Result<MigrateType, FreeError> {
        self.take(pfn, order, |_, pin| {
            (pin == 0).then_some(encode(CACHED, order))
        })
    }

    /// A free of a whole range ([`crate::Machine::free_segment`]): the
    /// block is held as "isolated" until the range's books settle (a racing
    /// free of it gets `Busy`), or given back with `set_allocated`.
    #[inline]
    pub(crate) fn take_for_range(&self, pfn: Pfn, order: Order) -> Result<MigrateType, FreeError> {
        self.take(pfn, order, |_, _| Some(encode(ISOLATED, order)))
    }

    /// A split of a live allocation of `order` (at least 1) into halves
    /// (zone lock held): the head's byte says "allocated, `order - 1`" (and
    /// pinned if the block was), as the lower half; the caller gives the
    /// upper half the same byte once the core has split the block
    /// ([`FrameStates::mirror`]), or puts the block's back if it refuses.
    #[inline]
    pub(crate) fn take_for_split(&self, pfn: Pfn, order: Order) -> Result<MigrateType, FreeError> {
        let half = order.get().checked_sub(1).ok_or(FreeError::SingleFrame)?;
        self.take(pfn, order, |mt, pin| {
            Some(allocated(Order::new_truncated(half), mt) | pin)
        })
    }

    /// `to` gets `from`'s byte: the upper half of a split, the lower's.
    #[inline]
    pub(crate) fn mirror(&self, from: Pfn, to: Pfn) {
        if let (Some(f), Some(t)) = (self.slot(from), self.slot(to)) {
            t.store(f.load(Relaxed), Relaxed);
        }
    }

    /// Records a block as allocated, pinned or not as the core says (a
    /// change undone under the zone lock).
    #[inline]
    pub(crate) fn set_allocated_as(&self, pfn: Pfn, order: Order, mt: MigrateType, pinned: bool) {
        if let Some(s) = self.slot(pfn) {
            let pin = if pinned { PINNED } else { 0 };
            s.store(allocated(order, mt) | pin, Relaxed);
        }
    }

    /// Pins or unpins the live allocation of `order` at `pfn` (zone lock
    /// held, with the core's pin): `false`, nothing changed, if it is not
    /// one.
    pub(crate) fn set_pinned(&self, pfn: Pfn, order: Order, pinned: bool) -> bool {
        let Some(s) = self.slot(pfn) else {
            return false;
        };
        let mut v = s.load(Relaxed);
        loop {
            let State::Allocated(o, _) = decode(v) else {
                return false;
            };
            if o != order {
                return false;
            }
            let new = if pinned { v | PINNED } else { v & !PINNED };
            match s.compare_exchange_weak(v, new, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(now) => v = now,
            }
        }
    }

    /// Whether the live allocation at `pfn` is pinned.
    #[inline]
    pub(crate) fn is_pinned(&self, pfn: Pfn) -> bool {
        self.slot(pfn).is_some_and(|s| {
            let v = s.load(Relaxed);
            matches!(decode(v), State::Allocated(..)) && v & PINNED != 0
        })
    }

    /// Isolation of a movable live allocation for migration: `false` (state
    /// unchanged) if it is not one (freed meanwhile, cached, isolated by
    /// another compactor, or not movable).
    #[inline]
    pub(crate) fn isolate(&self, pfn: Pfn, order: Order) -> bool {
        let Some(s) = self.slot(pfn) else {
            return false;
        };
        s.compare_exchange(
            allocated(order, MigrateType::Movable),
            encode(ISOLATED, order),
            Relaxed,
            Relaxed,
        )
        .is_ok()
    }

    /// An isolated block that did not move goes back to its owner.
    #[inline]
    pub(crate) fn putback(&self, pfn: Pfn, order: Order) {
        if let Some(s) = self.slot(pfn) {
            let _ = s.compare_exchange(
                encode(ISOLATED, order),
                allocated(order, MigrateType::Movable),
                Relaxed,
                Relaxed,
            );
        }
    }

    /// The kernel moved an isolated source's contents: the source is
    /// "moved out" until the books show the move. Its own state, so that a
    /// source freed by compaction and then allocated and isolated again by
    /// another compactor before this one finishes is not mistaken for it.
    #[inline]
    pub(crate) fn moved_out(&self, src: Pfn, order: Order) {
        if let Some(s) = self.slot(src) {
            let _ = s.compare_exchange(
                encode(ISOLATED, order),
                encode(MOVED_OUT, order),
                Relaxed,
                Relaxed,
            );
        }
    }

    /// A completed move: the destination is the owner's block, and the
    /// source, already back in the core, is free here unless it was handed
    /// out again meanwhile (then its new state stands).
    #[inline]
    pub(crate) fn moved(&self, src: Pfn, dst: Pfn, order: Order) {
        self.set_allocated(dst, order, MigrateType::Movable);
        if let Some(s) = self.slot(src) {
            let _ = s.compare_exchange(encode(MOVED_OUT, order), FREE, Relaxed, Relaxed);
        }
    }

    /// Whether `pfn`'s byte says "allocated at `order`", pinned or not,
    /// without decoding the rest: the answer a number turned back into a
    /// block needs first ([`crate::Machine::block_from_raw`]). `false`
    /// outside the span.
    #[inline(always)]
    pub(crate) fn allocated_at(&self, pfn: Pfn, order: Order) -> bool {
        self.slot(pfn).is_some_and(|s| {
            let v = s.load(Relaxed);
            v & 0xf == order.get() && allocated_type(v >> KIND_SHIFT).is_some()
        })
    }

    /// Whether a block is held by a per-CPU cache or isolated (compaction
    /// must not take it as a source; a cached block is free for its owner).
    #[inline]
    pub(crate) fn is_live_allocation(&self, pfn: Pfn) -> bool {
        matches!(self.get(pfn), State::Allocated(..))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use core::mem::MaybeUninit;

    /// Every byte decodes to the type it was encoded with, pinned or not,
    /// and no other kind (free, cached, isolated, moved out, or a kind no
    /// state writes) reads as an allocation.
    #[test]
    fn allocated_kinds_and_only_they_carry_a_type() {
        let mut typed = 0;
        for v in 0..=u8::MAX {
            let kind = v >> KIND_SHIFT;
            let order = Order::new_truncated(v & 0xf);
            let mt = allocated_type(kind);
            let written = [
                MigrateType::Unmovable,
                MigrateType::Movable,
                MigrateType::Reclaimable,
            ]
            .into_iter()
            .find(|&t| allocated(order, t) == v & !PINNED);
            assert_eq!(mt, written, "byte {v:#04x}");
            let unpinned = mt.filter(|_| v & PINNED == 0);
            assert_eq!(unpinned_allocation(v, order), unpinned, "byte {v:#04x}");
            typed += usize::from(mt.is_some());
        }
        assert_eq!(typed, 6 * 16, "three types, pinned or not, sixteen orders");
    }

    /// The lean check a number turned back into a block uses agrees with
    /// the decoded byte for every byte and order, and is `false` outside
    /// the span.
    #[test]
    fn allocated_at_agrees_with_the_decoded_byte() {
        let span = PfnRange::new(Pfn(100), Pfn(101));
        let mut mem = [MaybeUninit::<u8>::uninit(); 1];
        let st = FrameStates::new(span, &mut mem).unwrap();
        let p = Pfn(100);
        let mut live = 0;
        for v in 0..=u8::MAX {
            st.bytes[0].store(v, Relaxed);
            for o in 0..16 {
                let order = Order::new_truncated(o);
                let decoded = matches!(st.get(p), State::Allocated(x, _) if x == order);
                assert_eq!(
                    st.allocated_at(p, order),
                    decoded,
                    "byte {v:#04x}, order {o}"
                );
                live += usize::from(decoded);
            }
            assert!(!st.allocated_at(Pfn(99), Order::new_truncated(v & 0xf)));
            assert!(!st.allocated_at(Pfn(101), Order::new_truncated(v & 0xf)));
        }
        assert_eq!(live, 6 * 16, "three types, pinned or not, sixteen orders");
    }

    #[test]
    fn transitions() {
        let span = PfnRange::new(Pfn(100), Pfn(164));
        let mut mem = [MaybeUninit::<u8>::uninit(); 64];
        let st = FrameStates::new(span, &mut mem).unwrap();
        let o2 = Order::new(2).unwrap();
        let p = Pfn(104);
        assert_eq!(st.get(p), State::Free);
        assert_eq!(st.take_for_free(p, o2), Err(FreeError::AlreadyFree));
        st.set_allocated(p, o2, MigrateType::Reclaimable);
        assert_eq!(st.get(p), State::Allocated(o2, MigrateType::Reclaimable));
        assert_eq!(
            st.take_for_free(p, Order::ZERO),
            Err(FreeError::WrongOrder { allocated: o2 })
        );
        assert!(!st.isolate(p, o2), "not movable");
        assert_eq!(st.take_for_cache(p, o2), Ok(MigrateType::Reclaimable));
        assert_eq!(st.get(p), State::Cached(o2));
        assert_eq!(st.take_for_free(p, o2), Err(FreeError::AlreadyFree));
        st.set_allocated(p, o2, MigrateType::Movable);
        assert!(st.isolate(p, o2));
        assert!(!st.isolate(p, o2), "isolated once");
        assert_eq!(st.take_for_free(p, o2), Err(FreeError::Busy));
        st.putback(p, o2);
        assert!(st.is_live_allocation(p));
        assert!(st.isolate(p, o2));
        st.moved_out(p, o2);
        assert_eq!(st.take_for_free(p, o2), Err(FreeError::Busy));
        assert!(
            !st.isolate(p, o2),
            "a moved-out source is nobody's to isolate"
        );
        st.moved(p, Pfn(108), o2);
        assert_eq!(st.get(p), State::Free);
        assert_eq!(st.get(Pfn(108)), State::Allocated(o2, MigrateType::Movable));
        // Out of the span: free, never taken.
        assert_eq!(st.get(Pfn(10)), State::Free);
        assert_eq!(st.take_for_free(Pfn(10), o2), Err(FreeError::OutOfRange));
        assert!(!st.isolate(Pfn(u64::MAX), o2));
        let mut short = [MaybeUninit::<u8>::uninit(); 8];
        assert!(FrameStates::new(span, &mut short).is_none());
    }

    /// A pinned block is still the owner's allocation to every reader; a
    /// cache refuses it, a free or a split takes it (both halves pinned),
    /// isolation never does.
    #[test]
    fn pinned_blocks_skip_the_caches() {
        let span = PfnRange::new(Pfn(0), Pfn(64));
        let mut mem = [MaybeUninit::<u8>::uninit(); 64];
        let st = FrameStates::new(span, &mut mem).unwrap();
        let (o1, o2) = (Order::new(1).unwrap(), Order::new(2).unwrap());
        let p = Pfn(8);
        assert!(!st.set_pinned(p, o2, true), "not allocated");
        st.set_allocated(p, o2, MigrateType::Movable);
        assert!(!st.set_pinned(p, o1, true), "another order");
        assert!(st.set_pinned(p, o2, true));
        assert!(st.is_pinned(p));
        assert_eq!(st.get(p), State::Allocated(o2, MigrateType::Movable));
        assert_eq!(st.take_for_cache(p, o2), Err(FreeError::Busy));
        assert!(!st.isolate(p, o2));
        assert_eq!(st.take_for_split(p, o2), Ok(MigrateType::Movable));
        st.mirror(p, p + 2);
        for h in [p, p + 2] {
            assert_eq!(st.get(h), State::Allocated(o1, MigrateType::Movable));
            assert!(st.is_pinned(h));
        }
        assert!(st.set_pinned(p + 2, o1, false));
        assert_eq!(st.take_for_cache(p + 2, o1), Ok(MigrateType::Movable));
        assert_eq!(st.take_for_free(p, o1), Ok(MigrateType::Movable));
        assert_eq!(st.get(p), State::Free);
        assert!(!st.is_pinned(p));
    }

    #[test]
    fn every_state_round_trips() {
        for o in 0..=pageframe_buddy::ORDER_LIMIT {
            let o = Order::new(o).unwrap();
            for mt in [
                MigrateType::Unmovable,
                MigrateType::Movable,
                MigrateType::Reclaimable,
            ] {
                assert_eq!(decode(allocated(o, mt)), State::Allocated(o, mt));
                assert_eq!(decode(allocated(o, mt) | PINNED), State::Allocated(o, mt));
            }
            assert_eq!(decode(encode(CACHED, o)), State::Cached(o));
            assert_eq!(decode(encode(ISOLATED, o)), State::Isolated(o));
            assert_eq!(decode(encode(MOVED_OUT, o)), State::MovedOut(o));
        }
        assert_eq!(decode(FREE), State::Free);
    }

    #[test]
    fn the_hint_names_the_frames_own_byte() {
        let span = PfnRange::new(Pfn(100), Pfn(164));
        let mut mem = [MaybeUninit::<u8>::uninit(); 64];
        let st = FrameStates::new(span, &mut mem).unwrap();
        let hint = st.prefetcher();
        for f in span.start.get()..span.end.get() {
            let byte = st.slot(Pfn(f)).expect("in the span");
            assert_eq!(hint.line(Pfn(f)), core::ptr::from_ref(byte).addr());
        }
    }
}
