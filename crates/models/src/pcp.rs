//! A reference zone for tests, fuzzing and benchmarks (`std` feature).
//!
//! Not a buddy allocator: it keeps one LIFO pool of free blocks per order
//! behind a mutex and never splits or merges, which is all the PCP needs
//! from a zone and makes conservation easy to check.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::vec::Vec;

use pageframe_pcp::{MigrateType, Order, Pfn};
use pageframe_pcp::{PcpZone, RefillSink, SpillBatch, ZoneFlags};

/// Orders the reference zone keeps pools for.
pub const REF_MAX_ORDER: usize = 32;

/// A mutex-protected pool of free blocks per order.
#[derive(Debug)]
pub struct RefZone {
    pools: Mutex<Vec<Vec<u64>>>,
    flags: AtomicU8,
    locks: AtomicU64,
    rechecks: AtomicU64,
}

impl Default for RefZone {
    fn default() -> Self {
        Self::new()
    }
}

impl RefZone {
    /// An empty zone.
    pub fn new() -> RefZone {
        RefZone {
            pools: Mutex::new((0..REF_MAX_ORDER).map(|_| Vec::new()).collect()),
            flags: AtomicU8::new(0),
            locks: AtomicU64::new(0),
            rechecks: AtomicU64::new(0),
        }
    }

    /// A zone holding `count` free blocks of `order` starting at frame
    /// `first` (block `i` is frame `first + i * 2^order`).
    pub fn with_blocks(order: Order, first: u64, count: u64) -> RefZone {
        let z = RefZone::new();
        z.add_blocks(order, first, count);
        z
    }

    /// Adds `count` blocks of `order` starting at frame `first`.
    pub fn add_blocks(&self, order: Order, first: u64, count: u64) {
        let mut p = self.lock();
        let step = 1u64 << order.get();
        // Reverse so the lowest frame is handed out first (LIFO pool).
        p[order.get() as usize].extend((0..count).rev().map(|i| first + i * step));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u64>>> {
        self.locks.fetch_add(1, Ordering::Relaxed);
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the pressure flags the PCP reads.
    pub fn set_flags(&self, f: ZoneFlags) {
        self.flags.store(f.bits(), Ordering::Relaxed);
    }

    /// Lock acquisitions so far (zone path and PCP batches alike).
    pub fn lock_acquisitions(&self) -> u64 {
        self.locks.load(Ordering::Relaxed)
    }

    /// Calls of [`PcpZone::recheck_below_high`] so far.
    pub fn below_high_rechecks(&self) -> u64 {
        self.rechecks.load(Ordering::Relaxed)
    }

    /// Free blocks of `order`.
    pub fn free_blocks(&self, order: Order) -> usize {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())[order.get() as usize].len()
    }

    /// Free base pages over all orders.
    pub fn free_pages(&self) -> u64 {
        let p = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        p.iter()
            .enumerate()
            .map(|(o, v)| (v.len() as u64) << o)
            .sum()
    }

    /// A copy of the free blocks of `order`.
    pub fn blocks(&self, order: Order) -> Vec<u64> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())[order.get() as usize].clone()
    }

    /// The zone path without a PCP: one lock acquisition per block.
    pub fn take(&self, order: Order) -> Option<Pfn> {
        self.lock().get_mut(order.get() as usize)?.pop().map(Pfn)
    }

    /// The zone path without a PCP: gives one block back.
    pub fn put(&self, frame: Pfn, order: Order) {
        if let Some(v) = self.lock().get_mut(order.get() as usize) {
            v.push(frame.0);
        }
    }

    /// Holds the zone's lock until the guard drops: a caller that must
    /// not wait then finds it busy ([`PcpZone::try_refill`]).
    pub fn hold(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u64>>> {
        self.lock()
    }
}

/// Hands blocks of `order` from `pools` to `sink` until it is full.
fn fill(pools: &mut [Vec<u64>], order: Order, sink: &mut RefillSink<'_, '_>) {
    let Some(pool) = pools.get_mut(order.get() as usize) else {
        return;
    };
    while sink.remaining() > 0 {
        let Some(f) = pool.pop() else { break };
        if let Err(back) = sink.push(Pfn(f)) {
            pool.push(back.0);
            break;
        }
    }
}

impl PcpZone for RefZone {
    fn refill(&self, order: Order, _mt: MigrateType, sink: &mut RefillSink<'_, '_>) {
        fill(&mut self.lock(), order, sink);
    }

    fn try_refill(&self, order: Order, _mt: MigrateType, sink: &mut RefillSink<'_, '_>) -> bool {
        let mut p = match self.pools.try_lock() {
            Ok(p) => p,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        self.locks.fetch_add(1, Ordering::Relaxed);
        fill(&mut p, order, sink);
        true
    }

    fn spill(&self, batch: &mut SpillBatch<'_, '_>) {
        let mut p = self.lock();
        for (f, o) in batch {
            if let Some(v) = p.get_mut(o.get() as usize) {
                v.push(f.0);
            }
        }
    }

    #[inline]
    fn flags(&self) -> ZoneFlags {
        ZoneFlags::from_bits_truncate(self.flags.load(Ordering::Relaxed))
    }

    fn recheck_below_high(&self) {
        self.rechecks.fetch_add(1, Ordering::Relaxed);
    }
}
