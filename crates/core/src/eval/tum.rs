//! The TUM RGB-D benchmark's sequences (a folder with `associations.txt`, `groundtruth.txt`,
//! `rgb/` and `depth/`, as its tools lay them out) as bags the replay reads, and DUSt3R replaced
//! by the sequence's own depth camera: each view's points back-projected from its registered
//! depth with the camera's intrinsics (rays through its lens), view 2 moved into view 1's frame
//! by the motion capture. Those are the pointmaps a perfect DUSt3R would give, with the sensor's
//! holes and noise, so what is measured with them is tracking alone. Each pair can get a scale of
//! its own (DUSt3R's is arbitrary per pair) and depth noise.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{parse_tum, pose_at, Camera as CameraFrame, EvalError, StampedPose, World};
use crate::backend::cpu::pair_output;
use crate::backend::{BackendError, BackendHealth, PairOutput, PairReconstructor, PairRequest};
use crate::bag::{BagError, BagWriter};
use crate::dust3r::{prepare, Checkpoint, PairPrediction, Pointmap, PrepMode, PreparedView};
use crate::geometry::lens::{Camera, Lens, LensError};
use crate::geometry::{Intrinsics, Transform};
use crate::image::Frame;
use crate::msg::{builtin_interfaces, geometry_msgs, sensor_msgs, std_msgs, to_cdr};
use crate::rng::SplitMix64;

