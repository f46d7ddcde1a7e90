//! Host-side helpers to build the example kernel and boot it in QEMU.
//!
//! The integration tests in `tests/` build the kernel once per test binary
//! (a nested cargo with its own `--target-dir`, so it never waits on the
//! outer build's lock) and boot it with the QEMU flags of `qemu.sh`,
//! asserting the exit status and the serial report.
#![forbid(unsafe_code)]

use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod budget;
/// The kernel's command line, compiled on the host: which modes a boot
/// runs.
#[path = "../../kernel/src/cmdline.rs"]
pub mod cmdline;

/// The bare-metal target the kernel builds for.
pub const KERNEL_TARGET: &str = "x86_64-unknown-none";
/// The apt line CI and fresh machines need for QEMU.
pub const QEMU_INSTALL: &str = "apt-get install -y --no-install-recommends qemu-system-x86";
/// The QEMU binary.
const QEMU: &str = "qemu-system-x86_64";
/// OVMF, the UEFI firmware the bootloader_api kernel boots with (Debian's
/// and Ubuntu's `ovmf` package).
pub const OVMF: &str = "/usr/share/ovmf/OVMF.fd";
/// The apt line for OVMF.
pub const OVMF_INSTALL: &str = "apt-get install -y --no-install-recommends ovmf";

/// Directory of the kernel package.
pub fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel")
}

/// Why the kernel could not be built or booted.
#[derive(Debug)]
pub enum HarnessError {
    /// cargo could not be started or the kernel build failed.
    Build(String),
    /// QEMU is not installed.
    QemuMissing,
    /// OVMF is not installed.
    OvmfMissing,
    /// QEMU could not be started or its output not read.
    Io(std::io::Error),
    /// The boot configuration cannot be expressed to QEMU.
    Config(String),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Build(why) => write!(f, "kernel build failed: {why}"),
            Self::QemuMissing => write!(f, "{QEMU} not found; install it with: {QEMU_INSTALL}"),
            Self::OvmfMissing => write!(f, "{OVMF} not found; install it with: {OVMF_INSTALL}"),
            Self::Io(e) => write!(f, "running {QEMU}: {e}"),
            Self::Config(why) => write!(f, "bad boot configuration: {why}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Directory of the bootloader_api kernel package (its image tool is in
/// `image/`).
pub fn bootloader_kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernel-bootloader")
}

/// Runs `cargo` (through rustup's `+toolchain` when given) in `dir` and
/// fails with its stderr.
fn cargo(
    dir: &Path,
    toolchain: Option<&str>,
    args: &[&std::ffi::OsStr],
) -> Result<(), HarnessError> {
    // A toolchain other than the outer one goes through rustup's proxy;
    // the outer one is the `cargo` that runs these tests.
    let mut cmd = match toolchain {
        Some(t) => {
            let mut c = Command::new("cargo");
            c.arg(format!("+{t}"));
            // The outer cargo's choice must not override `+t`: cargo takes
            // `CARGO` as its own path and hands it to build scripts (the
            // bootloader's runs `$CARGO install -Zbuild-std`).
            c.env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("RUSTC")
                .env_remove("CARGO");
            c
        }
        None => Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())),
    };
    let out = cmd
        .current_dir(dir)
        .args(args)
        // The outer build's target dir must not leak into the nested one.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::Build(format!("starting cargo: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(HarnessError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }
}

/// Builds the kernel package in `dir` (release, for [`KERNEL_TARGET`])
/// into `target_dir` and returns its ELF `bin`.
fn build_elf(
    dir: &Path,
    bin: &str,
    target_dir: &Path,
    features: &[&str],
) -> Result<PathBuf, HarnessError> {
    let features = features.join(",");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "build".as_ref(),
        "--release".as_ref(),
        "--target".as_ref(),
        KERNEL_TARGET.as_ref(),
        "--target-dir".as_ref(),
        target_dir.as_os_str(),
    ];
    if !features.is_empty() {
        args.push("--features".as_ref());
        args.push(features.as_ref());
    }
    cargo(dir, None, &args)?;
    let elf = target_dir.join(KERNEL_TARGET).join("release").join(bin);
    if elf.is_file() {
        Ok(elf)
    } else {
        Err(HarnessError::Build(format!(
            "{} was not produced",
            elf.display()
        )))
    }
}

/// Builds the kernel in release mode into `target_dir` and returns the ELF.
pub fn build_kernel(target_dir: &Path) -> Result<PathBuf, HarnessError> {
    build_elf(&kernel_dir(), "pageframe-kernel", target_dir, &[])
}

