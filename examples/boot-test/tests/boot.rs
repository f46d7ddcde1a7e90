//! Boots the example kernel in QEMU and checks its verdict and report.
//!
//! The kernel is built once per test binary (release, its own target
//! directory). QEMU must be installed: these tests fail, not skip, without
//! it (`apt-get install -y --no-install-recommends qemu-system-x86`).

use pageframe_boot_test::{Boot, BootConfig, Verdict, boot, build_kernel, build_kernel_with};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The kernel ELF, built on first use.
fn kernel() -> PathBuf {
    static ELF: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ELF.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernel-target");
        build_kernel(&dir).map_err(|e| e.to_string())
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Boots with `mem` RAM and `append` on two CPUs.
fn run(mem: &str, append: &str) -> Boot {
    run_with(&BootConfig::new(mem, append))
}

/// Boots `cfg`. Boots that touch gigabytes run one at a time, so the host
/// never holds two large guests at once.
fn run_with(cfg: &BootConfig) -> Boot {
    static LARGE: Mutex<()> = Mutex::new(());
    let elf = kernel();
    let large = cfg.mem.ends_with('G');
    let _guard = large.then(|| LARGE.lock().unwrap_or_else(|e| e.into_inner()));
    let b = boot(&elf, cfg).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "-m {} -smp {} numa {} {:?}: {:?} in {:.2} s\n{}{}",
        cfg.mem,
        cfg.smp,
        cfg.numa,
        cfg.append,
        b.verdict,
        b.elapsed.as_secs_f64(),
        b.serial,
        b.stderr
    );
    b
}

/// `frames managed: M of R RAM frames` -> (M, R).
fn managed(b: &Boot) -> (u64, u64) {
    let line = b.line("frames managed: ").expect("frames managed line");
    let mut words = line.split_whitespace();
    let m = words
        .next()
        .and_then(|w| w.parse().ok())
        .expect("managed count");
    let r = words
        .nth(1)
        .and_then(|w| w.parse().ok())
        .expect("RAM count");
    (m, r)
}

/// `selftest: allocated N frames (.. MiB), A above 4 GiB, ..` -> (N, A).
fn allocated(b: &Boot) -> (u64, u64) {
    let n = b.value("selftest: allocated ").expect("allocated count");
    let line = b.line("selftest: allocated ").expect("allocated line");
    let above = line
        .split(", ")
        .find_map(|part| part.strip_suffix(" above 4 GiB"))
        .and_then(|w| w.parse().ok())
        .expect("frames above 4 GiB");
    (n, above)
}

/// Checks shared by every passing self-test boot; returns managed frames.
fn assert_selftest_passed(b: &Boot) -> u64 {
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert!(b.serial.contains("\nselftest: PASS\n"), "self-test verdict");
    assert!(b.serial.ends_with("RESULT: PASS\n"), "last line");
    assert!(b.line("buddyinfo:").is_some() && b.line("Node 0, ").is_some());
    assert!(b.line("pagetypeinfo").is_some());
    let (managed, ram) = managed(b);
    // Kept out: low memory (1 MiB), the kernel image, about 5 bytes of
    // metadata per frame (0.13%): at least 99% of a 2 GiB guest's RAM.
    assert!(managed <= ram, "more frames managed than RAM");
    // Every frame free at the start was allocated once; only the heap's
    // blocks, the bitmap and the page tables were in use.
    let (n, _) = allocated(b);
    assert!(
        n <= managed && n + 1024 >= managed,
        "allocated {n} of {managed}"
    );
    managed
}

#[test]
fn two_gib_selftest_and_bench_pass() {
    let b = run("2G", "selftest bench");
    let managed = assert_selftest_passed(&b);
    let (_, ram) = self::managed(&b);
    assert!(managed * 100 >= ram * 99, "managed {managed} of {ram}");
    assert!(b.line("zone DMA32 node 0: ").is_some());
    assert!(
        b.line("zone Normal node 0: ").is_none(),
        "no RAM above 4 GiB at -m 2G"
    );
    assert_eq!(allocated(&b).1, 0);
    for order in [0, 9] {
        for path in ["zone  ", "cached"] {
            let line = b
                .line(&format!("bench: order {order} {path} alloc "))
                .unwrap_or_else(|| panic!("bench line for order {order} through {path}"));
            let cycles: u64 = line
                .split_whitespace()
                .next()
                .and_then(|w| w.parse().ok())
                .unwrap();
            assert!(cycles > 0);
        }
    }
}

