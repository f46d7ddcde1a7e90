//! The locks of the device: `spin`'s normally, loom's under `--cfg loom`
//! so the per-CPU cluster protocol (cluster locks taken with `try_lock`,
//! the list lock, the continuation pool) can be model-checked (`cargo
//! xtask loom`).

#[cfg(not(loom))]
pub(crate) use spin::{Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::MutexGuard;

/// loom's mutex with `spin`'s API (no poisoning: a panic fails the model).
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex(loom::sync::Mutex::new(v))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.0.try_lock().ok()
    }

    /// The value, through exclusive access (no other holder can exist).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}
