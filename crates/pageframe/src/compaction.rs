//! How the machine runs `pageframe-compact` on its zones: the compaction
//! crate has every rule (scanners, suitability, deferral, direct
//! compaction, kcompactd, proactive compaction); this module only gives it
//! the zones and keeps the ownership bytes ([`crate::frame_state`]) in step
//! with the moves, so that a block being migrated can be neither freed nor
//! cached behind the compactor's back.

use pageframe_buddy::{Order, Pfn};
use pageframe_compact::{MigrateError, MigrateMode, Migrator, NodeZone, ZoneLock};
use pageframe_mobility::{MobileZone, ZoneMarks};

use crate::lock::RawMutex;
use crate::machine::Machine;
use crate::topology::MAX_NUMNODES;
use crate::zone::{NR_ZONE_KINDS, Zone, ZoneKind};
use crate::zonelist::ZoneRef;

/// A machine's zone as the compaction crate reaches it: under the zone's
/// own lock, one short critical section at a time. Private: nothing
/// outside the machine gets the zone's free lists.
pub(crate) struct Locked<'z, 'a, R: RawMutex>(pub &'z Zone<'a, R>);

impl<R: RawMutex> ZoneLock for Locked<'_, '_, R> {
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>)) {
        self.0.with_zone(|z| f(z))
    }
}

/// Most zones one compaction pass looks at (every zone of every node).
const MAX_ZONES: usize = MAX_NUMNODES * NR_ZONE_KINDS;

/// The zones of one pass, in order, with the marks held against the
/// requester.
pub(crate) struct ZoneSet<'z, 'a, R: RawMutex> {
    /// Entries at and beyond `len` repeat the first zone (never read).
    zones: [&'z Zone<'a, R>; MAX_ZONES],
    refs: [ZoneRef; MAX_ZONES],
    marks: [ZoneMarks; MAX_ZONES],
    len: usize,
}

impl<'z, 'a, R: RawMutex> ZoneSet<'z, 'a, R> {
    /// The zones `refs` names (up to `highest`), in that order, with the
    /// marks held against a requester whose highest zone is `highest`.
    /// `None` if there is none.
    pub(crate) fn new(
        machine: &'z Machine<'a, R>,
        refs: impl Iterator<Item = ZoneRef>,
        highest: ZoneKind,
    ) -> Option<Self> {
        let mut found = refs
            .filter(|r| r.kind <= highest)
            .filter_map(|r| Some((r, machine.zone(r)?)))
            .take(MAX_ZONES);
        let (r0, z0) = found.next()?;
        let mut s = ZoneSet {
            zones: [z0; MAX_ZONES],
            refs: [r0; MAX_ZONES],
            marks: [z0.marks(highest); MAX_ZONES],
            len: 1,
        };
        for (r, z) in found {
            s.zones[s.len] = z;
            s.refs[s.len] = r;
            s.marks[s.len] = z.marks(highest);
            s.len += 1;
        }
        Some(s)
    }

    /// Runs `f` on the compaction crate's view of the zones: each with its
    /// lock, compaction state and marks, in order.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&[NodeZone<'_, Locked<'z, 'a, R>>]) -> T) -> T {
        let locks: [Locked<'z, 'a, R>; MAX_ZONES] = core::array::from_fn(|i| Locked(self.zones[i]));
        let view: [NodeZone<'_, Locked<'z, 'a, R>>; MAX_ZONES] = core::array::from_fn(|i| {
            NodeZone::new(&locks[i], &self.zones[i].compact, self.marks[i])
        });
        f(&view[..self.len])
    }

    /// Number of zones.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `i`-th zone's reference.
    pub(crate) fn zone_ref(&self, i: usize) -> ZoneRef {
        self.refs[i.min(self.len - 1)]
    }

    /// The `i`-th zone.
    pub(crate) fn zone(&self, i: usize) -> &'z Zone<'a, R> {
        self.zones[i.min(self.len - 1)]
    }
}

/// Wraps the kernel's migrator for one compaction pass over the machine's
/// zones: the ownership byte of a source goes to "isolated" by
/// compare-and-swap before the kernel is asked (so a concurrent free gets
/// `Busy`, and a block freed or cached meanwhile is refused), back to
/// "allocated" if it does not move, and to the destination once moved; the
/// destination is "isolated" from the move until then.
pub(crate) struct Guarded<'g, 'z, 'a, R: RawMutex, M: Migrator + ?Sized> {
    pub inner: &'g mut M,
    pub machine: &'z Machine<'a, R>,
}

impl<R: RawMutex, M: Migrator + ?Sized> Migrator for Guarded<'_, '_, '_, R, M> {
    fn isolate(&mut self, pfn: Pfn, order: Order, tag: u32) -> bool {
        let Some(z) = self.machine.zone_of(pfn) else {
            return false;
        };
        if !z.states.isolate(pfn, order) {
            return false;
        }
        if self.inner.isolate(pfn, order, tag) {
            true
        } else {
            z.states.putback(pfn, order);
            false
        }
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        // The kernel may publish `dst` to the owner as soon as it has moved
        // the data: until `migrated` settles the books, its free is `Busy`.
        let z = self.machine.zone_of(dst);
        if let Some(z) = z {
            z.states.set_isolated(dst, order);
        }
        let r = self.inner.migrate(src, dst, order, mode);
        if let Some(z) = z {
            match r {
                Ok(()) => z.states.moved_out(src, order),
                Err(_) => z.states.set_free(dst),
            }
        }
        r
    }

    fn putback(&mut self, src: Pfn, order: Order) {
        self.inner.putback(src, order);
        if let Some(z) = self.machine.zone_of(src) {
            z.states.putback(src, order);
        }
    }

    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        if let Some(z) = self.machine.zone_of(src) {
            z.states.moved(src, dst, order);
        }
        self.inner.migrated(src, dst, order)
    }

    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        self.inner.checkpoint(migrate_pfn, free_pfn)
    }

    fn drain_caches(&mut self) {
        self.inner.drain_caches()
    }
}
