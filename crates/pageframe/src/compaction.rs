//! How the machine runs `pageframe-compact` on its zones: the compaction
//! crate has every rule (scanners, suitability, deferral, direct
//! compaction, kcompactd, proactive compaction); this module only gives it
//! the zones and keeps the ownership bytes ([`crate::frame_state`]) in step
//! with the moves, so that a block being migrated can be neither freed nor
//! cached behind the compactor's back.

use pageframe_buddy::{Order, Pfn, PfnRange};
use pageframe_compact::{FrameMover, MigrateError, MigrateMode, Move, NodeZone, ZoneLock};
use pageframe_mobility::{MobileZone, ZoneMarks};

use crate::block::Block;
use crate::debug::{Event, Hooks};
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::node_id::MAX_NUMNODES;
use crate::zone_core::Zone;
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind, ZoneRef};

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
    pub(crate) fn new<P: Platform<Lock = R>>(
        machine: &'z Machine<'a, P>,
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
        let _running: [Option<crate::zone_core::Holding<'z>>; MAX_ZONES] =
            core::array::from_fn(|i| (i < self.len).then(|| self.zones[i].hold()));
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

/// Wraps the kernel's [`crate::Migrator`] for one compaction pass over the
/// machine's zones, as the compaction crate's migrator: the ownership
/// byte of a source goes to "isolated" by compare-and-swap once the
/// kernel has handed the block over (so a free by an `unsafe` copy of
/// its number gets `Busy` from then on), back to "allocated" if
/// the kernel keeps it or it does not move, and to the destination once
/// moved; the destination is "isolated" from the move until then. The
/// blocks the kernel hands over are held as numbers while they move and
/// given back as blocks (`putback`, `migrated`). If the kernel's code
/// panics, the marks it was called under are undone on the way out, and
/// the moves it reported made are recorded as such. The books of a
/// batch's moves are settled before the kernel hears of the first one, so
/// a panic in its `migrated` leaves none unsettled; their destinations stay
/// allocated (the kernel maps them; a block it was not given is lost,
/// never handed out again).
pub(crate) struct Guarded<'g, 'z, 'a, P: Platform, M: crate::Migrator + ?Sized> {
    pub inner: &'g mut M,
    pub machine: &'z Machine<'a, P>,
}

impl<'g, 'z, 'a, P: Platform, M: crate::Migrator + ?Sized> Guarded<'g, 'z, 'a, P, M> {
    pub(crate) fn new(inner: &'g mut M, machine: &'z Machine<'a, P>) -> Self {
        Guarded { inner, machine }
    }

    /// The books of a move: the destination is the owner's block, the
    /// source free unless handed out again.
    fn settle(&self, src: Pfn, dst: Pfn, order: Order) {
        if let Some(z) = self.machine.zone_of(src) {
            // The owner record moves with the contents.
            #[cfg(feature = "page-owner")]
            if let (Some(o), Some(d)) = (z.owners.get(src), self.machine.zone_of(dst)) {
                d.owners.set(dst, order, o);
            }
            z.states.moved(src, dst, order);
        }
    }
}

/// The ownership bytes of a batch the kernel is moving: when the kernel
/// has answered (or panicked), a source it moved is "moved out" (its
/// frames poisoned as free memory when it answered), the destination of a
/// move not made is free again.
struct BatchMarks<'b, 'z, 'a, P: Platform> {
    machine: &'z Machine<'a, P>,
    moves: &'b mut [Move],
    answered: bool,
}

impl<P: Platform> BatchMarks<'_, '_, '_, P> {
    /// Records the kernel's answers; `answered`: it returned (trace events
    /// and poisoning run kernel hooks, not done while a panic unwinds).
    fn record(&mut self, answered: bool) {
        self.answered = true;
        let machine = self.machine;
        for m in self.moves.iter() {
            let (src, dst, order) = (m.src(), m.dst(), m.order());
            if answered && P::Hooks::TRACE {
                machine.hooks.event(&Event::Migrate {
                    from: src,
                    to: dst,
                    order,
                    moved: m.moved(),
                });
            }
            if m.moved() {
                // The source's contents live on at `dst`: what is left
                // becomes free memory.
                if answered {
                    machine.poison_free(PfnRange::new(src, src + order.pages()));
                }
                if let Some(z) = machine.zone_of(src) {
                    z.states.moved_out(src, order);
                }
            } else if let Some(z) = machine.zone_of(dst) {
                z.states.set_free(dst);
            }
        }
    }
}

impl<P: Platform> Drop for BatchMarks<'_, '_, '_, P> {
    fn drop(&mut self) {
        if !self.answered {
            self.record(false);
        }
    }
}

impl<P: Platform, M: crate::Migrator + ?Sized> FrameMover for Guarded<'_, '_, '_, P, M> {
    fn isolate(&mut self, pfn: Pfn, order: Order, _tag: u32) -> bool {
        let Some(z) = self.machine.zone_of(pfn) else {
            return false;
        };
        // The kernel hands the block over first (it may make it from the
        // number it keeps, which `block_from_raw` checks as allocated);
        // then the byte goes to "isolated", so that a free by an `unsafe`
        // copy of the number meanwhile gets `Busy`.
        let Some(b) = self.inner.isolate(pfn, order) else {
            return false;
        };
        if b.machine() == self.machine.id
            && b.pfn() == pfn
            && b.order() == order
            && z.states.isolate(pfn, order)
        {
            // Held as the number from here on; `putback` or `migrated`
            // makes the block again.
            let _ = b.into_raw();
            true
        } else {
            self.inner.putback(b);
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
        let mut one = [Move::new(src, dst, order)];
        self.migrate_batch(&mut one, mode);
        one[0].outcome().unwrap_or(Err(MigrateError::Busy))
    }

    fn migrate_batch(&mut self, moves: &mut [Move], mode: MigrateMode) {
        // The kernel may publish a destination to its owner as soon as it
        // has moved the data: until `migrated` settles the books, its free
        // is `Busy`.
        for m in moves.iter() {
            if let Some(z) = self.machine.zone_of(m.dst()) {
                z.states.set_isolated(m.dst(), m.order());
            }
        }
        let mut marks = BatchMarks {
            machine: self.machine,
            moves,
            answered: false,
        };
        self.inner.migrate_batch(marks.moves, mode);
        marks.record(true);
    }

    fn putback(&mut self, src: Pfn, order: Order) {
        let Some(r) = self.machine.zone_ref_of(src) else {
            return;
        };
        if let Some(z) = self.machine.zone(r) {
            z.states.putback(src, order);
        }
        self.inner
            .putback(Block::new(self.machine.id, r, src, order));
    }

    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        self.migrated_batch(&[Move::new(src, dst, order)]);
    }

    fn migrated_batch(&mut self, moves: &[Move]) {
        for m in moves {
            if self.machine.zone_ref_of(m.dst()).is_some() {
                self.settle(m.src(), m.dst(), m.order());
            }
        }
        for m in moves {
            if let Some(r) = self.machine.zone_ref_of(m.dst()) {
                self.inner
                    .migrated(Block::new(self.machine.id, r, m.dst(), m.order()), m.src());
            }
        }
    }

    fn checkpoint(&mut self, migrate_pfn: Pfn, free_pfn: Pfn) -> bool {
        self.inner.checkpoint(migrate_pfn, free_pfn)
    }

    fn drain_caches(&mut self) {
        self.inner.drain_caches()
    }
}
