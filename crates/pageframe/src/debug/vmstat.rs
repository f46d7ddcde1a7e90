//! Event counters as Linux's `/proc/vmstat` names them (feature
//! `vmstat`): allocations by zone and order, frees, failures, per-CPU cache
//! traffic, compaction, migration, huge pages, contiguous ranges.
//!
//! The counters the fast paths bump are kept per zone and per CPU (each
//! CPU's on cache lines of its own, next to its per-CPU caches; callers
//! without a CPU share one set per zone) and added up when read: a
//! machine's [`crate::debug::Inspect::vmstat`], a node's
//! [`crate::debug::Inspect::node_vmstat`], a zone's [`crate::zone_core::Zone::vmstat`].
//! Slow-path events (stalls, compaction, migration, huge pages) come from
//! the nodes' counters ([`crate::debug::Inspect::stats`]).
//!
//! ```
//! # use pageframe::{Gfp, Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
//! # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
//! # let span = PfnRange::new(Pfn(0x10_0000), Pfn(0x10_4000));
//! # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
//! # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
//! # m.add_free_range(span).unwrap();
//! let b = m.alloc(NodeId::ZERO, Gfp::KERNEL, Order::new(3).unwrap()).unwrap();
//! m.free(b).unwrap();
//! let v = m.inspect().vmstat();
//! assert_eq!(v.pgalloc(ZoneKind::Normal, Order::new(3).unwrap()), 1);
//! assert_eq!((v.pgalloc_pages(ZoneKind::Normal), v.pgfree), (8, 8));
//! // The text of /proc/vmstat, one counter a line.
//! let text = format!("{v}");
//! assert!(text.contains("pgalloc_normal 8\n") && text.contains("pgfree 8\n"));
//! ```
//!
//! Without the feature this module is private and keeps only the types of
//! the counters, zero-sized, with methods that do nothing: the paths call them
//! either way, and without the feature those calls compile to nothing
//! (as calls into [`crate::debug::NoHooks`] do).

#[cfg(feature = "vmstat")]
use core::fmt;
#[cfg(not(feature = "vmstat"))]
use core::marker::PhantomData;
use core::mem::MaybeUninit;
#[cfg(feature = "vmstat")]
use core::sync::atomic::Ordering::Relaxed;

use pageframe_buddy::Order;
use pageframe_pcp::CpuId;
#[cfg(feature = "vmstat")]
use pageframe_types::ORDER_LIMIT;
#[cfg(feature = "vmstat")]
use pageframe_types::atomic::AtomicU64;
#[cfg(feature = "vmstat")]
use pageframe_types::carve;

#[cfg(feature = "vmstat")]
use crate::numa_stats::NodeStats;
#[cfg(feature = "vmstat")]
use crate::zone_kind::{NR_ZONE_KINDS, ZoneKind};

/// Orders a counter array covers.
#[cfg(feature = "vmstat")]
pub const ORDERS: usize = ORDER_LIMIT as usize + 1;

/// One zone's fast-path counters as one CPU (or the callers without one)
/// bumps them, on cache lines of their own.
#[cfg(feature = "vmstat")]
#[repr(align(64))]
pub(crate) struct ZoneCounters {
    pgalloc: [AtomicU64; ORDERS],
    pgfree: AtomicU64,
    pcp_hit: AtomicU64,
    pcp_free: AtomicU64,
    pcp_refill: AtomicU64,
    pcp_refill_blocks: AtomicU64,
    pcp_spill: AtomicU64,
    pcp_spill_pages: AtomicU64,
}

#[cfg(feature = "vmstat")]
impl ZoneCounters {
    /// Whether counters are kept (a path may skip finding a zone's when
    /// not).
    pub(crate) const KEPT: bool = true;

