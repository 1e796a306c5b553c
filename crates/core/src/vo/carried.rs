//! Tracking with memory of the previous frame: a frame is placed against the points the last
//! tracked frame was placed with, which its keypoints carry to the frame through frame-to-frame
//! matches, and, for keypoints that carry none, against the newest keyframe's points (the last
//! frame is one frame away, the keyframe may be tens of frames and degrees away). A carried
//! point keeps the depth its keyframe gave it but moves towards the ray the last frame saw it
//! along, so a frame is placed mostly relative to its predecessors' view, as a frame-to-frame
//! odometry does, and keyframe matches hold it to the map. PnP's outliers drop their points.

use std::collections::VecDeque;
use std::sync::Arc;

use nalgebra::{Vector2, Vector3};

use super::matching::match_descriptors;
use super::odometry::{ChainKeyframe, FramePose, OdomOrigin, Stamp};
use super::tracking::{solve, FrameCam, NotTracked, Tracked, TrackingParams};
use crate::geometry::lens::{Camera, Lens};
use crate::geometry::pnp::covariance_in;
use crate::geometry::Transform;
use crate::superpoint::Keypoints;

/// The last tracked frame: its keypoints and the chain point each carries (see the module's
/// comment).
struct LastFrame {
    /// The chain it was placed on (points of another chain mean nothing here).
    chain: u64,
    keypoints: Arc<Keypoints>,
    points: Vec<Option<Vector3<f64>>>,
}

/// A frame seen recently, tracked or not: a keyframe whose pair joins after it is tracked
/// through them (see [`CarriedTracker::track_any`]).
struct Seen {
    stamp: Stamp,
    keypoints: Arc<Keypoints>,
    camera: Option<Camera>,
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
    /// Keypoints matched to the keyframe or the last frame.
    matched: usize,
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
        let camera = camera.unwrap_or_else(|| Camera { k: kf.estimated_intrinsics(), lens: Lens::Pinhole });
        let last = self.last.as_ref().filter(|l| l.chain == chain);
        let c = correspondences(kf, last, frame, &camera, params);
        let need = params.min_inliers.max(6);
        if c.matched < need {
            return Err(NotTracked::TooFewMatches { got: c.matched, need });
        }
        // PnP's covariance, here of a left perturbation in the odometry's frame.
        let (solution, raw) = solve::<OdomOrigin>(&c.world, &c.pixels, &camera, params)?;
        let t_frame_odom = solution.pose;
        let points = carried_points(&c, &solution.is_inlier, &t_frame_odom, &camera, frame.len());
        self.last = Some(LastFrame { chain, keypoints: frame.clone(), points });
        let t_odom_frame = t_frame_odom.inverse();
        let tracked = Tracked {
            t_kf_frame: kf.t_odom_kf.inverse().compose(&t_odom_frame),
            matches: c.matched,
            points: c.world.len(),
            inliers: solution.inliers,
            covariance: raw.map(|cov| covariance_in(&kf.t_odom_kf.inverse(), &cov)),
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
    /// in turn until one places it; none: the newest's reason. A newest keyframe whose pair
    /// joined after frames that came after it is first caught up from (see
    /// [`CarriedTracker::catch_up`]).
    pub fn track_any<F>(
        &mut self,
        chain: u64,
        keyframes: &[Arc<ChainKeyframe<F>>],
        frame: &Arc<Keypoints>,
        stamp: Stamp,
        camera: Option<Camera>,
        params: &TrackingParams,
    ) -> Result<FramePose, NotTracked> {
        self.catch_up(chain, keyframes, params);
        let placed = self.try_each(chain, keyframes, frame, camera, params);
        if self.recent.len() == CATCH_UP_FRAMES {
            self.recent.pop_front();
        }
        self.recent.push_back(Seen { stamp, keypoints: frame.clone(), camera });
        placed
    }

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
        Err(first.unwrap_or(NotTracked::NoMap))
    }

    /// Once per newest keyframe: when frames came after it before its pair joined (a live
    /// node's DUSt3R answers late), the last frame becomes the keyframe, its keypoints carrying
    /// their pointmap points, and the frames since are tracked again in turn. The next frame
    /// is then placed against points carried over one frame's motion from the keyframe, not
    /// matched across the whole time its pair took.
    fn catch_up<F>(&mut self, chain: u64, keyframes: &[Arc<ChainKeyframe<F>>], params: &TrackingParams) {
        let Some(kf) = keyframes.first() else { return };
        if self.caught_up_from.replace((chain, kf.stamp)) == Some((chain, kf.stamp)) {
            return;
        }
        let since: Vec<(Arc<Keypoints>, Option<Camera>)> =
            self.recent.iter().filter(|s| s.stamp > kf.stamp).map(|s| (s.keypoints.clone(), s.camera)).collect();
        if since.is_empty() {
            return;
        }
        let points = (0..kf.keypoints.len()).map(|i| kf.odom_point(i, params.min_confidence)).collect();
        self.last = Some(LastFrame { chain, keypoints: Arc::new(kf.keypoints.clone()), points });
        for (frame, camera) in since {
            // A frame that was lost may be placed now; one that is not keeps the last in place.
            let _ = self.try_each(chain, keyframes, &frame, camera, params);
        }
    }
}

