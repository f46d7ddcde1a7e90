//! Buddy arithmetic on a chunk's free bitmap (spec 01 §4, one bit a frame).
//!
//! Inside a chunk (see `chunk.rs`) the free blocks are not linked: they are
//! the runs of set bits of the chunk's free bitmap, read as the maximal
//! naturally aligned blocks that tile them. Because two free buddies below
//! the chunk order always merge (they share a chunk, so a list), that
//! decomposition is exactly the set of blocks a linked buddy allocator
//! would hold. A chunk of order `c` has `max(1, 2^c / 64)` words; bit `x`
//! of the chunk is bit `x % 64` of word `x / 64`.

/// Bits at the positions that are multiples of `2^j` in a word, for
/// `j <= 6`: where an aligned block of order `j` may start.
const ALIGNED: [u64; 7] = [
    !0,
    0x5555_5555_5555_5555,
    0x1111_1111_1111_1111,
    0x0101_0101_0101_0101,
    0x0001_0001_0001_0001,
    0x0000_0001_0000_0001,
    1,
];

/// Words of a chunk of order `c`.
#[inline]
pub(crate) const fn words(c: u8) -> usize {
    if c >= 6 { 1 << (c - 6) } else { 1 }
}

/// The mask of an order-`o` block at bit `x` inside its word (`o < 6`).
#[inline]
const fn in_word(x: u32, o: u8) -> u64 {
    ((1u64 << (1u32 << o)) - 1) << (x & 63)
}

/// Bit `p` set iff the aligned order-`j` block starting at `p` is all set
/// (`j <= 6`; for 6, bit 0 iff the word is all ones).
#[inline]
const fn runs(w: u64, j: u8) -> u64 {
    let mut r = w;
    let mut s = 0;
    while s < j {
        r &= r >> (1u32 << s);
        s += 1;
    }
    r & ALIGNED[j as usize]
}

/// Bit `p` set iff an order-`j` block at `p` is free and its parent is not
/// (`j < 6`): the maximal free blocks of that order inside one word.
#[inline]
const fn maximal_in_word(w: u64, j: u8) -> u64 {
    let r = runs(w, j);
    let parent = runs(w, j + 1);
    r & !(parent | (parent << (1u32 << j)))
}

/// Whether every frame of the order-`o` block at `x` is free.
#[inline]
pub(crate) fn all_set(w: &[u64], x: u32, o: u8) -> bool {
    if o < 6 {
        let m = in_word(x, o);
        w[(x >> 6) as usize] & m == m
    } else {
        let (a, n) = ((x >> 6) as usize, 1usize << (o - 6));
        w[a..a + n].iter().all(|&v| v == !0)
    }
}

/// Marks the order-`o` block at `x` free.
#[inline]
pub(crate) fn set(w: &mut [u64], x: u32, o: u8) {
    if o < 6 {
        w[(x >> 6) as usize] |= in_word(x, o);
    } else {
        let (a, n) = ((x >> 6) as usize, 1usize << (o - 6));
        w[a..a + n].fill(!0);
    }
}

/// Marks the order-`o` block at `x` not free.
#[inline]
pub(crate) fn clear(w: &mut [u64], x: u32, o: u8) {
    if o < 6 {
        w[(x >> 6) as usize] &= !in_word(x, o);
    } else {
        let (a, n) = ((x >> 6) as usize, 1usize << (o - 6));
        w[a..a + n].fill(0);
    }
}

/// The lowest maximal free block of order `j` (its parent is not free) in
/// a chunk of order `c > j` whose chunk is not wholly free.
#[inline]
pub(crate) fn find_maximal(w: &[u64], j: u8) -> Option<u32> {
    if j == 0 {
        // A free frame whose buddy is not free: compare each bit with the
        // other bit of its pair.
        for (i, &v) in w.iter().enumerate() {
            // Most words hold no free frame (nearly full chunks are filled
            // first): skip them at the cost of one test.
            if v == 0 {
                continue;
            }
            let pair = ((v >> 1) & ALIGNED[1]) | ((v & ALIGNED[1]) << 1);
            let m = v & !pair;
            if m != 0 {
                return Some((i as u32) << 6 | m.trailing_zeros());
            }
        }
        return None;
    }
    if j < 6 {
        for (i, &v) in w.iter().enumerate() {
            let m = maximal_in_word(v, j);
            if m != 0 {
                return Some((i as u32) << 6 | m.trailing_zeros());
            }
        }
        None
    } else {
        let n = 1usize << (j - 6);
        (0..w.len()).step_by(n).find_map(|a| {
            let sib = a ^ n;
            let free = w[a..a + n].iter().all(|&v| v == !0);
            let parent = free && w[sib..sib + n].iter().all(|&v| v == !0);
            (free && !parent).then_some((a as u32) << 6)
        })
    }
}

