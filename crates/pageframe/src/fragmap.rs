//! A zone's fragmentation map for people: one character a pageblock (see
//! [`PageblockUse::symbol`]), 64 to a line, each line headed by its first
//! frame. The kernel prints it before and after compaction; the lab draws
//! the same blocks as an SVG. One level up, the map of 1 GiB pages: one
//! character a superpageblock ([`SuperpageblockUse::symbol`]).

use core::fmt;

use pageframe_mobility::{PageblockUse, SuperpageblockCounts, SuperpageblockUse};

use crate::lock::RawMutex;
use crate::zone_core::Zone;

/// Pageblocks a line of the map shows.
pub const MAP_WIDTH: usize = 64;

/// What the map's characters mean.
pub const MAP_LEGEND: &str = "U/u unmovable, M/m movable, R/r reclaimable, H/h highatomic, C/c CMA, I/i isolated (upper case: full, lower case: partly free), . free, _ not managed";

/// What the superpageblock map's characters mean.
pub const SUPERPAGEBLOCK_LEGEND: &str = "F free 1 GiB page, C clean (free and movable memory only), T tainted (a pageblock unmovable, reclaimable or highatomic); c/t: can never be a 1 GiB page (reaches outside the zone or holds a hole)";

impl<'a, R: RawMutex> Zone<'a, R> {
    /// Every pageblock of the zone, low to high, each read under the zone
    /// lock on its own (a map of a busy zone is a sequence of snapshots).
    pub fn pageblocks(&self) -> impl Iterator<Item = PageblockUse> + '_ {
        let span = self.span();
        let mut at = span.start;
        core::iter::from_fn(move || {
            if at >= span.end {
                return None;
            }
            let u = self.inspect(|m| m.pageblock_use(at))?;
            at = u.range.end;
            Some(u)
        })
    }

    /// The zone's fragmentation map (`Display`).
    pub fn fragmentation_map(&self) -> FragmentationMap<'_, 'a, R> {
        FragmentationMap(self)
    }

    /// Every superpageblock (1 GiB region) meeting the zone, low to high,
    /// each read under the zone lock on its own.
    pub fn superpageblocks(&self) -> impl Iterator<Item = SuperpageblockUse> + '_ {
        let mut i = 0;
        core::iter::from_fn(move || {
            let u = self.inspect(|m| m.superpageblock_use(i))?;
            i += 1;
            Some(u)
        })
    }

    /// The zone's superpageblocks summed up: how many could be 1 GiB
    /// pages, are tainted, clean, free now (one zone lock hold).
    pub fn superpageblock_counts(&self) -> SuperpageblockCounts {
        self.inspect(|m| m.superpageblock_counts())
    }

    /// The zone's map of 1 GiB pages (`Display`): its counts, then one
    /// character a superpageblock ([`SUPERPAGEBLOCK_LEGEND`]), 64 to a
    /// line, each line headed by its first frame.
    pub fn superpageblock_map(&self) -> SuperpageblockMap<'_, 'a, R> {
        SuperpageblockMap(self)
    }
}

/// See [`Zone::fragmentation_map`].
pub struct FragmentationMap<'z, 'a, R: RawMutex>(&'z Zone<'a, R>);

impl<R: RawMutex> fmt::Display for FragmentationMap<'_, '_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        rows(
            f,
            self.0
                .pageblocks()
                .map(|u| (u.range.start.get(), u.symbol())),
        )
    }
}

/// See [`Zone::superpageblock_map`].
pub struct SuperpageblockMap<'z, 'a, R: RawMutex>(&'z Zone<'a, R>);

impl<R: RawMutex> fmt::Display for SuperpageblockMap<'_, '_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.0.superpageblock_counts();
        writeln!(
            f,
            "superpageblocks: {} could be 1 GiB pages, {} tainted, {} clean, {} free now",
            c.whole, c.tainted, c.clean, c.free
        )?;
        rows(
            f,
            self.0
                .superpageblocks()
                .map(|u| (u.range.start.get(), u.symbol())),
        )
    }
}

/// Writes `(first frame, symbol)` cells as rows of [`MAP_WIDTH`], each row
/// led by its first frame.
fn rows<S: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    cells: impl Iterator<Item = (u64, S)>,
) -> fmt::Result {
    let mut col = 0;
    for (start, symbol) in cells {
        if col == 0 {
            write!(f, "{start:#010x} ")?;
        }
        write!(f, "{symbol}")?;
        col += 1;
        if col == MAP_WIDTH {
            writeln!(f)?;
            col = 0;
        }
    }
    if col != 0 {
        writeln!(f)?;
    }
    Ok(())
}
