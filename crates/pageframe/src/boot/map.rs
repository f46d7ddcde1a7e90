//! A memory map as the allocator reads it: the usable ranges, in frames,
//! sorted and merged, from whatever the boot protocol reports (the
//! readers for each protocol sit beside this file). The plan and the
//! incremental set-up start from it; the steps are in [`crate::boot`].

use core::fmt;

use pageframe_types::{Pfn, PfnRange, PhysAddr};

/// Why a memory map could not be read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum MapError {
    /// More disjoint ranges than the set holds.
    TooManyRanges,
    /// An entry whose end lies before its start or past the address space.
    BadEntry {
        /// Its start address.
        start: u64,
        /// Its length in bytes.
        len: u64,
    },
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::TooManyRanges => f.write_str("more disjoint ranges than the set holds"),
            MapError::BadEntry { start, len } => {
                write!(
                    f,
                    "entry at {start:#x} of {len:#x} bytes leaves the address space"
                )
            }
        }
    }
}

impl core::error::Error for MapError {}

/// A set of frames: sorted, disjoint, non-adjacent ranges, at most `N`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FrameRanges<const N: usize = 128> {
    ranges: [PfnRange; N],
    len: usize,
}

impl<const N: usize> Default for FrameRanges<N> {
    fn default() -> Self {
        Self::new()
    }
}

const EMPTY: PfnRange = PfnRange::new(Pfn::new(0), Pfn::new(0));

impl<const N: usize> FrameRanges<N> {
    /// The empty set.
    pub const fn new() -> Self {
        FrameRanges {
            ranges: [EMPTY; N],
            len: 0,
        }
    }

    /// The ranges, by address.
    pub fn ranges(&self) -> &[PfnRange] {
        &self.ranges[..self.len]
    }

    /// Frames in the set.
    pub fn frames(&self) -> u64 {
        self.ranges().iter().map(PfnRange::len).sum()
    }

    /// Whether `pfn` is in the set.
    pub fn contains(&self, pfn: Pfn) -> bool {
        let i = self.ranges().partition_point(|r| r.end <= pfn);
        self.ranges().get(i).is_some_and(|r| r.contains(pfn))
    }

    /// Adds `r`, merged with the ranges it meets or touches. On error the
    /// set is unchanged.
    pub fn insert(&mut self, r: PfnRange) -> Result<(), MapError> {
        if r.is_empty() {
            return Ok(());
        }
        let first = self.ranges().partition_point(|x| x.end < r.start);
        let mut last = first;
        let mut merged = r;
        while last < self.len && self.ranges[last].start <= r.end {
            merged = PfnRange::new(
                merged.start.min(self.ranges[last].start),
                merged.end.max(self.ranges[last].end),
            );
            last += 1;
        }
        if last == first && self.len == N {
            return Err(MapError::TooManyRanges);
        }
        self.ranges.copy_within(last..self.len, first + 1);
        self.ranges[first] = merged;
        self.len = self.len + 1 - (last - first);
        Ok(())
    }

    /// Takes `r` out, splitting the range it falls inside. On error (the
    /// split needs one range more than the set holds) the set is unchanged.
    pub fn remove(&mut self, r: PfnRange) -> Result<(), MapError> {
        if r.is_empty() {
            return Ok(());
        }
        let first = self.ranges().partition_point(|x| x.end <= r.start);
        let last = self.ranges().partition_point(|x| x.start < r.end);
        if first >= last {
            return Ok(());
        }
        let head = PfnRange::new(self.ranges[first].start, r.start);
        let tail = PfnRange::new(r.end, self.ranges[last - 1].end);
        let keep = [head, tail].into_iter().filter(|p| p.start < p.end);
        let pieces = keep.clone().count();
        let len = self.len - (last - first) + pieces;
        if len > N {
            return Err(MapError::TooManyRanges);
        }
        // The ranges after the removed ones move into place (a memmove, in
        // either direction), then the pieces kept are written before them.
        self.ranges.copy_within(last..self.len, first + pieces);
        for (i, p) in keep.enumerate() {
            self.ranges[first + i] = p;
        }
        self.len = len;
        Ok(())
    }

    /// Adds the whole frames inside `[start, end)`.
    pub fn add_usable(&mut self, start: PhysAddr, end: PhysAddr) -> Result<(), MapError> {
        self.insert(PfnRange::new(
            start.pfn_up(),
            end.pfn_down().max(start.pfn_up()),
        ))
    }

    /// Takes out every frame `[start, end)` touches.
    pub fn reserve(&mut self, start: PhysAddr, end: PhysAddr) -> Result<(), MapError> {
        self.remove(PfnRange::new(
            start.pfn_down(),
            end.pfn_up().max(start.pfn_down()),
        ))
    }

    /// The part of the set inside `window`.
    pub fn clipped(&self, window: PfnRange) -> Self {
        let mut out = Self::new();
        for r in self.ranges() {
            let piece = r.intersect(&window);
            if !piece.is_empty() {
                out.ranges[out.len] = piece;
                out.len += 1;
            }
        }
        out
    }

    /// Takes `frames` frames from the top of the highest range inside
    /// `window` that holds them (where a kernel carves metadata), removes
    /// them and returns them. `None`, the set unchanged, when none does.
    pub fn take_top(&mut self, frames: u64, window: PfnRange) -> Option<PfnRange> {
        if frames == 0 {
            return None;
        }
        let found = self
            .clipped(window)
            .ranges()
            .iter()
            .rev()
            .find(|r| r.len() >= frames)
            .map(|r| PfnRange::new(Pfn::new(r.end.get() - frames), r.end))?;
        // The top of a range, or of its part inside the window: removing it
        // may split the range, which a full set refuses (`None`, unchanged).
        self.remove(found).ok()?;
        Some(found)
    }

    /// Builds a set from a map's entries: `(start, length in bytes,
    /// usable)`. Usable entries go in first, then every other entry comes
    /// out, so overlapping or unsorted maps are read safely.
    pub fn from_entries<I>(entries: I) -> Result<Self, MapError>
    where
        I: IntoIterator<Item = (u64, u64, bool)>,
        I::IntoIter: Clone,
    {
        let entries = entries.into_iter();
        let mut set = Self::new();
        let bounds = |(start, len, _): (u64, u64, bool)| {
            let end = start
                .checked_add(len)
                .ok_or(MapError::BadEntry { start, len })?;
            Ok::<_, MapError>((PhysAddr::new(start), PhysAddr::new(end)))
        };
        for e in entries.clone().filter(|e| e.2) {
            let (s, end) = bounds(e)?;
            set.add_usable(s, end)?;
        }
        for e in entries.filter(|e| !e.2) {
            let (s, end) = bounds(e)?;
            set.reserve(s, end)?;
        }
        Ok(set)
    }
}
