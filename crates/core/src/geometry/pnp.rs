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

    /// The ray through pixel `(u, v)` (undistorted), scaled to depth 1: the point at depth `z`
    /// that [`Intrinsics::project`] takes to that pixel is `ray * z`.
    pub fn ray(&self, u: f64, v: f64) -> Vector3<f64> {
        Vector3::new((u - self.cx) / self.fx, (v - self.cy) / self.fy, 1.0)
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
    /// Which ones agree, in the input's order.
    pub is_inlier: Vec<bool>,
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
    let is_inlier: Vec<bool> = (0..n).map(|i| is_inlier(&refined, i)).collect();
    let inliers = is_inlier.iter().filter(|&&b| b).count();
    Ok(PnpSolution { pose: refined, inliers, is_inlier })
}

/// A 6x6 covariance in ROS's order: translation x, y, z, then rotation about x, y, z.
pub type Covariance6 = Matrix6<f64>;

/// A covariance of a left perturbation in frame `B` (of some pose `T_b_x`) as the covariance of
/// the same perturbation seen in frame `A` (of `T_a_b T_b_x`): the adjoint `[[R, [t]x R], [0, R]]`
/// of `T_a_b` on both sides.
pub fn covariance_in<A, B>(t_a_b: &Transform<A, B>, cov: &Covariance6) -> Covariance6 {
    let r = t_a_b.rotation.matrix();
    let mut ad = Matrix6::zeros();
    ad.fixed_view_mut::<3, 3>(0, 0).copy_from(r);
    ad.fixed_view_mut::<3, 3>(3, 3).copy_from(r);
    ad.fixed_view_mut::<3, 3>(0, 3).copy_from(&(t_a_b.translation.cross_matrix() * r));
    ad * cov * ad.transpose()
}

/// `T_world_cam` moved by a small left perturbation `d` = (translation, rotation vector), both in
/// the world frame: `exp(d) T`.
fn perturbed<Cam, World>(t_world_cam: &Transform<World, Cam>, d: &Vector6<f64>) -> Transform<Cam, World> {
    let r = Rotation3::new(Vector3::new(d[3], d[4], d[5]));
    let moved = Transform::<World, Cam>::new(
        r * t_world_cam.rotation,
        r * t_world_cam.translation + Vector3::new(d[0], d[1], d[2]),
    );
    moved.inverse()
}

