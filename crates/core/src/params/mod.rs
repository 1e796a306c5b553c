//! The node's parameters: declared with type, range and description (what `ros2 param describe`
//! shows), resolved from parameter files and `-p` overrides, validated before anything starts.

pub mod args;
pub mod qos;
pub mod topics;

use std::borrow::Cow;
use std::path::PathBuf;

use crate::backend::build::{BackendConfig, BackendKind};
use crate::backend::tt_server::{DEFAULT_DUST3R_URL, DEFAULT_SUPERPOINT_URL};
use crate::diagnostics::Limits;
use crate::dust3r::cloud::DEFAULT_MIN_CONFIDENCE;
use crate::dust3r::{Checkpoint, UnknownCheckpoint};
use crate::params::args::{load_params_file, ArgsError, ParamValue, RosArgs};
use crate::params::qos::Qos;
use crate::superpoint::{DEFAULT_NMS_RADIUS, DEFAULT_THRESHOLD};
use crate::tensor::Precision;
use crate::vo::scale::ScaleSource;
use crate::workers::priority::{DEFAULT_BACKGROUND_SHARE, MAX_BACKGROUND_SHARE};

/// Allowed values of a parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// Any value of the type.
    None,
    /// An integer in `[min, max]`.
    Integer {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A double in `[min, max]`.
    Double {
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
    },
    /// One of these strings.
    OneOf(&'static [&'static str]),
}

/// One declared parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The name, as `ros2 param` shows it.
    pub name: Cow<'static, str>,
    /// What it does, as `ros2 param describe` shows it.
    pub description: &'static str,
    /// Its value when nothing sets it.
    pub default: ParamValue,
    /// Its allowed values.
    pub constraint: Constraint,
    /// Fixed once the node runs (what it loaded and subscribed to); the others can be changed
    /// with `ros2 param set` and take effect on the next frame or pair.
    pub read_only: bool,
}

/// Marks a parameter fixed once the node runs.
const FIXED: bool = true;
/// Marks a parameter `ros2 param set` may change while the node runs.
const TUNABLE: bool = false;

/// A Rust type a parameter can have, and its `ParamValue` form.
trait Typed: Sized {
    fn to_value(self) -> ParamValue;
    fn from_value(value: &ParamValue) -> Option<Self>;
}

/// `Typed` for each ROS parameter type the node declares, by its `ParamValue` variant.
macro_rules! typed {
    ($($ty:ty => $variant:ident),*) => {$(
        impl Typed for $ty {
            fn to_value(self) -> ParamValue {
                ParamValue::$variant(self)
            }
            fn from_value(value: &ParamValue) -> Option<Self> {
                match value {
                    ParamValue::$variant(v) => Some(v).cloned(),
                    _ => None,
                }
            }
        }
    )*};
}

typed!(bool => Bool, i64 => Integer, f64 => Double, String => String);

/// Declares every parameter once: its name is a field of [`Values`] (so a name read that is not
/// declared does not compile), its type, default, constraint, mutability and description
/// become its [`ParamSpec`].
macro_rules! parameters {
    ($($name:ident: $ty:ty = $default:expr, $constraint:expr, $mutability:expr, $description:expr;)*) => {
        /// Every declared parameter's value, one typed field each, in declaration order.
        #[derive(Clone, Debug, PartialEq)]
        struct Values {
            $($name: $ty,)*
        }

        /// Every declared parameter's name, for code that sets one by name (a typo does not
        /// compile).
        #[allow(non_upper_case_globals)]
        pub mod name {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: &str = stringify!($name);
            )*
        }

        /// Every parameter the node declares.
        pub fn declared() -> Vec<ParamSpec> {
            vec![$(ParamSpec {
                name: Cow::Borrowed(stringify!($name)),
                description: $description,
                default: <$ty as Typed>::to_value(<$ty>::from($default)),
                constraint: $constraint,
                read_only: $mutability,
            },)*]
        }

        impl Values {
            /// The values in [`declared`]'s order, each already checked against its type.
            fn from_list(values: &[ParamValue]) -> Result<Self, ParamError> {
                let mut it = values.iter();
                Ok(Self {$($name: it.next().and_then(<$ty as Typed>::from_value).ok_or_else(|| ParamError::Invalid {
                    name: stringify!($name).into(),
                    detail: "no value of the declared type".into(),
                })?,)*})
            }
        }
    };
}

/// What the input sockets ask for: room for a few 1280x720 rgb8 frames (2.8 MB each).
const DEFAULT_RECEIVE_BUFFER: i64 = 8 << 20;

/// Keypoint threshold, NMS radius and keypoint count default to SuperPoint's own.
const DEFAULT_MAX_KEYPOINTS: i64 = crate::superpoint::DEFAULT_MAX_KEYPOINTS as i64;

