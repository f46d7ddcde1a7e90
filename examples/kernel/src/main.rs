//! pageframe example kernel: boots under QEMU (PVH), hands the machine's RAM
//! to `pageframe`, runs the modes the command line selects and reports on
//! the serial port, then exits QEMU with a pass/fail status.
#![no_std]
#![no_main]

extern crate alloc;

mod acpi;
mod bench;
mod boot;
mod bringup;
mod cmdline;
#[cfg(feature = "debug")]
mod debug;
mod exceptions;
mod giant;
mod giant_churn;
mod heap;
mod hot_add;
mod irq_lock;
mod memmap;
mod migrate;
mod paging;
mod permutation;
mod qemu;
mod report;
mod selftest;
mod serial;
mod smp;
mod smp_stress;
mod snapshot;
mod thp_swap;
mod time;
mod timer;
mod user_pages;
mod zones;

use boot::BootInfo;
use bringup::Memory;
use cmdline::{Modes, Options};
use core::fmt::Display;
use pageframe::Order;
use pageframe::tune::Placement;
use qemu::{ExitCode, exit};
use time::{Instant, TscRate};

/// Entered from the boot stub in long mode with the start-info address.
#[unsafe(no_mangle)]
extern "C" fn kernel_main(start_info: u64) -> ! {
    let entry = Instant::now();
    serial::init();
    exceptions::init();
    println!("pageframe kernel: booted (PVH), start info at {start_info:#x}");
    // SAFETY: `start_info` is what QEMU passed in %ebx; the boot tables
    // identity-map the first 4 GiB, where QEMU places it.
    let info = or_fail(unsafe { BootInfo::read(start_info) }, "boot info");
    println!("cmdline: {:?}", info.cmdline());
    let opts = match cmdline::parse(info.cmdline()) {
        Ok(o) => o,
        Err(e) => fail(format_args!("{e}; the kernel understands:{}", ModeList)),
    };
    let rate = TscRate::calibrate();
    println!(
        "tsc: {} MHz (calibrated against the PIT)",
        rate.hz() / 1_000_000
    );

    timer::init();
    let kernel = boot::kernel_image();
    report::boot(&info, kernel);
    // The bootstrap CPU's initial APIC id (CPUID leaf 1).
    let bsp = core::arch::x86_64::__cpuid(1).ebx >> 24;
    // SAFETY: the boot tables identity-map the first 4 GiB, where QEMU puts
    // the ACPI tables and the RSDP.
    let platform = match unsafe { acpi::Platform::read(info.rsdp, bsp) } {
        Ok(p) => p,
        Err(e) => {
            println!("acpi: {e}: one CPU, one node");
            acpi::Platform::single(bsp)
        }
    };
    report::platform(&platform);
    let mem = or_fail(
        bringup::bring_up(
            &info,
            kernel,
            opts.modes.contains(Modes::HOTPLUG),
            &platform,
        ),
        "bring-up",
    );
    let setup = entry.elapsed();
    if let Some(p) = opts.placement {
        mem.machine.tunables().set_fallback_placement(match p {
            cmdline::PlacementWord::Superpageblock => Placement::Superpageblock,
            cmdline::PlacementWord::Neighbour => Placement::Neighbour,
            cmdline::PlacementWord::Linux => Placement::Linux,
        });
    }
    report::memory(&mem, &info, &rate, setup);
    report::free_lists(mem.machine);
    or_fail(mem.machine.validate(), "validate after set-up");

    run_modes(&mem, &opts, &rate, &platform);
    println!(
        "guest time: {} from entry to exit",
        rate.duration(entry.elapsed())
    );
    println!("RESULT: PASS");
    exit(ExitCode::Pass)
}