/// The uncertainty of a PnP pose from its inliers (reprojection error within `threshold_px`):
/// the Gauss-Newton covariance `s2 (J^T J)^-1`, `J` the reprojection's Jacobian (central
/// differences) with respect to a left perturbation of `T_world_cam` in the world frame, `s2`
/// the residuals' variance (their sum of squares over 2n - 6). Fewer or noisier inliers give a
/// larger one. `None` with fewer than 7 inliers or a singular `J^T J`.
pub fn pose_covariance<Cam, World>(
    t_cam_world: &Transform<Cam, World>,
    world: &[Vector3<f64>],
    pixels: &[Vector2<f64>],
    k: &Intrinsics,
    threshold_px: f64,
) -> Option<Covariance6> {
    let residual = |t: &Transform<Cam, World>, i: usize| k.project(&t.apply(&world[i])).map(|p| p - pixels[i]);
    let inliers: Vec<usize> = (0..world.len().min(pixels.len()))
        .filter(|&i| residual(t_cam_world, i).is_some_and(|r| r.norm() <= threshold_px))
        .collect();
    let n = inliers.len();
    if n < 7 {
        return None;
    }
    let t_world_cam = t_cam_world.inverse();
    let (mut jtj, mut sum2) = (Matrix6::<f64>::zeros(), 0.0);
    const H: f64 = 1e-6;
    let shifted: Vec<[Transform<Cam, World>; 2]> = (0..6)
        .map(|a| {
            let mut d = Vector6::zeros();
            d[a] = H;
            [perturbed(&t_world_cam, &d), perturbed(&t_world_cam, &-d)]
        })
        .collect();
    for &i in &inliers {
        let r0 = residual(t_cam_world, i)?;
        sum2 += r0.norm_squared();
        let mut j = nalgebra::Matrix2x6::<f64>::zeros();
        for (a, [plus, minus]) in shifted.iter().enumerate() {
            let column = (residual(plus, i)? - residual(minus, i)?) / (2.0 * H);
            j.set_column(a, &column);
        }
        jtj += j.transpose() * j;
    }
    let s2 = sum2 / (2 * n - 6) as f64;
    jtj.try_inverse().map(|inv| inv * s2).filter(|c| c.iter().all(|v| v.is_finite()))
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
    if has_repeats(&p3, &p2) {
        return None;
    }
    // sqpnp 0.4 unwraps the inverse of a 3x3 system that some degenerate samples make singular;
    // one bad sample must cost a hypothesis, not the node.
    let solved = std::panic::catch_unwind(|| {
        let mut solver = sqpnp::Solver::<sqpnp::DefaultParameters>::new();
        solver.solve(&p3, &p2, None).then(|| solver.best_solution().cloned()).flatten()
    });
    let s = solved.ok().flatten()?;
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

/// Whether a sample repeats a 3-D point or an image point (such samples determine no pose, and
/// are what makes SQPnP's system singular).
fn has_repeats(p3: &[glam::Vec3], p2: &[glam::Vec2]) -> bool {
    let close3 = |a: glam::Vec3, b: glam::Vec3| (a - b).length_squared() <= 1e-12 * (1.0 + a.length_squared());
    let close2 = |a: glam::Vec2, b: glam::Vec2| (a - b).length_squared() <= 1e-14;
    (0..p3.len()).any(|i| (i + 1..p3.len()).any(|j| close3(p3[i], p3[j]) || close2(p2[i], p2[j])))
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Cam;
    struct World;

    /// The left perturbation `d` with `est = exp(d) truth` (both `T_world_cam`), to first order.
    fn error(est: &Transform<World, Cam>, truth: &Transform<World, Cam>) -> Vector6<f64> {
        let r = est.rotation * truth.rotation.inverse();
        let phi = r.scaled_axis();
        let rho = est.translation - r * truth.translation;
        Vector6::new(rho.x, rho.y, rho.z, phi.x, phi.y, phi.z)
    }

    /// Points in front of a camera, seen with `noise_px` Gaussian pixel noise: over many draws the
    /// PnP pose's error lies within the stated 3-sigma ellipsoid (chi-square, 6 degrees of
    /// freedom, 99.73 %: 20.06) about as often as it should, and the stated covariance grows with
    /// the noise and with fewer points.
    #[test]
    fn the_stated_covariance_covers_the_pose_error_and_grows_with_noise_and_fewer_points() {
        let k = Intrinsics { fx: 500.0, fy: 500.0, cx: 320.0, cy: 240.0 };
        let truth =
            Transform::<World, Cam>::new(Rotation3::from_euler_angles(0.1, -0.2, 0.05), Vector3::new(0.3, -0.1, 0.2));
        let mut rng = SplitMix64::new(3);
        let trace = |n: usize, noise: f64, rng: &mut SplitMix64| -> (f64, f64) {
            let t_cam_world = truth.inverse();
            let world: Vec<Vector3<f64>> = (0..n)
                .map(|_| {
                    let c = Vector3::new(
                        rng.next_f64() * 2.0 - 1.0,
                        rng.next_f64() * 1.5 - 0.75,
                        2.0 + rng.next_f64() * 3.0,
                    );
                    truth.apply(&c)
                })
                .collect();
            let pixels: Vec<Vector2<f64>> = world
                .iter()
                .map(|w| k.project(&t_cam_world.apply(w)).unwrap() + Vector2::new(rng.normal(), rng.normal()) * noise)
                .collect();
            let params = RansacParams { threshold_px: 8.0 * noise.max(0.5), ..RansacParams::default() };
            let sol = solve_pnp_ransac::<Cam, World>(&world, &pixels, &k, &params).unwrap();
            let cov = pose_covariance(&sol.pose, &world, &pixels, &k, params.threshold_px).unwrap();
            let e = error(&sol.pose.inverse(), &truth);
            let m2 = (e.transpose() * cov.try_inverse().unwrap() * e)[0];
            (cov.trace(), m2)
        };
        let trials = 200;
        let m2: Vec<f64> = (0..trials).map(|_| trace(200, 1.0, &mut rng).1).collect();
        // Within 3 sigma (99.73 %), and not by being too large: within 1 sigma (68.3 %, chi-square
        // 7.04) about as often as it should.
        let (three, one) = (m2.iter().filter(|&&m| m <= 20.06).count(), m2.iter().filter(|&&m| m <= 7.04).count());
        eprintln!("of {trials} PnP poses, {three} within the stated 3 sigma, {one} within 1 sigma");
        assert!(three >= trials * 9 / 10 && (trials / 2..trials * 17 / 20).contains(&one), "{three}, {one}");
        let (base, _) = trace(200, 1.0, &mut rng);
        let (noisier, _) = trace(200, 3.0, &mut rng);
        let (fewer, _) = trace(30, 1.0, &mut rng);
        assert!(noisier > base * 4.0 && fewer > base * 2.0, "trace {base:e}, noisier {noisier:e}, fewer {fewer:e}");
    }

    /// Samples that make SQPnP's 3x3 system singular (repeated points, repeated pixels, points
    /// on a line or on one spot) give no hypothesis, never a panic.
    #[test]
    fn degenerate_samples_never_panic() {
        let k = Intrinsics { fx: 500.0, fy: 500.0, cx: 320.0, cy: 240.0 };
        let mut rng = SplitMix64::new(7);
        let params = RansacParams::default();
        for case in 0..4000 {
            let n = 6 + case % 20;
            let distinct = 1 + case % 4;
            let base: Vec<Vector3<f64>> =
                (0..distinct).map(|_| Vector3::new(rng.normal(), rng.normal(), 3.0 + rng.normal().abs())).collect();
            let mut world: Vec<Vector3<f64>> = (0..n).map(|i| base[i % distinct]).collect();
            // A few genuine points beside the repeated ones, so the spread check passes.
            for p in world.iter_mut().take(case % 5) {
                *p = Vector3::new(rng.normal(), rng.normal(), 3.0 + rng.normal().abs());
            }
            let pixels: Vec<Vector2<f64>> = (0..n)
                .map(|i| {
                    if case % 3 == 0 {
                        Vector2::new(320.0, 240.0)
                    } else {
                        Vector2::new(300.0 + 5.0 * i as f64, 200.0 + rng.normal())
                    }
                })
                .collect();
            let _ = solve_pnp_ransac::<(), ()>(&world, &pixels, &k, &params);
        }
    }
}
