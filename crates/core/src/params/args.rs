//! The ROS 2 command line a launch file gives a node (`EXE [own args] --ros-args -r __node:=NAME
//! -r __ns:=/NS --params-file FILE -p name:=value -r from:=to --log-level LEVEL [--]`) and the
//! parameter YAML files it points at (`{node or /**: {ros__parameters: {...}}}`, matched to the
//! node by rcl's rules).

use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

/// A parameter value, with ROS 2's parameter types.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    /// `bool`.
    Bool(bool),
    /// `integer` (int64).
    Integer(i64),
    /// `double`.
    Double(f64),
    /// `string`.
    String(String),
    /// `bool[]`.
    BoolArray(Vec<bool>),
    /// `integer[]`.
    IntegerArray(Vec<i64>),
    /// `double[]`.
    DoubleArray(Vec<f64>),
    /// `string[]`.
    StringArray(Vec<String>),
}

impl ParamValue {
    /// From a YAML value as `-p name:=value` and parameter files write it.
    fn from_yaml(y: &Yaml) -> Option<Self> {
        Some(match y {
            Yaml::Boolean(b) => Self::Bool(*b),
            Yaml::Integer(i) => Self::Integer(*i),
            Yaml::Real(r) => Self::Double(r.parse().ok()?),
            Yaml::String(s) => Self::String(s.clone()),
            Yaml::Array(a) if a.is_empty() => Self::StringArray(Vec::new()),
            Yaml::Array(a) => match &a[0] {
                Yaml::Boolean(_) => Self::BoolArray(a.iter().map(|v| v.as_bool()).collect::<Option<_>>()?),
                Yaml::Integer(_) => Self::IntegerArray(a.iter().map(|v| v.as_i64()).collect::<Option<_>>()?),
                Yaml::Real(_) => Self::DoubleArray(
                    a.iter().map(|v| v.as_f64().or_else(|| v.as_i64().map(|i| i as f64))).collect::<Option<_>>()?,
                ),
                Yaml::String(_) => {
                    Self::StringArray(a.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<_>>()?)
                }
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Parses the value of `-p name:=value` (YAML scalar or flow sequence, as rcl does).
    pub fn parse(text: &str) -> Option<Self> {
        let docs = YamlLoader::load_from_str(text).ok()?;
        match docs.first() {
            Some(y) => Self::from_yaml(y),
            None => Some(Self::String(String::new())),
        }
    }

    /// ROS 2's name of the type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Bool(_) => "bool",
            Self::Integer(_) => "integer",
            Self::Double(_) => "double",
            Self::String(_) => "string",
            Self::BoolArray(_) => "bool array",
            Self::IntegerArray(_) => "integer array",
            Self::DoubleArray(_) => "double array",
            Self::StringArray(_) => "string array",
        }
    }
}

/// Why the command line or a parameter file is refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ArgsError {
    /// An option without its value.
    #[error("--ros-args: {flag} needs a value")]
    MissingValue {
        /// The option.
        flag: String,
    },
    /// A value that does not parse.
    #[error("--ros-args: cannot parse {what} {text:?} (expected {expected})")]
    Malformed {
        /// What it is.
        what: &'static str,
        /// The text given.
        text: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An option `--ros-args` does not have.
    #[error("--ros-args: unknown option {0:?}")]
    Unknown(String),
    /// A parameter file could not be used.
    #[error("parameter file {path}: {reason}")]
    ParamsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// What `--ros-args` said.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RosArgs {
    /// `-r __node:=NAME`.
    pub node_name: Option<String>,
    /// `-r __ns:=NAMESPACE`.
    pub namespace: Option<String>,
    /// Topic remappings `from -> to`, in order.
    pub remaps: Vec<(String, String)>,
    /// `-p` overrides, in order (they win over files).
    pub params: Vec<(String, ParamValue)>,
    /// `--params-file FILE`s, in order.
    pub params_files: Vec<PathBuf>,
    /// `--log-level LEVEL` (debug, info, warn, error, fatal): the node's own level.
    pub log_level: Option<String>,
    /// `--log-level NAME:=LEVEL`, in order: a logger's level, NAME being a Rust crate or module
    /// (`rustdds`, `cyclors`), whose records are otherwise shown at error level only.
    pub logger_levels: Vec<(String, String)>,
    /// `--disable-rosout-logs`: log to stderr only.
    pub disable_rosout: bool,
}

impl RosArgs {
    /// The `tracing` level of `--log-level` (fatal maps to error); `None` when absent or unknown.
    pub fn tracing_level(&self) -> Option<&'static str> {
        tracing_level(self.log_level.as_deref()?)
    }

    /// The first `--log-level` value (plain or named) that is not a level, for the error.
    pub fn bad_log_level(&self) -> Option<&str> {
        self.log_level
            .iter()
            .chain(self.logger_levels.iter().map(|(_, l)| l))
            .map(String::as_str)
            .find(|l| tracing_level(l).is_none())
    }

    /// The `tracing` filter these arguments ask for: the node's own records (crate `sp_dust3r`)
    /// at `--log-level` (info by default), every other crate's at error unless named
    /// (`--log-level rustdds:=warn`): DDS stacks report every socket, lease and retransmit.
    pub fn log_filter(&self) -> String {
        let mut levels = std::collections::BTreeMap::from([("sp_dust3r", self.tracing_level().unwrap_or("info"))]);
        for (name, level) in &self.logger_levels {
            if let Some(level) = tracing_level(level) {
                levels.insert(name.as_str(), level);
            }
        }
        levels.iter().fold("error".to_string(), |f, (name, level)| format!("{f},{name}={level}"))
    }
}

/// The `tracing` level of a ROS log level (fatal maps to error).
fn tracing_level(level: &str) -> Option<&'static str> {
    match level.to_ascii_lowercase().as_str() {
        "debug" => Some("debug"),
        "info" => Some("info"),
        "warn" => Some("warn"),
        "error" | "fatal" => Some("error"),
        _ => None,
    }
}

