//! The facade's layers: every module file of `crates/pageframe/src` sits in
//! one layer, and imports point down (or within the layer), never up.
//!
//! A reader can then learn the facade from the bottom, one layer at a
//! time, and a change to a lower file cannot depend on how a higher one
//! uses it. [`LAYERS`] is the one place that says which file is in which
//! layer; the crate docs and docs/architecture.md describe the same table.
//!
//! What counts as an import of file B by file A: a path that names B or an
//! item reached through B, written in A's code, as `crate::…` (also
//! `$crate::…`), `super::…`, `self::…` or, in a `mod.rs`, a path starting
//! with one of its own child modules; a `use` of such a path, re-exports
//! (`pub use`) included. A path through the crate root's re-exports
//! (`crate::Machine`) counts as an import of the file the root takes it
//! from. Not imports: comments, so intra-doc links (`[`crate::Machine`]`)
//! and doc tests; `use` items under `#[cfg(doc)]`, which only serve such
//! links; string literals; and items under `#[cfg(test)]` (test modules
//! and test-only helpers), which may reach anything. Calling a
//! method is not an import either: `impl Machine` in a file counts only
//! through the paths that file names.
//!
//! The check fails when the files form an import cycle (even within a
//! layer), when more imports point up than [`BACK_BUDGET`] allows, and when
//! a module file is missing from the table (or the table names a file that
//! is gone).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The facade's sources, relative to the repository root.
pub const FACADE: &str = "crates/pageframe/src";

/// The layers, bottom first. A file may import files of its own layer and
/// of the layers below.
pub const LAYER_NAMES: [&str; 5] = [
    "values and hooks",
    "zone and per-CPU caches",
    "machine",
    "services",
    "debugging tools",
];

/// Every module file of the facade (relative to [`FACADE`]) and its layer,
/// an index into [`LAYER_NAMES`]. A public module that only gathers names
/// (`zone.rs`, `topology.rs`, `debug/mod.rs`, `boot/mod.rs`) sits at the
/// layer of the highest file it gathers from; the code it names lives in
/// private files at their own layers.
pub const LAYERS: &[(&str, usize)] = &[
    // Values and hooks: what every other file speaks in, and the state a
    // zone or the machine embeds (counters, owner records, CMA areas, the
    // fault-injection switch).
    ("block.rs", 0),
    ("cma_area.rs", 0),
    ("debug/fail.rs", 0),
    ("debug/hooks.rs", 0),
    ("debug/owner_record.rs", 0),
    ("debug/vmstat.rs", 0),
    ("error.rs", 0),
    ("frame_state.rs", 0),
    ("gfp.rs", 0),
    ("lock.rs", 0),
    // The kernel's hook for moving pages, beside the other hooks.
    ("migrator.rs", 0),
    ("node_id.rs", 0),
    ("numa.rs", 0),
    ("numa_stats.rs", 0),
    ("sync.rs", 0),
    ("zone_kind.rs", 0),
    // The zone and its per-CPU caches.
    ("cache.rs", 1),
    ("fragmap.rs", 1),
    ("frame_run.rs", 1),
    ("pageblock_pool.rs", 1),
    ("stripe.rs", 1),
    ("zone_core.rs", 1),
    ("zone_layout.rs", 1),
    // The machine: nodes, zonelists, the allocation and free calls. The
    // slow path compacts directly (compaction.rs adapts the zones to the
    // compact crate), follows the THP policy (thp.rs) and poisons on the
    // way in and out (debug/poison.rs), so those are here too.
    ("compaction.rs", 2),
    ("cpu.rs", 2),
    ("debug/poison.rs", 2),
    ("guard.rs", 2),
    ("machine.rs", 2),
    ("node.rs", 2),
    ("nolock.rs", 2),
    ("slow_path.rs", 2),
    ("thp.rs", 2),
    ("topology.rs", 2),
    ("tune.rs", 2),
    ("zone.rs", 2),
    ("zonelist.rs", 2),
    // Services built on the machine.
    ("boot/bootloader_api.rs", 3),
    ("boot/builder.rs", 3),
    ("boot/incremental.rs", 3),
    ("boot/limine.rs", 3),
    ("boot/map.rs", 3),
    ("boot/mod.rs", 3),
    ("boot/multiboot2.rs", 3),
    ("boot/plan.rs", 3),
    ("boot/uefi.rs", 3),
    ("cma.rs", 3),
    ("contig.rs", 3),
    ("hotplug.rs", 3),
    ("kcompactd.rs", 3),
    ("paging.rs", 3),
    ("partial.rs", 3),
    ("reporting.rs", 3),
    // The debugging tools: reading the whole machine.
    ("debug/buddyinfo.rs", 4),
    ("debug/inspect.rs", 4),
    ("debug/mod.rs", 4),
    ("debug/owner.rs", 4),
    ("debug/vmstat_sum.rs", 4),
    ("debug/zoneinfo.rs", 4),
];

