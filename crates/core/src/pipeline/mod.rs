//! The pipeline both drivers run: a frame through SuperPoint, tracking and the keyframe
//! decision; a keyframe pair through DUSt3R, onto the chain and into the map; every output
//! through one [`OutputSink`]; every event counted in one vocabulary ([`Counter`]).
//!
//! The live node and the bag replay only feed it inputs and give it a sink. Its state is shared
//! (`&self`, short locks), so the node can run the frame side and the pair side on threads of
//! its own while the replay calls them one after the other; what only one side touches lives in
//! [`FrameSide`] and [`PairSide`], owned by whoever runs that side.

mod depth;
mod turned;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::backend::{BackendError, FeatureExtractor, PairOutput, PairReconstructor};
use crate::cancel::Cancel;
use crate::diagnostics::{Counter, Stats};
use crate::geometry::pointmaps::depth_ratio;
use crate::geometry::Transform;
use crate::image::depth::DepthImage;
use crate::image::{Frame, ImageError};
use crate::msg::convert::{cloud_points_of, CloudLayoutError};
use crate::msg::tf_static::{transforms_between, StaticTransforms};
use crate::msg::{builtin_interfaces, sensor_msgs, std_msgs, tf2_msgs};
use crate::outputs::odom::{stamp_of, Base, Frames, Mount, OdomOutputs};
use crate::outputs::{
    check_camera_info, frame_outputs, known_camera, pair_messages, reconstruct_pair, Output, OutputKind, OutputSink,
};
use crate::params::topics::TF_STATIC;
use crate::params::NodeParams;
use crate::ply::{save_ply, PlyError};
use crate::superpoint::{Keypoints, PostParams};
use crate::vo::carried::{CarriedTracker, FrameDepth, TRY_KEYFRAMES};
use crate::vo::keyframes::{KeyframeDecision, KeyframeSelector, Tracking};
use crate::vo::map::{grow, VoxelMap};
use crate::vo::odometry::{Anchor, ChainKeyframe, FramePose, Joining, Link, NotAttached, Odometry, PairView, Stamp};
use crate::vo::robot_odometry::{RobotBase, RobotOdometry};
use crate::vo::scale::{depth_scale, DepthView, OdometryScale, ScaleError, ScaleEstimate, ScaleSource, ScaleTrack};
use crate::vo::tracking::{FrameCam, NotTracked, TrackingParams};
use depth::DepthSync;

/// A frame with what SuperPoint found in it: what keyframe selection, DUSt3R and the chain need
/// of a keyframe.
#[derive(Clone)]
pub struct Observation {
    /// The image's header (its stamp is the observation's identity on the chain).
    pub header: std_msgs::Header,
    /// The decoded image.
    pub frame: Arc<Frame>,
    /// SuperPoint's keypoints and descriptors.
    pub keypoints: Arc<Keypoints>,
}

impl Observation {
    fn stamp(&self) -> Stamp {
        stamp_of(&self.header.stamp)
    }

    fn pair_view(&self) -> PairView<Observation> {
        PairView { stamp: self.stamp(), payload: self.clone(), keypoints: self.keypoints.as_ref().clone() }
    }
}

/// What describes a frame again: SuperPoint and its post-processing.
struct Described<'a> {
    features: &'a dyn FeatureExtractor,
    post: &'a PostParams,
}

/// A camera message as it arrives on the image topic.
pub enum CameraImage {
    /// sensor_msgs/Image.
    Raw(sensor_msgs::Image),
    /// sensor_msgs/CompressedImage.
    Compressed(sensor_msgs::CompressedImage),
}

impl CameraImage {
    /// The header and the decoded frame.
    pub fn decode(self) -> (std_msgs::Header, Result<Frame, ImageError>) {
        match self {
            CameraImage::Raw(i) => {
                let frame =
                    Frame::from_raw(&i.encoding, i.width, i.height, i.step as usize, i.is_bigendian != 0, i.data);
                (i.header, frame)
            }
            CameraImage::Compressed(c) => (c.header, Frame::decode(&c.data)),
        }
    }
}

/// Which chain something belongs to: a new chain starts when input time goes backwards (a bag
/// looped), and a pair made for an older one, and that chain's map, are left behind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainId(u64);

/// A keyframe pair for DUSt3R: the chain's newest keyframe and the new one.
pub struct PairJob {
    /// View 1: the keyframe on the chain the pair starts at.
    pub first: Observation,
    /// View 2: the new keyframe.
    pub second: Observation,
    /// The CameraInfo when the second keyframe arrived.
    camera_info: Option<sensor_msgs::CameraInfo>,
    chain: ChainId,
}

impl PairJob {
    /// The views' stamps in seconds, for logs.
    pub fn stamps(&self) -> (f64, f64) {
        (self.first.header.stamp.seconds(), self.second.header.stamp.seconds())
    }
}

/// What the frame side keeps from one frame to the next.
pub struct FrameSide {
    keyframes: KeyframeSelector<Observation>,
    tracker: CarriedTracker,
}

