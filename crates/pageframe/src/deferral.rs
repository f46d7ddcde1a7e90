//! Compaction deferral (spec 03 §7): after `d` failures, skip the next
//! `2^d - 1` attempts at the failed order or above, `d` at most 6; a success
//! forgets the failures.
//!
//! The facade keeps one [`Deferral`] per zone (Linux's rule, used by every
//! policy), one per node and one for the whole machine (the node-aware
//! policy, see [`crate::NodePolicy::NodeAware`]). Every field is an atomic
//! read and written without read-modify-write, as Linux's per-zone fields
//! are: concurrent requesters may lose an update, which only shifts when the
//! next attempt happens.

use core::sync::atomic::{AtomicU8, AtomicU32, Ordering::Relaxed};

use pageframe_buddy::Order;

/// Deferral stops doubling here: at most `2^6 - 1 = 63` skipped attempts in
/// a row (spec 03 §2, `COMPACT_MAX_DEFER_SHIFT`).
pub const MAX_DEFER_SHIFT: u8 = 6;

/// The back-off state of one compaction target (a zone, a node, or all
/// nodes at once).
#[derive(Debug)]
pub struct Deferral {
    considered: AtomicU32,
    shift: AtomicU8,
    /// Requests below this order are never deferred.
    order_failed: AtomicU8,
}

impl Default for Deferral {
    fn default() -> Self {
        Self::new()
    }
}

/// A snapshot of a [`Deferral`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct DeferralState {
    /// Attempts counted since the last failure.
    pub considered: u32,
    /// Failures in a row, at most [`MAX_DEFER_SHIFT`].
    pub shift: u8,
    /// The lowest order deferred.
    pub order_failed: u8,
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
        self.shift.store((s + 1).min(MAX_DEFER_SHIFT), Relaxed);
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
        let limit = 1u32 << self.shift.load(Relaxed);
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
        let f = self.order_failed.load(Relaxed);
        if order.get() >= f {
            self.order_failed.store(order.get() + 1, Relaxed);
        }
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
