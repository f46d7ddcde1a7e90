//! The kernel command line (`qemu -append "..."`): which modes to run.
//!
//! Words are separated by spaces. A mode word selects a mode; `seed=N` sets
//! the seed of the self-test's random free order; `placement=P` where the
//! allocator's fallbacks for unmovable memory go. With no mode word the
//! kernel runs [`Modes::DEFAULT`]. New modes are one line in [`MODES`] plus
//! their runner in `main.rs`.

use bitflags::bitflags;
use core::fmt;

bitflags! {
    /// What the kernel runs after bringing up the allocator.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Modes: u32 {
        /// Allocate every free frame, write, verify, free in random order,
        /// check the allocator is back to its initial state.
        const SELFTEST = 1 << 0;
        /// Cycles per alloc/free for order 0 and order 9.
        const BENCH = 1 << 1;
        /// Panic on purpose after set-up (proves the failure path).
        const PANIC = 1 << 2;
        /// Write to an unmapped address (proves the exception path).
        const FAULT = 1 << 3;
        /// Real page migration: compaction moves mapped user pages, then
        /// 2 MiB blocks are allocated until failure (proactiveness 0 vs 20).
        const MIGRATE = 1 << 4;
        /// The migration scenario with unmovable allocations interleaved.
        const UNMOVABLE = 1 << 5;
        /// A mapped 2 MiB page swapped out to a RAM disk and back in, whole
        /// and split.
        const THP_SWAP = 1 << 6;
        /// Bring up the second CPU and stress per-CPU caches on both.
        const SMP = 1 << 7;
        /// A 1 GiB page from `alloc_contig`, migrating mapped user pages out
        /// of its range, mapped with one 1 GiB entry and checked.
        const GIANT = 1 << 8;
        /// 256 MiB holding mapped user pages taken offline (they migrate
        /// out) and back online.
        const HOTPLUG = 1 << 9;
        /// The allocator's debugging tools (a kernel built with `--features
        /// debug`).
        const DEBUG = 1 << 10;
        /// A churn with unmovable memory, then as many 1 GiB pages as
        /// `alloc_contig` takes.
        const GIANT_CHURN = 1 << 11;
    }
}

impl Modes {
    /// What runs when the command line names no mode: every subsystem
    /// (`giant` and `hotplug` are skipped in guests too small for them).
    pub const DEFAULT: Self = Self::SELFTEST
        .union(Self::BENCH)
        .union(Self::MIGRATE)
        .union(Self::UNMOVABLE)
        .union(Self::THP_SWAP)
        .union(Self::SMP)
        .union(Self::GIANT)
        .union(Self::HOTPLUG);
}

/// Mode words, their flags and one-line descriptions (printed in the report).
pub const MODES: &[(&str, Modes, &str)] = &[
    (
        "selftest",
        Modes::SELFTEST,
        "fill all RAM, verify, free, recheck",
    ),
    (
        "bench",
        Modes::BENCH,
        "cycles per alloc/free, order 0 and 9",
    ),
    (
        "migrate",
        Modes::MIGRATE,
        "compaction moves mapped pages; 2 MiB blocks, p=0 vs 20",
    ),
    (
        "unmovable",
        Modes::UNMOVABLE,
        "migrate with unmovable allocations; fallback counters",
    ),
    (
        "thp-swap",
        Modes::THP_SWAP,
        "2 MiB page to a RAM-disk swap and back, whole/split",
    ),
    (
        "smp",
        Modes::SMP,
        "second CPU up; alloc/free stress through per-CPU caches",
    ),
    (
        "giant",
        Modes::GIANT,
        "1 GiB page by alloc_contig (user pages migrate out), 1 GiB mapping",
    ),
    (
        "hotplug",
        Modes::HOTPLUG,
        "256 MiB offline (user pages migrate out) and back online; 256 MiB hot-added with its metadata carved from itself",
    ),
    (
        "giant-churn",
        Modes::GIANT_CHURN,
        "churn with unmovable memory, then 1 GiB pages by alloc_contig until none is left (placement=...)",
    ),
    (
        "debug",
        Modes::DEBUG,
        "vmstat, zoneinfo, owners and a leak, trace histogram, fault injection, use after free (--features debug)",
    ),
    ("panic", Modes::PANIC, "panic on purpose (failure path)"),
    (
        "fault",
        Modes::FAULT,
        "page fault on purpose (exception path)",
    ),
];

/// Where fallbacks for unmovable memory go (`placement=`): the
/// allocator's `Placement`, by the name the command line gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementWord {
    /// `placement=superpageblock` (the allocator's default).
    Superpageblock,
    /// `placement=neighbour`.
    Neighbour,
    /// `placement=linux`.
    Linux,
}

/// Seed used when the command line gives none.
pub const DEFAULT_SEED: u64 = 0x5eed_f00d_cafe_d00d;

/// The parsed command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Modes to run, in the order of [`MODES`].
    pub modes: Modes,
    /// Seed of the self-test's random free order.
    pub seed: u64,
    /// No mode was named: [`Modes::DEFAULT`] runs.
    pub defaulted: bool,
    /// `placement=`, if given.
    pub placement: Option<PlacementWord>,
}

/// A command line the kernel does not understand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdlineError<'a> {
    /// A word that is neither a mode nor an option.
    UnknownWord(&'a str),
    /// `seed=` followed by something other than a decimal or 0x-hex u64.
    BadSeed(&'a str),
    /// `placement=` followed by something other than `superpageblock`,
    /// `neighbour` or `linux`.
    BadPlacement(&'a str),
}

impl fmt::Display for CmdlineError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownWord(w) => write!(f, "unknown command-line word {w:?}"),
            Self::BadSeed(s) => write!(f, "bad seed {s:?}"),
            Self::BadPlacement(s) => write!(
                f,
                "bad placement {s:?} (superpageblock, neighbour or linux)"
            ),
        }
    }
}

/// Parses the command line.
pub fn parse(line: &str) -> Result<Options, CmdlineError<'_>> {
    let mut modes = Modes::empty();
    let mut seed = DEFAULT_SEED;
    let mut placement = None;
    for word in line.split_ascii_whitespace() {
        if let Some(value) = word.strip_prefix("seed=") {
            seed = parse_u64(value).ok_or(CmdlineError::BadSeed(value))?;
        } else if let Some(value) = word.strip_prefix("placement=") {
            placement = Some(match value {
                "superpageblock" => PlacementWord::Superpageblock,
                "neighbour" => PlacementWord::Neighbour,
                "linux" => PlacementWord::Linux,
                _ => return Err(CmdlineError::BadPlacement(value)),
            });
        } else if let Some((_, flag, _)) = MODES.iter().find(|(name, _, _)| *name == word) {
            modes |= *flag;
        } else {
            return Err(CmdlineError::UnknownWord(word));
        }
    }
    let defaulted = modes.is_empty();
    if defaulted {
        modes = Modes::DEFAULT;
    }
    Ok(Options {
        modes,
        seed,
        defaulted,
        placement,
    })
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}
