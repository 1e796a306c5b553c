//! Tracking with memory of the previous frame: a frame is placed against the points the last
//! tracked frame was placed with, which its keypoints carry to the frame through frame-to-frame
//! matches, and, for keypoints that carry none, against the newest keyframe's points (the last
//! frame is one frame away, the keyframe may be tens of frames and degrees away). A carried
//! point keeps the depth its keyframe gave it but moves towards the ray the last frame saw it
//! along, so a frame is placed mostly relative to its predecessors' view, as a frame-to-frame
//! odometry does, and keyframe matches hold it to the map. PnP's outliers drop their points.
//! A tracked frame's keypoints without a point get one seeded at the depth of the plane through
//! their neighbours' points, so a camera that turns away from every keyframe's pointmap (or
//! whose pair answers late) keeps points to be placed against; a pointmap point always takes a
//! keypoint's place over a seed, and a seed's depth follows its pointmap neighbours' when it has
//! them. When a frame's matches still land on too few points (the last frame was placed on few,
//! and its keyframe's pair has not joined), the last frame's keypoints without a point are given
//! one where the keyframes' pointmaps, drawn into its view, have a surface. With a registered
//! depth image, a tracked frame's keypoints carry the points it measured instead (see
//! [`CarriedTracker::measure_last`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use nalgebra::{Matrix3, Vector2, Vector3};

use super::matching::match_descriptors;
use super::odometry::{ChainKeyframe, FramePose, OdomOrigin, Reposed, Stamp, TOdomFrame};
use super::tracking::{confident_point, solve, FrameCam, NotTracked, Tracked, TrackingParams};
use crate::dust3r::Pointmap;
use crate::geometry::lens::{Camera, Lens};
use crate::geometry::pnp::{covariance_in, Covariance6};
use crate::geometry::Transform;
use crate::image::depth::DepthImage;
use crate::superpoint::Keypoints;

/// The last tracked frame: its keypoints and the chain point each carries (see the module's
/// comment).
struct LastFrame {
    /// The chain it was placed on (points of another chain mean nothing here).
    chain: u64,
    keypoints: Arc<Keypoints>,
    points: Vec<Option<CarriedPoint>>,
    /// Where it was placed.
    t_odom_frame: TOdomFrame,
    /// The camera it was placed with.
    camera: Camera,
    /// Whether the keyframes' pointmaps were drawn into it (see [`LastFrame::draw_pointmaps`]).
    drawn: bool,
}

/// A point a keypoint carries, and where it came from.
#[derive(Clone, Copy, Debug)]
struct CarriedPoint {
    point: Vector3<f64>,
    origin: Origin,
}

/// Where a carried point came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A keyframe's pointmap, moved since by its sightings (and by the depth images of the frames
    /// that carried it, where they measured it).
    Pointmap,
    /// A frame's registered depth image, the keypoint not reaching back to a pointmap.
    Measured,
    /// Seeded between keyframes from the depth of its neighbours (see [`Neighbours`]): no
    /// measurement of its own.
    Seeded,
}

impl CarriedPoint {
    fn seeded(&self) -> bool {
        self.origin == Origin::Seeded
    }
}

/// A frame seen recently, tracked or not: a keyframe whose pair joins after it is tracked
/// through them (see [`CarriedTracker::catch_up`]).
#[derive(Clone)]
struct Seen {
    /// The chain it was tracked on (frames of another one are not caught up with).
    chain: u64,
    stamp: Stamp,
    keypoints: Arc<Keypoints>,
    camera: Option<Camera>,
    /// The pose it went out with, if it was tracked.
    went_out: Option<TOdomFrame>,
    /// The depth image its keypoints were measured by, if any.
    depth: Option<FrameDepth>,
}

/// A registered depth image taken with a frame (the nearest in time), and the size of the
/// colour image it is registered to.
#[derive(Clone, Debug)]
pub struct FrameDepth {
    /// The depth image.
    pub image: Arc<DepthImage>,
    /// The colour image's width and height, pixels.
    pub colour: (u32, u32),
}

/// The most recent frames kept for catching up (bounds the work when a pair joins late).
const CATCH_UP_FRAMES: usize = 30;

/// The frame side's tracker: what the last tracked frame saw, and the frames seen since the
/// newest keyframe it caught up from.
#[derive(Default)]
pub struct CarriedTracker {
    last: Option<LastFrame>,
    recent: VecDeque<Seen>,
    caught_up_from: Option<(u64, Stamp)>,
}

/// A frame's correspondences: points in the odometry's frame, undistorted pixels, and which
/// keypoint each is.
#[derive(Default)]
struct Correspondences {
    world: Vec<Vector3<f64>>,
    pixels: Vec<Vector2<f64>>,
    keypoint: Vec<usize>,
    /// Where each point came from.
    origin: Vec<Origin>,
    /// Keypoints matched to the keyframe or the last frame.
    matched: usize,
}

/// A frame placed by [`Correspondences::place`].
struct Placed {
    t_frame_odom: Transform<FrameCam, OdomOrigin>,
    /// Which correspondences agree with the pose.
    is_inlier: Vec<bool>,
    /// PnP's covariance (a left perturbation in the odometry's frame) from the points that
    /// placed it: a seed's depth is its neighbours', no news of its own.
    covariance: Option<Covariance6>,
}

impl Correspondences {
    /// The frame's pose from the points that came from pointmaps, and from the seeds too only
    /// when those do not place it: a seed's depth is its neighbours', so it stands in for them
    /// and never outvotes them. Which correspondences agree with it: PnP's inliers, and the
    /// seeds it did not use that reproject within RANSAC's threshold.
    fn place(&self, camera: &Camera, params: &TrackingParams) -> Result<Placed, NotTracked> {
        let threshold = params.ransac.threshold_px;
        let anchored = |i: &usize| self.origin[*i] != Origin::Seeded;
        let world: Vec<Vector3<f64>> = (0..self.world.len()).filter(anchored).map(|i| self.world[i]).collect();
        let pixels: Vec<Vector2<f64>> = (0..self.world.len()).filter(anchored).map(|i| self.pixels[i]).collect();
        let (solution, covariance) = match solve::<OdomOrigin>(&world, &pixels, camera, params) {
            Err(_) if world.len() < self.world.len() => {
                let (all, covariance) = solve::<OdomOrigin>(&self.world, &self.pixels, camera, params)?;
                return Ok(Placed { t_frame_odom: all.pose, is_inlier: all.is_inlier, covariance });
            }
            placed => placed?,
        };
        let mut used = solution.is_inlier.iter();
        let is_inlier = (0..self.world.len())
            .map(|i| match self.origin[i] == Origin::Seeded {
                false => used.next() == Some(&true),
                true => camera
                    .k
                    .project(&solution.pose.apply(&self.world[i]))
                    .is_some_and(|p| (p - self.pixels[i]).norm() <= threshold),
            })
            .collect();
        Ok(Placed { t_frame_odom: solution.pose, is_inlier, covariance })
    }
}

impl CarriedTracker {
    /// Forgets the last frame and the recent ones (a new chain, a reset).
    pub fn forget(&mut self) {
        self.last = None;
        self.recent.clear();
        self.caught_up_from = None;
    }

