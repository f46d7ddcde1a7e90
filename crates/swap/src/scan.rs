//! Finding an aligned run of free (zero) count bytes in a cluster, eight
//! bytes at a time (spec 05 §5.5: the candidate offsets step by the run
//! length).

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// High bit of each byte set iff that byte of `w` is zero (exact, no borrow
/// between bytes).
#[inline]
fn zero_bytes(w: u64) -> u64 {
    !(((w & LOW7).wrapping_add(LOW7)) | w | LOW7)
}

#[inline]
fn word(map: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&map[i..i + 8]);
    u64::from_le_bytes(b)
}

/// First offset `off >= from`, aligned to `n` (a power of two), such that
/// `map[off..off + n]` is all zero. `map.len()` is a multiple of 8 and of `n`.
pub(crate) fn find_free_run(map: &[u8], from: usize, n: usize) -> Option<usize> {
    let len = map.len();
    let start = from & !(n - 1);
    if start >= len {
        return None;
    }
    if n >= 8 {
        let words = n / 8;
        let mut off = start;
        'outer: while off + n <= len {
            for k in 0..words {
                if word(map, off + 8 * k) != 0 {
                    off += n;
                    continue 'outer;
                }
            }
            return Some(off);
        }
        return None;
    }
    // Runs of 1, 2 or 4 bytes: combine the zero flags of n neighbours and
    // keep only positions aligned to n.
    let lane: u64 = match n {
        1 => 0x8080_8080_8080_8080,
        2 => 0x0080_0080_0080_0080,
        _ => 0x0000_0080_0000_0080,
    };
    let mut base = start & !7;
    while base < len {
        let z = zero_bytes(word(map, base));
        let mut m = z;
        let mut k = 1;
        while k < n {
            m &= z >> (8 * k);
            k += 1;
        }
        m &= lane;
        if base < start {
            // Drop positions before `start` in the first word.
            m &= !0u64 << (8 * (start - base));
        }
        if m != 0 {
            return Some(base + (m.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    None
}

/// Words of the free summary: one bit per 8-slot group, up to 4096 slots.
pub(crate) const SUMMARY_WORDS: usize = 8;

/// One bit per group of eight count bytes: set iff the group has a free
/// slot. Lets an order-0 allocation find a hole in O(1) instead of scanning
/// up to 512 bytes.
pub(crate) type Summary = [u64; SUMMARY_WORDS];

/// The summary of a whole map.
pub(crate) fn summarize(map: &[u8]) -> Summary {
    let mut sum = [0; SUMMARY_WORDS];
    refresh(&mut sum, map, 0, map.len());
    sum
}

/// Sets (free) or clears (taken) the summary bits of groups `from..to`
/// without reading the map: for ranges made entirely free or taken.
pub(crate) fn mark_groups(sum: &mut Summary, from: usize, to: usize, free: bool) {
    let mut g = from;
    while g < to {
        let w = g / 64;
        let hi = to.min((w + 1) * 64);
        let span = hi - g;
        let mask = if span == 64 {
            !0
        } else {
            ((1u64 << span) - 1) << (g % 64)
        };
        if free {
            sum[w] |= mask;
        } else {
            sum[w] &= !mask;
        }
        g = hi;
    }
}

/// Recomputes the summary bits of the groups covering `map[from..to]`.
pub(crate) fn refresh(sum: &mut Summary, map: &[u8], from: usize, to: usize) {
    if from.is_multiple_of(8) && to.is_multiple_of(8) && to - from >= 64 {
        // Whole groups: one test per group is still needed, but a range
        // that is entirely zero or entirely non-zero is the common case.
        if map[from..to].iter().all(|&b| b == 0) {
            return mark_groups(sum, from / 8, to / 8, true);
        }
    }
    let mut g = from / 8;
    while g * 8 < to {
        let bit = 1u64 << (g % 64);
        if zero_bytes(word(map, g * 8)) != 0 {
            sum[g / 64] |= bit;
        } else {
            sum[g / 64] &= !bit;
        }
        g += 1;
    }
}

/// First free slot at or after `from`, using the summary.
pub(crate) fn find_free_slot(sum: &Summary, map: &[u8], from: usize) -> Option<usize> {
    let groups = map.len() / 8;
    let mut g = from / 8;
    while g < groups {
        let bits = sum[g / 64] & (!0u64 << (g % 64));
        if bits == 0 {
            g = (g / 64 + 1) * 64;
            continue;
        }
        g = (g / 64) * 64 + bits.trailing_zeros() as usize;
        if g >= groups {
            return None;
        }
        let mut z = zero_bytes(word(map, g * 8));
        if g * 8 < from {
            z &= !0u64 << (8 * (from - g * 8));
        }
        if z != 0 {
            return Some(g * 8 + (z.trailing_zeros() / 8) as usize);
        }
        g += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(map: &[u8], from: usize, n: usize) -> Option<usize> {
        let mut off = from & !(n - 1);
        while off + n <= map.len() {
            if map[off..off + n].iter().all(|&b| b == 0) {
                return Some(off);
            }
            off += n;
        }
        None
    }

    #[test]
    fn summary_search_matches_a_byte_by_byte_scan() {
        let mut x: u32 = 0x9e37_79b9;
        for round in 0..100 {
            let mut map = [0x40u8; 512];
            for b in map.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                if x.is_multiple_of(3 + round) {
                    *b = 0;
                }
            }
            let mut sum = summarize(&map);
            for from in [0, 1, 7, 8, 100, 255, 256, 511] {
                assert_eq!(
                    find_free_slot(&sum, &map, from),
                    naive(&map, from, 1),
                    "from {from}"
                );
            }
            // Taking slots and refreshing keeps the summary exact.
            while let Some(s) = find_free_slot(&sum, &map, 0) {
                assert_eq!(Some(s), naive(&map, 0, 1));
                map[s] = 0x40;
                refresh(&mut sum, &map, s, s + 1);
            }
            assert_eq!(naive(&map, 0, 1), None);
        }
    }

    #[test]
    fn matches_a_byte_by_byte_scan() {
        // A deterministic pseudo-random pattern of free and used bytes,
        // including values (0x01, 0x80) that fool the inexact zero-byte trick.
        let mut x: u32 = 0x1234_5678;
        for round in 0..200 {
            let mut map = [0u8; 64];
            for b in map.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = match x % (2 + round % 7) {
                    0 => 0x01,
                    1 => 0x80,
                    2 => 0x40,
                    _ => 0,
                };
            }
            for n in [1, 2, 4, 8, 16, 32, 64] {
                for from in [0, 1, 3, 7, 8, 13, 31, 63] {
                    assert_eq!(
                        find_free_run(&map, from, n),
                        naive(&map, from, n),
                        "n={n} from={from} {map:?}"
                    );
                }
            }
        }
    }
}
