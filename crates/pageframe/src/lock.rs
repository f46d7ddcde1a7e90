//! The zone lock is the kernel's choice (ARCHITECTURE principle 10): every
//! lock the allocator takes is a [`lock_api::RawMutex`], the convention of
//! the Rust ecosystem (`spin`, `parking_lot`), given as a type parameter of
//! [`crate::Machine`].
//!
//! The default, [`SpinLock`], spins with interrupts untouched: right for a
//! kernel that never allocates from an interrupt handler (and for host
//! tests). A kernel that does must use a lock that disables interrupts on
//! the local CPU while held, or an interrupt arriving while this CPU holds a
//! zone lock would spin on it forever. Such a lock is a few lines on top of
//! a spin lock; the example kernel has one (`examples/kernel/src/irq_lock.rs`):
//!
//! ```
//! use core::sync::atomic::{AtomicBool, Ordering};
//! use pageframe::lock::{GuardNoSend, RawMutex, SpinLock};
//!
//! /// Stand-ins for `cli`/`sti` and the interrupt flag.
//! static IF: AtomicBool = AtomicBool::new(true);
//! fn irqs_save_disable() -> bool { IF.swap(false, Ordering::SeqCst) }
//! fn irqs_restore(was: bool) { IF.store(was, Ordering::SeqCst) }
//!
//! struct IrqSafe { lock: SpinLock, was_enabled: AtomicBool }
//!
//! // SAFETY: the spin lock gives mutual exclusion; interrupts are off on
//! // this CPU for as long as it is held, so a handler cannot re-enter it.
//! unsafe impl RawMutex for IrqSafe {
//!     const INIT: Self = IrqSafe { lock: SpinLock::INIT, was_enabled: AtomicBool::new(false) };
//!     type GuardMarker = GuardNoSend;
//!     fn lock(&self) {
//!         let was = irqs_save_disable();
//!         RawMutex::lock(&self.lock);
//!         self.was_enabled.store(was, Ordering::Relaxed);
//!     }
//!     fn try_lock(&self) -> bool {
//!         let was = irqs_save_disable();
//!         if RawMutex::try_lock(&self.lock) {
//!             self.was_enabled.store(was, Ordering::Relaxed);
//!             true
//!         } else {
//!             irqs_restore(was);
//!             false
//!         }
//!     }
//!     unsafe fn unlock(&self) {
//!         let was = self.was_enabled.load(Ordering::Relaxed);
//!         // SAFETY: the caller holds the lock (RawMutex contract).
//!         unsafe { RawMutex::unlock(&self.lock) };
//!         irqs_restore(was);
//!     }
//! }
//!
//! // A machine whose zones take the interrupt-safe lock:
//! type KernelMachine<'a> = pageframe::Machine<'a, IrqSafe>;
//! # let _ = core::mem::size_of::<KernelMachine<'static>>();
//! ```

pub use lock_api::{GuardNoSend, GuardSend, RawMutex};

/// The default lock: a spin lock that leaves interrupts alone.
pub type SpinLock = spin::mutex::SpinMutex<()>;

/// A value behind a lock of type `R`.
pub(crate) type Mutex<R, T> = lock_api::Mutex<R, T>;