    /// Places `frame` on chain `chain` against `anchor` (its newest keyframe) and the last
    /// tracked frame's points; `camera` as in [`super::odometry::track_frame`]. An untracked
    /// frame leaves the last tracked one in place for the next.
    pub fn track<F>(
        &mut self,
        chain: u64,
        anchor: Option<&ChainKeyframe<F>>,
        frame: &Arc<Keypoints>,
        camera: Option<Camera>,
        params: &TrackingParams,
    ) -> Result<FramePose, NotTracked> {
        let kf = anchor.ok_or(NotTracked::NoMap)?;
        let camera = camera_or_estimated(camera, kf);
        let last = self.last.as_ref().filter(|l| l.chain == chain);
        let c = correspondences(kf, last, frame, &camera, params);
        let need = params.min_inliers.max(6);
        if c.matched < need {
            return Err(NotTracked::TooFewMatches { got: c.matched, need });
        }
        let Placed { t_frame_odom, is_inlier, covariance: raw } = c.place(&camera, params)?;
        let on_pointmaps =
            is_inlier.iter().zip(&c.origin).filter(|&(&inlier, &origin)| inlier && origin == Origin::Pointmap).count();
        let points = carried_points(&c, &is_inlier, &t_frame_odom, &camera, frame);
        let t_odom_frame = t_frame_odom.inverse();
        self.last = Some(LastFrame { chain, keypoints: frame.clone(), points, t_odom_frame, camera, drawn: false });
        let tracked = Tracked {
            t_kf_frame: kf.t_odom_kf.inverse().compose(&t_odom_frame),
            matches: c.matched,
            points: c.world.len(),
            inliers: on_pointmaps,
            covariance: raw.map(|cov| covariance_in(&kf.t_odom_kf.inverse(), &cov)),
            second_try: false,
            drawn: false,
        };
        let covariance = raw.map(|cov| cov * kf.tracking_inflation);
        Ok(FramePose { t_odom_frame, keyframe: kf.stamp, tracked, covariance })
    }
}

/// Keyframes a frame is tried against, newest first, when the newest does not place it: the
/// view of a handheld camera comes back to where an earlier keyframe saw it.
pub const TRY_KEYFRAMES: usize = 4;

impl CarriedTracker {
    /// [`CarriedTracker::track`] of `frame` (stamped `stamp`) against `keyframes` (newest first)
    /// in turn until one places it, then once more with the second try's looser matching
    /// (ORB-SLAM's wider search when too few matches); none: the newest's first reason. Call
    /// [`CarriedTracker::catch_up`] first.
    pub fn track_any<F>(
        &mut self,
        chain: u64,
        keyframes: &[Arc<ChainKeyframe<F>>],
        frame: &Arc<Keypoints>,
        stamp: Stamp,
        camera: Option<Camera>,
        params: &TrackingParams,
    ) -> Result<FramePose, NotTracked> {
        let placed = self.try_each(chain, keyframes, frame, camera, params);
        if self.recent.len() == CATCH_UP_FRAMES {
            self.recent.pop_front();
        }
        let went_out = placed.as_ref().ok().map(|p| p.t_odom_frame);
        self.recent.push_back(Seen { chain, stamp, keypoints: frame.clone(), camera, went_out, depth: None });
        placed
    }

    /// The frame [`CarriedTracker::track_any`] just lost, tracked again (on its chain, with its
    /// camera) with keypoints described anew: if they place it, it is remembered with them
    /// instead. None: they do not, or the last frame seen was not lost.
    pub fn track_again<F>(
        &mut self,
        keyframes: &[Arc<ChainKeyframe<F>>],
        frame: &Arc<Keypoints>,
        params: &TrackingParams,
    ) -> Option<FramePose> {
        let (chain, camera) = self.recent.back().filter(|s| s.went_out.is_none()).map(|s| (s.chain, s.camera))?;
        let placed = self.try_each(chain, keyframes, frame, camera, params).ok()?;
        if let Some(lost) = self.recent.back_mut() {
            lost.keypoints = frame.clone();
            lost.went_out = Some(placed.t_odom_frame);
        }
        Some(placed)
    }

    /// The frame just placed, its keypoints measured by `depth` (its registered depth image):
    /// each that the image has a depth for carries the point there, and the next frame is placed
    /// against those, as an RGB-D odometry places each frame against the last one's depth. How
    /// many keypoints it measured (none when the last frame seen was not placed).
    pub fn measure_last(&mut self, depth: FrameDepth) -> usize {
        let (Some(seen), Some(last)) = (self.recent.back_mut(), self.last.as_mut()) else { return 0 };
        if seen.went_out.is_none() || !Arc::ptr_eq(&seen.keypoints, &last.keypoints) {
            return 0;
        }
        let measured = last.measure(&depth);
        seen.depth = Some(depth);
        measured
    }

    /// The stamp of the newest recent frame tracked on `chain`, if any.
    pub fn last_tracked(&self, chain: u64) -> Option<Stamp> {
        self.recent.iter().rev().find(|s| s.chain == chain && s.went_out.is_some()).map(|s| s.stamp)
    }

    /// Each keyframe in turn, then again once the last frame has points drawn from the
    /// keyframes' pointmaps when its matches landed on too few points, then the second try.
    fn try_each<F>(
        &mut self,
        chain: u64,
        keyframes: &[Arc<ChainKeyframe<F>>],
        frame: &Arc<Keypoints>,
        camera: Option<Camera>,
        params: &TrackingParams,
    ) -> Result<FramePose, NotTracked> {
        let mut first = None;
        for kf in keyframes {
            match self.track(chain, Some(kf), frame, camera, params) {
                Ok(pose) => return Ok(pose),
                Err(e) => first = first.or(Some(e)),
            }
        }
        let drawn = matches!(first, Some(NotTracked::TooFewPoints { .. }))
            && self.draw_into_last(chain, keyframes, camera, params);
        if drawn {
            for kf in keyframes {
                if let Ok(mut pose) = self.track(chain, Some(kf), frame, camera, params) {
                    pose.tracked.drawn = true;
                    return Ok(pose);
                }
            }
        }
        let second = params.second_try();
        if second.matching != params.matching {
            for kf in keyframes {
                if let Ok(mut pose) = self.track(chain, Some(kf), frame, camera, &second) {
                    pose.tracked.second_try = true;
                    pose.tracked.drawn = drawn;
                    return Ok(pose);
                }
            }
        }
        Err(first.unwrap_or(NotTracked::NoMap))
    }

