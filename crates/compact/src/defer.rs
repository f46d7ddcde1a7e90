//! Deferral after failures (spec 03 §7, docs/rules/03-compaction.md §7):
//! after `d` failed runs a target is skipped by the next `2^d - 1` attempts
//! at the failed order or above, `d` at most [`COMPACT_MAX_DEFER_SHIFT`]; a
//! success forgets the failures.
//!
//! [`Deferral`] is the rule, once: every zone's [`CompactState`] holds one
//! (Linux's per-zone deferral), and the facade keeps more of them for whole
//! nodes and for the machine (its node-aware huge-page policy). Every field
//! is an atomic read and written without read-modify-write, as Linux's
//! per-zone fields are: concurrent requesters may lose an update, which only
//! shifts when the next attempt happens.

use core::sync::atomic::{AtomicU8, AtomicU32, Ordering::Relaxed};

use pageframe_buddy::Order;

use crate::{COMPACT_MAX_DEFER_SHIFT, CompactState};

/// The back-off state of one compaction target (a zone, a node, a machine).
#[derive(Debug)]
pub struct Deferral {
    considered: AtomicU32,
    shift: AtomicU8,
    /// Requests below this order are never deferred.
    order_failed: AtomicU8,
}

/// A snapshot of a [`Deferral`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct DeferralState {
    /// Attempts counted since the last failure.
    pub considered: u32,
    /// Failures in a row, at most [`COMPACT_MAX_DEFER_SHIFT`].
    pub shift: u8,
    /// The lowest order deferred.
    pub order_failed: u8,
}

impl Default for Deferral {
    fn default() -> Self {
        Self::new()
    }
}

impl Deferral {
    /// Nothing deferred. `order_failed` starts at 0 as Linux's zeroed zone
    /// field does, so the first failure defers every order until a success
    /// raises it; with the shift at 0 every attempt is allowed.
    pub const fn new() -> Deferral {
        Deferral {
            considered: AtomicU32::new(0),
            shift: AtomicU8::new(0),
            order_failed: AtomicU8::new(0),
        }
    }

    /// `defer_compaction`: an attempt at `order` failed: restart the count
    /// and double the back-off.
    pub fn defer(&self, order: Order) {
        self.considered.store(0, Relaxed);
        let s = self.shift.load(Relaxed);
        self.shift
            .store((s + 1).min(COMPACT_MAX_DEFER_SHIFT), Relaxed);
        let f = self.order_failed.load(Relaxed);
        self.order_failed.store(f.min(order.get()), Relaxed);
    }

    /// `compaction_deferred`: should an attempt at `order` be skipped this
    /// time? Counts the attempt; once `2^shift` attempts have been counted
    /// every attempt is allowed until the next failure.
    pub fn is_deferred(&self, order: Order) -> bool {
        if order.get() < self.order_failed.load(Relaxed) {
            return false;
        }
        let limit = 1u32 << self.shift.load(Relaxed).min(COMPACT_MAX_DEFER_SHIFT);
        let c = self.considered.load(Relaxed).saturating_add(1);
        if c >= limit {
            self.considered.store(limit, Relaxed);
            return false;
        }
        self.considered.store(c, Relaxed);
        true
    }

    /// `compaction_defer_reset`: an attempt at `order` succeeded. With
    /// `alloc_success` (the allocation then got its block) the failures are
    /// forgotten; either way orders up to `order` stop being deferred.
    pub fn reset(&self, order: Order, alloc_success: bool) {
        if alloc_success {
            self.considered.store(0, Relaxed);
            self.shift.store(0, Relaxed);
        }
        if order.get() >= self.order_failed.load(Relaxed) {
            self.order_failed.store(order.get() + 1, Relaxed);
        }
    }

    /// `compaction_restarting`: deferral is at its maximum and used up, so
    /// the next run should start afresh with cleared skip hints.
    pub fn restarting(&self, order: Order) -> bool {
        order.get() >= self.order_failed.load(Relaxed)
            && self.shift.load(Relaxed) == COMPACT_MAX_DEFER_SHIFT
            && self.considered.load(Relaxed) >= 1 << COMPACT_MAX_DEFER_SHIFT
    }

    /// The current state.
    pub fn state(&self) -> DeferralState {
        DeferralState {
            considered: self.considered.load(Relaxed),
            shift: self.shift.load(Relaxed),
            order_failed: self.order_failed.load(Relaxed),
        }
    }
}

/// Linux's names for the zone's deferral, on the zone's state.
impl CompactState {
    /// `defer_compaction`: a run at `order` failed; double the back-off.
    pub fn defer_compaction(&self, order: Order) {
        self.defer.defer(order)
    }

    /// `compaction_deferred`: should a request at `order` skip this zone
    /// this time? Counts the attempt.
    pub fn compaction_deferred(&self, order: Order) -> bool {
        self.defer.is_deferred(order)
    }

    /// `compaction_defer_reset`: a run at `order` succeeded; if the
    /// allocation itself succeeded (`alloc_success`) forget past failures.
    pub fn defer_reset(&self, order: Order, alloc_success: bool) {
        self.defer.reset(order, alloc_success)
    }

    /// `compaction_restarting`: deferral is at its maximum and used up.
    pub fn compaction_restarting(&self, order: Order) -> bool {
        self.defer.restarting(order)
    }

    /// The zone's deferral.
    pub fn deferral(&self) -> &Deferral {
        &self.defer
    }
}
