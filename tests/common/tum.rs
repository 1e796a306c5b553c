//! TUM RGB-D frames in `../shared/real` (fr3/long_office_household, fr1/rpy) as the tests use
//! them: `sp_dust3r_core::eval::tum` reads them, writes them as bags and stands in for DUSt3R
//! with their registered depth and motion capture; this names the sequences and unwraps.

use std::path::{Path, PathBuf};

use sp_dust3r_core::bag::BagWriter;
use sp_dust3r_core::eval::tum::topics;
use sp_dust3r_core::eval::tum::{orb_peer_poses, published_camera, TumSequence};
pub use sp_dust3r_core::eval::tum::{DepthEncoding, DepthOracle};
use sp_dust3r_core::eval::StampedPose;
use sp_dust3r_core::geometry::lens::Camera;
use sp_dust3r_core::msg::{builtin_interfaces, sensor_msgs, std_msgs};

/// The bags' topics.
pub const IMAGE: &str = topics::IMAGE;
pub const CAMERA_INFO: &str = topics::CAMERA_INFO;
pub const DEPTH: &str = topics::DEPTH;

/// One TUM sequence as the tests use it.
#[derive(Clone, Copy, Debug)]
pub struct Sequence {
    /// Its folder in `../shared/real`.
    pub dir: &'static str,
    /// TUM's name for its camera (`fr1`, `fr3`).
    pub camera: &'static str,
    /// The first frame used (earlier ones precede the motion capture).
    pub first: usize,
    /// How many frames from `first` (fewer when the sequence has fewer).
    pub len: usize,
    /// Every `step`-th frame of those: the spacing a node that falls behind the camera sees.
    pub step: usize,
}

/// fr3/long_office_household: 13 frames inside the motion capture, no distortion.
pub const FR3: Sequence =
    Sequence { dir: "tum_fr3_long_office_household", camera: "fr3", first: 3, len: usize::MAX, step: 1 };

/// fr1/rpy: fast handheld rotation, motion blur, a distorted lens; its first `len` frames.
pub fn rpy(len: usize) -> Sequence {
    Sequence { dir: "tum_fr1_rpy", camera: "fr1", first: 0, len, step: 1 }
}

impl Sequence {
    /// The sequence as the library reads it.
    pub fn open(&self) -> TumSequence {
        TumSequence {
            dir: super::real_dir().join(self.dir),
            camera: self.camera(),
            first: self.first,
            len: self.len,
            step: self.step,
            stamps: None,
        }
    }

    /// (rgb timestamp, rgb file, depth timestamp, depth file) per frame used, in time order.
    pub fn frames(&self) -> Vec<(f64, PathBuf, f64, PathBuf)> {
        self.open().frames().unwrap().into_iter().map(|f| (f.t, f.rgb, f.t_depth, f.depth)).collect()
    }

    pub fn ground_truth(&self) -> Vec<StampedPose> {
        self.open().ground_truth().unwrap()
    }

    /// The colour camera, as TUM published it.
    pub fn camera(&self) -> Camera {
        published_camera(self.camera).unwrap()
    }

    /// The classic sparse RGB-D odometry of issue 35's bars (tools/peers/vo_orb_opencv.py: OpenCV
    /// ORB, each frame's own depth image, solvePnPRansac frame to frame) on this sequence's frames
    /// with these colour stamps: its poses (the first frame at the origin) and how many it lost.
    pub fn orb_odometry(&self, stamps: &[f64], scratch: &Path) -> (Vec<StampedPose>, usize) {
        let seq = TumSequence { stamps: Some(stamps.to_vec()), ..self.open() };
        let out = std::process::Command::new(super::peer_python())
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/vo_orb_opencv.py"))
            .args(seq.orb_peer_args(scratch).unwrap())
            .output()
            .unwrap();
        assert!(out.status.success(), "ORB peer: {}", String::from_utf8_lossy(&out.stderr));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (orb_peer_poses(&report).unwrap(), report["lost"].as_array().unwrap().len())
    }
}

pub fn time(t: f64) -> builtin_interfaces::Time {
    sp_dust3r_core::eval::tum::ros_time(t)
}

/// A depth map in metres (0: none), 640x480.
pub fn depth_metres(path: &Path) -> Vec<f32> {
    let (depth, width) = sp_dust3r_core::eval::tum::depth_metres(path).unwrap();
    assert_eq!((width, depth.len()), (640, 640 * 480));
    depth
}

/// A 640x480 depth image message of `metres` in `encoding`.
pub fn depth_msg(header: std_msgs::Header, metres: &[f32], encoding: DepthEncoding) -> sensor_msgs::Image {
    sp_dust3r_core::eval::tum::depth_msg(header, metres, 640, encoding)
}

/// `seq`'s frames as a bag: rgb8 images, CameraInfo, the registered depth at its own stamps when
/// `depth` says how, and the ground truth.
pub fn write_bag(seq: &Sequence, path: &Path, depth: Option<DepthEncoding>) {
    sp_dust3r_core::eval::tum::write_bag(&seq.open(), path, depth).unwrap();
}

/// DUSt3R replaced by `seq`'s depth camera.
pub fn depth_oracle(seq: &Sequence) -> DepthOracle {
    DepthOracle::new(&seq.open()).unwrap()
}

/// The TUM bag at `bag` through the replay into `out`, with the trained SuperPoint, `double` in
/// DUSt3R's place, a keyframe every 0.05 to 0.1 s of input (13 frames over 0.4 s) and `extra`
/// parameters; the whole bag is replayed, each pair joining `pair_lag` frames after its keyframe.
pub fn replay_tum(
    bag: &Path,
    cameras: &sp_dust3r_core::bag::replay::CameraTopics,
    extra: Vec<(&str, sp_dust3r_core::params::args::ParamValue)>,
    double: &DepthOracle,
    pair_lag: usize,
    out: &Path,
) -> sp_dust3r_core::bag::replay::ReplaySummary {
    use sp_dust3r_core::bag::replay::{replay, Models};
    use sp_dust3r_core::params::args::{ParamValue, RosArgs};
    let mut params =
        vec![("keyframe_min_interval", ParamValue::Double(0.05)), ("keyframe_max_interval", ParamValue::Double(0.1))];
    params.extend(extra);
    let ros = RosArgs { params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), ..RosArgs::default() };
    let (params, _) = sp_dust3r_core::params::NodeParams::resolve(&ros, "/sp_dust3r").unwrap();
    let features = sp_dust3r_core::backend::cpu::CpuFeatures(
        sp_dust3r_core::superpoint::SuperPoint::load(&super::real_dir().join("superpoint")).unwrap(),
    );
    let input = vec![sp_dust3r_core::bag::McapFile::open(bag).unwrap()];
    let mut writer = BagWriter::create(out).unwrap();
    let models = Models { features: &features, pairs: Some(double), pair_lag };
    let cancel = sp_dust3r_core::cancel::Cancel::new();
    let (summary, stopped) = replay(&input, cameras, &mut writer, models, &params, &cancel, |_| {}).unwrap();
    writer.finish().unwrap();
    assert!(stopped.is_none());
    summary
}
