//! A zone's fragmentation map for people: one character a pageblock (see
//! [`PageblockUse::symbol`]), 64 to a line, each line headed by its first
//! frame. The kernel prints it before and after compaction; the lab draws
//! the same blocks as an SVG.

use core::fmt;

use pageframe_mobility::PageblockUse;

use crate::lock::RawMutex;
use crate::zone::Zone;

/// Pageblocks a line of the map shows.
pub const MAP_WIDTH: usize = 64;

/// What the map's characters mean.
pub const MAP_LEGEND: &str = "U/u unmovable, M/m movable, R/r reclaimable, H/h highatomic, C/c CMA, I/i isolated (upper case: full, lower case: partly free), . free, _ not managed";

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
}

/// See [`Zone::fragmentation_map`].
pub struct FragmentationMap<'z, 'a, R: RawMutex>(&'z Zone<'a, R>);

impl<R: RawMutex> fmt::Display for FragmentationMap<'_, '_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut col = 0;
        for u in self.0.pageblocks() {
            if col == 0 {
                write!(f, "{:#010x} ", u.range.start.get())?;
            }
            write!(f, "{}", u.symbol())?;
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
}
