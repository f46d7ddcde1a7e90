//! Periodic decay of `high` (spec 04 §6), run once per `vm.stat_interval`
//! (1 s) by the owning CPU.

use crate::pcp::PerCpuPages;
use crate::types::ListIndex;
use crate::zone::PcpZone;

impl PerCpuPages<'_> {
    /// `decay_pcp_high`: lowers `high` by 1/8 (but not below `high_min`, and
    /// at once down to `count - (batch << scale_max)` if the cache is mostly
    /// idle stock), then spills whatever lies above the new `high`. Returns
    /// whether more work remains (the worker should stay scheduled).
    ///
    /// The 1/8 step uses integer division, so a `high` below 8 above
    /// `high_min` never decays: Linux behaves the same and spec 04 §12(6)
    /// asks to reproduce it.
    pub fn decay<Z: PcpZone>(&mut self, zone: &Z) -> bool {
        self.stats.decays += 1;
        let mut more = false;
        let high_min = self.sizing.high_min() as i64;
        let high = self.high as i64;
        if high > high_min {
            let idle =
                self.count as i64 - ((self.sizing.batch() as i64) << self.config.scale_max());
            // Clamped to high_max as well: a cache holding more than
            // high + (batch << scale_max) pages would otherwise raise `high`
            // past its bound (spec 04 §12(2) takes precedence).
            let new = idle
                .max(high - high / 8)
                .max(high_min)
                .min(self.sizing.high_max() as i64);
            self.high = new as u32;
            if new > high_min {
                more = true;
            }
        }
        let excess = self.count as i64 - self.high as i64;
        if excess > 0 {
            let first = ListIndex::new(0).expect("list 0 exists");
            self.spill(zone, excess as u32, first);
            more = true;
        }
        // Foreign frees wait for a batch; an idle CPU must not keep them
        // from their chunks for good.
        self.spill_foreign(zone);
        more
    }
}