parameters! {
    image_transport: String = "raw", Constraint::OneOf(&["raw", "compressed"]), FIXED,
        "Subscribe to `image` (raw) or `image/compressed` (compressed)";
    superpoint_backend: String = BackendKind::Cpu.name(), Constraint::OneOf(&BackendKind::NAMES), FIXED,
        "Where SuperPoint runs: in process (cpu) or on a tt-model server";
    superpoint_weights: String = "", Constraint::None, FIXED,
        "Folder with SuperPoint's model.safetensors + config.json; empty: environment, Hugging Face cache, download";
    dust3r_backend: String = BackendKind::Cpu.name(), Constraint::OneOf(&BackendKind::NAMES), FIXED,
        "Where DUSt3R runs: in process (cpu) or on a tt-model server";
    dust3r_model: String = Checkpoint::Dpt512.name(), Constraint::OneOf(&Checkpoint::NAMES), FIXED,
        "The DUSt3R checkpoint the CPU runs (naver/DUSt3R_ViTLarge_BaseDecoder_<name>): 512_dpt, 512_linear, or \
         224_linear (224x224 input, a few times faster, coarser); dust3r_weights must hold the same one; a tt-model \
         server runs 512_dpt";
    dust3r_weights: String = "", Constraint::None, FIXED,
        "Folder with DUSt3R's model.safetensors + config.json; empty: environment, Hugging Face cache, download";
    dust3r_precision: String = Precision::Fp32.name(), Constraint::OneOf(&Precision::NAMES), FIXED,
        "What the CPU's DUSt3R computes its linear layers, attention and heads' convolutions in: fp32, or \
         bf16 (float32 sums; about half the pair time where the CPU has AMX-BF16 or is an AMD Zen 4 with \
         AVX512_BF16; AVX512_BF16 on Intel CPUs runs it slower than fp32, which it warns of; without either it \
         says so and runs fp32); a tt-model server runs its own";
    superpoint_url: String = DEFAULT_SUPERPOINT_URL, Constraint::None, FIXED,
        "Base URL of the superpoint-p150 tt-model server (superpoint_backend: tt-server)";
    dust3r_url: String = DEFAULT_DUST3R_URL, Constraint::None, FIXED,
        "Base URL of the mast3r-blackhole tt-model server (dust3r_backend: tt-server)";
    fallback: String = "cpu", Constraint::OneOf(&["cpu", "none"]), FIXED,
        "While a tt-model server cannot answer: run that model on the CPU (cpu; needs its weights) or pause its \
         outputs (none)";
    server_timeout: f64 = 10.0, Constraint::Double { min: 0.1, max: 600.0 }, FIXED,
        "Seconds a tt-model server request may take, connection included";
    server_jpeg_quality: i64 = 90, Constraint::Integer { min: 0, max: 100 }, FIXED,
        "JPEG quality of colour frames sent to the servers (grey frames go as PNG); 0 sends colour as PNG";
    server_conf_pct: f64 = 50.0, Constraint::Double { min: 0.1, max: 100.0 }, TUNABLE,
        "mast3r-blackhole: PnP uses the top N % of view 2's pixels by confidence";
    max_keypoints: i64 = DEFAULT_MAX_KEYPOINTS, Constraint::Integer { min: -1, max: 100_000 }, TUNABLE,
        "Keep the N best keypoints per frame; -1 keeps all";
    keypoint_threshold: f64 = DEFAULT_THRESHOLD, Constraint::Double { min: 0.0, max: 1.0 }, TUNABLE,
        "Keep keypoints whose score is strictly above this";
    nms_radius: i64 = DEFAULT_NMS_RADIUS as i64, Constraint::Integer { min: 0, max: 64 }, TUNABLE,
        "Non-maximum suppression radius in pixels of the 640x480 network input; 0 disables it";
    keyframe_match_ratio: f64 = 0.5, Constraint::Double { min: 0.0, max: 1.0 }, TUNABLE,
        "New keyframe when the share of SuperPoint mutual nearest-neighbour matches to the last keyframe falls \
         below this";
    keyframe_min_interval: f64 = 0.5, Constraint::Double { min: 0.0, max: 3600.0 }, TUNABLE,
        "Seconds of input time before another keyframe may be taken";
    keyframe_max_interval: f64 = 5.0, Constraint::Double { min: 0.0, max: 3600.0 }, TUNABLE,
        "Seconds of input time after which a keyframe is taken regardless of matches";
    keyframe_min_inliers: i64 = 50, Constraint::Integer { min: 0, max: 100_000 }, TUNABLE,
        "New keyframe when tracking placed the frame on fewer PnP inliers from pointmaps than this (or lost it): \
         the view is leaving the map; 0: only a lost frame";
    keyframe_max_rotation: f64 = 20.0, Constraint::Double { min: 0.0, max: 180.0 }, TUNABLE,
        "New keyframe when tracking says the camera turned more than this many degrees since the last keyframe";
    confidence_threshold: f64 = DEFAULT_MIN_CONFIDENCE, Constraint::Double { min: 1.0, max: 1e6 }, TUNABLE,
        "Publish DUSt3R points whose confidence (>= 1) is above this";
    pose_confidence_threshold: f64 = 3.0, Constraint::Double { min: 1.0, max: 1e6 }, TUNABLE,
        "PairViewer's min_conf_thr: only DUSt3R points above this confidence enter the focal estimate and PnP";
    cloud_stride: i64 = 1, Constraint::Integer { min: 1, max: 16 }, TUNABLE,
        "Publish the point of every n-th pixel along rows and columns of each view (1: all, up to 2 x 262k \
         points, 10.5 MB per pair, which stock subscribers get in ~0.2 s; 3: a ninth, at most 1.2 MB, for \
         slow or lossy links)";
    publish_tf: bool = false, Constraint::None, TUNABLE,
        "Broadcast TF map_frame -> odom_frame -> the camera's frame (or base_frame) for every tracked frame, at its \
         stamp (in metres with a metric scale_source, else in DUSt3R's scale)";
    odom_frame: String = "odom", Constraint::None, FIXED,
        "Frame of odom (REP 105: continuous, drifting): the first keyframe's camera turned to REP 103's axes \
         (x forward, z up), or where base_frame was then";
    map_frame: String = "map", Constraint::None, FIXED,
        "Frame of path and cloud_map (REP 105: each pair corrects the drift, in steps): where odom_frame starts; \
         TF map_frame -> odom_frame carries the correction";
    base_frame: String = "", Constraint::None, FIXED,
        "The robot's base frame: when set, odom, path and TF are the base's, through the static transform \
         base_frame -> camera frame from /tf_static (a bag's, in a replay), so the camera keeps its parent \
         (without a metric scale_source only the mount's rotation is used: its offset is in metres and the \
         odometry is not); empty: the camera's";
    rectified_images: bool = false, Constraint::None, TUNABLE,
        "The images are already rectified (image_proc's image_rect, whose camera_info describes the raw camera): \
         use camera_info's P and no lens; false: K, with the lens in D undone on the pixels PnP sees";
    scale_source: String = ScaleSource::None.name(), Constraint::OneOf(&ScaleSource::NAMES), FIXED,
        "Where metric scale comes from: none (DUSt3R's arbitrary scale), depth (a registered depth image on \
         depth/image beside the colour image), odometry (the robot's own odometry on /tf, scale_odom_frame -> \
         base_frame); with depth or odometry every 3D output is in metres";
    scale_odom_frame: String = "odom", Constraint::None, FIXED,
        "scale_source odometry: the robot's odometry frame, whose transform to base_frame (wheel odometry, \
         e.g. diff_drive_controller's) /tf carries; odom_frame must then be another name, and publish_tf off \
         (base_frame has one parent)";
    scale_min_translation: f64 = 0.05, Constraint::Double { min: 0.0, max: 100.0 }, TUNABLE,
        "scale_source odometry: metres the camera must move between two keyframes, by the robot's odometry, for \
         their pair to measure the scale (below it the chain's scale carries over)";
    depth_max_interval: f64 = 0.05, Constraint::Double { min: 0.0, max: 1.0 }, TUNABLE,
        "scale_source depth: the most seconds a depth image's stamp may be from its colour frame's (the nearest \
         within it is taken, as message_filters' ApproximateTime pairs them)";
    depth_tracking: bool = true, Constraint::None, TUNABLE,
        "scale_source depth: each tracked frame's keypoints take their depth from its registered depth image (the \
         nearest within depth_max_interval), and the next frame is placed against them, as an RGB-D odometry \
         is; false: depth images measure the pairs' scale alone";
    scale_max_unmeasured: i64 = 5, Constraint::Integer { min: 0, max: 10_000 }, TUNABLE,
        "With a metric scale_source: keyframes in a row without a scale measurement that the chain carries its \
         metric scale over (from the shared keyframe); beyond them metric outputs stop until a measurement \
         comes";
    tracking_min_inliers: i64 = 20, Constraint::Integer { min: 6, max: 100_000 }, TUNABLE,
        "Fewest PnP inliers for a frame's pose against its keyframe; fewer and the frame is reported not tracked";
    tracking_match_ratio: f64 = 0.9, Constraint::Double { min: 0.05, max: 1.0 }, TUNABLE,
        "Lowe's ratio for tracking's SuperPoint matches: the nearest descriptor's distance at most this times the \
         second nearest's (1: off)";
    map_voxel_size: f64 = 0.01, Constraint::Double { min: 1e-4, max: 1.0 }, FIXED,
        "Edge of the map's voxels as a fraction of the first keyframe's median depth (DUSt3R's scale is \
         arbitrary)";
    map_max_points: i64 = 200_000, Constraint::Integer { min: 1000, max: 10_000_000 }, FIXED,
        "Most points the map holds (20 bytes each on the wire); beyond it the voxel edge doubles";
    map_save_path: String = "~/.ros/sp_dust3r_map.ply", Constraint::None, TUNABLE,
        "Where ~/save_map writes the last cloud_map as a binary PLY (a leading ~/ is the user's home; the folder \
         must exist)";
    dust3r_nice: i64 = 19, Constraint::Integer { min: 0, max: 19 }, FIXED,
        "How much lower than SuperPoint's the priority of the CPU DUSt3R's threads is (Linux nice): while a pair \
         is reconstructed on the same cores, frames keep their keypoint rate; 0 shares the cores evenly";
    dust3r_cpu_share: f64 = DEFAULT_BACKGROUND_SHARE, Constraint::Double { min: 0.0, max: MAX_BACKGROUND_SHARE }, TUNABLE,
        "With SuperPoint and DUSt3R both on the CPU: the share of the time a pair in flight is guaranteed when \
         frames come faster than SuperPoint keeps up (SuperPoint rests share / (1 - share) of each frame's time \
         before it takes the next; a frame arriving meanwhile waits); 0: pairs get only the time SuperPoint \
         leaves idle, which a camera faster than SuperPoint leaves none of";
    receive_buffer_size: i64 = DEFAULT_RECEIVE_BUFFER, Constraint::Integer { min: 4096, max: 1 << 30 }, FIXED,
        "Bytes of kernel receive buffer (SO_RCVBUF) each of the node's DDS input sockets asks for; the kernel \
         grants at most net.core.rmem_max (212992 on a stock Ubuntu, less than one 640x480 rgb8 frame), and \
         /diagnostics says what it got";
    use_sim_time: bool = false, Constraint::None, FIXED,
        "Take time from /clock (rosgraph_msgs/Clock), e.g. during `ros2 bag play --clock`";
    expected_rate: f64 = 0.0, Constraint::Double { min: 0.0, max: 10_000.0 }, TUNABLE,
        "Frames per second the camera should deliver: /diagnostics warns when the input rate over 5 s is off \
         by more than rate_tolerance (0: no check)";
    rate_tolerance: f64 = 0.1, Constraint::Double { min: 0.0, max: 10.0 }, TUNABLE,
        "How far the input rate may be from expected_rate, as a fraction of it";
    stale_timeout: f64 = 5.0, Constraint::Double { min: 0.1, max: 3600.0 }, TUNABLE,
        "Seconds without an input frame after which /diagnostics reports the input STALE";
    diagnostic_window: f64 = 60.0, Constraint::Double { min: 1.0, max: 86_400.0 }, TUNABLE,
        "Seconds of history the /diagnostics levels look at: a failure older than this no longer makes a \
         status WARN (the counters are for the whole run)";
}

