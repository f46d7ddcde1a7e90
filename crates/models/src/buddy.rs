//! A reference model of a zone (frame by frame: hole, free or allocated) and
//! an operation language, shared by the property tests and the fuzz target
//! so both check the same rules. Host only (`std` feature).

use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

use pageframe_buddy::{
    AllocError, BlockInfo, BuddyZone, FreeError, ListId, MAX_LISTS, MergePolicy, Order, Pfn,
    PfnRange, RangeError, Reservation,
};

/// One operation on a zone.
#[derive(Clone, Debug)]
pub enum Op {
    /// Allocate a block of this order (may exceed the maximum).
    Alloc(u8),
    /// Free the n-th live block (modulo their number).
    Free(usize),
    /// Free an arbitrary frame with an arbitrary order: usually bad input.
    FreeAny(u64, u8),
    /// Allocate the block at a frame.
    AllocAt(u64, u8),
    /// Reserve `[start, start + len)`.
    Reserve(u64, u64),
    /// Release the n-th reserved range.
    Release(usize),
    /// Reserve a chunk's free frames for order-0 allocations.
    Hold,
    /// Allocate a frame from the n-th reservation.
    HeldAlloc(usize),
    /// Free the n-th frame allocated from a reservation still held: back to
    /// the reservation, or (`true`) to the zone as a caller that checked
    /// ownership itself does (`free_unchecked`).
    HeldFree(usize, bool),
    /// Give the n-th reservation back.
    Unhold(usize),
    /// Allocate a run of this many frames as order-0 allocations
    /// (`BuddyZone::alloc_frame_run`; 0 and more than 64 are bad input).
    AllocRun(u32),
    /// Free the run of this many order-0 allocations from a frame
    /// (`BuddyZone::free_frame_run`): usually bad input.
    FreeRun(u64, u32),
    /// Free the run of order-0 allocations that starts at the n-th live
    /// block, as long as the blocks after it are frames too (at most this
    /// many).
    FreeLiveRun(usize, u32),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum F {
    Hole,
    Free,
    Used,
    /// Free, but held by a reservation (or freed into a reserved chunk):
    /// not the zone's to hand out until the reservation is given back.
    Held,
}

/// What the zone should look like.
pub struct Model {
    span: PfnRange,
    max: u8,
    frames: Vec<F>,
    live: BTreeMap<u64, u8>,
    reserved: Vec<(u64, u64)>,
    /// Reservations held, with the frames each allocated and still holds.
    held: Vec<(Reservation, Vec<u64>)>,
}

macro_rules! ensure {
    ($c:expr, $($t:tt)*) => { if !$c { return Err(format!($($t)*)); } };
}

impl Model {
    /// A model of a zone over `span` with maximum order `max`, all holes.
    pub fn new(span: PfnRange, max: Order) -> Model {
        Model {
            span,
            max: max.get(),
            frames: vec![F::Hole; span.len() as usize],
            live: BTreeMap::new(),
            reserved: vec![],
            held: vec![],
        }
    }

    fn at(&self, p: u64) -> F {
        self.frames[(p - self.span.start.get()) as usize]
    }

    fn all_free(&self, a: u64, b: u64) -> bool {
        (a..b).all(|p| self.at(p) == F::Free)
    }

    fn set(&mut self, a: u64, b: u64, f: F) {
        let s = self.span.start.get();
        self.frames[(a - s) as usize..(b - s) as usize].fill(f);
    }

    fn take(&mut self, p: u64, k: u8) {
        self.set(p, p + (1 << k), F::Used);
        self.live.insert(p, k);
    }

    fn release(&mut self, p: u64, k: u8) {
        self.live.remove(&p);
        self.set(p, p + (1 << k), F::Free);
        self.reserved.retain(|&(a, b)| !(a <= p && p < b));
    }

    /// The reservation whose chunk holds `p`, if any.
    fn holder(&self, p: u64) -> Option<usize> {
        self.held.iter().position(|(r, _)| r.contains(Pfn(p)))
    }

    /// Frees a live block whose chunk is reserved: its frames wait for the
    /// reservation's return.
    fn release_held(&mut self, p: u64, k: u8) {
        self.live.remove(&p);
        self.set(p, p + (1 << k), F::Held);
        self.reserved.retain(|&(a, b)| !(a <= p && p < b));
    }