#[test]
fn small_guest_passes() {
    let b = run("128M", "selftest");
    assert_selftest_passed(&b);
}

/// Guests too small for a mode: the default job passes, each mode that
/// does not fit saying why it skips, and the self-test runs in 4 MiB.
#[test]
fn tiny_guests_pass_and_say_what_they_skip() {
    let b = run("8M", "");
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert_selftest_passed(&b);
    for mode in ["thp-swap", "smp"] {
        let line = b
            .line(&format!("{mode}: skipped: needs "))
            .unwrap_or_else(|| panic!("{mode} says it skips"));
        assert!(line.contains("MiB free, the guest has "), "{line}");
        assert!(!b.serial.contains(&format!("\n{mode}: PASS\n")));
    }
    let b = run("4M", "selftest");
    assert_selftest_passed(&b);
}

/// A CPU without 1 GiB pages (`qemu64` lacks `pdpe1gb`): the 1 GiB range
/// is taken all the same and mapped with 2 MiB entries, and the run says
/// so.
#[test]
fn giant_maps_2_mib_pages_on_a_cpu_without_1_gib_pages() {
    let b = run_with(&BootConfig {
        cpu: "qemu64".to_owned(),
        ..BootConfig::new("6G", "giant")
    });
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert!(b.serial.contains("\ngiant: PASS\n"), "giant verdict");
    assert!(b.line("giant: 1 GiB page at pfn ").is_some());
    assert!(
        b.serial.contains(
            "giant: the CPU has no 1 GiB pages (no pdpe1gb): written through 512 2 MiB mappings"
        ),
        "the mapping line"
    );
}

/// The i440fx board (`-machine pc`): the default job, the smp phase with
/// its TLB shootdowns included, passes as on q35.
#[test]
fn the_pc_board_runs_the_default_job() {
    let b = run_with(&BootConfig {
        machine: "pc".to_owned(),
        ..BootConfig::new("1G", "")
    });
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert_selftest_passed(&b);
    assert!(b.serial.contains("\nsmp: PASS\n"), "smp verdict");
    assert_batched_shootdowns(&b);
}

/// The `debug` mode (a kernel built with its debugging tools): each tool
/// shows what it is for, on the guest's RAM.
#[test]
fn debug_mode_shows_each_tool_at_work() {
    let elf = {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernel-debug-target");
        build_kernel_with(&dir, &["debug"]).unwrap_or_else(|e| panic!("{e}"))
    };
    let cfg = BootConfig::new("512M", "debug");
    let b = boot(&elf, &cfg).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}{}", b.serial, b.stderr);
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    // vmstat and zoneinfo in Linux's words.
    for line in [
        "  nr_free_pages ",
        "  pgalloc_dma32 ",
        "  compact_stall ",
        "  pcp_refill ",
    ] {
        assert!(b.serial.contains(line), "vmstat line {line:?}");
    }
    assert!(
        b.serial
            .contains("  Node 0, zone    DMA32\n    pages free     ")
    );
    assert!(b.serial.contains("    pagesets\n      cpu: 0\n"));
    // The trace counted every allocation of the workload, by order.
    let order0 = b.line("  order  0: ").expect("order-0 row");
    let (got, want) = order0.split_once(" / ").expect("events / done");
    assert_eq!(got.trim(), want.trim());
    assert!(b.line("  <     ").is_some(), "latency histogram");
    // The owner records found the one leak, at the driver's call site.
    let leak = b
        .line("debug: leak found: order 3 at pfn ")
        .expect("leak line");
    // The site is the kernel's debug module (`leaky_driver`).
    assert!(leak.contains("debug.rs:"), "{leak}");
    // The self-test passed with failures injected, each one handled.
    assert!(b.line("selftest: validate ok").is_some());
    let injected: u64 = b
        .line("debug: fault injection: ")
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .expect("injected count");
    assert!(injected > 0);
    // The write after the free was caught, naming the frame and the
    // victim's owner tag.
    let uaf = b
        .line("debug: use after free caught: write at ")
        .expect("use-after-free line");
    assert!(uaf.contains("last owner tag 0x7a6"), "{uaf}");
    assert!(b.serial.contains("debug: PASS"));
}

/// A kernel built without the tools refuses the mode, saying how to build
/// it.
#[test]
fn debug_mode_needs_the_debug_build() {
    let b = run("128M", "debug");
    assert_eq!(b.verdict, Verdict::Fail);
    assert!(b.serial.contains("cargo build --features debug"));
}

