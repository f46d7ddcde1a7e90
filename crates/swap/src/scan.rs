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