/// Why parameters are refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ParamError {
    /// The command line or a parameter file is malformed.
    #[error(transparent)]
    Args(#[from] ArgsError),
    /// A value of another type than declared.
    #[error("parameter {name}: expected a {expected}, got {got} ({value:?})")]
    Type {
        /// The parameter.
        name: String,
        /// The declared type.
        expected: &'static str,
        /// The given value's type.
        got: &'static str,
        /// The given value.
        value: ParamValue,
    },
    /// A value outside the declared range or set.
    #[error("parameter {name} = {value} is outside {range}")]
    Range {
        /// The parameter.
        name: String,
        /// The given value.
        value: String,
        /// The allowed values.
        range: String,
    },
    /// A value the node cannot use.
    #[error("parameter {name}: {detail}")]
    Invalid {
        /// The parameter.
        name: String,
        /// Why.
        detail: String,
    },
    /// The node's parameter store is unusable (a worker panicked while holding it).
    #[error("parameter store unavailable")]
    StoreUnavailable,
}

/// The node's configuration after files and overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeParams {
    /// Subscribe to `image/compressed` instead of `image`.
    pub compressed_input: bool,
    /// Where SuperPoint runs.
    pub superpoint_backend: BackendKind,
    /// SuperPoint's weights folder; `None`: environment, Hugging Face cache, download.
    pub superpoint_weights: Option<PathBuf>,
    /// Where DUSt3R runs.
    pub dust3r_backend: BackendKind,
    /// DUSt3R's weights folder; `None` as for SuperPoint.
    pub dust3r_weights: Option<PathBuf>,
    /// What the CPU's DUSt3R computes in.
    pub dust3r_precision: Precision,
    /// The DUSt3R checkpoint the CPU runs.
    pub dust3r_model: Checkpoint,
    /// Base URL of the superpoint-p150 server.
    pub superpoint_url: String,
    /// Base URL of the mast3r-blackhole server.
    pub dust3r_url: String,
    /// Run a model on the CPU while its server cannot answer.
    pub cpu_fallback: bool,
    /// Seconds a server request may take.
    pub server_timeout: f64,
    /// JPEG quality of colour frames sent to the servers; 0 sends PNG.
    pub server_jpeg_quality: u8,
    /// mast3r-blackhole: the share of view 2's pixels, in percent, that enter PnP.
    pub server_conf_pct: f64,
    /// `None`: keep all.
    pub max_keypoints: Option<usize>,
    /// Keep keypoints whose score is strictly above this.
    pub keypoint_threshold: f64,
    /// NMS radius in network pixels; 0 disables NMS.
    pub nms_radius: usize,
    /// New keyframe when the match ratio to the last keyframe falls below this.
    pub keyframe_match_ratio: f64,
    /// Seconds of input time before another keyframe may be taken.
    pub keyframe_min_interval: f64,
    /// Seconds of input time after which a keyframe is taken regardless.
    pub keyframe_max_interval: f64,
    /// New keyframe below this many PnP inliers from pointmaps.
    pub keyframe_min_inliers: usize,
    /// New keyframe past this many degrees of rotation since the last.
    pub keyframe_max_rotation: f64,
    /// Publish DUSt3R points above this confidence.
    pub confidence_threshold: f64,
    /// Points above this confidence enter the focal estimate and PnP.
    pub pose_confidence_threshold: f64,
    /// Publish every n-th pixel's point along rows and columns.
    pub cloud_stride: usize,
    /// Broadcast TF map -> odom -> camera (or base) for every tracked frame.
    pub publish_tf: bool,
    /// The odometry frame.
    pub odom_frame: String,
    /// The map frame.
    pub map_frame: String,
    /// The robot's base frame, if odometry is of the base.
    pub base_frame: Option<String>,
    /// The images are rectified: CameraInfo's P, no lens.
    pub rectified_images: bool,
    /// Where metric scale comes from.
    pub scale_source: ScaleSource,
    /// The robot's odometry frame (`scale_source: odometry`).
    pub scale_odom_frame: String,
    /// Fewest metres of travel between keyframes that measure the scale.
    pub scale_min_translation: f64,
    /// Most seconds between a colour frame's stamp and its depth image's.
    pub depth_max_interval: f64,
    /// Whether tracked frames' keypoints take their depth from the depth images.
    pub depth_tracking: bool,
    /// Keyframes in a row without a scale measurement before metric outputs stop.
    pub scale_max_unmeasured: usize,
    /// Tracking: fewest PnP inliers.
    pub tracking_min_inliers: usize,
    /// Tracking: Lowe's ratio.
    pub tracking_match_ratio: f64,
    /// Map voxel edge as a fraction of the first keyframe's median depth.
    pub map_voxel_size: f64,
    /// Most map points.
    pub map_max_points: usize,
    /// Where `~/save_map` writes the map.
    pub map_save_path: String,
    /// Nice value the CPU DUSt3R's threads add.
    pub dust3r_nice: i32,
    /// Share of the time a CPU pair in flight is guaranteed (both models on the CPU).
    pub dust3r_cpu_share: f64,
    /// Bytes of receive buffer the DDS input sockets ask the kernel for.
    pub receive_buffer_size: usize,
    /// Take time from /clock.
    pub use_sim_time: bool,
    /// What the /diagnostics levels look at.
    pub diagnostic_limits: Limits,
}

