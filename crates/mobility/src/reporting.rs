//! Free page reporting over every list but the isolated ones (spec 01
//! §3.1; isolated memory is about to leave the zone, Linux skips it too).

use pageframe_buddy::{FreeError, Order, Pfn};

use crate::zone::MobileZone;
use crate::{MigrateType, list_of};

impl MobileZone<'_> {
    /// Takes up to `out.len()` unreported free blocks of at least `min`
    /// order, at most `max_pages` frames, off the lists of every type but
    /// `Isolate` (see `BuddyZone::take_unreported`). Returns how many.
    pub fn take_unreported(
        &mut self,
        min: Order,
        out: &mut [(Pfn, Order)],
        max_pages: u64,
    ) -> usize {
        let mut n = 0;
        let mut left = max_pages;
        for mt in MigrateType::ALL {
            if mt == MigrateType::Isolate || n == out.len() {
                continue;
            }
            let k = self
                .buddy
                .take_unreported(min, list_of(mt), &mut out[n..], left);
            for &(_, o) in &out[n..n + k] {
                left -= o.pages();
            }
            n += k;
        }
        n
    }

    /// Gives back a block [`MobileZone::take_unreported`] took, marked
    /// reported if `reported` (see `BuddyZone::return_reported`).
    pub fn return_reported(
        &mut self,
        pfn: Pfn,
        order: Order,
        reported: bool,
    ) -> Result<(), FreeError> {
        self.buddy.return_reported(pfn, order, reported)
    }

    /// Frames in free blocks of at least `min` order (isolated lists
    /// excluded), and how many of them are reported.
    pub fn reported_pages(&self, min: Order) -> (u64, u64) {
        MigrateType::ALL
            .into_iter()
            .filter(|&mt| mt != MigrateType::Isolate)
            .map(|mt| self.buddy.reported_pages(min, list_of(mt)))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}
