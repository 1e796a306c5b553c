//! The map: every keyframe's confident points, moved onto the chain and merged in a voxel grid
//! (one point per occupied voxel: the mean position and colour of what fell in it, the highest
//! confidence). A point budget bounds it: when the voxels outnumber it, the voxel edge doubles
//! and the grid is merged again, so the map keeps the whole trajectory at a coarser grain
//! instead of forgetting its start.

use std::collections::HashMap;

use nalgebra::Vector3;

use super::odometry::{ChainKeyframe, Origin};
use crate::geometry::Transform;

/// One map point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapPoint {
    /// Position on the chain (the origin keyframe's camera frame).
    pub xyz: [f32; 3],
    /// Mean colour.
    pub rgb: [u8; 3],
    /// The highest confidence that fell in its voxel.
    pub confidence: f32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Voxel {
    sum: [f64; 3],
    rgb: [u64; 3],
    count: u64,
    confidence: f32,
}

impl Voxel {
    fn merge(&mut self, o: &Voxel) {
        for k in 0..3 {
            self.sum[k] += o.sum[k];
            self.rgb[k] += o.rgb[k];
        }
        self.count += o.count;
        self.confidence = self.confidence.max(o.confidence);
    }
    fn centroid(&self) -> [f64; 3] {
        let n = self.count.max(1) as f64;
        [self.sum[0] / n, self.sum[1] / n, self.sum[2] / n]
    }
}

/// How the map is made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapSettings {
    /// Voxel edge as a fraction of the first keyframe's median depth.
    pub relative_voxel: f64,
    /// Most points.
    pub budget: usize,
    /// Keyframe points above this confidence enter the map.
    pub min_confidence: f32,
}

/// Adds keyframes just put on the chain to `map`, which the first of them creates (its voxel
/// scaled to that keyframe's depth).
pub fn grow<'a, F: 'a>(
    map: &mut Option<VoxelMap>,
    added: impl IntoIterator<Item = &'a ChainKeyframe<F>>,
    settings: &MapSettings,
) -> Result<(), MapError> {
    for kf in added {
        let m = match map {
            Some(m) => m,
            None => {
                map.insert(VoxelMap::scaled_to(kf, settings.relative_voxel, settings.budget, settings.min_confidence)?)
            }
        };
        m.insert_keyframe(kf, settings.min_confidence);
    }
    Ok(())
}

/// Why a map cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum MapError {
    /// The voxel size or the budget is not usable.
    #[error("map voxel size {voxel} must be positive and finite, and the point budget {budget} at least 1")]
    Settings {
        /// The voxel edge.
        voxel: f64,
        /// The point budget.
        budget: usize,
    },
}

/// A voxel-merged map under a point budget.
#[derive(Clone, Debug)]
pub struct VoxelMap {
    voxel: f64,
    budget: usize,
    voxels: HashMap<[i64; 3], Voxel>,
}

impl VoxelMap {
    /// An empty map with voxels of edge `voxel` (chain units) and at most `budget` points.
    pub fn new(voxel: f64, budget: usize) -> Result<Self, MapError> {
        if !(voxel > 0.0 && voxel.is_finite()) || budget == 0 {
            return Err(MapError::Settings { voxel, budget });
        }
        Ok(Self { voxel, budget, voxels: HashMap::new() })
    }

    /// A map whose voxel edge is `relative` times the median depth of `kf`'s points above
    /// `min_confidence` (DUSt3R's scale is arbitrary; the scene's depth is not); `relative`
    /// itself when it has none.
    pub fn scaled_to<F>(
        kf: &ChainKeyframe<F>,
        relative: f64,
        budget: usize,
        min_confidence: f32,
    ) -> Result<Self, MapError> {
        let mut depths: Vec<f64> = kf
            .pointmap
            .points
            .chunks_exact(3)
            .zip(&kf.pointmap.confidence)
            .filter(|(p, &c)| c > min_confidence && p[2] > 0.0 && p[2].is_finite())
            .map(|(p, _)| p[2] as f64)
            .collect();
        let median = if depths.is_empty() {
            1.0
        } else {
            let mid = depths.len() / 2;
            *depths.select_nth_unstable_by(mid, f64::total_cmp).1
        };
        Self::new(relative * median, budget)
    }

    /// The voxel edge now (it doubles each time the budget is reached).
    pub fn voxel(&self) -> f64 {
        self.voxel
    }

    /// Points in the map.
    pub fn len(&self) -> usize {
        self.voxels.len()
    }

    /// Whether it has no points.
    pub fn is_empty(&self) -> bool {
        self.voxels.is_empty()
    }

