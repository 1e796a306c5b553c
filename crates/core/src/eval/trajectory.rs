//! Trajectory metrics of the odometry against ground truth, as evo computes them: the estimate
//! aligned to the ground truth by the similarity (Sim(3): rotation, translation and scale, since
//! DUSt3R's scale is arbitrary) that Umeyama's method finds over the matched positions; the
//! absolute trajectory error (ATE) of the aligned positions; the relative pose error (RPE) of the
//! motions over a frame or time delta, translations in the aligned scale; and the share of frames
//! that were tracked at all.

use nalgebra::{Matrix3, Rotation3, Vector3};

use super::{pose_at, rotation_error_deg, EvalError, StampedPose};
use crate::geometry::Transform;

/// Summary statistics of a set of errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ErrorStats {
    /// Root mean square.
    pub rmse: f64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl ErrorStats {
    fn of(errors: &[f64]) -> Self {
        if errors.is_empty() {
            return Self::default();
        }
        let n = errors.len() as f64;
        let mut sorted = errors.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len().is_multiple_of(2) { (sorted[mid - 1] + sorted[mid]) / 2.0 } else { sorted[mid] };
        Self {
            rmse: (errors.iter().map(|e| e * e).sum::<f64>() / n).sqrt(),
            mean: errors.iter().sum::<f64>() / n,
            median,
            max: sorted[sorted.len() - 1],
        }
    }
}

/// The motions RPE compares, as evo picks them by default (consecutive, not all pairs).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum RpeDelta {
    /// Tracked frames 0, n, 2n, ...: each motion over n tracked frames.
    Frames(usize),
    /// From the first tracked frame, each next one the first at least this many seconds after
    /// the last: each motion over that time.
    Seconds(f64),
}

/// A similarity `y = scale * rotation * x + translation`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sim3 {
    /// The scale.
    pub scale: f64,
    /// The rotation.
    pub rotation: Rotation3<f64>,
    /// The translation.
    pub translation: Vector3<f64>,
}

impl Sim3 {
    /// `x` mapped.
    pub fn apply(&self, x: &Vector3<f64>) -> Vector3<f64> {
        self.rotation * x * self.scale + self.translation
    }
}

/// Umeyama's least-squares similarity taking `from` onto `to` (paired points; at least three
/// not on one line). `None` when they do not determine one.
pub fn umeyama(from: &[Vector3<f64>], to: &[Vector3<f64>]) -> Option<Sim3> {
    let n = from.len().min(to.len());
    if n < 3 {
        return None;
    }
    let mean = |v: &[Vector3<f64>]| v[..n].iter().sum::<Vector3<f64>>() / n as f64;
    let (mx, my) = (mean(from), mean(to));
    let var_x = from[..n].iter().map(|x| (x - mx).norm_squared()).sum::<f64>() / n as f64;
    let cov =
        from[..n].iter().zip(&to[..n]).map(|(x, y)| (y - my) * (x - mx).transpose()).sum::<Matrix3<f64>>() / n as f64;
    let svd = cov.svd(true, true);
    let (u, v_t) = (svd.u?, svd.v_t?);
    let mut s = Matrix3::identity();
    if (u.determinant() * v_t.determinant()) < 0.0 {
        s[(2, 2)] = -1.0;
    }
    // Degenerate (collinear or coincident) points leave the rotation undetermined.
    let d = svd.singular_values;
    if var_x < 1e-18 || d[1] < 1e-12 * d[0].max(1e-300) {
        return None;
    }
    let rotation = Rotation3::from_matrix_unchecked(u * s * v_t);
    let scale = (d[0] * s[(0, 0)] + d[1] * s[(1, 1)] + d[2] * s[(2, 2)]) / var_x;
    Some(Sim3 { scale, rotation, translation: my - rotation * mx * scale })
}