/// Files outside the layers, and why.
pub const OUTSIDE: &[(&str, &str)] = &[
    (
        "lib.rs",
        "the crate root: declares every module and re-exports from all layers",
    ),
    ("loom_model.rs", "a test module (`cfg(all(test, loom))`)"),
];

/// How many imports may point up, from a file to a file of a higher layer.
pub const BACK_BUDGET: usize = 0;

/// One import: the importing file, the imported file, and where the first
/// path that makes it is written (line, path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub from: String,
    pub to: String,
    pub line: usize,
    pub path: String,
}

/// The import graph of a set of module files.
#[derive(Debug, Default)]
pub struct Graph {
    /// Distinct (from, to) pairs, the first place each is made.
    pub imports: Vec<Import>,
}

impl Graph {
    /// The imports that point from a lower layer to a higher one.
    pub fn back<'g>(&'g self, layer: &dyn Fn(&str) -> Option<usize>) -> Vec<&'g Import> {
        self.imports
            .iter()
            .filter(|i| match (layer(&i.from), layer(&i.to)) {
                (Some(a), Some(b)) => b > a,
                _ => false,
            })
            .collect()
    }

    /// The strongly connected components of more than one file: each is a
    /// set of files that all reach each other, sorted.
    pub fn cycles(&self) -> Vec<Vec<String>> {
        let mut nodes: BTreeSet<&str> = BTreeSet::new();
        let mut out: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for i in &self.imports {
            nodes.insert(&i.from);
            nodes.insert(&i.to);
            out.entry(&i.from).or_default().push(&i.to);
        }
        // Tarjan's algorithm; the graphs are small, recursion is fine.
        struct T<'a> {
            out: BTreeMap<&'a str, Vec<&'a str>>,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on: BTreeSet<&'a str>,
            next: usize,
            sccs: Vec<Vec<String>>,
        }
        fn visit<'a>(t: &mut T<'a>, v: &'a str) {
            t.index.insert(v, t.next);
            t.low.insert(v, t.next);
            t.next += 1;
            t.stack.push(v);
            t.on.insert(v);
            for w in t.out.get(v).cloned().unwrap_or_default() {
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if t.low[v] == t.index[v] {
                let mut scc = Vec::new();
                loop {
                    let w = t.stack.pop().expect("on the stack");
                    t.on.remove(w);
                    scc.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    t.sccs.push(scc);
                }
            }
        }
        let mut t = T {
            out,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            next: 0,
            sccs: Vec::new(),
        };
        for v in nodes {
            if !t.index.contains_key(v) {
                visit(&mut t, v);
            }
        }
        t.sccs.sort();
        t.sccs
    }
}

