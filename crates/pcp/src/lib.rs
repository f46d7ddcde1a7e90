//! pageframe-pcp (work in progress).
#![no_std]
