//! Perspective-n-point with RANSAC: SQPnP (crate `sqpnp`) on random 5-point samples as the
//! hypothesis generator, inliers by pixel reprojection error, an adaptive iteration count, a
//! seeded generator so runs repeat, and a Levenberg-Marquardt refit on the inliers.

use nalgebra::{Matrix3, Matrix6, Rotation3, Vector2, Vector3, Vector6};

use super::Transform;
use crate::rng::SplitMix64;

/// Pinhole intrinsics in pixels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Intrinsics {
    /// Focal length along x, pixels.
    pub fx: f64,
    /// Focal length along y, pixels.
    pub fy: f64,
    /// Principal point x, pixels.
    pub cx: f64,
    /// Principal point y, pixels.
    pub cy: f64,
}

impl Intrinsics {
    /// Pixel of a point in camera coordinates; `None` behind the camera.
    pub fn project(&self, p: &Vector3<f64>) -> Option<Vector2<f64>> {
        (p.z > 0.0).then(|| Vector2::new(self.fx * p.x / p.z + self.cx, self.fy * p.y / p.z + self.cy))
    }
}

/// RANSAC's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RansacParams {
    /// Upper bound on hypotheses.
    pub max_iterations: usize,
    /// Inlier if the reprojection error is at most this many pixels.
    pub threshold_px: f64,
    /// Stop once this probability of having drawn an all-inlier sample is reached.
    pub confidence: f64,
    /// Seed of the sampling generator.
    pub seed: u64,
}

impl Default for RansacParams {
    fn default() -> Self {
        Self { max_iterations: 100, threshold_px: 5.0, confidence: 0.99, seed: 0x5eed }
    }
}

/// Why PnP found no pose.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PnpError {
    /// Fewer than 4 valid correspondences.
    #[error("PnP needs at least 4 valid correspondences, got {0}")]
    TooFewPoints(usize),
    /// The 3-D points are degenerate (the reason).
    #[error("degenerate 3-D points: {0}")]
    Degenerate(&'static str),
    /// No hypothesis gathered 6 inliers.
    #[error("RANSAC found no pose with at least 6 inliers")]
    NoConsensus,
}

/// A pose `T_cam_world` and how many correspondences agree with it.
#[derive(Clone, Debug)]
pub struct PnpSolution<Cam, World> {
    /// `T_cam_world`.
    pub pose: Transform<Cam, World>,
    /// Correspondences that agree.
    pub inliers: usize,
}

/// Points scored per hypothesis and used by the final refit: enough for a stable consensus and
/// a precise refit, few enough to keep a 512x512 pair well under 50 ms.
const SCORING_POINTS: usize = 4096;
const REFIT_POINTS: usize = 16384;
const SAMPLE: usize = 5;

/// RANSAC's sampling on the project's generator.
struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
    /// `k` distinct indices below `n` (k <= n), in draw order.
    fn distinct(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::with_capacity(k);
        while out.len() < k {
            let i = self.below(n);
            if !out.contains(&i) {
                out.push(i);
            }
        }
        out
    }
    /// A random subset of size min(k, n) of 0..n (partial Fisher-Yates).
    fn subset(&mut self, n: usize, k: usize) -> Vec<usize> {
        if k >= n {
            return (0..n).collect();
        }
        let mut idx: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + self.below(n - i);
            idx.swap(i, j);
        }
        idx.truncate(k);
        idx
    }
}

/// Solves `pixel ~ K (R X + t)` for the camera pose. `world` and `pixels` are paired; pairs with
/// non-finite values must be filtered out by the caller.
pub fn solve_pnp_ransac<Cam, World>(
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    k: &Intrinsics,
    params: &RansacParams,
) -> Result<PnpSolution<Cam, World>, PnpError> {
    let n = world.len().min(pixels.len());
    if n < 4 {
        return Err(PnpError::TooFewPoints(n));
    }
    check_spread(&world[..n])?;
    let mut rng = Rng(SplitMix64::new(params.seed));
    let scoring = rng.subset(n, SCORING_POINTS);
    let thr2 = params.threshold_px * params.threshold_px;
    let is_inlier = |pose: &Transform<Cam, World>, i: usize| {
        k.project(&pose.apply(&world[i])).is_some_and(|p| (p - pixels[i]).norm_squared() <= thr2)
    };

    let mut best: Option<(Transform<Cam, World>, usize)> = None;
    let mut needed = params.max_iterations;
    let mut iteration = 0;
    while iteration < needed.min(params.max_iterations) {
        iteration += 1;
        let sample: Vec<usize> =
            rng.distinct(scoring.len(), SAMPLE.min(scoring.len())).into_iter().map(|j| scoring[j]).collect();
        let Some(pose) = sqpnp_pose::<Cam, World>(&sample, world, pixels, k) else { continue };
        let count = scoring.iter().filter(|&&i| is_inlier(&pose, i)).count();
        if best.as_ref().is_none_or(|b| count > b.1) {
            best = Some((pose, count));
            let w = count as f64 / scoring.len() as f64;
            let all_good = w.powi(SAMPLE as i32);
            // Samples needed to draw an all-inlier one with the requested confidence; ln_1p keeps
            // tiny inlier ratios from rounding log(1 - w^s) to 0.
            let n_needed = (1.0 - params.confidence).ln() / (-all_good).ln_1p();
            needed = if all_good >= 1.0 - 1e-12 {
                iteration
            } else if n_needed.is_finite() && n_needed > 0.0 {
                n_needed.ceil().min(params.max_iterations as f64) as usize
            } else {
                params.max_iterations
            };
        }
    }
    let (pose, _) = best.filter(|b| b.1 >= 6).ok_or(PnpError::NoConsensus)?;
    let inliers: Vec<usize> = (0..n).filter(|&i| is_inlier(&pose, i)).collect();
    if inliers.len() < 6 {
        return Err(PnpError::NoConsensus);
    }
    let refit_set: Vec<usize> = rng.subset(inliers.len(), REFIT_POINTS).into_iter().map(|j| inliers[j]).collect();
    let refined = refine_lm(pose, &refit_set, world, pixels, k);
    let count = (0..n).filter(|&i| is_inlier(&refined, i)).count();
    Ok(PnpSolution { pose: refined, inliers: count })
}