/// Splits a command line into the program's own arguments and its ROS arguments. Several
/// `--ros-args` sections may appear; each ends at `--` or at the end.
pub fn split_ros_args<I: IntoIterator<Item = String>>(args: I) -> Result<(Vec<String>, RosArgs), ArgsError> {
    let mut own = Vec::new();
    let mut ros = RosArgs::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        if arg != "--ros-args" {
            own.push(arg);
            continue;
        }
        while let Some(flag) = it.next() {
            let mut value = |flag: &str| it.next().ok_or(ArgsError::MissingValue { flag: flag.to_string() });
            match flag.as_str() {
                "--" => break,
                "-r" | "--remap" => {
                    let v = value(&flag)?;
                    let (from, to) = v.split_once(":=").ok_or_else(|| ArgsError::Malformed {
                        what: "remapping",
                        text: v.clone(),
                        expected: "from:=to",
                    })?;
                    match from {
                        "__node" | "__name" => ros.node_name = Some(to.to_string()),
                        "__ns" => ros.namespace = Some(to.to_string()),
                        _ => ros.remaps.push((from.to_string(), to.to_string())),
                    }
                }
                "-p" | "--param" => {
                    let v = value(&flag)?;
                    let (name, text) = v.split_once(":=").ok_or_else(|| ArgsError::Malformed {
                        what: "parameter",
                        text: v.clone(),
                        expected: "name:=value",
                    })?;
                    let parsed = ParamValue::parse(text).ok_or_else(|| ArgsError::Malformed {
                        what: "parameter value",
                        text: text.to_string(),
                        expected: "a YAML scalar or [list]",
                    })?;
                    ros.params.push((name.to_string(), parsed));
                }
                "--params-file" => ros.params_files.push(PathBuf::from(value(&flag)?)),
                "--log-level" => {
                    let v = value(&flag)?;
                    match v.split_once(":=") {
                        Some((name, level)) => ros.logger_levels.push((name.to_string(), level.to_string())),
                        None => ros.log_level = Some(v),
                    }
                }
                "-e" | "--enclave" => {
                    value(&flag)?;
                }
                "--disable-rosout-logs" => ros.disable_rosout = true,
                "--disable-stdout-logs"
                | "--enable-rosout-logs"
                | "--enable-stdout-logs"
                | "--disable-external-lib-logs" => {}
                other => return Err(ArgsError::Unknown(other.to_string())),
            }
        }
    }
    Ok((own, ros))
}

/// What a parameter file gives one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileParams {
    /// The parameters of every section that matches the node, in file order (later wins),
    /// nested keys joined with dots.
    pub params: Vec<(String, ParamValue)>,
    /// The node names of the sections that match no node of this name (`/ns/other`), as the
    /// file spells them after nesting.
    pub unmatched: Vec<String>,
}