    /// Free frames.
    pub fn free_count(&self) -> u64 {
        self.frames.iter().filter(|f| **f == F::Free).count() as u64
    }

    /// Whether some aligned block of order `k` is wholly free: with full
    /// merging the buddy must then be able to serve it.
    fn fits(&self, k: u8) -> bool {
        let n = 1u64 << k;
        let (s, e) = (self.span.start.get(), self.span.end.get());
        (s.div_ceil(n) * n..e)
            .step_by(n as usize)
            .any(|p| p + n <= e && self.all_free(p, p + n))
    }

    /// Hands `range` over to both; the zone must accept exactly the ranges
    /// that overlap nothing handed over before.
    pub fn add_range<P: MergePolicy>(
        &mut self,
        z: &mut BuddyZone<'_, P>,
        range: PfnRange,
    ) -> Result<(), String> {
        let range = range.intersect(&self.span);
        let clash = (range.start.get()..range.end.get()).find(|&p| self.at(p) != F::Hole);
        match z.add_free_range(range) {
            Ok(()) => {
                ensure!(clash.is_none(), "accepted an overlapping range {range:?}");
                self.set(range.start.get(), range.end.get(), F::Free);
            }
            Err(RangeError::Overlap { pfn }) => ensure!(
                Some(pfn.get()) == clash,
                "overlap at {pfn:?}, model {clash:?}"
            ),
            Err(e) => ensure!(
                range.is_empty() && e == RangeError::Empty,
                "unexpected {e:?}"
            ),
        }
        self.check(z)
    }

