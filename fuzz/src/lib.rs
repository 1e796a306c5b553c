//! One fuzz target per decoder of outside bytes. Each takes the raw input and drives the
//! node's own code as far as the bytes allow (decode, then what the node does next with the
//! value), so a panic, a hang or an unbounded allocation anywhere on that path is a finding.
//! An `Err` is the expected answer to bad bytes and is ignored.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ros2_client::dds::rustdds::no_key::DeserializerAdapter;
use ros2_client::dds::rustdds::{CDRDeserializerAdapter, RepresentationIdentifier};
use ros2_client::rcl_interfaces as rcl;
use serde::de::DeserializeOwned;
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::msg::{from_cdr, rosgraph_msgs, sensor_msgs, tf2_msgs};
use sp_dust3r_core::msg::tf_static;
use sp_dust3r_core::params::{self, args};
use sp_dust3r_node::param_services;

/// A target: its name (the corpus folder, the command-line word) and its entry point.
pub struct Target {
    /// Name.
    pub name: &'static str,
    /// What it decodes, for `--list`.
    pub what: &'static str,
    /// Entry point.
    pub run: fn(&[u8]),
}

/// Every target, in the order tools/fuzz.sh runs them.
pub const TARGETS: &[Target] = &[
    Target { name: "cdr_image", what: "sensor_msgs/Image CDR, then the frame checks", run: cdr_image },
    Target { name: "cdr_compressed", what: "sensor_msgs/CompressedImage CDR, then PNG/JPEG", run: cdr_compressed },
    Target { name: "cdr_camera_info", what: "sensor_msgs/CameraInfo CDR, then its checks", run: cdr_camera_info },
    Target { name: "cdr_clock", what: "rosgraph_msgs/Clock CDR", run: cdr_clock },
    Target { name: "cdr_tf_static", what: "tf2_msgs/TFMessage CDR, then the mount lookup", run: cdr_tf_static },
    Target {
        name: "cdr_pointcloud",
        what: "sensor_msgs/PointCloud2 CDR as --export-ply reads a bag's clouds, then the PLY",
        run: cdr_pointcloud,
    },
    Target { name: "param_request", what: "the six parameter-service requests, answered", run: param_request },
    Target { name: "image_raw", what: "raw sensor_msgs/Image buffers in every encoding", run: image_raw },
    Target { name: "image_png", what: "PNG decoding", run: image_encoded },
    Target { name: "image_jpeg", what: "JPEG decoding", run: image_encoded },
    Target { name: "mcap", what: "an MCAP bag read as replay reads it", run: mcap },
    Target { name: "safetensors", what: "a safetensors file's header and tensors", run: safetensors },
    Target {
        name: "superpoint_checkpoint",
        what: "config.json + model.safetensors for SuperPoint",
        run: superpoint_checkpoint,
    },
    Target { name: "dust3r_checkpoint", what: "config.json + model.safetensors for DUSt3R", run: dust3r_checkpoint },
    Target { name: "tt_superpoint", what: "a superpoint-p150 answer (JSON, base64 NPZ, float16)", run: tt_superpoint },
    Target { name: "tt_dust3r", what: "a mast3r-blackhole answer (JSON, base64 NPZ, float16)", run: tt_dust3r },
    Target { name: "npz", what: "NPZ archives and NPY arrays", run: npz },
    Target { name: "params_yaml", what: "a --params-file YAML, resolved into the node's parameters", run: params_yaml },
    Target { name: "ros_args", what: "--ros-args command lines (NUL-separated), resolved", run: ros_args },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A message as the live node reads it (rustdds's CDR adapter, the encapsulation header
/// choosing the representation, as its DataReader does) and as replay reads it (our
/// `from_cdr`): both decoders see the same bytes.
fn cdr<T: DeserializeOwned>(data: &[u8]) -> [Option<T>; 2] {
    let live = data.get(..4).and_then(|h| RepresentationIdentifier::from_bytes(&h[..2]).ok()).and_then(|id| {
        // The reader drops samples in representations the adapter does not list.
        if !CDRDeserializerAdapter::<T>::supported_encodings().contains(&id) {
            return None;
        }
        CDRDeserializerAdapter::<T>::from_bytes(&data[4..], id).ok()
    });
    [live, from_cdr::<T>(data).ok()]
}

/// What the pipeline does first with a frame: SuperPoint's grey plane, DUSt3R's colours.
fn use_frame(frame: &Frame) {
    let luma = frame.to_luma();
    std::hint::black_box(&luma);
    let rgb = frame.to_rgb8();
    std::hint::black_box(&rgb);
}

fn cdr_image(data: &[u8]) {
    for m in cdr::<sensor_msgs::Image>(data).into_iter().flatten() {
        if let Ok(f) = Frame::from_raw(&m.encoding, m.width, m.height, m.step as usize, m.is_bigendian != 0, m.data) {
            use_frame(&f);
        }
    }
}

fn cdr_compressed(data: &[u8]) {
    for m in cdr::<sensor_msgs::CompressedImage>(data).into_iter().flatten() {
        if let Ok(f) = Frame::decode(&m.data) {
            use_frame(&f);
        }
    }
}

fn cdr_camera_info(data: &[u8]) {
    for info in cdr::<sensor_msgs::CameraInfo>(data).into_iter().flatten() {
        let _ = sp_dust3r_core::outputs::check_camera_info(&info);
    }
}

fn cdr_clock(data: &[u8]) {
    for c in cdr::<rosgraph_msgs::Clock>(data).into_iter().flatten() {
        std::hint::black_box(c.clock.seconds());
    }
}

/// A bag's cloud as `replay --export-ply` reads it: its points by its field layout (any offsets,
/// steps, endianness and sizes), then written as PLY into memory.
fn cdr_pointcloud(data: &[u8]) {
    if let Ok(msg) = from_cdr::<sensor_msgs::PointCloud2>(data) {
        if let Ok(points) = sp_dust3r_core::msg::convert::cloud_points_of(&msg) {
            let _ = sp_dust3r_core::ply::write_ply(&mut Vec::new(), points, &[msg.header.frame_id]);
        }
    }
}

/// /tf_static as the node reads it with base_frame: every transform kept, then the chain looked
/// up between every pair of frames named (loops, missing parents and bad quaternions included).
fn cdr_tf_static(data: &[u8]) {
    for m in cdr::<tf2_msgs::TFMessage>(data).into_iter().flatten() {
        let mut tree = tf_static::StaticTransforms::default();
        tree.insert(&m);
        let names: Vec<&str> = m
            .transforms
            .iter()
            .flat_map(|t| [t.header.frame_id.as_str(), t.child_frame_id.as_str()])
            .take(16)
            .collect();
        for a in &names {
            for b in &names {
                let t: Option<sp_dust3r_core::geometry::Transform<tf_static::TreeFrame, tf_static::TreeFrame>> =
                    tree.lookup(a, b);
                std::hint::black_box(t);
            }
        }
    }
}

/// The node's parameters with their defaults, made once.
fn store() -> params::ParamStore {
    static STORE: OnceLock<params::ParamStore> = OnceLock::new();
    STORE
        .get_or_init(|| match params::ParamStore::resolve(&args::RosArgs::default(), "/sp_dust3r") {
            Ok((s, _)) => s,
            Err(e) => panic!("the default parameters do not resolve: {e}"),
        })
        .clone()
}

/// The first byte picks the service; the rest is its request's CDR.
fn param_request(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else { return };
    let mut s = store();
    match which % 6 {
        0 => cdr::<rcl::ListParametersRequest>(body).into_iter().flatten().for_each(|r| {
            param_services::list(Some(&s), &r.prefixes);
        }),
        1 => cdr::<rcl::GetParametersRequest>(body).into_iter().flatten().for_each(|r| {
            param_services::values(Some(&s), &r.names);
        }),
        2 => cdr::<rcl::GetParameterTypesRequest>(body).into_iter().flatten().for_each(|r| {
            param_services::types(Some(&s), &r.names);
        }),
        3 => cdr::<rcl::DescribeParametersRequest>(body).into_iter().flatten().for_each(|r| {
            param_services::descriptors(Some(&s), &r.names);
        }),
        // set and set_atomically carry the same request type; set applies one at a time.
        4 => cdr::<rcl::SetParametersRequest>(body).into_iter().flatten().for_each(|r| {
            for p in &r.parameter {
                if let Ok(c) = param_services::requested_changes(std::slice::from_ref(p)) {
                    let _ = s.set(&c);
                }
            }
        }),
        _ => cdr::<rcl::SetParametersRequest>(body).into_iter().flatten().for_each(|r| {
            if let Ok(c) = param_services::requested_changes(&r.parameter) {
                let _ = s.set(&c);
            }
        }),
    }
}

/// The encodings `image_raw` picks from: every one the node knows and two it does not.
pub const ENCODINGS: &[&str] = &[
    "mono8",
    "8UC1",
    "mono16",
    "16UC1",
    "rgb8",
    "bgr8",
    "8UC3",
    "rgba8",
    "bgra8",
    "8UC4",
    "yuv422",
    "uyvy",
    "yuv422_yuy2",
    "yuyv",
    "bayer_rggb8",
    "bayer_bggr8",
    "bayer_gbrg8",
    "bayer_grbg8",
    "32FC1",
    "",
];

/// Bytes 0..8 are the header fields (encoding index, width and height and step as u16 LE,
/// the big-endian flag); the rest is the pixel buffer.
fn image_raw(data: &[u8]) {
    let Some((head, pixels)) = data.split_at_checked(8) else { return };
    let u16_at = |i: usize| u16::from_le_bytes([head[i], head[i + 1]]);
    let encoding = ENCODINGS[head[0] as usize % ENCODINGS.len()];
    let (width, height, step) = (u16_at(1) as u32, u16_at(3) as u32, u16_at(5) as usize);
    if let Ok(f) = Frame::from_raw(encoding, width, height, step, head[7] & 1 == 1, pixels.to_vec()) {
        use_frame(&f);
    }
}

fn image_encoded(data: &[u8]) {
    if let Ok(f) = Frame::decode(data) {
        use_frame(&f);
    }
}

/// A scratch folder of this process's (the loaders read files, as the node does).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("sp_dust3r_fuzz.{}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            panic!("cannot create the scratch folder {}: {e}", dir.display());
        }
        dir
    })
}