#[test]
fn panic_fails_the_run() {
    let b = run("128M", "panic");
    assert_eq!(b.verdict, Verdict::Fail);
    assert!(b.serial.contains("PANIC: "), "panic message");
    assert!(b.serial.contains("RESULT: FAIL"));
}

#[test]
fn page_fault_fails_the_run() {
    let b = run("128M", "fault");
    assert_eq!(b.verdict, Verdict::Fail);
    let line = b.line("EXCEPTION vector ").expect("exception report");
    assert!(line.starts_with("14 "), "a page fault: {line}");
    assert!(line.ends_with("cr2 0x0"), "at address 0: {line}");
}

#[test]
fn unknown_command_line_word_fails() {
    let b = run("128M", "selftest frobnicate");
    assert_eq!(b.verdict, Verdict::Fail);
    assert!(
        b.serial
            .contains("unknown command-line word \"frobnicate\"")
    );
    assert!(b.line("selftest: ").is_none(), "nothing ran");
}

/// One row of the `migrate:` table, split on ` | `.
struct MigrateRow {
    proactiveness: u32,
    blocks: u64,
    share_percent: f64,
    captured: u64,
    migrated: u64,
    migrated_proactive: u64,
    score: Option<(u32, u32)>,
}

fn migrate_rows(b: &Boot) -> Vec<MigrateRow> {
    b.serial
        .lines()
        .filter_map(|l| l.strip_prefix("migrate: p="))
        .map(|l| {
            let f: Vec<&str> = l.split(" | ").map(str::trim).collect();
            let num = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("{s:?} in {l}"));
            let (moved, proactive) = f[6].split_once(" (").expect("migrated (proactive)");
            MigrateRow {
                proactiveness: f[0].parse().expect("proactiveness"),
                blocks: num(f[3]),
                share_percent: f[4].trim_end_matches('%').parse().expect("share"),
                captured: num(f[5]),
                migrated: num(moved),
                migrated_proactive: num(proactive.trim_end_matches(')')),
                score: f[7]
                    .split_once("->")
                    .map(|(a, b)| (a.parse().expect("score"), b.parse().expect("score"))),
            }
        })
        .collect()
}

/// The pageblock characters of each fragmentation map printed.
fn fragmentation_maps(b: &Boot) -> Vec<String> {
    let mut maps = Vec::new();
    let mut lines = b.serial.lines().peekable();
    while let Some(l) = lines.next() {
        if !l.starts_with("migrate: fragmentation map of zone ") {
            continue;
        }
        let mut map = String::new();
        while let Some(row) = lines.next_if(|r| r.starts_with("0x")) {
            map.push_str(row.split_whitespace().nth(1).unwrap_or(""));
        }
        maps.push(map);
    }
    maps
}

