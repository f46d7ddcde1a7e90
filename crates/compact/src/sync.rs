//! The atomics the cross-CPU state uses: `core`'s normally, loom's under
//! `--cfg loom` so the kcompactd wake-up protocol can be model-checked
//! (`cargo xtask loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU16;

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::AtomicU16;

pub(crate) use core::sync::atomic::Ordering::Relaxed;