/// Writes `bytes` to `name` in the scratch folder and returns its path.
fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    if let Err(e) = std::fs::write(&path, bytes) {
        panic!("cannot write {}: {e}", path.display());
    }
    path
}

/// Most messages one input is read for (the reader is lazy; this bounds a run's time only).
const MAX_MESSAGES: usize = 10_000;

fn mcap(data: &[u8]) {
    let path = scratch_file("bag.mcap", data);
    let Ok(bag) = sp_dust3r_core::bag::McapFile::open(&path) else { return };
    let _ = bag.topics();
    let _ = bag.message_counts();
    for m in bag.messages().take(MAX_MESSAGES).flatten() {
        if m.ros_type.ends_with("/Image") || m.ros_type.ends_with("/CompressedImage") {
            let compressed = m.ros_type.ends_with("/CompressedImage");
            if let Ok(msg) = sp_dust3r_core::bag::replay::camera_image(&m.data, compressed) {
                if let (_, Ok(f)) = msg.decode() {
                    use_frame(&f);
                }
            }
        } else if m.ros_type.ends_with("/CameraInfo") {
            if let Ok(info) = from_cdr::<sensor_msgs::CameraInfo>(&m.data) {
                let _ = sp_dust3r_core::outputs::check_camera_info(&info);
            }
        }
    }
}

