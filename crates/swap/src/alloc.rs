//! Allocation: the per-CPU fast path, the list-walking slow path and the
//! cluster scan (spec 05 §5.2, §5.4, §5.5).

use crate::cluster::{ClusterFlag, ClusterInner};
use crate::config::{DeviceFlags, MthpSearch};
use crate::device::SwapDevice;
use crate::error::{AllocError, FallbackReason};
use crate::lists::ListId;
use crate::map::MapFlags;
use crate::percpu::SwapCpu;
use crate::scan::{find_free_run, find_free_slot, mark_groups, refresh};
use crate::slot::{Order, Slot};

impl<'a> SwapDevice<'a> {
    /// Allocates an entry of `2^order` naturally aligned slots, each marked
    /// as held by the swap cache (`SWAP_HAS_CACHE`, spec 05 §6). Order 0 is
    /// a base page; the cluster order takes a whole free cluster (a THP,
    /// marked huge until [`SwapDevice::split_huge`]); orders in between are
    /// mTHP entries in clusters dedicated to their order.
    ///
    /// On failure of an order > 0 the caller splits the folio and allocates
    /// base slots; the reason is counted in `cpu`'s statistics.
    pub fn alloc(&self, cpu: &mut SwapCpu, order: Order) -> Result<Slot, AllocError> {
        if order.get() > self.cfg.cluster_order {
            return Err(AllocError::BadOrder);
        }
        let k = order.get();
        let r = if k > 0 && !self.cfg.flags.contains(DeviceFlags::BLOCK_DEVICE) {
            // spec 05 §5.4: swap files take order-0 entries only.
            Err(FallbackReason::NotBlockDevice)
        } else if let Some(s) = self.alloc_fast(cpu, k) {
            cpu.stats.fast += 1;
            Ok(s)
        } else {
            cpu.stats.slow += 1;
            self.alloc_slow(cpu, k)
        };
        match r {
            Ok(s) => {
                cpu.stats.alloc[usize::from(order.get())] += 1;
                Ok(s)
            }
            Err(reason) => {
                cpu.stats.fallback[usize::from(order.get())] += 1;
                cpu.stats.reasons[reason.index()] += 1;
                Err(AllocError::NoSpace(reason))
            }
        }
    }

    /// Allocates a whole free cluster for a PMD-sized THP.
    pub fn alloc_huge(&self, cpu: &mut SwapCpu) -> Result<Slot, AllocError> {
        self.alloc(cpu, self.cfg.huge_order())
    }

    /// [`SwapDevice::alloc`], and when it fails only because freed clusters
    /// wait for discard, run the discards and retry once (spec 05 §7: an
    /// order-0 failure drains pending discards synchronously).
    pub fn alloc_or_discard(
        &self,
        cpu: &mut SwapCpu,
        order: Order,
        discard: &mut impl crate::Discard,
    ) -> Result<Slot, AllocError> {
        match self.alloc(cpu, order) {
            Err(AllocError::NoSpace(FallbackReason::DiscardPending)) => {
                self.run_discards(discard);
                self.alloc(cpu, order)
            }
            r => r,
        }
    }

    /// spec 05 §5.2: try the cluster this CPU used last for the order.
    fn alloc_fast(&self, cpu: &mut SwapCpu, k: u8) -> Option<Slot> {
        let hint = cpu.next[k as usize]?;
        let s = hint.get() as usize;
        let idx = s / self.cs;
        let Some(cell) = self.clusters.get(idx) else {
            cpu.next[k as usize] = None;
            return None;
        };
        let mut g = cell.0.lock();
        if !g.usable(k) {
            cpu.next[k as usize] = None;
            return None;
        }
        let found = self.scan_take(&mut g, s % self.cs, k);
        self.relocate(idx, &mut g);
        self.remember(cpu, idx, &g, found, k)
    }

    /// spec 05 §5.4 `cluster_alloc`, for one device.
    fn alloc_slow(&self, cpu: &mut SwapCpu, k: u8) -> Result<Slot, FallbackReason> {
        let huge = k == self.cfg.cluster_order;
        let discard = self.cfg.flags.contains(DeviceFlags::PAGE_DISCARD);
        let pending = |d: &Self, otherwise| {
            if d.discard_pending() {
                FallbackReason::DiscardPending
            } else {
                otherwise
            }
        };
        if huge {
            // spec 05 §12.4: a PMD-order entry only ever takes an entirely
            // free cluster.
            return self
                .try_one(cpu, ListId::FREE, k)
                .ok_or_else(|| pending(self, FallbackReason::NoFreeCluster));
        }
        if discard {
            // Spread writes over fresh clusters first on discarding devices.
            if let Some(s) = self.try_one(cpu, ListId::FREE, k) {
                return Ok(s);
            }
        }
        if let Some(s) = self.try_all(cpu, ListId::nonfull(k), k) {
            return Ok(s);
        }
        if !discard && let Some(s) = self.try_one(cpu, ListId::FREE, k) {
            return Ok(s);
        }
        if let Some(s) = self.try_one(cpu, ListId::frag(k), k) {
            return Ok(s);
        }
        if k > 0 {
            if self.cfg.mthp_search == MthpSearch::Exhaustive {
                if let Some(s) = self.try_all(cpu, ListId::frag(k), k) {
                    return Ok(s);
                }
                if let Some(s) = self.steal(cpu, k) {
                    return Ok(s);
                }
            }
            return Err(pending(self, FallbackReason::NoAlignedRun));
        }
        // Order 0 may use the free slots of clusters of any order.
        self.steal(cpu, 0)
            .ok_or_else(|| pending(self, FallbackReason::DeviceFull))
    }

