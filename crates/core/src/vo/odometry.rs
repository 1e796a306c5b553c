//! The keyframe chain: DUSt3R pairs put together into one trajectory in one scale, and every
//! frame placed on it by tracking.
//!
//! The first pair with a pose sets the origin (its view 1's camera) and the scale. Each later
//! pair starts at a keyframe already on the chain (the driver pairs a new keyframe with the
//! newest one that has a pointmap), so that keyframe has two pointmaps in its own frame: the
//! chain's and the new pair's. Their depth ratio over pixels confident in both is the new
//! pair's scale relative to the chain ([`depth_ratio`]); the pair's pose and view 2's points,
//! multiplied by it, extend the chain.
//!
//! Every keyframe has two poses, as REP 105's `map` and `odom` frames do. Its pose on the chain
//! ([`Origin`], the map) is its pair's (PairViewer's): globally the better, but each pair
//! corrects tracking's drift at once, a step in the trajectory. Its pose in [`OdomOrigin`] is
//! the one tracking gave it when it arrived (or, untracked, its chain pose moved by its anchor's
//! correction): frames are tracked against keyframes placed there, so their poses run on without
//! steps and drift slowly. The newest keyframe's two poses give the correction
//! ([`Odometry::t_origin_odom`], REP 105's `map -> odom`).
//!
//! Knows no ROS: the driver maps the two origins to its map and odometry frames.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use nalgebra::Vector3;

use super::tracking::{track, FrameCam, KeyframeCam, NotTracked, TrackTarget, Tracked, TrackingParams};
use super::uncertainty::{mahalanobis2, Inflation};
use crate::backend::PairOutput;
use crate::dust3r::{InputMapping, Pointmap};
use crate::geometry::lens::{Camera, Lens};
use crate::geometry::pnp::{covariance_in, Covariance6};
use crate::geometry::pointmaps::{depth_ratio, scaled};
use crate::geometry::{Intrinsics, NoPose, PairPose, Transform};
use crate::superpoint::Keypoints;

/// The chain's fixed frame (the map): the camera of the first keyframe with a pointmap,
/// keyframes placed by their pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin;

/// Tracking's fixed frame (the odometry): the same camera, keyframes and frames placed by
/// tracking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OdomOrigin;

/// A keyframe's pose on the chain.
pub type TOriginKeyframe = Transform<Origin, KeyframeCam>;
/// A frame's pose on the chain.
pub type TOriginFrame = Transform<Origin, FrameCam>;
/// A keyframe's pose in the odometry.
pub type TOdomKeyframe = Transform<OdomOrigin, KeyframeCam>;
/// A frame's pose in the odometry.
pub type TOdomFrame = Transform<OdomOrigin, FrameCam>;
/// The odometry's drift as the chain corrects it (REP 105's `map -> odom`).
pub type TOriginOdom = Transform<Origin, OdomOrigin>;

/// A keyframe's input time, nanoseconds: its identity on the chain (keyframes are at least
/// `keyframe_min_interval` apart, and time going backwards starts a new chain).
pub type Stamp = i64;

/// Keyframes kept for tracking and for pairs still to come (older ones live on in the map and
/// the path).
pub const KEEP_KEYFRAMES: usize = 16;

/// A keyframe on the chain.
#[derive(Clone)]
pub struct ChainKeyframe<F> {
    /// Its input time.
    pub stamp: Stamp,
    /// What the driver keeps with it (its header and image, for the next pair).
    pub payload: F,
    /// Its SuperPoint output.
    pub keypoints: Keypoints,
    /// Its points in its own camera frame, in the chain's scale.
    pub pointmap: Pointmap,
    /// Its colours on the pointmap's grid (interleaved RGB).
    pub rgb: Vec<u8>,
    /// Where the grid lies in its pixels.
    pub mapping: InputMapping,
    /// The focal PairViewer estimated for it (or the known one), its own pixels.
    pub focal: f64,
    /// Its pose on the chain.
    pub t_origin_kf: TOriginKeyframe,
    /// Its pose in the odometry (see the module's comment).
    pub t_odom_kf: TOdomKeyframe,
    /// The factor tracking's covariance takes against this keyframe (see
    /// [`super::uncertainty`]), as the checks stood when it joined.
    pub tracking_inflation: f64,
}

impl<F> ChainKeyframe<F> {
    /// The camera as the pair saw it, for frames without CameraInfo.
    pub fn estimated_intrinsics(&self) -> Intrinsics {
        estimated_intrinsics(&self.mapping, &self.pointmap, self.focal)
    }

