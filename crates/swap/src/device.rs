//! The swap device: set-up over caller memory, locking helpers and the
//! cluster state transitions shared by allocation and freeing (spec 05 §3,
//! §4).

use core::mem::{MaybeUninit, size_of};

use crate::cluster::{ClusterCell, ClusterFlag, ClusterInner, ClusterSnapshot};
use crate::config::{DeviceFlags, SwapConfig};
use crate::continuation::ContPool;
use crate::error::{InitError, SwapError};
use crate::lists::{Link, ListId, Lists};
use crate::map::{self, Digits, MAP_BAD, MAX_CONT_LEVELS, SlotState};
use crate::slot::{ClusterIndex, MAX_ORDERS, Order, Slot};
use crate::stats::{DeviceCounters, DeviceStats};
use pageframe_types::carve::{bytes_for, carve_init};

/// A swap device of page-sized slots grouped into clusters, with all its
/// metadata in memory the caller handed over.
///
/// The device is shared (`&SwapDevice` is `Sync`): each cluster has its own
/// lock, the cluster lists one more lock taken only when a cluster changes
/// list, and each CPU brings its own [`crate::SwapCpu`] by `&mut`.
/// Lock order: a cluster lock before the list lock or the continuation
/// pool lock; the list lock only ever *try*-locks clusters.
pub struct SwapDevice<'a> {
    pub(crate) cfg: SwapConfig,
    pub(crate) cs: usize,
    pub(crate) clusters: &'a [ClusterCell<'a>],
    pub(crate) lists: crate::sync::Mutex<Lists<'a>>,
    pub(crate) pool: crate::sync::Mutex<ContPool<'a>>,
    pub(crate) counters: DeviceCounters,
}

type Page<'a> = Option<&'a mut [u8]>;

/// The sum of the parts' sizes, `usize::MAX` if one overflowed or the sum
/// does.
const fn sum(parts: [Option<usize>; 3]) -> usize {
    let mut total = 0usize;
    let mut i = 0;
    while i < parts.len() {
        match parts[i] {
            Some(b) => total = total.saturating_add(b),
            None => return usize::MAX,
        }
        i += 1;
    }
    total
}

impl<'a> SwapDevice<'a> {
    /// Bytes of metadata memory [`SwapDevice::new`] needs for `cfg`
    /// (about one byte a slot plus 64 bytes and a link a cluster).
    /// `usize::MAX` if that does not fit in memory at all.
    pub const fn metadata_bytes(cfg: &SwapConfig) -> usize {
        let n = cfg.nr_clusters() as usize;
        let map = match n.checked_mul(cfg.cluster_slots() as usize) {
            Some(m) => bytes_for::<u8>(m),
            None => None,
        };
        sum([
            bytes_for::<ClusterCell<'static>>(n),
            bytes_for::<Link>(n),
            map,
        ])
    }