/// How far a carried point moves towards where the frame saw it. All the way, keypoint noise
/// walks the points (and the poses placed on them) away from exact pointmaps: on the rendered
/// sample the odometry left its 5 mm bound; half way, a point is an average of its recent
/// sightings, and fr1/rpy keeps its gain (see docs/benchmarks.md).
const TOWARDS_SIGHTING: f64 = 0.5;

/// The points `frame`'s keypoints carry on: each inlier's point, moved towards the frame's ray
/// through the keypoint (placed at `t_frame_odom`), at the same depth, by [`TOWARDS_SIGHTING`].
fn carried_points(
    c: &Correspondences,
    is_inlier: &[bool],
    t_frame_odom: &Transform<FrameCam, OdomOrigin>,
    camera: &Camera,
    keypoints: usize,
) -> Vec<Option<Vector3<f64>>> {
    let t_odom_frame = t_frame_odom.inverse();
    let mut points = vec![None; keypoints];
    for (((p, px), &q), &inlier) in c.world.iter().zip(&c.pixels).zip(&c.keypoint).zip(is_inlier) {
        if inlier {
            let seen = t_odom_frame.apply(&(camera.k.ray(px.x, px.y) * t_frame_odom.apply(p).z));
            points[q] = Some(p + (seen - p) * TOWARDS_SIGHTING);
        }
    }
    points
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
    let mut point: Vec<Option<Vector3<f64>>> = vec![None; frame.len()];
    let mut matched = vec![false; frame.len()];
    if let Some(last) = last {
        for m in match_descriptors(frame, &last.keypoints, &params.matching) {
            matched[m.query] = true;
            point[m.query] = last.points.get(m.train).copied().flatten();
        }
    }
    for m in match_descriptors(frame, &kf.keypoints, &params.matching) {
        matched[m.query] = true;
        if point[m.query].is_some() {
            continue;
        }
        point[m.query] = kf.odom_point(m.train, params.min_confidence);
    }
    let mut c = Correspondences { matched: matched.iter().filter(|&&m| m).count(), ..Correspondences::default() };
    for (q, p) in point.iter().enumerate() {
        let [x, y] = frame.xy[q];
        if let (Some(p), Some((u, v))) = (p, camera.undistort_pixel(x as f64, y as f64)) {
            c.world.push(*p);
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
        let mut points = Vec::with_capacity(W * H * 3);
        for v in 0..H {
            for u in 0..W {
                let z = 2.0 + 0.002 * u as f64;
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

    /// 150 keypoints scattered over the image, away from its border.
    fn scattered(rng: &mut SplitMix64) -> Vec<[f32; 2]> {
        (0..150).map(|_| [(20.0 + rng.next_f64() * 280.0) as f32, (20.0 + rng.next_f64() * 200.0) as f32]).collect()
    }

    /// 150 random unit descriptors.
    fn descriptors(rng: &mut SplitMix64) -> Vec<f32> {
        (0..150).flat_map(|_| unit((0..32).map(|_| rng.normal()).collect())).collect()
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
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng));
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
        assert!(error(&one, &t1) < 1e-3, "{:?}", one.t_odom_frame);
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
    fn a_frame_the_newest_keyframe_does_not_place_is_tracked_against_an_earlier_one() {
        let mut rng = SplitMix64::new(5);
        let xy = scattered(&mut rng);
        let (seen_before, elsewhere) = (descriptors(&mut rng), descriptors(&mut rng));
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
    fn a_keyframe_whose_pair_joins_late_is_tracked_through_the_frames_that_came_after_it() {
        let mut rng = SplitMix64::new(11);
        let (xy, d0) = (scattered(&mut rng), descriptors(&mut rng));
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
        let (camera, params) = (Some(Camera { k: K, lens: Lens::Pinhole }), TrackingParams::default());
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
        let placed = tracker.track_any(1, with, &after.1, 103, camera, &params).unwrap();
        let error = (placed.t_odom_frame.translation - after.0.translation).norm();
        assert!(error < 1e-3 && placed.keyframe == 100, "{error} {:?}", placed.t_odom_frame);
    }
}
