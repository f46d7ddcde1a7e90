//! pageframe facade (in progress).
#![no_std]
