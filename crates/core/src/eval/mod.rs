//! Relative-pose metrics of a replay against ground truth: per pair the rotation error and the
//! translation-direction error (DUSt3R's poses have no metric scale, so only the direction of t
//! is compared), and the pose AUC at 5/10/30 degrees over max(rotation, translation) error — the
//! area under the recall curve up to each threshold, as SuperGlue, RelPose and the DUSt3R port
//! report it.

pub mod bag;
pub mod hat;
pub mod plot;
pub mod refined;
pub mod trajectory;
pub mod tum;

use nalgebra::{Rotation3, UnitQuaternion, Vector3};

use crate::geometry::Transform;

/// The world (ground truth's fixed frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct World;
/// A camera at some time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Camera;

/// `T_world_camera` at a time (seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct StampedPose {
    /// Seconds.
    pub t: f64,
    /// The camera's pose in the world.
    pub pose: Transform<World, Camera>,
}

/// Why an evaluation could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A TUM trajectory line does not parse.
    #[error("TUM trajectory line {line}: {reason}")]
    Tum {
        /// The line number (1-based).
        line: usize,
        /// What went wrong.
        reason: String,
    },
    /// The ground truth has no poses.
    #[error("the ground truth has no poses")]
    Empty,
    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A bag could not be read.
    #[error(transparent)]
    Bag(#[from] crate::bag::BagError),
    /// A message of a bag does not decode.
    #[error("a message on {topic} does not decode: {reason}")]
    Message {
        /// Its topic.
        topic: String,
        /// What went wrong.
        reason: String,
    },
    /// The bag has no pairs to score.
    #[error("{0} has no pairs (no sp_dust3r/msg/PairPose or sensor_msgs/msg/PointCloud2 messages)")]
    NoPairs(String),
    /// The ground-truth topic is missing, ambiguous or of the wrong type.
    #[error("{0}")]
    GroundTruthTopic(String),
    /// The trajectory cannot be scored.
    #[error("trajectory: {0}")]
    Trajectory(String),
}

/// Poses as a TUM trajectory (`timestamp tx ty tz qx qy qz qw` per line, stamps to the
/// nanosecond): what [`parse_tum`] and evo read.
pub fn format_tum(poses: &[StampedPose]) -> String {
    let mut text = String::new();
    for p in poses {
        let q = UnitQuaternion::from_rotation_matrix(&p.pose.rotation);
        let t = &p.pose.translation;
        text += &format!("{:.9} {} {} {} {} {} {} {}\n", p.t, t.x, t.y, t.z, q.i, q.j, q.k, q.w);
    }
    text
}

/// A TUM trajectory (`timestamp tx ty tz qx qy qz qw` per line, `#` comments) as poses of the
/// camera in the world, sorted by time.
pub fn parse_tum(text: &str) -> Result<Vec<StampedPose>, EvalError> {
    let mut poses = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let v: Vec<f64> = line
            .split_whitespace()
            .map(|x| x.parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| EvalError::Tum { line: i + 1, reason: e.to_string() })?;
        if v.len() != 8 || v.iter().any(|x| !x.is_finite()) {
            return Err(EvalError::Tum { line: i + 1, reason: format!("{} finite numbers, 8 expected", v.len()) });
        }
        let q = nalgebra::Quaternion::new(v[7], v[4], v[5], v[6]);
        if q.norm() < 1e-9 {
            return Err(EvalError::Tum { line: i + 1, reason: "zero quaternion".into() });
        }
        poses.push(StampedPose {
            t: v[0],
            pose: Transform::new(
                UnitQuaternion::from_quaternion(q).to_rotation_matrix(),
                Vector3::new(v[1], v[2], v[3]),
            ),
        });
    }
    poses.sort_by(|a, b| a.t.total_cmp(&b.t));
    Ok(poses)
}

