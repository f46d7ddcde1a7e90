//! Carving typed metadata out of the caller's raw memory (ARCHITECTURE
//! principle 1: no heap).

use core::mem::{MaybeUninit, align_of, size_of};

/// Takes `n` properly aligned `T` slots off the front of `rest`.
pub(crate) fn take<'a, T>(
    rest: &mut &'a mut [MaybeUninit<u8>],
    n: usize,
) -> Option<&'a mut [MaybeUninit<T>]> {
    let mem = core::mem::take(rest);
    let pad = mem.as_ptr().align_offset(align_of::<T>());
    let bytes = n.checked_mul(size_of::<T>())?;
    if pad > mem.len() || mem.len() - pad < bytes {
        *rest = mem;
        return None;
    }
    let (_, tail) = mem.split_at_mut(pad);
    let (head, tail) = tail.split_at_mut(bytes);
    *rest = tail;
    let ptr = head.as_mut_ptr().cast::<MaybeUninit<T>>();
    // SAFETY: `head` is an exclusive borrow for 'a of exactly
    // `n * size_of::<T>()` bytes starting at an address aligned for `T`
    // (`pad` came from `align_offset`); `MaybeUninit<T>` has no validity
    // requirement, so any bytes are a valid `[MaybeUninit<T>; n]`.
    Some(unsafe { core::slice::from_raw_parts_mut(ptr, n) })
}

/// Initializes every element with `f(index)` and returns the slice typed.
pub(crate) fn init<T>(s: &mut [MaybeUninit<T>], mut f: impl FnMut(usize) -> T) -> &mut [T] {
    for (i, x) in s.iter_mut().enumerate() {
        x.write(f(i));
    }
    let len = s.len();
    let ptr = s.as_mut_ptr().cast::<T>();
    // SAFETY: every one of the `len` elements was written just above, and
    // `MaybeUninit<T>` has the same layout as `T`; the borrow is carried over.
    unsafe { core::slice::from_raw_parts_mut(ptr, len) }
}

/// Bytes needed for `n` values of `T` plus worst-case alignment padding.
pub(crate) const fn bytes_for<T>(n: usize) -> usize {
    n * size_of::<T>() + align_of::<T>() - 1
}