/// The module path of a file: `debug/owner.rs` is `debug::owner`,
/// `debug/mod.rs` is `debug`, `lib.rs` is the root (empty).
fn module_of(file: &str) -> Vec<String> {
    let f = file.trim_end_matches(".rs");
    let mut segs: Vec<String> = f.split('/').map(str::to_string).collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

/// `text` with comments, string and character literals blanked out
/// (newlines kept, so line numbers stay right).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied().unwrap_or('\0');
        if at(0) == '/' && at(1) == '/' {
            while i < c.len() && c[i] != '\n' {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if at(0) == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if at(0) == 'r'
            && (at(1) == '"' || (at(1) == '#' && (at(2) == '"' || at(2) == '#')))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|h| c.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if at(0) == '"' {
            blank(&mut out, '"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, '"');
                i += 1;
            }
        } else if at(0) == '\''
            && (at(2) == '\'' || (at(1) == '\\' && (at(3) == '\'' || at(1) == '\\')))
        {
            // A character literal ('a', '\n', '\'', '\u{…}'), not a lifetime.
            let mut j = i + 1;
            if c.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            for &ch in &c[i..(j + 1).min(c.len())] {
                blank(&mut out, ch);
            }
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

/// Tokens with their line numbers; `$crate` reads as `crate`.
fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' || (ch == '$' && c.get(i + 1) == Some(&'c')) {
            let start = if ch == '$' { i + 1 } else { i };
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let mut s: String = c[start..i].iter().collect();
            if let Some(r) = s.strip_prefix("r#") {
                s = r.to_string();
            }
            out.push((Tok::Ident(s), line));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(ch), line));
            i += 1;
        }
    }
    out
}

/// The tokens without the items under a test-only `cfg` (`cfg(test)`,
/// `cfg(all(test, …))`) or a docs-only one (`cfg(doc)`, a `use` that
/// only serves intra-doc links): the attribute, any attributes after it,
/// and the item up to its `;`, `,` or closing brace.
fn drop_test_items(toks: Vec<(Tok, usize)>) -> Vec<(Tok, usize)> {
    let p = |k: usize, ch: char| matches!(toks.get(k), Some((Tok::Punct(c), _)) if *c == ch);
    let id = |k: usize, s: &str| matches!(toks.get(k), Some((Tok::Ident(t), _)) if t == s);
    // The index after the attribute that opens at `k` (`#`), if it is one.
    let attr_end = |k: usize| -> Option<usize> {
        if !(p(k, '#') && p(k + 1, '[')) {
            return None;
        }
        let mut depth = 0;
        for (j, (t, _)) in toks.iter().enumerate().skip(k + 1) {
            match t {
                Tok::Punct('[') => depth += 1,
                Tok::Punct(']') => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j + 1);
                    }
                }
                _ => {}
            }
        }
        None
    };
    let test_only = |k: usize| {
        id(k + 2, "cfg")
            && p(k + 3, '(')
            && ((id(k + 4, "test") || id(k + 4, "doc")) && p(k + 5, ')')
                || id(k + 4, "all") && p(k + 5, '(') && id(k + 6, "test"))
    };
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        let Some(end) = attr_end(i).filter(|_| test_only(i)) else {
            out.push(toks[i].clone());
            i += 1;
            continue;
        };
        let mut j = end;
        while let Some(e) = attr_end(j) {
            j = e;
        }
        let mut depth = 0i32;
        while j < toks.len() {
            match toks[j].0 {
                Tok::Punct('(' | '[' | '{') => depth += 1,
                Tok::Punct(')' | ']') => depth -= 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth <= 0 {
                        // The item's body closed (or the enclosing one:
                        // keep its brace).
                        j += usize::from(depth == 0);
                        break;
                    }
                }
                Tok::Punct(';' | ',') if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            if depth < 0 {
                break;
            }
            j += 1;
        }
        i = j;
    }
    out
}

/// What a `use` binds: a name, or every public name of a module (`*`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Bind {
    Name(String),
    Glob,
}

/// A file's paths and the names its `use` items bind.
#[derive(Debug, Default)]
struct Parsed {
    /// (line, absolute segments from the crate root) of every path into
    /// the crate.
    paths: Vec<(usize, Vec<String>)>,
    /// A name's absolute path (the module it is bound in, then the name)
    /// and what it stands for: an absolute path into the crate, or `None`
    /// for an item from outside (`core`, another crate).
    binds: Vec<(Vec<String>, Option<Vec<String>>)>,
}

