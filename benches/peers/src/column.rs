//! The table's columns: pageframe's two paths, each keeping allocations
//! two ways, and LLFree, keeping its frame numbers alone or in two words.

use crate::frames::TwoWords;
use crate::llfree_side::{self, Peer};
use crate::pageframe_side::{self, Blocks, CachePath, Numbers, ZonePath};
use crate::rows::{self, Row, Sample, Setup};

// The two-word handles are what a `Block` takes in the caller's memory.
const _: () = assert!(size_of::<[u64; 2]>() == size_of::<pageframe::Block>());

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
    /// llfree-rs's `LLFree`, each frame number kept in two words, the size
    /// of a `Block`: the peer with the caller's memory of the `Block`
    /// columns.
    LlFreeTwoWords,
}

impl Column {
    /// Every column, in the table's order.
    pub const ALL: [Column; 6] = [
        Column::ZoneNumbers,
        Column::ZoneBlocks,
        Column::CacheNumbers,
        Column::CacheBlocks,
        Column::LlFree,
        Column::LlFreeTwoWords,
    ];

    /// The column's heading.
    pub fn label(self) -> &'static str {
        match self {
            Column::ZoneNumbers => "zone, numbers",
            Column::ZoneBlocks => "zone, `Block`s",
            Column::CacheNumbers => "zone + per-CPU cache, numbers",
            Column::CacheBlocks => "cache, `Block`s",
            Column::LlFree => "llfree-rs",
            Column::LlFreeTwoWords => "llfree-rs, two-word handles",
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
            Column::LlFreeTwoWords => "llfree-two-words",
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
            Column::LlFreeTwoWords => llfree_side::with_llfree(s.frames, n, |a, requests| {
                rows::run(row, s, |t| {
                    TwoWords(Peer {
                        a,
                        requests: &requests[t],
                    })
                })
            }),
        }
    }
}
