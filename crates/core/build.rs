//! Generates the Rust types of the ROS 2 messages from their .msg files: our own (`msg/`, which
//! the root ament package also hands to rosidl, so both read one copy; ROS package named by
//! package.xml, Rust module [`OWN_MODULE`]) and the
//! standard ones the node uses (`src/msg/interfaces/<package>/`). Each type gets serde derives
//! (CDR), its ROS and DDS names, and its full ros2msg definition text (the
//! schema MCAP files carry).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

struct Field {
    ty: String,
    array: Option<Option<usize>>, // None: scalar; Some(None): sequence; Some(Some(n)): fixed
    name: String,
    default: Option<String>,
}

struct Constant {
    ty: String,
    name: String,
    value: String,
}

struct Msg {
    package: String,
    name: String,
    text: String,
    fields: Vec<Field>,
    constants: Vec<Constant>,
}

fn primitive(ty: &str) -> Option<&'static str> {
    Some(match ty {
        "bool" => "bool",
        "byte" | "char" | "uint8" => "u8",
        "int8" => "i8",
        "int16" => "i16",
        "uint16" => "u16",
        "int32" => "i32",
        "uint32" => "u32",
        "int64" => "i64",
        "uint64" => "u64",
        "float32" => "f32",
        "float64" => "f64",
        "string" => "String",
        _ => return None,
    })
}

/// `pkg/Type` for a field type written in `package`.
fn qualified(ty: &str, package: &str) -> String {
    if primitive(ty).is_some() || ty.contains('/') {
        ty.to_string()
    } else if ty == "Header" {
        "std_msgs/Header".to_string()
    } else {
        format!("{package}/{ty}")
    }
}

fn parse(package: &str, name: &str, text: &str) -> Msg {
    let mut fields = Vec::new();
    let mut constants = Vec::new();
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (ty_full, rest) =
            line.split_once(char::is_whitespace).unwrap_or_else(|| panic!("{package}/{name}: bad line {raw:?}"));
        let rest = rest.trim();
        let (base, array) = match ty_full.split_once('[') {
            Some((b, dims)) => {
                let dims = dims.trim_end_matches(']');
                (
                    b,
                    Some(if dims.is_empty() || dims.starts_with("<=") {
                        None
                    } else {
                        Some(dims.parse().expect("array size"))
                    }),
                )
            }
            None => (ty_full, None),
        };
        // A bounded string (`string<=256`) is a string on the wire.
        let base = base.split_once("<=").map_or(base, |(b, _)| b);
        if let Some((cname, value)) = rest.split_once('=') {
            constants.push(Constant {
                ty: base.to_string(),
                name: cname.trim().to_string(),
                value: value.trim().to_string(),
            });
            continue;
        }
        let mut parts = rest.split_whitespace();
        let fname = parts.next().expect("field name").to_string();
        let default = parts.next().map(str::to_string);
        fields.push(Field { ty: qualified(base, package), array, name: fname, default });
    }
    Msg { package: package.to_string(), name: name.to_string(), text: text.to_string(), fields, constants }
}

/// The Rust module of our own package's messages: not the package's name, which is the crate's
/// (`use sp_dust3r_core::msg::sp_dust3r` would shadow the crate in every user).
const OWN_MODULE: &str = "node_msgs";

/// The ROS package `msg/` belongs to: the root package.xml's `<name>`.
fn own_package(root: &Path) -> String {
    let xml = std::fs::read_to_string(root.join("package.xml")).expect("package.xml");
    let start = xml.find("<name>").expect("package.xml has <name>") + "<name>".len();
    let end = xml[start..].find("</name>").expect("package.xml: </name>") + start;
    xml[start..end].trim().to_string()
}

/// The Rust module of a ROS package's messages.
fn module(pkg: &str, own: &str) -> String {
    if pkg == own {
        OWN_MODULE.to_string()
    } else {
        pkg.to_string()
    }
}

fn rust_type(ty: &str, own: &str) -> String {
    match primitive(ty) {
        Some(p) => p.to_string(),
        None => {
            let (pkg, name) = ty.split_once('/').expect("pkg/Type");
            format!("super::{}::{name}", module(pkg, own))
        }
    }
}

fn field_type(f: &Field, own: &str) -> String {
    let t = rust_type(&f.ty, own);
    match f.array {
        None => t,
        Some(None) => format!("Vec<{t}>"),
        Some(Some(n)) => format!("[{t}; {n}]"),
    }
}

fn rust_ident(name: &str) -> String {
    match name {
        "type" | "match" | "move" | "ref" | "loop" | "mod" | "use" | "fn" | "struct" | "enum" | "impl" | "self"
        | "super" | "crate" | "where" | "async" | "await" | "dyn" => format!("r#{name}"),
        _ => name.to_string(),
    }
}

fn literal(ty: &str, value: &str) -> String {
    match primitive(ty) {
        Some("f32") | Some("f64") if !value.contains('.') && !value.contains('e') => format!("{value}.0"),
        Some("String") => format!("{value:?}.trim_matches('\"').to_string()"),
        Some("bool") => value.to_lowercase(),
        _ => value.to_string(),
    }
}

