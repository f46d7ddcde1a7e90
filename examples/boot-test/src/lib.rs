//! Host-side helpers to build the example kernel and boot it in QEMU.
//!
//! The integration tests in `tests/` build the kernel once per test binary
//! (a nested cargo with its own `--target-dir`, so it never waits on the
//! outer build's lock) and boot it with the QEMU flags BOOT.md records,
//! asserting the exit status and the serial report.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The bare-metal target the kernel builds for.
pub const KERNEL_TARGET: &str = "x86_64-unknown-none";
/// The apt line CI and fresh machines need for QEMU.
pub const QEMU_INSTALL: &str = "apt-get install -y --no-install-recommends qemu-system-x86";
/// The QEMU binary.
const QEMU: &str = "qemu-system-x86_64";

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
            Self::Io(e) => write!(f, "running {QEMU}: {e}"),
            Self::Config(why) => write!(f, "bad boot configuration: {why}"),
        }
    }
}

impl std::error::Error for HarnessError {}

/// Builds the kernel in release mode into `target_dir` and returns the ELF.
pub fn build_kernel(target_dir: &Path) -> Result<PathBuf, HarnessError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(kernel_dir())
        .args([
            "build",
            "--release",
            "--target",
            KERNEL_TARGET,
            "--target-dir",
        ])
        .arg(target_dir)
        // The outer build's target dir must not leak into the nested one.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::Build(format!("starting cargo: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Build(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    let elf = target_dir
        .join(KERNEL_TARGET)
        .join("release/pageframe-kernel");
    if elf.is_file() {
        Ok(elf)
    } else {
        Err(HarnessError::Build(format!(
            "{} was not produced",
            elf.display()
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
    /// Kill QEMU after this long.
    pub timeout: Duration,
}

impl BootConfig {
    /// A guest of `mem` RAM and two CPUs running `append`, 240 s time-out
    /// (first-touch page faults on the host dominate and vary widely).
    pub fn new(mem: &str, append: &str) -> Self {
        Self {
            mem: mem.to_owned(),
            smp: 2,
            numa: 0,
            append: append.to_owned(),
            timeout: Duration::from_secs(240),
        }
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
    /// QEMU's own diagnostics.
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

/// Boots `elf` under QEMU (TCG, q35, qemu64 with 1 GiB pages) and waits for
/// it to exit.
pub fn boot(elf: &Path, cfg: &BootConfig) -> Result<Boot, HarnessError> {
    let start = Instant::now();
    let mut child = Command::new(QEMU)
        .args([
            "-accel",
            "tcg",
            "-machine",
            "q35",
            "-cpu",
            "qemu64,+pdpe1gb",
        ])
        .args(["-m", &cfg.mem, "-smp", &cfg.smp.to_string()])
        .args(numa_args(cfg)?)
        .arg("-kernel")
        .arg(elf)
        .args(["-append", &cfg.append])
        .args(["-serial", "stdio", "-display", "none", "-monitor", "none"])
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

    let verdict = loop {
        if let Some(status) = child.try_wait().map_err(HarnessError::Io)? {
            break match status.code() {
                Some(33) => Verdict::Pass,
                Some(35) => Verdict::Fail,
                Some(0) => Verdict::Reset,
                code => Verdict::Other(code),
            };
        }
        if start.elapsed() > cfg.timeout {
            let _ = child.kill();
            let _ = child.wait();
            break Verdict::Timeout;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    Ok(Boot {
        verdict,
        serial: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        elapsed,
    })
}
