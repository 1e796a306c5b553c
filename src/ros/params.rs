//! The node's parameters: declared with type, range and description (what `ros2 param describe`
//! shows), resolved from parameter files and `-p` overrides, validated before anything starts.

use std::path::PathBuf;

use super::args::{load_params_file, ArgsError, ParamValue, RosArgs};

/// Allowed values of a parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    None,
    Integer { min: i64, max: i64 },
    Double { min: f64, max: f64 },
    OneOf(&'static [&'static str]),
}

/// One declared parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub description: &'static str,
    pub default: ParamValue,
    pub constraint: Constraint,
    /// Fixed once the node runs (what it loaded and subscribed to); the others can be changed
    /// with `ros2 param set` and take effect on the next frame or pair.
    pub read_only: bool,
}

/// Every parameter the node declares.
pub fn declared() -> Vec<ParamSpec> {
    use Constraint as C;
    use ParamValue as V;
    let s = |v: &str| V::String(v.to_string());
    vec![
        ParamSpec { name: "image_transport", description: "Subscribe to `image` (raw) or `image/compressed` (compressed)", default: s("raw"), constraint: C::OneOf(&["raw", "compressed"]), read_only: true },
        ParamSpec { name: "superpoint_backend", description: "Where SuperPoint runs: in process (cpu) or on a tt-model server", default: s("cpu"), constraint: C::OneOf(&["cpu", "tt-server"]), read_only: true },
        ParamSpec { name: "superpoint_weights", description: "Folder with SuperPoint's model.safetensors + config.json; empty: environment, Hugging Face cache, download", default: s(""), constraint: C::None, read_only: true },
        ParamSpec { name: "dust3r_backend", description: "Where DUSt3R runs: in process (cpu) or on a tt-model server", default: s("cpu"), constraint: C::OneOf(&["cpu", "tt-server"]), read_only: true },
        ParamSpec { name: "dust3r_weights", description: "Folder with DUSt3R's model.safetensors + config.json; empty: environment, Hugging Face cache, download", default: s(""), constraint: C::None, read_only: true },
        ParamSpec { name: "superpoint_url", description: "Base URL of the superpoint-p150 tt-model server (superpoint_backend: tt-server)", default: s("http://127.0.0.1:20000"), constraint: C::None, read_only: true },
        ParamSpec { name: "dust3r_url", description: "Base URL of the mast3r-blackhole tt-model server (dust3r_backend: tt-server)", default: s("http://127.0.0.1:20001"), constraint: C::None, read_only: true },
        ParamSpec { name: "fallback", description: "While a tt-model server cannot answer: run that model on the CPU (cpu; needs its weights) or pause its outputs (none)", default: s("cpu"), constraint: C::OneOf(&["cpu", "none"]), read_only: true },
        ParamSpec { name: "server_timeout", description: "Seconds a tt-model server request may take, connection included", default: V::Double(10.0), constraint: C::Double { min: 0.1, max: 600.0 }, read_only: true },
        ParamSpec { name: "server_jpeg_quality", description: "JPEG quality of colour frames sent to the servers (grey frames go as PNG); 0 sends colour as PNG", default: V::Integer(90), constraint: C::Integer { min: 0, max: 100 }, read_only: true },
        ParamSpec { name: "server_conf_pct", description: "mast3r-blackhole: PnP uses the top N % of view 2's pixels by confidence", default: V::Double(50.0), constraint: C::Double { min: 0.1, max: 100.0 }, read_only: false },
        ParamSpec { name: "max_keypoints", description: "Keep the N best keypoints per frame; -1 keeps all", default: V::Integer(1024), constraint: C::Integer { min: -1, max: 100_000 }, read_only: false },
        ParamSpec { name: "keypoint_threshold", description: "Keep keypoints whose score is strictly above this", default: V::Double(0.005), constraint: C::Double { min: 0.0, max: 1.0 }, read_only: false },
        ParamSpec { name: "nms_radius", description: "Non-maximum suppression radius in pixels of the 640x480 network input; 0 disables it", default: V::Integer(4), constraint: C::Integer { min: 0, max: 64 }, read_only: false },
        ParamSpec { name: "keyframe_match_ratio", description: "New keyframe when the share of SuperPoint mutual nearest-neighbour matches to the last keyframe falls below this", default: V::Double(0.5), constraint: C::Double { min: 0.0, max: 1.0 }, read_only: false },
        ParamSpec { name: "keyframe_min_interval", description: "Seconds of input time before another keyframe may be taken", default: V::Double(0.5), constraint: C::Double { min: 0.0, max: 3600.0 }, read_only: false },
        ParamSpec { name: "keyframe_max_interval", description: "Seconds of input time after which a keyframe is taken regardless of matches", default: V::Double(5.0), constraint: C::Double { min: 0.0, max: 3600.0 }, read_only: false },
        ParamSpec { name: "confidence_threshold", description: "Publish DUSt3R points whose confidence (>= 1) is above this", default: V::Double(3.0), constraint: C::Double { min: 1.0, max: 1e6 }, read_only: false },
        ParamSpec { name: "pose_confidence_threshold", description: "PairViewer's min_conf_thr: only DUSt3R points above this confidence enter the focal estimate and PnP", default: V::Double(3.0), constraint: C::Double { min: 1.0, max: 1e6 }, read_only: false },
        ParamSpec { name: "cloud_stride", description: "Publish the point of every n-th pixel along rows and columns of each view (1: all, up to 2 x 262k points, 10.5 MB per pair; 3: a ninth, at most 1.2 MB, which DDS readers with default socket buffers take at once)", default: V::Integer(3), constraint: C::Integer { min: 1, max: 16 }, read_only: false },
        ParamSpec { name: "publish_tf", description: "Broadcast TF from view 1's camera frame to a child frame for view 2", default: V::Bool(false), constraint: C::None, read_only: false },
        ParamSpec { name: "use_sim_time", description: "Take time from /clock (rosgraph_msgs/Clock), e.g. during `ros2 bag play --clock`", default: V::Bool(false), constraint: C::None, read_only: true },
    ]
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamError {
    #[error(transparent)]
    Args(#[from] ArgsError),
    #[error("parameter {name}: expected a {expected}, got {got} ({value:?})")]
    Type { name: String, expected: &'static str, got: &'static str, value: ParamValue },
    #[error("parameter {name} = {value} is outside {range}")]
    Range { name: String, value: String, range: String },
    #[error("parameter {name}: {detail}")]
    Invalid { name: String, detail: String },
}

/// Which engine runs a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    TtServer,
}

/// The node's configuration after files and overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeParams {
    pub compressed_input: bool,
    pub superpoint_backend: Backend,
    pub superpoint_weights: Option<PathBuf>,
    pub dust3r_backend: Backend,
    pub dust3r_weights: Option<PathBuf>,
    pub superpoint_url: String,
    pub dust3r_url: String,
    /// Run a model on the CPU while its server cannot answer.
    pub cpu_fallback: bool,
    pub server_timeout: f64,
    pub server_jpeg_quality: u8,
    pub server_conf_pct: f64,
    /// `None`: keep all.
    pub max_keypoints: Option<usize>,
    pub keypoint_threshold: f64,
    pub nms_radius: usize,
    pub keyframe_match_ratio: f64,
    pub keyframe_min_interval: f64,
    pub keyframe_max_interval: f64,
    pub confidence_threshold: f64,
    pub pose_confidence_threshold: f64,
    pub cloud_stride: usize,
    pub publish_tf: bool,
    pub use_sim_time: bool,
}

