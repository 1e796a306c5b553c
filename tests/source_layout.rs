//! The source tree's shape: no two source files import each other, directly or through others
//! (a module and its own children aside: `mod.rs` declares them). Import cycles make files
//! impossible to change one at a time; this keeps them out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`["ros", "node"]`) of every file under `src/`.
fn modules(dir: &Path, root: &Path, out: &mut BTreeMap<Vec<String>, PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            modules(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().with_extension("");
            let mut segments: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            if matches!(segments.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                segments.pop();
            }
            out.insert(segments, path);
        }
    }
}

/// The module file a `crate::`/`super::`/`self::` path names (its longest known prefix).
fn target(from: &[String], path: &str, known: &BTreeMap<Vec<String>, PathBuf>) -> Option<Vec<String>> {
    let mut parts = path.split("::").peekable();
    let mut base: Vec<String> = match parts.peek().copied() {
        Some("crate") => Vec::new(),
        Some("super" | "self") => from.to_vec(),
        _ => return None,
    };
    for p in parts {
        match p {
            "crate" | "self" => {}
            "super" => {
                base.pop();
            }
            name => base.push(name.to_string()),
        }
    }
    (1..=base.len()).rev().map(|k| base[..k].to_vec()).find(|m| known.contains_key(m))
}

fn is_ancestor(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && b[..a.len()] == *a
}

#[test]
fn no_import_cycles_between_source_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = BTreeMap::new();
    modules(&root, &root, &mut files);
    assert!(files.len() > 40, "{} files", files.len());
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &files {
        let text = std::fs::read_to_string(path).unwrap();
        // Unit tests at the end of a file may reach anywhere.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(&text);
        for (i, _) in text.match_indices("::") {
            let in_path = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
            let start = text[..i].rfind(|c| !in_path(c)).map_or(0, |s| s + 1);
            let end = text[i..].find(|c| !in_path(c)).map_or(text.len(), |e| i + e);
            let path = text[start..end].trim_end_matches(':');
            if let Some(t) = target(module, path, &files) {
                if !is_ancestor(&t, module) && !is_ancestor(module, &t) {
                    edges.entry(module.clone()).or_default().insert(t);
                }
            }
        }
    }
    // A cycle: an edge a -> b with a path back from b to a.
    let reaches = |from: &Vec<String>, to: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            if &m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                todo.extend(edges.get(&m).into_iter().flatten().cloned());
            }
        }
        false
    };
    let cycles: Vec<String> = edges
        .iter()
        .flat_map(|(a, bs)| bs.iter().map(move |b| (a, b)))
        .filter(|(a, b)| reaches(b, a))
        .map(|(a, b)| format!("{} -> {}", files[a].display(), files[b].display()))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}