/// Runs the selected modes in the order of [`cmdline::MODES`].
fn run_modes(mem: &Memory, opts: &Options, rate: &TscRate, platform: &acpi::Platform) {
    let machine = mem.machine;
    if opts.modes.contains(Modes::SELFTEST) {
        let t = Instant::now();
        let report = or_fail(
            selftest::run(machine, &mem.managed, mem.pfn_end(), opts.seed),
            "selftest",
        );
        report.print(rate);
        println!("selftest: PASS");
        took("selftest", t, rate);
    }
    if opts.modes.contains(Modes::BENCH) {
        let t = Instant::now();
        let free = machine.inspect().free_pages();
        for (order, batch) in [(0, 4096), (9, 64)] {
            let order = Order::new(order).expect("orders 0 and 9 exist");
            for path in [bench::Path::Zone, bench::Path::Cached] {
                let r = bench::run(machine, path, order, batch, free);
                println!("{}", or_fail(r, "bench"));
            }
        }
        or_fail(machine.validate(), "validate after bench");
        took("bench", t, rate);
    }
    if opts.modes.contains(Modes::MIGRATE) {
        let t = Instant::now();
        let mut runs = alloc::vec::Vec::new();
        for p in [0, 20, 100] {
            let params = migrate::Params {
                proactiveness: p,
                unmovable_every: 0,
                unmovable_per_block: 0,
                show_peak: false,
                ap_reader: false,
                show_map: p == 100,
            };
            runs.push(or_fail(
                migrate::run(machine, mem.pfn_end(), params),
                "migrate",
            ));
        }
        migrate::print(&runs, rate);
        println!("migrate: PASS");
        took("migrate", t, rate);
    }
    if opts.modes.contains(Modes::UNMOVABLE) {
        let t = Instant::now();
        let params = migrate::Params {
            proactiveness: 20,
            unmovable_every: 64,
            unmovable_per_block: 8,
            show_peak: true,
            ap_reader: false,
            show_map: false,
        };
        let run = or_fail(migrate::run(machine, mem.pfn_end(), params), "unmovable");
        migrate::print(core::slice::from_ref(&run), rate);
        migrate::print_mobility(machine, &run);
        println!("unmovable: PASS");
        took("unmovable", t, rate);
    }
    // The default run skips a mode that needs more memory than the guest
    // has; named on the command line, it runs (and fails).
    let too_small = |name: &str, needed: u64| {
        let free = machine.inspect().free_pages();
        let fits = !opts.defaulted || free >= needed;
        if !fits {
            println!(
                "{name}: skipped: needs {} MiB free, the guest has {} MiB free",
                needed.div_ceil(256),
                free / 256
            );
        }
        !fits
    };
    if opts.modes.contains(Modes::THP_SWAP) && !too_small("thp-swap", thp_swap::FRAMES_NEEDED) {
        let t = Instant::now();
        let r = or_fail(thp_swap::run(machine), "thp-swap");
        thp_swap::print(&r, rate);
        or_fail(machine.validate(), "validate after thp-swap");
        println!("thp-swap: PASS");
        took("thp-swap", t, rate);
    }
    if opts.modes.contains(Modes::SMP)
        && !too_small("smp", smp_stress::frames_needed(platform.apic_ids().len()))
    {
        let t = Instant::now();
        let r = or_fail(smp_stress::run(machine, rate, platform), "smp");
        smp_stress::print(&r, rate);
        or_fail(machine.validate(), "validate after smp");
        let params = migrate::Params {
            proactiveness: 0,
            unmovable_every: 0,
            unmovable_per_block: 0,
            show_peak: false,
            ap_reader: true,
            show_map: false,
        };
        let phase = Instant::now();
        let m = or_fail(migrate::run(machine, mem.pfn_end(), params), "smp migrate");
        let phase = phase.elapsed();
        migrate::print(core::slice::from_ref(&m), rate);
        println!(
            "smp: second CPU read {} pages during compaction, {} stale words, {} TLB shootdowns",
            m.ap_reads, m.ap_mismatches, m.shootdowns
        );
        println!(
            "smp: migration phase {}: {} pages migrated in {} batches, {} TLB shootdowns, {} per migrated page; \
             the second CPU waited on a page being migrated {} times",
            rate.duration(phase),
            m.migrated,
            m.batches,
            m.shootdowns,
            PerPage(m.shootdowns, m.migrated),
            m.migration_waits
        );
        println!("smp: PASS");
        took("smp", t, rate);
    }
    // The default run skips the 1 GiB and hotplug scenarios in guests too
    // small for them (named on the command line, they run and fail).
    let big = mem.hotplug.is_some()
        && machine
            .inspect()
            .node(bringup::NODE)
            .and_then(|n| n.zone(pageframe::ZoneKind::Normal))
            .is_some_and(|z| z.managed_pages() >= BIG_NORMAL);
    let skip = |name: &str| {
        println!(
            "{name}: skipped: the default run needs 2 GiB of RAM above 4 GiB for it (run.sh --mem 6G)"
        );
    };
    if opts.modes.contains(Modes::GIANT) && opts.defaulted && !big {
        skip("giant");
    } else if opts.modes.contains(Modes::GIANT) {
        let t = Instant::now();
        let r = or_fail(
            giant::run(machine, mem.pfn_end(), giant::Target::Giant),
            "giant",
        );
        giant::print(&r, rate);
        println!("giant: PASS");
        took("giant", t, rate);
    }
    if opts.modes.contains(Modes::HOTPLUG) && opts.defaulted && !big {
        skip("hotplug");
    } else if opts.modes.contains(Modes::HOTPLUG) {
        let t = Instant::now();
        let r = or_fail(
            giant::run(machine, mem.pfn_end(), giant::Target::Hotplug),
            "hotplug",
        );
        giant::print(&r, rate);
        let h = or_fail(hot_add::run(machine), "hot-add");
        hot_add::print(&h, rate);
        or_fail(machine.validate(), "validate after hotplug");
        println!("hotplug: PASS");
        took("hotplug", t, rate);
    }
    if opts.modes.contains(Modes::GIANT_CHURN) {
        let r = or_fail(
            giant_churn::run(machine, mem.pfn_end(), opts.seed),
            "giant-churn",
        );
        giant_churn::print(&r, rate);
        println!("giant-churn: PASS");
    }
    if opts.modes.contains(Modes::DEBUG) {
        run_debug(mem, rate);
    }
    if opts.modes.contains(Modes::PANIC) {
        panic!("panic requested on the command line");
    }
    if opts.modes.contains(Modes::FAULT) {
        // SAFETY: not safe on purpose: page 0 is unmapped, so this write
        // faults and the exception handler fails the run.
        unsafe { core::ptr::null_mut::<u64>().write_volatile(1) };
        fail(format_args!("the write to address 0 did not fault"));
    }
}

