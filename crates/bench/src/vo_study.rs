//! `vo --study`: where a tracked frame's error comes from. Every frame is tracked against the
//! frame `d` before it as its keyframe (its true pointmap from the depth oracle, metric), the
//! way the pipeline tracks, then again with one thing changed at a time. Each row: frames
//! tracked, descriptor matches, PnP's inlier share, the inliers' residual under the estimate
//! (px), the pose against the keyframe compared with the motion capture (rotation and
//! translation, median and 90th percentile), and the error of the motion between two
//! consecutive frames tracked against the same keyframe (the per-frame RPE such frames get).
//! Then the error against the angular-velocity difference between frame and keyframe (a
//! rolling shutter's signature), and the trajectory error a tracker gets whose every frame is
//! placed against an exact keyframe d frames back (a floor for the ATE on this data).

use nalgebra::{Vector2, Vector3};

use sp_dust3r_core::backend::FeatureExtractor;
use sp_dust3r_core::dust3r::{prepare, Checkpoint, InputMapping, Pointmap, PrepMode};
use sp_dust3r_core::eval::hat::correlation;
use sp_dust3r_core::eval::tum::{depth_metres, DepthOracle, TumSequence};
use sp_dust3r_core::eval::{pose_at, Camera as CamFrame, StampedPose, World};
use sp_dust3r_core::geometry::lens::{Camera, Lens};
use sp_dust3r_core::geometry::pnp::solve_pnp_ransac;
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::quantile::median;
use sp_dust3r_core::superpoint::{Keypoints, PostParams};
use sp_dust3r_core::vo::matching::match_descriptors;
use sp_dust3r_core::vo::tracking::{point_at, TrackingParams};

/// What the study knows of one frame.
struct StudyFrame {
    t: f64,
    keypoints: Keypoints,
    pointmap: Pointmap,
    mapping: InputMapping,
    depth: Vec<f32>,
    depth_width: usize,
}

/// How the 2-D/3-D correspondences are made in a row.
#[derive(Clone, Copy)]
enum Variant {
    /// As the pipeline does (the keyframe's grid pointmap, bilinear; keypoints undistorted).
    Pipeline,
    /// The lens ignored (K only).
    NoLens,
    /// The keyframe's points from its full-resolution depth at the keypoint (nearest pixel).
    FullResDepth,
    /// The keyframe's points carried from frame to frame (see [`carried`]).
    Carried,
}

/// One row's per-frame results.
#[derive(Default)]
struct Row {
    tried: usize,
    tracked: usize,
    matches: Vec<f64>,
    inlier_share: Vec<f64>,
    residual_px: Vec<f64>,
    rot_deg: Vec<f64>,
    trans_mm: Vec<f64>,
    rpe_deg: Vec<f64>,
    rpe_mm: Vec<f64>,
    /// (the frame's rotation error, how far its angular velocity is from its keyframe's, deg/s).
    by_velocity: Vec<(f64, f64)>,
}

fn p90(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(((s.len() as f64) * 0.9) as usize).copied().unwrap_or(f64::NAN)
}

impl Row {
    fn print(&self, name: &str) {
        println!(
            "  {name:<40} {:>3}/{:<3} {:>5.0} {:>5.2} {:>6.2} {:>6.3} {:>6.3} {:>6.2} {:>6.2} {:>6.3} {:>6.2}",
            self.tracked,
            self.tried,
            median(&self.matches),
            median(&self.inlier_share),
            median(&self.residual_px),
            median(&self.rot_deg),
            p90(&self.rot_deg),
            median(&self.trans_mm),
            p90(&self.trans_mm),
            median(&self.rpe_deg),
            median(&self.rpe_mm)
        );
    }
}

fn load(seq: &TumSequence, features: &dyn FeatureExtractor, post: &PostParams) -> anyhow::Result<Vec<StudyFrame>> {
    let oracle = DepthOracle::new(seq)?;
    let mut out = Vec::new();
    for (i, f) in seq.frames()?.iter().enumerate() {
        let frame = Frame::decode(&std::fs::read(&f.rgb)?)?;
        let keypoints = features.detect(&frame, post)?;
        let view = prepare(&frame, PrepMode::Pad, Checkpoint::default().input_size())?;
        let (depth, w) = depth_metres(&f.depth)?;
        out.push(StudyFrame {
            t: f.t,
            keypoints,
            pointmap: oracle.own_pointmap(&view, i),
            mapping: view.mapping,
            depth,
            depth_width: w as usize,
        });
    }
    Ok(out)
}

