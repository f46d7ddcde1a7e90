//! The pageblock pool: a few free pageblocks a zone keeps off its free
//! lists, so that a block of exactly the pageblock order (a huge page)
//! goes back and comes out again without the zone lock, for a caller
//! with no CPU handle as much as for one with.
//!
//! A free of an unpinned allocation of the pageblock order takes its
//! ownership byte to "cached" by compare-and-swap (as a free into a
//! per-CPU cache does) and puts the block in an empty slot by another; an
//! ordinary request of that order (no reserve access, the zone above its
//! mark: what a per-CPU cache would serve) takes a slot holding a block of
//! its own type. Neither touches the core: a pooled block stays allocated
//! in the core's books, the split and the merge a block of the pageblock
//! order costs on the free lists are skipped, and a churn of huge pages
//! reuses the same few pageblocks, as Linux's per-CPU lists of the
//! pageblock order do for one CPU.
//!
//! A pooled block is free memory, counted in [`crate::Zone::free_pages`]
//! but not in the counts watermarks are checked against (as a stripe's
//! frames). It goes back to the free lists, where it merges as any free
//! would (`Zone::release_pool`), wherever the zone's stripes give their
//! reservations back (before a range is isolated, taken offline or
//! searched for contiguous memory, and at
//! [`crate::Machine::drain_stripes`], which a kernel calls before it counts
//! free blocks exactly), when a request finds the zone without memory,
//! and when a request of its type would otherwise fall back to another
//! type's pageblock.
//!
//! How many slots a zone uses: one for every [`PAGEBLOCKS_PER_SLOT`]
//! pageblocks of memory it manages, at most [`POOL_SLOTS`] (so the pool
//! holds at most 1/64 of a zone's memory; none in a zone under 64
//! pageblocks), set again whenever memory comes or goes (with the
//! watermarks), unless [`crate::tune::Tunables::set_pageblock_pool`] fixed
//! it.

use core::mem::MaybeUninit;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use pageframe_buddy::{Order, Pfn};
use pageframe_mobility::MigrateType;

use crate::sync::{AtomicBool, AtomicU8, AtomicU64};

/// Slots a zone's pool has room for.
pub const POOL_SLOTS: usize = 4;

/// A zone uses one slot for this many pageblocks of the memory it manages.
pub const PAGEBLOCKS_PER_SLOT: u64 = 64;

/// A slot's value: 0 for an empty slot, else the block's first frame
/// shifted up by two and its type's index plus one below.
const TYPE_BITS: u32 = 2;
const TYPE_MASK: u64 = (1 << TYPE_BITS) - 1;

/// The index plus one of a basic type (`None` for the others, which the
/// pool never holds).
#[inline(always)]
fn tag(mt: MigrateType) -> Option<u64> {
    match mt {
        MigrateType::Unmovable => Some(1),
        MigrateType::Movable => Some(2),
        MigrateType::Reclaimable => Some(3),
        _ => None,
    }
}

/// A slot on lines of its own: two CPUs freeing and taking huge pages at
/// once each keep to the slot their hint names, without the other's
/// writes taking the line away (128 bytes: adjacent-line prefetchers pair
/// lines).
#[repr(align(128))]
struct Slot(AtomicU64);

impl core::ops::Deref for Slot {
    type Target = AtomicU64;
    #[inline(always)]
    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

/// A zone's pool, in the zone's metadata: the slots each on lines of their
/// own, and the rest (read on every call, written when memory comes or
/// goes) on another.
#[repr(align(128))]
pub(crate) struct PageblockPool {
    slots: [Slot; POOL_SLOTS],
    /// Slots in use: `put` fills and `take` looks at the first `len`
    /// (a block left beyond them after a shrink is still found by
    /// `drain`).
    len: AtomicU8,
    /// Whether the tunable fixed `len` (else it follows managed memory).
    fixed: AtomicBool,
    /// The pageblock order: the only order the pool holds.
    order: Order,
}

impl PageblockPool {
    /// Bytes of metadata a zone's pool needs from a buffer at any address.
    pub(crate) const fn bytes() -> usize {
        match pageframe_types::carve::bytes_for::<PageblockPool>(1) {
            Some(b) => b,
            None => usize::MAX,
        }
    }

    /// The empty pool, without slots, of a zone whose pageblocks are of
    /// `order`, at the front of `mem`.
    pub(crate) fn carve(
        mem: &mut [MaybeUninit<u8>],
        order: Order,
    ) -> Option<(&PageblockPool, &mut [MaybeUninit<u8>])> {
        let (pool, rest) =
            pageframe_types::carve::carve_init(mem, 1, |_| PageblockPool::new(order))?;
        Some((&pool[0], rest))
    }

