//! Focal length of a camera from its own-frame pointmap (pixel (u, v) sees point (X, Y, Z), so
//! `u - cx = f X / Z`).

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
    let finite = |v: f64| if v.is_finite() { v } else { 0.0 };
    let terms: Vec<(f64, f64, f64, f64)> = points
        .chunks_exact(3)
        .enumerate()
        .map(|(i, p)| {
            let (u, v) = ((i % width) as f64 - cx, (i / width) as f64 - cy);
            let z = p[2] as f64;
            (u, v, finite(p[0] as f64 / z), finite(p[1] as f64 / z))
        })
        .collect();
    let fit = |weight: &dyn Fn(&(f64, f64, f64, f64)) -> f64| {
        let (mut num, mut den) = (0.0, 0.0);
        for t in &terms {
            let w = weight(t);
            num += w * (t.0 * t.2 + t.1 * t.3);
            den += w * (t.2 * t.2 + t.3 * t.3);
        }
        num / den
    };
    let mut f = fit(&|_| 1.0);
    for _ in 0..10 {
        let fc = f;
        f = fit(&|t| 1.0 / ((t.0 - fc * t.2).hypot(t.1 - fc * t.3)).max(1e-8));
    }
    (f.is_finite() && f > 0.0).then_some(f)
}

/// The tt-model server's focal: the median of |votes| `(u - cx) Z / X` and `(v - cy) Z / Y` over
/// all pixels (|X|, |Y| < 1e-6 pushed to ±1e-6), clamped to [0.2, 8] x the 60°-FOV focal.
pub fn focal_median_vote(points: &[f32], width: usize, height: usize, (cx, cy): (f64, f64)) -> Option<f64> {
    if points.len() != width * height * 3 || points.is_empty() {
        return None;
    }
    // numpy's sign: 0 for 0 (Rust's signum gives 1 for +0).
    let sign = |v: f64| if v > 0.0 { 1.0 } else if v < 0.0 { -1.0 } else { 0.0 };
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
    votes.sort_by(f64::total_cmp);
    let n = votes.len();
    let median = if n % 2 == 1 { votes[n / 2] } else { 0.5 * (votes[n / 2 - 1] + votes[n / 2]) };
    let base = width.max(height) as f64 / (2.0 * 30f64.to_radians().tan());
    Some(median.clamp(0.2 * base, 8.0 * base))
}