    /// Where its keypoint `i` lies in the odometry: its pointmap's point there (see
    /// [`super::tracking::point_at`]) placed at the keyframe's odometry pose.
    pub fn odom_point(&self, i: usize, min_confidence: f32) -> Option<Vector3<f64>> {
        let [x, y] = *self.keypoints.xy.get(i)?;
        let p = super::tracking::point_at(&self.pointmap, &self.mapping, x as f64, y as f64, min_confidence)?;
        Some(self.t_odom_kf.apply(&p))
    }

    /// The odometry's drift as this keyframe's pair corrected it.
    pub fn t_origin_odom(&self) -> TOriginOdom {
        self.t_origin_kf.compose(&self.t_odom_kf.inverse())
    }
}

/// A view's camera as PairViewer estimated it: its focal, the principal point at the grid's
/// centre, in the view's pixels.
fn estimated_intrinsics(mapping: &InputMapping, grid: &Pointmap, focal: f64) -> Intrinsics {
    let (cx, cy) = mapping.to_original(grid.width as f64 / 2.0, grid.height as f64 / 2.0);
    Intrinsics { fx: focal, fy: focal, cx, cy }
}

/// A keyframe moved in the odometry after its pair joined, so that the odometry runs on
/// without a step from the frames that went out before it joined (the frame side's tracker
/// finds the move when it catches up with the pair).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reposed {
    /// The keyframe.
    pub keyframe: Stamp,
    /// Its new pose in the odometry.
    pub t_odom_kf: TOdomKeyframe,
}

/// One view of a pair as the driver knows it.
pub struct PairView<F> {
    /// Its input time.
    pub stamp: Stamp,
    /// The driver's payload.
    pub payload: F,
    /// Its SuperPoint output.
    pub keypoints: Keypoints,
}

/// Why a pair did not extend the chain.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NotAttached {
    /// The pair has no pose (or no own pointmap for view 2).
    #[error("the pair has no pose: {0}")]
    NoPose(NoPose),
    /// The pair's first view is not on the chain (its own pair failed, or it left the window).
    #[error("the pair starts at a keyframe that is not on the chain")]
    Unanchored,
    /// The shared keyframe's two pointmaps have too few confident pixels in common.
    #[error("the shared keyframe's pointmaps have too few confident pixels in common to relate the scales")]
    ScaleUnknown,
    /// The pair's second view is already on the chain.
    #[error("the pair's second keyframe is already on the chain")]
    Known,
    /// A metric chain cannot start from a pair whose scale was not measured.
    #[error("the pair's metric scale is unknown, and a metric chain cannot start from it")]
    Unmeasured,
}

/// How a pair's scale is related to the chain's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Link {
    /// Through the keyframe the pair shares with the chain: the depth ratio of its two pointmaps
    /// over pixels above this confidence in both (the first pair sets the chain's scale).
    Relative(f32),
    /// The pair is already in the chain's units (its metric scale was measured).
    Measured,
    /// A metric chain carries its scale over an unmeasured pair as [`Link::Relative`] does;
    /// such a pair cannot start a chain.
    Carried(f32),
}

/// Where a pair's first keyframe stands (see [`Odometry::anchor_of`]).
pub enum Anchor<F> {
    /// On the chain: the pair extends it.
    OnChain(Arc<ChainKeyframe<F>>),
    /// The chain is empty: the pair starts it.
    NewChain,
    /// Not on a chain that exists: the pair cannot join.
    Off,
}

/// A pair prepared to join the chain (see [`Odometry::join`]).
pub struct Joining<F> {
    /// Its first keyframe: on the chain, or the new origin.
    anchor: Arc<ChainKeyframe<F>>,
    /// Whether the pair starts the chain.
    origin: bool,
    /// Its second keyframe as it joins (its `tracking_inflation` is set by
    /// [`Odometry::commit`]).
    second: ChainKeyframe<F>,
    /// Its scale relative to the chain.
    scale: f64,
    /// The squared Mahalanobis distance between the pair's pose and its second view tracked
    /// against its first (see [`super::uncertainty`]), when it could be tracked.
    check: Option<f64>,
}

impl<F> Joining<F> {
    /// The pair's scale relative to the chain.
    pub fn scale(&self) -> f64 {
        self.scale
    }
}