impl NodeParams {
    /// SuperPoint's post-processing as these parameters set it (the border is fixed at 4 px).
    pub fn post_params(&self) -> crate::superpoint::PostParams {
        crate::superpoint::PostParams {
            threshold: self.keypoint_threshold as f32,
            nms_radius: self.nms_radius,
            border: 4,
            max_keypoints: self.max_keypoints,
        }
    }

    pub fn keyframe_policy(&self) -> crate::pipeline::keyframes::KeyframePolicy {
        crate::pipeline::keyframes::KeyframePolicy {
            match_ratio: self.keyframe_match_ratio,
            min_interval: self.keyframe_min_interval,
            max_interval: self.keyframe_max_interval,
        }
    }

    /// Defaults, then every parameter file in order, then `-p` overrides. Returns warnings for
    /// parameters the node does not declare (they are ignored, as rclcpp does).
    pub fn resolve(ros: &RosArgs, node_fqn: &str) -> Result<(Self, Vec<String>), ParamError> {
        let (store, warnings) = ParamStore::resolve(ros, node_fqn)?;
        Ok((store.params().clone(), warnings))
    }

    fn from_values(specs: &[ParamSpec], values: &[ParamValue]) -> Result<Self, ParamError> {
        let get = |n: &str| specs.iter().position(|s| s.name == n).map(|i| &values[i]);
        let string = |n: &str| match get(n) {
            Some(ParamValue::String(s)) => s.clone(),
            _ => String::new(),
        };
        let int = |n: &str| match get(n) {
            Some(ParamValue::Integer(i)) => *i,
            _ => 0,
        };
        let double = |n: &str| match get(n) {
            Some(ParamValue::Double(d)) => *d,
            _ => 0.0,
        };
        let boolean = |n: &str| matches!(get(n), Some(ParamValue::Bool(true)));
        let backend = |n: &str| if string(n) == "tt-server" { Backend::TtServer } else { Backend::Cpu };
        let path = |n: &str| Some(string(n)).filter(|s| !s.is_empty()).map(PathBuf::from);
        let params = Self {
            compressed_input: string("image_transport") == "compressed",
            superpoint_backend: backend("superpoint_backend"),
            superpoint_weights: path("superpoint_weights"),
            dust3r_backend: backend("dust3r_backend"),
            dust3r_weights: path("dust3r_weights"),
            superpoint_url: string("superpoint_url"),
            dust3r_url: string("dust3r_url"),
            cpu_fallback: string("fallback") == "cpu",
            server_timeout: double("server_timeout"),
            server_jpeg_quality: int("server_jpeg_quality").clamp(0, 100) as u8,
            server_conf_pct: double("server_conf_pct"),
            max_keypoints: usize::try_from(int("max_keypoints")).ok(),
            keypoint_threshold: double("keypoint_threshold"),
            nms_radius: int("nms_radius") as usize,
            keyframe_match_ratio: double("keyframe_match_ratio"),
            keyframe_min_interval: double("keyframe_min_interval"),
            keyframe_max_interval: double("keyframe_max_interval"),
            confidence_threshold: double("confidence_threshold"),
            pose_confidence_threshold: double("pose_confidence_threshold"),
            cloud_stride: int("cloud_stride").max(1) as usize,
            publish_tf: boolean("publish_tf"),
            use_sim_time: boolean("use_sim_time"),
        };
        if params.keyframe_max_interval < params.keyframe_min_interval {
            return Err(ParamError::Invalid {
                name: "keyframe_max_interval".into(),
                detail: format!(
                    "{} is below keyframe_min_interval {}",
                    params.keyframe_max_interval, params.keyframe_min_interval
                ),
            });
        }
        Ok(params)
    }
}

