//! The allocation slow path across nodes (spec 01 §10, spec 03 §7, §11.1;
//! docs/rules/01-buddy.md §10, docs/rules/03-compaction.md §11): what a
//! request does when the free lists cannot serve it at once. The
//! compaction rules themselves (direct compaction over a list of zones,
//! per-zone deferral, the retry policy, suitability) are the compaction
//! crate's ([`try_to_compact_pages`], [`CompactRetry`]); this module
//! decides which zones, in which order, and what happens between tries.
//! Two shapes:
//!
//! * Linux's ([`NodePolicy::ThisNode`], [`NodePolicy::RemoteFallback`]):
//!   the whole zonelist at the low then the min watermark, then direct
//!   compaction of the zonelist's zones, then (unless compact-only)
//!   reclaim and compaction again at rising priority; costly orders
//!   without `__GFP_RETRY_MAYFAIL` stop after one round.
//! * Node-aware ([`NodePolicy::NodeAware`]): node by node in distance
//!   order, the node's free lists; the local node is compacted directly
//!   unless the node is deferred, remote nodes only in the background
//!   (kcompactd), and only while the machine-wide back-off left by
//!   requests that failed on every node allows it.

use pageframe_buddy::Order;
use pageframe_compact::{
    CompactResult, CompactRetry, Priority, reset_isolation_suitable, try_to_compact_pages,
};
use pageframe_mobility::MigrateType;

use crate::block::Block;
use crate::compaction::{Guarded, Locked, ZoneSet};
use crate::debug::{Caller, Event, Hooks};
use crate::error::AllocError;
use crate::gfp::{AllocFlags, Gfp};
use crate::lock::Platform;
use crate::machine::Machine;
use crate::migrator::Migrator;
use crate::node_id::NodeId;
use crate::numa_stats::NodeStats;
use crate::thp::{NodePolicy, ThpPolicy};
use crate::zone_kind::ZoneKind;
use crate::zone_kind::ZoneRef;
use crate::zonelist::Zonelist;

/// Frames one direct reclaim pass asks for (`SWAP_CLUSTER_MAX`).
pub const SWAP_CLUSTER_MAX: u64 = 32;
/// Reclaim rounds at most (`MAX_RECLAIM_RETRIES`, spec 01 §10.1).
pub const MAX_RECLAIM_RETRIES: u32 = 16;

/// What the slow path asks of the kernel: moving pages ([`Migrator`], for
/// compaction), and optionally direct reclaim and a clock for the stall
/// statistics. A kernel without reclaim implements only the migrator and
/// writes `impl SlowPathHooks for MyMigrator {}`.
pub trait SlowPathHooks: Migrator {
    /// Direct reclaim on zone `zone` of `node`: free up to `pages` frames
    /// (through [`Machine::free`]) and return how many were freed.
    fn reclaim(&mut self, node: NodeId, zone: ZoneKind, pages: u64) -> u64 {
        let _ = (node, zone, pages);
        0
    }

    /// Now, in nanoseconds from any origin, never decreasing (0: no clock,
    /// stall times stay 0).
    fn now_ns(&self) -> u64 {
        0
    }
}