/// What a pair added.
#[derive(Clone, Debug)]
pub struct Attached {
    /// The keyframes it put on the chain (both views for the first pair), oldest first.
    pub added: Vec<Stamp>,
    /// The pair's scale relative to the chain (1 for the first pair).
    pub scale: f64,
    /// The new keyframe's pose from the pair and from tracking when it arrived, apart by this
    /// rotation (degrees) and translation (chain units), when it was tracked.
    pub disagreement: Option<(f64, f64)>,
}

/// How the chain works.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OdometryParams {
    /// Tracking's settings.
    pub tracking: TrackingParams,
    /// Pixels of two pointmaps above this confidence relate their scales.
    pub scale_confidence: f32,
}

impl Default for OdometryParams {
    fn default() -> Self {
        Self { tracking: TrackingParams::default(), scale_confidence: 3.0 }
    }
}

/// The chain, and the tracked poses of keyframes not yet on it.
pub struct Odometry<F> {
    params: OdometryParams,
    keyframes: VecDeque<Arc<ChainKeyframe<F>>>,
    /// Every keyframe ever put on the chain: input time and pose.
    path: Vec<(Stamp, TOriginKeyframe)>,
    /// Poses tracking gave frames that became keyframes, until their pair arrives.
    tracked_keyframes: BTreeMap<Stamp, TOdomFrame>,
    /// The pairs' checks of tracking's covariance.
    inflation: Inflation,
}

impl<F: Clone> Odometry<F> {
    /// An empty chain.
    pub fn new(params: OdometryParams) -> Self {
        Self {
            params,
            keyframes: VecDeque::new(),
            path: Vec::new(),
            tracked_keyframes: BTreeMap::new(),
            inflation: Inflation::default(),
        }
    }

    /// New settings (a parameter change); the chain stays.
    pub fn set_params(&mut self, params: OdometryParams) {
        self.params = params;
    }

    /// The settings.
    pub fn params(&self) -> &OdometryParams {
        &self.params
    }

    /// Forgets everything (time went backwards: a new sequence).
    pub fn reset(&mut self) {
        self.keyframes.clear();
        self.path.clear();
        self.tracked_keyframes.clear();
        self.inflation = Inflation::default();
    }

    /// The newest keyframe on the chain: what frames are tracked against and new keyframes
    /// pair with.
    pub fn anchor(&self) -> Option<Arc<ChainKeyframe<F>>> {
        self.newest(1).pop()
    }

    /// The `n` newest keyframes on the chain, newest first: what a frame is tracked against,
    /// the newest first and the others when it fails.
    pub fn newest(&self, n: usize) -> Vec<Arc<ChainKeyframe<F>>> {
        let mut kept: Vec<_> = self.keyframes.iter().cloned().collect();
        kept.sort_by_key(|k| std::cmp::Reverse(k.stamp));
        kept.truncate(n);
        kept
    }

    /// The keyframe at `stamp`, if it is on the chain (and still kept).
    pub fn keyframe(&self, stamp: Stamp) -> Option<&Arc<ChainKeyframe<F>>> {
        self.keyframes.iter().find(|k| k.stamp == stamp)
    }

    /// Every keyframe put on the chain, in input time order, with its pose.
    pub fn path(&self) -> &[(Stamp, TOriginKeyframe)] {
        &self.path
    }

    /// The odometry's drift as the newest pair corrected it (identity before the first).
    pub fn t_origin_odom(&self) -> TOriginOdom {
        self.anchor().map_or_else(Transform::identity, |a| a.t_origin_odom())
    }

    /// Remembers the pose tracking gave a frame that became a keyframe: its pose in the
    /// odometry when its pair joins, and the pair's check of it.
    pub fn keyframe_tracked(&mut self, stamp: Stamp, pose: TOdomFrame) {
        self.tracked_keyframes.insert(stamp, pose);
        while self.tracked_keyframes.len() > KEEP_KEYFRAMES {
            self.tracked_keyframes.pop_first();
        }
    }

    /// Moves a keyframe in the odometry (and so `map -> odom` with it, when it is the newest);
    /// false when it is not on the chain.
    pub fn repose(&mut self, r: Reposed) -> bool {
        let Some(kf) = self.keyframes.iter_mut().find(|k| k.stamp == r.keyframe) else { return false };
        Arc::make_mut(kf).t_odom_kf = r.t_odom_kf;
        true
    }

