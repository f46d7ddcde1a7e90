//! Run-time tuning: Linux's `vm.*` knobs, ours beside them, and the
//! transparent-huge-page policy, all set through one handle,
//! [`Tunables`], which [`Machine::tunables`] lends.
//!
//! The knobs are atomics the allocation paths read; a change takes effect
//! at once (watermarks are recomputed on the spot, each node's kcompactd
//! and each per-CPU cache pick up theirs at their next step). A value
//! outside its range gets a [`ConfigError`] and changes nothing.
//!
//! ```
//! # use pageframe::{Machine, MachineConfig, boot::Builder};
//! use pageframe::tune::{ThpPolicy, Placement};
//! # let m: Box<Machine<'static>> = Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
//! let t = m.tunables();
//! t.set_defrag_mode(false); // Linux's defaults
//! t.set_fallback_placement(Placement::Linux);
//! t.set_thp_policy(ThpPolicy::NODE_AWARE);
//! assert!(t.set_proactiveness(101).is_err());
//! assert_eq!(t.proactiveness(), 20);
//! ```

use core::sync::atomic::Ordering::{Relaxed, Release};

use pageframe_mobility::MAX_WATERMARK_SCALE_FACTOR;

use crate::debug::NoHooks;
use crate::error::ConfigError;
use crate::lock::{Platform, SpinLock};
use crate::machine::{Machine, placement_index};

pub use crate::thp::{DefragAction, NodePolicy, ThpDefrag, ThpPolicy};
pub use pageframe_mobility::Placement;

/// The machine's knobs: each setter with its getter. A borrowed view of
/// the machine ([`Machine::tunables`]), free to make and to copy; every
/// call takes effect for all CPUs at once, through a shared machine.
pub struct Tunables<'m, 'a, P: Platform = (SpinLock, NoHooks)> {
    machine: &'m Machine<'a, P>,
}

impl<P: Platform> Clone for Tunables<'_, '_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P: Platform> Copy for Tunables<'_, '_, P> {}

impl<'a, P: Platform> Machine<'a, P> {
    /// The run-time knobs ([`crate::tune`]): watermarks, compaction,
    /// fallback placement, per-CPU cache sizing, the THP policy.
    #[inline]
    pub fn tunables(&self) -> Tunables<'_, 'a, P> {
        Tunables { machine: self }
    }
}

impl<'m, 'a, P: Platform> Tunables<'m, 'a, P> {
    /// Sets `vm.min_free_kbytes` (spec 01 §7.2) and recomputes every
    /// zone's watermarks. Any value is accepted: one larger than the
    /// machine's memory reserves all of it (every ordinary allocation then
    /// fails its watermark check), as Linux does.
    pub fn set_min_free_kbytes(self, kib: u64) {
        let m = self.machine;
        m.knobs.min_free_kbytes.store(kib, Relaxed);
        m.knobs.min_free_kbytes_set.store(true, Release);
        m.recompute_watermarks();
    }

    /// The `vm.min_free_kbytes` in force: the value set, or 4·√(low memory
    /// in KiB) clamped to 128 KiB..256 MiB.
    pub fn min_free_kbytes(self) -> u64 {
        self.machine.min_free_kbytes()
    }

    /// Sets `vm.watermark_scale_factor` (1..=3000) and recomputes the
    /// watermarks; other values are refused.
    pub fn set_watermark_scale_factor(self, factor: u32) -> Result<(), ConfigError> {
        if !(1..=MAX_WATERMARK_SCALE_FACTOR).contains(&factor) {
            return Err(ConfigError::WatermarkScaleFactor(factor));
        }
        self.machine
            .knobs
            .watermark_scale_factor
            .store(factor, Relaxed);
        self.machine.recompute_watermarks();
        Ok(())
    }

    /// `vm.watermark_scale_factor`.
    pub fn watermark_scale_factor(self) -> u32 {
        self.machine.knobs.watermark_scale_factor.load(Relaxed)
    }

    /// Sets `vm.compaction_proactiveness` (0..=100; 0 turns proactive
    /// compaction off). Each node's kcompactd takes it at its next tick.
    pub fn set_proactiveness(self, p: u32) -> Result<(), ConfigError> {
        let v = u8::try_from(p)
            .ok()
            .filter(|&v| v <= 100)
            .ok_or(ConfigError::Proactiveness(p))?;
        self.machine.knobs.proactiveness.store(v, Relaxed);
        Ok(())
    }

    /// `vm.compaction_proactiveness`.
    pub fn proactiveness(self) -> u8 {
        self.machine.proactiveness()
    }

    /// Sets `vm.extfrag_threshold` (0..=1000): compaction of a costly order
    /// is skipped while the fragmentation index is at or below it (the
    /// failure would come from lack of memory).
    pub fn set_extfrag_threshold(self, t: u32) -> Result<(), ConfigError> {
        if t > 1000 {
            return Err(ConfigError::ExtfragThreshold(t));
        }
        self.machine.knobs.extfrag_threshold.store(t, Relaxed);
        Ok(())
    }

    /// `vm.extfrag_threshold`.
    pub fn extfrag_threshold(self) -> u32 {
        self.machine.extfrag_threshold()
    }

    /// Sets the huge-page policy [`Machine::alloc_thp`] follows.
    pub fn set_thp_policy(self, policy: ThpPolicy) {
        self.machine.knobs.thp.store(policy.encode(), Relaxed);
    }