/// The least-squares rigid motion (SE(3): no scale) taking `from` onto `to`: Umeyama's rotation,
/// which does not depend on the scale, with the translation between the centroids.
pub fn umeyama_rigid(from: &[Vector3<f64>], to: &[Vector3<f64>]) -> Option<Sim3> {
    let sim = umeyama(from, to)?;
    let n = from.len().min(to.len()) as f64;
    let (mx, my) = (from.iter().sum::<Vector3<f64>>() / n, to.iter().sum::<Vector3<f64>>() / n);
    Some(Sim3 { scale: 1.0, rotation: sim.rotation, translation: my - sim.rotation * mx })
}

/// One scored frame.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TrajectoryPoint {
    /// Its time, seconds.
    pub t: f64,
    /// The estimate's position after alignment.
    pub estimate: [f64; 3],
    /// The ground truth's position.
    pub ground_truth: [f64; 3],
    /// Their distance (the absolute trajectory error).
    pub error: f64,
}

/// The trajectory metrics.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TrajectoryReport {
    /// Frames the pipeline processed.
    pub num_frames: usize,
    /// Frames it tracked (odometry messages).
    pub num_tracked: usize,
    /// `num_tracked / num_frames`.
    pub tracked_fraction: f64,
    /// Tracked frames within the ground truth's time range (the ones scored).
    pub num_scored: usize,
    /// The alignment's scale: ground-truth units per odometry unit.
    pub scale: f64,
    /// Length of the ground-truth path over the scored frames.
    pub path_length: f64,
    /// Absolute trajectory error after the Sim(3) alignment, ground-truth units.
    pub ate: ErrorStats,
    /// ATE RMSE as a percentage of the path length.
    pub ate_percent_of_path: f64,
    /// Absolute trajectory error after a rigid (SE(3)) alignment, no scale fitted: what a metric
    /// run is judged by.
    pub ate_se3: ErrorStats,
    /// `ate_se3`'s RMSE as a percentage of the path length.
    pub ate_se3_percent_of_path: f64,
    /// How far the Sim(3) alignment's scale is from 1, as a fraction (a metric run's scale
    /// error).
    pub scale_error: f64,
    /// The RPE's motion.
    pub rpe_delta: RpeDelta,
    /// RPE translation, ground-truth units (the estimate in the aligned scale).
    pub rpe_translation: ErrorStats,
    /// RPE rotation, degrees.
    pub rpe_rotation_deg: ErrorStats,
    /// Every scored frame, for plots.
    pub points: Vec<TrajectoryPoint>,
}

impl std::fmt::Display for TrajectoryReport {
    /// One line, in millimetres where the ground truth is in metres.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} frames tracked, ATE RMSE {:.2} mm = {:.3} % of the {:.3} m path, RPE {:.2} mm / {:.3} deg RMSE, scale {:.4}; as metric: SE(3) ATE RMSE {:.2} mm = {:.3} %, scale error {:.2} %",
            self.num_tracked,
            self.num_frames,
            self.ate.rmse * 1e3,
            self.ate_percent_of_path,
            self.path_length,
            self.rpe_translation.rmse * 1e3,
            self.rpe_rotation_deg.rmse,
            self.scale,
            self.ate_se3.rmse * 1e3,
            self.ate_se3_percent_of_path,
            self.scale_error * 100.0
        )
    }
}

/// The error of one motion, as RPE measures it: `E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j)` for the
/// estimate's poses `P` (translations times `scale`) against the ground truth's `Q`.
pub struct MotionError {
    /// The estimate's rotation over the motion, `R(P_i)^-1 R(P_j)`.
    pub estimate: Rotation3<f64>,
    /// The ground truth's, `R(Q_i)^-1 R(Q_j)`.
    pub ground_truth: Rotation3<f64>,
    /// E's translation: the estimate's motion less the ground truth's, in the ground truth's
    /// frame at j.
    pub translation: Vector3<f64>,
}