/// The keyframe keypoint's 3-D point from the full-resolution depth (nearest pixel).
fn full_res_point(kf: &StudyFrame, camera: &Camera, x: f64, y: f64) -> Option<Vector3<f64>> {
    let (px, py) = (x.round(), y.round());
    if px < 0.0 || py < 0.0 || px as usize >= kf.depth_width {
        return None;
    }
    let z = *kf.depth.get(py as usize * kf.depth_width + px as usize)? as f64;
    let (u, v) = camera.undistort_pixel(x, y).filter(|_| z > 0.0)?;
    let k = &camera.k;
    Some(Vector3::new((u - k.cx) / k.fx * z, (v - k.cy) / k.fy * z, z))
}

/// Tracks frame `f` against keyframe `kf` as `variant` says; `truth` is T_kf_f (metres). The
/// estimate of T_kf_f when tracked.
fn study_one(
    (f, kf): (&StudyFrame, &StudyFrame),
    truth: &Transform<CamFrame, CamFrame>,
    camera: &Camera,
    params: &TrackingParams,
    variant: Variant,
    row: &mut Row,
) -> Option<Transform<CamFrame, CamFrame>> {
    row.tried += 1;
    let used = match variant {
        Variant::NoLens => Camera { k: camera.k, lens: Lens::Pinhole },
        _ => *camera,
    };
    let matches = match_descriptors(&f.keypoints, &kf.keypoints, &params.matching);
    let k = used.k;
    let (mut world, mut pixels) = (Vec::new(), Vec::new());
    for m in &matches {
        let [kx, ky] = kf.keypoints.xy[m.train];
        let p = match variant {
            Variant::FullResDepth => full_res_point(kf, &used, kx as f64, ky as f64),
            _ => point_at(&kf.pointmap, &kf.mapping, kx as f64, ky as f64, params.min_confidence),
        };
        let [fx, fy] = f.keypoints.xy[m.query];
        let (Some(p), Some((u, v))) = (p, used.undistort_pixel(fx as f64, fy as f64)) else { continue };
        world.push(p);
        pixels.push(Vector2::new(u, v));
    }
    row.matches.push(matches.len() as f64);
    solve_and_score(&world, &pixels, &k, params, truth, row).map(|(est, _)| est)
}

/// PnP of `world` against `pixels`, scored into `row`: the estimate of T_kf_f and which
/// correspondences are its inliers.
fn solve_and_score(
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    k: &sp_dust3r_core::geometry::Intrinsics,
    params: &TrackingParams,
    truth: &Transform<CamFrame, CamFrame>,
    row: &mut Row,
) -> Option<(Transform<CamFrame, CamFrame>, Vec<bool>)> {
    let project = |q: Vector3<f64>| Vector2::new(k.fx * q.x / q.z + k.cx, k.fy * q.y / q.z + k.cy);
    let sol = solve_pnp_ransac::<CamFrame, CamFrame>(world, pixels, k, &params.ransac).ok()?;
    if sol.inliers < params.min_inliers.max(6) {
        return None;
    }
    let residuals: Vec<f64> =
        world.iter().zip(pixels).map(|(p, px)| (project(sol.pose.apply(p)) - px).norm()).collect();
    let inlier: Vec<bool> = residuals.iter().map(|r| *r <= params.ransac.threshold_px).collect();
    let kept: Vec<f64> = residuals.iter().copied().filter(|r| *r <= params.ransac.threshold_px).collect();
    row.inlier_share.push(sol.inliers as f64 / world.len() as f64);
    row.residual_px.push(median(&kept));
    row.tracked += 1;
    let est = sol.pose.inverse();
    row.rot_deg.push(est.rotation_error_deg(truth));
    row.trans_mm.push((est.translation - truth.translation).norm() * 1e3);
    Some((est, inlier))
}