/// Collinear (or coincident) 3-D points leave the rotation about their line free.
fn check_spread(world: &[Vector3<f64>]) -> Result<(), PnpError> {
    let mean = world.iter().sum::<Vector3<f64>>() / world.len() as f64;
    let cov = world.iter().fold(Matrix3::zeros(), |c, p| {
        let d = p - mean;
        c + d * d.transpose()
    });
    let mut eig = cov.symmetric_eigenvalues().as_slice().to_vec();
    eig.sort_by(|a, b| b.total_cmp(a));
    if !(eig[0] > 0.0) {
        return Err(PnpError::Degenerate("all points coincide"));
    }
    if eig[1] <= eig[0] * 1e-12 {
        return Err(PnpError::Degenerate("all points lie on one line"));
    }
    Ok(())
}

/// SQPnP on a few correspondences, in normalised image coordinates.
fn sqpnp_pose<Cam, World>(
    sample: &[usize],
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    k: &Intrinsics,
) -> Option<Transform<Cam, World>> {
    // sqpnp works in f32 inputs; centre the sample so the conversion loses nothing that matters.
    let centre = sample.iter().map(|&i| world[i]).sum::<Vector3<f64>>() / sample.len() as f64;
    let p3: Vec<glam::Vec3> = sample
        .iter()
        .map(|&i| {
            let d = world[i] - centre;
            glam::Vec3::new(d.x as f32, d.y as f32, d.z as f32)
        })
        .collect();
    let p2: Vec<glam::Vec2> = sample
        .iter()
        .map(|&i| glam::Vec2::new(((pixels[i].x - k.cx) / k.fx) as f32, ((pixels[i].y - k.cy) / k.fy) as f32))
        .collect();
    let mut solver = sqpnp::Solver::<sqpnp::DefaultParameters>::new();
    if !solver.solve(&p3, &p2, None) {
        return None;
    }
    let s = solver.best_solution()?;
    let r = s.rotation_matrix();
    let t = s.translation();
    // glam is column-major: r.col(c)[row].
    let rm = Matrix3::from_fn(|row, col| r.col(col)[row] as f64);
    let rot = Rotation3::from_matrix(&rm);
    // X_cam = R (X - centre) + t = R X + (t - R centre).
    let tv = Vector3::new(t.x as f64, t.y as f64, t.z as f64) - rot * centre;
    let pose = Transform::new(rot, tv);
    pose.translation.iter().all(|v| v.is_finite()).then_some(pose)
}

/// Levenberg-Marquardt on the pixel reprojection error over `set`, left perturbation
/// `R <- exp(w) R`, `t <- t + v`.
fn refine_lm<Cam, World>(
    start: Transform<Cam, World>,
    set: &[usize],
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    k: &Intrinsics,
) -> Transform<Cam, World> {
    let cost = |pose: &Transform<Cam, World>| -> f64 {
        set.iter()
            .map(|&i| {
                let p = pose.apply(&world[i]);
                k.project(&p).map_or(1e6, |q| (q - pixels[i]).norm_squared())
            })
            .sum()
    };
    let mut pose = start;
    let mut current = cost(&pose);
    let mut lambda = 1e-3;
    for _ in 0..30 {
        let mut jtj = Matrix6::<f64>::zeros();
        let mut jtr = Vector6::<f64>::zeros();
        for &i in set {
            let rx = pose.rotation * world[i];
            let p = rx + pose.translation;
            if p.z <= 1e-12 {
                continue;
            }
            let (iz, iz2) = (1.0 / p.z, 1.0 / (p.z * p.z));
            let r = Vector2::new(k.fx * p.x * iz + k.cx - pixels[i].x, k.fy * p.y * iz + k.cy - pixels[i].y);
            // d(pixel)/dP
            let dp = nalgebra::Matrix2x3::new(k.fx * iz, 0.0, -k.fx * p.x * iz2, 0.0, k.fy * iz, -k.fy * p.y * iz2);
            // dP/dw = -[R X]x, dP/dv = I
            let skew = Matrix3::new(0.0, -rx.z, rx.y, rx.z, 0.0, -rx.x, -rx.y, rx.x, 0.0);
            let jw = dp * (-skew);
            let mut j = nalgebra::Matrix2x6::<f64>::zeros();
            j.fixed_view_mut::<2, 3>(0, 0).copy_from(&jw);
            j.fixed_view_mut::<2, 3>(0, 3).copy_from(&dp);
            jtj += j.transpose() * j;
            jtr += j.transpose() * r;
        }
        let mut improved = false;
        for _ in 0..10 {
            let mut a = jtj;
            for d in 0..6 {
                a[(d, d)] += lambda * jtj[(d, d)].max(1e-12);
            }
            let Some(delta) = a.lu().solve(&(-jtr)) else { break };
            let w = Vector3::new(delta[0], delta[1], delta[2]);
            let v = Vector3::new(delta[3], delta[4], delta[5]);
            let candidate = Transform::new(Rotation3::new(w) * pose.rotation, pose.translation + v);
            let c = cost(&candidate);
            if c < current {
                let step = delta.norm();
                pose = candidate;
                current = c;
                lambda = (lambda * 0.3).max(1e-12);
                improved = true;
                if step < 1e-12 {
                    return pose;
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    pose
}