/// What the pair side keeps from one pair to the next: the map of the current chain.
#[derive(Default)]
pub struct PairSide {
    map: Option<VoxelMap>,
    chain: ChainId,
}

/// What a frame gave.
#[derive(Default)]
pub struct FrameDone {
    /// SuperPoint's time on it; `None` when SuperPoint did not answer.
    pub superpoint: Option<Duration>,
    /// The pair it starts, when it became a keyframe.
    pub pair: Option<PairJob>,
}

/// How a pair ended.
#[derive(Debug, PartialEq)]
pub enum PairDone {
    /// DUSt3R answered and its outputs went out.
    Done {
        /// DUSt3R's time on it.
        took: Duration,
        /// For a keyframe tracked when it arrived: how far tracking's pose was from the pair's
        /// (degrees, chain units).
        keyframe_gap: Option<(f64, f64)>,
    },
    /// DUSt3R failed or could not be reached (counted and logged).
    Failed,
    /// Stopped by the cancel signal; nothing of it went out.
    Abandoned,
}

/// Which model failed.
#[derive(Clone, Copy)]
enum Model {
    SuperPoint,
    Dust3r,
}

/// The chain and the odometry built on it: changed together, under one lock.
struct Chain {
    odometry: Odometry<Observation>,
    odom: OdomOutputs,
    id: ChainId,
    scale: ScaleTrack,
    /// The running scale from the robot's odometry (`scale_source: odometry`).
    robot_scale: OdometryScale,
}

impl Chain {
    /// Forgets the chain (its keyframes, odometry and scale); a pair made for it will not join
    /// the next.
    fn start_new(&mut self) {
        self.odometry.reset();
        self.odom.reset();
        self.scale = ScaleTrack::default();
        self.robot_scale = OdometryScale::default();
        self.id = ChainId(self.id.0 + 1);
    }

    /// Whether metric outputs are held back: the scale has gone unmeasured for more keyframes
    /// than `scale_max_unmeasured`.
    fn scale_held(&self, p: &NodeParams) -> bool {
        p.scale_source.is_metric() && self.scale.held(p.scale_max_unmeasured)
    }
}

/// The pipeline's shared state.
pub struct Pipeline {
    params: Mutex<Arc<NodeParams>>,
    stats: Stats,
    camera_info: Mutex<Option<sensor_msgs::CameraInfo>>,
    tree: Mutex<StaticTransforms>,
    depth: Mutex<DepthSync>,
    /// The robot's odometry from /tf (`scale_source: odometry`).
    robot: Mutex<RobotOdometry>,
    chain: Mutex<Chain>,
    /// A reset asks the frame side to forget its last keyframe at its next frame.
    forget_keyframe: AtomicBool,
    /// The last map that went out, for `~/save_map`.
    last_map: Mutex<Option<sensor_msgs::PointCloud2>>,
}

