//! How much of two odometries' frame-to-frame error is their own and how much they share with
//! each other: the three-cornered hat. Each estimate's error against the ground truth is its own
//! error minus the ground truth's (and minus whatever else both see alike: the same images, the
//! same clock); with the three independent, the mean squares of the two errors and of their
//! difference give the three parts. Where the shared part dominates, a per-frame bar below it
//! cannot be told from the reference's noise.

use std::collections::HashMap;

use nalgebra::{Rotation3, Vector3};

use super::trajectory::MotionError;
use super::{pose_at, Camera, StampedPose, World};
use crate::geometry::Transform;
use crate::quantile::median;
use crate::rng::SplitMix64;

/// Root-mean-square parts of one error (per motion, all three axes together).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Split {
    /// What both estimates' errors share: the ground truth's, and anything both see alike.
    pub shared: f64,
    /// The first estimate's own.
    pub own_a: f64,
    /// The second estimate's own.
    pub own_b: f64,
}

impl Split {
    /// From the mean squares of error a, error b and of a - b. A part the noise of a short run
    /// makes negative reads 0.
    fn of(a: f64, b: f64, a_minus_b: f64) -> Self {
        let shared = (a + b - a_minus_b) / 2.0;
        Self {
            shared: shared.max(0.0).sqrt(),
            own_a: (a - shared).max(0.0).sqrt(),
            own_b: (b - shared).max(0.0).sqrt(),
        }
    }
}

/// The split of the errors of the motions between consecutive frames that both estimates
/// tracked.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SharedError {
    /// Motions compared.
    pub motions: usize,
    /// Rotation error, degrees.
    pub rotation_deg: Split,
    /// Translation error, ground-truth units (each estimate in its own aligned scale).
    pub translation: Split,
    /// Correlation of the two estimates' rotation errors, over the axes' components.
    pub rotation_correlation: f64,
    /// a's median rotation error (angle) over b's, with its interval.
    pub rotation_ratio: MedianRatio,
    /// a's median translation error (length) over b's, with its interval.
    pub translation_ratio: MedianRatio,
}

/// The ratio of one estimate's median error to another's over the same motions, with the 95 %
/// interval of a paired bootstrap (the motions drawn with replacement, each keeping both
/// errors). A bar of the form "a's median below b's" is decided by this data only when the
/// interval lies on one side of 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct MedianRatio {
    /// median(a) / median(b).
    pub ratio: f64,
    /// 2.5th percentile of the resampled ratios.
    pub low: f64,
    /// 97.5th percentile of the resampled ratios.
    pub high: f64,
}

/// Resamples of [`median_ratio`]: enough that its percentiles move by well under a percent.
const RESAMPLES: usize = 2000;

/// [`MedianRatio`] of paired errors `(a, b)`; NaN throughout when there are none.
pub fn median_ratio(pairs: &[(f64, f64)], seed: u64) -> MedianRatio {
    let ratio_of = |a: &[f64], b: &[f64]| median(a) / median(b);
    let (a, b): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
    if pairs.is_empty() {
        return MedianRatio { ratio: f64::NAN, low: f64::NAN, high: f64::NAN };
    }
    let mut rng = SplitMix64::new(seed);
    let (mut ra, mut rb) = (vec![0.0; pairs.len()], vec![0.0; pairs.len()]);
    let mut ratios: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            for (x, y) in ra.iter_mut().zip(rb.iter_mut()) {
                (*x, *y) = pairs[rng.below(pairs.len())];
            }
            ratio_of(&ra, &rb)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((RESAMPLES - 1) as f64 * q).round() as usize];
    MedianRatio { ratio: ratio_of(&a, &b), low: at(0.025), high: at(0.975) }
}

/// The error of the motion `est` (from, to) against `gt` over the same stamps, as RPE measures
/// it: rotation vector in degrees, translation (the estimate's times `scale`).
fn motion_error(
    est: (&StampedPose, &StampedPose),
    gt: &[StampedPose],
    scale: f64,
    tolerance: f64,
) -> Option<(Vector3<f64>, Vector3<f64>)> {
    let (qi, qj) = (pose_at(gt, est.0.t, tolerance)?, pose_at(gt, est.1.t, tolerance)?);
    let e = MotionError::of((&est.0.pose, &est.1.pose), (&qi, &qj), scale);
    Some((e.rotation_deg(), e.translation))
}

/// One motion's errors (rotation, translation) in a and in b.
type Errors = (MotionErrors, MotionErrors);

/// Frames count as the same when their stamps agree to a microsecond.
fn key(t: f64) -> i64 {
    (t * 1e6).round() as i64
}