    pub(crate) const fn new() -> ZoneCounters {
        ZoneCounters {
            pgalloc: [const { AtomicU64::new(0) }; ORDERS],
            pgfree: AtomicU64::new(0),
            pcp_hit: AtomicU64::new(0),
            pcp_free: AtomicU64::new(0),
            pcp_refill: AtomicU64::new(0),
            pcp_refill_blocks: AtomicU64::new(0),
            pcp_spill: AtomicU64::new(0),
            pcp_spill_pages: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn alloc(&self, order: Order) {
        self.pgalloc[usize::from(order.get())].fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn free(&self, order: Order) {
        self.free_pages(order.pages());
    }

    #[inline]
    pub(crate) fn free_pages(&self, pages: u64) {
        self.pgfree.fetch_add(pages, Relaxed);
    }

    #[inline]
    pub(crate) fn pcp_hit(&self) {
        self.pcp_hit.fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn pcp_free(&self) {
        self.pcp_free.fetch_add(1, Relaxed);
    }

    pub(crate) fn pcp_refill(&self, blocks: u64) {
        self.pcp_refill.fetch_add(1, Relaxed);
        self.pcp_refill_blocks.fetch_add(blocks, Relaxed);
    }

    pub(crate) fn pcp_spill(&self, pages: u64) {
        self.pcp_spill.fetch_add(1, Relaxed);
        self.pcp_spill_pages.fetch_add(pages, Relaxed);
    }

    /// Adds these counters of a `kind` zone to `v`.
    pub(crate) fn add_to(&self, kind: ZoneKind, v: &mut VmStat) {
        for (t, c) in v.pgalloc[kind.index()].iter_mut().zip(&self.pgalloc) {
            *t += c.load(Relaxed);
        }
        v.pgfree += self.pgfree.load(Relaxed);
        v.pcp_hit += self.pcp_hit.load(Relaxed);
        v.pcp_free += self.pcp_free.load(Relaxed);
        v.pcp_refill += self.pcp_refill.load(Relaxed);
        v.pcp_refill_blocks += self.pcp_refill_blocks.load(Relaxed);
        v.pcp_spill += self.pcp_spill.load(Relaxed);
        v.pcp_spill_pages += self.pcp_spill_pages.load(Relaxed);
    }
}

/// The counters of each CPU with a cache of a zone, beside the caches
/// (none until the caches are set up).
#[cfg(feature = "vmstat")]
pub(crate) struct CpuCounters<'a>(&'a [ZoneCounters]);

#[cfg(feature = "vmstat")]
impl<'a> CpuCounters<'a> {
    pub(crate) const NONE: CpuCounters<'a> = CpuCounters(&[]);

    /// Carves `cpus` CPUs' counters off the front of `mem`; returns them
    /// and the rest.
    pub(crate) fn carve(
        mem: &'a mut [MaybeUninit<u8>],
        cpus: usize,
    ) -> Option<(CpuCounters<'a>, &'a mut [MaybeUninit<u8>])> {
        let (counters, rest) = carve::carve_init(mem, cpus, |_| ZoneCounters::new())?;
        Some((CpuCounters(counters), rest))
    }

    /// `cpu`'s counters, if it has a cache of the zone.
    #[inline]
    pub(crate) fn get(&self, cpu: Option<CpuId>) -> Option<&'a ZoneCounters> {
        cpu.and_then(|c| self.0.get(c.0 as usize))
    }

    /// Every CPU's.
    pub(crate) fn all(&self) -> &'a [ZoneCounters] {
        self.0
    }
}

/// Whether an operation on a per-CPU cache refilled it (then its block was
/// no hit).
///
/// An atomic, not a `Cell`: a CPU's handle keeps one for all its
/// operations, and the handle stays `Sync` with the feature on as off.
#[cfg(feature = "vmstat")]
pub(crate) struct Refilled(core::sync::atomic::AtomicBool);

#[cfg(feature = "vmstat")]
impl Refilled {
    #[inline]
    pub(crate) const fn new() -> Refilled {
        Refilled(core::sync::atomic::AtomicBool::new(false))
    }

    /// A new operation: no refill yet.
    #[inline]
    pub(crate) fn reset(&self) {
        self.0.store(false, Relaxed);
    }

    #[inline]
    pub(crate) fn note(&self) {
        self.0.store(true, Relaxed);
    }