/// Reports a mode's guest time (`time: MODE DURATION`), the figure boot
/// tests size their budgets with.
fn took(mode: &str, t: Instant, rate: &TscRate) {
    println!("time: {mode} {}", rate.duration(t.elapsed()));
}

/// `n` events per `of` items as a decimal with four places (`0.0078`).
struct PerPage(u64, u64);

impl Display for PerPage {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let x = (u128::from(self.0) * 10_000)
            .checked_div(u128::from(self.1))
            .unwrap_or(0);
        write!(f, "{}.{:04}", x / 10_000, x % 10_000)
    }
}

/// The `debug` mode.
#[cfg(feature = "debug")]
fn run_debug(mem: &Memory, rate: &TscRate) {
    or_fail(
        debug::run(mem.machine, &mem.managed, mem.pfn_end(), rate),
        "debug",
    );
    or_fail(mem.machine.validate(), "validate after debug");
    println!("debug: PASS");
}

/// The `debug` mode in a kernel built without the tools: a failure that
/// says how to build it.
#[cfg(not(feature = "debug"))]
fn run_debug(_: &Memory, _: &TscRate) {
    fail(format_args!(
        "debug: this kernel was built without its debugging tools (cargo build --features debug)"
    ));
}

/// Frames of Normal zone the default run wants for `giant` and `hotplug`
/// (2 GiB).
const BIG_NORMAL: u64 = 1 << 19;

/// The command-line words, for the error message.
struct ModeList;

impl Display for ModeList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (name, _, what) in cmdline::MODES {
            write!(f, "\n  {name:<9} {what}")?;
        }
        write!(f, "\n  seed=N    seed of the self-test's random free order")?;
        write!(
            f,
            "\n  placement=superpageblock|neighbour|linux  where unmovable fallbacks go"
        )
    }
}

/// The value, or a reported failure naming `what`.
fn or_fail<T, E: Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(format_args!("{what}: {e}")),
    }
}

/// Reports a failed check and exits with the failure status.
pub fn fail(why: core::fmt::Arguments<'_>) -> ! {
    println!("FAILED: {why}");
    println!("RESULT: FAIL");
    exit(ExitCode::Fail)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    serial::write_fmt_unlocked(format_args!("\nPANIC: {info}\n"));
    println!("RESULT: FAIL (panic)");
    exit(ExitCode::Fail)
}
