//! The README and docs/ say what the code does: every topic and parameter named where the code
//! declares it, the parameter table rendered from the node's own declarations, params.yaml's
//! read-only marks, every link resolving, and no path a user's clone does not have.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::markdown::{code_spans, links, table_rows};
use sp_dust3r_core::outputs::OutputKind;
use sp_dust3r_core::params::args::ParamValue;
use sp_dust3r_core::params::topics::{Direction, TOPICS};
use sp_dust3r_core::params::{declared, Constraint, ParamSpec};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every docs/*.md, as (path relative to the root, text).
fn documents() -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".md"))
        .collect();
    names.sort();
    names.insert(0, "README.md".into());
    names.into_iter().map(|n| (n.clone(), read(&n))).collect()
}

#[test]
fn the_readmes_topic_tables_are_the_nodes_topics() {
    let readme = read("README.md");
    let rows = table_rows(&readme, "| topic | type |");
    let named: BTreeSet<String> = rows.iter().flat_map(|r| code_spans(&r[0])).collect();
    let expected: BTreeSet<String> = TOPICS.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(named, expected, "README's topic tables against params::topics::TOPICS");
    for topic in TOPICS {
        let row = rows.iter().find(|r| code_spans(&r[0]).iter().any(|n| n == topic.name)).unwrap();
        let name = topic.ros_type.rsplit('/').next().unwrap();
        let package = topic.ros_type.split('/').next().unwrap();
        assert!(row[1].contains(name) && row[1].contains(package), "{}: {row:?} is not {}", topic.name, topic.ros_type);
    }
}

#[test]
fn the_nodes_topic_table_names_every_topic_with_its_type_direction_and_qos() {
    let node = read("docs/node.md");
    let rows = table_rows(&node, "| topic | type | QoS |");
    let row_of = |name: &str, d: Direction| {
        rows.iter()
            .find(|r| code_spans(&r[0]).iter().any(|n| n == name) && r[2].starts_with(direction(d)))
            .unwrap_or_else(|| panic!("docs/node.md has no {} row for {name}", direction(d)))
    };
    for topic in TOPICS {
        let row = row_of(topic.name, topic.direction);
        let name = topic.ros_type.rsplit('/').next().unwrap();
        let package = topic.ros_type.split('/').next().unwrap();
        assert!(row[1].contains(name) && row[1].contains(package), "{}: {row:?} is not {}", topic.name, topic.ros_type);
    }
    // The QoS column says what each output's publisher offers.
    for kind in OutputKind::ALL {
        let (row, qos) = (row_of(kind.topic(), Direction::Output), kind.default_qos());
        assert_eq!(row[2].contains("reliable"), qos.reliable, "{}: {}", kind.topic(), row[2]);
        assert_eq!(row[2].contains("transient local"), qos.transient_local, "{}: {}", kind.topic(), row[2]);
    }
}

fn direction(d: Direction) -> &'static str {
    match d {
        Direction::Input => "in",
        Direction::Output => "out",
    }
}

const BEGIN: &str = "<!-- parameters: generated from the node's declarations; tests/docs.rs checks it -->\n";
const END: &str = "<!-- end of parameters -->";

fn value(v: &ParamValue) -> String {
    match v {
        ParamValue::Bool(b) => b.to_string(),
        ParamValue::Integer(i) => i.to_string(),
        ParamValue::Double(d) => format!("{d:?}"),
        ParamValue::String(s) => format!("\"{s}\""),
        other => format!("{other:?}"),
    }
}

fn allowed(c: &Constraint) -> String {
    match c {
        Constraint::None => String::new(),
        Constraint::Integer { min, max } => format!("{min} to {max}"),
        Constraint::Double { min, max } => format!("{min} to {max}"),
        Constraint::OneOf(names) => names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
    }
}

/// The parameter table as docs/node.md holds it between its markers.
fn parameter_table(specs: &[ParamSpec]) -> String {
    let mut t = String::from("| parameter | default | allowed | set at run time | |\n|---|---|---|---|---|\n");
    for s in specs {
        let run_time = if s.read_only { "no" } else { "yes" };
        let description = s.description.replace('|', "\\|");
        t += &format!(
            "| `{}` | `{}` | {} | {run_time} | {description} |\n",
            s.name,
            value(&s.default),
            allowed(&s.constraint)
        );
    }
    t
}

#[test]
fn the_parameter_table_is_the_nodes_declarations() {
    let path = root().join("docs/node.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(BEGIN).expect("docs/node.md has the parameter table's markers") + BEGIN.len();
    let end = start + text[start..].find(END).expect("the end marker");
    let expected = parameter_table(&declared());
    if text[start..end] != expected && std::env::var_os("SP_DUST3R_UPDATE_DOCS").is_some() {
        std::fs::write(&path, format!("{}{expected}{}", &text[..start], &text[end..])).unwrap();
        return;
    }
    assert_eq!(
        text[start..end],
        expected,
        "docs/node.md's parameter table is not the node's declarations (SP_DUST3R_UPDATE_DOCS=1 rewrites it)"
    );
}

#[test]
fn params_yaml_marks_exactly_the_read_only_parameters() {
    let yaml = read("config/params.yaml");
    let mut seen = BTreeSet::new();
    for line in yaml.lines() {
        let Some((key, rest)) = line.strip_prefix("    ").and_then(|l| l.split_once(':')) else { continue };
        let spec = declared().into_iter().find(|s| s.name == key).unwrap_or_else(|| panic!("{key} is not declared"));
        let marked = rest.split_once('#').is_some_and(|(_, comment)| comment.trim_start().starts_with("read-only"));
        assert_eq!(
            marked, spec.read_only,
            "params.yaml's {key}: marked read-only {marked}, declared {}",
            spec.read_only
        );
        seen.insert(key.to_string());
    }
    let all: BTreeSet<String> = declared().iter().map(|s| s.name.to_string()).collect();
    assert_eq!(seen, all, "params.yaml lists every parameter");
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces turned into hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_in_the_docs_resolves() {
    for (name, text) in documents() {
        let dir = Path::new(&name).parent().unwrap().to_path_buf();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            let (file, fragment) = target.split_once('#').map_or((target, None), |(f, a)| (f, Some(a)));
            let resolved = if file.is_empty() { PathBuf::from(&name) } else { dir.join(file) };
            let full = root().join(&resolved);
            assert!(full.exists(), "{name} links {target}: {} does not exist", resolved.display());
            if let Some(fragment) = fragment {
                let heads = anchors(&std::fs::read_to_string(&full).unwrap());
                assert!(heads.contains(fragment), "{name} links {target}: no such heading in {}", resolved.display());
            }
        }
    }
}

#[test]
fn the_docs_name_no_path_outside_the_repository() {
    for (name, text) in documents() {
        for bad in ["../shared", "shared/real", "shared/spec", "shared/fixtures"] {
            assert!(!text.contains(bad), "{name} names {bad}, which users do not have");
        }
    }
}
