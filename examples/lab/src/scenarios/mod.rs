//! The scenario registry: one module per scenario, one entry in [`ALL`].

use crate::args::Opts;

mod compact_backoff;
mod compact_common;
mod compact_gupta;
mod contig;
mod frag;
mod giant_churn;
mod mixed_churn;
mod mthp_fallback;
mod pcp_tune;
mod scattered_movable;
mod swap_latency;
mod thp_numa;
mod thp_swap;

/// A runnable experiment.
pub struct Scenario {
    /// Command-line name.
    pub name: &'static str,
    /// One line for `pageframe-lab list`.
    pub about: &'static str,
    /// Runs it, printing tables; plots go under `opts.out`.
    pub run: fn(&Opts) -> Result<(), String>,
}

/// Every scenario, in `list` order. Add new ones here.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "mixed-churn",
        about: "2005 fragmentation avoidance: mixed-type churn, order-10 success under load and at rest (spec 02 §9)",
        run: mixed_churn::run,
    },
    Scenario {
        name: "scattered-movable",
        about: "order-0 movable churn: 2 MiB availability per iteration and compaction debt, vs the old core and a peer",
        run: scattered_movable::run,
    },
    Scenario {
        name: "frag",
        about: "LLFree's frag.rs: fill, free half, replace 10% of held frames per iteration; 2 MiB availability, vs the old core and a peer",
        run: frag::run,
    },
    Scenario {
        name: "pcp-tune",
        about: "per-CPU cache, two CPUs (alloc on one, free on the other): auto-tuned vs fixed high (spec 04)",
        run: pcp_tune::run,
    },
    Scenario {
        name: "gupta-pattern",
        about: "2020 proactive compaction: 2 MiB allocation latency after freeing 3/4 of every block, p=0 vs p=20, full compaction (spec 03)",
        run: compact_gupta::run,
    },
    Scenario {
        name: "backoff",
        about: "proactive compaction against pinned memory: back-off keeps kcompactd's CPU bounded (spec 03 §11.3)",
        run: compact_backoff::run,
    },
    Scenario {
        name: "thp-swap",
        about: "2018 THP swap out/in in one piece: split vs whole-out vs whole-out-and-in (spec 05 §10)",
        run: thp_swap::run,
    },
    Scenario {
        name: "mthp-fallback",
        about: "2024 mTHP swap allocator test: 64 KiB swap-out fallback per iteration (spec 05 §5.4)",
        run: mthp_fallback::run,
    },
    Scenario {
        name: "swap-latency",
        about: "swap-slot allocation latency percentiles at 50/90/99% fill vs a linear-scan peer",
        run: swap_latency::run,
    },
    Scenario {
        name: "contig",
        about: "contiguous ranges after mixed churn at 90%: 1 GiB pages and 3000-frame ranges (success, moves vs minimum), then free page reporting",
        run: contig::run,
    },
    Scenario {
        name: "giant-churn",
        about: "1 GiB pages after mixed churn with unmovable memory: superpageblock grouping on, off, and Linux's rules (tainted regions vs minimum, 1 GiB pages alloc_contig takes)",
        run: giant_churn::run,
    },
    Scenario {
        name: "thp-numa",
        about: "2018 THP/NUMA debate: THISNODE+compact vs remote fallback vs compact-only node-aware deferral on 2 nodes",
        run: thp_numa::run,
    },
];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}