    /// Puts a pair's second view on the chain (and its first, when it is the first pair):
    /// [`Odometry::anchor_of`], [`Odometry::join`] and [`Odometry::commit`] in one.
    pub fn attach(
        &mut self,
        first: PairView<F>,
        second: PairView<F>,
        out: &PairOutput,
    ) -> Result<Attached, NotAttached> {
        let anchor = self.anchor_of(first.stamp);
        let link = Link::Relative(self.params.scale_confidence);
        let joining = Self::join(anchor, first, second, out, link, (None, &self.params.tracking))?;
        self.commit(joining)
    }

    /// Where a pair starting at the keyframe `stamp` stands: on the chain, starting it, or off.
    pub fn anchor_of(&self, stamp: Stamp) -> Anchor<F> {
        match self.keyframe(stamp) {
            Some(a) => Anchor::OnChain(a.clone()),
            None if self.keyframes.is_empty() => Anchor::NewChain,
            None => Anchor::Off,
        }
    }

    /// The pair's keyframes as they would join the chain from `anchor`: its scale relative to
    /// the chain (as `link` says), its second keyframe's pose and points in it, and the pair's
    /// check of tracking (with `check`'s camera, CameraInfo's when known, and settings). The
    /// costly part of joining (a depth ratio, a copy of the pointmap, a tracking), done without
    /// the chain, so a driver that shares the chain holds its lock only for
    /// [`Odometry::anchor_of`] and [`Odometry::commit`].
    pub fn join(
        anchor: Anchor<F>,
        first: PairView<F>,
        second: PairView<F>,
        out: &PairOutput,
        link: Link,
        check: (Option<&Camera>, &TrackingParams),
    ) -> Result<Joining<F>, NotAttached> {
        let pose = out.pose.as_ref().map_err(|e| NotAttached::NoPose(e.clone()))?;
        let view2 = out.view2.as_ref().ok_or(NotAttached::NoPose(NoPose::NotReturned))?;
        let check = check_pair(&first.keypoints, &second.keypoints, out, pose, check);
        let (anchor, scale, origin) = match (anchor, link) {
            (Anchor::OnChain(a), Link::Measured) => (a, 1.0, false),
            (Anchor::OnChain(a), Link::Relative(c) | Link::Carried(c)) => {
                let s = depth_ratio(&a.pointmap, &out.view1, c).ok_or(NotAttached::ScaleUnknown)?;
                (a, s, false)
            }
            (Anchor::NewChain, Link::Carried(_)) => return Err(NotAttached::Unmeasured),
            (Anchor::NewChain, _) => {
                let origin = Arc::new(ChainKeyframe {
                    stamp: first.stamp,
                    payload: first.payload,
                    keypoints: first.keypoints,
                    pointmap: out.view1.clone(),
                    rgb: out.rgb1.clone(),
                    mapping: out.mappings[0],
                    focal: pose.focal1,
                    t_origin_kf: Transform::identity(),
                    t_odom_kf: Transform::identity(),
                    tracking_inflation: 1.0,
                });
                (origin, 1.0, true)
            }
            (Anchor::Off, _) => return Err(NotAttached::Unanchored),
        };
        let t_a_b = &pose.t_cam1_cam2;
        let t_a_b = Transform::<KeyframeCam, KeyframeCam>::new(t_a_b.rotation, t_a_b.translation * scale);
        let b = ChainKeyframe {
            stamp: second.stamp,
            payload: second.payload,
            keypoints: second.keypoints,
            pointmap: scaled(view2, scale),
            rgb: out.rgb2.clone(),
            mapping: out.mappings[1],
            focal: pose.focal2,
            t_origin_kf: anchor.t_origin_kf.compose(&t_a_b),
            // Replaced by its tracked pose, if it has one, in `commit`.
            t_odom_kf: anchor.t_odom_kf.compose(&t_a_b),
            tracking_inflation: anchor.tracking_inflation,
        };
        Ok(Joining { anchor, origin, second: b, scale, check })
    }