fn safetensors(data: &[u8]) {
    let path = scratch_file("model.safetensors", data);
    let Ok(file) = sp_dust3r_core::weights::WeightFile::open(&path) else { return };
    // Every tensor the header lists, with its own shape and with a wrong one.
    let Ok((_, meta)) = safetensors::SafeTensors::read_metadata(data) else { return };
    for (name, info) in meta.tensors() {
        let _ = file.f32_tensor(&[name.as_str()], &info.shape);
        let _ = file.f32_tensor(&[name.as_str()], &[info.shape.iter().product::<usize>().wrapping_add(1)]);
    }
}

/// `config.json` (its length in the first two bytes, LE) and `model.safetensors` (the rest)
/// in a fresh folder.
fn checkpoint(data: &[u8]) -> Option<PathBuf> {
    let (len, rest) = data.split_at_checked(2)?;
    let (config, weights) = rest.split_at_checked(u16::from_le_bytes([len[0], len[1]]) as usize)?;
    let dir = scratch().join("checkpoint");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        panic!("cannot create {}: {e}", dir.display());
    }
    scratch_file("checkpoint/config.json", config);
    scratch_file("checkpoint/model.safetensors", weights);
    Some(dir)
}

fn superpoint_checkpoint(data: &[u8]) {
    if let Some(dir) = checkpoint(data) {
        let _ = sp_dust3r_core::superpoint::SuperPoint::load(&dir);
    }
}

