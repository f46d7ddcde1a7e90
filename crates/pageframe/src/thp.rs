//! The transparent-huge-page allocation policy: how hard a huge-page fault
//! tries (`/sys/kernel/mm/transparent_hugepage/defrag`) and where it may
//! look (which nodes, whether reclaim may run).
//!
//! The node choice answers the 2018 linux-mm debate on THP and NUMA: a
//! request pinned to the local node (`__GFP_THISNODE`) can stall in
//! compaction that cannot succeed; one free to go remote can compact every
//! node in turn when all are fragmented; the answer Linux converged on
//! compacts without reclaiming and remembers failures per node
//! ([`NodePolicy::NodeAware`]).

use crate::gfp::Gfp;

/// `transparent_hugepage/defrag`: what a huge-page fault may do when no
/// free huge page is at hand.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ThpDefrag {
    /// Direct compaction for every fault; regions without `MADV_HUGEPAGE`
    /// give up after one round (`__GFP_NORETRY`).
    Always,
    /// Never stall: wake kcompactd and fall back to base pages.
    Defer,
    /// Stall for `MADV_HUGEPAGE` regions, defer for the rest.
    DeferMadvise,
    /// Stall for `MADV_HUGEPAGE` regions, nothing for the rest (the default).
    Madvise,
    /// Take a free huge page if one is there; never compact.
    Never,
}

impl ThpDefrag {
    /// Every setting, in sysfs order.
    pub const ALL: [ThpDefrag; 5] = [
        ThpDefrag::Always,
        ThpDefrag::Defer,
        ThpDefrag::DeferMadvise,
        ThpDefrag::Madvise,
        ThpDefrag::Never,
    ];

    /// The sysfs spelling.
    pub const fn name(self) -> &'static str {
        match self {
            ThpDefrag::Always => "always",
            ThpDefrag::Defer => "defer",
            ThpDefrag::DeferMadvise => "defer+madvise",
            ThpDefrag::Madvise => "madvise",
            ThpDefrag::Never => "never",
        }
    }

    /// The setting spelled `s`, as sysfs accepts it.
    pub fn parse(s: &str) -> Option<ThpDefrag> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// The GFP flags of a huge-page fault under this setting, in a region
    /// with (`madvised`) or without `MADV_HUGEPAGE`: the light THP mask
    /// (no reclaim at all) plus direct reclaim/compaction where the setting
    /// allows a stall, kswapd/kcompactd wake-up where it defers, and
    /// `NORETRY` for non-madvised regions under `always`.
    pub const fn gfp(self, madvised: bool) -> Gfp {
        let light = Gfp::TRANSHUGE_LIGHT;
        let stall = Gfp::TRANSHUGE;
        match (self, madvised) {
            (ThpDefrag::Always, true) => stall,
            (ThpDefrag::Always, false) => stall.union(Gfp::NORETRY),
            (ThpDefrag::Defer, _) | (ThpDefrag::DeferMadvise, false) => {
                light.union(Gfp::KSWAPD_RECLAIM)
            }
            (ThpDefrag::DeferMadvise, true) | (ThpDefrag::Madvise, true) => stall,
            (ThpDefrag::Madvise, false) | (ThpDefrag::Never, _) => light,
        }
    }

    /// What a fault under this setting does when no huge page is free.
    pub const fn action(self, madvised: bool) -> DefragAction {
        let gfp = self.gfp(madvised);
        DefragAction {
            direct_compaction: gfp.contains(Gfp::DIRECT_RECLAIM),
            wake_kcompactd: gfp.contains(Gfp::KSWAPD_RECLAIM),
            one_round: gfp.contains(Gfp::NORETRY),
        }
    }
}

/// The behaviour a [`ThpDefrag`] setting yields for one fault.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DefragAction {
    /// The fault may stall in direct compaction.
    pub direct_compaction: bool,
    /// The fault wakes the background compactor.
    pub wake_kcompactd: bool,
    /// A failed first (async) compaction ends the attempt.
    pub one_round: bool,
}