    /// Bytes of continuation storage for `pages` continuation pages (one
    /// digit a slot of a cluster each); `usize::MAX` if that does not fit
    /// in memory at all.
    pub const fn continuation_bytes(cfg: &SwapConfig, pages: usize) -> usize {
        let digits = match pages.checked_mul(cfg.cluster_slots() as usize) {
            Some(d) => bytes_for::<u8>(d),
            None => None,
        };
        sum([bytes_for::<Page<'static>>(pages), digits, Some(0)])
    }

    /// Sets up a device: every slot free except the header (slot 0) and the
    /// padding of the last cluster, which are bad. `cont` is optional
    /// continuation storage; as many pages as fit are used.
    pub fn new(
        cfg: SwapConfig,
        meta: &'a mut [MaybeUninit<u8>],
        cont: Option<&'a mut [MaybeUninit<u8>]>,
    ) -> Result<Self, InitError> {
        cfg.check()?;
        let needed = Self::metadata_bytes(&cfg);
        if meta.len() < needed {
            return Err(InitError::MetadataTooSmall {
                needed,
                given: meta.len(),
            });
        }
        let n = cfg.nr_clusters() as usize;
        let cs = cfg.cluster_slots() as usize;
        let small = InitError::MetadataTooSmall {
            needed,
            given: meta.len(),
        };
        let (links, rest) = carve_init(meta, n, |_| Link::OFF).ok_or(small)?;
        // spec 05 §2: slot 0 is the header, permanently bad; the padding past
        // `slots` is bad too so every cluster is whole.
        let limit = cfg.slots as usize;
        let slots = n.checked_mul(cs).ok_or(small)?;
        let (map, rest) = carve_init(
            rest,
            slots,
            |i| {
                if i == 0 || i >= limit { MAP_BAD } else { 0 }
            },
        )
        .ok_or(small)?;
        let mut chunks = map.chunks_mut(cs);
        let (clusters, _) = carve_init(rest, n, |_| {
            let m: &'a mut [u8] = chunks.next().unwrap_or_default();
            let count = m.iter().filter(|&&b| b != 0).count() as u32;
            // spec 05 §4: at swapon a cluster with bad slots starts NONFULL[0].
            let hint = m.iter().position(|&b| b == 0).unwrap_or(m.len()) as u32;
            let flag = if count == 0 {
                ClusterFlag::Free
            } else {
                ClusterFlag::Nonfull
            };
            ClusterCell(crate::sync::Mutex::new(ClusterInner {
                summary: crate::scan::summarize(m),
                map: m,
                hint,
                cont: [const { None }; MAX_CONT_LEVELS],
                count,
                flag,
                order: 0,
                huge: false,
            }))
        })
        .ok_or(small)?;
        let clusters: &'a [ClusterCell<'a>] = clusters;
        let mut lists = Lists::new(links);
        for (i, c) in clusters.iter().enumerate() {
            let g = c.0.lock();
            lists.move_to(i as u32, ListId::for_flag(g.flag, g.order));
        }
        let pool = match cont {
            None => ContPool::empty(),
            Some(mem) => {
                // The digits come first, the stack of page references after
                // them, with at most its alignment as padding between.
                let per = size_of::<Page<'static>>() + cs;
                let slack = core::mem::align_of::<Page<'static>>() - 1;
                let pages = mem.len().saturating_sub(slack) / per;
                match carve_init(mem, pages * cs, |_| 0u8) {
                    Some((digits, rest)) => {
                        let mut chunks = digits.chunks_mut(cs);
                        match carve_init(rest, pages, |_| chunks.next()) {
                            Some((stack, _)) => ContPool::new(stack),
                            None => ContPool::empty(),
                        }
                    }
                    None => ContPool::empty(),
                }
            }
        };
        Ok(SwapDevice {
            cfg,
            cs,
            clusters,
            lists: crate::sync::Mutex::new(lists),
            pool: crate::sync::Mutex::new(pool),
            counters: DeviceCounters::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SwapConfig {
        &self.cfg
    }

    /// Slots per cluster.
    pub fn cluster_slots(&self) -> u32 {
        self.cs as u32
    }

    /// Number of clusters.
    pub fn nr_clusters(&self) -> u32 {
        self.clusters.len() as u32
    }

    /// The order of a whole cluster (a huge entry).
    pub fn huge_order(&self) -> Order {
        self.cfg.huge_order()
    }

    /// Slots that can ever be allocated (`pages`: all but header and padding).
    pub fn usable_slots(&self) -> u32 {
        self.cfg.slots - 1
    }

    /// Allocated slots right now (`inuse_pages`), header and padding
    /// excluded. Locks each cluster in turn: a report, not a fast path.
    pub fn inuse_slots(&self) -> u32 {
        let bad = self.clusters.len() as u32 * self.cs as u32 - self.usable_slots();
        self.clusters.iter().map(|c| c.0.lock().count).sum::<u32>() - bad
    }

    /// The state of one slot.
    pub fn slot_state(&self, slot: Slot) -> Result<SlotState, SwapError> {
        let s = slot.get() as usize;
        if s >= self.cfg.slots as usize {
            return Err(SwapError::OutOfRange);
        }
        let mut g = self.clusters[s / self.cs].0.lock();
        let ClusterInner { map, cont, .. } = &mut *g;
        let b = map[s % self.cs];
        Ok(match b {
            0 => SlotState::Free,
            MAP_BAD => SlotState::Bad,
            _ => SlotState::InUse {
                map_count: Digits {
                    levels: cont,
                    index: s % self.cs,
                }
                .map_count(b),
                cached: map::has_cache(b),
            },
        })
    }

    /// A snapshot of one cluster.
    pub fn cluster(&self, index: ClusterIndex) -> Option<ClusterSnapshot> {
        self.clusters
            .get(index.as_usize())
            .map(|c| c.0.lock().snapshot())
    }

    /// List lengths and event counters.
    pub fn stats(&self) -> DeviceStats {
        use core::sync::atomic::Ordering::Relaxed;
        let (used, total) = {
            let p = self.pool.lock();
            ((p.total() - p.available()) as u32, p.total() as u32)
        };
        let l = self.lists.lock();
        let mut s = DeviceStats {
            free_clusters: l.len(ListId::FREE),
            full: l.len(ListId::FULL),
            discard: l.len(ListId::DISCARD) + l.discarding,
            list_lock_acquisitions: l.acquisitions,
            splits: self.counters.splits.load(Relaxed),
            huge_swapin: self.counters.huge_swapin.load(Relaxed),
            huge_swapin_fallback: self.counters.huge_swapin_fallback.load(Relaxed),
            huge_freed: self.counters.huge_freed.load(Relaxed),
            discarded: self.counters.discarded.load(Relaxed),
            cont_pages_used: used,
            cont_pages_total: total,
            ..DeviceStats::default()
        };
        for o in 0..MAX_ORDERS {
            s.nonfull[o] = l.len(ListId::nonfull(o as u8));
            s.frag[o] = l.len(ListId::frag(o as u8));
        }
        s
    }

    // ---- shared helpers -------------------------------------------------

    /// The list lock, counted.
    pub(crate) fn lock_lists(&self) -> crate::sync::MutexGuard<'_, Lists<'a>> {
        let mut l = self.lists.lock();
        l.acquisitions += 1;
        l
    }

    /// Checks an entry (`2^order` slots at `slot`) and returns its cluster,
    /// its offset inside the cluster and its length.
    pub(crate) fn locate(
        &self,
        slot: Slot,
        order: Order,
    ) -> Result<(usize, usize, usize), SwapError> {
        if order.get() > self.cfg.cluster_order {
            return Err(SwapError::BadOrder);
        }
        let n = order.pages() as usize;
        let s = slot.get() as usize;
        if s + n > self.cfg.slots as usize {
            return Err(SwapError::OutOfRange);
        }
        if !slot.is_aligned(order) {
            return Err(SwapError::Misaligned);
        }
        // Natural alignment and n <= cluster size keep the entry in one cluster.
        Ok((s / self.cs, s % self.cs, n))
    }

    /// spec 05 §4 after slots were freed: an empty cluster goes to FREE (or
    /// DISCARD), a partial one to NONFULL[order] unless already there.
    pub(crate) fn settle_after_free(&self, idx: usize, g: &mut ClusterInner<'a>) {
        if g.count == 0 {
            self.free_cluster(idx, g);
        } else if g.flag != ClusterFlag::Nonfull {
            g.flag = ClusterFlag::Nonfull;
            self.lock_lists()
                .move_to(idx as u32, ListId::nonfull(g.order));
        }
    }

    /// spec 05 §7 `free_cluster`: reset the order, return continuation
    /// pages, then FREE or (with page discard) DISCARD.
    pub(crate) fn free_cluster(&self, idx: usize, g: &mut ClusterInner<'a>) {
        g.order = 0;
        g.hint = 0;
        crate::scan::mark_groups(&mut g.summary, 0, self.cs / 8, true);
        g.huge = false;
        if g.cont.iter().any(|c| c.is_some()) {
            let mut pool = self.pool.lock();
            for c in g.cont.iter_mut() {
                if let Some(page) = c.take() {
                    pool.give(page);
                }
            }
        }
        let flag = if self.cfg.flags.contains(DeviceFlags::PAGE_DISCARD) {
            ClusterFlag::Discard
        } else {
            ClusterFlag::Free
        };
        g.flag = flag;
        self.lock_lists()
            .move_to(idx as u32, ListId::for_flag(flag, 0));
    }

    /// spec 05 §4 after an allocation attempt: FREE if untouched (an
    /// isolated free cluster goes straight back: it was discarded already),
    /// FRAG[order] if partial, FULL if full.
    pub(crate) fn settled_flag(&self, g: &mut ClusterInner<'a>) -> ClusterFlag {
        if g.count == 0 {
            g.order = 0;
            ClusterFlag::Free
        } else if (g.count as usize) < self.cs {
            ClusterFlag::Frag
        } else {
            ClusterFlag::Full
        }
    }

    /// spec 05 §4 `relocate` for a cluster on a list (the per-CPU fast
    /// path): takes the list lock only when the list changes.
    pub(crate) fn relocate(&self, idx: usize, g: &mut ClusterInner<'a>) {
        if g.flag == ClusterFlag::Discard {
            return;
        }
        let target = self.settled_flag(g);
        if g.flag != target {
            g.flag = target;
            self.lock_lists()
                .move_to(idx as u32, ListId::for_flag(target, g.order));
        }
    }

    /// Whether freed clusters wait for discard.
    pub(crate) fn discard_pending(&self) -> bool {
        let l = self.lists.lock();
        l.len(ListId::DISCARD) + l.discarding > 0
    }
}
