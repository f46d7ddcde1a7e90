//! The facade's public surface, read from rustdoc's JSON output: how many
//! items its root exports (a budget: a newcomer reads the root first),
//! whether any item is reachable under two public paths (one name per
//! concept), and how many methods `Machine` itself carries (a budget: the
//! calls a kernel makes on every path stay on it, tuning, inspection and
//! set-up live on facets).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Most items the root of `pageframe` may export (the debugging tools
/// live under one of them, `debug`).
pub const ROOT_BUDGET: usize = 36;

/// Most public methods `Machine`'s own impl blocks may define, every
/// feature on (trait impls do not count).
pub const MACHINE_BUDGET: usize = 40;

/// What the check found.
pub struct Surface {
    /// Names the root exports (items and modules).
    pub root: Vec<String>,
    /// Items reachable under more than one public path, with the paths.
    pub twice: Vec<Vec<String>>,
    /// Whole-module re-exports (globs, other crates): their contents are
    /// not checked, so they are refused.
    pub opaque: Vec<String>,
    /// The public methods of `Machine`'s inherent impl blocks, sorted.
    pub machine_methods: Vec<String>,
}

/// Builds the JSON docs of `pageframe` (nightly rustdoc) and reads them.
pub fn check(root: &Path) -> Result<Surface, String> {
    let st = Command::new("cargo")
        .args([
            "+nightly",
            "rustdoc",
            "-q",
            "-p",
            "pageframe",
            "--all-features",
            "--lib",
            "--target-dir",
            "target/surface",
            "--",
            "-Z",
            "unstable-options",
            "--output-format",
            "json",
        ])
        .current_dir(root)
        .status()
        .map_err(|e| format!("rustdoc: {e}"))?;
    if !st.success() {
        return Err("rustdoc --output-format json failed".into());
    }
    let path = root.join("target/surface/doc/pageframe.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("rustdoc JSON: {e}"))?;
    Ok(read(&doc))
}

/// The surface of one rustdoc JSON document.
pub fn read(doc: &Value) -> Surface {
    let index = &doc["index"];
    let key = |v: &Value| match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    let mut paths: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut opaque = Vec::new();
    let mut root_names = Vec::new();
    // Public modules to walk: (item id, path).
    let mut todo = vec![(key(&doc["root"]), "pageframe".to_string(), true)];
    while let Some((id, at, is_root)) = todo.pop() {
        let Some(items) = index[&id]["inner"]["module"]["items"].as_array() else {
            continue;
        };
        for child in items {
            let cid = key(child);
            let item = &index[&cid];
            if item["visibility"] != "public" {
                continue;
            }
            let inner = &item["inner"];
            let (name, target) = if let Some(u) = inner.get("use") {
                let target = key(&u["id"]);
                if u["is_glob"] == true {
                    opaque.push(format!("{at}::{}::*", u["source"].as_str().unwrap_or("?")));
                    continue;
                }
                // A re-exported module of another crate: not in the index.
                if index.get(&target).is_none() && doc["paths"][&target]["kind"] == "module" {
                    opaque.push(format!("{at}::{}", u["name"].as_str().unwrap_or("?")));
                }
                (u["name"].as_str().unwrap_or("?").to_string(), target)
            } else {
                (
                    item["name"].as_str().unwrap_or("?").to_string(),
                    cid.clone(),
                )
            };
            let path = format!("{at}::{name}");
            if is_root {
                root_names.push(name.clone());
            }
            if index[&target]["inner"].get("module").is_some() {
                todo.push((target.clone(), path.clone(), false));
            }
            paths.entry(target).or_default().push(path);
        }
    }
    let machine_methods = inherent_methods(doc, "Machine");
    let twice = paths.into_values().filter(|p| p.len() > 1).collect();
    Surface {
        root: root_names,
        twice,
        opaque,
        machine_methods,
    }
}

/// The public functions of the inherent impl blocks of the crate's struct
/// `name` (empty if there is none), sorted by name.
fn inherent_methods(doc: &Value, name: &str) -> Vec<String> {
    let index = &doc["index"];
    let key = |v: &Value| match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => String::new(),
    };
    let Some(map) = index.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in map.values() {
        // The crate's own struct: re-exports and other crates' items of the
        // same name have no `struct` inner here, or another crate id.
        if item["name"] != name || item["crate_id"] != 0 {
            continue;
        }
        let Some(impls) = item["inner"]["struct"]["impls"].as_array() else {
            continue;
        };
        for i in impls {
            let imp = &index[&key(i)]["inner"]["impl"];
            if !imp["trait"].is_null() || imp["is_synthetic"] == true {
                continue;
            }
            for m in imp["items"].as_array().into_iter().flatten() {
                let f = &index[&key(m)];
                if f["visibility"] == "public" && f["inner"].get("function").is_some() {
                    out.push(f["name"].as_str().unwrap_or("?").to_string());
                }
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root with a module, an item re-exported at the root and again in
    /// the module, and a glob.
    #[test]
    fn an_item_under_two_paths_and_a_glob_are_found() {
        let doc = serde_json::json!({
            "root": 0,
            "index": {
                "0": {"visibility": "public", "name": "pageframe",
                      "inner": {"module": {"items": [1, 2, 4]}}},
                "1": {"visibility": "public", "name": "zone",
                      "inner": {"module": {"items": [3, 5]}}},
                "2": {"visibility": "public", "name": null,
                      "inner": {"use": {"source": "x::Zone", "name": "Zone", "id": 9, "is_glob": false}}},
                "3": {"visibility": "public", "name": null,
                      "inner": {"use": {"source": "x::Zone", "name": "Zone", "id": 9, "is_glob": false}}},
                "4": {"visibility": "public", "name": "Machine", "inner": {"struct": {}}},
                "5": {"visibility": "public", "name": null,
                      "inner": {"use": {"source": "y", "name": "y", "id": 7, "is_glob": true}}},
                "9": {"visibility": "public", "name": "Zone", "inner": {"struct": {}}}
            },
            "paths": {}
        });
        let s = read(&doc);
        assert_eq!(s.root, ["zone", "Zone", "Machine"]);
        assert_eq!(s.twice.len(), 1);
        let mut two = s.twice[0].clone();
        two.sort();
        assert_eq!(two, ["pageframe::Zone", "pageframe::zone::Zone"]);
        assert_eq!(s.opaque, ["pageframe::zone::y::*"]);
    }

    /// Only the public functions of `Machine`'s own impl blocks count: not
    /// a trait impl's, not a private one, not another type's.
    #[test]
    fn machine_methods_are_its_inherent_public_functions() {
        let doc = serde_json::json!({
            "root": 0,
            "index": {
                "0": {"visibility": "public", "name": "pageframe", "crate_id": 0,
                      "inner": {"module": {"items": [1, 8]}}},
                "1": {"visibility": "public", "name": "Machine", "crate_id": 0,
                      "inner": {"struct": {"impls": [2, 3]}}},
                "2": {"visibility": "default", "name": null, "crate_id": 0,
                      "inner": {"impl": {"trait": null, "items": [4, 5, 6]}}},
                "3": {"visibility": "default", "name": null, "crate_id": 0,
                      "inner": {"impl": {"trait": {"path": "Drop"}, "items": [7]}}},
                "4": {"visibility": "public", "name": "free", "crate_id": 0,
                      "inner": {"function": {}}},
                "5": {"visibility": "public", "name": "alloc", "crate_id": 0,
                      "inner": {"function": {}}},
                "6": {"visibility": "crate", "name": "freelist", "crate_id": 0,
                      "inner": {"function": {}}},
                "7": {"visibility": "default", "name": "drop", "crate_id": 0,
                      "inner": {"function": {}}},
                "8": {"visibility": "public", "name": "Zone", "crate_id": 0,
                      "inner": {"struct": {"impls": []}}}
            },
            "paths": {}
        });
        assert_eq!(read(&doc).machine_methods, ["alloc", "free"]);
    }
}
