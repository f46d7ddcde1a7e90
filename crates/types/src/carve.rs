//! Typed values carved out of caller memory (the crates have no heap): the
//! one place the pageframe crates turn raw bytes into typed
//! values (frame metadata, free-list heads, per-CPU cache slots).

use core::mem::{MaybeUninit, align_of, size_of};

/// A carved array and the memory after it.
pub type Carved<'m, T> = (&'m mut [T], &'m mut [MaybeUninit<u8>]);

/// Bytes [`carve`] needs for `n` values of `T` from a buffer at any address:
/// the array plus the worst-case alignment slack. `None` on overflow.
pub const fn bytes_for<T>(n: usize) -> Option<usize> {
    match n.checked_mul(size_of::<T>()) {
        Some(b) => b.checked_add(align_of::<T>() - 1),
        None => None,
    }
}

/// Splits an aligned, uninitialised array of `n` values of `T` off the
/// front of `mem`; returns it and the rest. `None` if `mem` is too short.
pub fn carve<T>(mem: &mut [MaybeUninit<u8>], n: usize) -> Option<Carved<'_, MaybeUninit<T>>> {
    let skip = mem.as_ptr().align_offset(align_of::<T>());
    let len = n.checked_mul(size_of::<T>())?;
    let end = skip.checked_add(len)?;
    if skip == usize::MAX || end > mem.len() {
        return None;
    }
    let (head, rest) = mem.split_at_mut(end);
    let array = &mut head[skip..];
    // SAFETY: `array` is exclusively borrowed for the returned lifetime,
    // starts at an address aligned for `T` (`align_offset` above) and holds
    // exactly `n * size_of::<T>()` bytes. `MaybeUninit<T>` has no validity
    // requirement, so viewing uninitialised bytes as uninitialised `T`s is
    // sound; zero-sized `T` gives an empty, well-aligned slice.
    let typed =
        unsafe { core::slice::from_raw_parts_mut(array.as_mut_ptr().cast::<MaybeUninit<T>>(), n) };
    Some((typed, rest))
}

/// Carves `n` values made by `init(i)`; see [`carve`]. The values are never
/// dropped (the memory is the caller's): use it for types that own nothing
/// that needs dropping.
pub fn carve_init<T>(
    mem: &mut [MaybeUninit<u8>],
    n: usize,
    mut init: impl FnMut(usize) -> T,
) -> Option<Carved<'_, T>> {
    let (array, rest) = carve::<T>(mem, n)?;
    for (i, slot) in array.iter_mut().enumerate() {
        slot.write(init(i));
    }
    // SAFETY: every element was written just above.
    Some((unsafe { assume_init(array) }, rest))
}

/// Views a fully written array as initialised.
///
/// # Safety
///
/// Every element of `array` must have been written.
pub unsafe fn assume_init<T>(array: &mut [MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: `MaybeUninit<T>` has the layout of `T` and the caller
    // guarantees every element is initialised.
    unsafe { &mut *(array as *mut [MaybeUninit<T>] as *mut [T]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carving_aligns_and_bounds() {
        let mut mem = [MaybeUninit::<u8>::uninit(); 100];
        let (a, rest) = carve_init::<u64>(&mut mem[1..], 4, |i| i as u64 * 3).unwrap();
        assert_eq!(a, &[0, 3, 6, 9]);
        assert_eq!(a.as_ptr() as usize % align_of::<u64>(), 0);
        assert!(rest.len() <= 99 - 32);
        assert!(carve::<u64>(&mut mem, 13).is_none(), "too short");
        assert!(carve::<u64>(&mut mem, usize::MAX).is_none(), "overflow");
        assert_eq!(bytes_for::<u64>(4), Some(39));
        assert_eq!(bytes_for::<u64>(usize::MAX), None);
        let mut buf = [MaybeUninit::<u8>::uninit(); 39 + 8];
        for off in 0..8 {
            let exact = &mut buf[off..off + 39];
            assert!(
                carve::<u64>(exact, 4).is_some(),
                "bytes_for is enough at offset {off}"
            );
        }
    }
}