fn dust3r_checkpoint(data: &[u8]) {
    if let Some(dir) = checkpoint(data) {
        let _ = sp_dust3r_core::dust3r::Dust3r::load(&dir);
    }
}

/// The server URL the answers name in their errors.
const URL: &str = "http://127.0.0.1:8000";

/// The frame the tt targets' answers are for (what the node sent).
pub const FRAME_SIZE: (u32, u32) = (40, 24);

fn test_frame() -> &'static Frame {
    static FRAME: OnceLock<Frame> = OnceLock::new();
    FRAME.get_or_init(|| {
        let (w, h) = FRAME_SIZE;
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
        match Frame::from_raw("rgb8", w, h, w as usize * 3, false, rgb) {
            Ok(f) => f,
            Err(e) => panic!("the test frame is invalid: {e}"),
        }
    })
}

fn tt_superpoint(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let (w, h) = FRAME_SIZE;
    let _ = sp_dust3r_core::backend::tt_server::parse_superpoint(URL, &v, w, h);
}

fn tt_dust3r(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let f = test_frame();
    let _ = sp_dust3r_core::backend::tt_server::parse_dust3r(URL, &v, f, f);
}

/// The array names the servers' answers use.
pub const NPZ_NAMES: &[&str] = &["descriptors", "pts3d1", "pts3d2", "conf1", "conf2"];

fn npz(data: &[u8]) {
    use sp_dust3r_core::backend::npz;
    for name in NPZ_NAMES {
        let _ = npz::read_array(data, name);
    }
    let _ = npz::parse_npy(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = npz::decode_base64(text);
    }
}

/// The node's fully qualified name the YAML's sections are matched against.
const FQN: &str = "/camera/sp_dust3r";

fn params_yaml(data: &[u8]) {
    let path = scratch_file("params.yaml", data);
    if args::load_params_file(&path, FQN).is_ok() {
        let ros = args::RosArgs { params_files: vec![path], ..Default::default() };
        let _ = params::ParamStore::resolve(&ros, FQN);
    }
}

fn ros_args(data: &[u8]) {
    let words = data.split(|&b| b == 0).map(|w| String::from_utf8_lossy(w).into_owned());
    let Ok((_, ros)) = args::split_ros_args(std::iter::once("sp_dust3r".to_string()).chain(words)) else { return };
    let _ = ros.log_filter();
    let _ = ros.bad_log_level();
    // Parameter files are params_yaml's; this target never reads the machine's files.
    if ros.params_files.is_empty() {
        let _ = params::ParamStore::resolve(&ros, FQN);
    }
}