/// [`build_kernel`] with the kernel's cargo `features` (its own
/// `target_dir`: a build with other features replaces the ELF).
pub fn build_kernel_with(target_dir: &Path, features: &[&str]) -> Result<PathBuf, HarnessError> {
    build_elf(&kernel_dir(), "pageframe-kernel", target_dir, features)
}

/// The nightly whose `-Zbuild-std` the bootloader crate's build script
/// uses: the `channel` of the image tool's rust-toolchain.toml.
pub fn loader_toolchain() -> Result<String, HarnessError> {
    let file = bootloader_kernel_dir().join("image/rust-toolchain.toml");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| HarnessError::Build(format!("{}: {e}", file.display())))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or_else(|| HarnessError::Build(format!("{} names no channel", file.display())))
}

/// Builds the bootloader_api kernel into `target_dir`, then wraps it into
/// a UEFI disk image with the image tool (built on [`loader_toolchain`]),
/// and returns the image's path.
pub fn build_bootloader_image(target_dir: &Path) -> Result<PathBuf, HarnessError> {
    let dir = bootloader_kernel_dir();
    let toolchain = loader_toolchain()?;
    let elf = build_elf(
        &dir,
        "pageframe-bootloader-kernel",
        &target_dir.join("kernel"),
        &[],
    )?;
    let image = target_dir.join("pageframe-bootloader-kernel-uefi.img");
    let tool_target = target_dir.join("image-tool");
    cargo(
        &dir.join("image"),
        Some(&toolchain),
        &[
            "run".as_ref(),
            "--release".as_ref(),
            "--target-dir".as_ref(),
            tool_target.as_os_str(),
            "--".as_ref(),
            elf.as_os_str(),
            image.as_os_str(),
        ],
    )?;
    if image.is_file() {
        Ok(image)
    } else {
        Err(HarnessError::Build(format!(
            "{} was not produced",
            image.display()
        )))
    }
}

/// How to boot the kernel.
#[derive(Debug, Clone)]
pub struct BootConfig {
    /// Guest RAM, in QEMU's `-m` syntax (`2G`, `128M`).
    pub mem: String,
    /// Virtual CPUs.
    pub smp: u32,
    /// NUMA nodes (0: none described). RAM and CPUs are split evenly, in
    /// order: node `i` gets the `i`-th share of each.
    pub numa: u32,
    /// Kernel command line.
    pub append: String,
    /// Kill QEMU after this long; `None`: the boot's own budget
    /// ([`BootConfig::budget`]).
    pub timeout: Option<Duration>,
    /// QEMU's `-cpu` for [`boot`] (default `qemu64,+pdpe1gb`: 1 GiB pages).
    pub cpu: String,
    /// QEMU's `-machine` (default `q35`; `pc` is the i440fx board).
    pub machine: String,
}

impl BootConfig {
    /// A guest of `mem` RAM and two CPUs running `append`, killed after
    /// its budget ([`BootConfig::budget`]).
    pub fn new(mem: &str, append: &str) -> Self {
        Self {
            mem: mem.to_owned(),
            smp: 2,
            numa: 0,
            append: append.to_owned(),
            timeout: None,
            cpu: "qemu64,+pdpe1gb".to_owned(),
            machine: "q35".to_owned(),
        }
    }

    /// How long the boot may take: what it does (the modes its command line
    /// runs, each costed by the guest's RAM and CPUs, see [`crate::budget`])
    /// on a loaded host, with headroom. The time-out when none is set.
    pub fn budget(&self) -> Duration {
        let mib = mem_mib(&self.mem).unwrap_or(0);
        budget::of(&self.append, mib, self.smp)
    }

    /// The time-out of this boot.
    pub fn time_out(&self) -> Duration {
        self.timeout.unwrap_or_else(|| self.budget())
    }
}

/// How a boot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The kernel wrote the pass code to isa-debug-exit (QEMU status 33).
    Pass,
    /// The kernel wrote the fail code (QEMU status 35).
    Fail,
    /// QEMU exited 0: the guest reset (a triple fault under `-no-reboot`).
    Reset,
    /// Killed after the time-out.
    Timeout,
    /// Any other QEMU status (bad arguments, a crash).
    Other(Option<i32>),
}

/// The result of one boot.
#[derive(Debug, Clone)]
pub struct Boot {
    /// How it ended.
    pub verdict: Verdict,
    /// Everything the guest wrote to its serial port (CRs removed).
    pub serial: String,
    /// QEMU's own diagnostics; after a time-out, where each virtual CPU
    /// was when QEMU was stopped ([`stall_report`]).
    pub stderr: String,
    /// Host wall time from spawning QEMU to its exit.
    pub elapsed: Duration,
}

