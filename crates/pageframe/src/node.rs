//! A node of a [`crate::Machine`] (spec 01 §3.4, docs/rules/01-buddy.md
//! §3.4): its zones, at most one of each [`ZoneKind`], and the per-node
//! state of the slow path: the node-aware policy's deferral, kcompactd's
//! pending wake-up and daemon state, and counters.

use core::fmt;
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;

use pageframe_buddy::{Pfn, ValidateError};
use pageframe_compact::{Deferral, DeferralState, Kcompactd, KcompactdWake};

use crate::lock::{Mutex, RawMutex, SpinLock};
use crate::numa_stats::{NodeCounters, NodeStats};
use crate::topology::NodeId;
use crate::zone::{NR_ZONE_KINDS, Zone, ZoneKind};

/// A zone slot: filled once by [`crate::Machine::add_zone`].
pub(crate) struct ZoneSlot<'a, R: RawMutex> {
    present: bool,
    zone: MaybeUninit<Zone<'a, R>>,
}

impl<'a, R: RawMutex> ZoneSlot<'a, R> {
    pub(crate) fn get(&self) -> Option<&Zone<'a, R>> {
        // SAFETY: `present` is set only after `zone` was written, and a
        // written zone is never moved out or dropped before the slot.
        self.present.then(|| unsafe { self.zone.assume_init_ref() })
    }

    pub(crate) fn get_mut(&mut self) -> Option<&mut Zone<'a, R>> {
        // SAFETY: as in `get`.
        self.present.then(|| unsafe { self.zone.assume_init_mut() })
    }

    /// Fills the empty slot.
    pub(crate) fn fill(&mut self, zone: Zone<'a, R>) -> &Zone<'a, R> {
        debug_assert!(!self.present);
        let z = self.zone.write(zone);
        self.present = true;
        z
    }
}

impl<R: RawMutex> Drop for ZoneSlot<'_, R> {
    fn drop(&mut self) {
        if self.present {
            // SAFETY: the zone was written (`present`) and is dropped once.
            unsafe { self.zone.assume_init_drop() };
        }
    }
}

/// The zones of one node and its slow-path state. Reached through
/// [`crate::Machine::node`]; every memoryless node of the topology has one
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
        // write targets one field (or one zone slot's `present` flag) of
        // that allocation through a raw place, creating no reference to
        // uninitialised memory. A slot's zone stays uninitialised until
        // `present` says otherwise.
        unsafe {
            addr_of_mut!((*p).id).write(id);
            for i in 0..NR_ZONE_KINDS {
                addr_of_mut!((*p).zones[i].present).write(false);
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
