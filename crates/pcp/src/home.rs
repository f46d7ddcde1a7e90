//! An order-0 list's home (see [`crate::PcpConfig::with_home`], spec 04
//! §5.6): the aligned region of `2^home` frames its frames come from, and
//! the frames of it the cache holds, one bit each.
//!
//! Every frame of a home list lies in one region, so the list is a bitmap
//! of that region rather than a linked list: taking a frame is two bit
//! scans, giving one back is a bit set, and neither touches the slot arena
//! (LLFree's per-core reservation keeps its frames the same way, ATC'23).
//! The lowest frame goes out first: a frame freed and wanted again at once
//! (the common pair) is the same frame, still warm in the CPU's cache.

use crate::types::Pfn;
use pageframe_types::run::{run_mask, run_starts};

/// Largest home order: a region of 1024 frames, sixteen words of bits.
pub const MAX_HOME_ORDER: u8 = 10;
const WORDS: usize = 1 << (MAX_HOME_ORDER - 6);

/// No region yet (before the first refill).
const NONE: u64 = u64::MAX;

/// A frame's place in a home that does not hold it yet ([`Home::vacancy`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacancy {
    /// The word of the home's bitmap.
    w: usize,
    /// The frame's bit in it.
    m: u64,
}

/// One order-0 list's home region and the frames of it the cache holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Home {
    /// The region: a frame number shifted right by the home order.
    region: u64,
    /// Its first frame (what a take adds a bit's place to, with no shift).
    first: u64,
    /// Bit `i`: frame `region << order | i` is cached.
    bits: [u64; WORDS],
    /// Bit `w`: word `w` of `bits` is not zero.
    words: u16,
}

impl Home {
    pub(crate) const EMPTY: Home = Home {
        region: NONE,
        first: 0,
        bits: [0; WORDS],
        words: 0,
    };

    /// Frames held (counted: for reports and checks, not the fast path).
    pub(crate) fn len(&self) -> u32 {
        self.bits.iter().map(|w| w.count_ones()).sum()
    }

