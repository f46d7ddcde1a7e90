//! The firmware memory map and sets of physical ranges derived from it.

use core::fmt;

use pageframe::boot::FrameRanges;
use pageframe::{PfnRange, PhysAddr};

/// Size of a page frame.
pub const PAGE_SIZE: u64 = 4096;

/// A half-open physical address range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhysRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

impl PhysRange {
    /// The empty range at 0.
    pub const EMPTY: Self = Self { start: 0, end: 0 };

    /// `[start, end)`; an inverted pair gives an empty range.
    pub const fn new(start: u64, end: u64) -> Self {
        Self {
            start,
            end: if end < start { start } else { end },
        }
    }

    /// True when the range holds no byte.
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The overlap of two ranges (possibly empty).
    pub fn intersect(&self, other: &Self) -> Self {
        Self::new(self.start.max(other.start), self.end.min(other.end))
    }

    /// The largest sub-range whose ends are multiples of `PAGE_SIZE`.
    pub fn pages_inside(&self) -> Self {
        Self::new(
            self.start.next_multiple_of(PAGE_SIZE),
            self.end / PAGE_SIZE * PAGE_SIZE,
        )
    }
}

impl fmt::Display for PhysRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:#012x}-{:#012x}]",
            self.start,
            self.end.wrapping_sub(1)
        )
    }
}

/// One entry of the firmware (E820-style) memory map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct E820Entry {
    /// Base physical address.
    pub addr: u64,
    /// Length in bytes.
    pub size: u64,
    /// Entry type: 1 is usable RAM.
    pub kind: u32,
}

impl E820Entry {
    /// The range the entry covers.
    pub fn range(&self) -> PhysRange {
        PhysRange::new(self.addr, self.addr.saturating_add(self.size))
    }

    /// True for usable RAM.
    pub fn is_ram(&self) -> bool {
        self.kind == 1
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            1 => "usable",
            2 => "reserved",
            3 => "ACPI data",
            4 => "ACPI NVS",
            5 => "unusable",
            7 => "persistent",
            _ => "unknown",
        }
    }
}

/// A collection is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityError;

/// Most memory-map entries kept.
const MEMMAP_MAX: usize = 128;

/// The firmware memory map as handed over at boot.
pub struct MemoryMap {
    entries: [E820Entry; MEMMAP_MAX],
    len: usize,
}

impl MemoryMap {
    /// An empty map.
    pub const fn new() -> Self {
        Self {
            entries: [E820Entry {
                addr: 0,
                size: 0,
                kind: 0,
            }; MEMMAP_MAX],
            len: 0,
        }
    }

    /// Appends an entry.
    pub fn push(&mut self, entry: E820Entry) -> Result<(), CapacityError> {
        let slot = self.entries.get_mut(self.len).ok_or(CapacityError)?;
        *slot = entry;
        self.len += 1;
        Ok(())
    }

    /// The entries in firmware order.
    pub fn entries(&self) -> &[E820Entry] {
        &self.entries[..self.len]
    }

    /// All usable RAM, merged, sorted, in whole pages.
    pub fn ram(&self) -> Result<RangeSet, CapacityError> {
        let mut set = RangeSet::new();
        for e in self.entries().iter().filter(|e| e.is_ram()) {
            set.insert(e.range().pages_inside())?;
        }
        Ok(set)
    }

    /// Total bytes of usable RAM the firmware reports.
    pub fn ram_bytes(&self) -> u64 {
        self.entries()
            .iter()
            .filter(|e| e.is_ram())
            .map(|e| e.size)
            .sum()
    }
}

impl fmt::Display for MemoryMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in self.entries() {
            writeln!(f, "  e820 {} {}", e.range(), e.kind_name())?;
        }
        Ok(())
    }
}

/// Most disjoint ranges a [`RangeSet`] holds.
const RANGES_MAX: usize = 64;

/// A set of whole physical pages, in byte addresses: the allocator's
/// [`FrameRanges`] (sorted, disjoint, non-adjacent frame ranges) seen
/// through [`PhysRange`]s, which the rest of this kernel speaks.
#[derive(Clone)]
pub struct RangeSet(FrameRanges<RANGES_MAX>);

/// Frames of `r`, rounded inward (its ends are page-aligned wherever this
/// kernel builds one).
fn frames(r: PhysRange) -> PfnRange {
    PfnRange::from_addrs(PhysAddr::new(r.start), PhysAddr::new(r.end))
}

fn bytes(r: &PfnRange) -> PhysRange {
    PhysRange::new(r.start.addr().get(), r.end.addr().get())
}

impl RangeSet {
    /// The empty set.
    pub const fn new() -> Self {
        Self(FrameRanges::new())
    }

    /// The set of `frames`.
    pub fn from_frames(frames: FrameRanges<RANGES_MAX>) -> Self {
        Self(frames)
    }

    /// The frames of the set.
    pub fn frames(&self) -> &FrameRanges<RANGES_MAX> {
        &self.0
    }

    /// The ranges, sorted by address.
    pub fn ranges(&self) -> impl DoubleEndedIterator<Item = PhysRange> + ExactSizeIterator + '_ {
        self.0.ranges().iter().map(bytes)
    }

    /// True when `addr` belongs to the set.
    pub fn contains(&self, addr: u64) -> bool {
        self.0.contains(PhysAddr::new(addr).pfn_down())
    }

    /// Adds the whole pages of `r`, merging with overlapping or adjacent
    /// ranges. On error the set is unchanged.
    pub fn insert(&mut self, r: PhysRange) -> Result<(), CapacityError> {
        self.0.insert(frames(r)).map_err(|_| CapacityError)
    }

    /// Removes every page `r` touches, splitting a range if needed. On
    /// error the set is unchanged.
    pub fn remove(&mut self, r: PhysRange) -> Result<(), CapacityError> {
        self.0
            .reserve(PhysAddr::new(r.start), PhysAddr::new(r.end))
            .map_err(|_| CapacityError)
    }
}
