//! A node of a [`crate::Machine`] (spec 01 §3.4, docs/rules/01-buddy.md
//! §3.4): its zones, at most one of each [`ZoneKind`], and the per-node
//! state of the slow path: the node-aware policy's deferral, kcompactd's
//! pending wake-up and daemon state, and counters.

use core::cell::UnsafeCell;
use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::sync::atomic::AtomicU8;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use pageframe_buddy::{Pfn, ValidateError};
use pageframe_compact::{Deferral, DeferralState, Kcompactd, KcompactdWake};

use crate::lock::{Mutex, RawMutex, SpinLock};
use crate::node_id::NodeId;
use crate::numa_stats::{NodeCounters, NodeStats};
use crate::zone_core::Zone;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind};

/// Slot states: no zone; a hot-add is writing the zone; the zone is there.
const EMPTY: u8 = 0;
const FILLING: u8 = 1;
const PRESENT: u8 = 2;

/// A zone slot: filled once, at set-up by [`crate::Machine::add_zone`] or
/// at run time by [`crate::Machine::hot_add_zone`]. The state goes
/// `EMPTY -> FILLING -> PRESENT` and never back: the zone is written while
/// `FILLING` (one writer, the compare-and-swap winner) and published with a
/// release store, so a reader that sees `PRESENT` (acquire) sees the whole
/// zone, and no reference to it exists before.
pub(crate) struct ZoneSlot<'a, R: RawMutex> {
    state: AtomicU8,
    zone: UnsafeCell<MaybeUninit<Zone<'a, R>>>,
}

// SAFETY: the payload is written once, by the one thread that moved the
// state from EMPTY to FILLING (or through `&mut self`), before the release
// store of PRESENT; shared references to it are only made after an acquire
// load saw PRESENT, and it is never written again except through
// `&mut self`. Sharing the slot therefore shares a `Zone`, which needs
// `Zone: Sync`; moving a filled slot moves the zone, hence `Send` too.
unsafe impl<'a, R: RawMutex> Sync for ZoneSlot<'a, R> where Zone<'a, R>: Send + Sync {}

impl<'a, R: RawMutex> ZoneSlot<'a, R> {
    #[inline]
    pub(crate) fn get(&self) -> Option<&Zone<'a, R>> {
        if self.state.load(Acquire) != PRESENT {
            return None;
        }
        // SAFETY: PRESENT was stored (release) after the zone was written,
        // and the acquire load above orders that write before this read; a
        // written zone is never moved out or dropped before the slot, and
        // is only written again through `&mut self`.
        Some(unsafe { (*self.zone.get()).assume_init_ref() })
    }

    pub(crate) fn get_mut(&mut self) -> Option<&mut Zone<'a, R>> {
        if *self.state.get_mut() != PRESENT {
            return None;
        }
        // SAFETY: as in `get`; `&mut self` excludes every other access.
        Some(unsafe { self.zone.get_mut().assume_init_mut() })
    }

    /// Fills the empty slot in place with what `write` writes (a zone built
    /// field by field: no copy of it on the stack). `write` must write the
    /// whole zone when it returns `Ok`, and nothing otherwise.
    pub(crate) fn fill_with<E>(
        &mut self,
        write: impl FnOnce(&mut MaybeUninit<Zone<'a, R>>) -> Result<(), E>,
    ) -> Result<&Zone<'a, R>, E> {
        debug_assert!(*self.state.get_mut() == EMPTY);
        write(self.zone.get_mut())?;
        *self.state.get_mut() = PRESENT;
        // SAFETY: `write` succeeded, so it wrote the zone (its contract).
        Ok(unsafe { self.zone.get_mut().assume_init_ref() })
    }

    /// Fills the empty slot while other CPUs may be reading it. `None` (the
    /// zone dropped) if the slot was not empty: another hot-add won.
    pub(crate) fn fill_shared(&self, zone: Zone<'a, R>) -> Option<&Zone<'a, R>> {
        if self
            .state
            .compare_exchange(EMPTY, FILLING, Acquire, Relaxed)
            .is_err()
        {
            return None;
        }
        // SAFETY: winning the compare-and-swap makes this thread the only
        // one that may touch the payload: readers wait for PRESENT, other
        // fillers lost. The write happens before the release store below.
        unsafe { (*self.zone.get()).write(zone) };
        self.state.store(PRESENT, Release);
        // SAFETY: just written; see `get`.
        Some(unsafe { (*self.zone.get()).assume_init_ref() })
    }

    /// Whether the slot is empty (no zone, no hot-add in progress).
    pub(crate) fn is_empty(&self) -> bool {
        self.state.load(Acquire) == EMPTY
    }
}

impl<R: RawMutex> Drop for ZoneSlot<'_, R> {
    fn drop(&mut self) {
        if *self.state.get_mut() == PRESENT {
            // SAFETY: the zone was written (`PRESENT`) and is dropped once.
            unsafe { self.zone.get_mut().assume_init_drop() };
        }
    }
}