#[test]
fn migration_builds_2m_blocks_from_mapped_pages() {
    let b = run("256M", "migrate unmovable");
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert!(b.serial.contains("\nmigrate: PASS\n"), "migrate verdict");
    assert!(
        b.serial.contains("\nunmovable: PASS\n"),
        "unmovable verdict"
    );
    let rows = migrate_rows(&b);
    let ps: Vec<u32> = rows.iter().map(|r| r.proactiveness).collect();
    assert_eq!(
        ps,
        [0, 20, 100, 20],
        "three migrate runs, one unmovable run"
    );
    for r in &rows {
        // Every 2 MiB block kept a page in four, so no block is free
        // without migration: most of the free memory comes back as 2 MiB
        // blocks only if pages really moved (and their data was verified).
        assert!(r.migrated > 0, "pages moved at p={}", r.proactiveness);
        assert!(
            r.blocks > 0 && r.share_percent >= 50.0,
            "share {}",
            r.share_percent
        );
    }
    assert!(rows[0].score.is_none() && rows[0].migrated_proactive == 0);
    for r in &rows[1..] {
        let (before, after) = r.score.expect("proactive score");
        assert!(after < before, "proactive run lowered the score");
        assert!(r.migrated_proactive > 0);
    }
    // Proactiveness 100 compacts (almost) everything before the requests,
    // so fewer of them need direct compaction than with proactiveness 0.
    assert!(rows[2].captured < rows[0].captured);
    // The p=100 run draws the zone before and after: partly used movable
    // pageblocks ('m') become free ('.') and full ('M') ones.
    let maps = fragmentation_maps(&b);
    assert_eq!(maps.len(), 2, "a map before and after compaction");
    let count = |m: &str, c: char| m.chars().filter(|&x| x == c).count();
    assert_eq!(
        maps[0].len(),
        maps[1].len(),
        "one character a pageblock each time"
    );
    assert!(count(&maps[0], 'm') > count(&maps[1], 'm') * 4, "{maps:?}");
    assert!(count(&maps[1], '.') > count(&maps[0], '.') * 4, "{maps:?}");
    assert!(count(&maps[1], 'M') > 0, "{maps:?}");
    let fallback = b
        .serial
        .lines()
        .find(|l| l.starts_with("unmovable: ") && l.contains(" fallback: own "))
        .expect("fallback counters");
    let own: u64 = fallback
        .split(" fallback: own ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .expect("own count");
    assert!(own > 0, "{fallback}");
    assert!(
        b.line("unmovable: pagetypeinfo zone DMA32 with everything allocated:")
            .is_some()
    );
}

#[test]
fn thp_swaps_out_and_in_whole_and_split() {
    let b = run("256M", "thp-swap");
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert!(b.serial.contains("\nthp-swap: PASS\n"), "thp-swap verdict");
    for path in ["whole", "split in", "split out"] {
        let line = b
            .line(&format!("thp-swap: {path:<9} | "))
            .unwrap_or_else(|| panic!("row for {path}"));
        let times: Vec<u64> = line
            .split(" | ")
            .map(|w| w.trim().parse().expect("microseconds"))
            .collect();
        assert_eq!(times.len(), 2, "{line}");
    }
    // One untimed and 15 timed trips per path: every whole-path swap-in was
    // read back whole, every split-path one fell back, each fallback split
    // its huge entry, and the base-slot path never made a huge entry.
    let counters = b.line("thp-swap: device counters: ").expect("counters");
    assert_eq!(counters, "huge swap-ins 16 fallbacks 16 splits 16");
}

/// One CPU's row of the `smp:` table.
struct SmpRow {
    node: u64,
    allocs: u64,
    local: u64,
    hits: u64,
    cross: u64,
    high: u64,
}

/// Checks the `smp` mode's verdict and table for `cpus` CPUs; returns the
/// rows.
fn assert_smp_passed(b: &Boot, cpus: usize) -> Vec<SmpRow> {
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    assert!(b.serial.contains("\nsmp: PASS\n"), "smp verdict");
    assert!(
        b.line(&format!("smp: {cpus} CPUs up; ")).is_some(),
        "bring-up line"
    );
    let rows: Vec<SmpRow> = (0..cpus)
        .map(|cpu| {
            let row = b
                .line(&format!("smp: cpu{cpu} | "))
                .unwrap_or_else(|| panic!("row for cpu{cpu}"));
            let f: Vec<&str> = row.split(" | ").collect();
            let num = |i: usize| {
                f[i].trim()
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("{row}"))
            };
            let (lo, hi) = f[10].split_once("..").expect("high bounds lo..hi");
            let (lo, hi): (u64, u64) = (lo.parse().unwrap(), hi.parse().unwrap());
            let r = SmpRow {
                node: num(0),
                allocs: num(1),
                local: num(2),
                hits: num(3),
                cross: num(8),
                high: num(9),
            };
            // 600 rounds of 64 blocks; every one counted by the cache.
            assert_eq!(r.allocs, 600 * 64, "{row}");
            // A contiguous range every 150 rounds, each draining every
            // CPU's caches while the others do the same.
            assert_eq!(f[11].trim(), "4", "contiguous ranges: {row}");
            assert!(
                r.hits * 2 > r.allocs,
                "most allocations hit the cache: {row}"
            );
            assert!(r.cross > 0, "frames freed by another CPU: {row}");
            assert!((lo..=hi).contains(&r.high), "high {} in {lo}..{hi}", r.high);
            // The stress holds little: every CPU's own node serves it.
            assert_eq!(r.local, r.allocs, "{row}");
            r
        })
        .collect();
    assert!(
        b.line(&format!("smp: cpu{cpus} | ")).is_none(),
        "{cpus} rows only"
    );
    rows
}