impl NodeParams {
    /// The backends these parameters ask for.
    pub fn backend_config(&self) -> BackendConfig {
        BackendConfig {
            superpoint: self.superpoint_backend,
            superpoint_weights: self.superpoint_weights.clone(),
            superpoint_url: self.superpoint_url.clone(),
            dust3r: self.dust3r_backend,
            dust3r_weights: self.dust3r_weights.clone(),
            dust3r_url: self.dust3r_url.clone(),
            dust3r_precision: self.dust3r_precision,
            dust3r_model: self.dust3r_model,
            cpu_fallback: self.cpu_fallback,
            server_timeout: std::time::Duration::from_secs_f64(self.server_timeout),
            jpeg_quality: self.server_jpeg_quality,
            cancel: crate::cancel::Cancel::new(),
        }
    }

    /// SuperPoint's post-processing as these parameters set it (the border is SuperPoint's own).
    pub fn post_params(&self) -> crate::superpoint::PostParams {
        crate::superpoint::PostParams {
            threshold: self.keypoint_threshold as f32,
            nms_radius: self.nms_radius,
            border: crate::superpoint::BORDER,
            max_keypoints: self.max_keypoints,
        }
    }

    /// How the keyframe chain tracks and joins pairs under these parameters.
    pub fn odometry_params(&self) -> crate::vo::odometry::OdometryParams {
        let mut p = crate::vo::odometry::OdometryParams::default();
        p.tracking.min_inliers = self.tracking_min_inliers;
        p.tracking.matching.max_distance_ratio = self.tracking_match_ratio as f32;
        p.tracking.min_confidence = self.pose_confidence_threshold as f32;
        p.scale_confidence = self.pose_confidence_threshold as f32;
        p
    }

