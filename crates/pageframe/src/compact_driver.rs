//! The facade's [`Compactor`] over `pageframe-compact`: each call is one
//! `compact_zone` run (spec 03 §5) on a facade [`Zone`], driven by the
//! kernel's [`Migrator`] under the zone's own spin lock, one short critical
//! section at a time.
//!
//! A zone that also serves per-CPU caches ([`crate::cache`]) must have
//! them drained before compaction moves its blocks: the per-frame states of
//! the cache path are not updated by migration.

use pageframe_buddy::Order;
use pageframe_compact::{CompactRequest, Migrator, Priority, ZoneLock, ZoneMarks, compact_zone};
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
        let out = compact_zone(t.zone, t.state, &mut self.migrator, &req);
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