/// The `smp` mode's migration phase, CPU 1 reading user pages while CPU 0
/// compacts: no stale word, and TLB shootdowns batched, fewer than one per
/// 32 migrated pages.
fn assert_batched_shootdowns(b: &Boot) {
    let reads = b
        .line("smp: second CPU read ")
        .expect("the shootdown phase");
    assert!(reads.contains(", 0 stale words, "), "{reads}");
    let line = b
        .line("smp: migration phase ")
        .expect("the migration phase's figures");
    let num = |after: &str| -> u64 {
        line.split(after)
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("{after:?} in {line}"))
    };
    let (pages, batches, shootdowns) = (
        num(" pages migrated"),
        num(" batches"),
        num(" TLB shootdowns"),
    );
    assert!(pages > 0 && shootdowns > 0, "{line}");
    assert!(
        shootdowns <= batches,
        "one shootdown a batch at most: {line}"
    );
    assert!(shootdowns * 32 < pages, "shootdowns per page: {line}");
}

#[test]
fn two_cpus_stress_their_own_caches() {
    let b = run("256M", "smp");
    assert_batched_shootdowns(&b);
    assert!(
        b.serial
            .contains("acpi: 2 CPUs (APIC ids [0, 1]), 1 NUMA node(s)")
    );
    for r in assert_smp_passed(&b, 2) {
        assert_eq!(r.node, 0);
    }
}

/// Four CPUs on two NUMA nodes, described to the kernel by ACPI (MADT and
/// SRAT): a zone per node, every CPU allocating from its own node.
#[test]
fn four_cpus_on_two_numa_nodes_allocate_from_their_own_node() {
    let cfg = BootConfig {
        smp: 4,
        numa: 2,
        ..BootConfig::new("1G", "selftest smp")
    };
    let b = run_with(&cfg);
    assert_selftest_passed(&b);
    assert!(
        b.serial
            .contains("acpi: 4 CPUs (APIC ids [0, 1, 2, 3]), 2 NUMA node(s)"),
        "ACPI line"
    );
    for cpu in 0..4 {
        let line = format!("acpi: cpu{cpu} on node {}", cpu / 2);
        assert!(b.serial.contains(&line), "{line}");
    }
    // Node 1 starts at 512 MiB.
    let node1 = b.line("zone DMA32 node 1: ").expect("node 1's zone");
    assert!(node1.starts_with("span pfn 0x20000.."), "{node1}");
    assert!(b.line("zone DMA32 node 0: ").is_some(), "node 0's zone");
    for (cpu, r) in assert_smp_passed(&b, 4).iter().enumerate() {
        assert_eq!(r.node, cpu as u64 / 2, "cpu{cpu}'s node");
    }
}

