//! Checks docs/architecture.md, the map of the code: every repository path
//! it names in backticks (`crates/…/x.rs`, `docs/…`) exists, so the map
//! cannot point at a file that was moved or removed.

use std::path::Path;

use regex::Regex;

/// The map, relative to the repository root.
const MAP: &str = "docs/architecture.md";

/// The repository paths named in backticks in `text`, with their line
/// numbers: code spans whose whole content is a relative path under one
/// of the repository's top-level directories. Patterns (`src/*`,
/// `0N-<name>.md`) are not paths and are left out.
fn backticked_paths(text: &str) -> Vec<(usize, String)> {
    let span = Regex::new(r"`([^`\n]+)`").expect("valid regex");
    let path =
        Regex::new(r"^(?:crates|docs|xtask|examples|benches|fuzz|integrations)/[A-Za-z0-9_./-]*$")
            .expect("valid regex");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for c in span.captures_iter(line) {
            let s = c[1].trim();
            if path.is_match(s) {
                out.push((n + 1, s.trim_end_matches('/').to_string()));
            }
        }
    }
    out
}

/// The paths the map names that do not exist under `root`, as
/// `docs/architecture.md:line: path`.
fn missing(root: &Path) -> Result<(usize, Vec<String>), String> {
    let file = root.join(MAP);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let paths = backticked_paths(&text);
    let bad = paths
        .iter()
        .filter(|(_, p)| !root.join(p).exists())
        .map(|(n, p)| format!("{MAP}:{n}: {p}"))
        .collect();
    Ok((paths.len(), bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backticked_paths_are_found_and_patterns_skipped() {
        let got = backticked_paths(
            "see `crates/pcp/src/home.rs` and `docs/rules/`,\n\
             not `crates/pcp/src/*`, `CpuCache::alloc`, `spec 04 §7` or `a/b`",
        );
        assert_eq!(
            got,
            [
                (1, "crates/pcp/src/home.rs".to_string()),
                (1, "docs/rules".to_string())
            ]
        );
    }

    /// Every path docs/architecture.md names exists.
    #[test]
    fn every_path_the_architecture_map_names_exists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let (named, bad) = missing(&root).expect("the map is readable");
        assert!(named > 0, "{MAP} names no path: is the pattern right?");
        assert!(
            bad.is_empty(),
            "paths that do not exist:\n{}",
            bad.join("\n")
        );
    }
}
