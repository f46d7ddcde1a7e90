//! The allocator's zone lock for this kernel: a spin lock that disables
//! interrupts on the local CPU while held.
//!
//! `pageframe` takes its lock as a type parameter (any `lock_api`
//! `RawMutex`). With a plain spin lock, an interrupt handler that allocates
//! while its CPU already holds a zone lock spins on that lock forever; with
//! this one no interrupt can arrive on a CPU holding a zone lock. (This
//! kernel's timer handler only counts ticks, but a kernel whose handlers
//! allocate needs exactly this.)

use core::sync::atomic::{AtomicBool, Ordering};
use pageframe::lock::{GuardNoSend, RawMutex, SpinLock};
use x86_64::instructions::interrupts;

/// A spin lock held with interrupts off.
pub struct IrqLock {
    lock: SpinLock,
    /// Whether interrupts were on when the holder took the lock (written
    /// and read only by the holder).
    were_enabled: AtomicBool,
}

// SAFETY: mutual exclusion comes from the inner spin lock; interrupts are
// off on the holding CPU from before the lock is taken until after it is
// released, so no handler on that CPU can try to take it meanwhile. The
// guard is not `Send`: the interrupt state belongs to the CPU that locked.
unsafe impl RawMutex for IrqLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = IrqLock {
        lock: SpinLock::INIT,
        were_enabled: AtomicBool::new(false),
    };
    type GuardMarker = GuardNoSend;

    fn lock(&self) {
        let were = interrupts::are_enabled();
        interrupts::disable();
        RawMutex::lock(&self.lock);
        self.were_enabled.store(were, Ordering::Relaxed);
    }

    fn try_lock(&self) -> bool {
        let were = interrupts::are_enabled();
        interrupts::disable();
        if RawMutex::try_lock(&self.lock) {
            self.were_enabled.store(were, Ordering::Relaxed);
            true
        } else {
            if were {
                interrupts::enable();
            }
            false
        }
    }

    unsafe fn unlock(&self) {
        let were = self.were_enabled.load(Ordering::Relaxed);
        // SAFETY: the caller holds the lock (the `RawMutex` contract).
        unsafe { RawMutex::unlock(&self.lock) };
        if were {
            interrupts::enable();
        }
    }
}
