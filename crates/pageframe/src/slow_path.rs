//! The allocation slow path across nodes (spec 01 §10, spec 03 §7, §11.1):
//! what a high-order request does when the free lists cannot serve it at
//! once. Two shapes:
//!
//! * Linux's ([`NodePolicy::ThisNode`], [`NodePolicy::RemoteFallback`]):
//!   the whole zonelist at the low then the min watermark, then direct
//!   compaction of every zone in zonelist order (each zone skipped while
//!   deferred), then (unless compact-only) reclaim and a second, sync-light
//!   compaction; costly orders without `__GFP_RETRY_MAYFAIL` stop there.
//! * Node-aware ([`NodePolicy::NodeAware`]): node by node in distance order,
//!   the node's free lists; the local node is compacted directly unless it
//!   is deferred, remote nodes only in the background (kcompactd), and only
//!   when the machine-wide back-off left by requests that failed on every
//!   node has expired.

use pageframe_buddy::Order;
use pageframe_mobility::MigrateType;

use pageframe_compact::{CompactResult, Priority, reset_isolation_suitable};

use crate::compactor::{Clock, Compactor, ZoneTarget};
use crate::error::AllocError;
use crate::gfp::{AllocFlags, Gfp};
use crate::kcompactd_node::{Suitability, suitability};
use crate::machine::{Allocation, Machine};
use crate::numa_stats::NodeStats;
use crate::thp::{NodePolicy, ThpPolicy};
use crate::topology::NodeId;
use crate::zonelist::{ZoneRef, Zonelist};

/// Frames one direct reclaim pass asks for (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: u64 = 32;
/// Retry rounds at most (`MAX_RECLAIM_RETRIES`, spec 01 §10.1).
pub const MAX_RECLAIM_RETRIES: u32 = 16;
/// Compaction retries after a success before the priority rises (spec 01
/// §10.2; a quarter of it for costly orders).
pub const MAX_COMPACT_RETRIES: u32 = 16;

/// A request for the slow path.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SlowRequest {
    /// The node the requester runs on.
    pub local: NodeId,
    /// Its GFP flags (`__GFP_THISNODE` keeps it on `local` whatever
    /// `nodes` says).
    pub gfp: Gfp,
    /// The order.
    pub order: Order,
    /// Where it looks and compacts.
    pub nodes: NodePolicy,
    /// Never reclaim; one compaction pass.
    pub compact_only: bool,
}

/// Which deferral gates a zone's direct compaction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Gate {
    /// Linux's per-zone deferral (spec 03 §11.1).
    Zone,
    /// The caller has already checked the node's deferral.
    Node,
}

/// Time and outcome of the compaction a request stalled in.
struct Stall<'k> {
    clock: &'k dyn Clock,
    ran: bool,
    ns: u64,
}

impl Stall<'_> {
    /// Runs `f`, adding its duration.
    fn timed<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let t0 = self.clock.now_ns();
        let r = f();
        self.ns += self.clock.now_ns().saturating_sub(t0);
        r
    }
}

/// What a direct compaction over some zones achieved.
struct Direct {
    result: CompactResult,
    page: Option<Allocation>,
}

impl<'a> Machine<'a> {
    /// A transparent huge page (or any `order`) for a fault on `local` in a
    /// region with (`madvised`) or without `MADV_HUGEPAGE`, under `policy`:
    /// counts the attempt and where it was served in `local`'s statistics.
    pub fn alloc_thp<C: Compactor + ?Sized>(
        &self,
        local: NodeId,
        order: Order,
        madvised: bool,
        policy: &ThpPolicy,
        compactor: &mut C,
        clock: &dyn Clock,
    ) -> Result<Allocation, AllocError> {
        let req = SlowRequest {
            local,
            gfp: policy.gfp(madvised),
            order,
            nodes: policy.nodes,
            compact_only: policy.compact_only,
        };
        let r = self.alloc_slow(&req, compactor, clock);
        let mut s = NodeStats {
            thp_attempts: 1,
            ..NodeStats::default()
        };
        match &r {
            Ok(a) if a.node == local => s.thp_success_local = 1,
            Ok(_) => s.thp_success_remote = 1,
            Err(_) => s.thp_failed = 1,
        }
        self.count(local, s);
        r
    }

