//! A hint to the processor: start loading a line the program is about to
//! read. A free of a frame reads a few lines of metadata spread over
//! megabytes (its ownership byte, its chunk's entry, its bitmap word); asked
//! for together, or for the next frame of a batch while this one is freed,
//! their cache misses overlap instead of following one another.

/// Asks the processor to bring the line holding `p` into its caches. Reads
/// nothing the program can observe and never faults: any address will do,
/// a wrong one costs a wasted load at most. A no-op on architectures
/// without such a hint here and under Miri.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    // SAFETY: `prefetcht0` is a hint: it neither reads memory the program
    // can observe nor writes any, and never faults, whatever the address
    // (one that is not mapped is dropped).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    unsafe {
        core::arch::asm!(
            "prefetcht0 [{0}]",
            in(reg) p,
            options(nostack, preserves_flags, readonly)
        );
    }
    // SAFETY: as above; `prfm` is the same hint on this architecture.
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    unsafe {
        core::arch::asm!(
            "prfm pldl1keep, [{0}]",
            in(reg) p,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    #[test]
    fn any_address_is_only_a_hint() {
        let x = [7u64; 16];
        prefetch(&x[3]);
        // Not mapped, not canonical, null: a hint, never a fault.
        prefetch(core::ptr::null::<u8>());
        prefetch(core::ptr::without_provenance::<u8>(usize::MAX));
        prefetch(core::ptr::without_provenance::<u64>(usize::MAX / 2 + 1));
        assert_eq!(x[3], 7);
    }
}