    /// The map these parameters ask for.
    pub fn map_settings(&self) -> crate::vo::map::MapSettings {
        crate::vo::map::MapSettings {
            relative_voxel: self.map_voxel_size,
            budget: self.map_max_points,
            min_confidence: self.confidence_threshold as f32,
        }
    }

    /// The keyframe policy these parameters set.
    pub fn keyframe_policy(&self) -> crate::vo::keyframes::KeyframePolicy {
        crate::vo::keyframes::KeyframePolicy {
            match_ratio: self.keyframe_match_ratio,
            min_interval: self.keyframe_min_interval,
            max_interval: self.keyframe_max_interval,
            min_inliers: self.keyframe_min_inliers,
            max_rotation_deg: self.keyframe_max_rotation,
        }
    }

    /// Defaults, then every parameter file in order, then `-p` overrides. Returns warnings for
    /// parameters the node does not declare (they are ignored, as rclcpp does).
    pub fn resolve(ros: &RosArgs, node_fqn: &str) -> Result<(Self, Vec<String>), ParamError> {
        let (store, warnings) = ParamStore::resolve(ros, node_fqn)?;
        Ok((store.params().clone(), warnings))
    }

    fn from_values(values: &[ParamValue]) -> Result<Self, ParamError> {
        let v = Values::from_list(values)?;
        let backend = |name: &str, value: &str| {
            BackendKind::from_name(value)
                .ok_or_else(|| ParamError::Invalid { name: name.into(), detail: format!("unknown backend {value:?}") })
        };
        let path = |s: String| Some(s).filter(|s| !s.is_empty()).map(PathBuf::from);
        let params = Self {
            compressed_input: v.image_transport == "compressed",
            superpoint_backend: backend(name::superpoint_backend, &v.superpoint_backend)?,
            superpoint_weights: path(v.superpoint_weights),
            dust3r_backend: backend(name::dust3r_backend, &v.dust3r_backend)?,
            dust3r_weights: path(v.dust3r_weights),
            dust3r_precision: Precision::from_name(&v.dust3r_precision).ok_or_else(|| ParamError::Invalid {
                name: name::dust3r_precision.into(),
                detail: format!("unknown precision {:?}", v.dust3r_precision),
            })?,
            dust3r_model: v.dust3r_model.parse().map_err(|e: UnknownCheckpoint| ParamError::Invalid {
                name: name::dust3r_model.into(),
                detail: e.to_string(),
            })?,
            superpoint_url: v.superpoint_url,
            dust3r_url: v.dust3r_url,
            cpu_fallback: v.fallback == "cpu",
            server_timeout: v.server_timeout,
            server_jpeg_quality: v.server_jpeg_quality.clamp(0, 100) as u8,
            server_conf_pct: v.server_conf_pct,
            max_keypoints: usize::try_from(v.max_keypoints).ok(),
            keypoint_threshold: v.keypoint_threshold,
            nms_radius: v.nms_radius.max(0) as usize,
            keyframe_match_ratio: v.keyframe_match_ratio,
            keyframe_min_interval: v.keyframe_min_interval,
            keyframe_max_interval: v.keyframe_max_interval,
            keyframe_min_inliers: v.keyframe_min_inliers.max(0) as usize,
            keyframe_max_rotation: v.keyframe_max_rotation,
            confidence_threshold: v.confidence_threshold,
            pose_confidence_threshold: v.pose_confidence_threshold,
            cloud_stride: v.cloud_stride.max(1) as usize,
            publish_tf: v.publish_tf,
            odom_frame: v.odom_frame,
            map_frame: v.map_frame,
            base_frame: Some(v.base_frame).filter(|b| !b.is_empty()),
            rectified_images: v.rectified_images,
            scale_source: ScaleSource::from_name(&v.scale_source).ok_or_else(|| ParamError::Invalid {
                name: name::scale_source.into(),
                detail: format!("unknown scale source {:?}", v.scale_source),
            })?,
            scale_odom_frame: v.scale_odom_frame,
            scale_min_translation: v.scale_min_translation,
            depth_max_interval: v.depth_max_interval,
            depth_tracking: v.depth_tracking,
            scale_max_unmeasured: v.scale_max_unmeasured.max(0) as usize,
            tracking_min_inliers: v.tracking_min_inliers.max(6) as usize,
            tracking_match_ratio: v.tracking_match_ratio,
            map_voxel_size: v.map_voxel_size,
            map_max_points: v.map_max_points.max(1) as usize,
            map_save_path: v.map_save_path,
            dust3r_nice: v.dust3r_nice.clamp(0, 19) as i32,
            dust3r_cpu_share: v.dust3r_cpu_share,
            receive_buffer_size: v.receive_buffer_size.max(0) as usize,
            use_sim_time: v.use_sim_time,
            diagnostic_limits: Limits {
                expected_rate: v.expected_rate,
                rate_tolerance: v.rate_tolerance,
                stale_timeout: v.stale_timeout,
                window: v.diagnostic_window,
            },
        };
        if params.keyframe_max_interval < params.keyframe_min_interval {
            return Err(ParamError::Invalid {
                name: name::keyframe_max_interval.into(),
                detail: format!(
                    "{} is below keyframe_min_interval {}",
                    params.keyframe_max_interval, params.keyframe_min_interval
                ),
            });
        }
        params.check_frames()?;
        params.check_odometry_source()?;
        Ok(params)
    }

