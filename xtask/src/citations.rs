//! Checks that every rule citation in the repository resolves to a section
//! of `docs/rules/`: `spec 0N §X` and `docs/rules/0N-….md §X`, where `X` is
//! a numbered heading of that file or item `N` of a numbered list under
//! heading `S` (written `S.N`). Ranges (`§7.1-7.4`) and lists (`§3, §9`)
//! check each number.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Section ids of one rules file: numbered headings, and `S.N` for item
/// `N` of a numbered list under heading `S`.
pub fn sections(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            let title = rest.trim_start_matches('#').trim_start();
            current = leading_number(title).map(|n| n.trim_end_matches('.').to_string());
            if let Some(c) = &current {
                out.insert(c.clone());
            }
        } else if let (Some(c), Some(n)) = (&current, leading_number(line)) {
            // A numbered list item "6. ..." under heading `c`.
            let n = n.trim_end_matches('.');
            if !n.contains('.') && line[n.len()..].starts_with(". ") {
                out.insert(format!("{c}.{n}"));
            }
        }
    }
    out
}

/// The number a string starts with (`7`, `7.1`, `13.`), if any.
fn leading_number(s: &str) -> Option<&str> {
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.'))
        .map_or(s.len(), |(i, _)| i);
    (end > 0 && s.as_bytes()[0].is_ascii_digit()).then(|| &s[..end])
}

/// One citation: rules file number (`01`..), section, where it was found.
#[derive(Debug, PartialEq, Eq)]
pub struct Citation {
    pub file: String,
    pub section: String,
    pub at: String,
}

/// The citations in `text` (from file `name`).
pub fn citations(text: &str, name: &str) -> Vec<Citation> {
    let mut out = Vec::new();
    for (ln, line) in text.lines().enumerate() {
        for marker in ["spec 0", "docs/rules/0"] {
            let mut from = 0;
            while let Some(i) = line[from..].find(marker) {
                let start = from + i + marker.len() - 1;
                from = start + 1;
                let file = &line[start..(start + 2).min(line.len())];
                if file.len() < 2 || !file.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                // Skip the rest of a file name ("-buddy.md").
                let mut rest = &line[start + 2..];
                if marker.starts_with("docs") {
                    rest = rest.split_once(".md").map_or("", |(_, r)| r);
                }
                // The cited sections: `§` numbers, separated by spaces,
                // commas and dashes, up to anything else.
                let span_end = rest
                    .char_indices()
                    .find(|&(_, c)| !(c.is_ascii_digit() || " §.,-–".contains(c)))
                    .map_or(rest.len(), |(i, _)| i);
                let span = &rest[..span_end];
                if !span.trim_start().starts_with('§') {
                    continue;
                }
                for part in span.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
                    let sec = part.trim_matches('.');
                    if !sec.is_empty() {
                        out.push(Citation {
                            file: file.to_string(),
                            section: sec.to_string(),
                            at: format!("{name}:{}", ln + 1),
                        });
                    }
                }
            }
        }
    }
    out
}

/// Source and doc files of the repository (no build outputs, no rules).
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "corpus" || name == "rules" {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else if name.ends_with(".rs") || name.ends_with(".md") {
            out.push(p);
        }
    }
}

/// Every citation under `root` that does not resolve, as `file:line: spec
/// 0N §X`.
pub fn unresolved(root: &Path) -> Result<Vec<String>, String> {
    let rules = root.join("docs/rules");
    let mut known: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in fs::read_dir(&rules).map_err(|e| format!("{}: {e}", rules.display()))? {
        let p = e.map_err(|e| e.to_string())?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.len() > 3 && name.as_bytes()[..2].iter().all(u8::is_ascii_digit) {
            let text = fs::read_to_string(&p).map_err(|e| e.to_string())?;
            known.insert(name[..2].to_string(), sections(&text));
        }
    }
    let mut all = Vec::new();
    files(root, &mut all);
    let mut bad = Vec::new();
    for f in all {
        let Ok(text) = fs::read_to_string(&f) else {
            continue;
        };
        let name = f.strip_prefix(root).unwrap_or(&f).display().to_string();
        for c in citations(&text, &name) {
            if !known.get(&c.file).is_some_and(|s| s.contains(&c.section)) {
                bad.push(format!("{}: spec {} §{}", c.at, c.file, c.section));
            }
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_are_headings_and_numbered_items() {
        let s = sections(
            "# 01 — Title\n## 7. Watermarks\n### 7.1 Min\ntext 3. no\n## 13. Invariants\n1. one\n11. eleven\n- x\n",
        );
        let want: BTreeSet<String> = ["01", "7", "7.1", "13", "13.1", "13.11"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(s, want);
    }

    #[test]
    fn citations_are_parsed_with_ranges_and_lists() {
        let c = citations(
            "x (spec 01 §7.1-7.4, §9; Linux 6.17+) and docs/rules/03-compaction.md §11.2 but not spec 02 alone",
            "f.rs",
        );
        let got: Vec<(&str, &str)> = c
            .iter()
            .map(|c| (c.file.as_str(), c.section.as_str()))
            .collect();
        assert_eq!(
            got,
            [("01", "7.1"), ("01", "7.4"), ("01", "9"), ("03", "11.2")]
        );
        assert_eq!(c[0].at, "f.rs:1");
    }

    /// Every citation in the repository names a section of `docs/rules/`.
    #[test]
    fn every_citation_in_the_repository_resolves() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bad = unresolved(&root).expect("rules readable");
        assert!(bad.is_empty(), "unresolved citations:\n{}", bad.join("\n"));
    }
}