    /// Applies `op` to both and compares.
    pub fn step<P: MergePolicy>(
        &mut self,
        z: &mut BuddyZone<'_, P>,
        op: &Op,
    ) -> Result<(), String> {
        let max = self.max;
        let span = self.span;
        match *op {
            Op::Alloc(k) => {
                let Some(order) = Order::new(k) else {
                    return Ok(());
                };
                let res = z.alloc(order, ListId::DEFAULT);
                if k > max {
                    ensure!(
                        res == Err(AllocError::OrderTooLarge),
                        "order {k} above max: {res:?}"
                    );
                } else {
                    let possible = self.fits(k);
                    match res {
                        Ok(p) => {
                            ensure!(possible, "allocated although nothing fits");
                            ensure!(p.is_aligned(order), "misaligned block {p:?}");
                            ensure!(
                                self.all_free(p.get(), p.get() + (1 << k)),
                                "handed out a busy frame at {p:?}"
                            );
                            self.take(p.get(), k);
                        }
                        Err(e) => ensure!(
                            e == AllocError::OutOfMemory && !possible,
                            "refused ({e:?}) although a block fits"
                        ),
                    }
                }
            }
            Op::Free(n) => {
                if let Some((&p, &k)) = self.live.iter().nth(n % self.live.len().max(1)) {
                    let res = z.free(Pfn(p), Order::new(k).unwrap_or_default());
                    match self.holder(p) {
                        Some(h) if self.held[h].1.contains(&p) => ensure!(
                            res == Err(FreeError::Busy),
                            "free of a frame a reservation handed out: {res:?}"
                        ),
                        Some(_) => {
                            ensure!(res.is_ok(), "free of a live block failed: {res:?}");
                            self.release_held(p, k);
                        }
                        None => {
                            ensure!(res.is_ok(), "free of a live block failed: {res:?}");
                            self.release(p, k);
                        }
                    }
                }
            }
            Op::FreeAny(p, k) => {
                let Some(order) = Order::new(k) else {
                    return Ok(());
                };
                let before = (z.free_pages(), z.stats());
                let res = z.free(Pfn(p), order);
                let handed = self.holder(p).is_some_and(|h| self.held[h].1.contains(&p));
                if handed {
                    // The core cannot tell a frame a reservation handed out.
                    ensure!(res.is_err(), "free of a handed-out frame accepted");
                    ensure!(
                        (z.free_pages(), z.stats()) == before,
                        "a refused free changed state"
                    );
                } else if self.live.get(&p) == Some(&k) {
                    ensure!(res.is_ok(), "valid free refused: {res:?}");
                    if self.holder(p).is_some() {
                        self.release_held(p, k);
                    } else {
                        self.release(p, k);
                    }
                } else {
                    let Err(e) = res else {
                        return Err(format!("bad free of {p:#x}/{k} accepted"));
                    };
                    ensure!(
                        (z.free_pages(), z.stats()) == before,
                        "a refused free changed state"
                    );
                    let want = if k > max {
                        FreeError::OrderTooLarge
                    } else if !span.contains(Pfn(p)) {
                        FreeError::OutOfRange
                    } else if p % (1 << k) != 0 {
                        FreeError::Misaligned
                    } else {
                        match self.at(p) {
                            F::Hole => FreeError::Hole,
                            F::Free => FreeError::AlreadyFree,
                            // Held by a reservation: free in it (the core
                            // cannot tell: busy) or freed to the zone.
                            F::Held if e == FreeError::Busy => e,
                            F::Held => FreeError::AlreadyFree,
                            F::Used => e,
                        }
                    };
                    ensure!(e == want, "free({p:#x}, {k}) gave {e:?}, model {want:?}");
                    if let FreeError::NotBlockHead { head, order } = e {
                        ensure!(
                            self.live.get(&head.get()) == Some(&order.get()),
                            "wrong head {head:?}"
                        );
                        ensure!(
                            head.get() < p && p < head.get() + order.pages(),
                            "head does not contain frame"
                        );
                    }
                    if let FreeError::WrongOrder { allocated } = e {
                        ensure!(
                            self.live.get(&p) == Some(&allocated.get()),
                            "wrong order reported"
                        );
                    }
                }
            }
            Op::AllocAt(p, k) => {
                let Some(order) = Order::new(k.min(max)) else {
                    return Ok(());
                };
                let k = order.get();
                let end = p.saturating_add(1 << k);
                let ok = span.contains(Pfn(p))
                    && end <= span.end.get()
                    && p % (1 << k) == 0
                    && self.all_free(p, end);
                let res = z.alloc_at(Pfn(p), order);
                ensure!(
                    res.is_ok() == ok,
                    "alloc_at({p:#x}, {k}) = {res:?}, model says {ok}"
                );
                if ok {
                    self.take(p, k);
                }
            }
            Op::Reserve(a, n) => {
                let b = a.saturating_add(n).min(span.end.get());
                let ok = a < b && span.contains(Pfn(a)) && self.all_free(a, b);
                let res = z.reserve_range(PfnRange::new(Pfn(a), Pfn(b)));
                ensure!(
                    res.is_ok() == ok,
                    "reserve [{a:#x}, {b:#x}) = {res:?}, model says {ok}"
                );
                if ok {
                    let mut p = a;
                    while p < b {
                        let Some(BlockInfo::Allocated { head, order, .. }) = z.block_at(Pfn(p))
                        else {
                            return Err(format!("reserved frame {p:#x} not allocated"));
                        };
                        ensure!(head.get() == p, "reserved blocks do not tile the range");
                        self.take(p, order.get());
                        p += order.pages();
                    }
                    ensure!(p == b, "reserved blocks overrun the range");
                    self.reserved.push((a, b));
                }
            }
            Op::Release(n) => {
                if !self.reserved.is_empty() {
                    let (a, b) = self.reserved.remove(n % self.reserved.len());
                    if (a..b).any(|p| self.holder(p).is_some()) {
                        // A reserved chunk's frames wait for the reservation.
                        let res = z.release_range(PfnRange::new(Pfn(a), Pfn(b)));
                        ensure!(
                            matches!(res, Err(RangeError::Busy { .. })),
                            "release over a reserved chunk: {res:?}"
                        );
                        self.reserved.push((a, b));
                        return self.check(z);
                    }
                    let res = z.release_range(PfnRange::new(Pfn(a), Pfn(b)));
                    ensure!(res.is_ok(), "release of a reserved range failed: {res:?}");
                    self.live.retain(|&p, _| !(a <= p && p < b));
                    self.set(a, b, F::Free);
                }
            }
            Op::Hold => {
                let before = self.free_count();
                let Some(r) = z.reserve(ListId::DEFAULT, 7, 0) else {
                    ensure!(
                        before == 0 || z.chunk_order() == Order::ZERO,
                        "no reservation although memory is free"
                    );
                    return self.check(z);
                };
                let c = z.chunk_order().pages();
                let start = r.chunk_start().get();
                ensure!(start % c == 0, "reservation not chunk-aligned");
                let mut given = 0;
                for p in start..start + c {
                    if span.contains(Pfn(p)) && self.at(p) == F::Free {
                        self.set(p, p + 1, F::Held);
                        given += 1;
                    }
                }
                ensure!(
                    given == u64::from(r.free_frames()) && given > 0,
                    "reservation holds {} frames, the chunk had {given} free",
                    r.free_frames()
                );
                self.held.push((r, vec![]));
            }
            Op::HeldAlloc(n) => {
                if !self.held.is_empty() {
                    let h = n % self.held.len();
                    match self.held[h].0.alloc() {
                        Some(p) => {
                            let p = p.get();
                            ensure!(self.at(p) == F::Held, "reservation handed out {p:#x}");
                            self.set(p, p + 1, F::Used);
                            self.live.insert(p, 0);
                            self.held[h].1.push(p);
                        }
                        None => ensure!(
                            self.held[h].0.free_frames() == 0,
                            "reservation with free frames refused"
                        ),
                    }
                }
            }
            Op::HeldFree(n, to_zone) => {
                let all: Vec<(usize, usize)> = (0..self.held.len())
                    .flat_map(|h| (0..self.held[h].1.len()).map(move |i| (h, i)))
                    .collect();
                if !all.is_empty() {
                    let (h, i) = all[n % all.len()];
                    let p = self.held[h].1.swap_remove(i);
                    if to_zone {
                        // SAFETY: `p` is a live order-0 block (the model's
                        // record, as the facade's ownership byte would be).
                        unsafe { z.free_unchecked(Pfn(p), Order::ZERO) };
                    } else {
                        ensure!(
                            self.held[h].0.free(Pfn(p)),
                            "reservation refused its own frame"
                        );
                        ensure!(!self.held[h].0.free(Pfn(p)), "a frame taken back twice");
                    }
                    self.release_held(p, 0);
                }
            }
            Op::AllocRun(n) => {
                let c = z.chunk_order().get();
                let want = n.max(1).next_power_of_two().trailing_zeros() as u8;
                let possible = (1..=64).contains(&n) && want < c && self.fits(want);
                let before = (z.free_pages(), z.stats());
                match z.alloc_frame_run(ListId::DEFAULT, n, 0) {
                    Some(p) => {
                        let (p, n) = (p.get(), u64::from(n));
                        ensure!(possible, "a run of {n} although no block holds it");
                        ensure!(
                            self.all_free(p, p + n),
                            "handed out a busy frame in {p:#x}+{n}"
                        );
                        let word = |f: u64| (f - self.base()) / 64;
                        let chunk = |f: u64| (f - self.base()) >> c;
                        ensure!(
                            word(p) == word(p + n - 1) && chunk(p) == chunk(p + n - 1),
                            "run {p:#x}+{n} across a bitmap word"
                        );
                        for f in p..p + n {
                            self.take(f, 0);
                        }
                    }
                    None => {
                        ensure!(!possible, "no run of {n} although a block holds it");
                        ensure!(
                            (z.free_pages(), z.stats()) == before,
                            "a refused run changed state"
                        );
                    }
                }
            }
            Op::FreeRun(p, n) => self.free_run(z, p, n)?,
            Op::FreeLiveRun(i, n) => {
                if let Some((&p, _)) = self.live.iter().nth(i % self.live.len().max(1)) {
                    let frames = (p..p + u64::from(n.clamp(1, 64)))
                        .take_while(|f| self.live.get(f) == Some(&0))
                        .count();
                    self.free_run(z, p, frames as u32)?;
                }
            }
            Op::Unhold(n) => {
                if !self.held.is_empty() {
                    let (r, mine) = self.held.swap_remove(n % self.held.len());
                    let c = z.chunk_order().pages();
                    let start = r.chunk_start().get();
                    ensure!(z.unreserve(r).is_ok(), "own reservation refused");
                    for p in start..start + c {
                        if span.contains(Pfn(p)) && self.at(p) == F::Held {
                            self.set(p, p + 1, F::Free);
                        }
                    }
                    for p in mine {
                        ensure!(
                            matches!(z.block_at(Pfn(p)), Some(BlockInfo::Allocated { head, order, tag: 7 }) if head.get() == p && order == Order::ZERO),
                            "frame {p:#x} from a reservation is not an order-0 block with its tag"
                        );
                    }
                }
            }
        }
        self.check(z)
    }

