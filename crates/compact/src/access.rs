//! How compaction reaches a zone: under its lock, one short critical
//! section at a time (a pageblock's scan, one migration's bookkeeping), never
//! across a [`crate::FrameMover`] call, which runs kernel code that may take
//! its own locks or call back into the allocator.

use core::cell::RefCell;

use pageframe_mobility::MobileZone;

/// A zone behind a lock. The facade implements it with its zone's spin lock
/// (`Zone::with_zone`); tests use a [`RefCell`].
pub trait ZoneLock {
    /// Takes the lock and runs `f` on the zone. An implementation that cannot
    /// (re-entered, poisoned) may return without calling `f`: the run then
    /// stops as `Contended`.
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>));
}

impl ZoneLock for RefCell<MobileZone<'_>> {
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>)) {
        if let Ok(mut z) = self.try_borrow_mut() {
            f(&mut z);
        }
    }
}

impl<Z: ZoneLock + ?Sized> ZoneLock for &Z {
    fn with_locked(&self, f: &mut dyn FnMut(&mut MobileZone<'_>)) {
        (**self).with_locked(f)
    }
}

/// Runs `f` under the zone's lock; `None` if the lock refused.
#[inline]
pub(crate) fn locked<Z: ZoneLock + ?Sized, R>(
    zone: &Z,
    f: impl FnOnce(&mut MobileZone<'_>) -> R,
) -> Option<R> {
    let mut f = Some(f);
    let mut out = None;
    zone.with_locked(&mut |z| {
        if let Some(f) = f.take() {
            out = Some(f(z));
        }
    });
    out
}
