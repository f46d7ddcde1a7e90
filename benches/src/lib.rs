//! Shared helpers for the pageframe benchmarks.
