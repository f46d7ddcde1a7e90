//! A seeded pseudo-random permutation of `0..n` without storage, to visit
//! every frame once in random order while all RAM is allocated.
//!
//! On `k`-bit values (`2^k >= n`) each round multiplies by an odd constant,
//! adds a constant and xor-shifts: all three are bijections modulo `2^k`, so
//! the composition is one. Values `>= n` are skipped (cycle walking), which
//! costs under two evaluations per output.

/// Rounds of mixing.
const ROUNDS: usize = 4;

/// A permutation of `0..n`.
#[derive(Debug, Clone)]
pub struct Permutation {
    n: u64,
    bits: u32,
    mul: [u64; ROUNDS],
    add: [u64; ROUNDS],
}

impl Permutation {
    /// A permutation of `0..n` chosen by `seed`.
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let mut state = seed;
        let mut mul = [0; ROUNDS];
        let mut add = [0; ROUNDS];
        for i in 0..ROUNDS {
            mul[i] = splitmix64(&mut state) | 1;
            add[i] = splitmix64(&mut state);
        }
        Self { n, bits, mul, add }
    }

    fn mix(&self, mut x: u64) -> u64 {
        let mask = if self.bits == 64 {
            u64::MAX
        } else {
            (1 << self.bits) - 1
        };
        let shift = self.bits / 2 + 1;
        for i in 0..ROUNDS {
            x = x.wrapping_mul(self.mul[i]).wrapping_add(self.add[i]) & mask;
            x ^= x >> shift;
        }
        x
    }

    /// The values `0..n`, each once, in permuted order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..1u64 << self.bits)
            .map(|i| self.mix(i))
            .filter(|&v| v < self.n)
    }
}

/// One step of the SplitMix64 generator.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