    /// Allocates through the slow path: the free lists first, then
    /// compaction (and reclaim) as `req` allows. See the module docs.
    pub fn alloc_slow<C: Compactor + ?Sized>(
        &self,
        req: &SlowRequest,
        compactor: &mut C,
        clock: &dyn Clock,
    ) -> Result<Allocation, AllocError> {
        let (list, _) = self.prepare(req.local, req.gfp)?;
        let mut stall = Stall {
            clock,
            ran: false,
            ns: 0,
        };
        let r = match req.nodes {
            NodePolicy::NodeAware => self.node_aware(req, list, compactor, &mut stall),
            NodePolicy::ThisNode | NodePolicy::RemoteFallback => {
                self.linux_slow(req, list, compactor, &mut stall)
            }
        };
        if stall.ran {
            self.count(
                req.local,
                NodeStats {
                    compact_stall: 1,
                    compact_stall_ns: stall.ns,
                    compact_success: u64::from(r.is_ok()),
                    compact_fail: u64::from(r.is_err()),
                    ..NodeStats::default()
                },
            );
        }
        r
    }

    /// Wakes kcompactd on every node of the list when the request may wake
    /// background reclaim (spec 01 §10, §11: with no kswapd here, the
    /// compactor is the thread that can help a high-order request).
    fn wake_background(&self, req: &SlowRequest, list: &Zonelist) {
        if !req.gfp.contains(Gfp::KSWAPD_RECLAIM) || req.order == Order::ZERO {
            return;
        }
        let Some(highest) = req.gfp.highest_zone() else {
            return;
        };
        for &n in list.nodes().as_slice() {
            self.wakeup_kcompactd(n, req.order, highest);
        }
    }

    fn can_compact(req: &SlowRequest) -> bool {
        req.order > Order::ZERO
            && req.gfp.contains(Gfp::DIRECT_RECLAIM)
            && req.gfp.contains(Gfp::IO)
    }

