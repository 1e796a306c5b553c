//! The source tree's shape. In every crate of the workspace no two source files import each other,
//! directly or through others (a module and its own children aside: `mod.rs` declares them), and
//! no two top-level modules (folders) do: import cycles make code impossible to change one piece
//! at a time. Between crates, Cargo holds the layers; the core's dependencies are checked here.

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

/// A module path (`["msg", "convert"]`).
type Module = Vec<String>;
/// Which modules each module imports.
type Edges = BTreeMap<Module, BTreeSet<Module>>;

/// Import edges between the modules of the crate whose sources are in `root` (`src/`).
fn import_graph(root: &Path) -> (BTreeMap<Module, PathBuf>, Edges) {
    let mut files = BTreeMap::new();
    modules(root, root, &mut files);
    let mut edges = Edges::new();
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
    (files, edges)
}

/// The edges `a -> b` of `edges` with a path back from `b` to `a`.
fn cycles(edges: &Edges) -> Vec<(Module, Module)> {
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
    edges
        .iter()
        .flat_map(|(a, bs)| bs.iter().map(move |b| (a.clone(), b.clone())))
        .filter(|(a, b)| reaches(b, a))
        .collect()
}

/// Every crate's `src/` folder.
fn crate_sources() -> Vec<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![top.join("src")];
    for entry in std::fs::read_dir(top.join("crates")).unwrap() {
        roots.push(entry.unwrap().path().join("src"));
    }
    roots
}

#[test]
fn no_import_cycles_between_source_files() {
    let mut count = 0;
    for root in crate_sources() {
        let (files, edges) = import_graph(&root);
        count += files.len();
        let found: Vec<String> =
            cycles(&edges).iter().map(|(a, b)| format!("{} -> {}", files[a].display(), files[b].display())).collect();
        assert!(found.is_empty(), "import cycles in {}:\n{}", root.display(), found.join("\n"));
    }
    assert!(count > 60, "{count} files");
}

#[test]
fn no_import_cycles_between_top_level_modules() {
    for root in crate_sources() {
        let (_, edges) = import_graph(&root);
        let mut top = Edges::new();
        for (a, bs) in &edges {
            for b in bs {
                if !a.is_empty() && !b.is_empty() && a[0] != b[0] {
                    top.entry(a[..1].to_vec()).or_default().insert(b[..1].to_vec());
                }
            }
        }
        let found: Vec<String> = cycles(&top).iter().map(|(a, b)| format!("{} -> {}", a[0], b[0])).collect();
        assert!(found.is_empty(), "top-level modules of {} import each other:\n{}", root.display(), found.join("\n"));
    }
}

/// The packages `cargo tree` lists for `args` (names only).
fn tree(args: &[&str]) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--offline", "--prefix", "none", "--format", "{p}", "-e", "normal,build"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

/// What needs more than a Rust toolchain (Cyclone DDS: cmake, libclang through bindgen), the DDS
/// stacks, and the command line.
const NOT_IN_THE_CORE: [&str; 7] = ["cyclors", "cmake", "bindgen", "clang-sys", "ros2-client", "rustdds", "clap"];

#[test]
fn the_core_and_the_offline_binary_need_no_dds_and_no_c_toolchain_but_cc() {
    let core = tree(&["-p", "sp_dust3r_core"]);
    assert!(core.contains("gemm") && core.contains("mcap"), "{core:?}");
    for name in NOT_IN_THE_CORE {
        assert!(!core.contains(name), "sp_dust3r_core depends on {name}");
    }
    // The binary as `cargo run --release -- replay ...` builds it: no node, no DDS, no cmake.
    let offline = tree(&["-p", "sp_dust3r"]);
    assert!(offline.contains("sp_dust3r_core") && offline.contains("clap"), "{offline:?}");
    for name in ["sp_dust3r_node", "cyclors", "cmake", "bindgen", "clang-sys", "ros2-client", "rustdds"] {
        assert!(!offline.contains(name), "the offline binary depends on {name}");
    }
    // With the node (colcon, the test command), Cyclone DDS is there.
    let node = tree(&["-p", "sp_dust3r", "--features", "node"]);
    assert!(node.contains("cyclors") && node.contains("ros2-client"), "{node:?}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The Rust files of the repository (the workspace's crates, tests, examples, fuzz targets)
/// that contain any of `needles`, relative to the top, sorted.
fn files_naming(needles: &[&str]) -> Vec<String> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "examples", "fuzz/src"] {
        rust_files(&top.join(dir), &mut files);
    }
    let mut named: Vec<String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            needles.iter().any(|n| text.contains(n))
        })
        .map(|f| f.strip_prefix(top).unwrap().display().to_string())
        .collect();
    named.sort();
    named
}

/// `cyclone.rs` patches the types of the topics it creates before their first writer (so before
/// any sample), which is sound only while it creates every cyclors topic of the process.
#[test]
fn cyclone_dds_is_called_from_one_file() {
    // Spelled in pieces, so that this file does not name them.
    let needles = [concat!("use cyc", "lors"), concat!("cyc", "lors::"), concat!("cdds_", "create")];
    assert_eq!(files_naming(&needles), ["crates/node/src/cyclone.rs"]);
}

/// The node's code reaches its DDS stacks only through transport.rs (readers, writers, which
/// stack carries which) and the modules beneath it: ros2-client's services (param_services.rs,
/// node_services.rs, their replies in replies.rs), its sample wrapper (dds.rs); Cyclone DDS in cyclone.rs alone (above). The
/// example that compares the stacks and the fuzz targets of ros2-client's decoders name them on
/// purpose.
#[test]
fn the_node_reaches_dds_through_the_transport() {
    let allowed = [
        "crates/node/src/dds.rs",
        "crates/node/src/node_services.rs",
        "crates/node/src/param_services.rs",
        "crates/node/src/replies.rs",
        "crates/node/src/transport.rs",
        "examples/dds_large_messages.rs",
        "fuzz/src/bin/seeds.rs",
        "fuzz/src/lib.rs",
    ];
    assert_eq!(files_naming(&[concat!("ros2", "_client")]), allowed);
}