    /// The huge-page policy in force.
    pub fn thp_policy(self) -> ThpPolicy {
        self.machine.thp_policy()
    }

    /// Sets `vm.defrag_mode` (spec 02 §5.5): every request first tries
    /// without fragmenting fallbacks (no claim below a pageblock, no
    /// steal), and keeps that rule through the slow path's reclaim and
    /// compaction, and across nodes, dropping it only when they have
    /// failed.
    ///
    /// **On by default here; Linux's default is off:** it keeps more
    /// maximum-order blocks free at rest under mixed churn, for somewhat
    /// more reclaim (`cargo xtask lab mixed-churn`; figures in
    /// `docs/results.md`). On one node, a request
    /// without reclaim or compaction hooks ([`Machine::alloc`]) ends where
    /// it would without it, a pass of the free lists later (its last pass
    /// may fragment as the first one would). On several nodes, a request
    /// takes another node's memory before it fragments its own node's
    /// (Linux's defrag_mode does the same). `set_defrag_mode(false)` gives
    /// Linux's default behaviour.
    pub fn set_defrag_mode(self, on: bool) {
        self.machine.knobs.defrag_mode.store(on, Relaxed);
    }

    /// `vm.defrag_mode`.
    pub fn defrag_mode(self) -> bool {
        self.machine.defrag_mode()
    }

    /// Sets where a fallback for memory that cannot move (unmovable or
    /// reclaimable requests whose own lists are empty) takes its
    /// pageblock, in every zone (ours; Linux 6.18 has no such knob):
    ///
    /// * [`Placement::Superpageblock`], **the default**: inside a 1 GiB
    ///   region (a superpageblock) that holds such memory already, and
    ///   only when none has fallback memory left in a clean one, the least
    ///   free first, so that the other regions stay 1 GiB pages
    ///   [`Machine::alloc_contig`] can take, by moving only movable memory.
    ///   Each zone counts its tainted regions (the zone's
    ///   [`crate::zone_core::Zone::superpageblock_map`], `vmstat`);
    /// * [`Placement::Neighbour`]: only the 4 MiB rule below it (a
    ///   pageblock beside one of the request's type first), as before
    ///   there were superpageblocks;
    /// * [`Placement::Linux`]: Linux's rule, the largest fallback block
    ///   wherever it lies (with `set_defrag_mode(false)`, Linux's
    ///   defaults).
    ///
    /// What each keeps of 1 GiB pages under churn: `cargo xtask lab
    /// giant-churn` (figures in `docs/results.md`). Movable requests fall
    /// back by Linux's rule under each.
    pub fn set_fallback_placement(self, placement: Placement) {
        let m = self.machine;
        // Under the set-up lock: a zone hot-added meanwhile gets it too.
        let _setup = m.setup();
        m.knobs.placement.store(placement_index(placement), Relaxed);
        for z in m.all_zones() {
            z.with_zone(|mz| mz.set_placement(placement));
        }
    }

    /// Where fallbacks for memory that cannot move go.
    pub fn fallback_placement(self) -> Placement {
        self.machine.fallback_placement()
    }

    /// Sets `vm.percpu_pagelist_high_fraction` (spec 04 §3.2): 0 (the
    /// default) auto-tunes each cache's `high` between the low watermark
    /// and 1/8 of the zone, shared by the node's CPUs; 8 and above fixes it
    /// at `managed / fraction` shared the same way. Other values are
    /// refused. Owners apply the new sizing at their next operation.
    pub fn set_pcp_high_fraction(self, fraction: u32) -> Result<(), ConfigError> {
        let m = self.machine;
        if (1..8).contains(&fraction) {
            return Err(ConfigError::PcpHighFraction(fraction));
        }
        let local = m.local_cpus(m.cpus.max(1));
        for z in m.all_zones() {
            z.update_pcp_sizing(local, fraction)
                .map_err(|_| ConfigError::PcpHighFraction(fraction))?;
        }
        Ok(())
    }

    /// Sets how many free blocks of the pageblock order each zone's
    /// pageblock pool keeps off its free lists (see [`Zone::pooled_frames`]):
    /// 0 turns the pool off (every huge page goes to the free lists and
    /// merges, as in Linux without per-CPU lists), at most
    /// [`crate::zone::POOL_SLOTS`]. The blocks of the slots a zone stops
    /// using go back to its free lists. By default a zone uses one slot
    /// for every [`crate::zone::PAGEBLOCKS_PER_SLOT`] pageblocks of the
    /// memory it manages, up to the bound, resized as memory comes and
    /// goes; once set here, the number stays.
    ///
    /// [`Zone::pooled_frames`]: crate::zone::Zone::pooled_frames
    pub fn set_pageblock_pool(self, slots: usize) -> Result<(), ConfigError> {
        if slots > crate::zone::POOL_SLOTS {
            return Err(ConfigError::PageblockPool(slots));
        }
        for z in self.machine.all_zones() {
            z.set_pool_slots(slots);
        }
        Ok(())
    }

    /// The most pageblock pool slots a zone of the machine uses.
    pub fn pageblock_pool(self) -> usize {
        self.machine
            .all_zones()
            .map(|z| z.pool_slots())
            .max()
            .unwrap_or(0)
    }
}