    /// Linux's slow path over the whole zonelist (spec 01 §10).
    fn linux_slow<C: Compactor + ?Sized>(
        &self,
        req: &SlowRequest,
        list: &Zonelist,
        c: &mut C,
        stall: &mut Stall<'_>,
    ) -> Result<Allocation, AllocError> {
        let (local, gfp, order) = (req.local, req.gfp, req.order);
        let refs = list.as_slice().iter().copied();
        let fast = self.fast_flags(local, gfp, list);
        let mut last = match self.freelist(local, refs.clone(), gfp, order, fast) {
            Ok(a) => return Ok(a),
            Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
            Err(e) => e,
        };
        self.wake_background(req, list);
        let slow = AllocFlags::slow(gfp, order);
        if let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow) {
            return Ok(a);
        }
        if !Self::can_compact(req) {
            return Err(last);
        }
        let costly = order.is_costly();
        let mut prio = Priority::SyncLight;
        // The first, async attempt for costly or unmovable requests.
        if costly || req.gfp.migratetype() != MigrateType::Movable {
            let d = self.direct_compact(
                local,
                refs.clone(),
                gfp,
                order,
                Priority::Async,
                Gate::Zone,
                c,
                stall,
            );
            if let Some(a) = d.page {
                return Ok(a);
            }
            if costly && gfp.contains(Gfp::NORETRY) {
                if d.result <= CompactResult::Deferred {
                    return Err(last);
                }
                prio = Priority::Async;
            }
        }
        let mut retries = 0u32;
        for _round in 0..MAX_RECLAIM_RETRIES {
            match self.freelist(local, refs.clone(), gfp, order, slow) {
                Ok(a) => return Ok(a),
                Err(e) => last = e,
            }
            if !req.compact_only
                && self.reclaim(refs.clone(), gfp, c, stall) > 0
                && let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow)
            {
                return Ok(a);
            }
            let d =
                self.direct_compact(local, refs.clone(), gfp, order, prio, Gate::Zone, c, stall);
            if let Some(a) = d.page {
                return Ok(a);
            }
            if gfp.contains(Gfp::NORETRY) || req.compact_only {
                break;
            }
            // spec 01 §10: a costly request without RETRY_MAYFAIL gets one
            // round of reclaim and compaction.
            if costly && !gfp.contains(Gfp::RETRY_MAYFAIL) {
                break;
            }
            let again =
                self.should_compact_retry(d.result, &mut retries, &mut prio, order, refs.clone());
            if !again {
                break;
            }
        }
        Err(last)
    }

    /// `should_compact_retry` (spec 01 §10.2).
    fn should_compact_retry(
        &self,
        result: CompactResult,
        retries: &mut u32,
        prio: &mut Priority,
        order: Order,
        refs: impl Iterator<Item = ZoneRef>,
    ) -> bool {
        let costly = order.is_costly();
        let min = if costly {
            Priority::SyncLight
        } else {
            Priority::SyncFull
        };
        let raise = |prio: &mut Priority, retries: &mut u32| match prio.raised() {
            Some(p) if *prio > min => {
                *prio = p;
                *retries = 0;
                true
            }
            _ => false,
        };
        match result {
            // Compaction could not start: worth another round only if some
            // zone now has the free memory to compact into.
            CompactResult::Skipped => refs
                .filter_map(|r| self.zone(r))
                .any(|z| suitability(z, order) == Suitability::Continue),
            CompactResult::Success => {
                *retries += 1;
                let max = if costly {
                    MAX_COMPACT_RETRIES / 4
                } else {
                    MAX_COMPACT_RETRIES
                };
                *retries <= max || raise(prio, retries)
            }
            _ => raise(prio, retries),
        }
    }

    /// One direct reclaim pass: up to [`SWAP_CLUSTER_MAX`] frames from the
    /// eligible zones in list order. Returns the frames freed.
    fn reclaim<C: Compactor + ?Sized>(
        &self,
        refs: impl Iterator<Item = ZoneRef>,
        gfp: Gfp,
        c: &mut C,
        stall: &mut Stall<'_>,
    ) -> u64 {
        let Some(highest) = gfp.highest_zone() else {
            return 0;
        };
        let mut freed = 0;
        for r in refs.filter(|r| r.kind <= highest) {
            if freed >= SWAP_CLUSTER_MAX {
                break;
            }
            let Some(z) = self.zone(r) else { continue };
            stall.ran = true;
            let got = stall.timed(|| c.reclaim(r.node, z, SWAP_CLUSTER_MAX - freed));
            freed += got;
            self.count(
                r.node,
                NodeStats {
                    reclaim_calls: 1,
                    reclaimed: got,
                    ..NodeStats::default()
                },
            );
        }
        freed
    }

    /// `try_to_compact_pages` (spec 03 §11.1) over `refs` and then the free
    /// lists: compacts the eligible zones in order until one succeeds,
    /// skipping zones that are already ready or not worth it, and (with
    /// [`Gate::Zone`]) zones that are deferred. A failed non-async run
    /// defers its zone; a block then obtained resets the zone's deferral.
    #[allow(clippy::too_many_arguments)]
    fn direct_compact<C: Compactor + ?Sized>(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        prio: Priority,
        gate: Gate,
        c: &mut C,
        stall: &mut Stall<'_>,
    ) -> Direct {
        let mut out = Direct {
            result: CompactResult::Skipped,
            page: None,
        };
        let Some(highest) = gfp.highest_zone() else {
            return out;
        };
        let slow = AllocFlags::slow(gfp, order);
        for r in refs.clone().filter(|r| r.kind <= highest) {
            let (Some(z), Some(st)) = (self.zone(r), self.state.get(r.node.index())) else {
                continue;
            };
            let cs = &st.zone_compact[r.kind.index()];
            if gate == Gate::Zone && prio != Priority::SyncFull && cs.compaction_deferred(order) {
                out.result = out.result.max(CompactResult::Deferred);
                self.count(
                    r.node,
                    NodeStats {
                        compact_deferred: 1,
                        ..NodeStats::default()
                    },
                );
                continue;
            }
            match suitability(z, order) {
                Suitability::Continue => {}
                // Another request freed or compacted a block meanwhile.
                Suitability::Ready => {
                    if let Ok(pfn) = z.try_alloc(gfp, order, slow, highest) {
                        out.page = Some(Allocation {
                            node: r.node,
                            zone: r.kind,
                            pfn,
                        });
                        return out;
                    }
                    continue;
                }
                Suitability::Skip => continue,
            }
            stall.ran = true;
            let target = ZoneTarget {
                node: r.node,
                zone: z,
                state: cs,
                mt: gfp.migratetype(),
                background: false,
            };
            let run = stall.timed(|| c.compact(target, order, prio));
            self.count(
                r.node,
                NodeStats {
                    compact_runs: 1,
                    compact_scanned: run.work.scanned,
                    compact_migrated: run.work.migrated,
                    ..NodeStats::default()
                },
            );
            out.result = out.result.max(run.result);
            match run.result {
                CompactResult::Success => {
                    cs.defer_reset(order, false);
                    let got = match run.captured {
                        Some(p) => Ok(p),
                        None => z.try_alloc(gfp, order, slow, highest),
                    };
                    if let Ok(pfn) = got {
                        cs.defer_reset(order, true);
                        out.page = Some(Allocation {
                            node: r.node,
                            zone: r.kind,
                            pfn,
                        });
                        return out;
                    }
                    break;
                }
                CompactResult::Complete | CompactResult::PartialSkipped
                    if prio != Priority::Async =>
                {
                    cs.defer_compaction(order)
                }
                CompactResult::Contended => break,
                _ => {}
            }
        }
        if out.result > CompactResult::Deferred {
            // spec 01 §10: after compaction, the whole list once more.
            if let Ok(a) = self.freelist(local, refs, gfp, order, slow) {
                if let Some(st) = self.state.get(a.node.index()) {
                    st.zone_compact[a.zone.index()].defer_reset(order, true);
                }
                out.page = Some(a);
            }
        }
        out
    }

    /// The node-aware slow path: node by node in preference order. The
    /// local node: its free lists, then (unless the node is deferred) a
    /// direct compaction pass, async when compact-only. Remote nodes: their
    /// free lists, and, when the machine-wide back-off allows it (checked
    /// once per request), a kcompactd wake-up instead of direct compaction:
    /// remote huge pages are worth having only when they come cheap, so the
    /// faulting task never stalls compacting a remote node. A request that
    /// fails everywhere after waking remote compactors defers the next
    /// wake-ups (spec 03 §7 counting); a remote success ends the back-off.
    fn node_aware<C: Compactor + ?Sized>(
        &self,
        req: &SlowRequest,
        list: &Zonelist,
        c: &mut C,
        stall: &mut Stall<'_>,
    ) -> Result<Allocation, AllocError> {
        let (local, gfp, order) = (req.local, req.gfp, req.order);
        let nodes = list.nodes();
        let slow = AllocFlags::slow(gfp, order);
        let can_compact = Self::can_compact(req);
        let highest = gfp.highest_zone().ok_or(AllocError::InvalidGfp)?;
        let mut last = AllocError::OutOfMemory;
        // None: remote compaction not considered yet; Some(allowed).
        let mut global: Option<bool> = None;
        self.wake_background(req, list);
        for (i, &n) in nodes.as_slice().iter().enumerate() {
            let refs = list.as_slice().iter().copied().filter(move |r| r.node == n);
            let fast = if n == local {
                self.fast_flags(local, gfp, list)
            } else {
                AllocFlags::fast(gfp)
            };
            match self
                .freelist(local, refs.clone(), gfp, order, fast)
                .or_else(|e| match e {
                    AllocError::OrderTooLarge => Err(e),
                    _ => self.freelist(local, refs.clone(), gfp, order, slow),
                }) {
                Ok(a) => {
                    if n != local {
                        // What the background compactors made is there:
                        // remote compaction pays off again.
                        self.global_defer.reset(order, true);
                    }
                    return Ok(a);
                }
                Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
                Err(e) => last = e,
            }
            if !can_compact {
                continue;
            }
            if i > 0 {
                let allowed = *global.get_or_insert_with(|| {
                    let deferred = self.global_defer.is_deferred(order);
                    if deferred {
                        self.count(
                            local,
                            NodeStats {
                                compact_global_skips: 1,
                                ..NodeStats::default()
                            },
                        );
                    }
                    !deferred
                });
                if allowed {
                    self.wakeup_kcompactd(n, order, highest);
                }
                continue;
            }
            let Some(st) = self.state.get(n.index()) else {
                continue;
            };
            if st.node_defer.is_deferred(order) {
                self.count(
                    n,
                    NodeStats {
                        compact_deferred: 1,
                        ..NodeStats::default()
                    },
                );
                continue;
            }
            if st.node_defer.state().shift > 0 {
                // Retrying a node after failures: clear the skip hints a
                // direct compactor left (what kswapd does on going to
                // sleep), or the retry would only revisit what was not
                // skipped last time (the node-level `compaction_restarting`).
                for r in refs.clone() {
                    if let Some(z) = self.zone(r) {
                        reset_isolation_suitable(z, &st.zone_compact[r.kind.index()]);
                    }
                }
            }
            let mut result = CompactResult::Skipped;
            // Compact only: one async pass (never blocks, gives a pageblock
            // up at the first frame it cannot move); its failure defers the
            // node, unlike Linux's per-zone rule where only sync runs defer.
            let prios: &[Priority] = if req.compact_only {
                &[Priority::Async]
            } else {
                &[Priority::Async, Priority::SyncLight]
            };
            for (k, &prio) in prios.iter().enumerate() {
                if k > 0
                    && !req.compact_only
                    && self.reclaim(refs.clone(), gfp, c, stall) > 0
                    && let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow)
                {
                    st.node_defer.reset(order, true);
                    return Ok(a);
                }
                let d = self.direct_compact(
                    local,
                    refs.clone(),
                    gfp,
                    order,
                    prio,
                    Gate::Node,
                    c,
                    stall,
                );
                result = result.max(d.result);
                if let Some(a) = d.page {
                    st.node_defer.reset(order, true);
                    return Ok(a);
                }
            }
            match result {
                CompactResult::Success => st.node_defer.reset(order, false),
                CompactResult::Complete | CompactResult::PartialSkipped => {
                    st.node_defer.defer(order)
                }
                _ => {}
            }
        }
        // Failed on every node after waking the remote compactors: back off
        // machine-wide before waking them again.
        if global == Some(true) {
            self.global_defer.defer(order);
        }
        Err(last)
    }
}