    /// Once per newest keyframe: when frames came after it before its pair joined (a live
    /// node's DUSt3R answers late), the last frame becomes the keyframe, its keypoints carrying
    /// their pointmap points, and the frames since are tracked again in turn. The next frame
    /// is then placed against points carried over one frame's motion from the keyframe, not
    /// matched across the whole time its pair took.
    ///
    /// Those frames' poses have gone out, placed on carried points that drifted from the
    /// keyframe's: tracked again, the newest of them lands elsewhere, and the next frame would
    /// step by the difference. So the keyframe moves in the odometry instead, as far as keeps
    /// that frame where it went out, and the carried points with it; the returned pose is the
    /// keyframe's so moved, which the driver puts on the chain
    /// ([`super::odometry::Odometry::repose`]) before tracking the next frame against it.
    /// `map -> odom` takes up the difference, as REP 105 has it.
    pub fn catch_up<F>(
        &mut self,
        chain: u64,
        keyframes: &[Arc<ChainKeyframe<F>>],
        params: &TrackingParams,
    ) -> Option<Reposed> {
        let kf = keyframes.first()?;
        if self.caught_up_from.replace((chain, kf.stamp)) == Some((chain, kf.stamp)) {
            return None;
        }
        let since: Vec<Seen> = self.recent.iter().filter(|s| s.chain == chain && s.stamp > kf.stamp).cloned().collect();
        if since.is_empty() {
            return None;
        }
        let points = (0..kf.keypoints.len())
            .map(|i| {
                kf.odom_point(i, params.min_confidence).map(|point| CarriedPoint { point, origin: Origin::Pointmap })
            })
            .collect();
        let t_odom_frame = TOdomFrame::new(kf.t_odom_kf.rotation, kf.t_odom_kf.translation);
        let keypoints = Arc::new(kf.keypoints.clone());
        let camera = camera_or_estimated(since.first().and_then(|s| s.camera), kf);
        self.last = Some(LastFrame { chain, keypoints, points, t_odom_frame, camera, drawn: false });
        // The newest frame that went out and is placed again: its two poses.
        let mut newest = None;
        for seen in since {
            // A frame that was lost may be placed now; one that is not keeps the last in place.
            let again = self.try_each(chain, keyframes, &seen.keypoints, seen.camera, params);
            if let (Ok(_), Some(depth), Some(last)) = (&again, &seen.depth, self.last.as_mut()) {
                last.measure(depth);
            }
            if let (Some(went_out), Ok(again)) = (seen.went_out, again) {
                newest = Some((went_out, again.t_odom_frame));
            }
        }
        let (went_out, again) = newest?;
        let shift: Transform<OdomOrigin, OdomOrigin> = went_out.compose(&again.inverse());
        for p in self.last.iter_mut().flat_map(|l| l.points.iter_mut().flatten()) {
            p.point = shift.apply(&p.point);
        }
        Some(Reposed { keyframe: kf.stamp, t_odom_kf: shift.compose(&kf.t_odom_kf) })
    }
}

impl CarriedTracker {
    /// [`LastFrame::draw_pointmaps`] on the last frame of `chain`, once per last frame; whether
    /// it gave any keypoint a point.
    fn draw_into_last<F>(
        &mut self,
        chain: u64,
        keyframes: &[Arc<ChainKeyframe<F>>],
        camera: Option<Camera>,
        params: &TrackingParams,
    ) -> bool {
        let (Some(last), Some(kf)) = (self.last.as_mut().filter(|l| l.chain == chain && !l.drawn), keyframes.first())
        else {
            return false;
        };
        last.drawn = true;
        last.draw_pointmaps(keyframes, &camera_or_estimated(camera, kf), params.min_confidence) > 0
    }
}

/// `camera`, else the one `kf`'s pair estimated (see [`super::odometry::track_frame`]).
fn camera_or_estimated<F>(camera: Option<Camera>, kf: &ChainKeyframe<F>) -> Camera {
    camera.unwrap_or_else(|| Camera { k: kf.estimated_intrinsics(), lens: Lens::Pinhole })
}

/// Edge of the cells (undistorted pixels) in which pointmaps are drawn into a frame.
const DRAW_CELL_PX: f64 = 4.0;
/// Every how many of a pointmap's rows and columns are drawn (its grid is finer than a cell).
const DRAW_STRIDE: usize = 2;

impl LastFrame {
    /// Each keypoint that `depth` measured carries the point at that depth on its ray (keeping
    /// its origin if that was a pointmap, whose track it continues). How many.
    fn measure(&mut self, depth: &FrameDepth) -> usize {
        let mut measured = 0;
        for (q, &[x, y]) in self.keypoints.xy.iter().enumerate() {
            let (x, y) = (x as f64, y as f64);
            let (Some(z), Some((u, v))) = (depth.image.at(x, y, depth.colour), self.camera.undistort_pixel(x, y))
            else {
                continue;
            };
            let point = self.t_odom_frame.apply(&(self.camera.k.ray(u, v) * z));
            let origin = match self.points[q] {
                Some(p) if p.origin == Origin::Pointmap => Origin::Pointmap,
                _ => Origin::Measured,
            };
            self.points[q] = Some(CarriedPoint { point, origin });
            measured += 1;
        }
        measured
    }

    /// Gives its keypoints that carry no point one at the depth of the nearest surface that
    /// `keyframes`' confident pointmap points, drawn into its view at its pose, put in the
    /// keypoint's cell (as a z-buffer would); as seeds, since they stand on this frame's pose.
    /// This is ORB-SLAM's local map seen by projection: the frame after a keyframe whose pair
    /// has not joined, the camera turning fast, matches that keyframe well but finds few of its
    /// keypoints carrying points when it was itself placed on few. How many got one.
    fn draw_pointmaps<F>(
        &mut self,
        keyframes: &[Arc<ChainKeyframe<F>>],
        camera: &Camera,
        min_confidence: f32,
    ) -> usize {
        let cell_of = |px: &Vector2<f64>| cell(px, DRAW_CELL_PX);
        let pending: Vec<(usize, Vector2<f64>)> = (0..self.keypoints.len())
            .filter(|&q| self.points[q].is_none())
            .filter_map(|q| {
                let [x, y] = self.keypoints.xy[q];
                camera.undistort_pixel(x as f64, y as f64).map(|(u, v)| (q, Vector2::new(u, v)))
            })
            .collect();
        let mut nearest: HashMap<(i64, i64), f64> =
            pending.iter().map(|(_, px)| (cell_of(px), f64::INFINITY)).collect();
        let t_frame_odom = self.t_odom_frame.inverse();
        for kf in keyframes {
            let t_frame_kf = t_frame_odom.compose(&kf.t_odom_kf);
            for p in confident_points(&kf.pointmap, min_confidence) {
                let p = t_frame_kf.apply(&p);
                if let Some(z) = camera.k.project(&p).and_then(|px| nearest.get_mut(&cell_of(&px))) {
                    *z = z.min(p.z);
                }
            }
        }
        let mut drawn = 0;
        for (q, px) in pending {
            let z = nearest.get(&cell_of(&px)).copied().unwrap_or(f64::INFINITY);
            if z.is_finite() {
                let point = self.t_odom_frame.apply(&(camera.k.ray(px.x, px.y) * z));
                self.points[q] = Some(CarriedPoint { point, origin: Origin::Seeded });
                drawn += 1;
            }
        }
        drawn
    }
}

/// Every [`DRAW_STRIDE`]-th row and column's usable point of `map` (see [`confident_point`]),
/// in its camera's frame.
fn confident_points(map: &Pointmap, min_confidence: f32) -> impl Iterator<Item = Vector3<f64>> + '_ {
    (0..map.height).step_by(DRAW_STRIDE).flat_map(move |v| {
        (0..map.width).step_by(DRAW_STRIDE).filter_map(move |u| confident_point(map, v * map.width + u, min_confidence))
    })
}

/// How far a carried point moves towards where the frame saw it. All the way, keypoint noise
/// walks the points (and the poses placed on them) away from exact pointmaps: on the rendered
/// sample the odometry left its 5 mm bound; half way, a point is an average of its recent
/// sightings, and fr1/rpy keeps its gain (see docs/benchmarks.md).
const TOWARDS_SIGHTING: f64 = 0.5;