/// The `giant` and `hotplug` modes' reports: a 1 GiB page, 256 MiB offline
/// and online, and 256 MiB hot-added, user data kept throughout.
fn assert_giant_and_hotplug(b: &Boot) {
    assert!(b.serial.contains("\ngiant: PASS\n"), "giant verdict");
    let line = b
        .line("giant: 1 GiB page at pfn ")
        .expect("the page's line");
    let start = u64::from_str_radix(
        line.split_whitespace()
            .next()
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .expect("pfn");
    assert_eq!(start % (1 << 18), 0, "1 GiB aligned: {line}");
    // One user page in four was kept everywhere: a quarter of the range's
    // frames moved out, each once.
    let moved: u64 = line
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("moved count");
    assert!(moved <= (1 << 18) / 4 + 512, "{line}");
    assert!(
        b.serial
            .contains("giant: written through one 1 GiB mapping")
    );
    assert!(b.serial.contains("\nhotplug: PASS\n"), "hotplug verdict");
    let line = b
        .line("hotplug: 256 MiB at pfn ")
        .expect("the offline line");
    let moved: u64 = line
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("moved count");
    // A quarter of the range's frames held user pages: each moved once.
    assert!(moved > 0 && moved <= (1 << 16) / 4 + 512, "{line}");
    // The 256 MiB kept out at boot arrive as the Movable zone, holding
    // their own metadata; a workload fills half, the upper half goes out.
    let line = b
        .line("hot-add: 256 MiB at pfn ")
        .expect("the hot-add line");
    let meta: u64 = line
        .split("own first ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("metadata frames");
    assert!((1..=1024).contains(&meta), "{line}");
    assert!(
        line.contains(&format!("{} frames onlined", (1 << 16) - meta)),
        "{line}"
    );
    assert!(
        b.serial.lines().any(|l| l.starts_with("hot-add: ")
            && l.contains("pages written into it")
            && l.ends_with("every page verified, back online")),
        "the workload line"
    );
}

/// README's main job: with no mode word the kernel runs every subsystem in
/// one boot (a 6 GiB guest, as `run.sh` gives it).
#[test]
fn the_main_job_runs_every_subsystem_in_one_boot() {
    let b = run("6G", "");
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    // RAM above 4 GiB: a Normal zone, and the self-test reaches it.
    assert_selftest_passed(&b);
    let normal = b
        .line("zone Normal node 0: ")
        .expect("a Normal zone at -m 6G");
    assert!(normal.starts_with("span pfn 0x100000.."), "{normal}");
    let (_, above) = allocated(&b);
    // q35 puts 4 GiB of a 6 GiB guest above 4 GiB; the main job keeps the
    // top 256 MiB out for the hot-add.
    assert!(
        above > (1 << 20) - (1 << 16) - 1024,
        "{above} frames above 4 GiB"
    );
    assert_giant_and_hotplug(&b);
    // On one node the 1 GiB page comes out of memory holding user pages.
    let giant = b.line("giant: 1 GiB page at pfn ").expect("giant line");
    assert!(!giant.contains(", 0 user pages migrated"), "{giant}");
    for mode in [
        "selftest",
        "migrate",
        "unmovable",
        "thp-swap",
        "smp",
        "giant",
        "hotplug",
    ] {
        assert!(
            b.serial.contains(&format!("\n{mode}: PASS\n")),
            "{mode} verdict"
        );
    }
    assert!(
        b.serial.contains("\nbench: order 0 cached alloc "),
        "bench table"
    );
    assert_eq!(
        fragmentation_maps(&b).len(),
        2,
        "maps before and after compaction"
    );
    assert!(b.line("hot-add: 256 MiB at pfn ").is_some(), "hot-add line");
    assert!(!b.serial.contains("skipped"), "nothing skipped at 6 GiB");
}

/// The main job on the largest guest the tests boot: 8 GiB on four CPUs in
/// two NUMA nodes (node 1 above 4 GiB, no DMA32 zone), every mode.
#[test]
fn every_mode_passes_at_8_gib_on_two_numa_nodes() {
    let cfg = BootConfig {
        smp: 4,
        numa: 2,
        ..BootConfig::new("8G", "")
    };
    let b = run_with(&cfg);
    assert_eq!(b.verdict, Verdict::Pass, "kernel verdict");
    for mode in [
        "selftest",
        "migrate",
        "unmovable",
        "thp-swap",
        "smp",
        "giant",
        "hotplug",
    ] {
        assert!(
            b.serial.contains(&format!("\n{mode}: PASS\n")),
            "{mode} verdict"
        );
    }
    assert!(!b.serial.contains("skipped"), "nothing skipped at 8 GiB");
    assert_giant_and_hotplug(&b);
    assert!(
        b.line("zone Normal node 0: ").is_some(),
        "node 0 above 4 GiB"
    );
    let node1 = b.line("zone Normal node 1: ").expect("node 1's zone");
    assert!(node1.starts_with("span pfn 0x180000.."), "{node1}");
    assert!(
        b.line("zone DMA32 node 1: ").is_none(),
        "node 1 has no DMA32"
    );
    let (_, above) = allocated(&b);
    assert!(above > 1_400_000, "{above} frames above 4 GiB");
    for (cpu, r) in assert_smp_passed(&b, 4).iter().enumerate() {
        assert_eq!(r.node, cpu as u64 / 2, "cpu{cpu}'s node");
    }
}

/// A boot that hangs costs a whole CI run and says little: at its time-out
/// the harness asks QEMU where each virtual CPU is, and names the kernel
/// function (from the ELF's debug information) and the code that called it
/// (a scan of the stack). Stopped three seconds into a 2 GiB boot, both
/// CPUs are somewhere in the kernel.
#[test]
fn a_time_out_reports_where_each_cpu_was() {
    let cfg = BootConfig {
        timeout: Some(std::time::Duration::from_secs(3)),
        ..BootConfig::new("2G", "")
    };
    let b = run_with(&cfg);
    assert_eq!(b.verdict, Verdict::Timeout);
    let report = b
        .stderr
        .split("=== time-out: where each virtual CPU was ===")
        .nth(1)
        .expect("a report after the time-out");
    for cpu in ["cpu0", "cpu1"] {
        assert!(report.contains(&format!("\n{cpu}: ")), "{cpu}:\n{report}");
    }
    // The boot CPU runs the kernel's code: its place has a name and a
    // source line.
    let at = report
        .lines()
        .skip_while(|l| !l.starts_with("cpu0: rip 0x"))
        .nth(1)
        .expect("cpu0's location");
    assert!(at.trim_start().starts_with("at 0x"), "{at}");
    assert!(at.contains(".rs:"), "named from the ELF: {at}\n{report}");
}