/// Frames `from + 1 ..= to` tracked in turn against keyframe `from`'s points carried frame to
/// frame: each frame's keypoints matched to the previous frame's inherit their 3-D points (in
/// the keyframe's camera), the rest matched to the keyframe directly; PnP's outliers drop their
/// points. The estimates of T_kf_j for the last two frames.
fn carried(
    frames: &[StudyFrame],
    (from, to): (usize, usize),
    camera: &Camera,
    params: &TrackingParams,
    truth: &dyn Fn(usize) -> Option<Transform<CamFrame, CamFrame>>,
    row: &mut Row,
) -> [Option<Transform<CamFrame, CamFrame>>; 2] {
    let kf = &frames[from];
    let mut points: Vec<Option<Vector3<f64>>> = kf
        .keypoints
        .xy
        .iter()
        .map(|&[x, y]| point_at(&kf.pointmap, &kf.mapping, x as f64, y as f64, params.min_confidence))
        .collect();
    let mut last = [None, None];
    for j in from + 1..=to {
        let f = &frames[j];
        let mut next = vec![None; f.keypoints.len()];
        for m in match_descriptors(&f.keypoints, &frames[j - 1].keypoints, &params.matching) {
            next[m.query] = points[m.train];
        }
        for m in match_descriptors(&f.keypoints, &kf.keypoints, &params.matching) {
            let direct = point_at(
                &kf.pointmap,
                &kf.mapping,
                kf.keypoints.xy[m.train][0] as f64,
                kf.keypoints.xy[m.train][1] as f64,
                params.min_confidence,
            );
            next[m.query] = next[m.query].or(direct);
        }
        let (mut world, mut pixels, mut index) = (Vec::new(), Vec::new(), Vec::new());
        for (q, p) in next.iter().enumerate() {
            let [x, y] = f.keypoints.xy[q];
            if let (Some(p), Some((u, v))) = (p, camera.undistort_pixel(x as f64, y as f64)) {
                world.push(*p);
                pixels.push(Vector2::new(u, v));
                index.push(q);
            }
        }
        let Some(t) = truth(j) else { return [None, None] };
        let mut scratch = Row::default();
        let scored = if j == to - 1 { &mut *row } else { &mut scratch };
        if j == to - 1 {
            scored.tried += 1;
            scored.matches.push(world.len() as f64);
        }
        let solved = solve_and_score(&world, &pixels, &camera.k, params, &t, scored);
        if let Some((_, inlier)) = &solved {
            for (n, &q) in index.iter().enumerate() {
                if !inlier[n] {
                    next[q] = None;
                }
            }
        }
        last = [last[1], solved.map(|s| s.0)];
        points = next;
    }
    last
}

/// A keyframe's motion-capture pose and a frame's estimated pose in it.
type PlacedOnKeyframe = (Transform<World, CamFrame>, Transform<CamFrame, CamFrame>);

/// The frames, the motion capture and the camera a study runs on.
struct Study {
    frames: Vec<StudyFrame>,
    gt: Vec<StampedPose>,
    camera: Camera,
}

impl Study {
    fn truth_at(&self, t: f64) -> Option<Transform<World, CamFrame>> {
        pose_at(&self.gt, t, 0.0)
    }

    /// T_a_b from the motion capture: the camera at time `b` in the camera at time `a`.
    fn truth_between(&self, a: f64, b: f64) -> Option<Transform<CamFrame, CamFrame>> {
        let t = self.truth_at(a)?.inverse().compose(&self.truth_at(b)?);
        Some(Transform::new(t.rotation, t.translation))
    }

    /// Frame `i` tracked against frame `i - d` as its keyframe (its true pointmap) as the
    /// pipeline tracks: the keyframe's motion-capture pose and the estimate of T_kf_f.
    fn against_keyframe(&self, i: usize, d: usize, base: &TrackingParams) -> Option<PlacedOnKeyframe> {
        let (kf, f) = (&self.frames[i - d], &self.frames[i]);
        let truth = self.truth_between(kf.t, f.t)?;
        let est = study_one((f, kf), &truth, &self.camera, base, Variant::Pipeline, &mut Row::default())?;
        Some((self.truth_at(kf.t)?, est))
    }

