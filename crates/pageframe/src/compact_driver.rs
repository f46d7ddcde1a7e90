//! The facade's [`Compactor`] over `pageframe-compact`: each call is one
//! `compact_zone` run (spec 03 §5) on a facade [`Zone`], driven by the
//! kernel's [`Migrator`] under the zone's own spin lock, one short critical
//! section at a time.
//!
//! A zone that also serves per-CPU caches ([`crate::cache`]) keeps its
//! per-frame states right through compaction: blocks a cache holds are
//! never isolated for migration, and a completed move carries the block's
//! allocated state from source to destination.

use pageframe_buddy::{Order, Pfn};
use pageframe_compact::{
    CompactRequest, MigrateError, MigrateMode, Migrator, Priority, ZoneLock, ZoneMarks,
    compact_zone, reset_isolation_suitable,
};
use pageframe_mobility::MobileZone;

use crate::compactor::{CompactRun, CompactWork, Compactor, ZoneTarget};
use crate::zone::Zone;

impl ZoneLock for Zone<'_> {
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>)) {
        self.with_zone(|z| f(z))
    }
}

/// Runs `pageframe-compact` for the slow path, moving pages with `M`.
pub struct CompactDriver<M> {
    /// The kernel's page mover.
    pub migrator: M,
}

impl<M: Migrator> CompactDriver<M> {
    /// A driver moving pages with `migrator`.
    pub const fn new(migrator: M) -> Self {
        CompactDriver { migrator }
    }
}

impl<M: Migrator> Compactor for CompactDriver<M> {
    fn compact(&mut self, t: ZoneTarget<'_, '_>, order: Order, prio: Priority) -> CompactRun {
        let w = t.zone.watermarks();
        let marks = ZoneMarks {
            min: w.min,
            low: w.low,
            high: w.high,
            reserve: 0,
        };
        let req = if t.background {
            CompactRequest::kcompactd(order, marks)
        } else {
            CompactRequest::direct(order, t.mt, prio, marks)
        };
        // Linux clears the skip hints a finished full pass left when kswapd
        // goes to sleep; there is no kswapd here, so each run starts by
        // doing it (a single flag check unless a pass completed).
        reset_isolation_suitable(t.zone, t.state);
        let mut keeper = StateKeeper {
            inner: &mut self.migrator,
            zone: t.zone,
        };
        let out = compact_zone(t.zone, t.state, &mut keeper, &req);
        if let (Some(p), Some(st)) = (out.captured, &t.zone.states) {
            st.set_allocated(p, order, t.mt);
        }
        CompactRun {
            result: out.result,
            captured: out.captured,
            work: CompactWork {
                scanned: out.stats.migrate_scanned + out.stats.free_scanned,
                migrated: out.stats.migrated,
            },
        }
    }
}

/// Wraps the kernel's migrator to keep the zone's per-frame states (the
/// per-CPU cache path) in step with compaction.
struct StateKeeper<'m, 'z, 'a, M> {
    inner: &'m mut M,
    zone: &'z Zone<'a>,
}

impl<M: Migrator> Migrator for StateKeeper<'_, '_, '_, M> {
    fn isolate(&mut self, pfn: Pfn, order: Order, tag: u32) -> bool {
        // A block sitting in a per-CPU cache is the cache's: it cannot move.
        let cached = self
            .zone
            .states
            .as_ref()
            .is_some_and(|st| st.check_not_cached(pfn).is_err());
        !cached && self.inner.isolate(pfn, order, tag)
    }

    fn migrate(
        &mut self,
        src: Pfn,
        dst: Pfn,
        order: Order,
        mode: MigrateMode,
    ) -> Result<(), MigrateError> {
        self.inner.migrate(src, dst, order, mode)
    }

    fn putback(&mut self, src: Pfn, order: Order) {
        self.inner.putback(src, order)
    }

    fn migrated(&mut self, src: Pfn, dst: Pfn, order: Order) {
        if let Some(st) = &self.zone.states {
            st.moved(src, dst, order);
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
