//! Boot budgets: how long a boot of the example kernel may take, from what
//! it does. Each mode the command line runs costs host seconds, a fixed
//! part plus a part per GiB of guest RAM (the modes that fill, compact or
//! migrate touch all of it), times the CPU pairs for the mode that keeps
//! every CPU busy; the budget is the sum with headroom. A boot twice as
//! large gets twice the time, and a boot that hangs is stopped after what
//! it should have needed, not after a number sized for the largest.
//!
//! The costs are host wall time of the default job at 1, 4 and 8 GiB on a
//! 2-core host with another 2-CPU guest running beside the boot and other
//! builds around it (load average about 20), from each mode's `time:`
//! line, rounded up; the headroom covers hosts busier still.

use std::time::Duration;

use crate::cmdline::{self, Modes};

/// Host seconds a mode takes: `fixed + per_gib * GiB`, times the guest's
/// CPU pairs when `all_cpus` (vCPUs beyond the host's two share its cores).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Seconds whatever the RAM.
    pub fixed: f64,
    /// Seconds per GiB of guest RAM.
    pub per_gib: f64,
    /// The mode keeps every CPU busy.
    pub all_cpus: bool,
}

const fn cost(fixed: f64, per_gib: f64) -> Cost {
    Cost {
        fixed,
        per_gib,
        all_cpus: false,
    }
}

/// What every boot pays: QEMU's start and exit, and the kernel's bring-up
/// (metadata, page tables, reports).
pub const BRING_UP: Cost = cost(5.0, 4.0);

/// Each mode's cost.
pub const COSTS: &[(Modes, Cost)] = &[
    (Modes::SELFTEST, cost(2.0, 12.0)),
    (Modes::BENCH, cost(2.0, 0.0)),
    (Modes::MIGRATE, cost(2.0, 14.0)),
    (Modes::UNMOVABLE, cost(2.0, 5.0)),
    (Modes::THP_SWAP, cost(2.0, 0.0)),
    (
        Modes::SMP,
        Cost {
            fixed: 10.0,
            per_gib: 14.0,
            all_cpus: true,
        },
    ),
    (Modes::GIANT, cost(8.0, 1.0)),
    (Modes::HOTPLUG, cost(8.0, 1.0)),
    // Eight rounds filling the Normal zone with user pages: 49 s of guest
    // time at 12 GiB on a lightly loaded host (not in the default job).
    (Modes::GIANT_CHURN, cost(5.0, 6.0)),
    // The self-test under fault injection and the tools' own work.
    (Modes::DEBUG, cost(20.0, 40.0)),
    (Modes::PANIC, cost(0.0, 0.0)),
    (Modes::FAULT, cost(0.0, 0.0)),
];

/// Guest RAM (MiB) from which the default job runs `giant` and `hotplug`:
/// q35 puts RAM beyond 2 GiB above 4 GiB, and the kernel wants 2 GiB there
/// after the 256 MiB it keeps for hot-adding.
pub const BIG_MIB: u64 = 4352;

/// Over the costs, for hosts busier than the one they were measured on.
pub const HEADROOM: f64 = 2.0;

/// The least budget: starting QEMU and building nothing still takes a
/// while on a busy host.
pub const FLOOR: Duration = Duration::from_secs(60);

/// The modes a boot of `mib` MiB runs for the command line `append`;
/// `None` for one the kernel refuses (it stops before bringing anything
/// up).
pub fn modes(append: &str, mib: u64) -> Option<Modes> {
    let o = cmdline::parse(append).ok()?;
    Some(if o.defaulted && mib < BIG_MIB {
        o.modes - (Modes::GIANT | Modes::HOTPLUG)
    } else {
        o.modes
    })
}

/// The budget of a boot running `append` in a guest of `mib` MiB with
/// `cpus` CPUs.
pub fn of(append: &str, mib: u64, cpus: u32) -> Duration {
    let gib = mib as f64 / 1024.0;
    let pairs = (f64::from(cpus) / 2.0).max(1.0);
    let secs = |c: &Cost| (c.fixed + c.per_gib * gib) * if c.all_cpus { pairs } else { 1.0 };
    let Some(run) = modes(append, mib) else {
        return FLOOR;
    };
    let total = secs(&BRING_UP)
        + COSTS
            .iter()
            .filter(|(m, _)| run.contains(*m))
            .map(|(_, c)| secs(c))
            .sum::<f64>();
    Duration::from_secs_f64(total * HEADROOM).max(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_the_kernel_knows_has_a_cost() {
        for (name, m, _) in cmdline::MODES {
            assert!(COSTS.iter().any(|(c, _)| c == m), "{name}");
        }
    }

    #[test]
    fn budgets_follow_memory_modes_and_cpus() {
        // Twice the RAM, more time; the same RAM, fewer modes, less.
        assert!(of("", 8192, 2) > of("", 4096, 2));
        assert!(of("", 4096, 2) > of("", 1024, 2));
        assert!(of("selftest", 1024, 2) < of("selftest migrate", 1024, 2));
        // Only `smp` keeps every CPU busy.
        assert!(of("smp", 1024, 4) > of("smp", 1024, 2));
        assert_eq!(of("selftest", 8192, 4), of("selftest", 8192, 2));
        // Small boots get the floor.
        assert_eq!(of("panic", 128, 2), FLOOR);
        assert_eq!(of("frobnicate", 8192, 2), FLOOR);
    }

    #[test]
    fn the_default_job_runs_giant_and_hotplug_only_when_they_fit() {
        let big = Modes::GIANT | Modes::HOTPLUG;
        let run = |append, mib| modes(append, mib).unwrap();
        assert!(!run("", 4096).intersects(big));
        assert!(run("", 6144).contains(big));
        // Named, they run (and fail) whatever the RAM.
        assert!(run("giant", 1024).contains(Modes::GIANT));
        assert_eq!(run("seed=7", 1024), Modes::DEFAULT - big);
        assert_eq!(modes("selftest frobnicate", 1024), None);
    }
}