/// Where each frame of `poses` is, by its stamp's [`key`].
fn by_stamp(poses: &[StampedPose]) -> HashMap<i64, usize> {
    poses.iter().enumerate().map(|(i, p)| (key(p.t), i)).collect()
}

/// One estimate's error of one motion: the rotation vector (degrees) and the translation.
pub type MotionErrors = (Vector3<f64>, Vector3<f64>);

/// One motion's errors in two estimates: the stamp it ends at, and each one's rotation
/// (degrees) and translation error vectors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedMotion {
    /// The stamp of the frame the motion ends at.
    pub t: f64,
    /// The first estimate's.
    pub a: MotionErrors,
    /// The second's.
    pub b: MotionErrors,
}

/// The errors of the motions between frames consecutive in both `a` and `b` (each sorted by
/// time, translations times their alignment's scale) against `gt`.
pub fn paired_motions(
    a: (&[StampedPose], f64),
    b: (&[StampedPose], f64),
    gt: &[StampedPose],
    tolerance: f64,
) -> Vec<PairedMotion> {
    let in_b = by_stamp(b.0);
    let mut out = Vec::new();
    for w in a.0.windows(2) {
        let Some(&j) = in_b.get(&key(w[0].t)) else { continue };
        let Some(next) = b.0.get(j + 1).filter(|p| key(p.t) == key(w[1].t)) else { continue };
        let ea = motion_error((&w[0], &w[1]), gt, a.1, tolerance);
        let eb = motion_error((&b.0[j], next), gt, b.1, tolerance);
        if let (Some(ea), Some(eb)) = (ea, eb) {
            out.push(PairedMotion { t: w[1].t, a: ea, b: eb });
        }
    }
    out
}

/// The three-cornered hat of `a` and `b` (each sorted by time, translations times their
/// alignment's scale) against `gt`, over the motions between frames consecutive in both.
pub fn shared_error(
    a: (&[StampedPose], f64),
    b: (&[StampedPose], f64),
    gt: &[StampedPose],
    tolerance: f64,
) -> SharedError {
    shared_error_of(&paired_motions(a, b, gt, tolerance))
}

/// [`shared_error`] over motions already paired (see [`paired_motions`]).
pub fn shared_error_of(motions: &[PairedMotion]) -> SharedError {
    let errors: Vec<Errors> = motions.iter().map(|m| (m.a, m.b)).collect();
    let n = errors.len().max(1) as f64;
    let mean_square = |f: &dyn Fn(&Errors) -> Vector3<f64>| errors.iter().map(|e| f(e).norm_squared()).sum::<f64>() / n;
    let split = |a: &dyn Fn(&Errors) -> Vector3<f64>, b: &dyn Fn(&Errors) -> Vector3<f64>| {
        Split::of(mean_square(a), mean_square(b), mean_square(&|e| a(e) - b(e)))
    };
    SharedError {
        motions: errors.len(),
        rotation_deg: split(&|e| e.0 .0, &|e| e.1 .0),
        translation: split(&|e| e.0 .1, &|e| e.1 .1),
        rotation_correlation: correlation(errors.iter().flat_map(|((ra, _), (rb, _))| (0..3).map(|k| (ra[k], rb[k])))),
        rotation_ratio: median_ratio(&errors.iter().map(|(a, b)| (a.0.norm(), b.0.norm())).collect::<Vec<_>>(), 1),
        translation_ratio: median_ratio(&errors.iter().map(|(a, b)| (a.1.norm(), b.1.norm())).collect::<Vec<_>>(), 2),
    }
}

/// How far apart three reads of the camera's turn over `span` frames lie: median rotation
/// angles, degrees (0 when none), over the spans whose ends both estimates tracked (frames
/// counted in `a`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SpanAgreement {
    /// Frames apart.
    pub span: usize,
    /// Spans compared.
    pub spans: usize,
    /// Estimate a against the ground truth.
    pub a_gt: f64,
    /// Estimate b against the ground truth.
    pub b_gt: f64,
    /// The two estimates against each other.
    pub a_b: f64,
}