    /// The first frame the zone's chunks and bitmap words count from (the
    /// span's start rounded down to the maximum order, as the zone does).
    fn base(&self) -> u64 {
        self.span.start.get() & !((1u64 << self.max) - 1)
    }

    /// `free_frame_run(p, n)` on both: accepted exactly for 1 to 64 order-0
    /// allocations no reservation handed out, inside one bitmap word of one
    /// split chunk; anything else refused with nothing changed.
    fn free_run<P: MergePolicy>(
        &mut self,
        z: &mut BuddyZone<'_, P>,
        p: u64,
        n: u32,
    ) -> Result<(), String> {
        let c = z.chunk_order().get();
        let n64 = u64::from(n);
        let rel = p.wrapping_sub(self.base());
        let valid = (1..=64).contains(&n)
            && c > 0
            && self.span.contains(Pfn(p))
            && (p..p + n64).all(|f| self.live.get(&f) == Some(&0) && self.holder(f).is_none())
            && rel % 64 + n64 <= 64
            && (rel & ((1 << c) - 1)) + n64 <= 1 << c;
        let before = (z.free_pages(), z.stats());
        let res = z.free_frame_run(Pfn(p), n);
        if valid {
            ensure!(res.is_ok(), "valid run {p:#x}+{n} refused: {res:?}");
            for f in p..p + n64 {
                self.release(f, 0);
            }
        } else {
            ensure!(res.is_err(), "bad run {p:#x}+{n} accepted");
            ensure!(
                (z.free_pages(), z.stats()) == before,
                "a refused run changed state"
            );
        }
        Ok(())
    }

