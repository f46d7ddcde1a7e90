//! Discard of freed clusters (spec 05 §7): with
//! [`crate::DeviceFlags::PAGE_DISCARD`], a cluster that becomes free waits
//! on the discard list; the kernel's worker calls
//! [`SwapDevice::run_discards`] with its block-discard implementation, and
//! only then does the cluster become allocatable again (§12.9).

use crate::cluster::ClusterFlag;
use crate::device::SwapDevice;
use crate::lists::ListId;
use crate::slot::Slot;
use crate::stats::DeviceCounters;

/// Issues the block-layer discard for a run of slots (the kernel's part).
pub trait Discard {
    /// Discard `nr` slots starting at `first`. Called with no lock held.
    fn discard(&mut self, first: Slot, nr: u32);
}

impl<F: FnMut(Slot, u32)> Discard for F {
    fn discard(&mut self, first: Slot, nr: u32) {
        self(first, nr)
    }
}

impl<'a> SwapDevice<'a> {
    /// Discards every cluster waiting on the discard list and returns them to
    /// the free list; returns how many were discarded.
    pub fn run_discards(&self, d: &mut impl Discard) -> u32 {
        let mut done = 0;
        loop {
            let idx = {
                let mut l = self.lock_lists();
                let Some(idx) = l.first(ListId::DISCARD) else {
                    break;
                };
                // Off the list but still flagged DISCARD: not allocatable
                // while the discard runs.
                l.move_to(idx, ListId::OFF);
                l.discarding += 1;
                idx as usize
            };
            d.discard(Slot::new((idx * self.cs) as u32), self.cs as u32);
            let mut g = self.clusters[idx].0.lock();
            g.flag = ClusterFlag::Free;
            let mut l = self.lock_lists();
            l.discarding -= 1;
            l.move_to(idx as u32, ListId::FREE);
            drop(l);
            drop(g);
            DeviceCounters::bump(&self.counters.discarded);
            done += 1;
        }
        done
    }

    /// Clusters waiting for discard.
    pub fn pending_discards(&self) -> u32 {
        let l = self.lists.lock();
        l.len(ListId::DISCARD) + l.discarding
    }
}