impl<H: SlowPathHooks + ?Sized> SlowPathHooks for &mut H {
    fn reclaim(&mut self, node: NodeId, zone: ZoneKind, pages: u64) -> u64 {
        (**self).reclaim(node, zone, pages)
    }
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// One slow-path request.
#[derive(Clone, Copy, Debug)]
struct Request {
    local: NodeId,
    gfp: Gfp,
    order: Order,
    nodes: NodePolicy,
    compact_only: bool,
}

/// Time spent stalled, and whether anything ran.
struct Stall {
    ran: bool,
    ns: u64,
}

/// # Allocate with compaction and reclaim
///
/// The slow path: what a request that may wait tries before it fails
/// (spec 01 §10, spec 03 §11.1), and transparent huge pages under the THP
/// policy.
impl<'a, P: Platform> Machine<'a, P> {
    /// Allocates `2^order` frames for a task on `node`, trying as hard as
    /// `gfp` allows: the free lists, then (for requests that may do direct
    /// reclaim and I/O, order above 0) direct compaction through `hooks`'
    /// migrator and direct reclaim, with Linux's retry rules (spec 01 §10).
    /// `__GFP_NORETRY` gives up after one round; a costly order (above 3)
    /// without `__GFP_RETRY_MAYFAIL` too.
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_slow<S: SlowPathHooks + ?Sized>(
        &self,
        node: NodeId,
        gfp: Gfp,
        order: Order,
        hooks: &mut S,
    ) -> Result<Block, AllocError> {
        let nodes = if gfp.contains(Gfp::THISNODE) {
            NodePolicy::ThisNode
        } else {
            NodePolicy::RemoteFallback
        };
        self.traced(node, gfp, order, None, Caller::here(), || {
            self.slow(
                Request {
                    local: node,
                    gfp,
                    order,
                    nodes,
                    compact_only: false,
                },
                hooks,
            )
        })
    }

    /// A transparent huge page (the pageblock order) for a fault on `node`
    /// in a region with (`madvised`) or without `MADV_HUGEPAGE`, under the
    /// machine's [`ThpPolicy`] ([`crate::tune::Tunables::set_thp_policy`]): how hard it
    /// tries, which nodes it may use and compact. Counts the attempt and
    /// where it was served in `node`'s statistics.
    #[cfg_attr(feature = "page-owner", track_caller)]
    pub fn alloc_thp<S: SlowPathHooks + ?Sized>(
        &self,
        node: NodeId,
        madvised: bool,
        hooks: &mut S,
    ) -> Result<Block, AllocError> {
        let policy: ThpPolicy = self.thp_policy();
        let order = self.mobility_config().pageblock_order;
        let gfp = policy.gfp(madvised);
        let r = self.traced(node, gfp, order, None, Caller::here(), || {
            self.slow(
                Request {
                    local: node,
                    gfp,
                    order,
                    nodes: policy.nodes,
                    compact_only: policy.compact_only,
                },
                hooks,
            )
        });
        let mut s = NodeStats {
            thp_attempts: 1,
            ..NodeStats::default()
        };
        match &r {
            Ok(a) if a.node() == node => s.thp_success_local = 1,
            Ok(_) => s.thp_success_remote = 1,
            Err(_) => s.thp_failed = 1,
        }
        self.count(node, s);
        r
    }

    fn slow<S: SlowPathHooks + ?Sized>(
        &self,
        mut req: Request,
        hooks: &mut S,
    ) -> Result<Block, AllocError> {
        // Both spellings of "this node only" mean the same.
        if req.nodes == NodePolicy::ThisNode {
            req.gfp |= Gfp::THISNODE;
        }
        let (list, _) = self.prepare(req.local, req.gfp)?;
        let t0 = hooks.now_ns();
        let mut stall = Stall { ran: false, ns: 0 };
        let r = match req.nodes {
            NodePolicy::NodeAware => self.node_aware(&req, list, hooks, &mut stall),
            NodePolicy::ThisNode | NodePolicy::RemoteFallback => {
                self.linux_slow(&req, list, hooks, &mut stall)
            }
        };
        if stall.ran {
            stall.ns = hooks.now_ns().saturating_sub(t0);
            self.count(
                req.local,
                NodeStats {
                    stalls: 1,
                    stall_ns: stall.ns,
                    ..NodeStats::default()
                },
            );
        }
        r
    }