impl MotionError {
    /// The error of the motion `est` (from, to) against `gt`'s over the same frames.
    pub fn of<A, B>(
        est: (&Transform<A, B>, &Transform<A, B>),
        gt: (&Transform<A, B>, &Transform<A, B>),
        scale: f64,
    ) -> Self {
        let ((pi, pj), (qi, qj)) = (est, gt);
        let estimate = pi.rotation.inverse() * pj.rotation;
        let est_t = pi.rotation.inverse() * (pj.translation - pi.translation) * scale;
        let ground_truth = qi.rotation.inverse() * qj.rotation;
        let gt_t = qi.rotation.inverse() * (qj.translation - qi.translation);
        Self { estimate, ground_truth, translation: ground_truth.inverse() * (est_t - gt_t) }
    }

    /// E's rotation, `R(Q_i^-1 Q_j)^-1 R(P_i^-1 P_j)`, as a rotation vector in degrees.
    pub fn rotation_deg(&self) -> Vector3<f64> {
        (self.ground_truth.inverse() * self.estimate).scaled_axis().map(f64::to_degrees)
    }
}

/// Scores `estimate` (the odometry's poses, sorted by time) of a run that processed `frames`
/// frames against `gt`, sampled within `tolerance` seconds of its ends.
pub fn evaluate_trajectory(
    estimate: &[StampedPose],
    frames: usize,
    gt: &[StampedPose],
    tolerance: f64,
    delta: RpeDelta,
) -> Result<TrajectoryReport, EvalError> {
    if gt.is_empty() {
        return Err(EvalError::Empty);
    }
    let matched: Vec<(&StampedPose, StampedPose)> = estimate
        .iter()
        .filter_map(|e| {
            pose_at(gt, e.t, tolerance)
                .map(|g| (e, StampedPose { t: e.t, pose: Transform::new(g.rotation, g.translation) }))
        })
        .collect();
    let from: Vec<Vector3<f64>> = matched.iter().map(|(e, _)| e.pose.translation).collect();
    let to: Vec<Vector3<f64>> = matched.iter().map(|(_, g)| g.pose.translation).collect();
    let sim = umeyama(&from, &to).ok_or_else(|| {
        EvalError::Trajectory(format!(
            "{} tracked frames within the ground truth do not determine an alignment (3 not on a line needed)",
            matched.len()
        ))
    })?;
    let points: Vec<TrajectoryPoint> = matched
        .iter()
        .map(|(e, g)| {
            let a = sim.apply(&e.pose.translation);
            let y = g.pose.translation;
            TrajectoryPoint { t: e.t, estimate: a.into(), ground_truth: y.into(), error: (a - y).norm() }
        })
        .collect();
    let path_length = to.windows(2).map(|w| (w[1] - w[0]).norm()).sum::<f64>();
    let ate = ErrorStats::of(&points.iter().map(|p| p.error).collect::<Vec<_>>());
    let rigid = umeyama_rigid(&from, &to).unwrap_or(sim);
    let ate_se3 = ErrorStats::of(&from.iter().zip(&to).map(|(x, y)| (rigid.apply(x) - y).norm()).collect::<Vec<_>>());
    let percent = |e: f64| if path_length > 0.0 { e / path_length * 100.0 } else { f64::NAN };

    // RPE: E = (Q_i^-1 Q_j)^-1 (P_i^-1 P_j), the estimate's translations in the aligned scale,
    // over consecutive motions i -> j -> ...
    let (mut rpe_t, mut rpe_r) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < matched.len() {
        let j = match delta {
            RpeDelta::Frames(d) => Some(i + d.max(1)).filter(|&j| j < matched.len()),
            RpeDelta::Seconds(s) => (i + 1..matched.len()).find(|&j| matched[j].0.t - matched[i].0.t >= s),
        };
        let Some(j) = j else { break };
        let est = (&matched[i].0.pose, &matched[j].0.pose);
        let e = MotionError::of(est, (&matched[i].1.pose, &matched[j].1.pose), sim.scale);
        rpe_t.push(e.translation.norm());
        rpe_r.push(rotation_error_deg(&e.ground_truth, &e.estimate));
        i = j;
    }
    Ok(TrajectoryReport {
        num_frames: frames,
        num_tracked: estimate.len(),
        tracked_fraction: if frames > 0 { estimate.len() as f64 / frames as f64 } else { 0.0 },
        num_scored: matched.len(),
        scale: sim.scale,
        path_length,
        ate_percent_of_path: percent(ate.rmse),
        ate,
        ate_se3_percent_of_path: percent(ate_se3.rmse),
        ate_se3,
        scale_error: (sim.scale - 1.0).abs(),
        rpe_delta: delta,
        rpe_translation: ErrorStats::of(&rpe_t),
        rpe_rotation_deg: ErrorStats::of(&rpe_r),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pose(t: f64, r: Rotation3<f64>, p: Vector3<f64>) -> StampedPose {
        StampedPose { t, pose: Transform::new(r, p) }
    }

    #[test]
    fn a_similar_copy_of_the_ground_truth_scores_zero_and_a_known_offset_scores_itself() {
        // Ground truth: a curve with turning camera; the estimate: the same in another frame and
        // at 0.3 times the scale.
        let gt: Vec<StampedPose> = (0..20)
            .map(|i| {
                let a = i as f64 * 0.1;
                pose(a, Rotation3::from_euler_angles(0.0, a, 0.1 * a), Vector3::new(a.cos(), a.sin(), 0.2 * a))
            })
            .collect();
        let g = Rotation3::from_euler_angles(0.4, -0.2, 1.0);
        let (s, shift) = (0.3, Vector3::new(5.0, -1.0, 2.0));
        let est: Vec<StampedPose> =
            gt.iter().map(|p| pose(p.t, g * p.pose.rotation, g * p.pose.translation * s + shift)).collect();
        let r = evaluate_trajectory(&est, 25, &gt, 0.01, RpeDelta::Frames(1)).unwrap();
        assert!((r.scale - 1.0 / s).abs() < 1e-9, "{}", r.scale);
        assert!(r.ate.rmse < 1e-9 && r.rpe_translation.max < 1e-9 && r.rpe_rotation_deg.max < 1e-6, "{r:?}");
        assert_eq!((r.num_tracked, r.num_scored, r.tracked_fraction), (20, 20, 0.8));
        // Not metric: the rigid alignment cannot hide the scale, and the scale error says it.
        assert!(r.ate_se3.rmse > 0.1 && (r.scale_error - (1.0 / s - 1.0)).abs() < 1e-9, "{r:?}");
        // The same motion in metres: the rigid alignment finds it exactly.
        let metric: Vec<StampedPose> =
            gt.iter().map(|p| pose(p.t, g * p.pose.rotation, g * p.pose.translation + shift)).collect();
        let r = evaluate_trajectory(&metric, 20, &gt, 0.01, RpeDelta::Frames(1)).unwrap();
        assert!(r.ate_se3.rmse < 1e-9 && r.scale_error < 1e-9, "{r:?}");

        // One frame 0.1 off along z (after alignment the others barely move): ATE rmse of one
        // error among 20 is about 0.1 / sqrt(20); the RPE sees it in the two motions around it.
        let mut off = est.clone();
        off[10].pose.translation += g * Vector3::new(0.0, 0.0, 0.1) * s;
        let r = evaluate_trajectory(&off, 20, &gt, 0.01, RpeDelta::Frames(1)).unwrap();
        assert!((r.ate.rmse - 0.1 / 20f64.sqrt()).abs() < 0.005, "{:?}", r.ate);
        assert!((r.rpe_translation.max - 0.1).abs() < 0.01, "{:?}", r.rpe_translation);
        // Over 0.5 s deltas, the RPE takes frames 0, 5, 10, ...
        let r = evaluate_trajectory(&est, 20, &gt, 0.01, RpeDelta::Seconds(0.5)).unwrap();
        assert!(r.rpe_rotation_deg.max < 1e-6);
        // Three frames on a line do not fix a rotation.
        let line: Vec<StampedPose> =
            (0..3).map(|i| pose(i as f64 * 0.1, Rotation3::identity(), Vector3::new(i as f64, 0.0, 0.0))).collect();
        assert!(evaluate_trajectory(&line, 3, &line, 0.01, RpeDelta::Frames(1)).is_err());
    }
}
