//! `cargo xtask <command>`: the project's chores in one place.
//!
//! * `test`            install QEMU and OVMF if missing (root + apt) and the
//!   bootloader crate's nightly, then every test, `ostd` included (the
//!   planner's, the incremental machine's and the adapter's in release too)
//! * `ostd`            the OSTD adapter's host tests (debug and release),
//!   then the OSTD kernel
//!   through cargo-osdk: its ktests (OSTD's own among them) and a run with
//!   the side-by-side table (installs OSTD's nightly, cargo-osdk, GRUB)
//! * `ostd-bench [--boots N] [--icount]` only the OSTD kernel's side-by-side
//!   rows, medians of N boots (default 3), under `-icount shift=0` with
//!   `--icount` (guest instructions instead of the host's cycles)
//! * `instructions [path]` instructions a pair of each allocation path
//!   (zone, a CPU's cache, `alloc_on`, the OSTD adapter's calls), counted
//!   by callgrind: `benches/src/bin/pairs.rs`
//! * `fuzz <t|all> <s>` run a cargo-fuzz target (or all) for `s` seconds
//! * `miri`            the Miri subset (crates with `unsafe`)
//! * `loom`            the loom models of the cross-CPU protocols
//! * `soak --minutes M [--cpus N]` threads, caches, drains, splits,
//!   partial frees, contiguous ranges, offline and online, reporting and
//!   compaction for M minutes, with `validate()` running alongside
//! * `coverage`        line coverage of the library crates (cargo-llvm-cov)
//! * `tsan`            the threaded tests and the soak under ThreadSanitizer
//! * `lint`            rustfmt, clippy with warnings denied, `surface`,
//!   `layers` (the peers harness too, where llfree-rs is at its default
//!   place)
//! * `bench [filter]`  criterion benches, then a table of medians per op and
//!   ratios to the peer allocator
//! * `bench-table`     only the table, from the last bench run
//! * `debug-costs [rounds]` what each debugging tool costs on the order-0
//!   pairs: the `debug` bench built without and with each tool, interleaved,
//!   medians of the rounds (default 3)
//! * `peers [--llfree DIR] [--rounds N] [--out FILE] ...` pageframe beside
//!   llfree-rs (built from DIR, default `../shared/peers/llfree-rs`) in one
//!   process: medians and spreads of interleaved rounds, as a table
//! * `qemu [args]`     build and boot the example kernel (README's main job)
//! * `lab <args>`      run a lab scenario
//! * `citations`       check that every `spec 0N §X` resolves in docs/rules/
//! * `layers [--all]`  the facade's module files by layer: imports that
//!   point up and import cycles (part of `lint`; `xtask/src/layers.rs`)
//! * `surface`         the facade's root budget, `Machine`'s method budget,
//!   one path per item, cited paths, links and issue numbers in every text
//!   (part of `lint`)
//! * `portability`     the library crates on every bare-metal target, on
//!   the declared MSRV, and packaged for crates.io (`publish --dry-run`)
#![forbid(unsafe_code)]