    /// Whether it holds no frame.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.words == 0
    }

    /// Whether `frame` lies in the home region (`shift`: the home order).
    #[inline(always)]
    pub(crate) fn contains(&self, frame: Pfn, shift: u8) -> bool {
        frame.get() >> shift == self.region
    }

    #[inline(always)]
    fn frame(&self, w: usize, b: u32) -> Pfn {
        Pfn(self.first | (w as u64) << 6 | u64::from(b))
    }

    /// Moves the (empty) home to the region of `frame`.
    #[inline]
    fn move_to(&mut self, frame: Pfn, shift: u8) {
        self.region = frame.get() >> shift;
        self.first = self.region << shift;
    }

    /// The lowest frame held, now taken.
    #[inline(always)]
    pub(crate) fn take(&mut self) -> Option<Pfn> {
        if self.words == 0 {
            return None;
        }
        let w = self.words.trailing_zeros() as usize;
        let word = self.bits[w];
        let b = word.trailing_zeros();
        self.clear(w, word & (word - 1));
        Some(self.frame(w, b))
    }

    /// The highest frame held, now taken (a spill's: the zone gets the
    /// frames a take would reach last).
    #[inline]
    pub(crate) fn take_high(&mut self) -> Option<Pfn> {
        if self.words == 0 {
            return None;
        }
        let w = 15 - self.words.leading_zeros() as usize;
        let word = self.bits[w];
        let b = 63 - word.leading_zeros();
        self.clear(w, word & !(1 << b));
        Some(self.frame(w, b))
    }

    #[inline(always)]
    fn clear(&mut self, w: usize, rest: u64) {
        self.bits[w] = rest;
        if rest == 0 {
            self.words &= !(1 << w);
        }
    }

    /// Whether it holds `frame`.
    pub(crate) fn holds(&self, frame: Pfn, shift: u8) -> bool {
        self.contains(frame, shift) && self.vacancy(frame, shift).is_none()
    }

    /// Holds `frame`, a frame of the region the cache does not hold yet;
    /// `false` (nothing changed) for any other frame.
    #[inline(always)]
    pub(crate) fn put(&mut self, frame: Pfn, shift: u8) -> bool {
        match self.vacancy(frame, shift) {
            Some(v) => {
                self.fill(v);
                true
            }
            None => false,
        }
    }

    /// Where [`Home::put`] would hold `frame`: `None` for a frame of
    /// another region or one held already.
    #[inline(always)]
    pub(crate) fn vacancy(&self, frame: Pfn, shift: u8) -> Option<Vacancy> {
        if !self.contains(frame, shift) {
            return None;
        }
        let i = (frame.get() & ((1 << shift) - 1)) as usize;
        // The mask changes nothing (`shift` is at most the largest home
        // order) but spares the word's index a bounds check.
        let (w, m) = ((i >> 6) & (WORDS - 1), 1u64 << (i & 63));
        (self.bits[w] & m == 0).then_some(Vacancy { w, m })
    }

    /// Holds the frame of `v`, found by [`Home::vacancy`] with nothing
    /// changed since.
    #[inline(always)]
    pub(crate) fn fill(&mut self, v: Vacancy) {
        debug_assert!(self.bits[v.w] & v.m == 0, "a vacancy is filled once");
        self.bits[v.w] |= v.m;
        self.words |= 1 << v.w;
    }

    /// A refill's frame: an empty home moves to the frame's region, so
    /// every frame of one refill lies in one region; `false` for a frame
    /// of another region while the home holds frames.
    #[inline]
    pub(crate) fn accept(&mut self, frame: Pfn, shift: u8) -> bool {
        if self.is_empty() {
            self.move_to(frame, shift);
        }
        self.put(frame, shift)
    }

    /// [`Home::accept`] of the frames `base + b` for each bit `b` of
    /// `bits` (`base` aligned to 64 frames), all in one word of the region:
    /// returns those it holds now (none for another region, and none
    /// already held twice).
    #[inline]
    pub(crate) fn accept_word(&mut self, base: Pfn, bits: u64, shift: u8) -> u64 {
        if bits == 0 {
            return 0;
        }
        if self.is_empty() {
            self.move_to(base, shift);
        }
        if !self.contains(base, shift) {
            return 0;
        }
        let w = ((base.get() & ((1 << shift) - 1)) >> 6) as usize;
        let new = bits & !self.bits[w];
        self.bits[w] |= new;
        self.words |= 1 << w;
        new
    }

    /// The lowest run of `n` frames held (2..=64) that lies in one word of
    /// the region, now taken; its first frame.
    #[inline]
    pub(crate) fn take_run(&mut self, n: u32) -> Option<Pfn> {
        if !(2..=64).contains(&n) {
            return None;
        }
        let mut words = self.words;
        while words != 0 {
            let w = words.trailing_zeros() as usize;
            words &= words - 1;
            let word = self.bits[w];
            let starts = run_starts(word, n);
            if starts != 0 {
                let b = starts.trailing_zeros();
                self.clear(w, word & !(run_mask(n) << b));
                return Some(self.frame(w, b));
            }
        }
        None
    }

    /// Holds the `n` frames from `first` (1..=64), all of the region, in
    /// one of its words and none held yet; `false` (nothing changed) for
    /// any other run. An empty home moves to the run's region first, as
    /// it moves with a refill: a caller that frees a run and asks for one
    /// again then finds it here, where it would otherwise go to the zone
    /// and come back from it.
    #[inline]
    pub(crate) fn put_run(&mut self, first: Pfn, n: u32, shift: u8) -> bool {
        let i = (first.get() & ((1 << shift) - 1)) as usize;
        let (w, b) = (i >> 6, (i & 63) as u32);
        if !(1..=64).contains(&n) || b + n > 64 || i + n as usize > 1 << shift {
            return false;
        }
        if self.is_empty() {
            self.move_to(first, shift);
        } else if !self.contains(first, shift) {
            return false;
        }
        let m = run_mask(n) << b;
        if self.bits[w] & m != 0 {
            return false;
        }
        self.bits[w] |= m;
        self.words |= 1 << w;
        true
    }

    /// Visits every frame held, lowest first.
    pub(crate) fn for_each(&self, mut f: impl FnMut(Pfn)) {
        for (w, &word) in self.bits.iter().enumerate() {
            let mut word = word;
            while word != 0 {
                let b = word.trailing_zeros();
                word &= word - 1;
                f(self.frame(w, b));
            }
        }
    }

    /// The bookkeeping agrees with the bits.
    pub(crate) fn check(&self, shift: u8) -> Result<(), &'static str> {
        for (w, &word) in self.bits.iter().enumerate() {
            if (word != 0) != (self.words & (1 << w) != 0) {
                return Err("home word summary differs from its bits");
            }
            if word != 0 && (w << 6) >= 1 << shift {
                return Err("home bit beyond its region");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_out_first_highest_spilled_first() {
        let mut h = Home::EMPTY;
        assert!(h.accept(Pfn(1024 + 700), 10));
        assert!(h.accept(Pfn(1024 + 3), 10));
        assert!(!h.accept(Pfn(3000), 10), "another region");
        assert!(!h.put(Pfn(1024 + 3), 10), "held already");
        assert!(h.put(Pfn(1024 + 64), 10));
        h.check(10).unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(h.take(), Some(Pfn(1027)));
        assert_eq!(h.take_high(), Some(Pfn(1724)));
        assert_eq!(h.take(), Some(Pfn(1088)));
        assert_eq!((h.take(), h.take_high(), h.len()), (None, None, 0));
        h.check(10).unwrap();
        // Empty, it moves with the next refill.
        assert!(h.accept(Pfn(3000), 10));
        assert!(h.contains(Pfn(2048), 10) && !h.contains(Pfn(1027), 10));
    }

    #[test]
    fn an_empty_home_moves_to_a_run_given_back() {
        let mut h = Home::EMPTY;
        assert!(!h.put_run(Pfn(1024 + 62), 4, 10), "crosses a word");
        assert!(h.is_empty() && !h.contains(Pfn(1024), 10), "not moved");
        assert!(h.put_run(Pfn(2048 + 3), 3, 10));
        assert!(h.contains(Pfn(2048), 10));
        assert!(!h.put_run(Pfn(4096), 2, 10), "another region, held frames");
        assert_eq!(h.take_run(3), Some(Pfn(2048 + 3)));
        h.check(10).unwrap();
    }

    #[test]
    fn runs_come_whole_from_one_word_and_go_back_whole() {
        let mut h = Home::EMPTY;
        // Frames 1024 + (60..70) and 1024 + (130..133): the first word ends
        // with four (60..64), the second starts with six (64..70), the third
        // holds three.
        for i in (60..70).chain(130..133) {
            assert!(h.accept(Pfn(1024 + i), 10));
        }
        assert_eq!(h.take_run(5), Some(Pfn(1024 + 64)));
        assert_eq!(h.len(), 8);
        assert_eq!(h.take_run(4), Some(Pfn(1024 + 60)));
        assert_eq!(h.take_run(4), None, "runs of 3 and 1 left");
        assert_eq!(h.take_run(3), Some(Pfn(1024 + 130)));
        assert_eq!(h.take_run(65), None);
        assert_eq!(h.take_run(1), None, "a single frame is take's");
        h.check(10).unwrap();
        assert_eq!(h.len(), 1);
        // Back whole: only inside one word of the region, none held.
        assert!(!h.put_run(Pfn(1024 + 62), 4, 10), "crosses a word");
        assert!(!h.put_run(Pfn(4096), 4, 10), "another region");
        assert!(!h.put_run(Pfn(1024 + 66), 4, 10), "frame 69 is held");
        assert!(h.put_run(Pfn(1024 + 64), 5, 10));
        assert!(h.put_run(Pfn(1024 + 128), 64, 10));
        assert!(!h.put_run(Pfn(1024 + 192), 0, 10));
        assert_eq!(h.len(), 1 + 5 + 64);
        h.check(10).unwrap();
    }
}