    /// The map and odometry frames: named, and two (TF's `map -> odom` links them).
    fn check_frames(&self) -> Result<(), ParamError> {
        let (map, odom) = (self.map_frame.trim_start_matches('/'), self.odom_frame.trim_start_matches('/'));
        let refuse = |name: &str, detail: String| Err(ParamError::Invalid { name: name.into(), detail });
        if odom.is_empty() {
            return refuse(name::odom_frame, "the odometry frame needs a name".into());
        }
        if map.is_empty() || map == odom {
            return refuse(name::map_frame, format!("{map:?}: the map frame needs a name other than odom_frame's"));
        }
        Ok(())
    }

    /// With `scale_source: odometry`, the robot's odometry parents `base_frame` in /tf: the
    /// node needs `base_frame`, must not name its own odometry frame the same, and must not
    /// broadcast a second parent of `base_frame` (`publish_tf`).
    fn check_odometry_source(&self) -> Result<(), ParamError> {
        if self.scale_source != ScaleSource::Odometry {
            return Ok(());
        }
        let refuse = |name: &str, detail: String| Err(ParamError::Invalid { name: name.into(), detail });
        let robot = self.scale_odom_frame.trim_start_matches('/');
        let Some(base) = &self.base_frame else {
            return refuse(
                name::base_frame,
                "scale_source odometry needs base_frame: the frame the robot's odometry moves".into(),
            );
        };
        if robot.is_empty() || robot == base.trim_start_matches('/') {
            return refuse(name::scale_odom_frame, format!("{robot:?} is no odometry frame of base_frame {base:?}"));
        }
        if robot == self.odom_frame.trim_start_matches('/') {
            return refuse(
                name::odom_frame,
                format!(
                    "{robot:?} is the robot's odometry frame (scale_odom_frame): name ours differently, e.g. \
                     odom_frame:=visual_odom"
                ),
            );
        }
        if self.publish_tf {
            return refuse(
                name::publish_tf,
                format!(
                    "with scale_source odometry the robot's odometry already parents {base:?} in /tf \
                     ({robot} -> {base}); publish_tf would give it a second parent ({} -> {base})",
                    self.odom_frame
                ),
            );
        }
        Ok(())
    }
}