/// The pose at time `t`: linear in translation and spherical in rotation between the two
/// nearest samples; `None` outside the trajectory (beyond `tolerance` seconds of its ends).
pub fn pose_at(traj: &[StampedPose], t: f64, tolerance: f64) -> Option<Transform<World, Camera>> {
    let first = traj.first()?;
    let last = traj.last()?;
    if t < first.t - tolerance || t > last.t + tolerance {
        return None;
    }
    let i = traj.partition_point(|p| p.t <= t);
    if i == 0 {
        return Some(first.pose);
    }
    if i == traj.len() {
        return Some(last.pose);
    }
    let (a, b) = (&traj[i - 1], &traj[i]);
    let w = if b.t > a.t { (t - a.t) / (b.t - a.t) } else { 0.0 };
    Some(a.pose.interpolate(&b.pose, w))
}

/// Angle between two rotations, degrees.
pub fn rotation_error_deg(est: &Rotation3<f64>, gt: &Rotation3<f64>) -> f64 {
    // Through the quaternion of the difference: accurate near zero, unlike acos of the trace.
    let d = UnitQuaternion::from_rotation_matrix(&(est.inverse() * gt));
    2.0 * d.imag().norm().atan2(d.w.abs()).to_degrees()
}

/// Angle between two translation directions, degrees; `None` when either is (near) zero.
pub fn direction_error_deg(est: &Vector3<f64>, gt: &Vector3<f64>) -> Option<f64> {
    let (ne, ng) = (est.norm(), gt.norm());
    if ne < 1e-12 || ng < 1e-12 {
        return None;
    }
    Some(est.cross(gt).norm().atan2(est.dot(gt)).to_degrees())
}