    /// The camera's angular velocity at frame j (deg/s, in its own frame), from the motion
    /// capture.
    fn rate(&self, j: usize) -> Option<Vector3<f64>> {
        let (a, b) = (self.frames.get(j.checked_sub(1)?)?, self.frames.get(j + 1)?);
        let r = self.truth_at(a.t)?.rotation.inverse() * self.truth_at(b.t)?.rotation;
        Some(r.scaled_axis().map(f64::to_degrees) / (b.t - a.t))
    }

    /// Frames i and i + 1 both against frame i - d (the motion capture read `offset` seconds
    /// later), for the frames `subset` picks: i's error, and the error of their relative motion
    /// (the per-frame RPE of two frames on one keyframe).
    fn run(
        &self,
        d: usize,
        params: &TrackingParams,
        variant: Variant,
        offset: f64,
        subset: &dyn Fn(usize) -> bool,
    ) -> Row {
        let (frames, camera) = (&self.frames, &self.camera);
        let mut row = Row::default();
        for i in (d..frames.len().saturating_sub(1)).filter(|&i| subset(i)) {
            let kf = &frames[i - d];
            let truth = |j: usize| self.truth_between(kf.t + offset, frames[j].t + offset);
            let (Some(ti), Some(tj)) = (truth(i), truth(i + 1)) else { continue };
            let (ei, ej) = if matches!(variant, Variant::Carried) {
                let [ei, ej] = carried(frames, (i - d, i + 1), camera, params, &truth, &mut row);
                (ei, ej)
            } else {
                let ei = study_one((&frames[i], kf), &ti, camera, params, variant, &mut row);
                let mut scratch = Row::default();
                (ei, study_one((&frames[i + 1], kf), &tj, camera, params, variant, &mut scratch))
            };
            if let (Some(e), Some(wf), Some(wk)) = (ei, self.rate(i), self.rate(i - d)) {
                row.by_velocity.push((e.rotation_error_deg(&ti), (wf - wk).norm()));
            }
            if let (Some(ei), Some(ej)) = (ei, ej) {
                let (est, gt) = (ei.inverse().compose(&ej), ti.inverse().compose(&tj));
                row.rpe_deg.push(est.rotation_error_deg(&gt));
                row.rpe_mm.push((est.translation - gt.translation).norm() * 1e3);
            }
        }
        row
    }

    /// Every frame tracked against the frame d before it, placed on the motion capture's pose of
    /// that frame: the trajectory's ATE and RPE as `bench vo` scores them.
    fn floor_rows(&self, base: &TrackingParams) -> anyhow::Result<()> {
        use sp_dust3r_core::eval::trajectory::{evaluate_trajectory, RpeDelta};
        for d in [1, 8] {
            let mut poses = Vec::new();
            for i in d..self.frames.len() {
                if let Some((keyframe, est)) = self.against_keyframe(i, d, base) {
                    poses.push(StampedPose { t: self.frames[i].t, pose: keyframe.compose(&est) });
                }
            }
            let r = evaluate_trajectory(&poses, self.frames.len() - d, &self.gt, 0.02, RpeDelta::Frames(1))?;
            println!(
                "  every frame against the exact keyframe d = {d} back: {} frames, ATE (Sim(3)) {:.1} mm = {:.2} % of the {:.3} m path, RPE median {:.2} mm / {:.3} deg",
                poses.len(),
                r.ate.rmse * 1e3,
                r.ate_percent_of_path,
                r.path_length,
                r.rpe_translation.median * 1e3,
                r.rpe_rotation_deg.median
            );
        }
        Ok(())
    }

    /// Every frame tracked against the one before it on that frame's own true pointmap, the
    /// motions chained from the first frame's motion-capture pose: a frame-to-frame odometry
    /// like the ORB baseline's, with SuperPoint and this pipeline's PnP. A frame that is not
    /// tracked ends the chain's run; the next starts on the motion capture again.
    fn frame_to_frame(&self, base: &TrackingParams) -> Vec<StampedPose> {
        let mut poses: Vec<StampedPose> = Vec::new();
        for i in 1..self.frames.len() {
            let Some((keyframe, est)) = self.against_keyframe(i, 1, base) else { continue };
            let previous = self.frames[i - 1].t;
            let from = poses.last().filter(|p| p.t == previous).map_or(keyframe, |p| p.pose);
            poses.push(StampedPose { t: self.frames[i].t, pose: from.compose(&est) });
        }
        poses
    }