/// rclcpp's spellings of the two-valued policies: `[when the Qos flag is set, when not]`.
const RELIABILITY: [&str; 2] = ["reliable", "best_effort"];
const HISTORY: [&str; 2] = ["keep_all", "keep_last"];
const DURABILITY: [&str; 2] = ["transient_local", "volatile"];

/// The policies of an output's QoS a parameter may override, as rclcpp names them:
/// `qos_overrides.<fully qualified topic>.publisher.<policy>` (read at start-up, read-only).
const QOS_POLICIES: [(&str, Constraint); 4] = [
    ("reliability", Constraint::OneOf(&RELIABILITY)),
    ("history", Constraint::OneOf(&HISTORY)),
    ("depth", Constraint::Integer { min: 1, max: 100_000 }),
    ("durability", Constraint::OneOf(&DURABILITY)),
];

/// The spelling of a two-valued policy whose flag is `set`.
fn spelled(spellings: [&'static str; 2], set: bool) -> ParamValue {
    ParamValue::String(spellings[usize::from(!set)].into())
}

/// The parameter that overrides `policy` of the publisher on `topic`.
pub fn qos_override_name(topic: &str, policy: &str) -> String {
    format!("qos_overrides.{topic}.publisher.{policy}")
}

/// The declarations of `topic`'s QoS overrides, their defaults the node's own profile.
fn qos_specs(topic: &str, qos: Qos) -> Vec<ParamSpec> {
    QOS_POLICIES
        .iter()
        .map(|(policy, constraint)| {
            let default = match *policy {
                "reliability" => spelled(RELIABILITY, qos.reliable),
                "history" => spelled(HISTORY, qos.keep_all),
                "depth" => ParamValue::Integer(i64::from(qos.depth)),
                _ => spelled(DURABILITY, qos.transient_local),
            };
            ParamSpec {
                name: Cow::Owned(qos_override_name(topic, policy)),
                description: "QoS policy of this output's publisher (rclcpp's qos_overrides), applied at start-up",
                default,
                constraint: constraint.clone(),
                read_only: FIXED,
            }
        })
        .collect()
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
        Self::resolve_with_outputs(ros, node_fqn, &[])
    }

    /// As [`resolve`](Self::resolve), also declaring the QoS overrides of the publishers on
    /// `outputs` (fully qualified topics, each with the QoS it has unless overridden).
    pub fn resolve_with_outputs(
        ros: &RosArgs,
        node_fqn: &str,
        outputs: &[(String, Qos)],
    ) -> Result<(Self, Vec<String>), ParamError> {
        let mut specs = declared();
        for (topic, qos) in outputs {
            specs.extend(qos_specs(topic, *qos));
        }
        let mut values: Vec<ParamValue> = specs.iter().map(|s| s.default.clone()).collect();
        let mut warnings = Vec::new();
        let mut given: Vec<(String, ParamValue)> = Vec::new();
        for file in &ros.params_files {
            let from_file = load_params_file(file, node_fqn)?;
            for section in from_file.unmatched {
                warnings.push(format!(
                    "parameter file {}: section {section} matches no node named {node_fqn}; not applied",
                    file.display()
                ));
            }
            given.extend(from_file.params);
        }
        given.extend(ros.params.iter().cloned());
        for (name, value) in given {
            let Some(i) = specs.iter().position(|s| s.name == name) else {
                warnings.push(format!("parameter {name} is not declared by this node; ignored"));
                continue;
            };
            values[i] = check(&specs[i], value)?;
        }
        let params = NodeParams::from_values(&values)?;
        Ok((Self { specs, values, params }, warnings))
    }

    /// The QoS of the publisher on `topic`: `default` with the overrides declared for it.
    pub fn output_qos(&self, topic: &str, default: Qos) -> Qos {
        let get = |policy: &str| self.get(&qos_override_name(topic, policy)).map(|(_, v)| v.clone());
        // A flag is set when its policy is spelled as the set one; otherwise the default holds.
        let flag = |policy: &str, [set, _]: [&str; 2], default: bool| match get(policy) {
            Some(ParamValue::String(s)) => s == set,
            _ => default,
        };
        Qos {
            reliable: flag("reliability", RELIABILITY, default.reliable),
            keep_all: flag("history", HISTORY, default.keep_all),
            depth: match get("depth") {
                Some(ParamValue::Integer(d)) => i32::try_from(d).unwrap_or(i32::MAX),
                _ => default.depth,
            },
            transient_local: flag("durability", DURABILITY, default.transient_local),
        }
    }

    /// The typed parameters as they are now.
    pub fn params(&self) -> &NodeParams {
        &self.params
    }

    /// Every declaration.
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
            let i = self.specs.iter().position(|s| s.name == *name).ok_or_else(|| ParamError::Invalid {
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
        self.params = NodeParams::from_values(&values)?;
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
            name: spec.name.to_string(),
            expected: spec.default.type_name(),
            got: value.type_name(),
            value,
        });
    }
    let out_of = |v: String, range: String| Err(ParamError::Range { name: spec.name.to_string(), value: v, range });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Another valid value for `spec`: each candidate is tried until the parameters accept it.
    fn other_values(spec: &ParamSpec) -> Vec<ParamValue> {
        match (&spec.default, &spec.constraint) {
            (ParamValue::Bool(b), _) => vec![ParamValue::Bool(!b)],
            (ParamValue::Integer(_), Constraint::Integer { min, max }) => {
                vec![ParamValue::Integer(*min), ParamValue::Integer(*max)]
            }
            (ParamValue::Double(_), Constraint::Double { min, max }) => {
                vec![ParamValue::Double(*min), ParamValue::Double(*max)]
            }
            (ParamValue::String(_), Constraint::OneOf(allowed)) => {
                allowed.iter().map(|a| ParamValue::String(a.to_string())).collect()
            }
            (ParamValue::String(s), _) => vec![ParamValue::String(format!("{s}/other"))],
            (v, c) => panic!("{}: no test values for {v:?} within {c:?}", spec.name),
        }
    }

    /// The declaration and the reading are one definition (a name read that is not declared
    /// does not compile); this checks the other direction: every declared parameter changes
    /// the node's configuration, so none is declared and then ignored.
    #[test]
    fn every_declared_parameter_is_read() {
        let specs = declared();
        let names: std::collections::BTreeSet<&str> = specs.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names.len(), specs.len(), "parameter names are unique");
        let defaults: Vec<ParamValue> = specs.iter().map(|s| s.default.clone()).collect();
        let base = NodeParams::from_values(&defaults).expect("the defaults are valid");
        for (i, spec) in specs.iter().enumerate() {
            let changed = other_values(spec).into_iter().find_map(|v| {
                let mut values = defaults.clone();
                values[i] = check(spec, v).ok()?;
                NodeParams::from_values(&values).ok().filter(|p| *p != base)
            });
            assert!(changed.is_some(), "{} is declared but changing it changes nothing", spec.name);
        }
    }

    #[test]
    fn defaults_are_the_models_own() {
        let p = NodeParams::from_values(&declared().iter().map(|s| s.default.clone()).collect::<Vec<_>>()).unwrap();
        assert_eq!(p.post_params(), crate::superpoint::PostParams::default());
        assert_eq!(p.superpoint_url, crate::backend::tt_server::DEFAULT_SUPERPOINT_URL);
        assert_eq!(p.dust3r_url, crate::backend::tt_server::DEFAULT_DUST3R_URL);
    }
}