/// Reads a file whose module path is `module`: the paths it names into
/// the crate (`crate::…`, `self::…`, `super::…`, and paths that start
/// with a module it declares) and what its `use` items bind.
fn parse(text: &str, module: &[String]) -> Parsed {
    let toks = drop_test_items(tokens(&strip(text)));
    let ident = |k: usize| match toks.get(k) {
        Some((Tok::Ident(s), _)) => Some(s.as_str()),
        _ => None,
    };
    let is = |k: usize, t: Tok| toks.get(k).is_some_and(|(x, _)| *x == t);
    // Modules declared in this file, with the module they are declared in:
    // `mod x;` and inline `mod x { … }`.
    let mut declared: BTreeSet<Vec<String>> = BTreeSet::new();
    {
        let mut here: Vec<String> = module.to_vec();
        let mut braces: Vec<bool> = Vec::new();
        for (k, (tok, _)) in toks.iter().enumerate() {
            match tok {
                Tok::Punct('{') => {
                    let inline = k >= 2 && ident(k - 2) == Some("mod") && ident(k - 1).is_some();
                    if inline {
                        here.push(ident(k - 1).unwrap_or_default().to_string());
                        declared.insert(here.clone());
                    }
                    braces.push(inline);
                }
                Tok::Punct('}') => {
                    let inline = braces.pop();
                    if inline == Some(true) {
                        here.pop();
                    }
                }
                Tok::Punct(';') if k >= 2 && ident(k - 2) == Some("mod") => {
                    if let Some(name) = ident(k - 1) {
                        declared.insert([here.clone(), vec![name.to_string()]].concat());
                    }
                }
                _ => {}
            }
        }
    }
    // A path's segments made absolute, if it leads into the crate.
    let absolute = |here: &[String], p: &[String]| -> Option<Vec<String>> {
        let first = p.first()?;
        match first.as_str() {
            "crate" => Some(p[1..].to_vec()),
            "self" => Some([here, &p[1..]].concat()),
            "super" => {
                let ups = p.iter().take_while(|s| *s == "super").count();
                let keep = here.len().checked_sub(ups)?;
                Some([&here[..keep], &p[ups..]].concat())
            }
            c => {
                let child = [here.to_vec(), vec![c.to_string()]].concat();
                declared.contains(&child).then(|| [here, p].concat())
            }
        }
    };
    let mut out = Parsed::default();
    let mut here: Vec<String> = module.to_vec();
    let mut braces: Vec<bool> = Vec::new();
    let mut k = 0;
    while k < toks.len() {
        match &toks[k].0 {
            Tok::Punct('{') => {
                let inline = k >= 2 && ident(k - 2) == Some("mod") && ident(k - 1).is_some();
                if inline {
                    here.push(ident(k - 1).unwrap_or_default().to_string());
                }
                braces.push(inline);
                k += 1;
                continue;
            }
            Tok::Punct('}') => {
                if braces.pop() == Some(true) {
                    here.pop();
                }
                k += 1;
                continue;
            }
            _ => {}
        }
        let line = toks[k].1;
        let after_sep = k > 0 && is(k - 1, Tok::Path);
        if ident(k) == Some("use") && !after_sep {
            let (ts, next) = tree(&toks, k + 1);
            for (p, bind) in ts {
                let mut target = absolute(&here, &p);
                if let Some(t) = &target {
                    out.paths.push((line, t.clone()));
                }
                if let Bind::Name(mut name) = bind {
                    // `use a::b::{self}` binds `b`.
                    if name == "self" {
                        name = p.iter().rev().nth(1).cloned().unwrap_or_default();
                    }
                    if let Some(t) = target
                        .as_mut()
                        .filter(|t| t.last().is_some_and(|l| l == "self"))
                    {
                        t.pop();
                    }
                    out.binds
                        .push(([here.clone(), vec![name]].concat(), target));
                }
            }
            k = next;
            continue;
        }
        let starts = !after_sep
            && is(k + 1, Tok::Path)
            && ident(k).is_some_and(|s| {
                matches!(s, "crate" | "self" | "super")
                    || declared.contains(&[here.clone(), vec![s.to_string()]].concat())
            });
        if starts {
            let (ts, next) = tree(&toks, k);
            out.paths.extend(
                ts.into_iter()
                    .filter_map(|(p, _)| absolute(&here, &p))
                    .map(|t| (line, t)),
            );
            k = next.max(k + 1);
        } else {
            k += 1;
        }
    }
    out
}