/// The declared parameters with their current values: what the parameter services read and
/// write. Every change is checked (declared, writable, type, range, the interval pair) and
/// applied whole or not at all.
#[derive(Clone, Debug)]
pub struct ParamStore {
    specs: Vec<ParamSpec>,
    values: Vec<ParamValue>,
    params: NodeParams,
}

impl ParamStore {
    /// Defaults, then every parameter file in order, then `-p` overrides. Returns warnings for
    /// parameters the node does not declare (they are ignored, as rclcpp does).
    pub fn resolve(ros: &RosArgs, node_fqn: &str) -> Result<(Self, Vec<String>), ParamError> {
        let specs = declared();
        let mut values: Vec<ParamValue> = specs.iter().map(|s| s.default.clone()).collect();
        let mut warnings = Vec::new();
        let mut given: Vec<(String, ParamValue)> = Vec::new();
        for file in &ros.params_files {
            given.extend(load_params_file(file, node_fqn)?);
        }
        given.extend(ros.params.iter().cloned());
        for (name, value) in given {
            let Some(i) = specs.iter().position(|s| s.name == name) else {
                warnings.push(format!("parameter {name} is not declared by this node; ignored"));
                continue;
            };
            values[i] = check(&specs[i], value)?;
        }
        let params = NodeParams::from_values(&specs, &values)?;
        Ok((Self { specs, values, params }, warnings))
    }

    pub fn params(&self) -> &NodeParams {
        &self.params
    }

    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// The declaration and current value of `name`.
    pub fn get(&self, name: &str) -> Option<(&ParamSpec, &ParamValue)> {
        self.specs.iter().position(|s| s.name == name).map(|i| (&self.specs[i], &self.values[i]))
    }

    /// Sets all of `changes` or none; returns the values as stored (integers given for doubles
    /// become doubles).
    pub fn set(&mut self, changes: &[(String, ParamValue)]) -> Result<Vec<(String, ParamValue)>, ParamError> {
        let mut values = self.values.clone();
        let mut applied = Vec::new();
        for (name, value) in changes {
            let i = self.specs.iter().position(|s| s.name == name).ok_or_else(|| ParamError::Invalid {
                name: name.clone(),
                detail: "not declared by this node".into(),
            })?;
            let spec = &self.specs[i];
            if spec.read_only {
                return Err(ParamError::Invalid {
                    name: name.clone(),
                    detail: "read-only while the node runs; set it at start-up (-p or a params file)".into(),
                });
            }
            values[i] = check(spec, value.clone())?;
            applied.push((name.clone(), values[i].clone()));
        }
        self.params = NodeParams::from_values(&self.specs, &values)?;
        self.values = values;
        Ok(applied)
    }
}

/// Type and range check of one value against its declaration (an integer is accepted where a
/// double is declared).
fn check(spec: &ParamSpec, value: ParamValue) -> Result<ParamValue, ParamError> {
    let value = match (&spec.default, value) {
        (ParamValue::Double(_), ParamValue::Integer(i)) => ParamValue::Double(i as f64),
        (_, v) => v,
    };
    if std::mem::discriminant(&spec.default) != std::mem::discriminant(&value) {
        return Err(ParamError::Type {
            name: spec.name.into(),
            expected: spec.default.type_name(),
            got: value.type_name(),
            value,
        });
    }
    let out_of = |v: String, range: String| Err(ParamError::Range { name: spec.name.into(), value: v, range });
    match (&spec.constraint, &value) {
        (Constraint::Integer { min, max }, ParamValue::Integer(i)) if i < min || i > max => {
            out_of(i.to_string(), format!("[{min}, {max}]"))
        }
        (Constraint::Double { min, max }, ParamValue::Double(d)) if !(d >= min && d <= max) => {
            out_of(d.to_string(), format!("[{min}, {max}]"))
        }
        (Constraint::OneOf(allowed), ParamValue::String(s)) if !allowed.contains(&s.as_str()) => {
            out_of(format!("{s:?}"), format!("{{{}}}", allowed.join(", ")))
        }
        _ => Ok(value),
    }
}