    /// The empty pool, without slots, of a zone whose pageblocks are of
    /// `order`.
    pub(crate) fn new(order: Order) -> Self {
        PageblockPool {
            slots: core::array::from_fn(|_| Slot(AtomicU64::new(0))),
            len: AtomicU8::new(0),
            fixed: AtomicBool::new(false),
            order,
        }
    }

    /// The slots of a zone managing `managed` frames:
    /// [`PAGEBLOCKS_PER_SLOT`] pageblocks a slot, at most [`POOL_SLOTS`].
    pub(crate) fn slots_for(&self, managed: u64) -> usize {
        let blocks = managed >> self.order.get();
        (blocks / PAGEBLOCKS_PER_SLOT).min(POOL_SLOTS as u64) as usize
    }

    /// Whether the tunable fixed the slots in use.
    pub(crate) fn fixed(&self) -> bool {
        self.fixed.load(Relaxed)
    }

    /// Fixes the slots in use at `len` (at most [`POOL_SLOTS`]) for good.
    pub(crate) fn fix_len(&self, len: usize) {
        self.fixed.store(true, Relaxed);
        self.set_len(len);
    }

    /// The order of the blocks the pool holds.
    #[inline(always)]
    pub(crate) fn order(&self) -> Order {
        self.order
    }

    /// Slots in use.
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len.load(Relaxed)).min(POOL_SLOTS)
    }

    /// Uses `len` slots from now on (at most [`POOL_SLOTS`]): a block in a
    /// slot beyond them stays there until [`PageblockPool::drain`].
    pub(crate) fn set_len(&self, len: usize) {
        self.len.store(len.min(POOL_SLOTS) as u8, Relaxed);
    }

    /// The slot the caller's hint names ([`crate::stripe::caller_hint`]),
    /// looked at first, if it is in use; and the slots in use.
    #[inline(always)]
    fn used(&self) -> (Option<&AtomicU64>, &[Slot]) {
        let (n, h) = (self.len(), crate::stripe::caller_hint() % POOL_SLOTS);
        let used = &self.slots[..n];
        (used.get(h).map(|s| &s.0), used)
    }

    /// Whether the pool may hold a block of `order`: it is the pageblock
    /// order and the pool has slots. Never order 0 (a configuration whose
    /// pageblocks are single frames has no pool: its order-0 paths stay as
    /// they are, and the order-0 test costs no load on them).
    #[inline(always)]
    pub(crate) fn serves(&self, order: Order) -> bool {
        order != Order::ZERO && order == self.order && self.len.load(Relaxed) != 0
    }

    /// A pooled block of type `mt`, taken out (the caller owns it now);
    /// `None` when there is none.
    #[inline]
    pub(crate) fn take(&self, mt: MigrateType) -> Option<Pfn> {
        let want = tag(mt)?;
        let take = |s: &AtomicU64| {
            let v = s.load(Relaxed);
            (v != 0 && v & TYPE_MASK == want)
                .then(|| s.compare_exchange(v, 0, Acquire, Relaxed).ok())
                .flatten()
                .map(|v| Pfn(v >> TYPE_BITS))
        };
        let (first, used) = self.used();
        first
            .and_then(take)
            .or_else(|| used.iter().find_map(|s| take(s)))
    }

    /// An empty slot in use, the caller's own first (a racy answer: `put`
    /// may still find it taken).
    #[inline]
    pub(crate) fn room(&self) -> Option<&AtomicU64> {
        let empty = |s: &&AtomicU64| s.load(Relaxed) == 0;
        let (first, used) = self.used();
        first
            .filter(empty)
            .or_else(|| used.iter().map(|s| &s.0).find(empty))
    }

    /// Puts the block at `pfn`, of type `mt`, in `slot` (from
    /// [`PageblockPool::room`]): `false`, nothing changed, when the slot
    /// was taken meanwhile (or `mt` is not a basic type).
    #[inline]
    pub(crate) fn put(&self, slot: &AtomicU64, pfn: Pfn, mt: MigrateType) -> bool {
        let Some(t) = tag(mt) else {
            return false;
        };
        let v = (pfn.get() << TYPE_BITS) | t;
        slot.compare_exchange(0, v, Release, Relaxed).is_ok()
    }

    /// Whether any slot holds a block (a racy hint).
    #[inline]
    pub(crate) fn holds_any(&self) -> bool {
        self.slots.iter().any(|s| s.load(Relaxed) != 0)
    }

    /// Takes out every block of the slots from `from` on (of type `only`,
    /// if given) and hands each to `give_back`; returns how many.
    pub(crate) fn drain(
        &self,
        from: usize,
        only: Option<MigrateType>,
        mut give_back: impl FnMut(Pfn),
    ) -> usize {
        let mut n = 0;
        for s in self.slots.iter().skip(from) {
            let v = s.load(Relaxed);
            if v == 0 || only.is_some_and(|mt| tag(mt) != Some(v & TYPE_MASK)) {
                continue;
            }
            if s.compare_exchange(v, 0, Acquire, Relaxed).is_ok() {
                give_back(Pfn(v >> TYPE_BITS));
                n += 1;
            }
        }
        n
    }

    /// Frames the pool holds (a racy count).
    pub(crate) fn held_frames(&self) -> u64 {
        let blocks = self.slots.iter().filter(|s| s.load(Relaxed) != 0).count();
        blocks as u64 * self.order.pages()
    }
}