    #[inline]
    pub(crate) fn seen(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// The machine's counters of rare events (contended only by failures and
/// slow paths).
#[cfg(feature = "vmstat")]
pub(crate) struct MachineCounters {
    pub(crate) alloc_fail: AtomicU64,
    pub(crate) contig_success: AtomicU64,
    pub(crate) contig_fail: AtomicU64,
    pub(crate) cma_success: AtomicU64,
    pub(crate) cma_fail: AtomicU64,
    pub(crate) offline_success: AtomicU64,
    pub(crate) offline_fail: AtomicU64,
}

#[cfg(feature = "vmstat")]
impl MachineCounters {
    pub(crate) const fn new() -> MachineCounters {
        MachineCounters {
            alloc_fail: AtomicU64::new(0),
            contig_success: AtomicU64::new(0),
            contig_fail: AtomicU64::new(0),
            cma_success: AtomicU64::new(0),
            cma_fail: AtomicU64::new(0),
            offline_success: AtomicU64::new(0),
            offline_fail: AtomicU64::new(0),
        }
    }

    /// Counts a request that failed.
    #[inline]
    pub(crate) fn alloc_failed(&self) {
        self.alloc_fail.fetch_add(1, Relaxed);
    }

    /// Counts the outcome of a rare operation in `ok` or `fail`.
    pub(crate) fn outcome<T, E>(ok: &AtomicU64, fail: &AtomicU64, r: &Result<T, E>) {
        match r {
            Ok(_) => ok.fetch_add(1, Relaxed),
            Err(_) => fail.fetch_add(1, Relaxed),
        };
    }

    pub(crate) fn add_to(&self, v: &mut VmStat) {
        v.alloc_fail += self.alloc_fail.load(Relaxed);
        v.contig_alloc_success += self.contig_success.load(Relaxed);
        v.contig_alloc_fail += self.contig_fail.load(Relaxed);
        v.cma_alloc_success += self.cma_success.load(Relaxed);
        v.cma_alloc_fail += self.cma_fail.load(Relaxed);
        v.offline_success += self.offline_success.load(Relaxed);
        v.offline_fail += self.offline_fail.load(Relaxed);
    }
}

/// A snapshot of the counters of a machine, a node or a zone. Counters a
/// scope does not keep read 0 (a zone's compaction counters, a node's
/// failures: see each field).
#[cfg(feature = "vmstat")]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct VmStat {
    /// Free frames now (`nr_free_pages`).
    pub nr_free_pages: u64,
    /// Frames handed over (`nr_managed`).
    pub nr_managed_pages: u64,
    /// Blocks handed out, by zone kind and order (`pgalloc_<zone>` counts
    /// their frames: [`VmStat::pgalloc_pages`]).
    pub pgalloc: [[u64; ORDERS]; NR_ZONE_KINDS],
    /// Frames given back (`pgfree`).
    pub pgfree: u64,
    /// Requests that failed (machine only).
    pub alloc_fail: u64,
    /// Allocations a per-CPU cache served from what it held.
    pub pcp_hit: u64,
    /// Blocks freed into a per-CPU cache.
    pub pcp_free: u64,
    /// Refills of a per-CPU cache from its zone.
    pub pcp_refill: u64,
    /// Blocks those refills brought.
    pub pcp_refill_blocks: u64,
    /// Spills and drains of a per-CPU cache into its zone.
    pub pcp_spill: u64,
    /// Frames those spills gave back.
    pub pcp_spill_pages: u64,
    /// Requests that stalled in direct compaction or reclaim (`allocstall`;
    /// node and machine).
    pub allocstall: u64,
    /// Direct compaction runs (`compact_stall`).
    pub compact_stall: u64,
    /// Of those, runs that did not give the request its block
    /// (`compact_fail`).
    pub compact_fail: u64,
    /// Runs that did (`compact_success`).
    pub compact_success: u64,
    /// Frames the migrate scanner looked at (`compact_migrate_scanned`).
    pub compact_migrate_scanned: u64,
    /// Frames the free scanner looked at (`compact_free_scanned`).
    pub compact_free_scanned: u64,
    /// Frames isolated by either scanner (`compact_isolated`).
    pub compact_isolated: u64,
    /// kcompactd wake-ups (`compact_daemon_wake`).
    pub compact_daemon_wake: u64,
    /// Blocks migrated (`pgmigrate_success`).
    pub pgmigrate_success: u64,
    /// Blocks that failed to migrate (`pgmigrate_fail`).
    pub pgmigrate_fail: u64,
    /// Huge-page faults served (`thp_fault_alloc`).
    pub thp_fault_alloc: u64,
    /// Huge-page faults that fell back to small pages (`thp_fault_fallback`).
    pub thp_fault_fallback: u64,
    /// Contiguous ranges allocated, CMA's excepted (machine only).
    pub contig_alloc_success: u64,
    /// Contiguous range requests that failed (machine only).
    pub contig_alloc_fail: u64,
    /// CMA buffers allocated (`cma_alloc_success`; machine only).
    pub cma_alloc_success: u64,
    /// CMA requests that failed (`cma_alloc_fail`; machine only).
    pub cma_alloc_fail: u64,
    /// Ranges taken offline (machine only).
    pub offline_success: u64,
    /// Offline requests that failed (machine only).
    pub offline_fail: u64,
    /// Superpageblocks (1 GiB regions) that could be 1 GiB pages: inside
    /// a zone, no hole (`nr_superpageblocks`).
    pub nr_superpageblocks: u64,
    /// Superpageblocks holding a pageblock typed unmovable, reclaimable or
    /// highatomic, whole or not (`nr_superpageblocks_tainted`).
    pub nr_superpageblocks_tainted: u64,
    /// Whole superpageblocks that are not tainted
    /// (`nr_superpageblocks_clean`).
    pub nr_superpageblocks_clean: u64,
    /// Whole superpageblocks wholly free: 1 GiB pages to be had now
    /// (`nr_superpageblocks_free`).
    pub nr_superpageblocks_free: u64,
    /// Unmovable and reclaimable fallbacks kept inside a tainted
    /// superpageblock (`superpageblock_fallback_kept`).
    pub superpageblock_fallback_kept: u64,
    /// Unmovable and reclaimable fallbacks that tainted a clean one
    /// (`superpageblock_fallback_tainting`).
    pub superpageblock_fallback_tainting: u64,
    /// Times a clean superpageblock became tainted, by any retype
    /// (`superpageblock_tainted`).
    pub superpageblock_tainted: u64,
    /// Times a tainted superpageblock became clean (`superpageblock_cleaned`).
    pub superpageblock_cleaned: u64,
}

#[cfg(feature = "vmstat")]
impl VmStat {
    /// Blocks of `order` handed out by `kind` zones.
    pub fn pgalloc(&self, kind: ZoneKind, order: Order) -> u64 {
        self.pgalloc[kind.index()][usize::from(order.get())]
    }