/// Pose AUC at each threshold (degrees) over per-pair errors: the recall curve (piecewise linear
/// through (sorted error, share of pairs up to it), from (0, 0)) integrated from 0 to the
/// threshold over the errors strictly below it, then held flat, divided by the threshold —
/// SuperGlue's `pose_auc`. Pairs without an estimate count with an infinite error.
pub fn pose_auc(errors: &[f64], thresholds: &[f64]) -> Vec<f64> {
    if errors.is_empty() {
        return thresholds.iter().map(|_| 0.0).collect();
    }
    let mut e: Vec<f64> = errors.iter().map(|&x| if x.is_nan() { f64::INFINITY } else { x }).collect();
    // (Infinite errors sort last and never fall below a threshold.)
    e.sort_by(f64::total_cmp);
    let n = e.len() as f64;
    let mut xs = vec![0.0];
    let mut recall = vec![0.0];
    for (i, &x) in e.iter().enumerate() {
        xs.push(x);
        recall.push((i + 1) as f64 / n);
    }
    thresholds
        .iter()
        .map(|&th| {
            let last = xs.partition_point(|&x| x < th);
            let mut area = 0.0;
            for k in 1..last {
                area += (xs[k] - xs[k - 1]) * (recall[k] + recall[k - 1]) / 2.0;
            }
            // Flat from the last error below the threshold up to the threshold.
            let (x_end, r_end) = (xs[last - 1], recall[last - 1]);
            area += (th - x_end) * r_end;
            area / th
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_matches_hand_computed_values() {
        // errors 1, 2, 4 degrees, and one pair with no pose.
        // recall: 0 -> 1/4 at 1, 2/4 at 2, 3/4 at 4.
        // AUC@5: [0,1] ramp 0..0.25 -> 0.125; [1,2] 0.25..0.5 -> 0.375; [2,4] 0.5..0.75 -> 1.25;
        //        [4,5] flat 0.75 -> 0.75; total 2.5 / 5 = 0.5.
        // AUC@2: only errors strictly below the threshold enter (SuperGlue's searchsorted):
        //        the ramp to (1, 0.25) -> 0.125, then flat at 0.25 from 1 to 2 -> 0.25;
        //        0.375 / 2 = 0.1875.
        // AUC@0.5: the ramp to 1 is not reached; flat at recall 0 -> 0.
        let auc = pose_auc(&[2.0, f64::NAN, 1.0, 4.0], &[5.0, 2.0, 0.5]);
        for (a, b) in auc.iter().zip([0.5, 0.1875, 0.0]) {
            assert!((a - b).abs() < 1e-12, "{auc:?}");
        }
        assert_eq!(pose_auc(&[], &[5.0]), vec![0.0]);
        // All perfect: AUC 1.
        assert!((pose_auc(&[0.0, 0.0], &[10.0])[0] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn angular_errors_and_interpolation() {
        let r = Rotation3::from_axis_angle(&Vector3::z_axis(), 10f64.to_radians());
        assert!((rotation_error_deg(&r, &Rotation3::identity()) - 10.0).abs() < 1e-9);
        assert!(rotation_error_deg(&r, &r) < 1e-9);
        assert!(
            (direction_error_deg(&Vector3::new(1.0, 0.0, 0.0), &Vector3::new(0.0, 2.0, 0.0)).unwrap() - 90.0).abs()
                < 1e-9
        );
        assert_eq!(direction_error_deg(&Vector3::zeros(), &Vector3::x()), None);
        let traj = parse_tum(
            "# t tx ty tz qx qy qz qw\n1.0 0 0 0 0 0 0 1\n3.0 2 0 0 0 0 0.7071067811865476 0.7071067811865476\n",
        )
        .unwrap();
        let mid = pose_at(&traj, 2.0, 0.1).unwrap();
        assert!((mid.translation - Vector3::new(1.0, 0.0, 0.0)).norm() < 1e-12);
        // Halfway through a 90 degree turn about z: 45 degrees.
        assert!((rotation_error_deg(&mid.rotation, &Rotation3::identity()) - 45.0).abs() < 1e-9);
        assert!(pose_at(&traj, 3.5, 0.1).is_none() && pose_at(&traj, 3.05, 0.1).is_some());
        assert!(matches!(parse_tum("1 2 3"), Err(EvalError::Tum { line: 1, .. })));
    }
}

/// One estimated pair: view 1's and view 2's times and camera 2's pose in camera 1's frame;
/// `None` when the pipeline found no pose for the pair (then `t2` may be NaN: unknown).
#[derive(Clone, Debug)]
pub struct PairEstimate {
    /// View 1's time, seconds.
    pub t1: f64,
    /// View 2's time, seconds (NaN when unknown).
    pub t2: f64,
    /// Camera 2's pose in camera 1's frame, if the pipeline found one.
    pub t_cam1_cam2: Option<crate::geometry::TCam1Cam2>,
}

/// A pair's errors against the ground truth (degrees); `None` where not computable.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PairMetric {
    /// View 1's time, seconds.
    pub reference_time: f64,
    /// View 2's time, seconds.
    pub query_time: f64,
    /// Angle of the relative rotation error.
    pub rotation_error_deg: Option<f64>,
    /// Angle between the estimated and the true translation directions.
    pub translation_error_deg: Option<f64>,
}

impl PairMetric {
    /// What the AUC ranks: the larger of the two errors; infinite without a pose.
    pub fn max_error(&self) -> f64 {
        match (self.rotation_error_deg, self.translation_error_deg) {
            (Some(r), Some(t)) => r.max(t),
            (Some(r), None) => r,
            _ => f64::INFINITY,
        }
    }
}

/// What `evaluate` found: per-pair errors and the pose AUC.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    /// Every pair, in time order.
    pub pairs: Vec<PairMetric>,
    /// Pairs scored.
    pub num_pairs: usize,
    /// Pairs without a pose (counted as failures).
    pub num_without_pose: usize,
    /// Pairs whose times fall outside the ground truth (left out of the metrics).
    pub num_without_ground_truth: usize,
    /// The AUC thresholds, degrees.
    pub auc_thresholds_deg: Vec<f64>,
    /// The AUC at each threshold.
    pub auc: Vec<f64>,
    /// The odometry's trajectory metrics, when the bag has tracked frames.
    pub trajectory: Option<trajectory::TrajectoryReport>,
    /// The same frames on the map as they went out (`map -> odom` from /tf), when the bag has it.
    pub map_trajectory: Option<trajectory::TrajectoryReport>,
    /// The same frames on the map after the fact ([`refined::refined_map`]).
    pub refined_map_trajectory: Option<trajectory::TrajectoryReport>,
}

/// Everything a replay's output bag can be scored on: its pairs (see [`evaluate`]) and, when it
/// has tracked frames, its odometry (see [`trajectory::evaluate_trajectory`], the RPE over
/// `delta`) and the same frames on the map, as published and after the fact. A trajectory too
/// short to align is left out with a warning.
pub fn evaluate_bag(
    bag: &std::path::Path,
    gt: &[StampedPose],
    tolerance: f64,
    delta: trajectory::RpeDelta,
) -> Result<Report, EvalError> {
    evaluate_bag_with(bag, &bag::bag_estimates(bag)?, gt, tolerance, delta)
}

/// [`evaluate_bag`] of what was already read from `bag` (`found`, from
/// [`bag::bag_estimates`]).
pub fn evaluate_bag_with(
    bag: &std::path::Path,
    found: &bag::BagEstimates,
    gt: &[StampedPose],
    tolerance: f64,
    delta: trajectory::RpeDelta,
) -> Result<Report, EvalError> {
    let odometry = &found.odometry;
    // A bag with odometry but no pairs (a keypoints-and-odometry recording) is still scored.
    if found.pairs.is_empty() && odometry.odom.is_empty() {
        return Err(EvalError::NoPairs(bag.display().to_string()));
    }
    let mut report = evaluate(&found.pairs, gt, tolerance)?;
    let score = |poses: &[StampedPose], what: &str| {
        if poses.is_empty() {
            return None;
        }
        trajectory::evaluate_trajectory(poses, odometry.frames, gt, tolerance, delta)
            .map_err(|e| tracing::warn!("{what}: {e}"))
            .ok()
    };
    report.trajectory = score(&odometry.odom, "the odometry");
    report.map_trajectory = score(&odometry.map, "the frames on the map");
    report.refined_map_trajectory = score(&odometry.refined, "the frames on the map after the fact");
    Ok(report)
}

/// The metrics of `pairs` against the trajectory (ground truth of the camera's optical frame in
/// a fixed world frame), sampled within `tolerance` seconds of its ends.
pub fn evaluate(pairs: &[PairEstimate], gt: &[StampedPose], tolerance: f64) -> Result<Report, EvalError> {
    if gt.is_empty() {
        return Err(EvalError::Empty);
    }
    let mut metrics = Vec::new();
    let mut without_gt = 0;
    for p in pairs {
        let Some(w1) = pose_at(gt, p.t1, tolerance) else {
            without_gt += 1;
            continue;
        };
        let Some(est) = &p.t_cam1_cam2 else {
            // No pose (view 2's time may be unknown): an infinite error in the AUC.
            metrics.push(PairMetric {
                reference_time: p.t1,
                query_time: p.t2,
                rotation_error_deg: None,
                translation_error_deg: None,
            });
            continue;
        };
        let Some(w2) = pose_at(gt, p.t2, tolerance) else {
            without_gt += 1;
            continue;
        };
        // T_c1_c2 = T_c1_w * T_w_c2.
        let truth = w1.inverse().compose(&w2);
        metrics.push(PairMetric {
            reference_time: p.t1,
            query_time: p.t2,
            rotation_error_deg: Some(rotation_error_deg(&est.rotation, &truth.rotation)),
            translation_error_deg: direction_error_deg(&est.translation, &truth.translation),
        });
    }
    let thresholds = vec![5.0, 10.0, 30.0];
    let errors: Vec<f64> = metrics.iter().map(PairMetric::max_error).collect();
    Ok(Report {
        num_pairs: metrics.len(),
        num_without_pose: metrics.iter().filter(|m| m.rotation_error_deg.is_none()).count(),
        num_without_ground_truth: without_gt,
        auc: pose_auc(&errors, &thresholds),
        auc_thresholds_deg: thresholds,
        pairs: metrics,
        trajectory: None,
        map_trajectory: None,
        refined_map_trajectory: None,
    })
}
