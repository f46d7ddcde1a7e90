//! pageframe example kernel: boots under QEMU (PVH), hands the machine's RAM
//! to `pageframe`, runs the modes the command line selects and reports on
//! the serial port, then exits QEMU with a pass/fail status.
#![no_std]
#![no_main]

extern crate alloc;

mod bench;
mod boot;
mod cmdline;
mod exceptions;
mod heap;
mod memmap;
mod paging;
mod permutation;
mod qemu;
mod selftest;
mod serial;
mod shim;
mod snapshot;
mod time;
mod zones;

use shim as pf;

use boot::BootInfo;
use cmdline::{Modes, Options};
use memmap::{PAGE_SIZE, RangeSet};
use pf::{Gfp, Node, Order};
use qemu::{ExitCode, exit};
use spin::Once;
use time::{Instant, TscRate};
use zones::{ZONE_WINDOWS, ZoneSetup};

/// The node, shared by everything once set up.
static NODE: Once<Node<'static>> = Once::new();

/// Entered from the boot stub in long mode with the start-info address.
#[unsafe(no_mangle)]
extern "C" fn kernel_main(start_info: u64) -> ! {
    let t0 = Instant::now();
    serial::init();
    exceptions::init();
    println!("pageframe kernel: booted (PVH), start info at {start_info:#x}");
    // SAFETY: `start_info` is what QEMU passed in %ebx; the boot tables
    // identity-map the first 4 GiB, where QEMU places it.
    let info = unwrap_or_fail(unsafe { BootInfo::read(start_info) }, "boot info");
    println!("cmdline: {:?}", info.cmdline());
    let opts = match cmdline::parse(info.cmdline()) {
        Ok(o) => o,
        Err(e) => fail(format_args!("{e}; modes are:{}", ModeList)),
    };
    let rate = TscRate::calibrate();
    println!(
        "tsc: {} MHz (calibrated against the PIT)",
        rate.hz() / 1_000_000
    );

    let kernel = boot::kernel_image();
    println!("memory map ({} entries):", info.memmap.entries().len());
    print!("{}", info.memmap);
    let ram = unwrap_or_fail(info.memmap.ram(), "memory map");
    let ram_frames = info.memmap.ram_bytes() / PAGE_SIZE;
    println!(
        "RAM reported: {} MiB ({} frames)",
        info.memmap.ram_bytes() >> 20,
        ram_frames
    );
    println!("kept out: low memory [0-1 MiB), kernel image {kernel}");
    for r in info.boot_ranges() {
        println!("kept out: boot data {r}");
    }
    let mut reserved = [kernel; 1 + 16];
    reserved[1..=info.boot_ranges().len()].copy_from_slice(info.boot_ranges());
    let mut usable = unwrap_or_fail(
        zones::usable_ram(&ram, &reserved[..=info.boot_ranges().len()]),
        "usable RAM",
    );

    // DMA32 first: its RAM is reachable through the boot tables, so it can
    // feed the page tables that make RAM above 4 GiB reachable.
    let t_alloc = Instant::now();
    let mut node = Node::new();
    let mut setups: [Option<ZoneSetup>; 2] = [None, None];
    let (dma32_kind, dma32_window) = ZONE_WINDOWS[0];
    // SAFETY: usable RAM below 4 GiB is identity-mapped by the boot tables
    // and by the direct map that replaces them; nothing else uses it.
    match unwrap_or_fail(
        unsafe { zones::build_zone(dma32_kind, dma32_window, &mut usable) },
        "DMA32 zone",
    ) {
        Some((zone, setup)) => {
            unwrap_or_fail(node.add_zone(zone), "adding DMA32");
            setups[0] = Some(setup);
        }
        None => fail(format_args!("no usable RAM below 4 GiB")),
    }
    let dma32_init = t_alloc.elapsed();

    let t_map = Instant::now();
    let mut frames = pf::x86_64::FrameAdapter::new(&node, Gfp::DMA32);
    // SAFETY: `ram` is all RAM, which holds everything the kernel touches
    // (image, stack, metadata); the adapter hands out unused DMA32 frames.
    let map = unwrap_or_fail(
        unsafe { paging::build_and_switch(&ram, kernel, &mut frames) },
        "direct map",
    );
    let map_time = t_map.elapsed();

    let t_normal = Instant::now();
    let (normal_kind, normal_window) = ZONE_WINDOWS[1];
    // SAFETY: RAM above 4 GiB is now identity-mapped by the direct map.
    if let Some((zone, setup)) = unwrap_or_fail(
        unsafe { zones::build_zone(normal_kind, normal_window, &mut usable) },
        "Normal zone",
    ) {
        unwrap_or_fail(node.add_zone(zone), "adding Normal");
        setups[1] = Some(setup);
    }
    let normal_init = t_normal.elapsed();
    let node: &'static Node<'static> = NODE.call_once(|| node);
    let small_heap = unwrap_or_fail(heap::init(node), "kernel heap");
    let setup_time = t0.elapsed();

    // The report: zones, overhead, times, free lists.
    let mut managed = 0;
    let mut meta_bytes = 0;
    let mut pfn_end = 0;
    for s in setups.iter().flatten() {
        let zone = node
            .zones()
            .find(|z| z.kind() == s.kind)
            .expect("zone was added");
        managed += zone.managed_pages();
        meta_bytes += s.metadata_bytes as u64;
        pfn_end = pfn_end.max(s.span.end.get());
        println!(
            "zone {:?}: span pfn {:#x}..{:#x} ({} frames), managed {} frames ({} MiB) in {} ranges, metadata {} KiB at {}, init {}",
            s.kind,
            s.span.start.get(),
            s.span.end.get(),
            s.span.len(),
            zone.managed_pages(),
            zone.managed_pages() * PAGE_SIZE >> 20,
            s.ranges,
            s.metadata_bytes >> 10,
            s.metadata,
            rate.duration(s.cycles),
        );
    }
    println!(
        "frames managed: {managed} of {ram_frames} RAM frames ({})",
        Ratio(managed, ram_frames)
    );
    println!(
        "metadata: {meta_bytes} bytes, {} bytes per managed frame ({} of managed RAM)",
        meta_bytes / managed.max(1),
        Ratio(meta_bytes, managed * PAGE_SIZE)
    );
    println!(
        "allocator init: {} (DMA32 {}, Normal {})",
        rate.duration(dma32_init.plus(normal_init)),
        rate.duration(dma32_init),
        rate.duration(normal_init)
    );
    println!(
        "direct map: {} x 2 MiB + {} x 4 KiB pages, {} table frames from the allocator, built in {}",
        map.huge_pages,
        map.small_pages,
        map.table_frames,
        rate.duration(map_time)
    );
    println!(
        "heap: {} KiB small-object arena + page blocks, all from the allocator",
        small_heap >> 10
    );
    println!(
        "setup: {} from entry to allocator, page tables and heap ready",
        rate.duration(setup_time)
    );
    println!("buddyinfo:");
    print!("{}", node.buddyinfo());
    unwrap_or_fail(node.validate(), "validate after set-up");

    run_modes(node, &opts, &usable, pfn_end, &rate);
    println!(
        "guest time: {} from entry to exit",
        rate.duration(t0.elapsed())
    );
    println!("RESULT: PASS");
    exit(ExitCode::Pass)
}