/// A path tree starting at token `k` (`a::b`, `a::b as c`,
/// `a::{b, c::d}`, `a::*`): its paths with what each binds, and the index
/// after it.
fn tree(toks: &[(Tok, usize)], mut k: usize) -> (Vec<(Vec<String>, Bind)>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    if matches!(toks.get(k), Some((Tok::Path, _))) {
        // `::core::…`: a path from outside the crate.
        prefix.push("::".into());
        k += 1;
    }
    loop {
        match toks.get(k).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                prefix.push(s.clone());
                k += 1;
                if matches!(toks.get(k), Some((Tok::Path, _))) {
                    k += 1;
                    continue;
                }
                let mut bind = Bind::Name(s.clone());
                if matches!(toks.get(k), Some((Tok::Ident(a), _)) if a == "as") {
                    if let Some((Tok::Ident(alias), _)) = toks.get(k + 1) {
                        bind = Bind::Name(alias.clone());
                    }
                    k += 2;
                }
                return (vec![(prefix, bind)], k);
            }
            Some(Tok::Punct('{')) => {
                k += 1;
                let mut all = Vec::new();
                loop {
                    match toks.get(k).map(|t| &t.0) {
                        Some(Tok::Punct('}')) | None => {
                            k += 1;
                            break;
                        }
                        Some(Tok::Punct(',')) => k += 1,
                        _ => {
                            let (sub, next) = tree(toks, k);
                            all.extend(
                                sub.into_iter()
                                    .map(|(s, b)| ([prefix.clone(), s].concat(), b)),
                            );
                            k = next.max(k + 1);
                        }
                    }
                }
                return (all, k);
            }
            Some(Tok::Punct('*')) => return (vec![(prefix, Bind::Glob)], k + 1),
            // A turbofish `a::<T>`, or the end.
            _ => {
                let bind = Bind::Name(prefix.last().cloned().unwrap_or_default());
                return (vec![(prefix, bind)], k);
            }
        }
    }
}

/// The module file a path leads to, if it leads into the facade: names
/// bound by a `use` are followed to what they stand for (so a re-export
/// leads to the file that defines the item), then the longest prefix that
/// is a module file is the answer.
fn resolve(
    path: &[String],
    files: &BTreeMap<Vec<String>, String>,
    binds: &BTreeMap<Vec<String>, Option<Vec<String>>>,
) -> Option<String> {
    let mut path = path.to_vec();
    'follow: for _ in 0..8 {
        for n in (1..=path.len()).rev() {
            if let Some(to) = binds.get(&path[..n]) {
                let to = to.as_ref()?;
                if to.as_slice() != &path[..n] {
                    path = [to.clone(), path[n..].to_vec()].concat();
                    continue 'follow;
                }
            }
            if files.contains_key(&path[..n]) {
                break 'follow;
            }
        }
        break;
    }
    (1..=path.len())
        .rev()
        .find_map(|n| files.get(&path[..n]).cloned())
}

/// The import graph of `sources`: file name (relative, `debug/owner.rs`)
/// and text. `lib.rs`, when present, is read for the root's re-exports
/// and is not a node.
pub fn graph(sources: &[(String, String)]) -> Graph {
    let files: BTreeMap<Vec<String>, String> = sources
        .iter()
        .filter(|(f, _)| f != "lib.rs")
        .map(|(f, _)| (module_of(f), f.clone()))
        .collect();
    let parsed: Vec<(&String, Parsed)> = sources
        .iter()
        .map(|(f, t)| (f, parse(t, &module_of(f))))
        .collect();
    let binds: BTreeMap<Vec<String>, Option<Vec<String>>> = parsed
        .iter()
        .flat_map(|(_, p)| p.binds.iter().cloned())
        .collect();
    let mut g = Graph::default();
    let mut seen = BTreeSet::new();
    for (f, p) in parsed.iter().filter(|(f, _)| *f != "lib.rs") {
        for (line, path) in &p.paths {
            let Some(to) = resolve(path, &files, &binds) else {
                continue;
            };
            if to != **f && seen.insert(((*f).clone(), to.clone())) {
                g.imports.push(Import {
                    from: (*f).clone(),
                    to,
                    line: *line,
                    path: path.join("::"),
                });
            }
        }
    }
    g
}