// Its checks are tests only (`cargo test -p xtask`).
#[cfg(test)]
mod architecture;
mod citations;
mod docs_check;
mod layers;
mod ostd_bench;
mod peers;
mod surface;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Tests that run under Miri: every crate with `unsafe` code, with the test
/// targets that exercise it, threaded ones included (smaller under
/// `cfg(miri)`); the rest are too slow under Miri. The flags say whether
/// the run is made under Stacked Borrows and under Tree Borrows.
const MIRI: &[(&str, &[&str], bool, bool)] = &[
    // Heaviest first: two workers share the list.
    // The core's one unsafe operation reads metadata words behind their
    // chunk's init bit: the zone tests (holes, ranges added piecewise) reach
    // it; the model and bit-table tests add only safe code and time.
    ("pageframe-buddy", &["--test", "buddy"], true, true),
    // Two CPUs freeing one frame through their caches and the zone path.
    (
        "pageframe",
        &["--test", "soundness", "concurrent_frees"],
        true,
        true,
    ),
    // The planner's machine and metadata written through raw pointers.
    ("pageframe", &["--test", "plan", "miri_"], true, true),
    // The same, built from ranges gathered one at a time, with the
    // per-CPU caches' memory taken from the machine and written in place.
    ("pageframe", &["--test", "incremental", "miri_"], true, true),
    // Owner records: call-site pointers stored and read back as references.
    ("pageframe", &["--test", "owner", "miri_"], true, true),
    // A zone hot-added while another thread looks it up.
    ("pageframe", &["--test", "hotplug", "miri_"], true, false),
    ("pageframe-swap", &["--test", "stress"], true, false),
    // The pageblock table's cast, and the unchecked free through the layer.
    (
        "pageframe-mobility",
        &[
            "--test",
            "mobility",
            "--",
            "isolation",
            "piecewise",
            "claims_the_largest",
        ],
        true,
        false,
    ),
    ("pageframe-pcp", &["--test", "stress"], true, false),
    ("pageframe", &["--lib"], true, true),
    ("pageframe-swap", &["--test", "miri"], true, true),
    ("pageframe-pcp", &["--test", "percpu"], true, true),
    ("pageframe-types", &["--lib"], true, true),
];
/// Loom models: crate and test-target arguments.
const LOOM: &[(&str, &[&str])] = &[
    ("pageframe-pcp", &["--test", "loom"]),
    ("pageframe", &["--lib", "loom_model"]),
    ("pageframe-compact", &["--lib", "loom_tests"]),
    ("pageframe-swap", &["--test", "loom"]),
];
/// The library crates, in dependency order.
const LIBS: &[&str] = &[
    "pageframe-types",
    "pageframe-buddy",
    "pageframe-mobility",
    "pageframe-compact",
    "pageframe-pcp",
    "pageframe-swap",
    "pageframe",
];
/// Bare-metal targets the library crates build for (riscv32imac has no
/// 64-bit atomics: `pageframe_types::atomic`).
const BARE_TARGETS: &[&str] = &[
    "x86_64-unknown-none",
    "aarch64-unknown-none",
    "riscv64gc-unknown-none-elf",
    "riscv32imac-unknown-none-elf",
];
/// The library crates' `rust-version` (the workspace's), checked by
/// building with exactly that toolchain.
const MSRV: &str = "1.88";
/// The apt package that provides `qemu-system-x86_64`.
const QEMU_PACKAGE: &str = "qemu-system-x86";
/// OVMF, the UEFI firmware, and its apt package.
const OVMF: &str = "/usr/share/ovmf/OVMF.fd";
const OVMF_PACKAGE: &str = "ovmf";
/// The image tool's rust-toolchain.toml: the bootloader crate's nightly.
const LOADER_TOOLCHAIN_FILE: &str = "examples/kernel-bootloader/image/rust-toolchain.toml";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("+ {cmd:?}");
    let st = cmd
        .current_dir(root())
        .status()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {st}"))
    }
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// QEMU, OVMF (the bootloader_api kernel's UEFI firmware) and binutils
/// (the stall report's symbols) are needed by the boot tests: install
/// them when we can, else say how.
fn ensure_qemu() -> Result<(), String> {
    let mut missing = Vec::new();
    if !have("qemu-system-x86_64") {
        missing.push(QEMU_PACKAGE);
    }
    if !Path::new(OVMF).is_file() {
        missing.push(OVMF_PACKAGE);
    }
    // `nm` and `addr2line` name where each CPU of a boot that timed out
    // was (the boot tests' stall report).
    if !have("addr2line") || !have("nm") {
        missing.push("binutils");
    }
    if missing.is_empty() {
        return Ok(());
    }
    let cmd = format!(
        "apt-get update && apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    if is_root() && have("apt-get") {
        return run(Command::new("sh").args(["-c", &cmd]));
    }
    Err(format!(
        "{} missing; install with: sudo sh -c '{cmd}'",
        missing.join(" and ")
    ))
}

/// The nightly (with the standard library's source) that the bootloader
/// crate's build script needs to build its UEFI stage: the boot tests make
/// the bootloader_api kernel's disk image with it.
fn ensure_loader_toolchain() -> Result<(), String> {
    let file = root().join(LOADER_TOOLCHAIN_FILE);
    let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let toolchain = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or_else(|| format!("{} names no channel", file.display()))?;
    let ok = Command::new("rustup")
        .args([
            format!("+{toolchain}"),
            "component".into(),
            "list".into(),
            "--installed".into(),
        ])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.starts_with("rust-src"))
        });
    if ok {
        return Ok(());
    }
    run(Command::new("rustup").args([
        "toolchain",
        "install",
        &toolchain,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
    ]))
}

/// The OSTD kernel: its directory, the cargo-osdk release OSTD 0.19 needs,
/// and the apt packages OSDK makes a GRUB rescue ISO with.
const OSTD_KERNEL: &str = "examples/ostd-kernel";
const OSDK_VERSION: &str = "0.19.0";
const GRUB_PACKAGES: &[&str] = &["grub2-common", "grub-pc-bin", "xorriso"];

/// `cmd` in `dir` (relative to the repository), its output shown and
/// returned.
fn run_capture(dir: &str, cmd: &mut Command) -> Result<String, String> {
    eprintln!("+ (in {dir}) {cmd:?}");
    let out = cmd
        .current_dir(root().join(dir))
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        Ok(text)
    } else {
        eprintln!("{text}");
        Err(format!("{cmd:?} failed: {}", out.status))
    }
}

/// OSTD's pinned nightly (from the kernel's rust-toolchain.toml) with the
/// components OSDK builds with, cargo-osdk, GRUB and xorriso.
fn ensure_osdk() -> Result<(), String> {
    let file = root().join(OSTD_KERNEL).join("rust-toolchain.toml");
    let text = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let toolchain = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or_else(|| format!("{} names no channel", file.display()))?;
    run(Command::new("rustup").args([
        "toolchain",
        "install",
        &toolchain,
        "--profile",
        "minimal",
        "--component",
        "rust-src,rustc-dev,llvm-tools-preview",
    ]))?;
    let osdk_ok = Command::new("cargo")
        .args(["osdk", "--version"])
        .output()
        .is_ok_and(|o| {
            o.status.success() && String::from_utf8_lossy(&o.stdout).contains(OSDK_VERSION)
        });
    if !osdk_ok {
        run(Command::new("cargo").args([
            "install",
            "cargo-osdk",
            "--version",
            OSDK_VERSION,
            "--locked",
        ]))?;
    }
    if have("grub-mkrescue") && have("xorriso") && Path::new("/usr/lib/grub/i386-pc").is_dir() {
        return Ok(());
    }
    let cmd = format!(
        "apt-get update && apt-get install -y --no-install-recommends {}",
        GRUB_PACKAGES.join(" ")
    );
    if is_root() && have("apt-get") {
        return run(Command::new("sh").args(["-c", &cmd]));
    }
    Err(format!(
        "GRUB tools missing; install with: sudo sh -c '{cmd}'"
    ))
}