/// The points `frame`'s keypoints carry on: each inlier's point, moved towards the frame's ray
/// through the keypoint (placed at `t_frame_odom`), at the same depth, by [`TOWARDS_SIGHTING`]
/// (a seeded point's depth moves as far towards its pointmap neighbours' when it has them); and
/// for the other keypoints, a point seeded at their inlier neighbours' depth.
fn carried_points(
    c: &Correspondences,
    is_inlier: &[bool],
    t_frame_odom: &Transform<FrameCam, OdomOrigin>,
    camera: &Camera,
    frame: &Keypoints,
) -> Vec<Option<CarriedPoint>> {
    let t_odom_frame = t_frame_odom.inverse();
    let mut inliers: Vec<(usize, f64)> = (0..c.world.len())
        .filter(|&i| is_inlier.get(i) == Some(&true))
        .map(|i| (i, t_frame_odom.apply(&c.world[i]).z))
        .collect();
    let seeded = |i: usize| c.origin[i] == Origin::Seeded;
    let anchored = Neighbours::new(inliers.iter().filter(|(i, _)| !seeded(*i)).map(|&(i, z)| (c.pixels[i], z)));
    for (i, z) in inliers.iter_mut().filter(|(i, _)| seeded(*i)) {
        if let Some(pointmap_z) = anchored.depth_at(&c.pixels[*i]) {
            *z += (pointmap_z - *z) * TOWARDS_SIGHTING;
        }
    }
    let at = |px: &Vector2<f64>, z: f64| t_odom_frame.apply(&(camera.k.ray(px.x, px.y) * z));
    let mut points = vec![None; frame.len()];
    for &(i, z) in &inliers {
        let p = c.world[i];
        let point = p + (at(&c.pixels[i], z) - p) * TOWARDS_SIGHTING;
        points[c.keypoint[i]] = Some(CarriedPoint { point, origin: c.origin[i] });
    }
    let all = Neighbours::new(inliers.iter().map(|&(i, z)| (c.pixels[i], z)));
    for (q, &[x, y]) in frame.xy.iter().enumerate() {
        let Some((u, v)) = camera.undistort_pixel(x as f64, y as f64).filter(|_| points[q].is_none()) else {
            continue;
        };
        let px = Vector2::new(u, v);
        points[q] = all.depth_at(&px).map(|z| CarriedPoint { point: at(&px, z), origin: Origin::Seeded });
    }
    points
}

/// How far (undistorted pixels) a frame's inlier may be from a keypoint to seed its depth.
const SEED_RADIUS_PX: f64 = 50.0;
/// How many of the nearest such inliers a seed's plane is fitted to.
const SEED_NEIGHBOURS: usize = 10;
/// Fewest of them: one more than a plane needs, so a keypoint between two surfaces shows as a
/// bad fit.
const SEED_MIN_NEIGHBOURS: usize = 4;
/// Each neighbour's inverse depth must be within this fraction of the plane's: else they are
/// not one surface, and the keypoint may lie on an edge, where no depth of theirs is its own.
const SEED_FIT_TOLERANCE: f64 = 0.05;
/// Neighbours on a line (spread less than this across it) leave a plane's slope across it to
/// noise: such a keypoint gets no seed.
const SEED_MIN_SPREAD_PX: f64 = 3.0;

/// A frame's inliers (undistorted pixel, depth in the frame), bucketed in cells of
/// [`SEED_RADIUS_PX`] so a keypoint's neighbours are in the 3x3 cells around its own.
struct Neighbours {
    cells: HashMap<(i64, i64), Vec<Sighting>>,
}

/// An inlier as its frame saw it: undistorted pixel and depth.
type Sighting = (Vector2<f64>, f64);

impl Neighbours {
    fn new(seen: impl Iterator<Item = Sighting>) -> Self {
        let mut cells: HashMap<(i64, i64), Vec<Sighting>> = HashMap::new();
        for (px, z) in seen.filter(|(_, z)| *z > 0.0) {
            cells.entry(cell(&px, SEED_RADIUS_PX)).or_default().push((px, z));
        }
        Self { cells }
    }

    /// The depth at `px` of the plane through its nearest inliers (see [`SEED_NEIGHBOURS`]),
    /// when they fit it (see [`SEED_FIT_TOLERANCE`]). A plane's inverse depth is linear in the
    /// pixel, so the fit is linear too, and a keypoint whose neighbours all lie on one side
    /// (at the image's edge) still gets its own depth on a slope.
    fn depth_at(&self, px: &Vector2<f64>) -> Option<f64> {
        let (cu, cv) = cell(px, SEED_RADIUS_PX);
        let mut near: Vec<(f64, Vector3<f64>, f64)> = (cu - 1..=cu + 1)
            .flat_map(|u| (cv - 1..=cv + 1).map(move |v| (u, v)))
            .filter_map(|k| self.cells.get(&k))
            .flatten()
            .map(|(q, z)| ((q - px).norm(), Vector3::new(1.0, q.x - px.x, q.y - px.y), 1.0 / z))
            .filter(|(d, _, _)| *d <= SEED_RADIUS_PX)
            .collect();
        if near.len() < SEED_MIN_NEIGHBOURS {
            return None;
        }
        near.sort_by(|a, b| a.0.total_cmp(&b.0));
        near.truncate(SEED_NEIGHBOURS);
        if !spans_a_plane(near.iter().map(|(_, row, _)| Vector2::new(row.y, row.z))) {
            return None;
        }
        let mut normal = Matrix3::zeros();
        let mut rhs = Vector3::zeros();
        for (_, row, w) in &near {
            normal += row * row.transpose();
            rhs += row * *w;
        }
        let plane = normal.cholesky()?.solve(&rhs);
        let fits = near.iter().all(|(_, row, w)| (w - plane.dot(row)).abs() <= SEED_FIT_TOLERANCE * plane.x);
        (plane.x > 0.0 && fits).then(|| 1.0 / plane.x)
    }
}

/// Whether pixel offsets spread over an area, not along a line, so a plane through them has a
/// slope in every direction (their scatter's least eigenvalue, per point, is at least
/// [`SEED_MIN_SPREAD_PX`] squared).
fn spans_a_plane(offsets: impl Iterator<Item = Vector2<f64>> + Clone) -> bool {
    let n = offsets.clone().count() as f64;
    let mean = offsets.clone().sum::<Vector2<f64>>() / n;
    let scatter = offsets.map(|d| (d - mean) * (d - mean).transpose()).sum::<nalgebra::Matrix2<f64>>() / n;
    let (half_trace, det) = (scatter.trace() / 2.0, scatter.determinant());
    half_trace - (half_trace * half_trace - det).max(0.0).sqrt() >= SEED_MIN_SPREAD_PX * SEED_MIN_SPREAD_PX
}

/// The square cell of edge `edge` (pixels) that `px` lies in.
fn cell(px: &Vector2<f64>, edge: f64) -> (i64, i64) {
    ((px.x / edge).floor() as i64, (px.y / edge).floor() as i64)
}