/// [`SpanAgreement`] of `a` and `b` (each sorted by time) against `gt` over `span` frames. Two
/// image-based estimates that agree with each other far better than either does with the
/// ground truth over long spans measure the ground truth's own slow error (its clock, its
/// marker-to-camera calibration), which no image-based method can follow.
pub fn span_agreement(
    a: &[StampedPose],
    b: &[StampedPose],
    gt: &[StampedPose],
    span: usize,
    tolerance: f64,
) -> SpanAgreement {
    let in_b = by_stamp(b);
    let both: Vec<(&StampedPose, &StampedPose)> =
        a.iter().filter_map(|p| in_b.get(&key(p.t)).map(|&j| (p, &b[j]))).collect();
    let turn = |from: &Transform<World, Camera>, to: &Transform<World, Camera>| from.rotation.inverse() * to.rotation;
    let angle = |x: Rotation3<f64>, y: Rotation3<f64>| (x.inverse() * y).angle().to_degrees();
    let (mut a_gt, mut b_gt, mut a_b) = (Vec::new(), Vec::new(), Vec::new());
    for w in both.windows(span + 1).filter(|_| span > 0) {
        let ((a0, b0), (a1, b1)) = (w[0], w[span]);
        let (Some(g0), Some(g1)) = (pose_at(gt, a0.t, tolerance), pose_at(gt, a1.t, tolerance)) else { continue };
        let (ta, tb, tg) = (turn(&a0.pose, &a1.pose), turn(&b0.pose, &b1.pose), turn(&g0, &g1));
        a_gt.push(angle(ta, tg));
        b_gt.push(angle(tb, tg));
        a_b.push(angle(ta, tb));
    }
    let spans = a_gt.len();
    SpanAgreement { span, spans, a_gt: median(&a_gt), b_gt: median(&b_gt), a_b: median(&a_b) }
}

