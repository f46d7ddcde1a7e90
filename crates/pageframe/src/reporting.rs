//! Free page reporting (Linux `page_reporting`): a kernel running as a
//! guest tells its hypervisor which free memory it may take back
//! (virtio-balloon's free page reporting). Off the fast path: the kernel
//! calls [`Machine::report_free_pages`] from a worker or a timer, and the
//! allocator hands the callback, in batches, the free blocks of at least a
//! given order not reported since they were last allocated. A block being
//! reported is off the free lists for the call (frees of it get `Busy`);
//! it comes back marked and goes to the tail of its list, so allocations
//! prefer memory the host still backs. Freeing, merging or allocating a
//! block clears its mark (one store on a line the free path writes anyway).

use pageframe_buddy::{Order, Pfn};
use pageframe_types::unwind::OnUnwind;

use crate::lock::{Platform, RawMutex};
use crate::machine::Machine;
use crate::zone_core::Zone;

/// Blocks per batch (Linux `PAGE_REPORTING_CAPACITY`).
pub const REPORTING_CAPACITY: usize = 32;

/// What a reporting pass did.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct ReportStats {
    /// Blocks the callback accepted.
    pub blocks: u64,
    /// Their frames.
    pub pages: u64,
    /// Calls of the callback.
    pub batches: u64,
    /// Blocks the callback refused (given back unmarked).
    pub refused: u64,
}

/// # Free page reporting
///
/// Free blocks told to a hypervisor (virtio-balloon), off the fast path.
impl<P: Platform> Machine<'_, P> {
    /// One reporting pass over every zone: the callback gets batches of up
    /// to [`REPORTING_CAPACITY`] free blocks of at least `min` order that
    /// are not reported yet, and returns whether it reported them (`false`
    /// gives them back unmarked, to be offered again). A zone keeps at
    /// least its low watermark free: reporting never takes memory a normal
    /// allocation would need meanwhile (Linux's rule). A pass ends: it
    /// offers at most as many frames as were free when it began, whatever
    /// is freed meanwhile (by the callback or other CPUs). The zone lock is
    /// not held while the callback runs.
    ///
    /// ```
    /// # use pageframe::{Machine, MachineConfig, NodeId, Order, Pfn, PfnRange, ZoneKind};
    /// # let mut m: Box<Machine<'static>> = pageframe::boot::Builder::new(MachineConfig::SINGLE_NODE).build_boxed();
    /// # let span = PfnRange::new(Pfn(1 << 20), Pfn((1 << 20) + (1 << 16)));
    /// # let meta = Box::leak(vec![core::mem::MaybeUninit::uninit(); m.zone_metadata_bytes(span)].into_boxed_slice());
    /// # m.add_zone(NodeId::ZERO, ZoneKind::Normal, span, meta).unwrap();
    /// # m.add_free_range(span).unwrap();
    /// // A balloon driver hands free 2 MiB blocks to the hypervisor.
    /// let mut given = 0;
    /// let s = m.report_free_pages(Order::new(9).unwrap(), |batch| {
    ///     // virtio-balloon: queue `batch` as free page hints here.
    ///     given += batch.iter().map(|(_, o)| o.pages()).sum::<u64>();
    ///     true
    /// });
    /// assert_eq!(s.pages, given);
    /// assert!(given > 0 && given <= m.inspect().free_pages());
    /// // Nothing new to report until blocks are allocated and freed again.
    /// assert_eq!(m.report_free_pages(Order::new(9).unwrap(), |_| true).pages, 0);
    /// ```
    pub fn report_free_pages(
        &self,
        min: Order,
        mut report: impl FnMut(&[(Pfn, Order)]) -> bool,
    ) -> ReportStats {
        let mut stats = ReportStats::default();
        // The pass's budget: what was free when it began. Frees meanwhile
        // (by the callback, or other CPUs) cannot keep it going.
        let mut left = self.all_zones().map(|z| z.free_pages()).sum();
        for z in self.all_zones() {
            z.report(min, &mut left, &mut report, &mut stats);
        }
        stats
    }

    /// See [`crate::debug::Inspect::reported_pages`].
    pub(crate) fn reported_pages(&self, min: Order) -> (u64, u64) {
        self.all_zones()
            .map(|z| z.inspect(|m| m.reported_pages(min)))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}

impl<R: RawMutex> Zone<'_, R> {
    /// One zone's part of a pass, taking at most `left` frames (and
    /// counting them off).
    fn report(
        &self,
        min: Order,
        left: &mut u64,
        report: &mut impl FnMut(&[(Pfn, Order)]) -> bool,
        stats: &mut ReportStats,
    ) {
        let _running = self.hold();
        loop {
            let mut batch = [(Pfn(0), Order::ZERO); REPORTING_CAPACITY];
            let n = {
                let mut z = self.inner.lock();
                let spare = z.buddy.free_pages().saturating_sub(z.wmark.low);
                let n = z.buddy.take_unreported(min, &mut batch, (*left).min(spare));
                for &(p, o) in &batch[..n] {
                    self.states.set_isolated(p, o);
                    *left -= o.pages();
                }
                self.after_zone_op(&z);
                n
            };
            if n == 0 {
                return;
            }
            let give_back = |ok: bool| {
                let mut z = self.inner.lock();
                for &(p, o) in &batch[..n] {
                    self.states.set_free(p);
                    let r = z.buddy.return_reported(p, o, ok);
                    debug_assert!(r.is_ok(), "the reporter held the block");
                }
                self.after_zone_op(&z);
            };
            // A callback that panics gets nothing reported: the batch goes
            // back unmarked.
            let undo = OnUnwind::new(|| give_back(false));
            let ok = report(&batch[..n]);
            undo.disarm();
            stats.batches += 1;
            give_back(ok);
            for &(_, o) in &batch[..n] {
                if ok {
                    stats.blocks += 1;
                    stats.pages += o.pages();
                } else {
                    stats.refused += 1;
                }
            }
            if !ok {
                // Offered again next pass, not in a loop now.
                return;
            }
        }
    }
}