/// Which nodes a huge-page request may use and compact.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NodePolicy {
    /// `__GFP_THISNODE`: only the local node, compacted as hard as the
    /// defrag setting allows; never a remote page.
    ThisNode,
    /// The whole zonelist: any node's free huge page first, then direct
    /// compaction of every node's zones in distance order (Linux without
    /// `__GFP_THISNODE`).
    RemoteFallback,
    /// Local first, remote only when it comes cheap: the local node's free
    /// pages, then its direct compaction (unless the node is deferred after
    /// a failure), then other nodes' free pages in distance order. Remote
    /// nodes are never compacted in the faulting task: their kcompactd is
    /// woken instead, and once a request has failed on every node those
    /// wake-ups back off machine-wide (spec 03 §7 counting) until a remote
    /// success.
    NodeAware,
}

impl NodePolicy {
    /// A short name.
    pub const fn name(self) -> &'static str {
        match self {
            NodePolicy::ThisNode => "thisnode",
            NodePolicy::RemoteFallback => "remote-fallback",
            NodePolicy::NodeAware => "node-aware",
        }
    }
}

/// The full policy of a huge-page request.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ThpPolicy {
    /// How hard it tries.
    pub defrag: ThpDefrag,
    /// Where it looks.
    pub nodes: NodePolicy,
    /// Compact only: never run direct reclaim (and so never the
    /// reclaim-then-compact retry); one compaction pass per zone.
    pub compact_only: bool,
}

impl Default for ThpPolicy {
    /// Linux's default `defrag` setting (`madvise`: only `MADV_HUGEPAGE`
    /// regions stall), with the node-aware, compact-only node policy.
    fn default() -> Self {
        ThpPolicy {
            defrag: ThpDefrag::Madvise,
            nodes: NodePolicy::NodeAware,
            compact_only: true,
        }
    }
}

impl ThpPolicy {
    /// Packs the policy into a byte (the machine keeps it in an atomic).
    pub(crate) const fn encode(&self) -> u8 {
        let d = match self.defrag {
            ThpDefrag::Always => 0,
            ThpDefrag::Defer => 1,
            ThpDefrag::DeferMadvise => 2,
            ThpDefrag::Madvise => 3,
            ThpDefrag::Never => 4,
        };
        let n = match self.nodes {
            NodePolicy::ThisNode => 0,
            NodePolicy::RemoteFallback => 1,
            NodePolicy::NodeAware => 2,
        };
        d | (n << 3) | ((self.compact_only as u8) << 5)
    }

    /// The inverse of [`ThpPolicy::encode`].
    pub(crate) const fn decode(v: u8) -> ThpPolicy {
        let defrag = match v & 7 {
            0 => ThpDefrag::Always,
            1 => ThpDefrag::Defer,
            2 => ThpDefrag::DeferMadvise,
            4 => ThpDefrag::Never,
            _ => ThpDefrag::Madvise,
        };
        let nodes = match (v >> 3) & 3 {
            0 => NodePolicy::ThisNode,
            1 => NodePolicy::RemoteFallback,
            _ => NodePolicy::NodeAware,
        };
        ThpPolicy {
            defrag,
            nodes,
            compact_only: v & (1 << 5) != 0,
        }
    }

    /// `__GFP_THISNODE` with direct compaction and reclaim (`MADV_HUGEPAGE`
    /// before 2018): may stall on the local node.
    pub const THISNODE_COMPACT: ThpPolicy = ThpPolicy {
        defrag: ThpDefrag::Always,
        nodes: NodePolicy::ThisNode,
        compact_only: false,
    };
    /// Fall back to remote nodes, compacting each.
    pub const REMOTE_FALLBACK: ThpPolicy = ThpPolicy {
        defrag: ThpDefrag::Always,
        nodes: NodePolicy::RemoteFallback,
        compact_only: false,
    };
    /// Compact only, local first, with node-aware deferral.
    pub const NODE_AWARE: ThpPolicy = ThpPolicy {
        defrag: ThpDefrag::Always,
        nodes: NodePolicy::NodeAware,
        compact_only: true,
    };

    /// The GFP flags of a fault in a region with or without
    /// `MADV_HUGEPAGE`: the defrag setting's, plus `__GFP_THISNODE` for
    /// [`NodePolicy::ThisNode`].
    pub const fn gfp(&self, madvised: bool) -> Gfp {
        let g = self.defrag.gfp(madvised);
        match self.nodes {
            NodePolicy::ThisNode => g.union(Gfp::THISNODE),
            _ => g,
        }
    }
}