/// The OSTD adapter's host tests, the OSTD kernel's ktests (its own and
/// OSTD's) and its run: the side-by-side table it prints, and a check that
/// it ended well.
fn ostd() -> Result<(), String> {
    // Both profiles: a size that overflows panics in one and wraps in the
    // other, and the adapter takes sizes from its callers.
    run(Command::new("cargo").args(["test", "--manifest-path", "integrations/ostd/Cargo.toml"]))?;
    run(Command::new("cargo").args([
        "test",
        "--release",
        "--manifest-path",
        "integrations/ostd/Cargo.toml",
    ]))?;
    ensure_qemu()?;
    ensure_osdk()?;
    let tests = run_capture(
        OSTD_KERNEL,
        Command::new("cargo").args(["osdk", "test", "--release"]),
    )?;
    let suite = tests
        .lines()
        .find(|l| l.contains("OSTD ktests:"))
        .ok_or("the OSTD kernel's ktests did not run OSTD's")?;
    println!("{}", suite.trim());
    // The runner colours its verdicts: look for the word, not the line.
    if !suite.contains(" 0 failed")
        || tests.contains("FAILED")
        || !tests.contains("All crates tested")
    {
        eprintln!("{tests}");
        return Err("OSTD kernel ktests failed".into());
    }
    ostd_boots(3, false)
}

/// Boots the OSTD kernel `boots` times (with `-icount shift=0` if
/// `icount`: see `ostd_bench`), checks that each run ends well, and prints
/// its side-by-side rows as medians over the boots with their spreads.
fn ostd_boots(boots: usize, icount: bool) -> Result<(), String> {
    let mut rows = ostd_bench::Rows::default();
    for i in 0..boots {
        let mut cmd = Command::new("cargo");
        cmd.args(["osdk", "run", "--release"]);
        if icount {
            cmd.arg("--qemu-args=-icount shift=0");
        }
        let boot = run_capture(OSTD_KERNEL, &mut cmd)?;
        if i == 0 {
            for l in boot.lines().filter(|l| l.starts_with("pageframe")) {
                println!("{l}");
            }
        }
        if !boot.contains("pageframe-ostd-kernel: OK") {
            eprintln!("{boot}");
            return Err("the OSTD kernel's run did not finish".into());
        }
        rows.add_boot(&boot);
    }
    println!(
        "OSTD kernel, {} boots, {}: medians (lowest-highest)",
        rows.boots(),
        if icount {
            "-icount shift=0 (guest instructions, load-independent)"
        } else {
            "TSC cycles under TCG"
        }
    );
    print!("{}", rows.table());
    Ok(())
}

/// The tests of the calls that take sizes from a memory map or a caller
/// (the planner, the incremental machine) in release too, where an
/// overflow wraps instead of panicking.
fn release_sizes() -> Result<(), String> {
    run(Command::new("cargo").args([
        "test",
        "--release",
        "-p",
        "pageframe",
        "--all-features",
        "--test",
        "plan",
        "--test",
        "incremental",
        "--test",
        "setup",
    ]))
}

/// The example kernel's target: rust-toolchain.toml lists it, but older
/// rustups do not add listed targets to an installed toolchain.
fn ensure_kernel_target() -> Result<(), String> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(root())
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l == "x86_64-unknown-none")
        });
    if installed {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", "x86_64-unknown-none"]))
}

fn ensure_nightly_component(component: &str) -> Result<(), String> {
    run(Command::new("rustup").args(["+nightly", "component", "add", component]))
}

fn ensure_cargo_fuzz() -> Result<(), String> {
    let ok = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        Ok(())
    } else {
        run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
    }
}

fn fuzz_targets() -> Result<Vec<String>, String> {
    let out = Command::new("cargo")
        .args(["+nightly", "fuzz", "list"])
        .current_dir(root().join("fuzz"))
        .output()
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect())
}

fn fuzz(target: &str, seconds: &str) -> Result<(), String> {
    ensure_cargo_fuzz()?;
    let targets = if target == "all" {
        fuzz_targets()?
    } else {
        vec![target.to_owned()]
    };
    for t in targets {
        // The working corpus (not committed) starts from the committed
        // seeds, which libFuzzer reads as a second corpus directory.
        let corpus = root().join("fuzz/corpus").join(&t);
        let seeds = root().join("fuzz/seeds").join(&t);
        fs::create_dir_all(&corpus).map_err(|e| e.to_string())?;
        let mut cmd = Command::new("cargo");
        cmd.args(["+nightly", "fuzz", "run", &t]).arg(&corpus);
        if seeds.is_dir() {
            cmd.arg(&seeds);
        }
        let start = std::time::Instant::now();
        run(cmd
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                "-print_final_stats=1",
            ])
            .current_dir(root().join("fuzz")))?;
        println!("fuzz: {t}: {:.0} s", start.elapsed().as_secs_f64());
    }
    Ok(())
}