/// Why `~/save_map` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum SaveMapError {
    /// No map has gone out since the start or the last reset.
    #[error("no map yet (no keyframe pair has joined the chain since the start or the last reset)")]
    NoMap,
    /// The map's cloud has a layout the writer does not read.
    #[error("the map's cloud cannot be read")]
    Layout(#[from] CloudLayoutError),
    /// The file could not be written.
    #[error(transparent)]
    Ply(#[from] PlyError),
}

/// A lock that a panic elsewhere does not make unusable: the state behind it stays consistent
/// between two calls, so a poisoned one is taken as it is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pipeline {
    /// A pipeline with no frame seen yet.
    pub fn new(params: NodeParams) -> Self {
        let chain = Chain {
            odometry: Odometry::new(params.odometry_params()),
            odom: OdomOutputs::new(Frames { map: params.map_frame.clone(), odom: params.odom_frame.clone() }, None),
            id: ChainId::default(),
            scale: ScaleTrack::default(),
            robot_scale: OdometryScale::default(),
        };
        Self {
            params: Mutex::new(Arc::new(params)),
            stats: Stats::default(),
            camera_info: Mutex::new(None),
            tree: Mutex::new(StaticTransforms::default()),
            depth: Mutex::new(DepthSync::default()),
            robot: Mutex::new(RobotOdometry::default()),
            chain: Mutex::new(chain),
            forget_keyframe: AtomicBool::new(false),
            last_map: Mutex::new(None),
        }
    }

    /// `~/reset`: a new chain from the next keyframe on and the map cleared. The chain is
    /// forgotten now (a pair in flight for it does not join the next), the frame side forgets
    /// its last keyframe at its next frame, and an empty path and map at `stamp` are returned
    /// to go out.
    pub fn reset(&self, stamp: builtin_interfaces::Time) -> Vec<Output> {
        let mut chain = lock(&self.chain);
        chain.start_new();
        self.forget_keyframe.store(true, Ordering::Release);
        *lock(&self.last_map) = None;
        self.stats.bump(Counter::Resets);
        tracing::info!("reset: a new keyframe chain starts at the next frame; the map is cleared");
        chain.odom.cleared(stamp)
    }

    /// `~/save_map`: the last map that went out as a binary PLY at `path` (in `map_frame`, in
    /// the chain's units). Returns how many points it holds.
    pub fn save_map(&self, path: &Path) -> Result<usize, SaveMapError> {
        let map = lock(&self.last_map).clone().ok_or(SaveMapError::NoMap)?;
        let points = cloud_points_of(&map)?;
        let n = points.len();
        let p = self.params();
        let units = if p.scale_source.is_metric() { "metres" } else { "DUSt3R's scale (not metres)" };
        let stamp = &map.header.stamp;
        let comments = [
            format!(
                "sp_dust3r cloud_map in frame {} as of the keyframe stamped {}.{:09}",
                map.header.frame_id, stamp.sec, stamp.nanosec
            ),
            units.to_string(),
        ];
        save_ply(path, points, &comments)?;
        self.stats.bump(Counter::MapsSaved);
        Ok(n)
    }

    /// The frame side's own state, for the parameters now.
    pub fn frame_side(&self) -> FrameSide {
        FrameSide {
            keyframes: KeyframeSelector::new(self.params().keyframe_policy()),
            tracker: CarriedTracker::default(),
        }
    }

    /// The parameters now.
    pub fn params(&self) -> Arc<NodeParams> {
        Arc::clone(&lock(&self.params))
    }

    /// New parameters (`ros2 param set`): every step reads them from its next frame or pair on,
    /// the chain's scale test included.
    pub fn set_params(&self, params: NodeParams) {
        lock(&self.chain).odometry.set_params(params.odometry_params());
        *lock(&self.params) = Arc::new(params);
    }

    /// What happened so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The CameraInfo frames are read with now.
    pub fn camera_info(&self) -> Option<sensor_msgs::CameraInfo> {
        lock(&self.camera_info).clone()
    }

    /// A CameraInfo arrived: kept when usable, else counted and reported.
    pub fn on_camera_info(&self, info: sensor_msgs::CameraInfo) {
        match check_camera_info(&info) {
            Ok(()) => *lock(&self.camera_info) = Some(info),
            Err(e) => {
                self.stats.bump(Counter::BadCameraInfo);
                let stamp = &info.header.stamp;
                crate::warn_throttled!("ignoring camera_info stamped {}.{:09}: {e}", stamp.sec, stamp.nanosec);
            }
        }
    }

    /// A /tf_static message arrived (the camera's mount, with `base_frame`).
    pub fn on_static_transforms(&self, msg: &tf2_msgs::TFMessage) {
        lock(&self.tree).insert(msg);
    }

    /// A sample on `topic` did not decode as its type (another message definition, a foreign
    /// writer): counted by topic and reported; the next one is taken.
    pub fn on_malformed(&self, topic: &str, e: &dyn std::fmt::Display) {
        self.stats.bump(Counter::MalformedSamples);
        self.stats.count_kind("malformed", &topic.trim_start_matches('/').replace('/', "_"));
        crate::warn_throttled!(key = topic;
            "a sample on {topic} does not decode as its type (another message definition?): {e}");
    }

    /// `n` frames on `topic` never arrived whole (the writer's sequence numbers skipped them):
    /// counted and reported, with the receive buffer when the kernel clamped it.
    pub fn on_frames_lost(&self, topic: &str, n: u64, buffer: &crate::diagnostics::ReceiveBuffer) {
        self.stats.add(Counter::FramesLost, n);
        let hint = buffer.shortfall().map_or(String::new(), |shortfall| format!("; {shortfall}"));
        crate::warn_throttled!(key = "frames lost in transport";
            "{n} frames on {topic} did not arrive whole (a lost datagram or fragment){hint}");
    }

    /// A depth image arrived (`scale_source: depth`): decoded and kept for the keyframes near
    /// its stamp; one that cannot be decoded is counted, reported and left out.
    pub fn on_depth(&self, msg: &sensor_msgs::Image) {
        self.stats.bump(Counter::DepthIn);
        let big_endian = msg.is_bigendian != 0;
        let (w, h, step) = (msg.width, msg.height, msg.step as usize);
        let stamp = &msg.header.stamp;
        match DepthImage::from_raw(&msg.encoding, w, h, step, big_endian, &msg.data) {
            Ok(depth) => {
                let max = self.depth_max_interval();
                lock(&self.depth).insert(stamp_of(stamp), Arc::new(depth), max);
            }
            Err(e) => {
                self.stats.bump(Counter::BadDepth);
                crate::warn_throttled!(key = "depth"; "skipping depth image stamped {}.{:09}: {e}", stamp.sec, stamp.nanosec);
            }
        }
    }

    /// A /tf message: with `scale_source: odometry`, the robot's odometry
    /// (`scale_odom_frame -> base_frame`) is kept for the pairs to come.
    pub fn on_transforms(&self, msg: &tf2_msgs::TFMessage) {
        let p = self.params();
        let Some(base) = p.base_frame.as_deref().filter(|_| p.scale_source == ScaleSource::Odometry) else { return };
        let found = transforms_between(msg, &p.scale_odom_frame, base);
        self.stats.add(Counter::RobotOdometryIn, found.len() as u64);
        let mut robot = lock(&self.robot);
        for (stamp, pose) in found {
            robot.insert(stamp_of(&stamp), Transform::new(pose.rotation, pose.translation));
        }
    }

    /// `depth_max_interval` in nanoseconds.
    fn depth_max_interval(&self) -> Stamp {
        (self.params().depth_max_interval * 1e9).round() as Stamp
    }

    /// How the metric scale stands (for /diagnostics).
    pub fn scale(&self) -> ScaleTrack {
        lock(&self.chain).scale
    }

    /// A camera image arrived: decoded and counted; one that cannot be decoded is reported and
    /// left out.
    pub fn on_image(&self, msg: CameraImage) -> Option<(std_msgs::Header, Frame)> {
        let (header, decoded) = msg.decode();
        self.stats.bump(Counter::FramesIn);
        let stamp = &header.stamp;
        decoded
            .map_err(|e| {
                self.stats.bump(Counter::BadFrames);
                let n = self.stats.get(Counter::FramesIn);
                crate::warn_throttled!("skipping frame {n} stamped {}.{:09}: {e}", stamp.sec, stamp.nanosec);
            })
            .ok()
            .map(|frame| (header, frame))
    }

    /// A frame on the frame side: its keypoints out; with `pairs` (DUSt3R can run), its pose on
    /// the chain out and the keyframe decision, which may start a pair.
    pub fn on_frame<S: OutputSink>(
        &self,
        side: &mut FrameSide,
        header: std_msgs::Header,
        frame: Arc<Frame>,
        features: &dyn FeatureExtractor,
        pairs: bool,
        sink: &mut S,
    ) -> Result<FrameDone, S::Error> {
        let p = self.params();
        side.keyframes.set_policy(p.keyframe_policy());
        if self.forget_keyframe.swap(false, Ordering::AcqRel) {
            side.keyframes.forget();
            side.tracker.forget();
        }
        if p.scale_source == ScaleSource::Depth {
            lock(&self.depth).take(stamp_of(&header.stamp), self.depth_max_interval());
        }
        let post = p.post_params();
        let t = Instant::now();
        let keypoints = match features.detect(&frame, &post) {
            Ok(kp) => kp,
            Err(e) => {
                self.model_failed(Model::SuperPoint, &e);
                return Ok(FrameDone::default());
            }
        };
        let took = t.elapsed();
        self.stats.superpoint_ms.store(took.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
        self.stats.bump(Counter::FramesDone);
        let debug = sink.wants(OutputKind::DebugImage).then_some(&post);
        emit(sink, frame_outputs(&header, &frame, &keypoints, debug))?;
        if !pairs {
            return Ok(FrameDone { superpoint: Some(took), pair: None });
        }
        let camera_info = self.camera_info();
        let seen = Observation { header, frame, keypoints: Arc::new(keypoints) };
        let described = Described { features, post: &post };
        let tracked = self.track(&mut side.tracker, &seen, &described, camera_info.as_ref(), &p, sink)?;
        let pair = self.decide(side, seen, tracked, camera_info);
        Ok(FrameDone { superpoint: Some(took), pair })
    }

    /// A frame that no keyframe placed, described again turned by each of
    /// [`turned::TURNS_DEG`] in turn and tracked with those keypoints; the first that places it
    /// wins. Only within [`turned::WITHIN`] of the last frame placed (tracked, or the newest
    /// keyframe): a camera lost for longer is not rolled away but elsewhere, and would pay
    /// SuperPoint once per turn on every frame.
    fn track_turned<F>(
        &self,
        tracker: &mut CarriedTracker,
        (chain, keyframes): (u64, &[Arc<ChainKeyframe<F>>]),
        seen: &Observation,
        described: &Described,
        params: &TrackingParams,
    ) -> Option<FramePose> {
        let placed_last = tracker.last_tracked(chain).max(keyframes.first().map(|kf| kf.stamp))?;
        let since = seen.stamp() - placed_last;
        if since > turned::WITHIN.as_nanos() as i64 {
            return None;
        }
        for degrees in turned::TURNS_DEG {
            let keypoints = match turned::keypoints_turned(described.features, &seen.frame, degrees, described.post) {
                Ok(kp) => Arc::new(kp),
                Err(e) => {
                    self.model_failed(Model::SuperPoint, &e);
                    return None;
                }
            };
            if let Some(fp) = tracker.track_again(keyframes, &keypoints, params) {
                self.stats.bump(Counter::FramesTurned);
                tracing::debug!(
                    "frame {:.3}: placed described again turned by {degrees} deg",
                    seen.header.stamp.seconds()
                );
                return Some(fp);
            }
        }
        None
    }

    /// A model that did not answer: paused while its server cannot answer and nothing stands
    /// in (/diagnostics says why), else an error counted by kind.
    fn model_failed(&self, model: Model, e: &BackendError) {
        let (key, name, paused, failed) = match model {
            Model::SuperPoint => ("superpoint", "SuperPoint", Counter::SuperPointPaused, Counter::SuperPointErrors),
            Model::Dust3r => ("dust3r", "DUSt3R", Counter::Dust3rPaused, Counter::Dust3rErrors),
        };
        if e.is_unavailable() {
            self.stats.bump(paused);
        } else {
            self.stats.bump(failed);
            self.stats.count_kind(key, e.kind());
            crate::warn_throttled!(key = key; "{name}: {e}");
        }
    }

    /// Places a frame in the odometry and sends it (and TF); counts what was not tracked and
    /// why. Returns its pose in the odometry.
    fn track<S: OutputSink>(
        &self,
        tracker: &mut CarriedTracker,
        seen: &Observation,
        described: &Described,
        camera_info: Option<&sensor_msgs::CameraInfo>,
        p: &NodeParams,
        sink: &mut S,
    ) -> Result<Tracking, S::Error> {
        // The chain's lock is held to take its newest keyframes, not while tracking.
        let (mut keyframes, mut chain) = {
            let chain = lock(&self.chain);
            (chain.odometry.newest(TRY_KEYFRAMES), chain.id.0)
        };
        let camera = known_camera(camera_info, &seen.frame, p.rectified_images);
        let header = &seen.header;
        let params = p.odometry_params().tracking;
        if let Some(reposed) = tracker.catch_up(chain, &keyframes, &params) {
            // Let go of them first, so the chain moves its keyframe rather than a copy of it.
            drop(keyframes);
            let mut held = lock(&self.chain);
            if held.id.0 == chain {
                held.odometry.repose(reposed);
            }
            (keyframes, chain) = (held.odometry.newest(TRY_KEYFRAMES), held.id.0);
        }
        let placed = tracker.track_any(chain, &keyframes, &seen.keypoints, seen.stamp(), camera, &params);
        let placed = match placed {
            Err(e) if e != NotTracked::NoMap => {
                self.track_turned(tracker, (chain, &keyframes), seen, described, &params).ok_or(e)
            }
            placed => placed,
        };
        let (tracked, covariance, inliers) = match placed {
            Ok(fp) => {
                if fp.tracked.second_try {
                    self.stats.bump(Counter::FramesSecondTry);
                }
                if fp.tracked.drawn {
                    self.stats.bump(Counter::FramesDrawn);
                }
                self.measure_by_depth(tracker, seen, p);
                (fp.t_odom_frame, fp.covariance, fp.tracked.inliers)
            }
            Err(NotTracked::NoMap) => {
                self.stats.bump(Counter::FramesBeforeMap);
                return Ok(Tracking::NoMap);
            }
            Err(e) => {
                self.stats.bump(Counter::FramesNotTracked);
                self.stats.count_kind("tracking", e.kind());
                crate::warn_throttled!(key = e.kind(); "frame stamped {:.3} not tracked: {e}", header.stamp.seconds());
                return Ok(Tracking::Lost);
            }
        };
        let placed = Tracking::Placed { t_odom_frame: tracked, inliers };
        let outputs = {
            let mut chain = lock(&self.chain);
            if !self.mounted(&mut chain.odom, &header.frame_id, p) {
                self.stats.bump(Counter::FramesNoMount);
                return Ok(placed);
            }
            if chain.scale_held(p) {
                self.stats.bump(Counter::FramesNoScale);
                return Ok(placed);
            }
            let scale_sigma = if p.scale_source.is_metric() { chain.scale.relative_error() } else { 0.0 };
            let t_origin_odom = chain.odometry.t_origin_odom();
            chain.odom.frame(header, (&tracked, &t_origin_odom), (covariance.as_ref(), scale_sigma), p.publish_tf)
        };
        self.stats.bump(Counter::FramesTracked);
        emit(sink, outputs)?;
        Ok(placed)
    }

    /// With `scale_source: depth` and `depth_tracking`: the frame just placed has its keypoints
    /// measured by its registered depth image, when one came within `depth_max_interval`.
    fn measure_by_depth(&self, tracker: &mut CarriedTracker, seen: &Observation, p: &NodeParams) {
        if p.scale_source != ScaleSource::Depth || !p.depth_tracking {
            return;
        }
        let Some(image) = lock(&self.depth).of_taken(seen.stamp()) else { return };
        let colour = (seen.frame.width(), seen.frame.height());
        if tracker.measure_last(FrameDepth { image, colour }) > 0 {
            self.stats.bump(Counter::FramesMeasured);
        }
    }

    /// Whether the odometry can go out: always without `base_frame`; with it, once the camera's
    /// mount is known (looked up in /tf_static until it is).
    fn mounted(&self, odom: &mut OdomOutputs, camera_frame: &str, p: &NodeParams) -> bool {
        let Some(base) = &p.base_frame else { return true };
        if odom.mount.is_none() {
            let found = lock(&self.tree).lookup(base, camera_frame);
            odom.mount = found.map(|t_base_cam| Mount { base_frame: base.clone(), t_base_cam: units(t_base_cam, p) });
        }
        if odom.mount.is_none() {
            crate::warn_throttled!("no {TF_STATIC} transform from {base} to {camera_frame} yet: odometry waits for it");
        }
        odom.mount.is_some()
    }

    /// The keyframe decision: a new keyframe pairs with the chain's newest (so the pair can
    /// join it); the first one, or one from before the last (time went backwards), starts a new
    /// chain.
    fn decide(
        &self,
        side: &mut FrameSide,
        seen: Observation,
        tracked: Tracking,
        camera_info: Option<sensor_msgs::CameraInfo>,
    ) -> Option<PairJob> {
        let decision = side.keyframes.decide(seen.header.stamp.seconds(), &seen.keypoints, tracked, &seen);
        if !matches!(decision, KeyframeDecision::Skip { .. }) && self.params().scale_source == ScaleSource::Depth {
            lock(&self.depth).keyframe(seen.stamp());
        }
        match decision {
            KeyframeDecision::Skip { .. } => None,
            KeyframeDecision::First => {
                self.stats.bump(Counter::Keyframes);
                lock(&self.chain).start_new();
                None
            }
            KeyframeDecision::New { previous, why, .. } => {
                self.stats.bump(Counter::Keyframes);
                self.stats.count_keyframe(why.name());
                tracing::debug!("keyframe {:.3}: {}", seen.header.stamp.seconds(), why.name());
                let mut chain = lock(&self.chain);
                if let Tracking::Placed { t_odom_frame, .. } = tracked {
                    chain.odometry.keyframe_tracked(seen.stamp(), t_odom_frame);
                }
                let first = chain.odometry.anchor().map_or(previous, |a| a.payload.clone());
                Some(PairJob { first, second: seen, camera_info, chain: chain.id })
            }
        }
    }

    /// A pair on the pair side: DUSt3R's cloud and pose out, then the pair joins the chain and
    /// the path and the map go out. Stopped by `cancel` (the CPU model checks it between
    /// blocks), nothing of it goes out.
    pub fn on_pair<S: OutputSink>(
        &self,
        side: &mut PairSide,
        job: &PairJob,
        model: &dyn PairReconstructor,
        cancel: &Cancel,
        sink: &mut S,
    ) -> Result<PairDone, S::Error> {
        if job.chain != side.chain {
            (side.map, side.chain) = (None, job.chain);
        }
        let retargeted = self.retarget(job);
        let job = retargeted.as_ref().unwrap_or(job);
        let p = self.params();
        let t = Instant::now();
        let (a, b) = (&job.first, &job.second);
        let (s1, s2) = job.stamps();
        tracing::debug!("DUSt3R: pair {s1:.3} -> {s2:.3} started");
        let result = reconstruct_pair(model, &a.frame, &b.frame, job.camera_info.as_ref(), &p);
        if result.as_ref().is_err_and(BackendError::is_cancelled) || cancel.is_cancelled() {
            let what = if result.is_ok() { "finished" } else { "abandoned" };
            let took = t.elapsed().as_secs_f64();
            tracing::info!("DUSt3R: pair {s1:.3} -> {s2:.3} {what} after {took:.2} s: shutting down");
            return Ok(PairDone::Abandoned);
        }
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                self.model_failed(Model::Dust3r, &e);
                return Ok(PairDone::Failed);
            }
        };
        let took = t.elapsed();
        self.stats.dust3r_ms.store(took.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
        self.stats.bump(Counter::PairsDone);
        tracing::debug!("DUSt3R: pair {s1:.3} -> {s2:.3} done in {:.2} s", took.as_secs_f64());
        if out.camera_info_mismatch {
            self.stats.bump(Counter::CameraInfoMismatch);
            crate::warn_throttled!(
                "camera_info is for another image size than the frames; estimating the focal instead"
            );
        }
        if let Err(reason) = &out.geometry.pose {
            self.stats.bump(Counter::NoPose);
            tracing::warn!("no pose for the pair {s1:.3} -> {s2:.3}: {reason}");
        }
        let keyframe_gap = self.place_pair(side, job, out.geometry, &p, sink)?;
        Ok(PairDone::Done { took, keyframe_gap })
    }

    /// The pair as it should start now: a new keyframe pairs with the chain's newest, which,
    /// when pairs answer late, may have changed since the keyframe was decided (a newer one
    /// joined), or the one it paired with may have been left out (a waiting pair that a newer
    /// one replaced, or one that did not join, which could not join now). `None`: as it is.
    fn retarget(&self, job: &PairJob) -> Option<PairJob> {
        let chain = lock(&self.chain);
        if chain.id != job.chain {
            return None;
        }
        let anchor =
            chain.odometry.anchor().filter(|a| a.stamp != job.first.stamp() && a.stamp < job.second.stamp())?;
        let (s1, s2) = job.stamps();
        let now = anchor.payload.header.stamp.seconds();
        tracing::debug!("DUSt3R: pair {s1:.3} -> {s2:.3} starts at the chain's newest keyframe {now:.3} instead");
        Some(PairJob {
            first: anchor.payload.clone(),
            second: job.second.clone(),
            camera_info: job.camera_info.clone(),
            chain: job.chain,
        })
    }

    /// The pair in the units it joins the chain in, and how it joins: with a metric
    /// `scale_source`, in metres when its source measures its scale, else in DUSt3R's scale,
    /// carried over the keyframe it shares with the chain; without one, in DUSt3R's scale,
    /// related to the chain the same way.
    fn measure(
        &self,
        job: &PairJob,
        out: PairOutput,
        p: &NodeParams,
    ) -> (PairOutput, Link, Result<ScaleEstimate, ScaleError>) {
        let confidence = p.odometry_params().scale_confidence;
        let measured = match p.scale_source {
            ScaleSource::None => return (out, Link::Relative(confidence), Err(ScaleError::NotMetric)),
            ScaleSource::Depth => self.depth_measurement(job, &out, confidence),
            ScaleSource::Odometry => self.robot_measurement(job, &out, p),
        };
        match measured {
            Ok(est) => {
                self.stats.bump(Counter::PairsScaleMeasured);
                (out.scaled(est.scale), Link::Measured, Ok(est))
            }
            Err(e) => {
                if !matches!(e, ScaleError::LittleMotion { .. }) {
                    self.stats.bump(Counter::PairsScaleUnmeasured);
                    let (s1, s2) = job.stamps();
                    crate::warn_throttled!(key = "scale"; "no metric scale for the pair {s1:.3} -> {s2:.3}: {e}");
                }
                (out, Link::Carried(confidence), Err(e))
            }
        }
    }

    /// The pair's scale from its keyframes' depth images.
    fn depth_measurement(&self, job: &PairJob, out: &PairOutput, confidence: f32) -> Result<ScaleEstimate, ScaleError> {
        let sync = lock(&self.depth);
        let views = [
            (sync.of_keyframe(job.first.stamp()), Some(&out.view1), 0),
            (sync.of_keyframe(job.second.stamp()), out.view2.as_ref(), 1),
        ];
        drop(sync);
        let views: Vec<DepthView<'_>> = views
            .iter()
            .filter_map(|(d, map, i)| {
                Some(DepthView { pointmap: (*map)?, mapping: &out.mappings[*i], depth: d.as_deref()? })
            })
            .collect();
        if views.is_empty() {
            return Err(ScaleError::NoDepth);
        }
        depth_scale(&views, confidence)
    }

    /// The pair's scale from the robot's odometry: the camera's travel between the keyframes'
    /// stamps (the base's, through the camera's mount) against the pair's translation, as the
    /// chain's running estimate.
    fn robot_measurement(&self, job: &PairJob, out: &PairOutput, p: &NodeParams) -> Result<ScaleEstimate, ScaleError> {
        let pose = out.pose.as_ref().map_err(|_| ScaleError::NoPose)?;
        let mount = {
            let mut chain = lock(&self.chain);
            self.mounted(&mut chain.odom, &job.second.header.frame_id, p);
            chain.odom.mount.clone().ok_or(ScaleError::NoMount)?
        };
        let (a, b) = {
            let robot = lock(&self.robot);
            (robot.pose_at(job.first.stamp()), robot.pose_at(job.second.stamp()))
        };
        let (Some(a), Some(b)) = (a, b) else { return Err(ScaleError::NoOdometry) };
        let t_base_cam = Transform::<RobotBase, FrameCam>::new(mount.t_base_cam.rotation, mount.t_base_cam.translation);
        let camera_motion = t_base_cam.inverse().compose(&a.inverse().compose(&b)).compose(&t_base_cam);
        let moved = camera_motion.translation.norm();
        let confidence = p.odometry_params().scale_confidence;
        let anchor = lock(&self.chain).odometry.anchor_of(job.first.stamp());
        let by_chain = match anchor {
            Anchor::OnChain(k) => Some(depth_ratio(&k.pointmap, &out.view1, confidence).ok_or(ScaleError::Unrelated)?),
            _ => None,
        };
        let pair = pose.t_cam1_cam2.translation.norm();
        lock(&self.chain).robot_scale.measure(moved, pair, by_chain, p.scale_min_translation)
    }

    /// A reconstructed pair in the chain's units: its own cloud and pose out, then it joins the
    /// chain (prepared outside the chain's lock, added under it); then, outside it, the map
    /// grows and the path and the map go out. Returns how far tracking's pose of the new
    /// keyframe was from the pair's.
    fn place_pair<S: OutputSink>(
        &self,
        side: &mut PairSide,
        job: &PairJob,
        out: PairOutput,
        p: &NodeParams,
        sink: &mut S,
    ) -> Result<Option<(f64, f64)>, S::Error> {
        let (out, link, measured) = self.measure(job, out, p);
        let anchor = {
            let mut chain = lock(&self.chain);
            let current = chain.id == job.chain;
            if current && p.scale_source.is_metric() {
                chain.scale.update(&measured);
            }
            current.then(|| chain.odometry.anchor_of(job.first.stamp()))
        };
        if anchor.is_none() {
            tracing::debug!("a pair made before input time went back does not join the new chain");
        }
        let camera = known_camera(job.camera_info.as_ref(), &job.second.frame, p.rectified_images);
        let tracking = p.odometry_params().tracking;
        let joining = anchor.map(|a| {
            let (first, second) = (job.first.pair_view(), job.second.pair_view());
            Odometry::join(a, first, second, &out, link, (camera.as_ref(), &tracking))
        });
        // The pair's own outputs: in its own scale, or in the chain's units when they are metres.
        let units = match (link, &joining) {
            (Link::Relative(_) | Link::Measured, _) => Some(1.0),
            (Link::Carried(_), Some(Ok(j))) => Some(j.scale()),
            (Link::Carried(_), _) => None,
        };
        if let Some(s) = units.filter(|_| !lock(&self.chain).scale_held(p)) {
            let messages = if s == 1.0 {
                pair_messages(&out, &job.first.header, &job.second.header, p)
            } else {
                pair_messages(&out.scaled(s), &job.first.header, &job.second.header, p)
            };
            emit(sink, messages)?;
        }
        match joining {
            Some(joining) => self.join_chain(side, job, joining, p, sink),
            None => Ok(None),
        }
    }

    /// A pair prepared to join the chain is added to it unless the chain changed meanwhile;
    /// then the map grows and the path and the map go out.
    fn join_chain<S: OutputSink>(
        &self,
        side: &mut PairSide,
        job: &PairJob,
        joining: Result<Joining<Observation>, NotAttached>,
        p: &NodeParams,
        sink: &mut S,
    ) -> Result<Option<(f64, f64)>, S::Error> {
        let mut chain = lock(&self.chain);
        if chain.id != job.chain {
            tracing::debug!("a pair made before input time went back does not join the new chain");
            return Ok(None);
        }
        let joined = match joining.and_then(|j| chain.odometry.commit(j)) {
            Ok(joined) => joined,
            Err(e) => {
                self.stats.bump(Counter::PairsUnchained);
                crate::warn_throttled!("the pair does not join the keyframe chain: {e}");
                return Ok(None);
            }
        };
        let added: Vec<_> = joined.added.iter().filter_map(|&k| chain.odometry.keyframe(k).cloned()).collect();
        self.stats.add(Counter::KeyframesChained, added.len() as u64);
        if let Some((deg, units)) = joined.disagreement {
            tracing::debug!("keyframe: pair and tracking {deg:.2} deg, {units:.4} apart (scale {:.3})", joined.scale);
        }
        let path = chain.odometry.path().to_vec();
        let mounted = self.mounted(&mut chain.odom, &job.second.header.frame_id, p);
        let held = chain.scale_held(p);
        let odom = chain.odom.clone();
        drop(chain);
        if let Err(e) = grow(&mut side.map, added.iter().map(|k| k.as_ref()), &p.map_settings()) {
            crate::warn_throttled!("map: {e}");
        }
        // With base_frame, nothing goes out until the camera's mount is known; with a metric
        // scale, nothing while the scale is held.
        if mounted && !held {
            let outputs = odom.chain(&job.second.header.frame_id, &path, side.map.as_ref());
            if let Some(Output::Map(m)) = outputs.iter().find(|o| matches!(o, Output::Map(_))) {
                *lock(&self.last_map) = Some(m.clone());
            }
            emit(sink, outputs)?;
        }
        Ok(joined.disagreement)
    }
}

/// The camera's mount as it can be composed with the chain: whole when the chain is in metres;
/// without a metric scale, its rotation only (its offset is in metres and the chain is not: the
/// base's orientation is kept, and its position is taken at the camera).
fn units(t_base_cam: Transform<Base, FrameCam>, p: &NodeParams) -> Transform<Base, FrameCam> {
    if p.scale_source.is_metric() {
        return t_base_cam;
    }
    crate::warn_throttled!(key = "mount";
        "base_frame without a metric scale_source: the camera's {:.3} m offset from the base is left out (the \
         chain is in DUSt3R's scale), so odometry positions are the camera's, with the base's axes",
        t_base_cam.translation.norm());
    Transform::new(t_base_cam.rotation, nalgebra::Vector3::zeros())
}

fn emit<S: OutputSink>(sink: &mut S, outputs: Vec<Output>) -> Result<(), S::Error> {
    outputs.into_iter().try_for_each(|o| sink.emit(o))
}
