//! Placing a frame against a keyframe that has a pointmap: the frame's SuperPoint descriptors
//! matched to the keyframe's (mutual nearest neighbours with a ratio test), each matched
//! keyframe keypoint lifted to 3-D from the keyframe's own pointmap (the grid pixel the
//! preprocessing put it on, confident points only), then PnP-RANSAC of the frame's keypoints
//! against those points. What DUSt3R gives a keyframe every few seconds, SuperPoint carries to
//! every frame.

use nalgebra::{Vector2, Vector3};

use super::matching::{match_descriptors, MatchParams};
use crate::dust3r::{InputMapping, Pointmap};
use crate::geometry::lens::Camera;
use crate::geometry::pnp::{pose_covariance, solve_pnp_ransac, Covariance6, PnpSolution};
use crate::geometry::{PnpError, RansacParams, Transform};
use crate::superpoint::Keypoints;

/// A keyframe's camera.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyframeCam;
/// A tracked frame's camera.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameCam;

/// A frame's pose in its keyframe's camera frame.
pub type TKeyframeFrame = Transform<KeyframeCam, FrameCam>;

/// How tracking decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrackingParams {
    /// Which descriptor matches count.
    pub matching: MatchParams,
    /// Which count on a second try, for a frame that `matching` places on no keyframe: a
    /// camera that turned fast (or a node that fell behind it) sees its keypoints' descriptors
    /// change more than `matching` allows, and RANSAC's inlier count guards the looser matches.
    pub second_try: MatchParams,
    /// Keyframe points whose confidence is at most this are not used.
    pub min_confidence: f32,
    /// Fewest PnP inliers for a pose.
    pub min_inliers: usize,
    /// PnP's RANSAC.
    pub ransac: RansacParams,
}

/// The lowest similarity of a second try's match (mutual nearest neighbours, no ratio test).
pub const SECOND_TRY_SIMILARITY: f32 = 0.5;

impl TrackingParams {
    /// The same with the second try's matching in place of the first's.
    pub fn second_try(&self) -> Self {
        Self { matching: self.second_try, ..*self }
    }
}

impl Default for TrackingParams {
    fn default() -> Self {
        Self {
            matching: MatchParams { max_distance_ratio: 0.9, ..MatchParams::default() },
            second_try: MatchParams { min_similarity: SECOND_TRY_SIMILARITY, max_distance_ratio: 1.0 },
            min_confidence: 3.0,
            min_inliers: 20,
            ransac: RansacParams { max_iterations: 200, threshold_px: 4.0, confidence: 0.999, seed: 0x7ac4 },
        }
    }
}

/// What a frame is tracked against: a keyframe's keypoints and its own pointmap.
pub struct TrackTarget<'a> {
    /// The keyframe's SuperPoint output (its frame's pixels).
    pub keypoints: &'a Keypoints,
    /// Its points in its own camera frame, on the network grid.
    pub pointmap: &'a Pointmap,
    /// Where that grid lies in the keyframe's pixels.
    pub mapping: &'a InputMapping,
}

/// A frame placed against a keyframe.
#[derive(Clone, Debug)]
pub struct Tracked {
    /// The frame's camera in the keyframe's camera frame (the pointmap's scale).
    pub t_kf_frame: TKeyframeFrame,
    /// Descriptor matches to the keyframe.
    pub matches: usize,
    /// Matches with a confident keyframe point.
    pub points: usize,
    /// PnP inliers among those that came from pointmaps (a point seeded between keyframes
    /// does not count: it shows the view, not the map, holding the frame).
    pub inliers: usize,
    /// The uncertainty of `t_kf_frame` (a left perturbation in the keyframe's frame, ROS's
    /// order), from PnP's inliers; `None` when it cannot be stated.
    pub covariance: Option<Covariance6>,
    /// Placed only by the second try's looser matching.
    pub second_try: bool,
    /// Placed only once the last frame had points drawn from the keyframes' pointmaps.
    pub drawn: bool,
}

/// Why a frame has no pose (it gets none rather than a guess).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum NotTracked {
    /// No keyframe has a pointmap yet (before the first DUSt3R pair).
    #[error("no keyframe has a pointmap yet")]
    NoMap,
    /// Too few of the frame's keypoints match the keyframe's (and, tracked with memory, the last
    /// tracked frame's).
    #[error("{got} keypoints match the keyframe or the last tracked frame ({need} needed)")]
    TooFewMatches {
        /// Matches found.
        got: usize,
        /// Needed.
        need: usize,
    },
    /// Too few matches land on confident points of the keyframe's pointmap.
    #[error("{got} matches have a confident keyframe point ({need} needed)")]
    TooFewPoints {
        /// Matches with a point.
        got: usize,
        /// Needed.
        need: usize,
    },
    /// PnP found no pose.
    #[error(transparent)]
    Pnp(#[from] PnpError),
    /// PnP's pose has too few inliers.
    #[error("{got} PnP inliers ({need} needed)")]
    TooFewInliers {
        /// Inliers.
        got: usize,
        /// Needed.
        need: usize,
    },
}

