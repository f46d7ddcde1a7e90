//! Huge entries: splitting a whole-cluster entry into base entries and the
//! `swapin_enabled` policy that decides whether a huge entry is read back as
//! one 2 MiB page (spec 05 §8 legacy split, §10 "swap-in THP in one piece").

use crate::device::SwapDevice;
use crate::error::SwapError;
use crate::slot::Slot;
use crate::stats::DeviceCounters;

/// `/sys/kernel/mm/transparent_hugepage/swapin_enabled` (spec 05 §10).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum SwapinPolicy {
    /// Read every huge entry back as a huge page.
    Always,
    /// Only for VMAs advised with `MADV_HUGEPAGE` (the proposed default).
    Madvise,
    /// Never: split and swap in base pages.
    Never,
}

bitflags::bitflags! {
    /// What the faulting mapping says about huge pages (spec 05 §10).
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Default)]
    pub struct VmaFlags: u8 {
        /// `MADV_HUGEPAGE` (`VM_HUGEPAGE`).
        const HUGEPAGE = 1 << 0;
        /// `MADV_NOHUGEPAGE` (`VM_NOHUGEPAGE`).
        const NOHUGEPAGE = 1 << 1;
        /// A temporary stack VMA (during exec).
        const TEMP_STACK = 1 << 2;
        /// The process disabled THP (`PR_SET_THP_DISABLE`).
        const THP_DISABLED = 1 << 3;
    }
}

impl SwapinPolicy {
    /// Whether a huge entry faulted in through a mapping with `vma` flags is
    /// read back whole.
    pub const fn allows(self, vma: VmaFlags) -> bool {
        let vetoed = VmaFlags::NOHUGEPAGE.bits()
            | VmaFlags::TEMP_STACK.bits()
            | VmaFlags::THP_DISABLED.bits();
        if vma.bits() & vetoed != 0 {
            return false;
        }
        match self {
            SwapinPolicy::Always => true,
            SwapinPolicy::Madvise => vma.contains(VmaFlags::HUGEPAGE),
            SwapinPolicy::Never => false,
        }
    }
}

/// How a huge entry is swapped in.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum SwapinDecision {
    /// Read all slots into one huge page and map it with one PMD.
    Whole,
    /// The entry was split: fault base pages in one slot at a time.
    Split,
}

impl<'a> SwapDevice<'a> {
    /// Whether the entry at `slot` is a huge (unsplit whole-cluster) entry.
    pub fn is_huge(&self, slot: Slot) -> Result<bool, SwapError> {
        let (idx, _, _) = self.locate(slot, crate::Order::ZERO)?;
        Ok(self.clusters[idx].0.lock().huge)
    }

    /// Splits the huge entry at `slot` (its cluster's first slot) into base
    /// entries, as when its page is split or its PMD swap entry becomes 512
    /// PTE swap entries. Counts, cache bits and the cluster's place are kept;
    /// only later operations may now act on single slots.
    pub fn split_huge(&self, slot: Slot) -> Result<(), SwapError> {
        let (idx, _, _) = self.locate(slot, self.cfg.huge_order())?;
        let mut g = self.clusters[idx].0.lock();
        if !g.huge {
            return Err(SwapError::NotHuge);
        }
        g.huge = false;
        DeviceCounters::bump(&self.counters.splits);
        Ok(())
    }

    /// A fault on a huge entry (`do_huge_pmd_swap_page`): under `policy` and
    /// the mapping's `vma` flags, read it back whole (counted `thp_swpin`)
    /// or split it for base-page swap-in (counted `thp_swpin_fallback`).
    pub fn swapin_huge(
        &self,
        slot: Slot,
        policy: SwapinPolicy,
        vma: VmaFlags,
    ) -> Result<SwapinDecision, SwapError> {
        let (idx, _, _) = self.locate(slot, self.cfg.huge_order())?;
        let mut g = self.clusters[idx].0.lock();
        if !g.huge {
            return Err(SwapError::NotHuge);
        }
        if policy.allows(vma) {
            DeviceCounters::bump(&self.counters.huge_swapin);
            return Ok(SwapinDecision::Whole);
        }
        g.huge = false;
        DeviceCounters::bump(&self.counters.splits);
        DeviceCounters::bump(&self.counters.huge_swapin_fallback);
        Ok(SwapinDecision::Split)
    }

    /// After [`SwapinDecision::Whole`], no huge page could be allocated:
    /// split the entry and count the swap-in as a fallback instead.
    pub fn abort_huge_swapin(&self, slot: Slot) -> Result<(), SwapError> {
        self.split_huge(slot)?;
        self.counters
            .huge_swapin
            .fetch_sub(1, core::sync::atomic::Ordering::Relaxed);
        DeviceCounters::bump(&self.counters.huge_swapin_fallback);
        Ok(())
    }
}