    /// Adds what [`Odometry::join`] prepared, unless the chain changed under it meanwhile (its
    /// anchor left, someone else started the chain, the keyframe is already on it).
    pub fn commit(&mut self, j: Joining<F>) -> Result<Attached, NotAttached> {
        if self.keyframe(j.second.stamp).is_some() {
            return Err(NotAttached::Known);
        }
        let mut added = Vec::new();
        let t_origin_odom = j.anchor.t_origin_odom();
        if j.origin {
            if !self.keyframes.is_empty() {
                return Err(NotAttached::Unanchored);
            }
            added.push(j.anchor.stamp);
            self.push(j.anchor);
        } else if self.keyframe(j.anchor.stamp).is_none() {
            return Err(NotAttached::Unanchored);
        }
        let mut second = j.second;
        if let Some(m2) = j.check {
            self.inflation.observe(m2);
        }
        second.tracking_inflation = self.inflation.factor();
        let t_origin_b = second.t_origin_kf;
        let disagreement = self.tracked_keyframes.remove(&second.stamp).map(|tracked| {
            second.t_odom_kf = TOdomKeyframe::new(tracked.rotation, tracked.translation);
            // Tracking's pose on the chain, as the anchor's pair corrected the odometry.
            let tracked = t_origin_odom.compose(&second.t_odom_kf);
            (tracked.rotation_error_deg(&t_origin_b), (tracked.translation - t_origin_b.translation).norm())
        });
        added.push(second.stamp);
        self.push(Arc::new(second));
        Ok(Attached { added, scale: j.scale, disagreement })
    }

    fn push(&mut self, keyframe: Arc<ChainKeyframe<F>>) {
        let at = self.path.partition_point(|(s, _)| *s < keyframe.stamp);
        self.path.insert(at, (keyframe.stamp, keyframe.t_origin_kf));
        self.keyframes.push_back(keyframe);
        while self.keyframes.len() > KEEP_KEYFRAMES {
            // The oldest by input time goes (pairs start at the newest).
            if let Some(oldest) = (0..self.keyframes.len()).min_by_key(|&i| self.keyframes[i].stamp) {
                self.keyframes.remove(oldest);
            }
        }
    }
}

/// A frame placed by tracking.
#[derive(Clone, Debug)]
pub struct FramePose {
    /// Its pose in the odometry.
    pub t_odom_frame: TOdomFrame,
    /// The keyframe it was tracked against.
    pub keyframe: Stamp,
    /// Tracking's evidence.
    pub tracked: Tracked,
    /// The uncertainty of `t_odom_frame` (a left perturbation in the odometry's frame):
    /// tracking's against its keyframe, scaled by the keyframe's `tracking_inflation`; the
    /// keyframe's pose is taken as known (the chain's drift is not in it).
    pub covariance: Option<Covariance6>,
}

/// Tracks a frame against `anchor` (see [`Odometry::anchor`]; taken out of any lock, so that
/// tracking does not hold up a pair being attached). `camera`: the camera when known
/// (CameraInfo), else a pinhole of the keyframe's estimate.
pub fn track_frame<F>(
    anchor: Option<&ChainKeyframe<F>>,
    frame: &Keypoints,
    camera: Option<Camera>,
    params: &TrackingParams,
) -> Result<FramePose, NotTracked> {
    let kf = anchor.ok_or(NotTracked::NoMap)?;
    let camera = camera.unwrap_or_else(|| Camera { k: kf.estimated_intrinsics(), lens: Lens::Pinhole });
    let target = TrackTarget { keypoints: &kf.keypoints, pointmap: &kf.pointmap, mapping: &kf.mapping };
    let tracked = track(frame, &target, &camera, params)?;
    let covariance = tracked.covariance.map(|c| covariance_in(&kf.t_odom_kf, &(c * kf.tracking_inflation)));
    Ok(FramePose { t_odom_frame: kf.t_odom_kf.compose(&tracked.t_kf_frame), keyframe: kf.stamp, tracked, covariance })
}

/// The pair's second view tracked against its first view's pointmap (with `camera`, or a
/// pinhole of the first view's estimated focal) beside the pair's own pose: the gap's squared
/// Mahalanobis distance under tracking's covariance (both in the pair's scale).
fn check_pair(
    first: &Keypoints,
    second: &Keypoints,
    out: &PairOutput,
    pose: &PairPose,
    (camera, params): (Option<&Camera>, &TrackingParams),
) -> Option<f64> {
    let camera = camera.cloned().unwrap_or_else(|| Camera {
        k: estimated_intrinsics(&out.mappings[0], &out.view1, pose.focal1),
        lens: Lens::Pinhole,
    });
    let target = TrackTarget { keypoints: first, pointmap: &out.view1, mapping: &out.mappings[0] };
    let tracked = track(second, &target, &camera, params).ok()?;
    let covariance = tracked.covariance?;
    let paired = Transform::<KeyframeCam, FrameCam>::new(pose.t_cam1_cam2.rotation, pose.t_cam1_cam2.translation);
    Some(mahalanobis2(&tracked.t_kf_frame, &paired, &covariance))
}