/// Every maximal free block of order `j` in the chunk, low to high
/// (reporting and validation; `j < c`, the chunk not wholly free).
pub(crate) fn maximal_blocks(w: &[u64], j: u8) -> impl Iterator<Item = u32> + '_ {
    let n = if j < 6 { 1 } else { 1usize << (j - 6) };
    (0..w.len()).step_by(n).flat_map(move |a| {
        let mut m = if j < 6 {
            maximal_in_word(w[a], j)
        } else {
            let sib = a ^ n;
            let free = w[a..a + n].iter().all(|&v| v == !0);
            let parent = free && w[sib..sib + n].iter().all(|&v| v == !0);
            u64::from(free && !parent)
        };
        core::iter::from_fn(move || {
            (m != 0).then(|| {
                let b = m.trailing_zeros();
                m &= m - 1;
                (a as u32) << 6 | b
            })
        })
    })
}

/// How many maximal free blocks of each order below `c` a chunk of order
/// `c` (not wholly free) has: `counts[j]` is the length of
/// [`maximal_blocks`] for `j`, every order from one pass over the words
/// (a refill's recount).
pub(crate) fn count_maximal(w: &[u64], c: u8, counts: &mut [u16]) {
    let low = c.min(6);
    counts[..usize::from(c)].fill(0);
    for &v in w {
        // A word without free frames holds no block (a refill that took a
        // chunk's frames leaves most words so).
        if v == 0 {
            continue;
        }
        let inside = word_maximal(v, low);
        for j in 0..usize::from(low) {
            counts[j] += inside[j];
        }
    }
    count_whole_words(w, c, counts);
}

/// The maximal free blocks of each order below `low` (at most 6) that lie
/// inside the word `v` of a chunk's bitmap (a wholly free word holds none:
/// its frames belong to a block of order 6 or more).
#[inline]
pub(crate) fn word_maximal(v: u64, low: u8) -> [u16; 6] {
    let mut counts = [0u16; 6];
    if v == 0 {
        return counts;
    }
    // runs[j]: where an aligned all-free block of order j starts.
    let mut runs = [0u64; 7];
    let mut r = v;
    for (j, slot) in runs.iter_mut().enumerate() {
        if j > 0 {
            r &= r >> (1u32 << (j - 1));
        }
        *slot = r & ALIGNED[j];
    }
    for j in 0..usize::from(low) {
        let parent = runs[j + 1];
        let maximal = runs[j] & !(parent | (parent << (1u32 << j)));
        counts[j] = maximal.count_ones() as u16;
    }
    counts
}

/// `counts[j]` for the orders `j` from 6 to below `c`: the maximal free
/// blocks of whole words. The words are read once, into a mask with a bit
/// a wholly free word (a chunk has at most `2^(MAX_CHUNK_ORDER - 6)` of
/// them); each order is then the same buddy arithmetic as inside a word,
/// on that mask: a group of `2^k` free words is maximal when its buddy
/// group is not all free.
pub(crate) fn count_whole_words(w: &[u64], c: u8, counts: &mut [u16]) {
    debug_assert!(c <= crate::chunk::MAX_CHUNK_ORDER && w.len() == words(c));
    let mut groups = w
        .iter()
        .enumerate()
        .fold(0u64, |m, (i, &v)| m | u64::from(v == !0) << i);
    for j in 6..c {
        let k = j - 6;
        let n = 1u32 << k;
        // Where a group of the next order may start: the lower buddy.
        let lower = ALIGNED[usize::from(k + 1)];
        let buddy_free = ((groups & lower) << n) | ((groups >> n) & lower);
        counts[usize::from(j)] = (groups & !buddy_free).count_ones() as u16;
        groups &= (groups >> n) & lower;
    }
}

/// The order of the maximal free block holding the free frame `x`, in a
/// chunk of order `c` that is not wholly free; its head is `x` rounded
/// down to that order.
///
/// Inside the word no loop is needed: a busy frame `p` lies in the
/// order-`o` block holding `x` iff `x` and `p` agree above bit `o`, that is
/// iff `msb(x ^ p) < o`; so the block can grow to the smallest `msb(x ^ p)`
/// over the word's busy frames, and the busy frame with the longest common
/// prefix is the nearest one below `x` or the nearest one above it.
#[inline]
pub(crate) fn maximal_order_at(w: &[u64], c: u8, x: u32) -> u8 {
    let top = c.saturating_sub(1);
    let b = x & 63;
    let busy = !w[(x >> 6) as usize];
    let below = busy & ((1u64 << b) - 1);
    let above = busy & (!1u64 << b);
    // The order the block reaches against a busy frame at `p`.
    let against = |p: u32| (31 - (b ^ p).leading_zeros()) as u8;
    let mut o = 6;
    if below != 0 {
        o = against(63 - below.leading_zeros());
    }
    if above != 0 {
        o = o.min(against(above.trailing_zeros()));
    }
    // Whole words from order 6 up.
    while o >= 6 && o < top && all_set(w, x & !((2u32 << o) - 1), o + 1) {
        o += 1;
    }
    o.min(top)
}

/// The lowest `n` set bits of `w` (all of them when it has no more).
#[inline]
pub(crate) fn lowest(w: u64, n: usize) -> u64 {
    if n >= w.count_ones() as usize {
        return w;
    }
    let mut above = w;
    for _ in 0..n {
        above &= above - 1;
    }
    w & !above
}