impl Boot {
    /// The first serial line starting with `prefix`, without the prefix.
    pub fn line(&self, prefix: &str) -> Option<&str> {
        self.serial.lines().find_map(|l| l.strip_prefix(prefix))
    }

    /// Parses the first whitespace-separated token after `prefix` on the
    /// first line that starts with it.
    pub fn value<T: std::str::FromStr>(&self, prefix: &str) -> Option<T> {
        self.line(prefix)?.split_whitespace().next()?.parse().ok()
    }
}

/// MiB in QEMU's `-m` syntax (`512M`, `8G`, a bare number of MiB).
fn mem_mib(mem: &str) -> Option<u64> {
    let (digits, scale) = match mem.as_bytes().last()? {
        b'G' | b'g' => (&mem[..mem.len() - 1], 1024),
        b'M' | b'm' => (&mem[..mem.len() - 1], 1),
        _ => (mem, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// The QEMU arguments describing `cfg.numa` nodes: a RAM backend and a
/// `-numa node` for each, with its share of RAM and CPUs.
fn numa_args(cfg: &BootConfig) -> Result<Vec<String>, HarnessError> {
    let n = u64::from(cfg.numa);
    if n == 0 {
        return Ok(Vec::new());
    }
    let bad = |why: &str| HarnessError::Config(format!("{} NUMA nodes: {why}", cfg.numa));
    let mib = mem_mib(&cfg.mem).ok_or_else(|| bad("unreadable -m size"))?;
    let cpus = u64::from(cfg.smp);
    if mib % n != 0 || cpus % n != 0 {
        return Err(bad("RAM and CPUs must split evenly"));
    }
    let mut args = Vec::new();
    for i in 0..n {
        let first = i * cpus / n;
        let last = first + cpus / n - 1;
        args.push("-object".to_owned());
        args.push(format!("memory-backend-ram,id=m{i},size={}M", mib / n));
        args.push("-numa".to_owned());
        args.push(format!("node,nodeid={i},cpus={first}-{last},memdev=m{i}"));
    }
    Ok(args)
}

/// Boots `elf` under QEMU (TCG, `cfg.machine` with `cfg.cpu`) and waits
/// for it to exit.
pub fn boot(elf: &Path, cfg: &BootConfig) -> Result<Boot, HarnessError> {
    let mut cmd = Command::new(QEMU);
    cmd.args(["-cpu", &cfg.cpu])
        .args(["-smp", &cfg.smp.to_string()])
        .args(numa_args(cfg)?)
        .arg("-kernel")
        .arg(elf)
        .args(["-append", &cfg.append]);
    launch(cmd, cfg, Some(elf))
}

/// Boots a UEFI disk `image` (the bootloader_api kernel's) under QEMU with
/// OVMF as firmware and waits for it to exit. `cfg.append` is not used: the
/// image carries no command line. OVMF's own serial output (its boot
/// manager's lines and terminal escapes) is removed from `serial`.
pub fn boot_uefi(image: &Path, cfg: &BootConfig) -> Result<Boot, HarnessError> {
    if !Path::new(OVMF).is_file() {
        return Err(HarnessError::OvmfMissing);
    }
    let mut drive = std::ffi::OsString::from("format=raw,file=");
    drive.push(image);
    let mut cmd = Command::new(QEMU);
    cmd.args(["-cpu", "qemu64"])
        .args(["-smp", &cfg.smp.to_string()])
        .args(numa_args(cfg)?)
        .args(["-bios", OVMF])
        .arg("-drive")
        .arg(drive);
    let mut b = launch(cmd, cfg, None)?;
    b.serial = strip_firmware_output(&b.serial);
    Ok(b)
}

/// `serial` without terminal escape sequences and OVMF's `BdsDxe:` lines.
pub fn strip_firmware_output(serial: &str) -> String {
    let mut out = String::with_capacity(serial.len());
    let mut chars = serial.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters, then one final letter.
            for p in chars.by_ref() {
                if p.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out.lines()
        .filter(|l| !l.starts_with("BdsDxe: "))
        .fold(String::new(), |mut acc, l| {
            acc.push_str(l);
            acc.push('\n');
            acc
        })
}

/// Runs `cmd` (QEMU with its firmware and CPU arguments) with the machine,
/// RAM, serial and exit device every boot shares, and waits for it. At a
/// time-out the monitor is asked where each virtual CPU is first, named
/// with `symbols` (the kernel ELF) when given.
fn launch(
    mut cmd: Command,
    cfg: &BootConfig,
    symbols: Option<&Path>,
) -> Result<Boot, HarnessError> {
    let limit = cfg.time_out();
    let start = Instant::now();
    let monitor = Monitor::path();
    let _ = std::fs::remove_file(&monitor);
    let mut arg = std::ffi::OsString::from("unix:");
    arg.push(&monitor);
    arg.push(",server=on,wait=off");
    let mut child = cmd
        .args(["-accel", "tcg", "-machine", &cfg.machine])
        .args(["-m", &cfg.mem])
        .args(["-serial", "stdio", "-display", "none", "-monitor"])
        .arg(arg)
        .args([
            "-no-reboot",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
        ])
        // `-serial stdio` fails when stdin is closed, as under CI.
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => HarnessError::QemuMissing,
            _ => HarnessError::Io(e),
        })?;
    // Drain both pipes on threads so a chatty guest cannot block on a full
    // pipe while this thread waits.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).replace('\r', "")
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));

    let mut stall = None;
    let verdict = loop {
        if let Some(status) = child.try_wait().map_err(HarnessError::Io)? {
            break match status.code() {
                Some(33) => Verdict::Pass,
                Some(35) => Verdict::Fail,
                Some(0) => Verdict::Reset,
                code => Verdict::Other(code),
            };
        }
        if start.elapsed() > limit {
            stall = Some(stall_report(&monitor, symbols));
            let _ = child.kill();
            let _ = child.wait();
            break Verdict::Timeout;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let _ = std::fs::remove_file(&monitor);
    let mut stderr = stderr.join().unwrap_or_default();
    if let Some(report) = stall {
        stderr.push_str(&report);
    }
    Ok(Boot {
        verdict,
        serial: stdout.join().unwrap_or_default(),
        stderr,
        elapsed,
    })
}

/// A connection to QEMU's human monitor on a Unix socket.
struct Monitor(std::os::unix::net::UnixStream);

impl Monitor {
    /// A socket path of this boot's own.
    fn path() -> PathBuf {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::env::temp_dir().join(format!("pageframe-qemu-{}-{n}.sock", std::process::id()))
    }

    fn connect(path: &Path) -> std::io::Result<Monitor> {
        let s = std::os::unix::net::UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut m = Monitor(s);
        m.until_prompt()?;
        Ok(m)
    }

    /// What the monitor writes up to its next prompt, without terminal
    /// escapes.
    fn until_prompt(&mut self) -> std::io::Result<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while !out.ends_with(b"(qemu) ") {
            let n = self.0.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        Ok(strip_firmware_output(
            &String::from_utf8_lossy(&out).replace('\r', ""),
        ))
    }

    /// Runs one command and returns its output.
    fn ask(&mut self, command: &str) -> std::io::Result<String> {
        self.0.write_all(command.as_bytes())?;
        self.0.write_all(b"\n")?;
        self.until_prompt()
    }
}

/// Words of each CPU's stack scanned for return addresses (4 KiB: a
/// kernel function's frame can be large).
const STACK_WORDS: usize = 512;
/// Most code addresses reported from one stack.
const STACK_NAMES: usize = 24;

/// Where each virtual CPU of a running QEMU is, asked through its monitor
/// at `socket`: the instruction pointer, and the words near the top of the
/// stack that point into the kernel's code (a stack scan, not an exact
/// backtrace: the kernel has no frame pointers), each named from `symbols`
/// by `addr2line` when both are at hand. For a boot that hangs: which lock
/// or loop each CPU is in.
pub fn stall_report(socket: &Path, symbols: Option<&Path>) -> String {
    let mut out = String::from("\n=== time-out: where each virtual CPU was ===\n");
    let mut m = match Monitor::connect(socket) {
        Ok(m) => m,
        Err(e) => {
            out.push_str(&format!("monitor at {}: {e}\n", socket.display()));
            return out;
        }
    };
    let regs = m.ask("info registers -a").unwrap_or_default();
    let text = symbols.and_then(text_range);
    let mut cpu = 0;
    for section in regs.split("CPU#").skip(1) {
        let reg = |name: &str| {
            section
                .split_whitespace()
                .find_map(|t| t.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v, 16).ok())
        };
        // A CPU still in 32-bit firmware code shows EIP and ESP.
        let (Some(rip), Some(rsp)) = (
            reg("RIP=").or_else(|| reg("EIP=")),
            reg("RSP=").or_else(|| reg("ESP=")),
        ) else {
            out.push_str(&format!("cpu{cpu}: no instruction or stack pointer\n"));
            cpu += 1;
            continue;
        };
        let mut addrs = vec![rip];
        if let (Some((lo, hi)), Ok(_)) = (text, m.ask(&format!("cpu {cpu}"))) {
            let words = m
                .ask(&format!("x /{STACK_WORDS}gx {rsp:#x}"))
                .unwrap_or_default();
            for a in words
                .split_whitespace()
                .filter_map(|t| u64::from_str_radix(t.strip_prefix("0x")?, 16).ok())
                .filter(|&a| (lo..hi).contains(&a))
            {
                if addrs.len() > STACK_NAMES {
                    break;
                }
                if !addrs.contains(&a) {
                    addrs.push(a);
                }
            }
        }
        let names = symbols.map(|elf| name_addresses(elf, &addrs));
        out.push_str(&format!("cpu{cpu}: rip {rip:#x} rsp {rsp:#x}\n"));
        for (i, a) in addrs.iter().enumerate() {
            let name = names
                .as_ref()
                .and_then(|n| n.get(i))
                .map_or("", String::as_str);
            let what = if i == 0 { "at" } else { "from?" };
            out.push_str(&format!("    {what} {a:#x} {name}\n"));
        }
        cpu += 1;
    }
    out
}

/// The kernel's code addresses: the lowest and highest text symbol of
/// `elf` (from `nm`).
fn text_range(elf: &Path) -> Option<(u64, u64)> {
    let out = Command::new("nm").arg(elf).output().ok()?;
    let addrs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let a = u64::from_str_radix(w.next()?, 16).ok()?;
            matches!(w.next()?, "t" | "T").then_some(a)
        })
        .collect::<Vec<_>>();
    Some((*addrs.iter().min()?, *addrs.iter().max()? + 0x1000))
}

