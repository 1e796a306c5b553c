//! TUM RGB-D frames in `../shared/real` (fr3/long_office_household, fr1/rpy) as a test bag (colour,
//! CameraInfo, optionally the registered depth, the motion capture as a PoseStamped topic), and
//! DUSt3R replaced by the depth camera: each view's points back-projected from its registered
//! depth map with the published intrinsics, view 2 moved into camera 1's frame by the ground
//! truth (the pointmaps a perfect DUSt3R would give, with the sensor's holes and noise; the rays
//! bent by the lens where the camera has one). Each
//! pair can be given a scale of its own and noise, as DUSt3R's arbitrary per-pair scale and its
//! errors.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sp_dust3r_core::backend::cpu::pair_output;
use sp_dust3r_core::backend::{BackendError, PairOutput, PairReconstructor, PairRequest};
use sp_dust3r_core::bag::BagWriter;
use sp_dust3r_core::dust3r::{prepare, PairPrediction, Pointmap, PrepMode, PreparedView};
use sp_dust3r_core::eval::{parse_tum, pose_at, Camera as CameraFrame, StampedPose, World};
use sp_dust3r_core::geometry::lens::{Camera, Lens};
use sp_dust3r_core::geometry::{Intrinsics, Transform};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::msg::{builtin_interfaces, geometry_msgs, sensor_msgs, std_msgs, to_cdr};
use sp_dust3r_core::rng::SplitMix64;

/// One TUM sequence as the tests use it.
#[derive(Clone, Copy, Debug)]
pub struct Sequence {
    /// Its folder in `../shared/real`.
    pub dir: &'static str,
    /// TUM's published colour intrinsics: fx, fy, cx, cy.
    pub k: [f64; 4],
    /// Its plumb_bob distortion (k1 k2 p1 p2 k3).
    pub d: [f64; 5],
    /// The first frame used (earlier ones precede the motion capture).
    pub first: usize,
    /// How many frames from `first` (fewer when the sequence has fewer).
    pub len: usize,
}

/// fr3/long_office_household: 13 frames inside the motion capture, no distortion.
pub const FR3: Sequence = Sequence {
    dir: "tum_fr3_long_office_household",
    k: [535.4, 539.2, 320.1, 247.6],
    d: [0.0; 5],
    first: 3,
    len: usize::MAX,
};

/// fr1/rpy: fast handheld rotation, motion blur, a distorted lens; its first `len` frames.
pub fn rpy(len: usize) -> Sequence {
    Sequence {
        dir: "tum_fr1_rpy",
        k: [517.3, 516.5, 318.6, 255.3],
        d: [0.2624, -0.9531, -0.0054, 0.0026, 1.1633],
        first: 0,
        len,
    }
}
/// The colour topics.
pub const IMAGE: &str = "/camera/rgb/image_color";
pub const CAMERA_INFO: &str = "/camera/rgb/camera_info";
/// The registered depth topic, as RealSense names it.
pub const DEPTH: &str = "/camera/aligned_depth_to_color/image_raw";

impl Sequence {
    fn path(&self) -> PathBuf {
        super::real_dir().join(self.dir)
    }

    /// (rgb timestamp, rgb file, depth timestamp, depth file) per frame used, in time order.
    pub fn frames(&self) -> Vec<(f64, PathBuf, f64, PathBuf)> {
        let dir = self.path();
        std::fs::read_to_string(dir.join("associations.txt"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[0].parse().unwrap(), dir.join(f[1]), f[2].parse().unwrap(), dir.join(f[3]))
            })
            .skip(self.first)
            .take(self.len)
            .collect()
    }

    pub fn ground_truth(&self) -> Vec<StampedPose> {
        parse_tum(&std::fs::read_to_string(self.path().join("groundtruth.txt")).unwrap()).unwrap()
    }

    /// The colour camera.
    pub fn camera(&self) -> Camera {
        let [fx, fy, cx, cy] = self.k;
        Camera { k: Intrinsics { fx, fy, cx, cy }, lens: Lens::from_camera_info("plumb_bob", &self.d).unwrap() }
    }
}

pub fn time(t: f64) -> builtin_interfaces::Time {
    builtin_interfaces::Time { sec: t.floor() as i32, nanosec: ((t - t.floor()) * 1e9).round() as u32 }
}

fn ns(t: f64) -> u64 {
    (t * 1e9).round() as u64
}

/// A depth map in metres (0: none), 640x480.
pub fn depth_metres(path: &Path) -> Vec<f32> {
    let depth = image::open(path).unwrap().to_luma16();
    assert_eq!((depth.width(), depth.height()), (640, 480));
    depth.pixels().map(|p| p.0[0] as f32 / 5000.0).collect()
}

