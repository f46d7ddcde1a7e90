//! Checks over every tracked text file: each relative link and each path a
//! text cites exists, no document is cited that the repository does not
//! hold, and no text names an issue number (history lives in git).

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

/// Files the check reads: tracked text files.
fn tracked(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("git")
        .args(["ls-files"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("git ls-files: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter(|f| {
            let ext = Path::new(f).extension().and_then(|e| e.to_str());
            matches!(ext, Some("rs" | "md" | "toml" | "sh")) || *f == ".ci/run"
        })
        .map(|f| root.join(f))
        .collect())
}

/// The directory a crate-relative path (`src/…`, `tests/…`) starts from:
/// the nearest ancestor of `file` with a `Cargo.toml`.
fn crate_dir(root: &Path, file: &Path) -> PathBuf {
    let mut d = file.parent();
    while let Some(dir) = d {
        if dir.join("Cargo.toml").is_file() {
            return dir.to_path_buf();
        }
        if dir == root {
            break;
        }
        d = dir.parent();
    }
    root.to_path_buf()
}

/// Every problem found, one line each (`file:line: what`).
pub fn problems(root: &Path) -> Result<Vec<String>, String> {
    let link = Regex::new(r"\]\(([^)\s]+)\)").map_err(|e| e.to_string())?;
    let cited = Regex::new(
        r"(?:^|[\s`(\[])((?:\.\./)*(?:docs|crates|examples|benches|fuzz|xtask|\.ci|src|tests)/[A-Za-z0-9_./-]*[A-Za-z0-9_])",
    )
    .map_err(|e| e.to_string())?;
    let issue = Regex::new(r"(?i)\bissues?\s+#?[0-9]+").map_err(|e| e.to_string())?;
    // A numbered principle of a document nobody can find.
    let principle = Regex::new(r"\bprinciples?\s+[0-9]+").map_err(|e| e.to_string())?;
    // A document named in capitals, which a reader would look for at the
    // top of the repository.
    let caps_doc =
        Regex::new(r"\b(ARCHITECTURE|[A-Z][A-Z0-9_]{3,}\.md)\b").map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for file in tracked(root)? {
        // A symlink (a crate's README that is the repository's) is checked
        // where it points.
        if file
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        // This file spells out the patterns it looks for.
        if rel == "xtask/src/docs_check.rs" {
            continue;
        }
        let dir = file.parent().unwrap_or(root).to_path_buf();
        let krate = crate_dir(root, &file);
        // The rules files are the spec's text, with Linux's own paths.
        let spec = rel.starts_with("docs/rules/");
        for (n, line) in text.lines().enumerate() {
            let at = format!("{rel}:{}", n + 1);
            if let Some(m) = issue.find(line) {
                out.push(format!("{at}: names an issue number ({})", m.as_str()));
            }
            if let Some(m) = principle.find(line) {
                out.push(format!("{at}: cites {}, of no document here", m.as_str()));
            }
            if let Some(c) = caps_doc.captures(line) {
                let name = format!("{}.md", c[1].trim_end_matches(".md"));
                if !root.join(&name).is_file() {
                    out.push(format!(
                        "{at}: cites {name}, which the repository does not hold"
                    ));
                }
            }
            for c in link.captures_iter(line) {
                let target = c[1].split('#').next().unwrap_or("");
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                // Intra-doc links (`[x](crate::y)`) are rustdoc's to check.
                if file.extension().is_some_and(|e| e == "rs") && !target.contains('/') {
                    continue;
                }
                if !dir.join(target).exists() {
                    out.push(format!("{at}: link to {target}, which does not exist"));
                }
            }
            if spec {
                continue;
            }
            for c in cited.captures_iter(line) {
                let m = c.get(1).map_or(0..0, |m| m.range());
                // A pattern, not a path (`docs/rules/0N-….md`, `fuzz/<target>`).
                if line[m.end..]
                    .trim_start_matches(['-', '.', '/'])
                    .starts_with(['…', '<', '*', '{'])
                {
                    continue;
                }
                let p = c[1].trim_end_matches('.');
                if p.contains("target/")
                    || p.starts_with("fuzz/corpus")
                    || p.starts_with("fuzz/artifacts")
                {
                    continue;
                }
                let bare = p.trim_start_matches("../");
                let found = [root.join(bare), krate.join(bare), dir.join(p)]
                    .iter()
                    .any(|q| q.exists());
                if !found {
                    out.push(format!("{at}: cites {p}, which does not exist"));
                }
            }
        }
    }
    Ok(out)
}