fn miri() -> Result<(), String> {
    ensure_nightly_component("miri")?;
    ensure_nightly_component("rust-src")?;
    // Metadata handed to an allocator lives as long as the program: the
    // tests leak it on purpose.
    let stacked = "-Zmiri-strict-provenance -Zmiri-ignore-leaks";
    let tree = "-Zmiri-strict-provenance -Zmiri-ignore-leaks -Zmiri-tree-borrows";
    // In the list's order (heaviest first), each entry's runs together.
    let jobs = MIRI.iter().flat_map(|&(c, a, sb, tb)| {
        [(sb, stacked), (tb, tree)]
            .into_iter()
            .filter(|&(on, _)| on)
            .map(move |(_, flags)| (c, a, flags))
    });
    // Each test binary runs on one core under Miri: two workers, each with
    // its own target directory so neither waits on the other's build lock.
    // A job's output is printed whole when it ends.
    let queue = std::sync::Mutex::new(jobs);
    let failed = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    std::thread::scope(|s| {
        for w in 0..workers {
            let (queue, failed) = (&queue, &failed);
            s.spawn(move || {
                let dir = format!("target/miri-{w}");
                loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).next();
                    let Some((c, extra, flags)) = job else { break };
                    let start = std::time::Instant::now();
                    let mut cmd = Command::new("cargo");
                    cmd.args(["+nightly", "miri", "test", "--target-dir", &dir, "-p", c])
                        .args(extra)
                        .env("MIRIFLAGS", flags)
                        .current_dir(root());
                    let what = format!("{c} {} ({flags})", extra.join(" "));
                    let ok = match cmd.output() {
                        Ok(out) => {
                            let mut o = std::io::stdout().lock();
                            let _ = std::io::Write::write_all(&mut o, &out.stderr);
                            let _ = std::io::Write::write_all(&mut o, &out.stdout);
                            out.status.success()
                        }
                        Err(e) => {
                            println!("{cmd:?}: {e}");
                            false
                        }
                    };
                    println!(
                        "miri: {what}: {:.0} s{}",
                        start.elapsed().as_secs_f64(),
                        if ok { "" } else { " FAILED" }
                    );
                    if !ok {
                        failed.lock().unwrap_or_else(|e| e.into_inner()).push(what);
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("Miri failed: {}", failed.join("; ")))
    }
}

/// `-p` for every library crate.
fn lib_args() -> Vec<&'static str> {
    LIBS.iter().flat_map(|c| ["-p", c]).collect()
}

/// The library crates for every bare-metal target, with the declared MSRV,
/// and as crates.io packages (every crate verified in dependency order
/// against the others' packages).
fn portability() -> Result<(), String> {
    let start = std::time::Instant::now();
    run(Command::new("rustup")
        .args(["target", "add"])
        .args(BARE_TARGETS))?;
    for t in BARE_TARGETS {
        let mut cmd = Command::new("cargo");
        cmd.args(["build", "--release", "--target", t])
            .args(lib_args());
        // Every memory-map adapter, and the x86_64 crate's on x86-64.
        let boot = "pageframe/bootloader_api,pageframe/limine,pageframe/multiboot2,pageframe/uefi";
        match t.starts_with("x86_64") {
            true => cmd.args(["--features", &format!("{boot},pageframe/x86_64")]),
            false => cmd.args(["--features", boot]),
        };
        run(&mut cmd)?;
    }
    println!(
        "portability: {} targets: {:.0} s",
        BARE_TARGETS.len(),
        start.elapsed().as_secs_f64()
    );
    let manifest = fs::read_to_string(root().join("Cargo.toml")).map_err(|e| e.to_string())?;
    if !manifest.contains(&format!("rust-version = \"{MSRV}\"")) {
        return Err(format!(
            "the workspace does not declare rust-version {MSRV}"
        ));
    }
    let start = std::time::Instant::now();
    run(Command::new("rustup").args(["toolchain", "install", MSRV, "--profile", "minimal"]))?;
    run(Command::new("cargo")
        .arg(format!("+{MSRV}"))
        .args(["build", "--all-features", "--target-dir", "target/msrv"])
        .args(lib_args()))?;
    println!(
        "portability: MSRV {MSRV}: {:.0} s",
        start.elapsed().as_secs_f64()
    );
    let start = std::time::Instant::now();
    let built = forget_packaged_sources()?;
    let mut cmd = Command::new("cargo");
    cmd.args(["publish", "--dry-run", "--allow-dirty", "--workspace"]);
    cmd.arg("--target-dir").arg(built);
    for other in [
        "pageframe-models",
        "pageframe-lab",
        "pageframe-boot-test",
        "pageframe-benches",
        "xtask",
    ] {
        cmd.args(["--exclude", other]);
    }
    run(&mut cmd)?;
    println!(
        "portability: publish --dry-run: {:.0} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `publish --dry-run --workspace` verifies each crate against the ones
/// packaged before it, through a temporary local registry whose sources
/// cargo unpacks under `$CARGO_HOME/registry/src/-<hash>/`, the hash being
/// that of the checkout's path. Cargo never unpacks a version twice, so a
/// second run from the same path (a CI machine that keeps its cargo home)
/// would verify against the first run's code. Removing our crates from those
/// directories makes every run verify what it packaged; crates.io's own
/// directory (`index.crates.io-*`) is left alone. For the same reason (a
/// registry crate is never rebuilt once built) the verification builds in a
/// target directory of its own, emptied first (returned here).
fn forget_packaged_sources() -> Result<PathBuf, String> {
    let built = target_dir().join("publish");
    if built.exists() {
        fs::remove_dir_all(&built).map_err(|e| format!("{}: {e}", built.display()))?;
    }
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return Ok(built);
    };
    let Ok(registries) = fs::read_dir(&src) else {
        return Ok(built);
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if unpacked
                .file_name()
                .to_string_lossy()
                .starts_with("pageframe")
            {
                fs::remove_dir_all(unpacked.path())
                    .map_err(|e| format!("{}: {e}", unpacked.path().display()))?;
            }
        }
    }
    Ok(built)
}

/// The loom models: every cross-CPU protocol, explored under loom's
/// scheduler (`--cfg loom`, in its own target directory so the normal
/// build stays cached).
fn loom() -> Result<(), String> {
    for (krate, extra) in LOOM {
        run(Command::new("cargo")
            .env("RUSTFLAGS", "--cfg loom")
            .args([
                "test",
                "--release",
                "--target-dir",
                "target/loom",
                "-p",
                krate,
            ])
            .args(*extra)
            .args(["--", "--nocapture", "--test-threads", "1"]))?;
    }
    Ok(())
}

/// Threaded tests run under ThreadSanitizer: crate and test target.
const TSAN: &[(&str, &str)] = &[
    ("pageframe", "soak"),
    ("pageframe", "cache"),
    ("pageframe", "soundness"),
    ("pageframe", "hotplug"),
    ("pageframe", "any_context"),
    ("pageframe-pcp", "stress"),
    ("pageframe-swap", "stress"),
];

/// The threaded tests and the soak under ThreadSanitizer (nightly, with
/// the standard library rebuilt instrumented), in their own target
/// directory.
fn tsan() -> Result<(), String> {
    ensure_nightly_component("rust-src")?;
    for (krate, test) in TSAN {
        let start = std::time::Instant::now();
        run(Command::new("cargo")
            .env("RUSTFLAGS", "-Zsanitizer=thread")
            .env("PAGEFRAME_SOAK_SECS", "10")
            .env("TSAN_OPTIONS", "halt_on_error=1")
            .args([
                "+nightly",
                "test",
                "-Zbuild-std",
                "--target",
                "x86_64-unknown-linux-gnu",
            ])
            .args([
                "--target-dir",
                "target/tsan",
                "--release",
                "-p",
                krate,
                "--test",
                test,
            ]))?;
        println!(
            "tsan: {krate} {test}: {:.0} s",
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The library crates whose coverage is reported.
const LIBRARIES: &[&str] = &[
    "pageframe-types",
    "pageframe-buddy",
    "pageframe-mobility",
    "pageframe-compact",
    "pageframe-pcp",
    "pageframe-swap",
    "pageframe",
];

/// Line coverage of the library crates by their own tests (cargo-llvm-cov,
/// installed when missing), per file and in total.
fn coverage() -> Result<(), String> {
    let have_llvm_cov = Command::new("cargo")
        .args(["llvm-cov", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_llvm_cov {
        run(Command::new("rustup").args(["component", "add", "llvm-tools-preview"]))?;
        run(Command::new("cargo").args(["install", "cargo-llvm-cov", "--locked"]))?;
    }
    let mut cmd = Command::new("cargo");
    cmd.args([
        "llvm-cov",
        "--all-features",
        "--summary-only",
        "--ignore-filename-regex",
        "(tests|benches|examples|xtask|fuzz)/",
    ]);
    for l in LIBRARIES {
        cmd.args(["-p", l]);
    }
    run(&mut cmd)
}

/// The multi-threaded soak (`crates/pageframe/tests/soak.rs`) for `minutes`
/// with `cpus` worker threads.
fn soak(minutes: f64, cpus: u32) -> Result<(), String> {
    let secs = ((minutes * 60.0).round() as u64).max(1);
    run(Command::new("cargo")
        .env("PAGEFRAME_SOAK_SECS", secs.to_string())
        .env("PAGEFRAME_SOAK_CPUS", cpus.to_string())
        .args([
            "test",
            "--release",
            "-p",
            "pageframe",
            "--test",
            "soak",
            "--",
            "--nocapture",
        ]))
}

fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// `"key": <number>` after the first occurrence of `scope` in a JSON text.
fn json_number(text: &str, scope: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(scope)?..];
    let rest = &rest[rest.find(&format!("\"{key}\""))? + key.len() + 2..];
    let rest = rest.trim_start_matches([':', ' ']);
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "new") && p.join("estimates.json").exists() {
                out.push(p);
            } else if p
                .file_name()
                .is_none_or(|n| n != "report" && n != "base" && n != "change")
            {
                collect(&p, out);
            }
        }
    }
}

/// Prints one row per benchmark: median ns per iteration (one operation in
/// this project's benches), ns per element where a throughput was declared,
/// and the peer's median divided by ours where a `peer` sibling exists.
fn bench_table() -> Result<(), String> {
    let base = target_dir().join("criterion");
    let mut dirs = Vec::new();
    collect(&base, &mut dirs);
    dirs.sort();
    if dirs.is_empty() {
        return Err(format!("no criterion results under {}", base.display()));
    }
    let median = |d: &Path| -> Option<f64> {
        json_number(
            &fs::read_to_string(d.join("estimates.json")).ok()?,
            "\"median\"",
            "point_estimate",
        )
    };
    println!("| benchmark | median ns/iter | ns/element | peer ÷ this |");
    println!("|---|---:|---:|---:|");
    for d in &dirs {
        let bench = d.parent().expect("bench dir");
        let name = bench
            .strip_prefix(&base)
            .unwrap_or(bench)
            .display()
            .to_string();
        let Some(m) = median(d) else { continue };
        let elems = fs::read_to_string(d.join("benchmark.json"))
            .ok()
            .and_then(|t| json_number(&t, "\"throughput\"", "Elements"))
            .filter(|&e| e > 1.0);
        let per = elems.map_or(String::from("-"), |e| format!("{:.3}", m / e));
        let peer = bench
            .parent()
            .map(|p| p.join("peer").join("new"))
            .filter(|p| p.exists() && p != d);
        let ratio = peer
            .and_then(|p| median(&p))
            .map_or(String::from("-"), |pm| format!("{:.1}x", pm / m));
        println!("| {name} | {m:.1} | {per} | {ratio} |");
    }
    Ok(())
}

/// The builds `debug-costs` compares: none of the tools, then each one.
const DEBUG_BUILDS: &[&str] = &["", "vmstat", "page-owner", "fail-alloc"];
/// Rows of the `debug` bench, each on its own line of the table.
const DEBUG_ROWS: &[&str] = &[
    "plain_zone_order0_pair",
    "plain_cached_order0_pair",
    "traced_zone_order0_pair",
    "traced_cached_order0_pair",
    "poison_zone_order0_pair",
    "poison_cached_order0_pair",
];

/// The `debug` bench in every build of [`DEBUG_BUILDS`], `rounds` times
/// interleaved; prints the median of each row's medians (ns an operation)
/// and, for the builds with a tool, the difference to the build without.
fn debug_costs(rounds: usize) -> Result<(), String> {
    let mut got: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); DEBUG_ROWS.len()]; DEBUG_BUILDS.len()];
    for round in 0..rounds {
        for (b, feature) in DEBUG_BUILDS.iter().enumerate() {
            eprintln!(
                "debug-costs: round {} of {rounds}, build {feature:?}",
                round + 1
            );
            let mut cmd = Command::new("cargo");
            cmd.args(["bench", "-p", "pageframe-benches", "--bench", "debug"]);
            if !feature.is_empty() {
                cmd.args(["--features", feature]);
            }
            // The tools compiled in change only the plain rows' paths.
            cmd.args([
                "--",
                if feature.is_empty() {
                    "debug/"
                } else {
                    "debug/plain"
                },
            ]);
            run(&mut cmd)?;
            for (r, row) in DEBUG_ROWS.iter().enumerate() {
                let est = target_dir()
                    .join("criterion/debug")
                    .join(row)
                    .join("new/estimates.json");
                let ran = feature.is_empty() || row.starts_with("plain");
                if let (true, Ok(text)) = (ran, fs::read_to_string(&est))
                    && let Some(m) = json_number(&text, "\"median\"", "point_estimate")
                {
                    got[b][r].push(m);
                }
            }
        }
    }
    let median = |v: &[f64]| -> Option<f64> {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| v[v.len() / 2])
    };
    println!("| row | build | median ns/op | cost vs no tools |");
    println!("|---|---|---:|---:|");
    for (r, row) in DEBUG_ROWS.iter().enumerate() {
        let base = median(&got[0][r]);
        for (b, feature) in DEBUG_BUILDS.iter().enumerate() {
            let Some(m) = median(&got[b][r]) else {
                continue;
            };
            let name = if feature.is_empty() {
                "no tools"
            } else {
                feature
            };
            let cost = match (b, base) {
                (0, _) | (_, None) => String::from("-"),
                (_, Some(base)) => format!("{:+.1} ns", m - base),
            };
            println!("| {row} | {name} | {m:.2} | {cost} |");
        }
    }
    Ok(())
}