/// How the bag carries depth, if at all.
#[derive(Clone, Copy, PartialEq)]
pub enum DepthEncoding {
    /// 16UC1 millimetres (RealSense, Orbbec).
    Millimetres,
    /// 32FC1 metres (depth_image_proc, the TUM bags).
    Metres,
}

/// A depth image message of `metres` in `encoding`.
pub fn depth_msg(header: std_msgs::Header, metres: &[f32], encoding: DepthEncoding) -> sensor_msgs::Image {
    let (name, data, bytes): (&str, Vec<u8>, u32) = match encoding {
        DepthEncoding::Millimetres => {
            ("16UC1", metres.iter().flat_map(|z| ((z * 1000.0).round() as u16).to_le_bytes()).collect(), 2)
        }
        DepthEncoding::Metres => ("32FC1", metres.iter().flat_map(|z| z.to_le_bytes()).collect(), 4),
    };
    sensor_msgs::Image {
        header,
        height: 480,
        width: 640,
        encoding: name.into(),
        is_bigendian: 0,
        step: 640 * bytes,
        data,
    }
}

/// The ground truth inside the frames' span as PoseStamped messages.
fn write_ground_truth(w: &mut BagWriter, seq: &Sequence, t0: f64, t1: f64) {
    w.add_typed_topic::<geometry_msgs::PoseStamped>("/ground_truth").unwrap();
    for g in seq.ground_truth().iter().filter(|g| (t0..t1).contains(&g.t)) {
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(&g.pose.rotation);
        let p = &g.pose.translation;
        let msg = geometry_msgs::PoseStamped {
            header: std_msgs::Header { stamp: time(g.t), frame_id: "world".into() },
            pose: geometry_msgs::Pose {
                position: geometry_msgs::Point { x: p.x, y: p.y, z: p.z },
                orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
            },
        };
        w.write("/ground_truth", ns(g.t), ns(g.t), &to_cdr(&msg).unwrap()).unwrap();
    }
}

/// `seq`'s frames as a bag: rgb8 images, CameraInfo, the registered depth at its own stamps when
/// `depth` says how, and the ground truth.
pub fn write_bag(seq: &Sequence, path: &Path, depth: Option<DepthEncoding>) {
    let mut w = BagWriter::create(path).unwrap();
    w.add_typed_topic::<sensor_msgs::Image>(IMAGE).unwrap();
    w.add_typed_topic::<sensor_msgs::CameraInfo>(CAMERA_INFO).unwrap();
    if depth.is_some() {
        w.add_typed_topic::<sensor_msgs::Image>(DEPTH).unwrap();
    }
    let frames = seq.frames();
    write_ground_truth(&mut w, seq, frames[0].0 - 0.05, frames[frames.len() - 1].0 + 0.05);
    let k = seq.k;
    for (t, rgb, td, depth_file) in &frames {
        let frame = Frame::decode(&std::fs::read(rgb).unwrap()).unwrap();
        let header = std_msgs::Header { stamp: time(*t), frame_id: "openni_rgb_optical_frame".into() };
        if let Some(encoding) = depth {
            // The depth camera's own stamp; it is written before the colour frame when earlier.
            let h = std_msgs::Header { stamp: time(*td), ..header.clone() };
            let msg = depth_msg(h, &depth_metres(depth_file), encoding);
            w.write(DEPTH, ns(*td), ns(*td), &to_cdr(&msg).unwrap()).unwrap();
        }
        let info = sensor_msgs::CameraInfo {
            header: header.clone(),
            width: frame.width(),
            height: frame.height(),
            distortion_model: "plumb_bob".into(),
            d: seq.d.to_vec(),
            k: [k[0], 0.0, k[2], 0.0, k[1], k[3], 0.0, 0.0, 1.0],
            p: [k[0], 0.0, k[2], 0.0, 0.0, k[1], k[3], 0.0, 0.0, 0.0, 1.0, 0.0],
            ..Default::default()
        };
        let image = sensor_msgs::Image {
            header,
            height: frame.height(),
            width: frame.width(),
            encoding: "rgb8".into(),
            is_bigendian: 0,
            step: frame.width() * 3,
            data: frame.to_rgb8(),
        };
        w.write(CAMERA_INFO, ns(*t), ns(*t), &to_cdr(&info).unwrap()).unwrap();
        w.write(IMAGE, ns(*t), ns(*t), &to_cdr(&image).unwrap()).unwrap();
    }
    w.finish().unwrap();
}

/// One frame as the depth camera saw it: its colours, its depth in metres (0: none), its
/// ground-truth pose.
type DepthFrame = (Vec<u8>, Vec<f32>, Transform<World, CameraFrame>);