impl NotTracked {
    /// A short name for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            NotTracked::NoMap => "no_map",
            NotTracked::TooFewMatches { .. } => "few_matches",
            NotTracked::TooFewPoints { .. } => "few_points",
            NotTracked::Pnp(_) => "pnp",
            NotTracked::TooFewInliers { .. } => "few_inliers",
        }
    }
}

/// Neighbouring grid points whose depths differ by more than this factor straddle an edge:
/// blending them would invent a point in between.
const MAX_BLEND_DEPTH_RATIO: f64 = 1.05;

/// `map`'s point at grid index `i` when it is usable: confident (above `min_confidence`),
/// finite and in front of the camera.
pub fn confident_point(map: &Pointmap, i: usize, min_confidence: f32) -> Option<Vector3<f64>> {
    if !(*map.confidence.get(i)? > min_confidence) {
        return None;
    }
    let p = map.points.get(i * 3..i * 3 + 3)?;
    let p = Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64);
    (p.iter().all(|c| c.is_finite()) && p.z > 0.0).then_some(p)
}

/// The point of `map` (grid laid over the frame by `mapping`) seen at frame pixel (x, y):
/// bilinear between the four grid pixels around it when all four are usable and at one depth,
/// else the nearest grid pixel's; a grid pixel is usable when it is confident (above
/// `min_confidence`), finite and in front of the camera.
pub fn point_at(map: &Pointmap, mapping: &InputMapping, x: f64, y: f64, min_confidence: f32) -> Option<Vector3<f64>> {
    let (u, v) = mapping.to_network(x, y);
    let usable = |u: f64, v: f64| -> Option<Vector3<f64>> {
        if !(u >= 0.0 && v >= 0.0 && (u as usize) < map.width && (v as usize) < map.height) {
            return None;
        }
        confident_point(map, v as usize * map.width + u as usize, min_confidence)
    };
    let (u0, v0) = (u.floor(), v.floor());
    let (a, b) = (u - u0, v - v0);
    let corners = [(u0, v0), (u0 + 1.0, v0), (u0, v0 + 1.0), (u0 + 1.0, v0 + 1.0)].map(|(u, v)| usable(u, v));
    if let [Some(p00), Some(p10), Some(p01), Some(p11)] = corners {
        let (lo, hi) = [p00.z, p10.z, p01.z, p11.z].iter().fold((f64::MAX, 0.0f64), |(l, h), &z| (l.min(z), h.max(z)));
        if hi <= lo * MAX_BLEND_DEPTH_RATIO {
            return Some(p00 * ((1.0 - a) * (1.0 - b)) + p10 * (a * (1.0 - b)) + p01 * ((1.0 - a) * b) + p11 * (a * b));
        }
    }
    usable(u.round(), v.round())
}

/// PnP-RANSAC of a frame's undistorted keypoints `pixels` against their points `world` (in
/// frame `W`), with at least `min_inliers` (6 at the least) points and inliers; the pose and
/// PnP's covariance (a left perturbation in `W`).
pub fn solve<W>(
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    camera: &Camera,
    params: &TrackingParams,
) -> Result<(PnpSolution<FrameCam, W>, Option<Covariance6>), NotTracked> {
    let need = params.min_inliers.max(6);
    if world.len() < need {
        return Err(NotTracked::TooFewPoints { got: world.len(), need });
    }
    let solution = solve_pnp_ransac::<FrameCam, W>(world, pixels, &camera.k, &params.ransac)?;
    if solution.inliers < need {
        return Err(NotTracked::TooFewInliers { got: solution.inliers, need });
    }
    let covariance = pose_covariance(&solution.pose, world, pixels, &camera.k, params.ransac.threshold_px);
    Ok((solution, covariance))
}

/// The pose of the frame whose keypoints are `frame` (seen by `camera`, in its pixels) against
/// `target`. The frame's keypoints are undistorted for PnP; the keyframe's are looked up in its
/// pointmap where they are, since DUSt3R saw the image as it arrived.
pub fn track(
    frame: &Keypoints,
    target: &TrackTarget<'_>,
    camera: &Camera,
    params: &TrackingParams,
) -> Result<Tracked, NotTracked> {
    let need = params.min_inliers.max(6);
    let matches = match_descriptors(frame, target.keypoints, &params.matching);
    if matches.len() < need {
        return Err(NotTracked::TooFewMatches { got: matches.len(), need });
    }
    let (mut world, mut pixels) = (Vec::with_capacity(matches.len()), Vec::with_capacity(matches.len()));
    for m in &matches {
        let [kx, ky] = target.keypoints.xy[m.train];
        let Some(p) = point_at(target.pointmap, target.mapping, kx as f64, ky as f64, params.min_confidence) else {
            continue;
        };
        let [fx, fy] = frame.xy[m.query];
        if let Some((u, v)) = camera.undistort_pixel(fx as f64, fy as f64) {
            world.push(p);
            pixels.push(Vector2::new(u, v));
        }
    }
    let (solution, covariance) = solve::<KeyframeCam>(&world, &pixels, camera, params)?;
    Ok(Tracked {
        covariance,
        t_kf_frame: solution.pose.inverse(),
        matches: matches.len(),
        points: world.len(),
        inliers: solution.inliers,
        second_try: false,
        drawn: false,
    })
}