    /// Tries the FRAG then NONFULL clusters of every order other than `k`
    /// (from the largest order down for mTHP, from 1 up for order 0 as Linux).
    fn steal(&self, cpu: &mut SwapCpu, k: u8) -> Option<Slot> {
        let max = self.cfg.cluster_order;
        for o in 0..=max {
            let o = if k == 0 { o } else { max - o };
            if o == k {
                continue;
            }
            if let Some(s) = self.try_all(cpu, ListId::frag(o), k) {
                return Some(s);
            }
            if let Some(s) = self.try_all(cpu, ListId::nonfull(o), k) {
                return Some(s);
            }
        }
        None
    }

    /// Tries the first lockable cluster of `list`.
    fn try_one(&self, cpu: &mut SwapCpu, list: ListId, k: u8) -> Option<Slot> {
        self.try_list(cpu, list, k, &mut Some(1))
    }

    /// Tries each cluster of `list` once (failures move to the tail of their
    /// FRAG list, so the walk ends).
    fn try_all(&self, cpu: &mut SwapCpu, list: ListId, k: u8) -> Option<Slot> {
        self.try_list(cpu, list, k, &mut None)
    }

    /// Tries clusters of `list` one at a time until one yields an entry or
    /// `budget` (the list length when first seen, if `None`) runs out. Each
    /// try isolates the first lockable cluster (spec 05 §4
    /// `isolate_lock_cluster`: contended clusters are skipped, so a
    /// non-empty list can yield nothing), scans it from its start and puts
    /// it on the list its new state calls for, all under one hold of the
    /// list lock (Linux drops and retakes it between isolation and
    /// relocation; holding it across the short scan halves the lock traffic).
    fn try_list(
        &self,
        cpu: &mut SwapCpu,
        list: ListId,
        k: u8,
        budget: &mut Option<u32>,
    ) -> Option<Slot> {
        loop {
            let mut l = self.lock_lists();
            let left = budget.get_or_insert(l.len(list));
            if *left == 0 {
                return None;
            }
            *left -= 1;
            let mut cur = l.first(list);
            let (idx, mut g) = loop {
                let idx = cur?;
                if let Some(g) = self.clusters[idx as usize].0.try_lock() {
                    break (idx, g);
                }
                cur = l.next(idx);
            };
            // Isolated (NONE) while scanned, then straight onto the list
            // its new state calls for.
            g.flag = ClusterFlag::None;
            let found = self.scan_take(&mut g, 0, k);
            let target = self.settled_flag(&mut g);
            g.flag = target;
            l.move_to(idx, ListId::for_flag(target, g.order));
            drop(l);
            if let Some(s) = self.remember(cpu, idx as usize, &g, found, k) {
                return Some(s);
            }
        }
    }

    /// spec 05 §5.5 `scan_cluster`: the first aligned run of `2^k` free slots
    /// at or after `from`, taken with the cache bit set. Returns its offset.
    fn scan_take(&self, g: &mut ClusterInner<'a>, from: usize, k: u8) -> Option<usize> {
        let n = 1usize << k;
        if g.count as usize + n > self.cs {
            return None;
        }
        let off = if g.count == 0 {
            0
        } else {
            // Nothing is free before the hint.
            let from = from.max(g.hint as usize);
            if n == 1 {
                find_free_slot(&g.summary, g.map, from)?
            } else {
                find_free_run(g.map, from, n)?
            }
        };
        g.map[off..off + n].fill(MapFlags::HAS_CACHE.bits());
        if n >= 8 {
            // Whole groups taken.
            mark_groups(&mut g.summary, off / 8, (off + n) / 8, false);
        } else {
            refresh(&mut g.summary, g.map, off, off + n);
        }
        if g.count == 0 {
            // spec 05 §3.3: the first allocation into an empty cluster
            // dedicates it to its order.
            g.order = k;
        }
        g.count += n as u32;
        if (off..off + n).contains(&(g.hint as usize)) {
            g.hint = (off + n) as u32;
        }
        if k == self.cfg.cluster_order {
            g.huge = true;
        }
        Some(off)
    }

    /// Records where this CPU continues next time and turns the offset into
    /// a slot.
    fn remember(
        &self,
        cpu: &mut SwapCpu,
        idx: usize,
        g: &ClusterInner<'a>,
        found: Option<usize>,
        k: u8,
    ) -> Option<Slot> {
        let n = 1usize << k;
        let next = match found {
            Some(off) if off + n < self.cs && (g.count as usize) < self.cs => Some(off + n),
            _ => None,
        };
        cpu.next[k as usize] = next.map(|o| Slot::new((idx * self.cs + o) as u32));
        found.map(|off| Slot::new((idx * self.cs + off) as u32))
    }
}
