//! An order-0 list's home (see [`crate::PcpConfig::with_home`], spec 04
//! §5.6): the aligned regions of `2^home` frames its frames come from, and
//! the frames of them the cache holds, one bit each.
//!
//! Every frame of a home list lies in one of its regions, so the list is a
//! set of bitmaps rather than a linked list: taking a frame is two bit
//! scans, giving one back is a bit set, and neither touches the slot arena
//! (LLFree's per-core reservation keeps its frames the same way, ATC'23).
//! The lowest frame goes out first: a frame freed and wanted again at once
//! (the common pair) is the same frame, still warm in the CPU's cache.
//!
//! A home keeps [`HOME_REGIONS`] regions. A refill into an empty home moves
//! it to a new region, but the regions it came from before stay its own:
//! the frames a CPU handed out from them come back to it when freed, where
//! a home of one region would send them to the zone as foreign frees and
//! refill for them again, once a CPU's live frames outgrow one region. The
//! region taken over by the next move is the one held longest; takes come
//! from the region of the last move first, then from the newest one holding
//! frames, and a spill gives back the frames of the oldest first.

use crate::types::Pfn;
use pageframe_types::run::{run_mask, run_starts};

/// Largest home order: a region of 1024 frames, sixteen words of bits.
pub const MAX_HOME_ORDER: u8 = 10;
/// Regions a home keeps at once (a power of two).
pub const HOME_REGIONS: usize = 4;
const WORDS: usize = 1 << (MAX_HOME_ORDER - 6);
const _: () = assert!(HOME_REGIONS.is_power_of_two());

/// No region (before the first refill).
const NONE: u64 = u64::MAX;

/// A frame's place in a home that does not hold it yet ([`Home::vacancy`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Vacancy {
    /// The region's slot.
    s: usize,
    /// The word of its bitmap.
    w: usize,
    /// The frame's bit in it.
    m: u64,
}

/// One region of a home and the frames of it the cache holds.
#[derive(Clone, Copy, Debug)]
struct Region {
    /// Its first frame, which names it ([`NONE`]: no region yet).
    first: u64,
    /// Bit `i`: frame `region << order | i` is cached.
    bits: [u64; WORDS],
    /// Bit `w`: word `w` of `bits` is not zero.
    words: u16,
    /// When the home last moved to it (0: never): the oldest is taken
    /// over by the next move, the newest holding frames serves takes next.
    /// 64 bits: a stamp a refill never wraps.
    moved: u64,
}

impl Region {
    const EMPTY: Region = Region {
        first: NONE,
        bits: [0; WORDS],
        words: 0,
        moved: 0,
    };

    #[inline(always)]
    fn frame(&self, w: usize, b: u32) -> Pfn {
        Pfn(self.first | (w as u64) << 6 | u64::from(b))
    }

    #[inline(always)]
    fn clear(&mut self, w: usize, rest: u64) {
        self.bits[w] = rest;
        if rest == 0 {
            self.words &= !(1 << w);
        }
    }

    /// The lowest run of `n` frames it holds in one word, now taken; its
    /// first frame.
    #[inline]
    fn take_run(&mut self, n: u32) -> Option<Pfn> {
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
}

/// One order-0 list's home regions and the frames of them the cache holds.
/// The current region, the one takes come from and frees are matched
/// against first, is always in the first slot: the hit paths look at one
/// region, as with a home of one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Home {
    regions: [Region; HOME_REGIONS],
    /// A frame's bits that name its region (set by the first move): a
    /// frame lies in a region when these bits of it are its first frame,
    /// one mask and one compare with no shift.
    mask: u64,
    /// Moves so far (the last move's stamp).
    moves: u64,
}

impl Home {
    pub(crate) const EMPTY: Home = Home {
        regions: [Region::EMPTY; HOME_REGIONS],
        mask: 0,
        moves: 0,
    };

    /// Frames held (counted: for reports and checks, not the fast path).
    pub(crate) fn len(&self) -> u32 {
        let bits = self.regions.iter().flat_map(|r| r.bits.iter());
        bits.map(|w| w.count_ones()).sum()
    }