/// The dependencies of `key`, depth first, each once (ros2msg's `MSG:` sections).
fn dependencies(key: &str, all: &BTreeMap<String, Msg>, seen: &mut Vec<String>) {
    for f in &all[key].fields {
        if primitive(&f.ty).is_none() && !seen.contains(&f.ty) {
            seen.push(f.ty.clone());
            dependencies(&f.ty, all, seen);
        }
    }
}

fn collect(dir: &Path, package: &str, out: &mut BTreeMap<String, Msg>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("msg dir").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.extension().and_then(|e| e.to_str()) != Some("msg") {
            continue;
        }
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_stem().and_then(|s| s.to_str()).expect("name").to_string();
        let text = std::fs::read_to_string(&path).expect("read msg");
        out.insert(format!("{package}/{name}"), parse(package, &name, &text));
    }
}

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    // The ROS package (package.xml, msg/) is the repository's top level, two folders up.
    let root = here.join("../..");
    println!("cargo:rerun-if-changed=../../msg");
    println!("cargo:rerun-if-changed=src/msg/interfaces");
    println!("cargo:rerun-if-changed=../../package.xml");
    let own = own_package(&root);
    let mut all = BTreeMap::new();
    collect(&root.join("msg"), &own, &mut all);
    let std_dir = here.join("src/msg/interfaces");
    let mut packages: Vec<PathBuf> = std::fs::read_dir(&std_dir)
        .expect("interfaces")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    packages.sort();
    for p in packages {
        let pkg = p.file_name().and_then(|s| s.to_str()).expect("package").to_string();
        collect(&p, &pkg, &mut all);
    }

    let mut by_package: BTreeMap<String, Vec<&Msg>> = BTreeMap::new();
    for m in all.values() {
        by_package.entry(m.package.clone()).or_default().push(m);
    }
    let mut code = String::new();
    for (pkg, msgs) in &by_package {
        writeln!(code, "/// The messages of the ROS package `{pkg}`.").unwrap();
        writeln!(code, "pub mod {} {{", module(pkg, &own)).unwrap();
        for m in msgs {
            let key = format!("{}/{}", m.package, m.name);
            writeln!(code, "    /// `{key}`, generated from its .msg file.").unwrap();
            writeln!(code, "    #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]").unwrap();
            writeln!(code, "    pub struct {} {{", m.name).unwrap();
            for f in &m.fields {
                if (f.ty == "uint8" || f.ty == "byte") && f.array == Some(None) {
                    writeln!(code, "        #[serde(with = \"serde_bytes\")]").unwrap();
                }
                // serde derives fixed arrays up to 32 elements (covariances have 36).
                if f.array.is_some_and(|n| n.is_some_and(|n| n > 32)) {
                    writeln!(code, "        #[serde(with = \"serde_big_array::BigArray\")]").unwrap();
                }
                writeln!(code, "        /// `{}` of the .msg file.", f.name).unwrap();
                writeln!(code, "        pub {}: {},", rust_ident(&f.name), field_type(f, &own)).unwrap();
            }
            writeln!(code, "    }}").unwrap();
            writeln!(code, "    impl Default for {} {{\n        fn default() -> Self {{\n            Self {{", m.name)
                .unwrap();
            for f in &m.fields {
                let v = match (&f.default, f.array) {
                    (Some(d), None) => literal(&f.ty, d),
                    (_, Some(Some(_))) => "std::array::from_fn(|_| Default::default())".to_string(),
                    _ => "Default::default()".to_string(),
                };
                writeln!(code, "                {}: {v},", rust_ident(&f.name)).unwrap();
            }
            writeln!(code, "            }}\n        }}\n    }}").unwrap();
            if !m.constants.is_empty() {
                writeln!(code, "    impl {} {{", m.name).unwrap();
                for c in &m.constants {
                    let t = primitive(&c.ty).expect("constant type");
                    writeln!(code, "        /// The .msg file's constant `{}`.", c.name).unwrap();
                    if t == "String" {
                        writeln!(code, "        pub const {}: &'static str = {:?};", c.name, c.value.trim_matches('"'))
                            .unwrap();
                    } else {
                        writeln!(code, "        pub const {}: {t} = {};", c.name, literal(&c.ty, &c.value)).unwrap();
                    }
                }
                writeln!(code, "    }}").unwrap();
            }
            let mut deps = Vec::new();
            dependencies(&key, &all, &mut deps);
            let mut full = m.text.trim_end().to_string();
            for d in &deps {
                write!(full, "\n{}\nMSG: {d}\n{}", "=".repeat(80), all[d].text.trim_end()).unwrap();
            }
            writeln!(code, "    impl crate::msg::RosMessage for {} {{", m.name).unwrap();
            writeln!(code, "        const ROS_TYPE: &'static str = \"{}/msg/{}\";", m.package, m.name).unwrap();
            writeln!(code, "        const DDS_TYPE: &'static str = \"{}::msg::dds_::{}_\";", m.package, m.name)
                .unwrap();
            writeln!(code, "        const DEFINITION: &'static str = {full:?};").unwrap();
            writeln!(code, "    }}").unwrap();
        }
        writeln!(code, "}}").unwrap();
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("out dir")).join("ros_messages.rs");
    std::fs::write(out, code).expect("write generated messages");
}
