//! Runs of set bits in a 64-bit word: where `n` frames in a row are free
//! in a bitmap word (a per-CPU cache's home, a chunk of the buddy core).

/// `n` low bits set (`n` in 1..=64).
#[inline(always)]
pub const fn run_mask(n: u32) -> u64 {
    u64::MAX >> (64 - n)
}

/// Bit `i` set where bits `i..i + n` of `word` are all set (`n` >= 1): the
/// run's length doubles at each step, so fifteen frames take four.
#[inline]
pub const fn run_starts(word: u64, n: u32) -> u64 {
    let (mut m, mut len) = (word, 1);
    while len < n && m != 0 {
        let step = if len < n - len { len } else { n - len };
        m &= m >> step;
        len += step;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_starts_match_a_bit_by_bit_search() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        // A few words under Miri, which runs this crate's tests.
        for _ in 0..if cfg!(miri) { 3 } else { 2000 } {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Dense words, so that long runs occur.
            let word = x | x.rotate_left(7) | x.rotate_left(19);
            for n in 1..=64u32 {
                let want = (0..=64 - n).fold(0u64, |acc, i| {
                    if (i..i + n).all(|b| word >> b & 1 == 1) {
                        acc | 1 << i
                    } else {
                        acc
                    }
                });
                assert_eq!(run_starts(word, n), want, "word {word:#x}, n {n}");
            }
        }
        assert_eq!(run_starts(u64::MAX, 64), 1);
        assert_eq!(run_mask(64), u64::MAX);
        assert_eq!(run_mask(3), 0b111);
    }
}