    /// Rolling shutter's share: the rotation error against how far the frame's angular velocity
    /// is from its keyframe's.
    fn velocity_rows(&self, base: &TrackingParams) {
        for d in [4, 8, 15] {
            let row = self.run(d, base, Variant::Pipeline, 0.0, &|_| true);
            let split = median(&row.by_velocity.iter().map(|p| p.1).collect::<Vec<_>>());
            let half = |low: bool| -> Vec<f64> {
                row.by_velocity.iter().filter(|p| (p.1 <= split) == low).map(|p| p.0).collect()
            };
            println!(
                "  d = {d}: rotation error median {:.3} deg where the angular velocity differs from the keyframe's by <= {split:.0} deg/s, {:.3} deg above; correlation {:.2}",
                median(&half(true)),
                median(&half(false)),
                correlation(row.by_velocity.iter().copied())
            );
        }
    }

    /// Blur: frames by their rotation since the previous frame (the motion capture's).
    fn speed_rows(&self, d: usize, base: &TrackingParams) {
        let speed: Vec<f64> = (0..self.frames.len())
            .map(|i| {
                let prev = i.checked_sub(1).and_then(|j| self.truth_at(self.frames[j].t));
                match (prev, self.truth_at(self.frames[i].t)) {
                    (Some(a), Some(b)) => a.rotation_error_deg(&b),
                    _ => 0.0,
                }
            })
            .collect();
        let mid = median(&speed);
        self.run(d, base, Variant::Pipeline, 0.0, &|i| speed[i] <= mid)
            .print(&format!("d = {d}, slow half (<= {mid:.2} deg/frame)"));
        self.run(d, base, Variant::Pipeline, 0.0, &|i| speed[i] > mid).print(&format!("d = {d}, fast half"));
    }
}

/// The study's table on `seq`; returns the frame-to-frame odometry on each frame's own depth
/// (see [`Study::frame_to_frame`]).
pub fn study(
    seq: &TumSequence,
    features: &dyn FeatureExtractor,
    post: &PostParams,
) -> anyhow::Result<Vec<StampedPose>> {
    let study = Study { frames: load(seq, features, post)?, gt: seq.ground_truth()?, camera: seq.camera };
    let base = TrackingParams::default();
    let all = |_: usize| true;
    println!(
        "  {:<40} {:>7} {:>5} {:>5} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}",
        "row (keyframe d frames back)",
        "tracked",
        "match",
        "inl",
        "res px",
        "rot",
        "rot90",
        "t mm",
        "t90",
        "RPE r",
        "RPE mm"
    );
    for d in [1, 2, 4, 8, 15, 30] {
        study.run(d, &base, Variant::Pipeline, 0.0, &all).print(&format!("pipeline, d = {d}"));
    }
    let d = 8;
    for th in [1.0, 2.0, 3.0, 6.0] {
        let mut p = base;
        p.ransac.threshold_px = th;
        study.run(d, &p, Variant::Pipeline, 0.0, &all).print(&format!("d = {d}, RANSAC threshold {th} px"));
    }
    let mut no_ratio = base;
    no_ratio.matching.max_distance_ratio = 1.0;
    study.run(d, &no_ratio, Variant::Pipeline, 0.0, &all).print(&format!("d = {d}, no ratio test"));
    study.run(d, &base, Variant::NoLens, 0.0, &all).print(&format!("d = {d}, lens ignored"));
    study.run(d, &base, Variant::FullResDepth, 0.0, &all).print(&format!("d = {d}, full-resolution depth"));
    for d in [8, 15, 30] {
        study.run(d, &base, Variant::Carried, 0.0, &all).print(&format!("points carried frame to frame, d = {d}"));
    }
    study.speed_rows(d, &base);
    for offset_ms in [-20.0, -10.0, -5.0, 5.0, 10.0, 20.0] {
        study
            .run(d, &base, Variant::Pipeline, offset_ms / 1e3, &all)
            .print(&format!("d = {d}, motion capture {offset_ms:+} ms"));
    }
    study.velocity_rows(&base);
    study.floor_rows(&base)?;
    Ok(study.frame_to_frame(&base))
}