    /// Wakes kcompactd on every node of the list when the request may wake
    /// background reclaim (spec 01 §10, §11: with no kswapd here, the
    /// compactor is the thread that can help a high-order request).
    fn wake_background(&self, req: &Request, list: &Zonelist) {
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

    fn can_compact(req: &Request) -> bool {
        req.order > Order::ZERO
            && req.gfp.contains(Gfp::DIRECT_RECLAIM)
            && req.gfp.contains(Gfp::IO)
    }

    /// Linux's slow path over the whole zonelist (spec 01 §10).
    fn linux_slow<S: SlowPathHooks + ?Sized>(
        &self,
        req: &Request,
        list: &Zonelist,
        hooks: &mut S,
        stall: &mut Stall,
    ) -> Result<Block, AllocError> {
        let (local, gfp, order) = (req.local, req.gfp, req.order);
        let refs = list.as_slice().iter().copied();
        let fast = self.fast_flags(local, gfp);
        let mut last = match self.freelist(local, refs.clone(), gfp, order, fast, None) {
            Ok(a) => return Ok(a),
            Err(AllocError::OrderTooLarge) => return Err(AllocError::OrderTooLarge),
            Err(e) => e,
        };
        self.wake_background(req, list);
        let slow = self.slow_flags(gfp, order);
        if let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow, None) {
            return Ok(a);
        }
        // spec 01 §10: a request that may not reclaim fails here; one that
        // may reclaims whatever its order, and compacts if its order is
        // above 0 and it may do I/O.
        if !gfp.contains(Gfp::DIRECT_RECLAIM) {
            return self
                .last_resort(local, refs, gfp, order, slow)
                .or(Err(last));
        }
        if slow.contains(AllocFlags::NOFRAGMENT)
            && let Some(a) = self.tainted_room(local, refs.clone(), gfp, order, slow, hooks)
        {
            return Ok(a);
        }
        let can_compact = Self::can_compact(req);
        let costly = order.is_costly();
        let mut retry = CompactRetry::new(order);
        // The first, async attempt for costly or unmovable requests.
        if can_compact && (costly || gfp.migratetype() != MigrateType::Movable) {
            let (result, page) = self.direct_compact(
                local,
                refs.clone(),
                gfp,
                order,
                Priority::Async,
                hooks,
                stall,
            );
            if let Some(a) = page {
                return Ok(a);
            }
            if costly && gfp.contains(Gfp::NORETRY) {
                if result <= CompactResult::Deferred {
                    return Err(last);
                }
                retry.set_priority(Priority::Async);
            }
        }
        for _round in 0..MAX_RECLAIM_RETRIES {
            match self.freelist(local, refs.clone(), gfp, order, slow, None) {
                Ok(a) => return Ok(a),
                Err(e) => last = e,
            }
            let progress = if req.compact_only {
                0
            } else {
                self.reclaim(refs.clone(), gfp, hooks, stall)
            };
            if progress > 0
                && let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow, None)
            {
                return Ok(a);
            }
            // Memory back, and still no room where it may go.
            if progress > 0
                && slow.contains(AllocFlags::NOFRAGMENT)
                && let Some(a) = self.tainted_room(local, refs.clone(), gfp, order, slow, hooks)
            {
                return Ok(a);
            }
            if !can_compact {
                // Reclaim alone (`should_reclaim_retry`, spec 01 §10.1, in
                // short): go on while it frees something.
                if progress == 0 || gfp.contains(Gfp::NORETRY) {
                    break;
                }
                continue;
            }
            let (result, page) = self.direct_compact(
                local,
                refs.clone(),
                gfp,
                order,
                retry.priority(),
                hooks,
                stall,
            );
            if let Some(a) = page {
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
            let highest = gfp.highest_zone().unwrap_or(ZoneKind::Normal);
            let suitable = || {
                refs.clone()
                    .filter(|r| r.kind <= highest)
                    .filter_map(|r| self.zone(r))
                    .any(|z| {
                        let marks = z.marks(highest);
                        z.inspect(|m| {
                            pageframe_compact::compaction_suitable(
                                m,
                                order,
                                marks.wmark.min,
                                &marks,
                                self.extfrag_threshold(),
                            )
                        })
                    })
            };
            if !retry.should_retry(result, suitable) {
                break;
            }
        }
        self.last_resort(local, refs, gfp, order, slow)
            .or(Err(last))
    }

