//! Boots the second example kernel: the blog_os-style one that the
//! bootloader crate (0.11, UEFI) loads, which adopts pageframe from
//! bootloader_api's memory map. Needs QEMU, OVMF and the loader's nightly
//! (`cargo xtask test` installs them).

use pageframe_boot_test::{Boot, BootConfig, Verdict, boot_uefi, build_bootloader_image};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// The disk image, built on first use.
fn image() -> PathBuf {
    static IMAGE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bootloader-kernel");
            build_bootloader_image(&dir).map_err(|e| e.to_string())
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Boots the image with `mem` RAM on one CPU, one guest at a time.
fn run(mem: &str) -> Boot {
    static ONE: Mutex<()> = Mutex::new(());
    let img = image();
    let _guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
    // The image carries no command line; its work (every frame allocated,
    // written and freed, a 2 MiB range taken) is budgeted as a self-test.
    let mut cfg = BootConfig::new(mem, "selftest");
    cfg.smp = 1;
    let b = boot_uefi(&img, &cfg).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "-m {mem}: {:?} in {:.2} s\n{}{}",
        b.verdict,
        b.elapsed.as_secs_f64(),
        b.serial,
        b.stderr
    );
    b
}

/// The numbers in `line` (decimal words, commas and parentheses trimmed).
fn numbers(line: &str) -> Vec<u64> {
    line.split_whitespace()
        .filter_map(|w| {
            w.trim_matches(|c| c == ',' || c == '(' || c == ')' || c == ';')
                .parse()
                .ok()
        })
        .collect()
}

/// Checks one boot end to end and returns (usable, managed) frames.
fn assert_adopted(b: &Boot) -> (u64, u64) {
    assert_eq!(b.verdict, Verdict::Pass, "verdict");
    assert!(
        b.line("pageframe kernel: booted by bootloader 0.11")
            .is_some()
    );
    assert_eq!(b.line("checks: "), Some("PASS"));
    // `memory map: R regions, U usable frames (M MiB) in N ranges`
    let map = numbers(b.line("memory map: ").expect("memory map line"));
    let usable = map[1];
    // `frames managed: M of U usable frames; C carved for ...`
    let managed = numbers(b.line("frames managed: ").expect("managed line"));
    assert_eq!(
        managed[1], usable,
        "the planner saw the map's usable frames"
    );
    let carved = managed[2];
    assert_eq!(
        managed[0] + carved,
        usable,
        "no usable frame lost between map and zones"
    );
    // Metadata stays a small share of RAM (about 5 B per frame, plus the
    // machine and rounding to whole frames).
    assert!(
        carved * 4096 <= usable * 8 + (64 << 10),
        "carved {carved} of {usable}"
    );
    // `fill: N frames allocated one at a time ...; 0 of F left free`
    let fill = numbers(b.line("fill: ").expect("fill line"));
    assert_eq!(
        fill[0],
        fill[fill.len() - 1],
        "every free frame was allocated"
    );
    assert!(
        fill[0] + 64 >= managed[0] - 1024,
        "fill {} of {} managed",
        fill[0],
        managed[0]
    );
    assert!(b.line("fill: every frame distinct").is_some());
    assert!(
        b.serial
            .lines()
            .any(|l| l.starts_with("contig: 2 MiB at pfn ")),
        "contig line"
    );
    assert!(
        b.line("contig: all ")
            .is_some_and(|l| l.ends_with("pages verified after the move"))
    );
    assert!(
        b.line("bad input: ")
            .is_some_and(|l| l.ends_with("state unchanged"))
    );
    assert!(b.line("fragmentation map of zone DMA32").is_some());
    (usable, managed[0])
}

#[test]
fn small_guest_adopts_the_bootloader_memory_map() {
    let b = run("128M");
    let (usable, _) = assert_adopted(&b);
    assert!(
        (25_000..32_768).contains(&usable),
        "{usable} usable frames at 128 MiB"
    );
    assert!(b.line("fragmentation map of zone Normal").is_none());
}

#[test]
fn two_gib_guest_adopts_the_bootloader_memory_map() {
    let b = run("2G");
    let (usable, _) = assert_adopted(&b);
    assert!(
        (500_000..524_288).contains(&usable),
        "{usable} usable frames at 2 GiB"
    );
}

#[test]
fn six_gib_guest_uses_ram_above_4_gib() {
    let b = run("6G");
    let (usable, _) = assert_adopted(&b);
    assert!(
        (1_500_000..1_572_864).contains(&usable),
        "{usable} usable frames at 6 GiB"
    );
    assert!(b.line("fragmentation map of zone Normal").is_some());
    assert!(
        b.line("zone Normal node 0: span pfn 0x100000..").is_some(),
        "Normal zone line"
    );
}
