//! 64-bit atomics on every target the crates build for: the target's own
//! where it has them (x86-64, AArch64, RISC-V 64: `portable_atomic`
//! re-exports `core`'s there, at no cost), a lock-based fallback where it
//! does not (riscv32imac has 32-bit atomics only). Counters and tunables
//! use these; the ownership protocols use 8- and 32-bit atomics, native
//! everywhere.

pub use portable_atomic::AtomicU64;