    /// Memory that cannot move found no room in the tainted
    /// superpageblocks of its zones, and NOFRAGMENT keeps it out of the
    /// clean ones (`Placement::Superpageblock`): in each eligible zone in
    /// list order, the movable pageblock with the most free frames in a
    /// tainted superpageblock is emptied by migration through `hooks`, and
    /// the free lists are tried again (ours: the superpageblock RFC's
    /// defragmentation inside tainted regions, done when it is needed).
    fn tainted_room<S: SlowPathHooks + ?Sized>(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        slow: AllocFlags,
        hooks: &mut S,
    ) -> Option<Block> {
        let mt = gfp.migratetype();
        let highest = gfp.highest_zone()?;
        for r in refs.clone().filter(|r| r.kind <= highest) {
            let Some(z) = self.zone(r) else { continue };
            let Some(start) = z.inspect(|m| m.room_to_make(mt)) else {
                continue;
            };
            let pb = self.mobility_config().pageblock_order;
            let block = pageframe_buddy::PfnRange::new(start, start + pb.pages());
            if self.make_room(block, hooks).is_ok()
                && let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow, None)
            {
                return Some(a);
            }
        }
        None
    }

    /// Under `defrag_mode`, what the slow path does once reclaim and
    /// compaction have failed: the free lists without NOFRAGMENT (spec 02
    /// §5.5). Otherwise nothing.
    fn last_resort(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        slow: AllocFlags,
    ) -> Result<Block, AllocError> {
        if !slow.contains(AllocFlags::NOFRAGMENT) {
            return Err(AllocError::OutOfMemory);
        }
        let last = slow - AllocFlags::NOFRAGMENT;
        self.freelist(local, refs, gfp, order, last, None)
    }