/// Parameters a YAML file gives the node `node_fqn` (e.g. `/camera/sp_dust3r`), with rcl's
/// rules: a section's node name is its keys down to `ros__parameters` joined with `/` (so the
/// nested `/camera: sp_dust3r: ros__parameters:` is `/camera/sp_dust3r`), a leading `/` is
/// implied, and it must name the whole fully qualified name, where `/*` stands for one name
/// token and `/**` for any number (`/**`, `/**/sp_dust3r`, `/camera/**`, `/*/sp_dust3r`).
pub fn load_params_file(path: &Path, node_fqn: &str) -> Result<FileParams, ArgsError> {
    let err = |reason: String| ArgsError::ParamsFile { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| err(e.to_string()))?;
    let mut sections = Vec::new();
    for doc in &docs {
        let Some(top) = doc.as_hash() else { return Err(err("top level is not a mapping".into())) };
        node_sections(top, "", &mut sections).map_err(err)?;
    }
    let mut out = FileParams::default();
    for (name, params) in sections {
        if node_name_matches(&name, node_fqn) {
            flatten(path, "", params, &mut out.params)?;
        } else if !out.unmatched.contains(&name) {
            out.unmatched.push(name);
        }
    }
    Ok(out)
}

/// The `ros__parameters` mappings under `map`, each with its node name (keys joined by `/`
/// below `prefix`, a leading `/` added).
fn node_sections<'a>(
    map: &'a yaml_rust2::yaml::Hash,
    prefix: &str,
    out: &mut Vec<(String, &'a yaml_rust2::yaml::Hash)>,
) -> Result<(), String> {
    for (key, value) in map {
        let Some(key) = key.as_str() else { return Err(format!("node name {key:?} is not a string")) };
        if key.starts_with(PARAMS_KEY) {
            if prefix.is_empty() {
                return Err(format!("{PARAMS_KEY} without a node name above it"));
            }
            let params = value.as_hash().ok_or_else(|| format!("{prefix}: {PARAMS_KEY} is not a mapping"))?;
            let name = if prefix.starts_with('/') { prefix.to_string() } else { format!("/{prefix}") };
            out.push((name, params));
            continue;
        }
        let name = match prefix {
            "" => key.to_string(),
            p if p.ends_with('/') => format!("{p}{key}"),
            p => format!("{p}/{key}"),
        };
        match value {
            Yaml::Hash(inner) => node_sections(inner, &name, out)?,
            _ => return Err(format!("{name}: a value where a node name or {PARAMS_KEY} was expected")),
        }
    }
    Ok(())
}

/// The key under which a node's parameters sit.
const PARAMS_KEY: &str = "ros__parameters";

/// Whether a section's node name (`/a/*/b`, `/**`) names the whole of `fqn`: rclcpp turns
/// `/*` into one `/token` and `/**` into any number of them and matches the full name.
pub fn node_name_matches(pattern: &str, fqn: &str) -> bool {
    fn tokens(name: &str) -> Vec<&str> {
        name.split('/').filter(|t| !t.is_empty()).collect()
    }
    fn matches(pattern: &[&str], name: &[&str]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some((&"**", rest)) => (0..=name.len()).any(|skip| matches(rest, &name[skip..])),
            Some((&"*", rest)) => !name.is_empty() && matches(rest, &name[1..]),
            Some((literal, rest)) => name.first() == Some(literal) && matches(rest, &name[1..]),
        }
    }
    matches(&tokens(pattern), &tokens(fqn))
}

/// The parameters of a `ros__parameters` mapping of the file `path`, nested keys joined with dots.
fn flatten(
    path: &Path,
    prefix: &str,
    map: &yaml_rust2::yaml::Hash,
    out: &mut Vec<(String, ParamValue)>,
) -> Result<(), ArgsError> {
    let err = |reason: String| ArgsError::ParamsFile { path: path.to_path_buf(), reason };
    for (k, v) in map {
        let name = match k.as_str() {
            Some(n) => format!("{prefix}{n}"),
            None => return Err(err(format!("parameter name {k:?} is not a string"))),
        };
        match v {
            Yaml::Hash(inner) => flatten(path, &format!("{name}."), inner, out)?,
            _ => out.push((
                name.clone(),
                ParamValue::from_yaml(v).ok_or_else(|| err(format!("parameter {name}: unsupported value {v:?}")))?,
            )),
        }
    }
    Ok(())
}