/// DUSt3R replaced by the depth camera (see the file's comment). Frames are recognised by
/// their pixels.
pub struct DepthPointmaps {
    frames: Vec<DepthFrame>,
    camera: Camera,
    /// Each pair's scale, in the order they are asked for (1 after the list ends).
    pub scales: Vec<f64>,
    /// Relative noise on every point's depth (standard deviation), seeded per pair.
    pub noise: f64,
    asked: Mutex<usize>,
}

impl DepthPointmaps {
    pub fn new(seq: &Sequence) -> Self {
        let gt = seq.ground_truth();
        let frames = seq
            .frames()
            .iter()
            .map(|(t, rgb, _, depth)| {
                let frame = Frame::decode(&std::fs::read(rgb).unwrap()).unwrap();
                (frame.to_rgb8(), depth_metres(depth), pose_at(&gt, *t, 0.0).expect("inside the ground truth"))
            })
            .collect();
        Self { frames, camera: seq.camera(), scales: Vec::new(), noise: 0.0, asked: Mutex::new(0) }
    }

    fn index_of(&self, frame: &Frame) -> usize {
        let rgb = frame.to_rgb8();
        self.frames.iter().position(|f| f.0 == rgb).expect("a frame of the sequence")
    }

    /// View `i`'s depth points on `view`'s grid (nearest pixel), moved into the frame of view
    /// `reference`, times `scale`, each along its ray by the noise `rng` draws; no depth: a
    /// non-finite point of confidence 1 (below every mask).
    fn pointmap(&self, view: &PreparedView, i: usize, reference: usize, scale: f64, rng: &mut SplitMix64) -> Pointmap {
        let (w, h) = (view.width as usize, view.height as usize);
        let t = self.frames[reference].2.inverse().compose(&self.frames[i].2);
        let depth = &self.frames[i].1;
        let (mut points, mut confidence) = (Vec::with_capacity(w * h * 3), Vec::with_capacity(w * h));
        for v in 0..h {
            for u in 0..w {
                let (x, y) = view.mapping.to_original(u as f64, v as f64);
                let (px, py) = (x.round(), y.round());
                let z = if (0.0..640.0).contains(&px) && (0.0..480.0).contains(&py) {
                    depth[py as usize * 640 + px as usize] as f64
                } else {
                    0.0
                };
                let ray = self.camera.undistort_pixel(x, y).filter(|_| z > 0.0);
                if let Some((u, v)) = ray {
                    let z = z * (1.0 + self.noise * rng.normal());
                    let k = &self.camera.k;
                    let p = nalgebra::Vector3::new((u - k.cx) / k.fx * z, (v - k.cy) / k.fy * z, z);
                    let q = t.apply(&p) * scale;
                    points.extend([q.x as f32, q.y as f32, q.z as f32]);
                    confidence.push(10.0);
                } else {
                    points.extend([f32::NAN; 3]);
                    confidence.push(1.0);
                }
            }
        }
        Pointmap { height: h, width: w, points, confidence }
    }
}

impl PairReconstructor for DepthPointmaps {
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        let n = {
            let mut asked = self.asked.lock().unwrap();
            *asked += 1;
            *asked - 1
        };
        let s = self.scales.get(n).copied().unwrap_or(1.0);
        let rng = &mut SplitMix64::new(0x5ca1e + n as u64);
        let (a, b) = (self.index_of(r.first), self.index_of(r.second));
        let v1 = prepare(r.first, PrepMode::Pad).unwrap();
        let v2 = prepare(r.second, PrepMode::Pad).unwrap();
        let forward =
            PairPrediction { view1: self.pointmap(&v1, a, a, s, rng), view2_in_1: self.pointmap(&v2, b, a, s, rng) };
        let swapped =
            PairPrediction { view1: self.pointmap(&v2, b, b, s, rng), view2_in_1: self.pointmap(&v1, a, b, s, rng) };
        Ok(pair_output(r, v1, v2, forward, swapped))
    }
    fn describe(&self) -> String {
        "TUM depth maps".into()
    }
    fn health(&self) -> Vec<sp_dust3r_core::backend::BackendHealth> {
        Vec::new()
    }
}

/// The TUM bag at `bag` through the replay into `out`, with the trained SuperPoint, `double` in
/// DUSt3R's place, a keyframe every 0.05 to 0.1 s of input (13 frames over 0.4 s) and `extra`
/// parameters; the whole bag is replayed.
pub fn replay_tum(
    bag: &Path,
    cameras: &sp_dust3r_core::bag::replay::CameraTopics,
    extra: Vec<(&str, sp_dust3r_core::params::args::ParamValue)>,
    double: &DepthPointmaps,
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
    let models = Models { features: &features, pairs: Some(double) };
    let cancel = sp_dust3r_core::cancel::Cancel::new();
    let (summary, stopped) = replay(&input, cameras, &mut writer, models, &params, &cancel, |_| {}).unwrap();
    writer.finish().unwrap();
    assert!(stopped.is_none());
    summary
}