    /// One direct reclaim pass: up to [`SWAP_CLUSTER_MAX`] frames from the
    /// eligible zones in list order. Returns the frames freed.
    fn reclaim<S: SlowPathHooks + ?Sized>(
        &self,
        refs: impl Iterator<Item = ZoneRef>,
        gfp: Gfp,
        hooks: &mut S,
        stall: &mut Stall,
    ) -> u64 {
        let Some(highest) = gfp.highest_zone() else {
            return 0;
        };
        let mut freed = 0;
        for r in refs.filter(|r| r.kind <= highest) {
            if freed >= SWAP_CLUSTER_MAX {
                break;
            }
            if self.zone(r).is_none() {
                continue;
            }
            stall.ran = true;
            let got = hooks
                .reclaim(r.node, r.kind, SWAP_CLUSTER_MAX - freed)
                .min(SWAP_CLUSTER_MAX - freed);
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

    /// Direct compaction (`try_to_compact_pages`, spec 03 §11.1) of the
    /// eligible zones of `refs` in order, then the free lists: a block the
    /// run captured is the caller's; otherwise the whole list is tried once
    /// more. The compaction crate applies per-zone deferral and accounts
    /// the stall.
    #[allow(clippy::too_many_arguments)]
    fn direct_compact<S: SlowPathHooks + ?Sized>(
        &self,
        local: NodeId,
        refs: impl Iterator<Item = ZoneRef> + Clone,
        gfp: Gfp,
        order: Order,
        prio: Priority,
        hooks: &mut S,
        stall: &mut Stall,
    ) -> (CompactResult, Option<Block>) {
        let Some(highest) = gfp.highest_zone() else {
            return (CompactResult::Skipped, None);
        };
        let Some(set) = ZoneSet::new(self, refs.clone(), highest) else {
            return (CompactResult::Skipped, None);
        };
        let mt = gfp.migratetype();
        let mut guarded = Guarded::new(hooks, self);
        let order_ev = Some(order);
        if P::Hooks::TRACE {
            self.hooks.event(&Event::CompactBegin {
                node: local,
                order: order_ev,
            });
        }
        let out = set.with(|zones| try_to_compact_pages(zones, order, mt, prio, &mut guarded));
        if P::Hooks::TRACE {
            self.hooks.event(&Event::CompactEnd {
                node: local,
                order: order_ev,
                result: out.result,
            });
        }
        if out.result > CompactResult::Deferred {
            stall.ran = true;
        }
        let page = match out.captured {
            Some((i, pfn)) => {
                let z = set.zone(i);
                z.states.set_allocated(pfn, order, mt);
                let r = set.zone_ref(i);
                Some((i, Block::new(self.id, r, pfn, order)))
            }
            None if out.result > CompactResult::Deferred => self
                .freelist(local, refs, gfp, order, self.slow_flags(gfp, order), None)
                .ok()
                .map(|a| {
                    let i = (0..set.len())
                        .find(|&i| set.zone_ref(i) == a.zone_ref())
                        .unwrap_or(usize::MAX);
                    (i, a)
                }),
            None => None,
        };
        let page_zone = page.as_ref().map(|&(i, _)| i).filter(|&i| i < set.len());
        set.with(|zones| out.finish(zones, page_zone));
        (out.result, page.map(|(_, a)| a))
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
    fn node_aware<S: SlowPathHooks + ?Sized>(
        &self,
        req: &Request,
        list: &Zonelist,
        hooks: &mut S,
        stall: &mut Stall,
    ) -> Result<Block, AllocError> {
        let (local, gfp, order) = (req.local, req.gfp, req.order);
        let nodes = list.nodes();
        let slow = self.slow_flags(gfp, order);
        let can_compact = Self::can_compact(req);
        let highest = gfp.highest_zone().ok_or(AllocError::InvalidGfp)?;
        let mut last = AllocError::OutOfMemory;
        // None: remote compaction not considered yet; Some(allowed).
        let mut global: Option<bool> = None;
        self.wake_background(req, list);
        for &n in nodes.as_slice() {
            let refs = list.as_slice().iter().copied().filter(move |r| r.node == n);
            let fast = if n == local {
                self.fast_flags(local, gfp)
            } else {
                AllocFlags::fast(gfp)
            };
            match self
                .freelist(local, refs.clone(), gfp, order, fast, None)
                .or_else(|e| match e {
                    AllocError::OrderTooLarge => Err(e),
                    _ => self.freelist(local, refs.clone(), gfp, order, slow, None),
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
            if n != local {
                let allowed = *global.get_or_insert_with(|| {
                    let deferred = self.global_defer.is_deferred(order);
                    if deferred {
                        self.count(
                            local,
                            NodeStats {
                                global_skips: 1,
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
            let Some(node) = self.node(n) else { continue };
            if node.defer.is_deferred(order) {
                self.count(
                    n,
                    NodeStats {
                        node_deferred: 1,
                        ..NodeStats::default()
                    },
                );
                continue;
            }
            if node.defer.state().shift > 0 {
                // Retrying a node after failures: clear the skip hints a
                // direct compactor left (what kswapd does on going to
                // sleep), or the retry would only revisit what was not
                // skipped last time (the node-level `compaction_restarting`).
                for z in node.zones().filter(|z| z.kind() <= highest) {
                    reset_isolation_suitable(&Locked(z), &z.compact);
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
                    && self.reclaim(refs.clone(), gfp, hooks, stall) > 0
                    && let Ok(a) = self.freelist(local, refs.clone(), gfp, order, slow, None)
                {
                    node.defer.reset(order, true);
                    return Ok(a);
                }
                let (r, page) =
                    self.direct_compact(local, refs.clone(), gfp, order, prio, hooks, stall);
                result = result.max(r);
                if let Some(a) = page {
                    node.defer.reset(order, true);
                    return Ok(a);
                }
            }
            match result {
                CompactResult::Success => node.defer.reset(order, false),
                CompactResult::Complete | CompactResult::PartialSkipped => node.defer.defer(order),
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