/// Packages outside the workspace (own lock files and targets): the two
/// example kernels, built for the bare-metal target.
const KERNELS: &[&str] = &["examples/kernel", "examples/kernel-bootloader"];

/// rustfmt and clippy (warnings denied) on the workspace and on the
/// example kernels; the fuzz targets must build against the current API.
/// The facade's root within its budget and each item under one path; every
/// cited path and relative link present; no issue numbers in the tree.
fn surface_and_docs() -> Result<(), String> {
    let s = surface::check(&root())?;
    println!(
        "surface: the root of pageframe exports {} items (budget {}): {}",
        s.root.len(),
        surface::ROOT_BUDGET,
        s.root.join(", ")
    );
    let mut bad = Vec::new();
    if s.root.len() > surface::ROOT_BUDGET {
        bad.push(format!(
            "the root exports {} items, over the budget of {}",
            s.root.len(),
            surface::ROOT_BUDGET
        ));
    }
    println!(
        "surface: Machine has {} public methods (budget {}): {}",
        s.machine_methods.len(),
        surface::MACHINE_BUDGET,
        s.machine_methods.join(", ")
    );
    if s.machine_methods.len() > surface::MACHINE_BUDGET {
        bad.push(format!(
            "Machine has {} public methods, over the budget of {}: tuning belongs on \
             `Machine::tunables`, inspection on `Machine::debug`, set-up on `boot::Plan`",
            s.machine_methods.len(),
            surface::MACHINE_BUDGET
        ));
    }
    for p in &s.twice {
        bad.push(format!("one item under several paths: {}", p.join(", ")));
    }
    for o in &s.opaque {
        bad.push(format!(
            "a whole-module re-export hides what it exports: {o}"
        ));
    }
    bad.extend(docs_check::problems(&root())?);
    if bad.is_empty() {
        println!("docs: every cited path and link resolves, no issue numbers");
        Ok(())
    } else {
        Err(format!("{} problems:\n{}", bad.len(), bad.join("\n")))
    }
}

