//! The zone lock is the kernel's choice, since only the kernel knows
//! whether it allocates from interrupt handlers: every
//! lock the allocator takes is a [`lock_api::RawMutex`], the convention of
//! the Rust ecosystem (`spin`, `parking_lot`), named with the kernel's
//! hooks as the machine's [`Platform`]: `Machine<'a, (Lock, Hooks)>`.
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
//! type KernelMachine<'a> = pageframe::Machine<'a, (IrqSafe, pageframe::debug::NoHooks)>;
//! # let _ = core::mem::size_of::<KernelMachine<'static>>();
//! ```
//!
//! ## Every wait between CPUs
//!
//! Every place where one CPU waits for another, and why the wait ends.
//!
//! A kernel that hangs loses everything it holds, so this is the whole
//! list; a wait not named here is a bug. "CPU" means any thread of
//! execution that calls the library.
//!
//! ### Locks held for a bounded critical section
//!
//! | lock | taken by | why the wait ends |
//! |---|---|---|
//! | a zone's lock (the kernel's [`crate::lock::RawMutex`]) | the zone path, refills and spills of per-CPU caches, compaction's steps, contiguous ranges, reporting, validation | its holder runs library code only, with no other wait inside (no kernel callback runs under it, except the closure given to [`crate::zone_core::Zone::inspect`], which must not call the machine) |
//! | an order-0 stripe's lock | an order-0 free of a frame that stripe holds; giving the stripes back | as above; allocations take a stripe with `try_lock` and go elsewhere when it is busy; lock order is stripe, then zone |
//! | the per-CPU sizing update flag | [`crate::tune::Tunables::set_pcp_high_fraction`] and watermark changes | its holder writes each CPU's mailbox and releases it, without waiting for anyone |
//! | swap's list lock and cluster locks (`pageframe-swap`) | slot allocation and free | scanning takes cluster locks with `try_lock` while it holds the list lock; a cluster's holder takes the list lock only after its own work, so no cycle |
//!
//! ### Lock-free retries
//!
//! The ownership byte of a frame, the kcompactd wake-up word and the
//! per-CPU handles' claim flags change by compare-and-swap. A retry happens
//! only because another CPU's swap succeeded: the system as a whole always
//! progresses.
//!
//! ### Draining other CPUs' caches
//!
//! [`crate::Machine::drain_pcp`] (and through it every
//! [`crate::Migrator::drain_caches`] a kernel writes: compaction,
//! contiguous ranges, CMA and offlining call it) asks each CPU that holds
//! its handle to empty its caches, and waits. A cache nobody holds is
//! drained by the caller itself. The wait ends because:
//!
//! * requests to every cache of every zone go out before the drain waits
//!   for any of them;
//! * while it waits, a draining CPU honours every request addressed to its
//!   own handle, in every zone, so drainers never wait on each other,
//!   however many drain at once and in whatever order they reach the
//!   zones (loom checks two CPUs on two zones; a host test runs 10 000
//!   concurrent drains under a watchdog);
//! * every other holder honours requests at its next operation on its
//!   handle, at [`crate::CpuCache::tick`] or [`crate::CpuCache::poll`] (a
//!   kernel calls `poll` when the `kick` IPI arrives), or releases its
//!   handle, which hands the cache to the drainer.
//!
//! What the caller must not do: call it while its CPU holds a handle it
//! did not pass (one borrowed further up its own stack: that cache could
//! never be served), or while holding a lock that a handle's holder may
//! wait for without polling.
//!
//! ### What never waits
//!
//! [`crate::Machine::try_alloc`], the allocation from any context, takes
//! every lock with `try_lock` (a CPU's cache by compare-and-swap, without
//! honouring its requests; a stripe; the zone) and fails with
//! [`crate::AllocError::Busy`] where it would wait, so it may run while
//! its own CPU holds any of them (an NMI handler).
//!
//! A free of a block being migrated, reported or isolated returns
//! [`crate::FreeError::Busy`] at once; compaction and contiguous ranges
//! skip or refuse memory that is busy, and their passes are bounded. A free
//! page reporting pass offers at most the frames that were free when it
//! began, whatever its callback or other CPUs free meanwhile.

pub use lock_api::{GuardNoSend, GuardSend, RawMutex};

use crate::debug::Hooks;

/// What a kernel supplies to a [`crate::Machine`]: the lock its zones take
/// and the hooks it reports to ([`crate::debug::Hooks`]). One parameter
/// names both, so the machine and every type that borrows it take one
/// type; the calls are as static as with two.
///
/// A pair is a platform: `Machine<'static, (IrqLock, KernelHooks)>`. A
/// kernel may as well name its own:
///
/// ```
/// use pageframe::debug::NoHooks;
/// use pageframe::lock::{Platform, SpinLock};
///
/// struct MyKernel;
/// impl Platform for MyKernel {
///     type Lock = SpinLock;
///     type Hooks = NoHooks;
/// }
///
/// let m = pageframe::boot::Builder::new(pageframe::MachineConfig::SINGLE_NODE)
///     .platform::<MyKernel>(NoHooks)
///     .build_boxed();
/// let _: &pageframe::Machine<'_, MyKernel> = &m;
/// ```
pub trait Platform {
    /// The lock every zone takes ([`crate::lock`] says which to choose).
    type Lock: RawMutex;
    /// The hooks the machine reports to ([`crate::debug::NoHooks`]: none).
    type Hooks: Hooks;
}

impl<R: RawMutex, H: Hooks> Platform for (R, H) {
    type Lock = R;
    type Hooks = H;
}

/// The default lock: a spin lock that leaves interrupts alone.
pub type SpinLock = spin::mutex::SpinMutex<()>;

/// A value behind a lock of type `R`.
pub(crate) type Mutex<R, T> = lock_api::Mutex<R, T>;