    /// Frames handed out by `kind` zones (`pgalloc_<zone>`).
    pub fn pgalloc_pages(&self, kind: ZoneKind) -> u64 {
        self.pgalloc[kind.index()]
            .iter()
            .enumerate()
            .map(|(k, n)| n << k)
            .sum()
    }

    /// Adds a node's slow-path counters.
    pub(crate) fn add_node(&mut self, s: &NodeStats) {
        self.allocstall += s.stalls;
        self.compact_stall += s.compact.stall;
        self.compact_fail += s.compact.fail;
        self.compact_success += s.compact.success;
        self.compact_migrate_scanned += s.compact.migrate_scanned;
        self.compact_free_scanned += s.compact.free_scanned;
        self.compact_isolated += s.compact.isolated;
        self.compact_daemon_wake += s.kcompactd_wakes;
        self.pgmigrate_success += s.compact.migrate_success;
        self.pgmigrate_fail += s.compact.migrate_fail;
        self.thp_fault_alloc += s.thp_success();
        self.thp_fault_fallback += s.thp_failed;
    }
}

/// Linux's `/proc/vmstat` text: `name value`, one a line, then the
/// counters Linux does not have (allocations by order, per-CPU caches,
/// contiguous ranges).
#[cfg(feature = "vmstat")]
impl fmt::Display for VmStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nr_free_pages {}", self.nr_free_pages)?;
        writeln!(f, "nr_managed {}", self.nr_managed_pages)?;
        writeln!(f, "nr_superpageblocks {}", self.nr_superpageblocks)?;
        writeln!(
            f,
            "nr_superpageblocks_tainted {}",
            self.nr_superpageblocks_tainted
        )?;
        writeln!(
            f,
            "nr_superpageblocks_clean {}",
            self.nr_superpageblocks_clean
        )?;
        writeln!(
            f,
            "nr_superpageblocks_free {}",
            self.nr_superpageblocks_free
        )?;
        for k in ZoneKind::ALL {
            writeln!(f, "pgalloc_{} {}", lower(k), self.pgalloc_pages(k))?;
        }
        let lines = [
            ("pgfree", self.pgfree),
            ("allocstall", self.allocstall),
            ("pgmigrate_success", self.pgmigrate_success),
            ("pgmigrate_fail", self.pgmigrate_fail),
            ("compact_migrate_scanned", self.compact_migrate_scanned),
            ("compact_free_scanned", self.compact_free_scanned),
            ("compact_isolated", self.compact_isolated),
            ("compact_stall", self.compact_stall),
            ("compact_fail", self.compact_fail),
            ("compact_success", self.compact_success),
            ("compact_daemon_wake", self.compact_daemon_wake),
            ("thp_fault_alloc", self.thp_fault_alloc),
            ("thp_fault_fallback", self.thp_fault_fallback),
            ("cma_alloc_success", self.cma_alloc_success),
            ("cma_alloc_fail", self.cma_alloc_fail),
            ("alloc_fail", self.alloc_fail),
            ("pcp_hit", self.pcp_hit),
            ("pcp_free", self.pcp_free),
            ("pcp_refill", self.pcp_refill),
            ("pcp_refill_blocks", self.pcp_refill_blocks),
            ("pcp_spill", self.pcp_spill),
            ("pcp_spill_pages", self.pcp_spill_pages),
            ("contig_alloc_success", self.contig_alloc_success),
            ("contig_alloc_fail", self.contig_alloc_fail),
            ("offline_success", self.offline_success),
            ("offline_fail", self.offline_fail),
            (
                "superpageblock_fallback_kept",
                self.superpageblock_fallback_kept,
            ),
            (
                "superpageblock_fallback_tainting",
                self.superpageblock_fallback_tainting,
            ),
            ("superpageblock_tainted", self.superpageblock_tainted),
            ("superpageblock_cleaned", self.superpageblock_cleaned),
        ];
        for (name, v) in lines {
            writeln!(f, "{name} {v}")?;
        }
        for k in ZoneKind::ALL {
            for (o, n) in self.pgalloc[k.index()].iter().enumerate() {
                if *n != 0 {
                    writeln!(f, "pgalloc_{}_order{o} {n}", lower(k))?;
                }
            }
        }
        Ok(())
    }
}

