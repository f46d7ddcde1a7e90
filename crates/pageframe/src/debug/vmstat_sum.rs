//! The counters of [`crate::debug::vmstat`] added up when read: a zone's
//! from its own and its CPUs' counters and its free lists, a node's and
//! the machine's from their zones and their slow-path counters. The
//! counters themselves are bumped on the paths, through the no-op-when-off
//! interface of [`crate::debug::vmstat`]; only the reading is here.

use crate::debug::vmstat::VmStat;
use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::node_id::NodeId;
use crate::zone_core::Zone;

impl<R: RawMutex> Zone<'_, R> {
    /// This zone's counters: its allocations, frees and per-CPU cache
    /// traffic on every CPU, and its free and managed frames
    /// ([`crate::debug::vmstat`], feature `vmstat`).
    pub fn vmstat(&self) -> VmStat {
        let mut v = VmStat::default();
        self.add_vmstat(&mut v);
        v
    }

    pub(crate) fn add_vmstat(&self, v: &mut VmStat) {
        v.nr_free_pages += self.free_pages();
        v.nr_managed_pages += self.managed_pages();
        self.inspect(|m| {
            let c = m.superpageblock_counts();
            v.nr_superpageblocks += c.whole;
            v.nr_superpageblocks_tainted += c.tainted;
            v.nr_superpageblocks_clean += c.clean;
            v.nr_superpageblocks_free += c.free;
            let s = m.stats();
            v.superpageblock_fallback_kept += s.superpageblock_kept;
            v.superpageblock_fallback_tainting += s.superpageblock_tainting;
            let (t, c) = m.mobility().pageblocks().superpageblocks().events();
            v.superpageblock_tainted += t;
            v.superpageblock_cleaned += c;
        });
        let kind = self.kind();
        self.vm_shared.add_to(kind, v);
        for c in self.vm_cpus.all() {
            c.add_to(kind, v);
        }
    }
}

impl<P: Platform> Machine<'_, P> {
    /// See [`crate::debug::Inspect::vmstat`].
    pub(crate) fn vmstat(&self) -> VmStat {
        let mut v = VmStat::default();
        for z in self.all_zones() {
            z.add_vmstat(&mut v);
        }
        v.add_node(&self.total_stats());
        self.vm.add_to(&mut v);
        v
    }

    /// See [`crate::debug::Inspect::node_vmstat`].
    pub(crate) fn node_vmstat(&self, id: NodeId) -> VmStat {
        let mut v = VmStat::default();
        if let Some(n) = self.node(id) {
            for z in n.zones() {
                z.add_vmstat(&mut v);
            }
            v.add_node(&n.stats());
        }
        v
    }
}
