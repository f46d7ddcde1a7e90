//! pageframe-swap (work in progress).
#![no_std]