    /// `validate()` and the free-frame count.
    pub fn check<P: MergePolicy>(&self, z: &BuddyZone<'_, P>) -> Result<(), String> {
        z.validate().map_err(|e| format!("validate: {e:?}"))?;
        ensure!(
            z.free_pages() == self.free_count(),
            "free pages {} vs model {}",
            z.free_pages(),
            self.free_count()
        );
        // The watermark check's question, from the masks, agrees with the
        // counts order by order.
        for l in (0..MAX_LISTS as u8).filter_map(ListId::new) {
            let mut counted = false;
            for k in (0..=self.max).rev() {
                let o = Order::new(k).unwrap_or_default();
                counted |= z.free_blocks_in(o, l) > 0;
                ensure!(
                    z.has_block_in(o, l) == counted,
                    "has_block_in({k}, {l:?}) = {} but the counts say {counted}",
                    !counted
                );
            }
        }
        Ok(())
    }

    /// Frees every live block, then checks that only maximal blocks remain:
    /// each run of usable frames tiled by the largest aligned blocks.
    pub fn free_all_and_check<P: MergePolicy>(
        &mut self,
        z: &mut BuddyZone<'_, P>,
    ) -> Result<(), String> {
        while !self.held.is_empty() {
            self.step(z, &Op::Unhold(0))?;
        }
        for (p, k) in core::mem::take(&mut self.live) {
            z.free(Pfn(p), Order::new(k).unwrap_or_default())
                .map_err(|e| format!("final free: {e:?}"))?;
            self.set(p, p + (1 << k), F::Free);
        }
        self.reserved.clear();
        self.check(z)?;
        let mut want = vec![0u64; self.max as usize + 1];
        let (s, e) = (self.span.start.get(), self.span.end.get());
        let mut p = s;
        while p < e {
            if self.at(p) == F::Hole {
                p += 1;
                continue;
            }
            let q = (p..e).find(|&q| self.at(q) == F::Hole).unwrap_or(e);
            for (_, k) in
                PfnRange::new(Pfn(p), Pfn(q)).blocks(Order::new(self.max).unwrap_or_default())
            {
                want[k.get() as usize] += 1;
            }
            p = q;
        }
        let got: Vec<u64> = (0..=self.max)
            .map(|k| z.free_blocks(Order::new(k).unwrap_or_default()))
            .collect();
        ensure!(
            got == want,
            "after freeing everything: {got:?}, maximal merging gives {want:?}"
        );
        Ok(())
    }
}