/// The facade's module files under `dir`, relative, sorted.
fn module_files(dir: &Path) -> Result<Vec<String>, String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for e in entries {
            let e = e.map_err(|e| e.to_string())?;
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            if e.path().is_dir() {
                walk(&e.path(), &rel, out)?;
            } else if name.ends_with(".rs") {
                out.push(rel);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

/// The layer of a file, from [`LAYERS`].
pub fn layer_of(file: &str) -> Option<usize> {
    LAYERS.iter().find(|(f, _)| *f == file).map(|&(_, l)| l)
}

/// What `cargo xtask layers` reports: the counts, every import that points
/// up, every cycle, and the table's problems.
pub struct Report {
    pub files: usize,
    pub imports: Vec<Import>,
    pub back: Vec<Import>,
    pub cycles: Vec<Vec<String>>,
    /// Files without a layer, and table rows without a file.
    pub table: Vec<String>,
}

/// What is wrong with [`LAYERS`] for the module files `names`: a file
/// without a layer, or a row for a file that does not exist.
fn table_problems(names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for f in names {
        if layer_of(f).is_none() && !OUTSIDE.iter().any(|(o, _)| o == f) {
            out.push(format!(
                "{FACADE}/{f} has no layer: add it to LAYERS in xtask/src/layers.rs"
            ));
        }
    }
    for f in LAYERS
        .iter()
        .map(|l| l.0)
        .chain(OUTSIDE.iter().map(|o| o.0))
    {
        if !names.iter().any(|n| n == f) {
            out.push(format!(
                "xtask/src/layers.rs names {FACADE}/{f}, which does not exist"
            ));
        }
    }
    out
}

/// Reads the facade under `root` and checks it against [`LAYERS`].
pub fn report(root: &Path) -> Result<Report, String> {
    let dir = root.join(FACADE);
    let names = module_files(&dir)?;
    let table = table_problems(&names);
    let mut sources = Vec::new();
    for f in &names {
        let text =
            std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{FACADE}/{f}: {e}"))?;
        sources.push((f.clone(), text));
    }
    let g = graph(&sources);
    let back = g.back(&layer_of).into_iter().cloned().collect();
    Ok(Report {
        imports: g.imports.clone(),
        files: names.len(),
        back,
        cycles: g.cycles(),
        table,
    })
}

/// `cargo xtask layers [--all]`, also part of `lint`: prints the counts
/// and every import that points up (with `--all`, every import), and
/// fails on a cycle, on more imports pointing up than [`BACK_BUDGET`], or
/// on a file without a layer.
pub fn check(root: &Path, all: bool) -> Result<(), String> {
    let r = report(root)?;
    let describe = |i: &Import| {
        let (a, b) = (layer_of(&i.from), layer_of(&i.to));
        format!(
            "{} ({}) -> {} ({}): `{}` at line {}",
            i.from,
            a.map_or("?", |l| LAYER_NAMES[l]),
            i.to,
            b.map_or("?", |l| LAYER_NAMES[l]),
            i.path,
            i.line
        )
    };
    if all {
        for i in &r.imports {
            println!("layers: import: {}", describe(i));
        }
    }
    for i in &r.back {
        println!("layers: up: {}", describe(i));
    }
    for c in &r.cycles {
        println!("layers: cycle among {}", c.join(", "));
    }
    println!(
        "layers: {} module files, {} imports between them, {} pointing up \
         (budget {BACK_BUDGET}), {} cycles",
        r.files,
        r.imports.len(),
        r.back.len(),
        r.cycles.len()
    );
    let mut bad = r.table;
    if !r.cycles.is_empty() {
        bad.push(format!(
            "{} import cycles among the facade's files",
            r.cycles.len()
        ));
    }
    if r.back.len() > BACK_BUDGET {
        bad.push(format!(
            "{} imports point up, over the budget of {BACK_BUDGET}: move the item down \
             (or the code that needs it up)",
            r.back.len()
        ));
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("layers:\n{}", bad.join("\n")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(files: &[(&str, &str)]) -> Vec<(String, String)> {
        files
            .iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect()
    }

    fn edges(g: &Graph) -> Vec<(String, String)> {
        let mut e: Vec<_> = g
            .imports
            .iter()
            .map(|i| (i.from.clone(), i.to.clone()))
            .collect();
        e.sort();
        e
    }

    fn pair(a: &str, b: &str) -> (String, String) {
        (a.to_string(), b.to_string())
    }

    #[test]
    fn uses_code_paths_and_root_reexports_are_imports() {
        let g = graph(&src(&[
            (
                "lib.rs",
                "mod a; mod b; pub mod d;\npub use b::B;\npub mod p { pub use crate::a::Q; }",
            ),
            (
                "a.rs",
                "use crate::{b::{self, X}, d::inner::Y};\nfn f() { crate::B::new(); }",
            ),
            ("b.rs", "fn g() -> crate::p::Q { Q::new() }"),
            ("d/mod.rs", "mod inner;\npub use inner::Y;"),
            ("d/inner.rs", "use super::super::a::Z; use super::W;"),
        ]));
        assert_eq!(
            edges(&g),
            [
                pair("a.rs", "b.rs"),
                pair("a.rs", "d/inner.rs"),
                pair("b.rs", "a.rs"),
                pair("d/inner.rs", "a.rs"),
                pair("d/inner.rs", "d/mod.rs"),
                pair("d/mod.rs", "d/inner.rs"),
            ]
        );
    }

    #[test]
    fn comments_strings_and_test_items_are_not_imports() {
        let g = graph(&src(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "//! See [`crate::b::B`].\n/// [`crate::b`]\n/* crate::b::C */\n\
                 fn f() -> &'static str { \"crate::b::D\" }\n\
                 fn c() -> char { 'x' }\n\
                 #[cfg(test)]\nuse crate::b::E;\n\
                 #[cfg(test)]\n#[allow(unused)]\nmod tests { use crate::b::F; }\n\
                 #[cfg(all(test, loom))]\nfn m() { crate::b::G::new(); }\n\
                 #[cfg(doc)]\nuse crate::b::I;\n\
                 struct S { #[cfg(test)] x: crate::b::H, y: u8 }",
            ),
            ("b.rs", "pub(crate) fn g<'a>(x: &'a u8) -> &'a u8 { x }"),
        ]));
        assert_eq!(edges(&g), []);
    }

    #[test]
    fn cycles_and_back_imports_are_found_on_a_tiny_graph() {
        // Layers: low.rs 0, mid.rs 1, top.rs 2. low -> top points up and
        // closes the cycle low -> top -> mid -> low.
        let g = graph(&src(&[
            ("lib.rs", "mod low; mod mid; mod top;"),
            ("low.rs", "use crate::top::T;"),
            ("mid.rs", "use crate::low::L;"),
            ("top.rs", "use crate::mid::M; use crate::low::L;"),
        ]));
        let layer = |f: &str| match f {
            "low.rs" => Some(0),
            "mid.rs" => Some(1),
            "top.rs" => Some(2),
            _ => None,
        };
        let back: Vec<_> = g.back(&layer).iter().map(|i| i.path.clone()).collect();
        assert_eq!(back, ["top::T"]);
        assert_eq!(g.cycles(), [["low.rs", "mid.rs", "top.rs"]]);

        // Without the back-import: no cycle, nothing points up.
        let g = graph(&src(&[
            ("lib.rs", "mod low; mod mid; mod top;"),
            ("low.rs", ""),
            ("mid.rs", "use crate::low::L;"),
            ("top.rs", "use crate::mid::M; use crate::low::L;"),
        ]));
        assert!(g.back(&layer).is_empty());
        assert!(g.cycles().is_empty());
    }

    #[test]
    fn a_file_without_a_layer_and_a_row_without_a_file_are_reported() {
        let mut names: Vec<String> = LAYERS
            .iter()
            .map(|l| l.0)
            .chain(OUTSIDE.iter().map(|o| o.0))
            .map(str::to_string)
            .collect();
        assert!(table_problems(&names).is_empty());
        names.retain(|n| n != "zone_core.rs");
        names.push("stray.rs".into());
        let bad = table_problems(&names);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("stray.rs has no layer"), "{bad:?}");
        assert!(
            bad[1].contains("zone_core.rs, which does not exist"),
            "{bad:?}"
        );
    }

    /// The facade as it is: every file in the table, no cycle, and no more
    /// imports pointing up than the budget.
    #[test]
    fn the_facade_keeps_its_layers() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        check(&root, false).unwrap();
    }
}