/// A zone kind's name as vmstat spells it.
#[cfg(feature = "vmstat")]
fn lower(k: ZoneKind) -> &'static str {
    match k {
        ZoneKind::Dma => "dma",
        ZoneKind::Dma32 => "dma32",
        ZoneKind::Normal => "normal",
        ZoneKind::Movable => "movable",
    }
}

/// The counters without the feature: nothing kept, nothing counted.
#[cfg(not(feature = "vmstat"))]
pub(crate) struct ZoneCounters;

#[cfg(not(feature = "vmstat"))]
impl ZoneCounters {
    pub(crate) const KEPT: bool = false;

    pub(crate) const fn new() -> ZoneCounters {
        ZoneCounters
    }

    #[inline(always)]
    pub(crate) fn alloc(&self, _: Order) {}

    #[inline(always)]
    pub(crate) fn free(&self, _: Order) {}

    #[inline(always)]
    pub(crate) fn free_pages(&self, _: u64) {}

    #[inline(always)]
    pub(crate) fn pcp_hit(&self) {}

    #[inline(always)]
    pub(crate) fn pcp_free(&self) {}

    #[inline(always)]
    pub(crate) fn pcp_refill(&self, _: u64) {}

    #[inline(always)]
    pub(crate) fn pcp_spill(&self, _: u64) {}
}

#[cfg(not(feature = "vmstat"))]
pub(crate) struct CpuCounters<'a>(PhantomData<&'a ()>);

#[cfg(not(feature = "vmstat"))]
impl<'a> CpuCounters<'a> {
    pub(crate) const NONE: CpuCounters<'a> = CpuCounters(PhantomData);

    /// Takes nothing off `mem`.
    #[inline(always)]
    pub(crate) fn carve(
        mem: &'a mut [MaybeUninit<u8>],
        _: usize,
    ) -> Option<(CpuCounters<'a>, &'a mut [MaybeUninit<u8>])> {
        Some((CpuCounters::NONE, mem))
    }

    #[inline(always)]
    pub(crate) fn get(&self, _: Option<CpuId>) -> Option<&'a ZoneCounters> {
        None
    }
}

#[cfg(not(feature = "vmstat"))]
pub(crate) struct Refilled;

#[cfg(not(feature = "vmstat"))]
impl Refilled {
    #[inline(always)]
    pub(crate) const fn new() -> Refilled {
        Refilled
    }

    #[inline(always)]
    pub(crate) fn reset(&self) {}

    #[inline(always)]
    pub(crate) fn note(&self) {}

    #[inline(always)]
    pub(crate) fn seen(&self) -> bool {
        false
    }
}

#[cfg(not(feature = "vmstat"))]
pub(crate) struct MachineCounters;

#[cfg(not(feature = "vmstat"))]
impl MachineCounters {
    pub(crate) const fn new() -> MachineCounters {
        MachineCounters
    }

    #[inline(always)]
    pub(crate) fn alloc_failed(&self) {}
}