/// Runs the selected modes in the order of [`cmdline::MODES`].
fn run_modes(
    node: &'static Node<'static>,
    opts: &Options,
    managed: &RangeSet,
    pfn_end: u64,
    rate: &TscRate,
) {
    if opts.modes.contains(Modes::SELFTEST) {
        let report = unwrap_or_fail(selftest::run(node, managed, pfn_end, opts.seed), "selftest");
        report.print(rate);
        println!("selftest: PASS");
    }
    if opts.modes.contains(Modes::BENCH) {
        let free = snapshot::Snapshot::take(node).free_pages();
        for (order, batch) in [(0, 4096), (9, 64)] {
            let order = Order::new(order).expect("valid order");
            let result = unwrap_or_fail(bench::run(node, order, batch, free), "bench");
            println!("{result}");
        }
        unwrap_or_fail(node.validate(), "validate after bench");
    }
    if opts.modes.contains(Modes::PANIC) {
        panic!("panic requested on the command line");
    }
    if opts.modes.contains(Modes::FAULT) {
        // SAFETY: deliberately not safe: page 0 is unmapped, so this write
        // faults and the exception handler fails the run.
        unsafe { core::ptr::null_mut::<u64>().write_volatile(1) };
        fail(format_args!("the write to address 0 did not fault"));
    }
}

/// The mode words, for the error message.
struct ModeList;

impl core::fmt::Display for ModeList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for (name, _, what) in cmdline::MODES {
            write!(f, "\n  {name:<9} {what}")?;
        }
        write!(f, "\n  seed=N    seed of the self-test's random free order")
    }
}

/// `a / b` as a percentage with two decimals.
struct Ratio(u64, u64);

impl core::fmt::Display for Ratio {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let bp = u128::from(self.0) * 10_000 / u128::from(self.1.max(1));
        write!(f, "{}.{:02}%", bp / 100, bp % 100)
    }
}

/// The value, or a reported failure naming `what`.
fn unwrap_or_fail<T, E: core::fmt::Debug>(r: Result<T, E>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => fail(format_args!("{what}: {e:?}")),
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
