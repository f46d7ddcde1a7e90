//! The table's columns: pageframe's two paths, each keeping allocations
//! two ways, and LLFree.

use crate::llfree_side::{self, Peer};
use crate::pageframe_side::{self, Blocks, CachePath, Numbers, ZonePath};
use crate::rows::{self, Row, Sample, Setup};

/// One column of the table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Column {
    /// `Machine::alloc`/`free`, frame numbers kept.
    ZoneNumbers,
    /// `Machine::alloc`/`free`, `Block`s kept.
    ZoneBlocks,
    /// A CPU's `CpuCache`, frame numbers kept.
    CacheNumbers,
    /// A CPU's `CpuCache`, `Block`s kept.
    CacheBlocks,
    /// llfree-rs's `LLFree`, frame numbers kept.
    LlFree,
}

impl Column {
    /// Every column, in the table's order.
    pub const ALL: [Column; 5] = [
        Column::ZoneNumbers,
        Column::ZoneBlocks,
        Column::CacheNumbers,
        Column::CacheBlocks,
        Column::LlFree,
    ];

    /// The column's heading.
    pub fn label(self) -> &'static str {
        match self {
            Column::ZoneNumbers => "zone, numbers",
            Column::ZoneBlocks => "zone, `Block`s",
            Column::CacheNumbers => "zone + per-CPU cache, numbers",
            Column::CacheBlocks => "cache, `Block`s",
            Column::LlFree => "llfree-rs",
        }
    }

    /// The column's name on the command line (`--column`).
    pub fn name(self) -> &'static str {
        match self {
            Column::ZoneNumbers => "zone-numbers",
            Column::ZoneBlocks => "zone-blocks",
            Column::CacheNumbers => "cache-numbers",
            Column::CacheBlocks => "cache-blocks",
            Column::LlFree => "llfree",
        }
    }

    /// Runs `row` once on a fresh allocator of this column.
    pub fn measure(self, row: Row, s: &Setup) -> Sample {
        let n = row.threads();
        match self {
            Column::ZoneNumbers => pageframe_side::with_machine(s.frames, 0, |m| {
                rows::run(row, s, |_| Numbers(ZonePath(m)))
            }),
            Column::ZoneBlocks => pageframe_side::with_machine(s.frames, 0, |m| {
                rows::run(row, s, |_| Blocks(ZonePath(m)))
            }),
            Column::CacheNumbers => pageframe_side::with_machine(s.frames, n as u32, |m| {
                rows::run(row, s, |t| Numbers(CachePath::claim(m, t)))
            }),
            Column::CacheBlocks => pageframe_side::with_machine(s.frames, n as u32, |m| {
                rows::run(row, s, |t| Blocks(CachePath::claim(m, t)))
            }),
            Column::LlFree => llfree_side::with_llfree(s.frames, n, |a, requests| {
                rows::run(row, s, |t| Peer {
                    a,
                    requests: &requests[t],
                })
            }),
        }
    }
}