/// Free frames in the chunk.
#[inline]
pub(crate) fn count(w: &[u64]) -> u32 {
    w.iter().map(|v| v.count_ones()).sum()
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn lowest_keeps_the_lowest_set_bits() {
        let w = 0b1011_0110u64;
        assert_eq!(lowest(w, 0), 0);
        assert_eq!(lowest(w, 1), 0b10);
        assert_eq!(lowest(w, 3), 0b1_0110);
        assert_eq!(lowest(w, 5), w);
        assert_eq!(lowest(w, 64), w);
        assert_eq!(lowest(u64::MAX, 63), u64::MAX >> 1);
        assert_eq!(lowest(1 << 63, 1), 1 << 63);
    }

    /// Reference: the maximal blocks of each order, frame by frame.
    fn reference(frames: &[bool], c: u8) -> std::vec::Vec<(u32, u8)> {
        let mut out = std::vec::Vec::new();
        let mut x = 0u32;
        while x < 1 << c {
            if !frames[x as usize] {
                x += 1;
                continue;
            }
            let mut o = 0u8;
            while o + 1 < c {
                let h = x & !((2u32 << o) - 1);
                if (h..h + (2 << o)).all(|t| frames[t as usize]) {
                    o += 1;
                } else {
                    break;
                }
            }
            out.push((x & !((1u32 << o) - 1), o));
            x = (x & !((1u32 << o) - 1)) + (1 << o);
        }
        out
    }

    #[test]
    fn maximal_blocks_match_a_frame_by_frame_reference() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        // Safe bit arithmetic: under Miri a few rounds a size suffice.
        let rounds = if cfg!(miri) { 2 } else { 200 };
        for c in [1u8, 3, 5, 6, 7, 9] {
            for round in 0..rounds {
                let mut w = std::vec![0u64; words(c)];
                let mut frames = std::vec![false; 1 << c];
                // Density 7: every frame but the first, large blocks.
                let density = round % 8;
                for (x, f) in frames.iter_mut().enumerate() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    if seed % 8 < density as u64 + 1 {
                        *f = true;
                        set(&mut w, x as u32, 0);
                    }
                }
                // Not wholly free (a chunk in that state is not split).
                if frames.iter().all(|&f| f) {
                    frames[0] = false;
                    clear(&mut w, 0, 0);
                }
                let want = reference(&frames, c);
                let mut got = std::vec::Vec::new();
                let mut counts = [0u16; 9];
                count_maximal(&w, c, &mut counts);
                for j in 0..c {
                    got.extend(maximal_blocks(&w, j).map(|x| (x, j)));
                    let n = want.iter().filter(|b| b.1 == j).count();
                    assert_eq!(usize::from(counts[usize::from(j)]), n, "c {c} j {j}");
                    let first = want.iter().find(|b| b.1 == j).map(|b| b.0);
                    assert_eq!(find_maximal(&w, j), first, "c {c} j {j}");
                }
                got.sort();
                assert_eq!(got, want, "c {c}");
                for &(x, o) in &want {
                    assert!(all_set(&w, x, o));
                    for t in x..x + (1 << o) {
                        assert_eq!(maximal_order_at(&w, c, t), o);
                    }
                }
                assert_eq!(count(&w) as usize, frames.iter().filter(|&&f| f).count());
            }
        }
    }

    /// Chunks whose words are each wholly free, empty or mixed: the blocks
    /// of whole words at every order, against the frame-by-frame reference.
    #[test]
    fn whole_word_blocks_match_the_reference() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let rounds = if cfg!(miri) { 4 } else { 400 };
        for c in [7u8, 8, 9] {
            for _ in 0..rounds {
                let mut w = std::vec![0u64; words(c)];
                for v in w.iter_mut() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    *v = match seed % 4 {
                        0 => 0,
                        1 => seed | 1,
                        _ => !0,
                    };
                }
                if w.iter().all(|&v| v == !0) {
                    w[0] = 0;
                }
                let frames: std::vec::Vec<bool> = (0..1usize << c)
                    .map(|x| w[x / 64] >> (x % 64) & 1 == 1)
                    .collect();
                let want = reference(&frames, c);
                let mut counts = [u16::MAX; 9];
                count_whole_words(&w, c, &mut counts);
                for j in 6..c {
                    let n = want.iter().filter(|b| b.1 == j).count();
                    assert_eq!(usize::from(counts[usize::from(j)]), n, "c {c} j {j} {w:x?}");
                }
                assert!(
                    counts[..6].iter().all(|&n| n == u16::MAX),
                    "below 6 untouched"
                );
            }
        }
    }

    #[test]
    fn set_and_clear_blocks_across_words() {
        let mut w = [0u64; 8];
        set(&mut w, 128, 7);
        assert_eq!(w, [0, 0, !0, !0, 0, 0, 0, 0]);
        assert!(all_set(&w, 128, 7) && !all_set(&w, 0, 8));
        clear(&mut w, 160, 4);
        assert_eq!(w[2], !(0xffff << 32));
        assert_eq!(maximal_order_at(&w, 9, 130), 5);
        assert_eq!(maximal_order_at(&w, 9, 200), 6);
    }
}