fn lint() -> Result<(), String> {
    run(Command::new("cargo").args(["fmt", "--all", "--", "--check"]))?;
    run(Command::new("cargo").args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    ensure_kernel_target()?;
    for k in KERNELS {
        let dir = root().join(k);
        let fmt = Command::new("cargo")
            .args(["fmt", "--", "--check"])
            .current_dir(&dir)
            .status();
        // The default build and the one with every feature (the example
        // kernel's `debug` mode).
        let clippy = |features: &[&str]| {
            Command::new("cargo")
                .args(["clippy", "--release", "--target", "x86_64-unknown-none"])
                .args(features)
                .args(["--", "-D", "warnings"])
                .current_dir(&dir)
                .status()
        };
        let (plain, all) = (clippy(&[]), clippy(&["--all-features"]));
        for (what, st) in [
            ("rustfmt", fmt),
            ("clippy", plain),
            ("clippy --all-features", all),
        ] {
            if !st.is_ok_and(|s| s.success()) {
                return Err(format!("{what} failed in {k}"));
            }
        }
    }
    surface_and_docs()?;
    layers::check(&root(), false)?;
    run(Command::new("rustfmt").args([
        "--check",
        "--edition",
        "2021",
        "examples/kernel-bootloader/image/src/main.rs",
    ]))?;
    peers::lint()?;
    // The OSTD adapter on stable (its `ostd` feature builds with the
    // OSTD kernel, `cargo xtask ostd`); the OSTD kernel's sources with the
    // stable rustfmt (its toolchain has none).
    let manifest = "integrations/ostd/Cargo.toml";
    run(Command::new("cargo").args(["fmt", "--manifest-path", manifest, "--", "--check"]))?;
    run(Command::new("cargo").args([
        "clippy",
        "--manifest-path",
        manifest,
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(Command::new("rustfmt").args([
        "+stable",
        "--check",
        "--edition",
        "2024",
        "examples/ostd-kernel/src/lib.rs",
        "examples/ostd-kernel/src/bench.rs",
    ]))?;
    // The fuzz crate builds only on nightly (cargo-fuzz's sanitizers); a
    // plain check catches API drift before the fuzz step does.
    let st = Command::new("cargo")
        .args(["+nightly", "check", "--bins"])
        .current_dir(root().join("fuzz"))
        .status();
    if st.is_ok_and(|s| s.success()) {
        Ok(())
    } else {
        Err("the fuzz targets do not build".into())
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let rest = || args.iter().skip(1).map(String::as_str);
    let result = match args.first().map(String::as_str) {
        Some("test") => ensure_qemu()
            .and_then(|()| ensure_kernel_target())
            .and_then(|()| ensure_loader_toolchain())
            .and_then(|()| run(Command::new("cargo").args(["test", "--workspace", "--all-features"]).args(rest())))
            .and_then(|()| release_sizes())
            .and_then(|()| ostd()),
        Some("ostd") => ostd(),
        Some("instructions") => instructions(args.get(1).map(String::as_str)),
        Some("ostd-bench") => {
            let boots = args
                .iter()
                .position(|a| a == "--boots")
                .and_then(|i| args.get(i + 1)?.parse().ok())
                .unwrap_or(3);
            let icount = args.iter().any(|a| a == "--icount");
            ensure_qemu()
                .and_then(|()| ensure_osdk())
                .and_then(|()| ostd_boots(boots, icount))
        }
        Some("fuzz") => match (args.get(1), args.get(2)) {
            (Some(t), Some(s)) => fuzz(t, s),
            _ => Err("usage: cargo xtask fuzz <target|all> <seconds>".into()),
        },
        Some("miri") => miri(),
        Some("loom") => loom(),
        Some("coverage") => coverage(),
        Some("tsan") => tsan(),
        Some("soak") => match (
            args.get(1).map(String::as_str),
            args.get(2).map(|m| m.parse::<f64>()),
            args.get(3).map(String::as_str),
            args.get(4).map(|c| c.parse::<u32>()),
        ) {
            (Some("--minutes"), Some(Ok(m)), None, None) if m > 0.0 => soak(m, 4),
            (Some("--minutes"), Some(Ok(m)), Some("--cpus"), Some(Ok(c))) if m > 0.0 && (2..=64).contains(&c) => {
                soak(m, c)
            }
            _ => Err("usage: cargo xtask soak --minutes M [--cpus N (2..=64)]".into()),
        },
        Some("lint") => lint(),
        Some("bench") => run(Command::new("cargo").args(["bench", "-p", "pageframe-benches", "--"]).args(rest()))
            .and_then(|()| bench_table()),
        Some("bench-table") => bench_table(),
        Some("debug-costs") => match args.get(1).map(|r| r.parse::<usize>()) {
            None => debug_costs(3),
            Some(Ok(r)) if r > 0 => debug_costs(r),
            _ => Err("usage: cargo xtask debug-costs [rounds]".into()),
        },
        Some("qemu") => ensure_qemu().and_then(|()| ensure_kernel_target()).and_then(|()| run(Command::new("examples/kernel/run.sh").args(rest()))),
        Some("surface") => surface_and_docs(),
        Some("layers") => layers::check(&root(), args.get(1).is_some_and(|a| a == "--all")),
        Some("citations") => citations::unresolved(&root()).and_then(|bad| match bad.len() {
            0 => {
                println!("every rule citation resolves to docs/rules/");
                Ok(())
            }
            n => Err(format!("{n} unresolved citations:\n{}", bad.join("\n"))),
        }),
        Some("portability") => portability(),
        Some("peers") => peers::peers(&args[1..]),
        Some("lab") => run(Command::new("cargo").args(["run", "--release", "-p", "pageframe-lab", "--"]).args(rest())),
        _ => Err("usage: cargo xtask <test|ostd|ostd-bench [--boots N] [--icount]|instructions [path]|lint|fuzz <target|all> <secs>|miri|loom|soak --minutes M [--cpus N]|coverage|tsan|citations|surface|layers [--all]|bench [filter]|bench-table|qemu [args]|lab <args>|portability|peers [--llfree DIR] [--rounds N] [--out FILE]>".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The paths `benches/src/bin/pairs.rs` runs.
const PAIR_PATHS: &[&str] = &[
    "zone",
    "zone-2m",
    "zone-fill",
    "zone-fill-free",
    "zone-scattered",
    "cached",
    "cached-burst",
    "cached-fill",
    "cached-fill-free",
    "on-cpu",
    "ostd-local",
    "ostd-claimed",
    "ostd-local-2m",
    "ostd-local-8k",
    "ostd-local-12k",
    "ostd-fill",
    "ostd-churn",
];

/// Instructions a pair of each path (or of `only`; `zone-fill`,
/// `cached-fill` and `ostd-fill`: an allocation of a fill, refills
/// included; `cached-burst`: a pair of bursts of 64; `-fill-free`: an allocation of the fill and its free in
/// random order; `zone-scattered`: a free and an allocation of the
/// scattered test; `ostd-churn`: a step of the OSTD kernel bench's churn): the `pairs` program under
/// callgrind with 100 000 and 200 000 pairs (25 000 and 50 000 for
/// `ostd-fill`), the difference over the first (the set-up cancels out). Counts, unlike times, repeat exactly
/// whatever else the machine does.
fn instructions(only: Option<&str>) -> Result<(), String> {
    if !have("valgrind") {
        return Err("valgrind missing; install with: apt-get install -y valgrind".into());
    }
    run(Command::new("cargo").args([
        "build",
        "--release",
        "-p",
        "pageframe-benches",
        "--bin",
        "pairs",
    ]))?;
    let bin = root().join("target/release/pairs");
    let count = |path: &str, n: u64| -> Result<u64, String> {
        let out = Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(&bin)
            .args([path, &n.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        let err = String::from_utf8_lossy(&out.stderr);
        err.lines()
            .find_map(|l| l.split("Collected : ").nth(1))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("{path}: no count from callgrind:\n{err}"))
    };
    println!("| path | instructions a pair (a fill: an allocation; a churn: a step) |\n|---|---:|");
    for path in PAIR_PATHS.iter().filter(|p| only.is_none_or(|o| o == **p)) {
        // The OSTD adapter's arena (256 MiB) holds 65 536 frames: its fill
        // counts fewer.
        let n = if *path == "ostd-fill" {
            25_000
        } else {
            100_000
        };
        let (a, b) = (count(path, n)?, count(path, 2 * n)?);
        println!("| {path} | {:.1} |", (b - a) as f64 / n as f64);
    }
    Ok(())
}