    /// Whether it holds no frame.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.regions.iter().all(|g| g.words == 0)
    }

    /// The slot of the region `frame` lies in, the current one looked at
    /// first (`shift`, the home order, is the mask's since the first move;
    /// before it no frame lies in any region).
    #[inline(always)]
    fn slot_of(&self, frame: Pfn, _shift: u8) -> Option<usize> {
        let first = frame.get() & self.mask;
        if self.regions[0].first == first {
            return Some(0);
        }
        self.other_slot_of(first)
    }

    /// [`Home::slot_of`] past the current region: the slot of the region
    /// whose first frame is `first`. A plain loop of a constant length,
    /// which the compiler unrolls into a few compares (a frame outside the
    /// home, freed to the foreign list, passes here twice).
    #[inline(always)]
    #[allow(
        clippy::manual_find,
        reason = "the iterator's `find` stays a call on the free path"
    )]
    fn other_slot_of(&self, first: u64) -> Option<usize> {
        for s in 1..HOME_REGIONS {
            if self.regions[s].first == first {
                return Some(s);
            }
        }
        None
    }

    /// Whether `frame` lies in one of the home's regions.
    #[inline(always)]
    pub(crate) fn contains(&self, frame: Pfn, shift: u8) -> bool {
        self.slot_of(frame, shift).is_some()
    }

    /// Moves the (empty) home to the region of `frame`: to that region if
    /// it is one of its regions already, else to the slot of the region it
    /// moved to longest ago (or never), now that region. Either is the
    /// region moved to last now.
    #[inline]
    fn move_to(&mut self, frame: Pfn, shift: u8) {
        self.mask = !((1u64 << shift) - 1);
        let first = frame.get() & self.mask;
        let s = match (0..HOME_REGIONS).find(|&s| self.regions[s].first == first) {
            Some(s) => s,
            None => {
                let s = (0..HOME_REGIONS)
                    .min_by_key(|&s| self.regions[s].moved)
                    .unwrap_or(0);
                self.regions[s].first = first;
                s
            }
        };
        self.moves += 1;
        self.regions[s].moved = self.moves;
        self.regions.swap(0, s);
    }

    /// Makes the newest region holding frames the current one, when the
    /// current one holds none (for [`Home::take`], which looks at the
    /// current one alone): `false` when no region holds any.
    #[inline(never)]
    pub(crate) fn switch(&mut self) -> bool {
        if self.regions[0].words != 0 {
            return true;
        }
        let newest = (1..HOME_REGIONS)
            .filter(|&s| self.regions[s].words != 0)
            .max_by_key(|&s| self.regions[s].moved);
        match newest {
            Some(s) => {
                self.regions.swap(0, s);
                true
            }
            None => false,
        }
    }

    /// The lowest frame held of the current region, now taken, with no
    /// call on the way; `None` when it holds none (other regions may:
    /// [`Home::switch`], or [`Home::take_any`]).
    #[inline(always)]
    pub(crate) fn take(&mut self) -> Option<Pfn> {
        if self.regions[0].words == 0 {
            return None;
        }
        let g = &mut self.regions[0];
        let w = g.words.trailing_zeros() as usize & (WORDS - 1);
        let word = g.bits[w];
        let b = word.trailing_zeros();
        g.clear(w, word & (word - 1));
        Some(g.frame(w, b))
    }

    /// The lowest frame held of the current region, or of the newest
    /// region holding frames (which becomes the current one), now taken.
    #[inline]
    pub(crate) fn take_any(&mut self) -> Option<Pfn> {
        match self.take() {
            Some(f) => Some(f),
            None if self.switch() => self.take(),
            None => None,
        }
    }

    /// The highest frame held of the oldest region holding frames, now
    /// taken (a spill's: the zone gets back the regions the home moved
    /// away from first, and then the frames a take would reach last).
    #[inline]
    pub(crate) fn take_high(&mut self) -> Option<Pfn> {
        let s = (0..HOME_REGIONS)
            .filter(|&s| self.regions[s].words != 0)
            .min_by_key(|&s| self.regions[s].moved)?;
        let g = &mut self.regions[s];
        let w = 15 - g.words.leading_zeros() as usize;
        let word = g.bits[w];
        let b = 63 - word.leading_zeros();
        g.clear(w, word & !(1 << b));
        Some(g.frame(w, b))
    }

    /// Whether it holds `frame`.
    pub(crate) fn holds(&self, frame: Pfn, shift: u8) -> bool {
        self.contains(frame, shift) && self.vacancy(frame, shift).is_none()
    }

    /// Holds `frame`, a frame of one of its regions the cache does not
    /// hold yet; `false` (nothing changed) for any other frame.
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

    /// Where [`Home::put`] would hold `frame`: `None` for a frame of no
    /// region of the home, or one held already.
    #[inline(always)]
    pub(crate) fn vacancy(&self, frame: Pfn, shift: u8) -> Option<Vacancy> {
        let s = self.slot_of(frame, shift)?;
        let i = (frame.get() & !self.mask) as usize;
        // The mask changes nothing (`shift` is at most the largest home
        // order) but spares the word's index a bounds check.
        let (w, m) = ((i >> 6) & (WORDS - 1), 1u64 << (i & 63));
        (self.regions[s].bits[w] & m == 0).then_some(Vacancy { s, w, m })
    }

    /// Holds the frame of `v`, found by [`Home::vacancy`] with nothing
    /// changed since.
    #[inline(always)]
    pub(crate) fn fill(&mut self, v: Vacancy) {
        let g = &mut self.regions[v.s & (HOME_REGIONS - 1)];
        debug_assert!(g.bits[v.w] & v.m == 0, "a vacancy is filled once");
        g.bits[v.w] |= v.m;
        g.words |= 1 << v.w;
    }

    /// A refill's frame: an empty home moves to the frame's region, so
    /// every frame of one refill lies in one region; `false` for a frame
    /// of no region of the home while it holds frames.
    #[inline]
    pub(crate) fn accept(&mut self, frame: Pfn, shift: u8) -> bool {
        if self.is_empty() {
            self.move_to(frame, shift);
        }
        self.put(frame, shift)
    }

    /// [`Home::accept`] of the frames `base + b` for each bit `b` of
    /// `bits` (`base` aligned to 64 frames), all in one word of a region:
    /// returns those it holds now (none for a region not the home's, and
    /// none already held twice).
    #[inline]
    pub(crate) fn accept_word(&mut self, base: Pfn, bits: u64, shift: u8) -> u64 {
        if bits == 0 {
            return 0;
        }
        if self.is_empty() {
            self.move_to(base, shift);
        }
        let Some(s) = self.slot_of(base, shift) else {
            return 0;
        };
        let w = ((base.get() & ((1 << shift) - 1)) >> 6) as usize & (WORDS - 1);
        let g = &mut self.regions[s];
        let new = bits & !g.bits[w];
        g.bits[w] |= new;
        g.words |= 1 << w;
        new
    }

    /// The lowest run of `n` frames held (2..=64) that lies in one word of
    /// a region, now taken (the current region first, then the others);
    /// its first frame.
    #[inline]
    pub(crate) fn take_run(&mut self, n: u32) -> Option<Pfn> {
        if !(2..=64).contains(&n) {
            return None;
        }
        (0..HOME_REGIONS).find_map(|s| self.regions[s].take_run(n))
    }

    /// Holds the `n` frames from `first` (1..=64), all of one region of
    /// the home, in one of its words and none held yet; `false` (nothing
    /// changed) for any other run. An empty home moves to the run's
    /// region first, as it moves with a refill: a caller that frees a run
    /// and asks for one again then finds it here, where it would otherwise
    /// go to the zone and come back from it.
    #[inline]
    pub(crate) fn put_run(&mut self, first: Pfn, n: u32, shift: u8) -> bool {
        let i = (first.get() & ((1 << shift) - 1)) as usize;
        let (w, b) = ((i >> 6) & (WORDS - 1), (i & 63) as u32);
        if !(1..=64).contains(&n) || b + n > 64 || i + n as usize > 1 << shift {
            return false;
        }
        if self.is_empty() {
            self.move_to(first, shift);
        }
        let Some(s) = self.slot_of(first, shift) else {
            return false;
        };
        let m = run_mask(n) << b;
        let g = &mut self.regions[s];
        if g.bits[w] & m != 0 {
            return false;
        }
        g.bits[w] |= m;
        g.words |= 1 << w;
        true
    }

    /// Visits every frame held, region by region, lowest first in each.
    pub(crate) fn for_each(&self, mut f: impl FnMut(Pfn)) {
        for g in &self.regions {
            for (w, &word) in g.bits.iter().enumerate() {
                let mut word = word;
                while word != 0 {
                    let b = word.trailing_zeros();
                    word &= word - 1;
                    f(g.frame(w, b));
                }
            }
        }
    }

    /// The bookkeeping agrees with the bits.
    pub(crate) fn check(&self, shift: u8) -> Result<(), &'static str> {
        for (s, g) in self.regions.iter().enumerate() {
            for (w, &word) in g.bits.iter().enumerate() {
                if (word != 0) != (g.words & (1 << w) != 0) {
                    return Err("home word summary differs from its bits");
                }
                if word != 0 && (w << 6) >= 1 << shift {
                    return Err("home bit beyond its region");
                }
            }
            if g.words != 0 && (g.first == NONE || g.first & !self.mask != 0) {
                return Err("home frames in no region");
            }
            if g.first != NONE && self.regions[..s].iter().any(|h| h.first == g.first) {
                return Err("a region twice in one home");
            }
            if g.first != NONE && self.mask != !((1u64 << shift) - 1) {
                return Err("home mask of another order");
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
        // Empty, it moves with the next refill; the region it held stays
        // its own.
        assert!(h.accept(Pfn(3000), 10));
        assert!(h.contains(Pfn(2048), 10) && h.contains(Pfn(1027), 10));
        h.check(10).unwrap();
    }

    #[test]
    fn old_regions_take_frees_back_until_the_home_moves_past_them() {
        let mut h = Home::EMPTY;
        let region = |r: u64| Pfn(r << 10);
        // Five refills, each into an empty home: the fifth takes over the
        // slot of the first region.
        for r in 1..=5 {
            assert!(h.is_empty());
            assert!(h.accept(region(r) + 7, 10));
            assert_eq!(h.take(), Some(region(r) + 7));
        }
        assert!(!h.contains(region(1), 10), "moved past");
        for r in 2..=5 {
            assert!(h.contains(region(r), 10), "region {r}");
        }
        // Frees back into old regions are held; takes come from the
        // current region, then from the newest holding frames.
        assert!(h.put(region(2) + 1, 10));
        assert!(h.put(region(4) + 1, 10));
        assert!(h.put(region(3) + 9, 10));
        assert!(!h.put(region(1) + 1, 10), "no region of the home");
        assert!(h.put(region(5) + 3, 10));
        h.check(10).unwrap();
        assert_eq!(h.take(), Some(region(5) + 3));
        assert_eq!(h.take(), None, "the current region is empty");
        assert_eq!(h.take_any(), Some(region(4) + 1));
        // A spill gives back the oldest region's frames first.
        assert_eq!(h.take_high(), Some(region(2) + 1));
        assert_eq!(h.take_any(), Some(region(3) + 9));
        assert_eq!((h.take_any(), h.len()), (None, 0));
        // A refill into a region the home keeps moves to that slot.
        assert!(h.accept(region(3) + 100, 10));
        assert!(h.contains(region(5), 10) && h.contains(region(2), 10));
        assert!(h.put(region(2) + 5, 10));
        assert_eq!(h.take(), Some(region(3) + 100), "the refill's region first");
        assert_eq!(h.take_run(2), None);
        assert!(h.put_run(region(4) + 64, 5, 10), "a run into an old region");
        assert_eq!(h.take_run(4), Some(region(4) + 64));
        h.check(10).unwrap();
        assert_eq!(h.len(), 2);
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
