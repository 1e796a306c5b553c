//! Focal length of a camera from its own-frame pointmap (pixel (u, v) sees point (X, Y, Z), so
//! `u - cx = f X / Z`).

use crate::tensor::simd::multiversion;

/// Pixel grid coordinates are integers 0..W-1 / 0..H-1; the principal point is `(W/2, H/2)`.
pub fn centre(width: usize, height: usize) -> (f64, f64) {
    (width as f64 / 2.0, height as f64 / 2.0)
}

/// Upstream DUSt3R's `estimate_focal_knowing_depth(mode='weiszfeld')`: least-squares start
/// `f = mean(p·a) / mean(a·a)` with `p = (u - cx, v - cy)`, `a = (X/Z, Y/Z)` (non-finite `a`
/// taken as 0), then 10 re-weighted steps with weights `1 / max(|p - f a|, 1e-8)` (Weiszfeld),
/// over every pixel. Returns `None` when no pixel constrains the focal.
pub fn focal_weiszfeld(points: &[f32], width: usize, height: usize, (cx, cy): (f64, f64)) -> Option<f64> {
    if points.len() != width * height * 3 || points.is_empty() {
        return None;
    }
    // Structure of arrays, so the re-weighting passes vectorise.
    let n = width * height;
    let (mut pu, mut pv, mut au, mut av) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for (i, p) in points.chunks_exact(3).enumerate() {
        let z = p[2] as f64;
        let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
        pu[i] = (i % width) as f64 - cx;
        pv[i] = (i / width) as f64 - cy;
        au[i] = finite(p[0] as f64 / z);
        av[i] = finite(p[1] as f64 / z);
    }
    let (num, den) = weighted_fit(&pu, &pv, &au, &av, None);
    let mut f = num / den;
    for _ in 0..10 {
        let (num, den) = weighted_fit(&pu, &pv, &au, &av, Some(f));
        f = num / den;
    }
    (f.is_finite() && f > 0.0).then_some(f)
}

multiversion! {
    /// Sums of `w p·a` and `w a·a`, with `w = 1 / max(|p - f a|, 1e-8)` (or 1 without `f`).
    fn weighted_fit(pu: &[f64], pv: &[f64], au: &[f64], av: &[f64], f: Option<f64>) -> (f64, f64) {
        let (mut num, mut den) = ([0.0f64; 8], [0.0f64; 8]);
        let n = pu.len();
        for i in 0..n {
            let w = match f {
                Some(f) => {
                    let (du, dv) = (pu[i] - f * au[i], pv[i] - f * av[i]);
                    1.0 / (du * du + dv * dv).sqrt().max(1e-8)
                }
                None => 1.0,
            };
            num[i % 8] += w * (pu[i] * au[i] + pv[i] * av[i]);
            den[i % 8] += w * (au[i] * au[i] + av[i] * av[i]);
        }
        (num.iter().sum(), den.iter().sum())
    }
}

/// The tt-model server's focal: the median of |votes| `(u - cx) Z / X` and `(v - cy) Z / Y` over
/// all pixels (|X|, |Y| < 1e-6 pushed to ±1e-6), clamped to [0.2, 8] x the 60°-FOV focal.
pub fn focal_median_vote(points: &[f32], width: usize, height: usize, (cx, cy): (f64, f64)) -> Option<f64> {
    if points.len() != width * height * 3 || points.is_empty() {
        return None;
    }
    // numpy's sign: 0 for 0 (Rust's signum gives 1 for +0).
    let sign = |v: f64| {
        if v > 0.0 {
            1.0
        } else if v < 0.0 {
            -1.0
        } else {
            0.0
        }
    };
    let guard = |v: f64| if v.abs() < 1e-6 { sign(v) * 1e-6 + 1e-12 } else { v };
    let mut votes: Vec<f64> = Vec::with_capacity(2 * width * height);
    for (i, p) in points.chunks_exact(3).enumerate() {
        let (u, v) = ((i % width) as f64 - cx, (i / width) as f64 - cy);
        let (x, y, z) = (guard(p[0] as f64), guard(p[1] as f64), p[2] as f64);
        for vote in [u * z / x, v * z / y] {
            if vote.is_finite() {
                votes.push(vote.abs());
            }
        }
    }
    if votes.is_empty() {
        return None;
    }
    // numpy's median: the middle value, or the mean of the two middle values.
    let n = votes.len();
    let (below, &mut upper, _) = votes.select_nth_unstable_by(n / 2, f64::total_cmp);
    let median =
        if n % 2 == 1 { upper } else { 0.5 * (below.iter().copied().fold(f64::NEG_INFINITY, f64::max) + upper) };
    let base = width.max(height) as f64 / (2.0 * 30f64.to_radians().tan());
    Some(median.clamp(0.2 * base, 8.0 * base))
}

#[cfg(test)]
mod level_tests {
    use crate::tensor::simd::check_levels;

    #[test]
    fn weighted_fit_is_identical_at_every_level() {
        let v =
            |seed| crate::tensor::simd::test_values(1003, seed, 300.0).iter().map(|&x| x as f64).collect::<Vec<_>>();
        let (pu, pv, au, av) = (v(1), v(2), v(3), v(4));
        for f in [None, Some(1.7)] {
            check_levels("weighted_fit", |level| {
                let (a, b) = super::weighted_fit::at(level, &pu, &pv, &au, &av, f);
                (a.to_bits(), b.to_bits())
            });
        }
    }
}