/// Pearson's correlation of pairs; 0 when either side does not vary.
pub fn correlation(pairs: impl Iterator<Item = (f64, f64)> + Clone) -> f64 {
    let n = pairs.clone().count().max(1) as f64;
    let (ma, mb) = pairs.clone().fold((0.0, 0.0), |(x, y), (a, b)| (x + a / n, y + b / n));
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (a, b) in pairs {
        sab += (a - ma) * (b - mb);
        saa += (a - ma) * (a - ma);
        sbb += (b - mb) * (b - mb);
    }
    if saa > 0.0 && sbb > 0.0 {
        sab / (saa * sbb).sqrt()
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// A trajectory from `motions`, each moved by a small rotation and translation of `sigma`
    /// (degrees, metres per axis) drawn from `rng`.
    fn walk(motions: &[(Rotation3<f64>, Vector3<f64>)], sigma: (f64, f64), rng: &mut SplitMix64) -> Vec<StampedPose> {
        let mut pose = Transform::identity();
        let mut out = vec![StampedPose { t: 0.0, pose }];
        for (k, (r, t)) in motions.iter().enumerate() {
            let mut noise = || Vector3::new(rng.normal(), rng.normal(), rng.normal());
            let dr = Rotation3::from_scaled_axis(noise() * sigma.0.to_radians());
            let motion = Transform::new(r * dr, t + noise() * sigma.1);
            pose = pose.compose(&motion);
            out.push(StampedPose { t: (k + 1) as f64 / 30.0, pose });
        }
        out
    }

    #[test]
    fn the_median_ratio_interval_covers_the_true_ratio_about_as_often_as_it_says() {
        // Errors a quarter larger than the other's on every motion: every resample says so.
        let exact: Vec<(f64, f64)> = (1..200).map(|k| (1.25 * k as f64, k as f64)).collect();
        let r = median_ratio(&exact, 3);
        assert!(
            (r.ratio - 1.25).abs() < 1e-12 && (r.low - 1.25).abs() < 1e-12 && (r.high - 1.25).abs() < 1e-12,
            "{r:?}"
        );

        // 180 motions, each error the length of a shared 3-D part (0.4 per axis) plus each
        // one's own (0.2 and 0.1): the true ratio of the medians, from a million draws, is
        // what the interval must cover in about 95 of 100 such runs.
        let rng = &mut SplitMix64::new(5);
        let mut draw = |own: [f64; 2]| {
            let shared = Vector3::new(rng.normal(), rng.normal(), rng.normal()) * 0.4;
            let mut own_part = |s: f64| Vector3::new(rng.normal(), rng.normal(), rng.normal()) * s;
            ((shared + own_part(own[0])).norm(), (shared + own_part(own[1])).norm())
        };
        let many: Vec<(f64, f64)> = (0..1_000_000).map(|_| draw([0.2, 0.1])).collect();
        let truth = median(&many.iter().map(|p| p.0).collect::<Vec<_>>())
            / median(&many.iter().map(|p| p.1).collect::<Vec<_>>());
        let runs: Vec<MedianRatio> =
            (0..100).map(|run| median_ratio(&(0..180).map(|_| draw([0.2, 0.1])).collect::<Vec<_>>(), run)).collect();
        let covered = runs.iter().filter(|r| r.low <= truth && truth <= r.high).count();
        assert!((88..=100).contains(&covered), "true ratio {truth}: covered in {covered} of 100 runs");
        // Neither too wide nor too narrow: as wide as the runs' own spread of the ratio says.
        let mean = runs.iter().map(|r| r.ratio).sum::<f64>() / 100.0;
        let sd = (runs.iter().map(|r| (r.ratio - mean).powi(2)).sum::<f64>() / 99.0).sqrt();
        let width = median(&runs.iter().map(|r| (r.high - r.low) / (2.0 * 1.96 * sd)).collect::<Vec<_>>());
        assert!((0.75..1.33).contains(&width), "intervals {width} times the runs' spread");
        // The truth is about 1.08, the median run's interval about +-0.09 wide: such a ratio is
        // not told from 1 by 180 motions.
        assert!(runs.iter().filter(|r| r.low < 1.0).count() > 50, "{truth}");
    }

    #[test]
    fn the_hat_finds_the_noise_each_read_of_the_same_motions_was_given() {
        // A turning, moving camera read three times: the "ground truth" with 0.3 degrees and
        // 4 mm of noise on each motion (per axis), two estimates with 0.1 / 0.2 degrees and
        // 1 / 3 mm of their own.
        let rng = &mut SplitMix64::new(7);
        let motions: Vec<(Rotation3<f64>, Vector3<f64>)> = (0..3000)
            .map(|k| {
                let a = (k as f64 * 0.05).sin() * 0.05;
                (Rotation3::from_euler_angles(a, 0.5 * a, 0.02), Vector3::new(0.003, -0.001, 0.002 * a))
            })
            .collect();
        let gt = walk(&motions, (0.3, 0.004), rng);
        let a = walk(&motions, (0.1, 0.001), rng);
        let b = walk(&motions, (0.2, 0.003), rng);
        let s = shared_error((&a, 1.0), (&b, 1.0), &gt, 0.001);
        assert_eq!(s.motions, 3000);
        // Over all three axes: sqrt(3) times the per-axis sigma; a small own part is the
        // difference of large mean squares, known to about a tenth over 3000 motions.
        let close = |got: f64, want: f64| (got - want * 3f64.sqrt()).abs() < 0.15 * want * 3f64.sqrt();
        let r = s.rotation_deg;
        assert!(close(r.shared, 0.3) && close(r.own_a, 0.1) && close(r.own_b, 0.2), "{r:?}");
        let t = s.translation;
        assert!(close(t.shared, 0.004) && close(t.own_a, 0.001) && close(t.own_b, 0.003), "{t:?}");
        // Shared variance 0.09 against 0.10 and 0.13 in all: correlation 0.9 / sqrt(1.3).
        assert!((s.rotation_correlation - 0.09 / (0.10f64 * 0.13).sqrt()).abs() < 0.05, "{s:?}");

        // Frames one estimate lost leave out the motions around them.
        let mut gaps = b.clone();
        gaps.remove(100);
        assert_eq!(shared_error((&a, 1.0), (&gaps, 1.0), &gt, 0.001).motions, 2998);
    }

    #[test]
    fn a_slow_error_of_the_ground_truth_shows_as_estimates_agreeing_with_each_other_not_with_it() {
        // The "ground truth" reads every turn 2 % short (a slow error, growing with the span);
        // the estimates have 0.03 degrees of white noise per motion and axis each.
        let rng = &mut SplitMix64::new(11);
        let motions: Vec<(Rotation3<f64>, Vector3<f64>)> = (0..600)
            .map(|k| (Rotation3::from_euler_angles(0.03, 0.02 * (k as f64 * 0.01).cos(), 0.0), Vector3::zeros()))
            .collect();
        let short: Vec<_> =
            motions.iter().map(|(r, t)| (Rotation3::from_scaled_axis(r.scaled_axis() * 0.98), *t)).collect();
        let gt = walk(&short, (0.0, 0.0), rng);
        let (a, b) = (walk(&motions, (0.03, 0.0), rng), walk(&motions, (0.03, 0.0), rng));
        let near = span_agreement(&a, &b, &gt, 1, 0.001);
        let far = span_agreement(&a, &b, &gt, 30, 0.001);
        assert_eq!((near.spans, far.spans), (600, 571));
        // Turns of 2.07 degrees a motion: the ground truth is 0.04 short on one, 1.24 on 30,
        // while the estimates' noise walks 0.03 sqrt(3 n) degrees (0.05 and 0.28).
        assert!(near.a_gt < 0.15 && near.a_b < 0.15, "{near:?}");
        assert!((1.0..1.5).contains(&far.a_gt) && (1.0..1.5).contains(&far.b_gt), "{far:?}");
        assert!(far.a_b < 0.5 * far.a_gt, "{far:?}");
    }
}