/// The zones of one node and its slow-path state. Reached through
/// [`crate::debug::Inspect::node`]; every memoryless node of the topology has one
/// too (with no zones).
pub struct Node<'a, R: RawMutex = SpinLock> {
    id: NodeId,
    zones: [ZoneSlot<'a, R>; NR_ZONE_KINDS],
    /// The node-aware policy's deferral of the node as a whole.
    pub(crate) defer: Deferral,
    /// kcompactd: the wake-up any CPU records, and the daemon's state.
    pub(crate) wake: KcompactdWake,
    pub(crate) kcompactd: Mutex<R, Kcompactd>,
    pub(crate) counters: NodeCounters,
}

impl<'a, R: RawMutex> Node<'a, R> {
    /// Writes an empty node with id `id` at `p`, field by field, so that no
    /// large temporary is built on the stack.
    ///
    /// # Safety
    ///
    /// `p` must be valid for writes and aligned for a `Node`; whatever it
    /// held is overwritten without being dropped.
    pub(crate) unsafe fn init_at(p: *mut Self, id: NodeId) {
        // SAFETY: the caller guarantees `p` is writable and aligned; each
        // write targets one field (or one zone slot's state or payload) of
        // that allocation through a raw place, creating no reference to
        // uninitialised memory. A slot's zone stays uninitialised until its
        // state says PRESENT.
        unsafe {
            addr_of_mut!((*p).id).write(id);
            for i in 0..NR_ZONE_KINDS {
                addr_of_mut!((*p).zones[i].state).write(AtomicU8::new(EMPTY));
                addr_of_mut!((*p).zones[i].zone).write(UnsafeCell::new(MaybeUninit::uninit()));
            }
            addr_of_mut!((*p).defer).write(Deferral::new());
            addr_of_mut!((*p).wake).write(KcompactdWake::new());
            addr_of_mut!((*p).kcompactd).write(Mutex::new(Kcompactd::new()));
            addr_of_mut!((*p).counters).write(NodeCounters::new());
        }
    }

    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The zone of `kind`, if present.
    pub fn zone(&self, kind: ZoneKind) -> Option<&Zone<'a, R>> {
        self.zones[kind.index()].get()
    }

    pub(crate) fn slot(&self, kind: ZoneKind) -> &ZoneSlot<'a, R> {
        &self.zones[kind.index()]
    }

    pub(crate) fn slot_mut(&mut self, kind: ZoneKind) -> &mut ZoneSlot<'a, R> {
        &mut self.zones[kind.index()]
    }

    pub(crate) fn zones_mut(&mut self) -> impl Iterator<Item = &mut Zone<'a, R>> {
        self.zones.iter_mut().filter_map(ZoneSlot::get_mut)
    }

    /// Present zones, low to high.
    pub fn zones(&self) -> impl DoubleEndedIterator<Item = &Zone<'a, R>> + '_ {
        self.zones.iter().filter_map(ZoneSlot::get)
    }

    /// Whether the node has memory (a zone).
    pub fn has_memory(&self) -> bool {
        self.zones().next().is_some()
    }

    /// The zone whose span holds `pfn`.
    pub fn zone_of(&self, pfn: Pfn) -> Option<&Zone<'a, R>> {
        self.zones().find(|z| z.span().contains(pfn))
    }

    /// Free frames over the node's zones (not counting per-CPU caches).
    pub fn free_pages(&self) -> u64 {
        self.zones().map(|z| z.free_pages()).sum()
    }

    /// Managed frames over the node's zones.
    pub fn managed_pages(&self) -> u64 {
        self.zones().map(|z| z.managed_pages()).sum()
    }

    /// Checks every zone of the node.
    pub fn validate(&self) -> Result<(), ValidateError> {
        self.zones().try_for_each(|z| z.validate())
    }

    /// The node's counters: its own (huge pages, stalls, reclaim), and the
    /// compaction counters of its zones added up.
    pub fn stats(&self) -> NodeStats {
        let mut s = self.counters.snapshot();
        for z in self.zones() {
            s.compact += z.compact_state().stats();
        }
        if let Some(k) = self.kcompactd.try_lock() {
            s.kcompactd = k.stats();
        }
        s
    }

    /// The node-aware policy's deferral of this node.
    pub fn deferral(&self) -> DeferralState {
        self.defer.state()
    }

    /// Whether kcompactd has a wake-up pending.
    pub fn kcompactd_pending(&self) -> bool {
        self.wake.pending()
    }

    /// A `/proc/buddyinfo` report of the node: one line a zone.
    pub fn buddyinfo(&self) -> BuddyInfo<'_, 'a, R> {
        BuddyInfo(self)
    }
}

/// `/proc/buddyinfo` for a node: `Node N, zone <name> <free blocks per order>`.
pub struct BuddyInfo<'n, 'a, R: RawMutex>(&'n Node<'a, R>);

impl<R: RawMutex> fmt::Display for BuddyInfo<'_, '_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in self.0.zones() {
            writeln!(f, "{z}")?;
        }
        Ok(())
    }
}