#[cfg(all(test, feature = "std", not(loom)))]
mod tests {
    use super::*;

    /// `put` into the room there is.
    fn put(p: &PageblockPool, pfn: Pfn, mt: MigrateType) -> bool {
        p.room().is_some_and(|s| p.put(s, pfn, mt))
    }

    fn pool(slots: u64) -> PageblockPool {
        let p = PageblockPool::new(Order::new(9).unwrap());
        p.set_len(p.slots_for((slots * PAGEBLOCKS_PER_SLOT) << 9));
        p
    }

    #[test]
    fn slots_follow_managed_memory_up_to_the_bound() {
        assert_eq!(pool(0).len(), 0);
        assert_eq!(pool(1).len(), 1);
        assert_eq!(pool(3).len(), 3);
        assert_eq!(pool(40).len(), POOL_SLOTS);
        // One pageblock short of a slot.
        let p = PageblockPool::new(Order::new(9).unwrap());
        assert_eq!(p.slots_for((PAGEBLOCKS_PER_SLOT - 1) << 9), 0);
        assert!(!p.serves(p.order()));
        assert!(!p.fixed());
        p.fix_len(2);
        assert!(p.fixed() && p.serves(p.order()));
    }

    #[test]
    fn a_block_comes_back_only_for_its_own_type() {
        let p = pool(2);
        let o = p.order();
        assert!(p.serves(o) && !p.serves(Order::ZERO));
        // Frame 0 is a block like any other (the tag keeps its slot
        // from reading empty).
        assert!(put(&p, Pfn(0), MigrateType::Unmovable));
        assert!(put(&p, Pfn(512), MigrateType::Movable));
        assert!(p.room().is_none());
        assert!(!put(&p, Pfn(1024), MigrateType::Movable), "two slots only");
        assert!(!put(&p, Pfn(1024), MigrateType::Cma), "no basic type");
        assert_eq!(p.held_frames(), 1024);
        assert_eq!(p.take(MigrateType::Reclaimable), None);
        assert_eq!(p.take(MigrateType::Movable), Some(Pfn(512)));
        assert_eq!(p.take(MigrateType::Movable), None);
        assert_eq!(p.take(MigrateType::Unmovable), Some(Pfn(0)));
        assert_eq!(p.held_frames(), 0);
    }

    #[test]
    fn a_drain_finds_blocks_beyond_a_shrunk_pool() {
        let p = pool(4);
        let kinds = [
            MigrateType::Movable,
            MigrateType::Reclaimable,
            MigrateType::Movable,
            MigrateType::Unmovable,
        ];
        for (i, mt) in kinds.into_iter().enumerate() {
            assert!(put(&p, Pfn(512 * i as u64), mt));
        }
        p.set_len(1);
        assert!(!p.serves(Order::ZERO) && p.serves(p.order()));
        // Only the first slot is looked at now: one of the four comes out.
        let mut got = std::vec::Vec::new();
        for mt in [
            MigrateType::Movable,
            MigrateType::Reclaimable,
            MigrateType::Unmovable,
        ] {
            got.extend(p.take(mt).map(|b| (b, mt)));
        }
        assert_eq!(got.len(), 1);
        // The others are still found by a drain, by type and then all.
        let movable = p.drain(1, Some(MigrateType::Movable), |b| {
            got.push((b, MigrateType::Movable))
        });
        let rest = p.drain(0, None, |b| {
            let mt = kinds[(b.get() / 512) as usize];
            assert_ne!(mt, MigrateType::Movable, "{b:?} left by the typed drain");
            got.push((b, mt));
        });
        assert_eq!(1 + movable + rest, 4);
        got.sort_unstable_by_key(|&(b, _)| b);
        let want: std::vec::Vec<_> = kinds
            .into_iter()
            .enumerate()
            .map(|(i, mt)| (Pfn(512 * i as u64), mt))
            .collect();
        assert_eq!(got, want);
        assert!(!p.holds_any());
        p.set_len(0);
        assert!(!p.serves(p.order()) && !put(&p, Pfn(0), MigrateType::Movable));
    }
}
