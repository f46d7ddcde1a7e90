//! Fault injection for allocations (Linux's `fail_page_alloc`, feature
//! `fail-alloc`): a kernel tests its out-of-memory paths by making chosen
//! allocations fail as if memory had run out.
//!
//! Off by default and switchable at run time ([`FailPageAlloc::set`],
//! [`FailPageAlloc::disable`]). A request is failed when all of these
//! hold, in Linux's order: failures are left to inject (`times`), it is
//! the `interval`-th candidate since the last, a draw from the seeded
//! generator falls under `probability`. Requests below `min_order` are
//! never candidates, and neither are those that must not fail
//! (`__GFP_NOFAIL`) or may use the reserves (`__GFP_MEMALLOC`): the
//! reclaim paths that memory-allocation-failure tests exercise still need
//! them. The generator is seeded: the same sequence of requests fails at
//! the same places in every run (on one CPU; with several, in the order
//! they reach it).
//!
//! Every allocation entry point of [`crate::Machine`] and
//! [`crate::CpuCache`] is covered; contiguous ranges, CMA and hotplug are
//! not (Linux's fault point sits in the page allocator's entry too). A
//! failed request returns [`crate::AllocError::OutOfMemory`] and is
//! reported to the hooks as any failure.
//!
//! ```
//! use pageframe::debug::fail::FailConfig;
//! # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
//! # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
//! # let span = PfnRange::new(Pfn(0x1000), Pfn(0x5000));
//! # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
//! # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
//! # m.add_free_range(span).unwrap();
//! // Every third allocation of order 1 or more fails, five times.
//! m.inspect().fail_page_alloc().set(FailConfig {
//!     interval: 3,
//!     times: Some(5),
//!     min_order: Order::new(1).unwrap(),
//!     ..FailConfig::ALWAYS
//! });
//! let order1 = Order::new(1).unwrap();
//! let r: Vec<_> = (0..6).map(|_| m.alloc(NodeId::ZERO, Gfp::KERNEL, order1).is_ok()).collect();
//! assert_eq!(r, [true, true, false, true, true, false]);
//! // Order 0 is spared, and so is a request that must not fail.
//! assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::ZERO).is_ok());
//! assert!(m.alloc(NodeId::ZERO, Gfp::KERNEL | Gfp::NOFAIL, order1).is_ok());
//! assert_eq!(m.inspect().fail_page_alloc().injected(), 2);
//! m.inspect().fail_page_alloc().disable();
//! ```

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering::Relaxed};

use pageframe_buddy::Order;
use pageframe_types::atomic::AtomicU64;

use crate::gfp::Gfp;

/// Which requests fail, as the `fail_page_alloc` debugfs files set it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FailConfig {
    /// Chance a candidate fails, in millionths (`probability`, which Linux
    /// takes in percent): 1 000 000 fails every candidate.
    pub probability_ppm: u32,
    /// Only every `interval`-th candidate may fail (`interval`; 0 and 1:
    /// every one).
    pub interval: u64,
    /// Failures left to inject (`times`; `None`: no limit).
    pub times: Option<u64>,
    /// Requests below this order are never failed (`min-order`).
    pub min_order: Order,
    /// Spare requests that may reclaim directly (`ignore-gfp-wait`).
    pub ignore_reclaim: bool,
    /// The generator's seed.
    pub seed: u64,
}

impl FailConfig {
    /// Every candidate fails, from order 0, without limit.
    pub const ALWAYS: FailConfig = FailConfig {
        probability_ppm: 1_000_000,
        interval: 1,
        times: None,
        min_order: Order::ZERO,
        ignore_reclaim: false,
        seed: 0x5eed,
    };
}

/// A machine's fault injection state ([`crate::debug::Inspect::fail_page_alloc`]).
pub struct FailPageAlloc {
    enabled: AtomicBool,
    probability_ppm: AtomicU32,
    interval: AtomicU64,
    /// Failures left; `u64::MAX`: no limit.
    times: AtomicU64,
    min_order: AtomicU8,
    ignore_reclaim: AtomicBool,
    rng: AtomicU64,
    candidates: AtomicU64,
    injected: AtomicU64,
}

impl FailPageAlloc {
    pub(crate) const fn new() -> FailPageAlloc {
        FailPageAlloc {
            enabled: AtomicBool::new(false),
            probability_ppm: AtomicU32::new(0),
            interval: AtomicU64::new(1),
            times: AtomicU64::new(0),
            min_order: AtomicU8::new(0),
            ignore_reclaim: AtomicBool::new(false),
            rng: AtomicU64::new(0),
            candidates: AtomicU64::new(0),
            injected: AtomicU64::new(0),
        }
    }

    /// Starts injecting as `c` says (the counters of candidates start
    /// over; the injected total does not).
    pub fn set(&self, c: FailConfig) {
        self.enabled.store(false, Relaxed);
        self.probability_ppm.store(c.probability_ppm, Relaxed);
        self.interval.store(c.interval.max(1), Relaxed);
        self.times.store(c.times.unwrap_or(u64::MAX), Relaxed);
        self.min_order.store(c.min_order.get(), Relaxed);
        self.ignore_reclaim.store(c.ignore_reclaim, Relaxed);
        self.rng.store(c.seed, Relaxed);
        self.candidates.store(0, Relaxed);
        self.enabled
            .store(true, core::sync::atomic::Ordering::Release);
    }

    /// Stops injecting.
    pub fn disable(&self) {
        self.enabled.store(false, Relaxed);
    }

    /// Whether it injects.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Failures injected since the machine was built.
    pub fn injected(&self) -> u64 {
        self.injected.load(Relaxed)
    }

    /// Whether this request fails (`should_fail_alloc_page`).
    #[inline]
    pub(crate) fn should_fail(&self, gfp: Gfp, order: Order) -> bool {
        if !self.enabled.load(Relaxed) {
            return false;
        }
        self.decide(gfp, order)
    }

    #[cold]
    fn decide(&self, gfp: Gfp, order: Order) -> bool {
        if order.get() < self.min_order.load(Relaxed)
            || gfp.intersects(Gfp::NOFAIL | Gfp::MEMALLOC)
            || (self.ignore_reclaim.load(Relaxed) && gfp.contains(Gfp::DIRECT_RECLAIM))
            || self.times.load(Relaxed) == 0
        {
            return false;
        }
        let n = self.candidates.fetch_add(1, Relaxed) + 1;
        if !n.is_multiple_of(self.interval.load(Relaxed)) {
            return false;
        }
        let ppm = self.probability_ppm.load(Relaxed);
        if ppm < 1_000_000 && (self.draw() % 1_000_000) as u32 >= ppm {
            return false;
        }
        // One of the failures left, unless another CPU took the last.
        let took = self
            .times
            .fetch_update(Relaxed, Relaxed, |t| match t {
                0 => None,
                u64::MAX => Some(u64::MAX),
                t => Some(t - 1),
            })
            .is_ok();
        if took {
            self.injected.fetch_add(1, Relaxed);
        }
        took
    }

    /// The next number of the seeded generator (splitmix64).
    fn draw(&self) -> u64 {
        let s = self
            .rng
            .fetch_add(0x9e37_79b9_7f4a_7c15, Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
