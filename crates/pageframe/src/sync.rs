//! The atomics the lock-free paths use: `core`'s normally, loom's under
//! `--cfg loom`, so the ownership protocol can be model-checked
//! (`cargo xtask loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU8};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;

#[cfg(not(loom))]
pub(crate) use pageframe_types::atomic::AtomicU64;
