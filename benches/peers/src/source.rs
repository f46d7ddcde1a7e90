//! Which llfree-rs was measured: its version from its Cargo.toml and its
//! commit from git when the crate is in a checkout of llfree-rs, else from
//! the first of its files that names one (a copy without its git history
//! says it in its README).

use std::fs;
use std::path::Path;
use std::process::Command;

/// Files looked at for the commit, in order (the last: the README of the
/// repository the crate is in).
const COMMIT_FILES: &[&str] = &[
    "README.md",
    "UPSTREAM-README.md",
    "Cargo.toml",
    "../README.md",
];

/// The measured llfree: version, commit and the file the commit came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `version` of its Cargo.toml's package.
    pub version: Option<String>,
    /// The commit and the file that named it.
    pub commit: Option<(String, String)>,
}

impl Source {
    /// Reads the crate at `dir`.
    pub fn read(dir: &Path) -> Source {
        let version = fs::read_to_string(dir.join("Cargo.toml"))
            .ok()
            .and_then(|t| package_version(&t));
        let commit = git_head(dir)
            .map(|c| (c, "git checkout".to_owned()))
            .or_else(|| {
                COMMIT_FILES.iter().find_map(|f| {
                    let text = fs::read_to_string(dir.join(f)).ok()?;
                    Some((commit_in(&text)?, (*f).to_owned()))
                })
            });
        Source { version, commit }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let version = self.version.as_deref().unwrap_or("version unknown");
        match &self.commit {
            Some((c, from)) => format!("llfree {version}, commit {c} (from its {from})"),
            None => format!(
                "llfree {version}, commit not named in {}",
                COMMIT_FILES.join(", ")
            ),
        }
    }
}

/// The commit checked out, when `dir` or its parent is the top of a git
/// checkout (not merely somewhere inside another repository).
fn git_head(dir: &Path) -> Option<String> {
    if !dir.join(".git").exists() && !dir.join("../.git").exists() {
        return None;
    }
    let out = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .current_dir(dir)
        .output()
        .ok()?;
    let head = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !head.is_empty()).then_some(head)
}

/// `version = "…"` of the `[package]` table.
fn package_version(toml: &str) -> Option<String> {
    let mut in_package = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(v) = line.strip_prefix("version") {
            return Some(
                v.trim_start()
                    .strip_prefix('=')?
                    .trim()
                    .trim_matches('"')
                    .to_owned(),
            );
        }
    }
    None
}

/// The hexadecimal word (7 to 40 digits) after the word `commit`, as in
/// "at commit 441c8d1" or `commit = "441c8d1"`.
fn commit_in(text: &str) -> Option<String> {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || "=\"'`(),;:".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    words.windows(2).find_map(|w| {
        let hex = w[1].trim_end_matches('.');
        (w[0].eq_ignore_ascii_case("commit")
            && (7..=40).contains(&hex.len())
            && hex.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| hex.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::{commit_in, package_version};

    #[test]
    fn finds_the_commit_word() {
        assert_eq!(
            commit_in("The crate of x/y at commit 441c8d1\n(2026-06-08)").as_deref(),
            Some("441c8d1")
        );
        assert_eq!(
            commit_in("[package.metadata]\ncommit = \"0123456789abcdef\"").as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(commit_in("commit to nothing; commit 12345"), None);
    }

    #[test]
    fn reads_the_package_version() {
        let toml =
            "[package]\nname = \"llfree\"\nversion = \"0.2.0\"\n[dependencies]\nversion = \"9\"";
        assert_eq!(package_version(toml).as_deref(), Some("0.2.0"));
        assert_eq!(package_version("[dependencies]\nversion = \"1\""), None);
    }
}
