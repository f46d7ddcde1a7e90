//! The per-slot count byte (`swap_map`, spec 05 §2 and §6) and its
//! mixed-radix continuation digits.
//!
//! A byte holds a map count in its low six bits (0..=62, `SWAP_MAP_MAX`;
//! 63 is `SWAP_MAP_BAD`), [`MapFlags::HAS_CACHE`] when the page sits in the
//! swap cache and [`MapFlags::CONTINUED`] when higher digits exist.
//! Continuation digits count 0..=127 (`SWAP_CONT_MAX`) with their own 0x80
//! flag meaning "a higher digit is non-zero". The map count of a slot is
//! `low + 63 * (d1 + 128 * (d2 + 128 * d3))`.

/// Highest map count the byte itself holds (`SWAP_MAP_MAX`).
pub const MAP_MAX: u8 = 0x3E;
/// A header or bad slot (`SWAP_MAP_BAD`).
pub const MAP_BAD: u8 = 0x3F;
/// Highest value of a continuation digit (`SWAP_CONT_MAX`).
pub const CONT_MAX: u8 = 0x7F;
/// Continuation levels a slot can have: counts up to 62 + 63 * (2^21 - 1).
pub const MAX_CONT_LEVELS: usize = 3;

const COUNT_MASK: u8 = 0x3F;
const DIGIT_MASK: u8 = 0x7F;
const HIGHER: u8 = 0x80;

bitflags::bitflags! {
    /// Flag bits of a swap-map byte.
    #[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
    pub struct MapFlags: u8 {
        /// The page is in the swap cache (`SWAP_HAS_CACHE`).
        const HAS_CACHE = 0x40;
        /// Higher digits live in continuation storage (`COUNT_CONTINUED`).
        const CONTINUED = 0x80;
    }
}

/// What a slot holds, as read by [`crate::SwapDevice::slot_state`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SlotState {
    /// Free: may be allocated.
    Free,
    /// The header or a bad slot: never allocated.
    Bad,
    /// Allocated.
    InUse {
        /// Map references (page-table entries holding the entry), including
        /// continuation digits.
        map_count: u64,
        /// Whether the swap cache holds the page.
        cached: bool,
    },
}

pub(crate) const fn low(b: u8) -> u8 {
    b & COUNT_MASK
}

pub(crate) const fn has_cache(b: u8) -> bool {
    b & MapFlags::HAS_CACHE.bits() != 0
}

pub(crate) const fn continued(b: u8) -> bool {
    b & MapFlags::CONTINUED.bits() != 0
}

/// The continuation digits of one slot: `levels[l]` is digit `l + 1`.
pub(crate) struct Digits<'s, 'a> {
    pub levels: &'s mut [Option<&'a mut [u8]>; MAX_CONT_LEVELS],
    pub index: usize,
}

impl Digits<'_, '_> {
    fn get(&self, l: usize) -> u8 {
        match &self.levels[l] {
            Some(page) => page[self.index],
            None => 0,
        }
    }

    fn set(&mut self, l: usize, v: u8) {
        if let Some(page) = &mut self.levels[l] {
            page[self.index] = v;
        }
    }

    /// Full map count of a slot whose byte is `b`.
    pub fn map_count(&self, b: u8) -> u64 {
        let mut hi: u64 = 0;
        for l in (0..MAX_CONT_LEVELS).rev() {
            hi = hi * (CONT_MAX as u64 + 1) + (self.get(l) & DIGIT_MASK) as u64;
        }
        low(b) as u64 + (MAP_MAX as u64 + 1) * hi
    }

    /// How many continuation levels an increment of byte `b` touches, or
    /// `None` if it would carry past the top digit.
    pub fn carry_depth(&self, b: u8) -> Option<usize> {
        if low(b) < MAP_MAX {
            return Some(0);
        }
        for l in 0..MAX_CONT_LEVELS {
            if self.get(l) & DIGIT_MASK < CONT_MAX {
                return Some(l + 1);
            }
        }
        None
    }

    /// Adds one map reference to byte `b` and returns the new byte. The
    /// caller checked [`Self::carry_depth`] and attached the pages.
    pub fn increment(&mut self, b: u8) -> u8 {
        let flags = b & !COUNT_MASK;
        if low(b) < MAP_MAX {
            return b + 1;
        }
        // spec 05 §6: the low digit wraps to 0 and carries into level 1.
        let mut l = 0;
        loop {
            let d = self.get(l) & DIGIT_MASK;
            if d < CONT_MAX {
                let keep = self.get(l) & HIGHER;
                self.set(l, (d + 1) | keep);
                break;
            }
            // This digit wraps too; a higher one becomes non-zero.
            self.set(l, HIGHER);
            l += 1;
        }
        flags | MapFlags::CONTINUED.bits()
    }

    /// Drops one map reference from byte `b` (map count > 0) and returns the
    /// new byte, clearing digits and flags symmetrically (spec 05 §12.8).
    pub fn decrement(&mut self, b: u8) -> u8 {
        let cache = b & MapFlags::HAS_CACHE.bits();
        if low(b) > 0 {
            return b - 1;
        }
        // Borrow: the low digit becomes MAP_MAX and level 1 gives one.
        let mut l = 0;
        loop {
            let v = self.get(l);
            let d = v & DIGIT_MASK;
            if d > 0 {
                let nd = d - 1;
                let higher = self.higher_nonzero(l);
                self.set(l, nd | if higher { HIGHER } else { 0 });
                break;
            }
            // d == 0 with a higher non-zero digit: borrow from above.
            self.set(l, CONT_MAX);
            l += 1;
        }
        // Re-derive every flag below the borrowing level.
        for k in (0..l).rev() {
            let d = self.get(k) & DIGIT_MASK;
            let higher = self.higher_nonzero(k);
            self.set(k, d | if higher { HIGHER } else { 0 });
        }
        let cont = self.higher_nonzero_from(0);
        MAP_MAX | cache | if cont { MapFlags::CONTINUED.bits() } else { 0 }
    }

    fn higher_nonzero(&self, l: usize) -> bool {
        self.higher_nonzero_from(l + 1)
    }

    fn higher_nonzero_from(&self, l: usize) -> bool {
        (l..MAX_CONT_LEVELS).any(|k| self.get(k) & DIGIT_MASK != 0)
    }

    /// Whether the digits of this slot are consistent with byte `b`:
    /// CONTINUED iff some digit is non-zero, each digit's flag iff a higher
    /// digit is non-zero (spec 05 §12.8).
    pub fn consistent(&self, b: u8) -> bool {
        if continued(b) != self.higher_nonzero_from(0) {
            return false;
        }
        (0..MAX_CONT_LEVELS).all(|l| (self.get(l) & HIGHER != 0) == self.higher_nonzero(l))
    }
}
