//! `cargo xtask peers`: pageframe beside llfree-rs, built from a copy of
//! llfree's crate given by path (never a dependency of the workspace: the
//! harness, benches/peers, is a package of its own with its own lock file).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{root, run, target_dir};

/// Where llfree-rs's crate is looked for, from the repository's root.
const DEFAULT_LLFREE: &str = "../shared/peers/llfree-rs";
/// The harness's manifest.
const HARNESS: &str = "benches/peers/Cargo.toml";
/// Where the harness's manifest expects llfree's crate (its `core`
/// directory, as in llfree-rs's repository, whose lib.rs includes the
/// README one level up).
const STAGE: &str = "target/peers-src/llfree-rs";

/// The llfree crate at `dir` (relative to the current directory), or at
/// the default place; a checkout of the whole llfree-rs repository is
/// taken for its `core` crate. An error says where it looked.
fn llfree_dir(dir: Option<&str>) -> Result<PathBuf, String> {
    let dir = match dir {
        Some(d) => std::env::current_dir().map_err(|e| e.to_string())?.join(d),
        None => root().join(DEFAULT_LLFREE),
    };
    for candidate in [dir.clone(), dir.join("core")] {
        let manifest = fs::read_to_string(candidate.join("Cargo.toml")).unwrap_or_default();
        if manifest.contains("name = \"llfree\"") {
            return candidate.canonicalize().map_err(|e| e.to_string());
        }
    }
    Err(format!(
        "no llfree crate at {} (looked for a Cargo.toml naming package \"llfree\" there and in its \
         core/); give its directory with --llfree DIR",
        dir.display()
    ))
}

/// Every file under `dir` (build output and git data left out), as paths
/// relative to it.
fn files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = fs::read_dir(dir.join(rel)).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let path = rel.join(&name);
        if e.path().is_dir() {
            if name != "target" && name != ".git" {
                files(dir, &path, out)?;
            }
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Writes `bytes` to `to` unless it holds them already (an unchanged copy
/// keeps its time stamp, so cargo does not rebuild it).
fn write_if_changed(to: &Path, bytes: &[u8]) -> Result<(), String> {
    if fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    fs::write(to, bytes).map_err(|e| format!("{}: {e}", to.display()))
}

/// Makes [`STAGE`] a copy of the crate at `dir`, with the README its
/// lib.rs includes beside it: the repository's own if `dir` is inside a
/// checkout, else the copy's UPSTREAM-README.md or README.md.
fn stage(dir: &Path) -> Result<(), String> {
    let stage = root().join(STAGE);
    let core = stage.join("core");
    let mut wanted = Vec::new();
    files(dir, Path::new(""), &mut wanted)?;
    for rel in &wanted {
        let bytes = fs::read(dir.join(rel)).map_err(|e| format!("{}: {e}", rel.display()))?;
        write_if_changed(&core.join(rel), &bytes)?;
    }
    let mut staged = Vec::new();
    files(&core, Path::new(""), &mut staged)?;
    for rel in staged.iter().filter(|r| !wanted.contains(r)) {
        fs::remove_file(core.join(rel)).map_err(|e| format!("{}: {e}", rel.display()))?;
    }
    let readme = [
        dir.join("../README.md"),
        dir.join("UPSTREAM-README.md"),
        dir.join("README.md"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .ok_or_else(|| {
        format!(
            "{}: no README for llfree's lib.rs to include",
            dir.display()
        )
    })?;
    let bytes = fs::read(&readme).map_err(|e| format!("{}: {e}", readme.display()))?;
    write_if_changed(&stage.join("README.md"), &bytes)
}

/// `cargo xtask peers [--llfree DIR] [harness arguments]`: stages llfree,
/// builds the harness and runs it, passing on every other argument (an
/// `--out FILE` taken from the current directory).
pub fn peers(args: &[String]) -> Result<(), String> {
    let mut llfree = None;
    let mut pass = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--llfree" => llfree = Some(it.next().ok_or("--llfree needs a directory")?.as_str()),
            "--out" => {
                let file = it.next().ok_or("--out needs a file")?;
                let here = std::env::current_dir().map_err(|e| e.to_string())?;
                pass.push("--out".to_owned());
                pass.push(here.join(file).display().to_string());
            }
            _ => pass.push(a.clone()),
        }
    }
    let dir = llfree_dir(llfree)?;
    stage(&dir)?;
    let command = std::iter::once("cargo xtask peers".to_owned())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    run(Command::new("cargo")
        .args([
            "run",
            "--release",
            "--manifest-path",
            HARNESS,
            "--target-dir",
        ])
        .arg(target_dir().join("peers"))
        .arg("--")
        .args(&pass)
        .arg("--llfree")
        .arg(&dir)
        .env("PEERS_COMMAND", command))
}

/// For `lint`: the harness's sources formatted, and, where llfree-rs is at
/// its default place, the harness (and its tests) through clippy with
/// warnings denied, against its committed lock file, and its tests run.
pub fn lint() -> Result<(), String> {
    run(Command::new("rustfmt").args([
        "--check",
        "--edition",
        "2024",
        "benches/peers/src/main.rs",
    ]))?;
    let dir = match llfree_dir(None) {
        Ok(dir) => dir,
        Err(e) => {
            println!("lint: the peers harness is not built: {e}");
            return Ok(());
        }
    };
    stage(&dir)?;
    run(Command::new("cargo")
        .args([
            "clippy",
            "--manifest-path",
            HARNESS,
            "--locked",
            "--all-targets",
            "--target-dir",
        ])
        .arg(target_dir().join("peers"))
        .args(["--", "-D", "warnings"]))?;
    run(Command::new("cargo")
        .args([
            "test",
            "--manifest-path",
            HARNESS,
            "--locked",
            "--target-dir",
        ])
        .arg(target_dir().join("peers")))
}