/// The frame's keypoints with a point: from a match to the last frame (the point it carried),
/// else from a match to the keyframe (its pointmap, placed at the keyframe's odometry pose).
fn correspondences<F>(
    kf: &ChainKeyframe<F>,
    last: Option<&LastFrame>,
    frame: &Keypoints,
    camera: &Camera,
    params: &TrackingParams,
) -> Correspondences {
    let mut point: Vec<Option<CarriedPoint>> = vec![None; frame.len()];
    let mut matched = vec![false; frame.len()];
    if let Some(last) = last {
        for m in match_descriptors(frame, &last.keypoints, &params.matching) {
            matched[m.query] = true;
            point[m.query] = last.points.get(m.train).copied().flatten();
        }
    }
    for m in match_descriptors(frame, &kf.keypoints, &params.matching) {
        matched[m.query] = true;
        if point[m.query].is_some_and(|p| !p.seeded()) {
            continue;
        }
        if let Some(p) = kf.odom_point(m.train, params.min_confidence) {
            point[m.query] = Some(CarriedPoint { point: p, origin: Origin::Pointmap });
        }
    }
    let mut c = Correspondences { matched: matched.iter().filter(|&&m| m).count(), ..Correspondences::default() };
    for (q, p) in point.iter().enumerate() {
        let [x, y] = frame.xy[q];
        if let (Some(p), Some((u, v))) = (p, camera.undistort_pixel(x as f64, y as f64)) {
            c.world.push(p.point);
            c.origin.push(p.origin);
            c.pixels.push(Vector2::new(u, v));
            c.keypoint.push(q);
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dust3r::{InputMapping, Pointmap};
    use crate::geometry::{Intrinsics, Transform};
    use crate::rng::SplitMix64;
    use crate::vo::odometry::track_frame;
    use crate::vo::tracking::{point_at, KeyframeCam};

    const W: usize = 320;
    const H: usize = 240;
    const K: Intrinsics = Intrinsics { fx: 300.0, fy: 300.0, cx: 160.0, cy: 120.0 };

    /// The keyframe (at the origin) looking at a plane 2 m away: a pointmap on a grid that is
    /// the image itself, 150 keypoints on it with descriptors `descriptors`.
    fn keyframe(xy: &[[f32; 2]], descriptors: Vec<f32>) -> ChainKeyframe<()> {
        keyframe_over(xy, descriptors, |u| 2.0 + 0.002 * u)
    }

    /// The keyframe (at the origin) seeing depth `depth(u)` at pixel column `u`.
    fn keyframe_over(xy: &[[f32; 2]], descriptors: Vec<f32>, depth: impl Fn(f64) -> f64) -> ChainKeyframe<()> {
        let mut points = Vec::with_capacity(W * H * 3);
        for v in 0..H {
            for u in 0..W {
                let z = depth(u as f64);
                points.extend([((u as f64 - K.cx) / K.fx * z) as f32, ((v as f64 - K.cy) / K.fy * z) as f32, z as f32]);
            }
        }
        let mapping = InputMapping {
            original_width: W as u32,
            original_height: H as u32,
            scale_x: 1.0,
            scale_y: 1.0,
            offset_x: 0.0,
            offset_y: 0.0,
        };
        ChainKeyframe {
            stamp: 0,
            payload: (),
            keypoints: Keypoints { xy: xy.to_vec(), scores: vec![1.0; xy.len()], descriptors, descriptor_dim: 32 },
            pointmap: Pointmap { height: H, width: W, points, confidence: vec![10.0; W * H] },
            rgb: vec![0; W * H * 3],
            mapping,
            focal: K.fx,
            t_origin_kf: Transform::identity(),
            t_odom_kf: Transform::identity(),
            tracking_inflation: 1.0,
        }
    }

    fn unit(v: Vec<f64>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        v.iter().map(|x| (x / n) as f32).collect()
    }

    /// The default tracking without its second try at matching.
    fn first_try_only() -> TrackingParams {
        let params = TrackingParams::default();
        TrackingParams { second_try: params.matching, ..params }
    }

    /// 150 keypoints scattered over the image, away from its border.
    fn scattered(rng: &mut SplitMix64) -> Vec<[f32; 2]> {
        (0..150).map(|_| [(20.0 + rng.next_f64() * 280.0) as f32, (20.0 + rng.next_f64() * 200.0) as f32]).collect()
    }

    /// `n` random unit descriptors.
    fn descriptors(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
        (0..n).flat_map(|_| unit((0..32).map(|_| rng.normal()).collect())).collect()
    }

    /// Each descriptor turned by 40 degrees towards a random direction: similarity 0.77 to the
    /// one before, about 0.59 to the one before that (below the 0.7 a match needs).
    fn drifted(d: &[f32], rng: &mut SplitMix64) -> Vec<f32> {
        let (c, s) = (40f64.to_radians().cos(), 40f64.to_radians().sin());
        d.chunks(32)
            .flat_map(|row| {
                let r: Vec<f64> = row.iter().map(|&x| x as f64).collect();
                let noise = unit((0..32).map(|_| rng.normal()).collect());
                let dot: f64 = r.iter().zip(&noise).map(|(a, b)| a * *b as f64).sum();
                let ortho = unit(noise.iter().zip(&r).map(|(&n, a)| n as f64 - dot * a).collect());
                unit(r.iter().zip(&ortho).map(|(a, &o)| c * a + s * o as f64).collect())
            })
            .collect()
    }

    /// The keyframe's keypoints' plane points seen from `t_odom_frame`: their pixels.
    fn seen(kf: &ChainKeyframe<()>, t_odom_frame: &Transform<OdomOrigin, FrameCam>) -> Vec<[f32; 2]> {
        kf.keypoints
            .xy
            .iter()
            .map(|&[x, y]| {
                let p = point_at(&kf.pointmap, &kf.mapping, x as f64, y as f64, 1.0).unwrap_or_default();
                let q = K.project(&t_odom_frame.inverse().apply(&p)).unwrap_or_default();
                [q.x as f32, q.y as f32]
            })
            .collect()
    }

    #[test]
    fn a_frame_that_no_longer_matches_its_keyframe_is_tracked_through_the_last_frame() {
        let mut rng = SplitMix64::new(3);
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng, 150));
        let kf = keyframe(&xy, d0.clone());
        let pose = |deg: f64, x: f64| {
            Transform::<OdomOrigin, FrameCam>::new(
                nalgebra::Rotation3::from_euler_angles(0.0, deg.to_radians(), 0.0),
                Vector3::new(x, 0.0, 0.0),
            )
        };
        let (t1, t2) = (pose(1.0, 0.02), pose(2.0, 0.04));
        let (d1, camera) = (drifted(&d0, &mut rng), Some(Camera { k: K, lens: Lens::Pinhole }));
        let d2 = drifted(&d1, &mut rng);
        let frame = |t: &Transform<OdomOrigin, FrameCam>, d: Vec<f32>| {
            let xy = seen(&kf, t);
            Arc::new(Keypoints { scores: vec![1.0; xy.len()], xy, descriptors: d, descriptor_dim: 32 })
        };
        let (f1, f2) = (frame(&t1, d1), frame(&t2, d2));
        let params = TrackingParams::default();
        let error =
            |fp: &FramePose, t: &Transform<OdomOrigin, FrameCam>| (fp.t_odom_frame.translation - t.translation).norm();

        // Frame 2 alone does not match the keyframe.
        assert!(matches!(track_frame(Some(&kf), &f2, camera, &params), Err(NotTracked::TooFewMatches { .. })));
        let mut tracker = CarriedTracker::default();
        let one = tracker.track(1, Some(&kf), &f1, camera, &params).unwrap();
        assert!(error(&one, &t1) < 1e-3 && !one.tracked.second_try, "{:?}", one.t_odom_frame);
        let two = tracker.track(1, Some(&kf), &f2, camera, &params).unwrap();
        assert!(error(&two, &t2) < 1e-3 && two.tracked.inliers >= 100, "{:?}", two.tracked);
        let t_kf_frame: Transform<KeyframeCam, FrameCam> = two.tracked.t_kf_frame;
        assert!((t_kf_frame.translation - t2.translation).norm() < 1e-3);
        assert!(two.covariance.is_some());

        // Another chain's points, or none after a reset, do not carry.
        let mut other = CarriedTracker::default();
        other.track(1, Some(&kf), &f1, camera, &params).unwrap();
        assert!(other.track(2, Some(&kf), &f2, camera, &params).is_err());
        tracker.forget();
        assert!(tracker.track(1, Some(&kf), &f2, camera, &params).is_err());
    }

    #[test]
    fn a_frame_whose_descriptors_changed_past_the_first_matching_is_placed_by_the_second_try() {
        let mut rng = SplitMix64::new(11);
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng, 150));
        let kf = Arc::new(keyframe(&xy, d0.clone()));
        let t = Transform::<OdomOrigin, FrameCam>::new(
            nalgebra::Rotation3::from_euler_angles(0.0, 0.03, 0.0),
            Vector3::new(0.05, 0.0, 0.0),
        );
        // Drifted twice, as a fast turn changes them: about 0.59 similar to the keyframe's.
        let twice = drifted(&drifted(&d0, &mut rng), &mut rng);
        let pixels = seen(&kf, &t);
        let frame = |descriptors| {
            Arc::new(Keypoints { scores: vec![1.0; pixels.len()], xy: pixels.clone(), descriptors, descriptor_dim: 32 })
        };
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let keyframes = std::slice::from_ref(&kf);

        let once =
            CarriedTracker::default().track_any(1, keyframes, &frame(twice.clone()), 0, camera, &first_try_only());
        assert!(matches!(once, Err(NotTracked::TooFewMatches { .. })), "{once:?}");
        let placed = CarriedTracker::default().track_any(1, keyframes, &frame(twice), 0, camera, &params).unwrap();
        assert!(placed.tracked.second_try);
        assert!((placed.t_odom_frame.translation - t.translation).norm() < 1e-3, "{:?}", placed.t_odom_frame);
        assert!(placed.t_odom_frame.rotation_error_deg(&t) < 0.05);
        // Descriptors of other points are not matched into a pose by the looser try either.
        let unrelated = descriptors(&mut rng, 150);
        let none = CarriedTracker::default().track_any(1, keyframes, &frame(unrelated), 0, camera, &params);
        assert!(none.is_err(), "{none:?}");
    }

    #[test]
    fn a_lost_frame_placed_with_keypoints_described_anew_is_remembered_as_tracked() {
        let mut rng = SplitMix64::new(19);
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng, 150));
        let kf = Arc::new(keyframe(&xy, d0.clone()));
        let t = Transform::<OdomOrigin, FrameCam>::new(
            nalgebra::Rotation3::from_euler_angles(0.0, 0.02, 0.0),
            Vector3::new(0.03, 0.0, 0.0),
        );
        let pixels = seen(&kf, &t);
        let frame = |descriptors| {
            Arc::new(Keypoints { scores: vec![1.0; pixels.len()], xy: pixels.clone(), descriptors, descriptor_dim: 32 })
        };
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let keyframes = std::slice::from_ref(&kf);
        let mut tracker = CarriedTracker::default();

        // Described unlike the keyframe: lost, and described anew unlike it again: still lost.
        assert!(tracker.track_any(1, keyframes, &frame(descriptors(&mut rng, 150)), 7, camera, &params).is_err());
        assert!(tracker.track_again(keyframes, &frame(descriptors(&mut rng, 150)), &params).is_none());
        assert_eq!(tracker.last_tracked(1), None);
        // Described as the keyframe saw it: placed, and the frame (once) is remembered as tracked.
        let placed = tracker.track_again(keyframes, &frame(d0.clone()), &params).unwrap();
        assert!((placed.t_odom_frame.translation - t.translation).norm() < 1e-3, "{:?}", placed.t_odom_frame);
        assert_eq!((tracker.last_tracked(1), tracker.last_tracked(2), tracker.recent.len()), (Some(7), None, 1));
        // The next frame is placed through it.
        tracker.track_any(1, keyframes, &frame(d0.clone()), 8, camera, &params).unwrap();
        assert_eq!(tracker.last_tracked(1), Some(8));
        // It was not lost: there is nothing to track again.
        assert!(tracker.track_again(keyframes, &frame(d0), &params).is_none());
    }

    #[test]
    fn a_frame_the_newest_keyframe_does_not_place_is_tracked_against_an_earlier_one() {
        let mut rng = SplitMix64::new(5);
        let xy = scattered(&mut rng);
        let (seen_before, elsewhere) = (descriptors(&mut rng, 150), descriptors(&mut rng, 150));
        let earlier = Arc::new(keyframe(&xy, seen_before.clone()));
        let mut newest = keyframe(&xy, elsewhere);
        newest.stamp = 1;
        let newest = Arc::new(newest);
        let t = Transform::<OdomOrigin, FrameCam>::new(
            nalgebra::Rotation3::from_euler_angles(0.0, 0.02, 0.0),
            Vector3::new(0.03, 0.0, 0.0),
        );
        let pixels = seen(&earlier, &t);
        let frame = Arc::new(Keypoints {
            scores: vec![1.0; pixels.len()],
            xy: pixels,
            descriptors: seen_before,
            descriptor_dim: 32,
        });
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());

        let mut tracker = CarriedTracker::default();
        let alone = tracker.track_any(1, std::slice::from_ref(&newest), &frame, 0, camera, &params);
        assert!(matches!(alone, Err(NotTracked::TooFewMatches { .. })), "{alone:?}");
        let placed = tracker.track_any(1, &[newest, earlier], &frame, 0, camera, &params).unwrap();
        assert_eq!(placed.keyframe, 0);
        assert!((placed.t_odom_frame.translation - t.translation).norm() < 1e-3, "{:?}", placed.t_odom_frame);
        let none: &[Arc<ChainKeyframe<()>>] = &[];
        assert_eq!(
            CarriedTracker::default().track_any(1, none, &frame, 0, camera, &params).unwrap_err(),
            NotTracked::NoMap
        );
    }

    #[test]
    fn a_frame_whose_matches_reach_no_point_is_placed_on_the_pointmap_drawn_into_the_last_frame() {
        let mut rng = SplitMix64::new(23);
        // The keyframe's keypoints lie at its left edge; the last frame also saw 120 keypoints
        // on the right, more than 50 px from any of them (so none gets a seed), which the next
        // frame sees alone, as the frame after a keyframe whose pair is pending sees that keyframe.
        let left: Vec<[f32; 2]> =
            (0..30).map(|_| [(10.0 + rng.next_f64() * 50.0) as f32, (20.0 + rng.next_f64() * 200.0) as f32]).collect();
        let right: Vec<[f32; 2]> = (0..120)
            .map(|_| [(170.0 + rng.next_f64() * 120.0) as f32, (30.0 + rng.next_f64() * 180.0) as f32])
            .collect();
        let (d_left, d_right) = (descriptors(&mut rng, 30), descriptors(&mut rng, 120));
        let kf = Arc::new(keyframe(&left, d_left.clone()));
        let pose = |deg: f64, x: f64| {
            Transform::<OdomOrigin, FrameCam>::new(
                nalgebra::Rotation3::from_euler_angles(0.0, deg.to_radians(), 0.0),
                Vector3::new(x, 0.0, 0.0),
            )
        };
        let (t1, t2) = (pose(0.5, 0.01), pose(1.5, 0.03));
        let on_plane = |xy: &[[f32; 2]]| -> Vec<Vector3<f64>> {
            xy.iter().filter_map(|&[x, y]| point_at(&kf.pointmap, &kf.mapping, x as f64, y as f64, 1.0)).collect()
        };
        let (p_left, p_right) = (on_plane(&left), on_plane(&right));
        let seen_from = |t: &Transform<OdomOrigin, FrameCam>, points: &[Vector3<f64>]| -> Vec<[f32; 2]> {
            points.iter().filter_map(|p| K.project(&t.inverse().apply(p))).map(|q| [q.x as f32, q.y as f32]).collect()
        };
        let keypoints = |xy: Vec<[f32; 2]>, descriptors: Vec<f32>| {
            Arc::new(Keypoints { scores: vec![1.0; xy.len()], xy, descriptors, descriptor_dim: 32 })
        };
        let last =
            keypoints([seen_from(&t1, &p_left), seen_from(&t1, &p_right)].concat(), [d_left, d_right.clone()].concat());
        let next = keypoints(seen_from(&t2, &p_right), d_right);
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let keyframes = std::slice::from_ref(&kf);

        let mut tracker = CarriedTracker::default();
        let one = tracker.track_any(1, keyframes, &last, 1, camera, &params).unwrap();
        assert!((one.t_odom_frame.translation - t1.translation).norm() < 1e-3, "{:?}", one.t_odom_frame);
        // Its matches reach the last frame's keypoints only, which carry no point...
        let alone = tracker.track(1, Some(&kf), &next, camera, &params);
        assert!(matches!(alone, Err(NotTracked::TooFewPoints { got: 0, .. })), "{alone:?}");
        // ...until the keyframe's pointmap, drawn into the last frame, gives them one.
        let two = tracker.track_any(1, keyframes, &next, 2, camera, &params).unwrap();
        assert!(two.tracked.drawn && !one.tracked.drawn);
        let error = (two.t_odom_frame.translation - t2.translation).norm();
        assert!(error < 0.005 && two.t_odom_frame.rotation_error_deg(&t2) < 0.1, "{error} {:?}", two.t_odom_frame);
        assert!(two.tracked.points >= 100, "{:?}", two.tracked);
    }

    #[test]
    fn a_keyframe_whose_pair_joins_late_is_tracked_through_the_frames_that_came_after_it() {
        let mut rng = SplitMix64::new(11);
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng, 150));
        let mut kf = keyframe(&xy, d0.clone());
        kf.stamp = 100;
        let kf = Arc::new(kf);
        let pose = |i: f64| {
            Transform::<OdomOrigin, FrameCam>::new(
                nalgebra::Rotation3::from_euler_angles(0.0, (0.7 * i).to_radians(), 0.0),
                Vector3::new(0.015 * i, 0.0, 0.0),
            )
        };
        // Three frames after the keyframe, each looking like the one before it only.
        let mut descriptors = d0;
        let frames: Vec<(Transform<OdomOrigin, FrameCam>, Arc<Keypoints>)> = (1..=3)
            .map(|i| {
                descriptors = drifted(&descriptors, &mut rng);
                let t = pose(i as f64);
                let xy = seen(&kf, &t);
                let kp =
                    Keypoints { scores: vec![1.0; xy.len()], xy, descriptors: descriptors.clone(), descriptor_dim: 32 };
                (t, Arc::new(kp))
            })
            .collect();
        // Without the second try, which places the third frame alone (about 0.45 similar).
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), first_try_only());
        let (before, after) = (&frames[..2], &frames[2]);
        let none: &[Arc<ChainKeyframe<()>>] = &[];
        let with = std::slice::from_ref(&kf);

        // The third frame alone does not match the keyframe.
        let alone = CarriedTracker::default().track_any(1, with, &after.1, 103, camera, &params);
        assert!(matches!(alone, Err(NotTracked::TooFewMatches { .. })), "{alone:?}");
        // The pair joins after the first two frames came (no map for them, one from before the
        // keyframe is not caught up on); the third is placed through them.
        let mut tracker = CarriedTracker::default();
        let early = tracker.track_any(1, none, &before[1].1, 99, camera, &params);
        assert_eq!(early.unwrap_err(), NotTracked::NoMap);
        for (i, (_, kp)) in before.iter().enumerate() {
            assert_eq!(
                tracker.track_any(1, none, kp, 101 + i as Stamp, camera, &params).unwrap_err(),
                NotTracked::NoMap
            );
        }
        // Nothing went out after the keyframe: it stays where it is.
        assert_eq!(tracker.catch_up(1, with, &params), None);
        let placed = tracker.track_any(1, with, &after.1, 103, camera, &params).unwrap();
        let error = (placed.t_odom_frame.translation - after.0.translation).norm();
        assert!(error < 1e-3 && placed.keyframe == 100, "{error} {:?}", placed.t_odom_frame);
    }

    #[test]
    fn a_keyframe_whose_pair_joins_after_frames_went_out_moves_so_the_odometry_runs_on_without_a_step() {
        let mut rng = SplitMix64::new(13);
        let (xy, d) = (scattered(&mut rng), descriptors(&mut rng, 150));
        // The camera was at the origin for both keyframes; tracking placed the newer one a
        // degree off, and its pair put it on the chain there.
        let earlier = Arc::new(keyframe(&xy, d.clone()));
        let mut newer = keyframe(&xy, d.clone());
        newer.stamp = 100;
        let off = nalgebra::Rotation3::from_euler_angles(0.0, 1f64.to_radians(), 0.0);
        newer.t_odom_kf = Transform::new(off, Vector3::zeros());
        let pose = |i: f64| {
            Transform::<OdomOrigin, FrameCam>::new(
                nalgebra::Rotation3::from_euler_angles(0.0, (0.5 * i).to_radians(), 0.0),
                Vector3::new(0.01 * i, 0.0, 0.0),
            )
        };
        let frame = |i: f64| {
            let xy = seen(&earlier, &pose(i));
            Arc::new(Keypoints { scores: vec![1.0; xy.len()], xy, descriptors: d.clone(), descriptor_dim: 32 })
        };
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let turned = |a: &FramePose, i: f64| a.t_odom_frame.rotation_error_deg(&pose(i));

        // Two frames after the newer keyframe go out, placed on the earlier one's points.
        let mut tracker = CarriedTracker::default();
        let only_earlier = std::slice::from_ref(&earlier);
        for i in 1..=2 {
            assert_eq!(tracker.catch_up(1, only_earlier, &params), None);
            let out = tracker.track_any(1, only_earlier, &frame(i as f64), 100 + i, camera, &params).unwrap();
            assert!(turned(&out, i as f64) < 1e-3);
        }
        // The newer keyframe's pair joins: placed against it alone, the next frame would step by
        // the degree it is off.
        let mut chain = vec![Arc::new(newer), earlier.clone()];
        let stepped = track_frame(Some(&chain[0]), &frame(3.0), camera, &params).unwrap();
        assert!((turned(&stepped, 3.0) - 1.0).abs() < 0.01, "{}", turned(&stepped, 3.0));
        // Caught up, the keyframe moves back to where the frames that went out put it ...
        let reposed = tracker.catch_up(1, &chain, &params).unwrap();
        assert_eq!(reposed.keyframe, 100);
        assert!(reposed.t_odom_kf.rotation_error_deg(&Transform::identity()) < 1e-3, "{reposed:?}");
        assert!(reposed.t_odom_kf.translation.norm() < 1e-4);
        let mut moved = (*chain[0]).clone();
        moved.t_odom_kf = reposed.t_odom_kf;
        chain[0] = Arc::new(moved);
        // ... and the next frame follows on from them.
        let next = tracker.track_any(1, &chain, &frame(3.0), 103, camera, &params).unwrap();
        assert!(turned(&next, 3.0) < 1e-3 && next.keyframe == 100, "{}", turned(&next, 3.0));
        assert_eq!(tracker.catch_up(1, &chain, &params), None, "once per keyframe");
        // The frames that went out on chain 1 say nothing of where chain 2's keyframe lies.
        assert_eq!(tracker.catch_up(2, &chain, &params), None, "another chain's frames");
    }

    /// A wall `z = 2 + 0.1 x` (odometry frame) with 900 points, each with its own descriptor;
    /// the keypoints a camera at `(x, 0, 0)` looking along z sees of them (pixels, descriptors).
    struct Wall {
        points: Vec<Vector3<f64>>,
        descriptors: Vec<f32>,
    }

    impl Wall {
        fn new(rng: &mut SplitMix64) -> Self {
            let points = (0..900)
                .map(|_| {
                    let (x, y) = (-1.2 + rng.next_f64() * 4.8, -0.85 + rng.next_f64() * 1.7);
                    Vector3::new(x, y, 2.0 + 0.1 * x)
                })
                .collect();
            Self { points, descriptors: descriptors(rng, 900) }
        }

        fn seen_from(&self, x: f64) -> Keypoints {
            let (mut xy, mut descriptors) = (Vec::new(), Vec::new());
            for (i, p) in self.points.iter().enumerate() {
                let Some(q) = K.project(&(p - Vector3::new(x, 0.0, 0.0))) else { continue };
                if q.x > 8.0 && q.x < W as f64 - 8.0 && q.y > 8.0 && q.y < H as f64 - 8.0 {
                    xy.push([q.x as f32, q.y as f32]);
                    descriptors.extend_from_slice(&self.descriptors[i * 32..i * 32 + 32]);
                }
            }
            Keypoints { scores: vec![1.0; xy.len()], xy, descriptors, descriptor_dim: 32 }
        }
    }

    #[test]
    fn a_camera_that_leaves_its_keyframes_view_is_tracked_on_points_seeded_from_their_neighbours() {
        let mut rng = SplitMix64::new(17);
        let wall = Wall::new(&mut rng);
        let first = wall.seen_from(0.0);
        let kf = Arc::new(keyframe_over(&first.xy, first.descriptors, |u| 2.0 / (1.0 - 0.1 * (u - K.cx) / K.fx)));
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let mut tracker = CarriedTracker::default();
        // 5 cm a frame: the last frames see nothing the keyframe saw.
        for i in 1..=48 {
            let x = 0.05 * i as f64;
            let frame = Arc::new(wall.seen_from(x));
            let placed = tracker.track_any(1, std::slice::from_ref(&kf), &frame, i, camera, &params);
            let placed = placed.unwrap_or_else(|e| panic!("frame {i} at x = {x:.2} m: {e}"));
            let truth = Transform::new(nalgebra::Rotation3::identity(), Vector3::new(x, 0.0, 0.0));
            let error = (placed.t_odom_frame.translation - truth.translation).norm();
            let turned = placed.t_odom_frame.rotation_error_deg(&truth);
            assert!(error < 1e-4 && turned < 1e-3, "frame {i} at x = {x:.2} m: {error} m off, turned {turned} deg");
        }
        let last = wall.seen_from(2.4);
        let shared = last.descriptors.chunks(32).filter(|d| kf.keypoints.descriptors.chunks(32).any(|k| k == *d));
        assert_eq!((shared.count(), last.len() > 150), (0, true), "the last view shares nothing with the keyframe's");
    }

    /// Depth on a corrugated wall, 2 m + 0.25 m sin(4 X) away at world X, seen from a camera at
    /// (x, 0, 0) looking along z.
    fn corrugated(x_world: f64) -> f64 {
        2.0 + 0.25 * (4.0 * x_world).sin()
    }

    /// The corrugated wall's depth image from a camera at (x, 0, 0): each pixel's ray meets the
    /// wall where its depth t is `corrugated(x + t dx)` (a contraction here: |1 dx| < 0.6).
    fn corrugated_depth(x: f64) -> FrameDepth {
        let metres = (0..H)
            .flat_map(|_| 0..W)
            .map(|u| {
                let dx = (u as f64 - K.cx) / K.fx;
                (0..60).fold(2.0, |t, _| corrugated(x + t * dx)) as f32
            })
            .collect();
        let image = DepthImage::from_metres(W as u32, H as u32, metres).unwrap();
        FrameDepth { image: Arc::new(image), colour: (W as u32, H as u32) }
    }

    #[test]
    fn a_camera_that_leaves_its_keyframes_view_is_tracked_on_the_depth_its_depth_images_measured() {
        // Points on the corrugated wall: a plane through a keypoint's neighbours is no surface of
        // it, so seeds alone drift or run out; the depth images measure each frame's keypoints.
        let mut rng = SplitMix64::new(23);
        let mut wall = Wall::new(&mut rng);
        for p in &mut wall.points {
            p.z = corrugated(p.x);
        }
        let first = wall.seen_from(0.0);
        let kf = Arc::new(keyframe_over(&first.xy, first.descriptors, |u| {
            let dx = (u - K.cx) / K.fx;
            (0..60).fold(2.0, |t, _| corrugated(t * dx))
        }));
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
        let run = |measured: bool| {
            let mut tracker = CarriedTracker::default();
            let mut worst = 0.0f64;
            for i in 1..=48 {
                let x = 0.05 * i as f64;
                let frame = Arc::new(wall.seen_from(x));
                let Ok(placed) = tracker.track_any(1, std::slice::from_ref(&kf), &frame, i, camera, &params) else {
                    return (i, worst);
                };
                if measured {
                    assert!(tracker.measure_last(corrugated_depth(x)) > 100, "frame {i}");
                }
                worst = worst.max((placed.t_odom_frame.translation - Vector3::new(x, 0.0, 0.0)).norm());
            }
            (49, worst)
        };
        // Measured: 0.12 mm at worst (the depth image is read at the pixel nearest each
        // keypoint); seeds alone, 0.44 m.
        let (placed, worst) = run(true);
        assert!(placed == 49 && worst < 0.002, "placed up to frame {placed}, worst {worst} m off");
        let (unmeasured, unmeasured_worst) = run(false);
        assert!(unmeasured < 49 || unmeasured_worst > 0.05, "seeds alone: {unmeasured}, {unmeasured_worst} m");
    }

    #[test]
    fn a_seed_takes_the_depth_of_the_plane_its_neighbours_lie_on_and_none_between_two_surfaces() {
        // A wall whose inverse depth is 0.5 + 0.001 u - 0.0005 v, seen at 12 pixels around and
        // right of (100, 100), as at the image's edge.
        let offsets: Vec<Vector2<f64>> = (0..12)
            .map(|i| Vector2::new(5.0 + 3.0 * i as f64, if i % 2 == 0 { -8.0 } else { 9.0 } + i as f64))
            .collect();
        let depth = |px: &Vector2<f64>| 1.0 / (0.5 + 0.001 * px.x - 0.0005 * px.y);
        let at = Vector2::new(100.0, 100.0);
        let wall = Neighbours::new(offsets.iter().map(|d| (at + d, depth(&(at + d)))));
        assert!((wall.depth_at(&at).unwrap() - depth(&at)).abs() < 1e-9);
        // Those more than 20 px to the right on a surface in front of it: an edge, no seed.
        let edge =
            Neighbours::new(offsets.iter().map(|d| (at + d, depth(&(at + d)) * if d.x > 20.0 { 0.8 } else { 1.0 })));
        assert_eq!(edge.depth_at(&at), None);
        // On a line, or too few, or too far: no seed.
        let line = Neighbours::new((0..8).map(|i| (at + Vector2::new(4.0 * i as f64, 0.0), 2.0)));
        assert_eq!(line.depth_at(&at), None);
        let few = Neighbours::new(offsets.iter().take(3).map(|d| (at + d, 2.0)));
        assert_eq!(few.depth_at(&at), None);
        assert_eq!(wall.depth_at(&Vector2::new(300.0, 100.0)), None);
    }
}
