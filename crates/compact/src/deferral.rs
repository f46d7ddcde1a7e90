//! Deferral after failures (spec 03 §7): after `d` failed sync runs a zone
//! is skipped by the next `2^d - 1` direct attempts at that order or above,
//! up to `d = 6`.

use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::Order;

use crate::{COMPACT_MAX_DEFER_SHIFT, CompactState};

impl CompactState {
    /// `defer_compaction`: a run at `order` failed; double the back-off.
    pub fn defer_compaction(&self, order: Order) {
        self.considered.store(0, Relaxed);
        let shift = self.defer_shift.load(Relaxed);
        self.defer_shift
            .store((shift + 1).min(COMPACT_MAX_DEFER_SHIFT), Relaxed);
        let failed = self.order_failed.load(Relaxed);
        self.order_failed.store(failed.min(order.get()), Relaxed);
    }

    /// `compaction_deferred`: should a request at `order` skip this zone
    /// this time? Counts the attempt.
    pub fn compaction_deferred(&self, order: Order) -> bool {
        if order.get() < self.order_failed.load(Relaxed) {
            return false;
        }
        let limit = 1u32 << self.defer_shift.load(Relaxed);
        let considered = self.considered.load(Relaxed).saturating_add(1);
        if considered >= limit {
            self.considered.store(limit, Relaxed);
            return false;
        }
        self.considered.store(considered, Relaxed);
        true
    }

    /// `compaction_defer_reset`: a run at `order` succeeded; if the
    /// allocation itself succeeded (`alloc_success`) forget past failures.
    pub fn defer_reset(&self, order: Order, alloc_success: bool) {
        if alloc_success {
            self.considered.store(0, Relaxed);
            self.defer_shift.store(0, Relaxed);
        }
        if order.get() >= self.order_failed.load(Relaxed) {
            self.order_failed.store(order.get() + 1, Relaxed);
        }
    }

    /// `compaction_restarting`: deferral is at its maximum and used up, so
    /// the next run should start afresh with cleared skip hints.
    pub fn compaction_restarting(&self, order: Order) -> bool {
        order.get() >= self.order_failed.load(Relaxed)
            && self.defer_shift.load(Relaxed) == COMPACT_MAX_DEFER_SHIFT
            && self.considered.load(Relaxed) >= 1 << COMPACT_MAX_DEFER_SHIFT
    }

    /// The deferral state `(considered, defer_shift, order_failed)`.
    pub fn deferral(&self) -> (u32, u8, u8) {
        (
            self.considered.load(Relaxed),
            self.defer_shift.load(Relaxed),
            self.order_failed.load(Relaxed),
        )
    }
}
