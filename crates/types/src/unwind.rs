//! Clean-up owed when code called from inside the allocator panics.
//!
//! The allocator calls kernel code (a migrator, a reporting callback) while
//! it holds things: a block marked busy, a range isolated, free frames
//! taken off the lists. If that code panics and the panic unwinds through
//! the allocator, [`OnUnwind`] gives them back, so the machine is left as
//! if the call had failed.

/// Runs its closure when dropped, unless [`OnUnwind::disarm`] was called:
/// arm it before the call that may panic, disarm it after.
///
/// ```
/// use pageframe_types::unwind::OnUnwind;
/// use core::cell::Cell;
///
/// let busy = Cell::new(true);
/// let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
///     let undo = OnUnwind::new(|| busy.set(false));
///     panic!("the kernel's callback failed");
///     #[allow(unreachable_code)]
///     undo.disarm();
/// }));
/// assert!(r.is_err() && !busy.get(), "the mark was undone");
/// ```
#[must_use = "dropped at once, it runs its clean-up at once"]
pub struct OnUnwind<F: FnOnce()> {
    undo: Option<F>,
}

impl<F: FnOnce()> OnUnwind<F> {
    /// A guard that runs `undo` if dropped before being disarmed.
    #[inline]
    pub fn new(undo: F) -> Self {
        OnUnwind { undo: Some(undo) }
    }

    /// The guarded call returned: nothing to undo.
    #[inline]
    pub fn disarm(mut self) {
        self.undo = None;
    }
}

impl<F: FnOnce()> Drop for OnUnwind<F> {
    #[inline]
    fn drop(&mut self) {
        if let Some(f) = self.undo.take() {
            f();
        }
    }
}