    fn key(&self, p: &[f64; 3]) -> [i64; 3] {
        p.map(|c| (c / self.voxel).floor() as i64)
    }

    /// Adds a keyframe's points whose confidence exceeds `min_confidence`.
    pub fn insert_keyframe<F>(&mut self, kf: &ChainKeyframe<F>, min_confidence: f32) {
        self.insert(&kf.t_origin_kf, &kf.pointmap.points, &kf.pointmap.confidence, &kf.rgb, min_confidence);
    }

    /// Adds points given in a frame `B` placed on the chain by `t`, with their confidences and
    /// interleaved colours (missing colours are black).
    pub fn insert<B>(
        &mut self,
        t: &Transform<Origin, B>,
        points: &[f32],
        confidence: &[f32],
        rgb: &[u8],
        min_confidence: f32,
    ) {
        for (i, (p, &c)) in points.chunks_exact(3).zip(confidence).enumerate() {
            if !(c > min_confidence) || !p.iter().all(|v| v.is_finite()) {
                continue;
            }
            let q = t.apply(&Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64));
            let q = [q.x, q.y, q.z];
            let colour = rgb.get(i * 3..i * 3 + 3).unwrap_or(&[0, 0, 0]);
            let v = self.voxels.entry(self.key(&q)).or_default();
            v.merge(&Voxel {
                sum: q,
                rgb: [colour[0] as u64, colour[1] as u64, colour[2] as u64],
                count: 1,
                confidence: c,
            });
        }
        while self.voxels.len() > self.budget {
            self.coarsen();
        }
    }

    /// Doubles the voxel edge and merges the voxels that now share one.
    fn coarsen(&mut self) {
        self.voxel *= 2.0;
        let old = std::mem::take(&mut self.voxels);
        for v in old.into_values() {
            let key = self.key(&v.centroid());
            self.voxels.entry(key).or_default().merge(&v);
        }
    }

    /// The map's points (in no particular order).
    pub fn points(&self) -> Vec<MapPoint> {
        self.voxels
            .values()
            .map(|v| {
                let c = v.centroid();
                let n = v.count.max(1);
                MapPoint {
                    xyz: c.map(|x| x as f32),
                    rgb: v.rgb.map(|s| (s / n).min(255) as u8),
                    confidence: v.confidence,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_in_one_voxel_merge_and_the_budget_coarsens_the_grid() {
        let mut map = VoxelMap::new(0.1, 1000).unwrap();
        let t = Transform::<Origin, Origin>::identity();
        // Two points in one voxel, one unconfident, one far away.
        let points = [0.01, 0.02, 0.03, 0.05, 0.06, 0.07, 0.04, 0.04, 0.04, 5.0, 5.0, 5.0];
        map.insert(&t, &points, &[5.0, 4.0, 1.0, 6.0], &[10, 20, 30, 30, 40, 50, 0, 0, 0, 1, 2, 3], 2.0);
        let mut pts = map.points();
        pts.sort_by(|a, b| a.xyz[0].total_cmp(&b.xyz[0]));
        assert_eq!(pts.len(), 2);
        assert!((pts[0].xyz[0] - 0.03).abs() < 1e-6 && (pts[0].xyz[2] - 0.05).abs() < 1e-6);
        assert_eq!((pts[0].rgb, pts[0].confidence), ([20, 30, 40], 5.0));

        // A 100 x 100 grid of points 0.01 apart: 10,000 points, 100 voxels of 0.1 ...
        let grid: Vec<f32> =
            (0..100 * 100).flat_map(|i| [(i % 100) as f32 * 0.01, (i / 100) as f32 * 0.01, 1.0]).collect();
        let mut map = VoxelMap::new(0.1, 1000).unwrap();
        map.insert(&t, &grid, &vec![5.0; 10_000], &[], 2.0);
        assert_eq!((map.len(), map.voxel()), (100, 0.1));
        // ... or, under a budget of 50, 25 voxels of 0.2 (one doubling), every point kept in them.
        let mut map = VoxelMap::new(0.1, 50).unwrap();
        map.insert(&t, &grid, &vec![5.0; 10_000], &[], 2.0);
        assert_eq!((map.len(), map.voxel()), (25, 0.2));
        let xs: Vec<f32> = map.points().iter().map(|p| p.xyz[0]).collect();
        let (lo, hi) = xs.iter().fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        assert!(lo < 0.2 && hi > 0.8, "the whole extent stays: {lo}..{hi}");
        assert!(VoxelMap::new(0.0, 10).is_err() && VoxelMap::new(0.1, 0).is_err());
    }
}
