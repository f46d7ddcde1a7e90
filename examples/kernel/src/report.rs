//! The serial report. Lines start with stable prefixes (`zone `,
//! `frames managed:`, `selftest:`, `bench:`, `RESULT:`) that the host boot
//! test reads.

use crate::boot::BootInfo;
use crate::bringup::KernelMachine;
use crate::bringup::Memory;
use crate::memmap::{PAGE_SIZE, PhysRange};
use crate::println;
use crate::time::{Cycles, TscRate};
use core::fmt;
use pageframe::zone::Mark;

/// The firmware map and what stays out of the allocator.
pub fn boot(info: &BootInfo, kernel: PhysRange) {
    println!("memory map ({} entries):", info.memmap.entries().len());
    crate::print!("{}", info.memmap);
    println!(
        "RAM reported: {} MiB ({} frames)",
        info.memmap.ram_bytes() >> 20,
        info.memmap.ram_bytes() / PAGE_SIZE
    );
    println!("kept out: low memory [0-1 MiB), kernel image {kernel}");
    for r in info.boot_ranges() {
        println!("kept out: boot data {r}");
    }
}

/// CPUs and NUMA nodes, as the ACPI tables describe them.
pub fn platform(p: &crate::acpi::Platform) {
    println!(
        "acpi: {} CPUs (APIC ids {:?}{}), {} NUMA node(s)",
        p.apic_ids().len(),
        p.apic_ids(),
        if p.cpus_ignored > 0 {
            ", more ignored"
        } else {
            ""
        },
        p.nodes
    );
    for (i, _) in p.apic_ids().iter().enumerate() {
        if p.nodes > 1 {
            println!("acpi: cpu{i} on node {}", p.cpu_node(i));
        }
    }
    for m in p.memory() {
        println!(
            "acpi: node {} memory {:#x}..{:#x} ({} MiB)",
            m.node,
            m.base,
            m.base + m.len,
            m.len >> 20
        );
    }
}

/// Zones, overhead and set-up times.
pub fn memory(mem: &Memory, info: &BootInfo, rate: &TscRate, setup: Cycles) {
    let machine = mem.machine;
    for s in mem.zones() {
        let Some(zone) = machine.inspect().node(s.node).and_then(|n| n.zone(s.kind)) else {
            continue;
        };
        println!(
            "zone {} node {}: span pfn {:#x}..{:#x} ({} frames), managed {} frames ({} MiB) from {} usable range(s), \
             metadata {} KiB at {}",
            s.kind.name(),
            s.node.index(),
            s.span.start.get(),
            s.span.end.get(),
            s.span.len(),
            zone.managed_pages(),
            (zone.managed_pages() * PAGE_SIZE) >> 20,
            mem.managed.frames().clipped(s.span).ranges().len(),
            s.metadata_bytes >> 10,
            crate::memmap::PhysRange::new(
                s.metadata.start.addr().get(),
                s.metadata.end.addr().get()
            ),
        );
    }
    let ram_frames = info.memmap.ram_bytes() / PAGE_SIZE;
    let managed = machine.inspect().managed_pages();
    let meta: u64 = mem.zones().map(|s| s.metadata_bytes as u64).sum();
    println!(
        "frames managed: {managed} of {ram_frames} RAM frames ({})",
        Percent(managed, ram_frames)
    );
    println!(
        "metadata: {meta} bytes, {} bytes per managed frame, {} of managed RAM",
        Decimal2(meta * 100 / managed.max(1)),
        Percent(meta, managed * PAGE_SIZE)
    );
    println!(
        "per-CPU caches: {} CPUs, {} KiB at {}",
        machine.inspect().pcp_cpus(),
        mem.pcp.0 >> 10,
        mem.pcp.1
    );
    println!(
        "allocator init: {} (planned, machine and zones built in carved memory, RAM handed over)",
        rate.duration(mem.allocator_init())
    );
    println!(
        "direct map: {} x 2 MiB + {} x 4 KiB pages, {} table frames from the allocator, root {:#x}, built in {}",
        mem.map.huge_pages,
        mem.map.small_pages,
        mem.map.table_frames,
        mem.map.root,
        rate.duration(mem.map_cycles)
    );
    println!(
        "heap: {} KiB small-object arena + whole blocks for requests of a page or more",
        mem.small_heap >> 10
    );
    println!(
        "setup: {} from entry to allocator, page tables and heap ready",
        rate.duration(setup)
    );
}

/// `/proc/buddyinfo`, `/proc/pagetypeinfo` and the watermarks.
pub fn free_lists(machine: &KernelMachine) {
    println!("buddyinfo:");
    crate::print!("{}", machine.inspect().buddyinfo());
    println!("pagetypeinfo:");
    for zone in machine.inspect().all_zones() {
        crate::print!("{}", zone.pagetypeinfo());
    }
    for zone in machine.inspect().all_zones() {
        let w = zone.watermarks();
        println!(
            "zone {} watermarks: min {} low {} high {} pages, free {}",
            zone.kind().name(),
            w.get(Mark::Min),
            w.get(Mark::Low),
            w.get(Mark::High),
            zone.free_pages()
        );
    }
}

/// `a / b` as a percentage with two decimals.
struct Percent(u64, u64);

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hundredths = u128::from(self.0) * 10_000 / u128::from(self.1.max(1));
        write!(f, "{}%", Decimal2(hundredths as u64))
    }
}

/// A value in hundredths, printed with two decimals.
struct Decimal2(u64);

impl fmt::Display for Decimal2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.0 / 100, self.0 % 100)
    }
}
