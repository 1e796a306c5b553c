//! Pointmaps as geometry: moved between camera frames, rescaled, and compared in scale. Every
//! DUSt3R prediction has a scale of its own (the network normalises each pass by its reference
//! view), so putting two predictions together means measuring how their scales relate.

use nalgebra::Vector3;

use super::Transform;
use crate::dust3r::Pointmap;

/// Fewest pixels confident in both maps that a scale ratio is taken from.
pub const MIN_SCALE_PIXELS: usize = 32;

/// `map`'s points (in frame `B`) expressed in frame `A`; confidences kept. Non-finite points
/// stay non-finite.
pub fn transformed<A, B>(map: &Pointmap, t: &Transform<A, B>) -> Pointmap {
    let mut points = Vec::with_capacity(map.points.len());
    for p in map.points.chunks_exact(3) {
        let q = t.apply(&Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64));
        points.extend([q.x as f32, q.y as f32, q.z as f32]);
    }
    Pointmap { points, ..map.clone() }
}

/// `map` with every point multiplied by `s` (a change of scale about the camera centre).
pub fn scaled(map: &Pointmap, s: f64) -> Pointmap {
    let points = map.points.iter().map(|&v| (v as f64 * s) as f32).collect();
    Pointmap { points, ..map.clone() }
}

/// How much larger `a` is than `b`, two pointmaps of the same pixels in the same camera frame
/// (two predictions of one view): the median of `z_a / z_b` over the pixels whose confidence
/// exceeds `min_confidence` in both and whose depth is positive and finite in both. `None`
/// when the grids differ or fewer than [`MIN_SCALE_PIXELS`] pixels qualify. The median keeps a
/// few wrong pixels (edges, sky) from moving it.
pub fn depth_ratio(a: &Pointmap, b: &Pointmap, min_confidence: f32) -> Option<f64> {
    if (a.width, a.height) != (b.width, b.height) || a.points.len() != b.points.len() {
        return None;
    }
    let mut ratios: Vec<f64> = a
        .points
        .chunks_exact(3)
        .zip(b.points.chunks_exact(3))
        .zip(a.confidence.iter().zip(&b.confidence))
        .filter(|(_, (&ca, &cb))| ca > min_confidence && cb > min_confidence)
        .filter_map(|((pa, pb), _)| {
            let (za, zb) = (pa[2] as f64, pb[2] as f64);
            (za > 0.0 && zb > 0.0 && za.is_finite() && zb.is_finite()).then_some(za / zb)
        })
        .collect();
    if ratios.len() < MIN_SCALE_PIXELS {
        return None;
    }
    let mid = ratios.len() / 2;
    let (_, median, _) = ratios.select_nth_unstable_by(mid, f64::total_cmp);
    Some(*median)
}

#[cfg(test)]
mod tests {
    use nalgebra::Rotation3;

    use super::*;

    /// A 16x16 map of a tilted plane in front of the camera, confidence 5 (2 in one corner).
    fn plane() -> Pointmap {
        let (w, h) = (16, 16);
        let mut points = Vec::new();
        let mut confidence = Vec::new();
        for v in 0..h {
            for u in 0..w {
                let z = 2.0 + 0.05 * u as f32;
                points.extend([(u as f32 - 8.0) * z / 20.0, (v as f32 - 8.0) * z / 20.0, z]);
                confidence.push(if u < 3 && v < 3 { 2.0 } else { 5.0 });
            }
        }
        Pointmap { height: h, width: w, points, confidence }
    }

    #[test]
    fn the_depth_ratio_of_a_rescaled_map_is_its_scale_despite_outliers() {
        let a = plane();
        let mut b = scaled(&a, 0.25);
        assert!((depth_ratio(&a, &b, 3.0).unwrap() - 4.0).abs() < 1e-6);
        // A fifth of the pixels wrong by 10x: the median holds.
        for i in (0..b.points.len() / 3).step_by(5) {
            b.points[i * 3 + 2] *= 10.0;
        }
        assert!((depth_ratio(&a, &b, 3.0).unwrap() - 4.0).abs() < 1e-6);
        // Unconfident everywhere: no ratio.
        assert_eq!(depth_ratio(&a, &b, 5.0), None);
        let small = Pointmap { height: 1, width: 1, points: vec![0.0, 0.0, 1.0], confidence: vec![5.0] };
        assert_eq!(depth_ratio(&a, &small, 3.0), None, "different grids");
    }

    #[test]
    fn moving_a_map_and_back_gives_it_again() {
        struct A;
        struct B;
        let t = Transform::<A, B>::new(Rotation3::from_euler_angles(0.1, -0.2, 0.3), Vector3::new(0.5, -0.1, 0.2));
        let a = plane();
        let back = transformed(&transformed(&a, &t), &t.inverse());
        assert!(a.points.iter().zip(&back.points).all(|(x, y)| (x - y).abs() < 1e-5));
        assert_eq!(back.confidence, a.confidence);
    }
}