/// `function (file:line)` for each address, by `addr2line` (inlined frames
/// joined with ` <- `); empty names when it is missing.
fn name_addresses(elf: &Path, addrs: &[u64]) -> Vec<String> {
    let out = Command::new("addr2line")
        .args(["-f", "-C", "-i", "-s", "-a", "-e"])
        .arg(elf)
        .args(addrs.iter().map(|a| format!("{a:#x}")))
        .output();
    let Ok(out) = out else {
        return Vec::new();
    };
    // With -a each address comes first on a line of its own, then its
    // function and place, twice per inlined frame.
    let mut names = Vec::new();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if !l.starts_with("0x") {
            continue;
        }
        let mut frames = Vec::new();
        while let Some(f) = lines.next_if(|n| !n.starts_with("0x")) {
            let place = lines.next_if(|n| !n.starts_with("0x")).unwrap_or("");
            frames.push(format!("{f} ({place})"));
        }
        names.push(frames.join(" <- "));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_toolchain_is_a_pinned_nightly() {
        let t = loader_toolchain().unwrap();
        assert!(t.starts_with("nightly-20"), "{t}");
    }

    #[test]
    fn mem_sizes_in_qemu_syntax() {
        assert_eq!(mem_mib("8G"), Some(8192));
        assert_eq!(mem_mib("512M"), Some(512));
        assert_eq!(mem_mib("300"), Some(300));
        assert_eq!(mem_mib("G"), None);
        assert_eq!(mem_mib("99999999999999999999G"), None);
        assert_eq!(mem_mib("18446744073709551615G"), None);
    }

    #[test]
    fn numa_nodes_split_ram_and_cpus_in_order() {
        let mut cfg = BootConfig::new("8G", "");
        cfg.smp = 4;
        assert!(numa_args(&cfg).unwrap().is_empty());
        cfg.numa = 2;
        assert_eq!(
            numa_args(&cfg).unwrap(),
            [
                "-object",
                "memory-backend-ram,id=m0,size=4096M",
                "-numa",
                "node,nodeid=0,cpus=0-1,memdev=m0",
                "-object",
                "memory-backend-ram,id=m1,size=4096M",
                "-numa",
                "node,nodeid=1,cpus=2-3,memdev=m1",
            ]
        );
        cfg.smp = 3;
        assert!(matches!(numa_args(&cfg), Err(HarnessError::Config(_))));
        cfg.smp = 4;
        cfg.mem = "eight".into();
        assert!(matches!(numa_args(&cfg), Err(HarnessError::Config(_))));
    }

    #[test]
    fn firmware_escapes_and_boot_manager_lines_are_removed() {
        let raw = "\x1b[=3h\x1b[=3hBdsDxe: failed to load Boot0001\n\x1b[2J\x1b[01;01Hpageframe kernel: booted\nRESULT: PASS\n";
        assert_eq!(
            strip_firmware_output(raw),
            "pageframe kernel: booted\nRESULT: PASS\n"
        );
    }
}