/// Why a sequence cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TumError {
    /// A file cannot be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file cannot be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of `associations.txt` is not `t_rgb rgb_file t_depth depth_file`.
    #[error("{path} line {line}: expected `t_rgb rgb_file t_depth depth_file`")]
    Association {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
    },
    /// An image does not decode, or a depth map is not 16-bit.
    #[error("cannot decode {path}: {reason}")]
    Image {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The ground truth does not parse or does not cover a frame.
    #[error(transparent)]
    GroundTruth(#[from] EvalError),
    /// A frame's stamp is outside the ground truth.
    #[error("frame at {0:.6} s is outside the ground truth")]
    Uncovered(f64),
    /// `intrinsics.json` is not as expected, or its lens is unknown.
    #[error("intrinsics {path}: {reason}")]
    Intrinsics {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The lens.
    #[error(transparent)]
    Lens(#[from] LensError),
    /// The bag cannot be written.
    #[error(transparent)]
    Bag(#[from] BagError),
    /// A message cannot be encoded.
    #[error("cannot encode a message: {0}")]
    Encode(String),
    /// The classic odometry peer takes plumb_bob (or no) distortion only.
    #[error("the ORB odometry peer knows plumb_bob lenses only, not {0:?}")]
    PeerLens(Lens),
    /// The peer printed no poses.
    #[error("the ORB odometry peer printed no `poses`")]
    PeerNoPoses,
    /// The peer's poses do not read as a TUM trajectory.
    #[error("the ORB odometry peer's poses")]
    PeerPoses(#[source] EvalError),
}

/// The poses the ORB odometry peer printed (its JSON's `poses`, rows `t tx ty tz qx qy qz qw`),
/// read as a TUM trajectory: a malformed row is an error.
pub fn orb_peer_poses(report: &serde_json::Value) -> Result<Vec<StampedPose>, TumError> {
    let rows = report["poses"].as_array().ok_or(TumError::PeerNoPoses)?.iter().map(|p| {
        let row: Vec<String> = p.as_array().into_iter().flatten().map(ToString::to_string).collect();
        row.join(" ") + "\n"
    });
    parse_tum(&rows.collect::<String>()).map_err(TumError::PeerPoses)
}

/// The registered depth's scale: metres = value / 5000 (TUM's convention).
pub const DEPTH_SCALE: f64 = 5000.0;

/// The colour camera of TUM's three Kinects as TUM published them (`fr1`, `fr2`, `fr3`;
/// fr3's images are already undistorted).
pub fn published_camera(name: &str) -> Option<Camera> {
    let (k, d): ([f64; 4], [f64; 5]) = match name {
        "fr1" => ([517.3, 516.5, 318.6, 255.3], [0.2624, -0.9531, -0.0054, 0.0026, 1.1633]),
        "fr2" => ([520.9, 521.0, 325.1, 249.7], [0.2312, -0.7849, -0.0033, -0.0001, 0.9172]),
        "fr3" => ([535.4, 539.2, 320.1, 247.6], [0.0; 5]),
        _ => return None,
    };
    let lens = Lens::from_camera_info("plumb_bob", &d).ok()?;
    Some(Camera { k: Intrinsics { fx: k[0], fy: k[1], cx: k[2], cy: k[3] }, lens })
}

/// The camera of an `intrinsics.json` (`fx`, `fy`, `cx`, `cy`, `dist`: plumb_bob k1 k2 p1 p2 k3).
pub fn camera_from_json(path: &Path) -> Result<Camera, TumError> {
    let text = read(path)?;
    let bad = |reason: String| TumError::Intrinsics { path: path.to_path_buf(), reason };
    let v: serde_json::Value = serde_json::from_str(&String::from_utf8_lossy(&text)).map_err(|e| bad(e.to_string()))?;
    let num = |k: &str| v[k].as_f64().ok_or_else(|| bad(format!("no number {k}")));
    let d: Vec<f64> = match v["dist"].as_array() {
        Some(a) => a
            .iter()
            .map(|c| c.as_f64().ok_or_else(|| bad("dist holds a non-number".into())))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let lens = if d.is_empty() { Lens::Pinhole } else { Lens::from_camera_info("plumb_bob", &d)? };
    Ok(Camera { k: Intrinsics { fx: num("fx")?, fy: num("fy")?, cx: num("cx")?, cy: num("cy")? }, lens })
}

fn read(path: &Path) -> Result<Vec<u8>, TumError> {
    std::fs::read(path).map_err(|source| TumError::Read { path: path.to_path_buf(), source })
}

/// One frame: its colour stamp and file, its depth's stamp and file.
#[derive(Clone, Debug, PartialEq)]
pub struct TumFrame {
    /// The colour image's stamp, seconds.
    pub t: f64,
    /// The colour image.
    pub rgb: PathBuf,
    /// The depth image's own stamp.
    pub t_depth: f64,
    /// The registered depth image.
    pub depth: PathBuf,
}

/// A TUM sequence, or a stretch of it.
#[derive(Clone, Debug)]
pub struct TumSequence {
    /// Its folder.
    pub dir: PathBuf,
    /// Its colour camera.
    pub camera: Camera,
    /// The first frame used (of `associations.txt`'s).
    pub first: usize,
    /// How many frames from `first` at most.
    pub len: usize,
    /// Every `step`-th frame from `first` (1: all; more: the spacing a node that cannot keep up
    /// with the camera sees).
    pub step: usize,
    /// Of those, only the frames with these colour stamps (seconds, to half a millisecond): the
    /// ones a live node took.
    pub stamps: Option<Vec<f64>>,
}

impl TumSequence {
    /// Its frames in time order.
    pub fn frames(&self) -> Result<Vec<TumFrame>, TumError> {
        let path = self.dir.join("associations.txt");
        let text = String::from_utf8_lossy(&read(&path)?).into_owned();
        let mut frames = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let bad = || TumError::Association { path: path.clone(), line: i + 1 };
            let f: Vec<&str> = line.split_whitespace().collect();
            let [t, rgb, t_depth, depth] = f[..] else { return Err(bad()) };
            let (t, t_depth) = (t.parse().map_err(|_| bad())?, t_depth.parse().map_err(|_| bad())?);
            frames.push(TumFrame { t, rgb: self.dir.join(rgb), t_depth, depth: self.dir.join(depth) });
        }
        let picked = frames.into_iter().skip(self.first).step_by(self.step.max(1)).take(self.len);
        Ok(match &self.stamps {
            Some(stamps) => picked.filter(|f| stamps.iter().any(|s| (s - f.t).abs() < 5e-4)).collect(),
            None => picked.collect(),
        })
    }

    /// The arguments of the classic RGB-D odometry the tracking is compared against
    /// (`tools/peers/vo_orb_opencv.py`) for these frames; the stamps, when set, go in a file in
    /// `scratch` that the arguments name.
    pub fn orb_peer_args(&self, scratch: &Path) -> Result<Vec<String>, TumError> {
        let d = match self.camera.lens {
            Lens::PlumbBob(d) => d,
            Lens::Pinhole => [0.0; 5],
            other => return Err(TumError::PeerLens(other)),
        };
        let k = &self.camera.k;
        let mut a: Vec<String> = vec!["--tum".into(), self.dir.display().to_string(), "--k".into()];
        a.extend([k.fx, k.fy, k.cx, k.cy].map(|v| v.to_string()));
        a.push("--dist".into());
        a.extend(d.map(|v| v.to_string()));
        a.extend(["--first", &self.first.to_string(), "--frames", &self.len.to_string()].map(String::from));
        a.extend(["--every".into(), self.step.to_string()]);
        if let Some(stamps) = &self.stamps {
            let list = scratch.join("orb_peer_stamps.txt");
            let text: String = stamps.iter().map(|t| format!("{t:.6}\n")).collect();
            std::fs::write(&list, text).map_err(|source| TumError::Write { path: list.clone(), source })?;
            a.extend(["--stamps".into(), list.display().to_string()]);
        }
        Ok(a)
    }

    /// The motion capture (camera-to-world poses of the colour camera).
    pub fn ground_truth(&self) -> Result<Vec<StampedPose>, TumError> {
        let text = read(&self.dir.join("groundtruth.txt"))?;
        Ok(parse_tum(&String::from_utf8_lossy(&text))?)
    }
}

/// A registered depth image in metres (0: none), row-major, with its width.
pub fn depth_metres(path: &Path) -> Result<(Vec<f32>, u32), TumError> {
    let bad = |reason: String| TumError::Image { path: path.to_path_buf(), reason };
    let image = image::load_from_memory(&read(path)?).map_err(|e| bad(e.to_string()))?;
    let image::DynamicImage::ImageLuma16(depth) = image else {
        return Err(bad("not a 16-bit single-channel image".into()));
    };
    let width = depth.width();
    Ok((depth.pixels().map(|p| (p.0[0] as f64 / DEPTH_SCALE) as f32).collect(), width))
}

fn decode(path: &Path) -> Result<Frame, TumError> {
    Frame::decode(&read(path)?).map_err(|e| TumError::Image { path: path.to_path_buf(), reason: e.to_string() })
}

/// A stamp in seconds as a ROS time.
pub fn ros_time(t: f64) -> builtin_interfaces::Time {
    builtin_interfaces::Time {
        sec: t.floor() as i32,
        nanosec: (((t - t.floor()) * 1e9).round() as u32).min(999_999_999),
    }
}

fn ns(t: f64) -> u64 {
    (t * 1e9).round() as u64
}

/// How a bag carries depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepthEncoding {
    /// 16UC1 millimetres (RealSense, Orbbec).
    Millimetres,
    /// 32FC1 metres (depth_image_proc, the TUM bags).
    Metres,
}

/// A depth image message of `metres` (`width` wide) in `encoding`.
pub fn depth_msg(header: std_msgs::Header, metres: &[f32], width: u32, encoding: DepthEncoding) -> sensor_msgs::Image {
    let (name, data, bytes): (&str, Vec<u8>, u32) = match encoding {
        DepthEncoding::Millimetres => {
            ("16UC1", metres.iter().flat_map(|z| ((z * 1000.0).round() as u16).to_le_bytes()).collect(), 2)
        }
        DepthEncoding::Metres => ("32FC1", metres.iter().flat_map(|z| z.to_le_bytes()).collect(), 4),
    };
    let height = u32::try_from(metres.len()).unwrap_or(u32::MAX) / width.max(1);
    sensor_msgs::Image { header, height, width, encoding: name.into(), is_bigendian: 0, step: width * bytes, data }
}

/// The topics a sequence's bag has.
pub mod topics {
    /// Colour (rgb8).
    pub const IMAGE: &str = "/camera/rgb/image_color";
    /// The colour camera's CameraInfo.
    pub const CAMERA_INFO: &str = "/camera/rgb/camera_info";
    /// The registered depth, as RealSense names it.
    pub const DEPTH: &str = "/camera/aligned_depth_to_color/image_raw";
    /// The motion capture (geometry_msgs/PoseStamped in `world`).
    pub const GROUND_TRUTH: &str = "/ground_truth";
}

fn encode<M: serde::Serialize>(m: &M) -> Result<Vec<u8>, TumError> {
    to_cdr(m).map_err(|e| TumError::Encode(e.to_string()))
}

/// The ground truth inside [t0, t1) as PoseStamped messages.
fn write_ground_truth(w: &mut BagWriter, gt: &[StampedPose], t0: f64, t1: f64) -> Result<(), TumError> {
    w.add_typed_topic::<geometry_msgs::PoseStamped>(topics::GROUND_TRUTH)?;
    for g in gt.iter().filter(|g| (t0..t1).contains(&g.t)) {
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(&g.pose.rotation);
        let p = &g.pose.translation;
        let msg = geometry_msgs::PoseStamped {
            header: std_msgs::Header { stamp: ros_time(g.t), frame_id: "world".into() },
            pose: geometry_msgs::Pose {
                position: geometry_msgs::Point { x: p.x, y: p.y, z: p.z },
                orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
            },
        };
        w.write(topics::GROUND_TRUTH, ns(g.t), ns(g.t), &encode(&msg)?)?;
    }
    Ok(())
}

/// The sequence's CameraInfo for a frame (plumb_bob; zeros for a pinhole).
fn camera_info(camera: &Camera, header: std_msgs::Header, width: u32, height: u32) -> sensor_msgs::CameraInfo {
    let k = &camera.k;
    let d = match camera.lens {
        Lens::PlumbBob(d) => d.to_vec(),
        _ => vec![0.0; 5],
    };
    sensor_msgs::CameraInfo {
        header,
        width,
        height,
        distortion_model: "plumb_bob".into(),
        d,
        k: [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0],
        p: [k.fx, 0.0, k.cx, 0.0, 0.0, k.fy, k.cy, 0.0, 0.0, 0.0, 1.0, 0.0],
        ..Default::default()
    }
}

/// The sequence as a bag: rgb8 images with CameraInfo (frame `openni_rgb_optical_frame`), the
/// registered depth at its own stamps when `depth` says how, and the ground truth.
pub fn write_bag(seq: &TumSequence, path: &Path, depth: Option<DepthEncoding>) -> Result<(), TumError> {
    let mut w = BagWriter::create(path)?;
    w.add_typed_topic::<sensor_msgs::Image>(topics::IMAGE)?;
    w.add_typed_topic::<sensor_msgs::CameraInfo>(topics::CAMERA_INFO)?;
    if depth.is_some() {
        w.add_typed_topic::<sensor_msgs::Image>(topics::DEPTH)?;
    }
    let frames = seq.frames()?;
    if let (Some(a), Some(b)) = (frames.first(), frames.last()) {
        write_ground_truth(&mut w, &seq.ground_truth()?, a.t - 0.05, b.t + 0.05)?;
    }
    for f in &frames {
        let frame = decode(&f.rgb)?;
        let header = std_msgs::Header { stamp: ros_time(f.t), frame_id: "openni_rgb_optical_frame".into() };
        if let Some(encoding) = depth {
            let (metres, width) = depth_metres(&f.depth)?;
            let msg =
                depth_msg(std_msgs::Header { stamp: ros_time(f.t_depth), ..header.clone() }, &metres, width, encoding);
            w.write(topics::DEPTH, ns(f.t_depth), ns(f.t_depth), &encode(&msg)?)?;
        }
        let info = camera_info(&seq.camera, header.clone(), frame.width(), frame.height());
        let image = sensor_msgs::Image {
            header,
            height: frame.height(),
            width: frame.width(),
            encoding: "rgb8".into(),
            is_bigendian: 0,
            step: frame.width() * 3,
            data: frame.to_rgb8(),
        };
        w.write(topics::CAMERA_INFO, ns(f.t), ns(f.t), &encode(&info)?)?;
        w.write(topics::IMAGE, ns(f.t), ns(f.t), &encode(&image)?)?;
    }
    w.finish()?;
    Ok(())
}

/// One frame as the depth camera saw it: colours, depth in metres (0: none) and its width, pose.
struct DepthFrame {
    rgb: Vec<u8>,
    depth: Vec<f32>,
    width: usize,
    pose: Transform<World, CameraFrame>,
}

/// DUSt3R replaced by the depth camera (see the module's comment). Frames are recognised by
/// their pixels.
pub struct DepthOracle {
    frames: Vec<DepthFrame>,
    camera: Camera,
    /// Each pair's scale, in the order they are asked for (1 after the list ends).
    pub scales: Vec<f64>,
    /// Relative noise on every point's depth (standard deviation), seeded per pair.
    pub noise: f64,
    asked: Mutex<usize>,
}

impl DepthOracle {
    /// The oracle of `seq`'s frames (all decoded now).
    pub fn new(seq: &TumSequence) -> Result<Self, TumError> {
        let gt = seq.ground_truth()?;
        let mut frames = Vec::new();
        for f in seq.frames()? {
            let (depth, width) = depth_metres(&f.depth)?;
            let pose = pose_at(&gt, f.t, 0.0).ok_or(TumError::Uncovered(f.t))?;
            frames.push(DepthFrame { rgb: decode(&f.rgb)?.to_rgb8(), depth, width: width as usize, pose });
        }
        Ok(Self { frames, camera: seq.camera, scales: Vec::new(), noise: 0.0, asked: Mutex::new(0) })
    }

    /// Per-pair scales drawn log-uniformly in [0.2, 5] from `seed`, for `n` pairs.
    pub fn arbitrary_scales(n: usize, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| 5f64.powf(2.0 * rng.next_f64() - 1.0)).collect()
    }

    /// Frame `i`'s own pointmap on `view`'s grid at the metric scale (as a keyframe holds it),
    /// with `noise` as set.
    pub fn own_pointmap(&self, view: &PreparedView, i: usize) -> Pointmap {
        self.pointmap(view, i, i, 1.0, &mut SplitMix64::new(0))
    }

    fn index_of(&self, frame: &Frame) -> Result<usize, BackendError> {
        let rgb = frame.to_rgb8();
        self.frames
            .iter()
            .position(|f| f.rgb == rgb)
            .ok_or_else(|| BackendError::StandIn("the depth oracle was given a frame of another sequence".into()))
    }

    /// Frame `i`'s depth points on `view`'s grid (nearest pixel), moved into frame `reference`'s
    /// camera, times `scale`, each along its ray by the noise `rng` draws; no depth: a
    /// non-finite point of confidence 1 (below every mask).
    fn pointmap(&self, view: &PreparedView, i: usize, reference: usize, scale: f64, rng: &mut SplitMix64) -> Pointmap {
        let (w, h) = (view.width as usize, view.height as usize);
        let t = self.frames[reference].pose.inverse().compose(&self.frames[i].pose);
        let f = &self.frames[i];
        let rows = f.depth.len() / f.width.max(1);
        let (mut points, mut confidence) = (Vec::with_capacity(w * h * 3), Vec::with_capacity(w * h));
        for v in 0..h {
            for u in 0..w {
                let (x, y) = view.mapping.to_original(u as f64, v as f64);
                let (px, py) = (x.round(), y.round());
                let inside = px >= 0.0 && py >= 0.0 && (px as usize) < f.width && (py as usize) < rows;
                let z = if inside { f.depth[py as usize * f.width + px as usize] as f64 } else { 0.0 };
                match self.camera.undistort_pixel(x, y).filter(|_| z > 0.0) {
                    Some((u, v)) => {
                        let z = z * (1.0 + self.noise * rng.normal());
                        let q = t.apply(&(self.camera.k.ray(u, v) * z)) * scale;
                        points.extend([q.x as f32, q.y as f32, q.z as f32]);
                        confidence.push(10.0);
                    }
                    None => {
                        points.extend([f32::NAN; 3]);
                        confidence.push(1.0);
                    }
                }
            }
        }
        Pointmap { height: h, width: w, points, confidence }
    }
}

impl PairReconstructor for DepthOracle {
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        let n = {
            let mut asked = self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *asked += 1;
            *asked - 1
        };
        let s = self.scales.get(n).copied().unwrap_or(1.0);
        let rng = &mut SplitMix64::new(0x5ca1e + n as u64);
        let (a, b) = (self.index_of(r.first)?, self.index_of(r.second)?);
        let size = Checkpoint::default().input_size();
        let v1 = prepare(r.first, PrepMode::Pad, size).map_err(|e| BackendError::StandIn(e.to_string()))?;
        let v2 = prepare(r.second, PrepMode::Pad, size).map_err(|e| BackendError::StandIn(e.to_string()))?;
        let forward =
            PairPrediction { view1: self.pointmap(&v1, a, a, s, rng), view2_in_1: self.pointmap(&v2, b, a, s, rng) };
        let swapped =
            PairPrediction { view1: self.pointmap(&v2, b, b, s, rng), view2_in_1: self.pointmap(&v1, a, b, s, rng) };
        Ok(pair_output(r, v1, v2, forward, swapped))
    }
    fn describe(&self) -> String {
        "TUM depth oracle".into()
    }
    fn health(&self) -> Vec<BackendHealth> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_pick_the_frames_a_live_node_took_among_those_first_and_step_pick() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String =
            (0..8).map(|i| format!("{0}.033{i} rgb/{i}.png {0}.030{i} depth/{i}.png\n", 100 + i)).collect();
        std::fs::write(dir.path().join("associations.txt"), format!("# colour, depth\n{lines}")).unwrap();
        let seq = |step, stamps| TumSequence {
            dir: dir.path().to_path_buf(),
            camera: published_camera("fr1").unwrap(),
            first: 1,
            len: usize::MAX,
            step,
            stamps,
        };
        let times = |s: TumSequence| s.frames().unwrap().iter().map(|f| f.t).collect::<Vec<_>>();
        assert_eq!(times(seq(1, None)), [101.0331, 102.0332, 103.0333, 104.0334, 105.0335, 106.0336, 107.0337]);
        // Stamps as a ROS header carries them (nanoseconds) find their frames; one before `first`
        // or off every frame's by more than half a millisecond does not.
        let taken = vec![100.0330, 102.033_200_001, 103.0333, 105.0345, 106.0336];
        assert_eq!(times(seq(1, Some(taken.clone()))), [102.0332, 103.0333, 106.0336]);
        assert_eq!(times(seq(2, Some(taken))), [103.0333]);
    }

    #[test]
    fn the_orb_peer_gets_the_frames_and_lens_it_can_use_and_its_poses_are_read_strictly() {
        let scratch = tempfile::tempdir().unwrap();
        let seq = TumSequence {
            dir: "/data/fr1".into(),
            camera: published_camera("fr1").unwrap(),
            first: 2,
            len: 30,
            step: 3,
            stamps: Some(vec![1.25, 2.5]),
        };
        let args = seq.orb_peer_args(scratch.path()).unwrap();
        let after = |flag: &str, n: usize| {
            let at = args.iter().position(|a| a == flag).unwrap_or_else(|| panic!("{flag} in {args:?}"));
            args[at + 1..at + 1 + n].to_vec()
        };
        let Lens::PlumbBob(d) = seq.camera.lens else { panic!("fr1 is plumb_bob") };
        assert_eq!(after("--dist", 5), d.map(|v| v.to_string()));
        assert_eq!([after("--first", 1), after("--frames", 1), after("--every", 1)].concat(), ["2", "30", "3"]);
        let list = std::fs::read_to_string(&after("--stamps", 1)[0]).unwrap();
        assert_eq!(list.lines().map(|l| l.parse::<f64>().unwrap()).collect::<Vec<_>>(), [1.25, 2.5]);
        let nowhere = scratch.path().join("no such folder");
        assert!(matches!(seq.orb_peer_args(&nowhere), Err(TumError::Write { path, .. }) if path.starts_with(&nowhere)));
        let fisheye = TumSequence { camera: Camera { lens: Lens::Equidistant([0.1; 4]), ..seq.camera }, ..seq };
        assert!(matches!(fisheye.orb_peer_args(scratch.path()), Err(TumError::PeerLens(_))));

        let report = serde_json::json!({"poses": [[1.0, 0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 1.0]]});
        let poses = orb_peer_poses(&report).unwrap();
        assert_eq!((poses.len(), poses[0].t, poses[0].pose.translation.y), (1, 1.0, 0.2));
        let short = serde_json::json!({"poses": [[1.0, 0.1, 0.2]]});
        assert!(matches!(orb_peer_poses(&short), Err(TumError::PeerPoses(_))));
        assert!(matches!(orb_peer_poses(&serde_json::json!({"lost": []})), Err(TumError::PeerNoPoses)));
    }
}
