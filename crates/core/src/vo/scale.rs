//! The metric scale of a DUSt3R pair: its pointmaps' depths against what a registered depth
//! camera measured at the same pixels.
//!
//! Each usable pixel (confident in DUSt3R, measured by the sensor) gives a ratio sensor depth /
//! DUSt3R depth. The estimator is a median refined by trimming: the ratios' median, then again
//! the median of those within 3 robust standard deviations of it (1.4826 times the median
//! absolute deviation), a few times. The median alone ignores the sensor's flying pixels at edges
//! and DUSt3R's wrong pixels as long as they are fewer than half, but a one-sided share of them
//! pulls it; the trimming takes it back to the ratios that agree. The spread is the robust
//! standard deviation of the ratios kept, relative to the scale.
//!
//! Or from the robot's own odometry ([`OdometryScale`]): the camera's travel between the two
//! keyframes in metres against the pair's translation.

use crate::dust3r::{InputMapping, Pointmap};
use crate::image::depth::DepthImage;
use crate::quantile::{quantile_in_place, Method};
use std::collections::VecDeque;

/// Where the chain's metric scale comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleSource {
    /// None: DUSt3R's arbitrary scale, set by the first pair.
    None,
    /// A registered depth image beside each keyframe.
    Depth,
    /// The robot's own odometry on /tf (`scale_odom_frame -> base_frame`).
    Odometry,
}

impl ScaleSource {
    /// The `scale_source` parameter's values.
    pub const NAMES: [&'static str; 3] = ["none", "depth", "odometry"];

    /// Its parameter value.
    pub fn name(self) -> &'static str {
        match self {
            ScaleSource::None => "none",
            ScaleSource::Depth => "depth",
            ScaleSource::Odometry => "odometry",
        }
    }

    /// The source a parameter value names.
    pub fn from_name(name: &str) -> Option<Self> {
        [ScaleSource::None, ScaleSource::Depth, ScaleSource::Odometry].into_iter().find(|s| s.name() == name)
    }

    /// Whether outputs are in metres.
    pub fn is_metric(self) -> bool {
        self != ScaleSource::None
    }
}

/// Fewest pixels a metric scale is taken from.
pub const MIN_DEPTH_PIXELS: usize = 200;

/// Times the median is taken again over the ratios within 3 robust standard deviations of it.
const REFINE: usize = 3;

/// A scale with how well it is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScaleEstimate {
    /// Metres per unit of the pair.
    pub scale: f64,
    /// The ratios' robust standard deviation, relative to `scale` (0.01: 1 %).
    pub spread: f64,
    /// Pixels it was measured on (depth), or pairs (odometry).
    pub pixels: usize,
}

/// How the chain's metric scale stands: the last measurement, and how many pairs since.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScaleTrack {
    /// The last pair's measured scale.
    pub last: Option<ScaleEstimate>,
    /// Pairs in a row since a measurement (all of them before the first).
    pub unmeasured: usize,
}

impl ScaleTrack {
    /// Whether metric outputs are held back: more pairs in a row than `max_unmeasured` went
    /// without a measurement.
    pub fn held(&self, max_unmeasured: usize) -> bool {
        self.unmeasured > max_unmeasured
    }

    /// The last measurement's standard error relative to its scale (the standard error of a
    /// median, 1.2533 sigma / sqrt(n)); 0 before the first.
    pub fn relative_error(&self) -> f64 {
        self.last.map_or(0.0, |e| 1.2533 * e.spread / (e.pixels.max(1) as f64).sqrt())
    }

    /// A pair was measured or not; a pair the robot barely moved over keeps the count where
    /// it is (nothing failed: the scale carried over it cannot have drifted much).
    pub fn update(&mut self, measured: &Result<ScaleEstimate, ScaleError>) {
        match measured {
            Ok(m) => (self.last, self.unmeasured) = (Some(*m), 0),
            Err(ScaleError::LittleMotion { .. }) => {}
            Err(_) => self.unmeasured += 1,
        }
    }
}

/// Why a pair has no metric scale.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScaleError {
    /// `scale_source` is none: nothing measures the scale.
    #[error("scale_source is none")]
    NotMetric,
    /// Neither view has a depth image.
    #[error("no depth image within depth_max_interval of either keyframe")]
    NoDepth,
    /// The keyframe the pair shares with the chain has too few confident pixels in common in
    /// its two pointmaps to relate the pair to the chain.
    #[error("the shared keyframe's pointmaps have too few confident pixels in common")]
    Unrelated,
    /// The pair has no pose to measure.
    #[error("the pair has no pose")]
    NoPose,
    /// The camera's mount on base_frame is not known yet (/tf_static).
    #[error("the camera's mount on base_frame is not known yet (/tf_static)")]
    NoMount,
    /// The robot's odometry has no pose at a keyframe's stamp.
    #[error("no robot odometry (scale_odom_frame -> base_frame on /tf) around the keyframes' stamps")]
    NoOdometry,
    /// The robot moved too little between the keyframes for its odometry to measure the scale.
    #[error("the camera moved {moved:.3} m between the keyframes ({need:.3} m needed)")]
    LittleMotion {
        /// Metres the camera moved.
        moved: f64,
        /// `scale_min_translation`.
        need: f64,
    },
    /// Too few pixels are both confident and measured.
    #[error("{got} pixels are confident and have sensor depth ({need} needed)")]
    TooFewPixels {
        /// Pixels found.
        got: usize,
        /// Needed.
        need: usize,
    },
}

/// One view of a pair as the depth camera saw it.
pub struct DepthView<'a> {
    /// The view's points in its own camera frame (the pair's scale).
    pub pointmap: &'a Pointmap,
    /// Where the pointmap's grid lies in the view's pixels.
    pub mapping: &'a InputMapping,
    /// The depth image registered to the view's colour image.
    pub depth: &'a DepthImage,
}

/// The ratios sensor depth / pointmap depth over `view`'s pixels above `min_confidence`.
fn ratios(view: &DepthView<'_>, min_confidence: f32, out: &mut Vec<f64>) {
    let map = view.pointmap;
    let colour = (view.mapping.original_width, view.mapping.original_height);
    for (i, (p, &c)) in map.points.chunks_exact(3).zip(&map.confidence).enumerate() {
        let z = p[2] as f64;
        if !(c > min_confidence && z.is_finite() && z > 0.0) {
            continue;
        }
        let (x, y) = view.mapping.to_original((i % map.width) as f64, (i / map.width) as f64);
        if let Some(d) = view.depth.at(x, y, colour) {
            out.push(d / z);
        }
    }
}

/// The metres per pair unit that make `views`' pointmaps agree with their sensor depths (see
/// the module's comment).
pub fn depth_scale(views: &[DepthView<'_>], min_confidence: f32) -> Result<ScaleEstimate, ScaleError> {
    let mut r = Vec::new();
    for v in views {
        ratios(v, min_confidence, &mut r);
    }
    if r.len() < MIN_DEPTH_PIXELS {
        return Err(ScaleError::TooFewPixels { got: r.len(), need: MIN_DEPTH_PIXELS });
    }
    let median = |v: &mut [f64]| quantile_in_place(v, 0.5, Method::Linear).unwrap_or(f64::NAN);
    let sigma = |r: &[f64], m: f64| 1.4826 * median(&mut r.iter().map(|x| (x - m).abs()).collect::<Vec<_>>());
    let mut scale = median(&mut r);
    let mut spread = sigma(&r, scale);
    for _ in 0..REFINE {
        let mut kept: Vec<f64> = r.iter().copied().filter(|x| (x - scale).abs() <= 3.0 * spread).collect();
        if kept.len() < MIN_DEPTH_PIXELS {
            break;
        }
        scale = median(&mut kept);
        spread = sigma(&kept, scale);
    }
    let spread = spread / scale;
    Ok(ScaleEstimate { scale, spread, pixels: r.len() })
}

/// Pairs the robot's odometry scale keeps: more average the robot's noise down, fewer follow
/// the chain's drift sooner.
const KEEP_PAIRS: usize = 16;

/// The metric scale from the robot's odometry, as a running estimate over the chain's pairs.
/// Each pair gives its metres per unit two ways: its translation against the camera's by the
/// robot's odometry (noisy: wheel slip, clock offsets), and its depth ratio to the metric chain
/// (smooth, but drifting slowly). Their ratio is the correction the chain needs; the median of
/// the last 16 such ratios, each brought to the chain's units of now, is applied. With 5 %
/// noise per pair and no drift the scale stays within about 3 %; a drift of 0.3 % per pair
/// lags by about 5 % (simulated; see the test). A chain's first pair has the robot's alone.
#[derive(Clone, Debug, Default)]
pub struct OdometryScale {
    /// Metres per chain unit of now, as each recent pair measured it.
    ratios: VecDeque<f64>,
}

impl OdometryScale {
    /// The pair's metres per unit: `moved` metres the camera moved by the robot's odometry,
    /// `pair` its translation in its own units, `chain` its metres per unit by the depth ratio
    /// to the chain (`None` for a chain's first pair); `min_translation` metres at least.
    pub fn measure(
        &mut self,
        moved: f64,
        pair: f64,
        chain: Option<f64>,
        min_translation: f64,
    ) -> Result<ScaleEstimate, ScaleError> {
        if !(moved >= min_translation && moved.is_finite()) {
            return Err(ScaleError::LittleMotion { moved, need: min_translation });
        }
        if !(pair > 0.0 && pair.is_finite()) {
            return Err(ScaleError::NoPose);
        }
        let by_robot = moved / pair;
        let Some(by_chain) = chain.filter(|c| *c > 0.0 && c.is_finite()) else {
            self.ratios.clear();
            return Ok(ScaleEstimate { scale: by_robot, spread: 0.0, pixels: 1 });
        };
        self.ratios.push_back(by_robot / by_chain);
        while self.ratios.len() > KEEP_PAIRS {
            self.ratios.pop_front();
        }
        let mut r: Vec<f64> = self.ratios.iter().copied().collect();
        let median = |v: &mut [f64]| quantile_in_place(v, 0.5, Method::Linear).unwrap_or(f64::NAN);
        let k = median(&mut r);
        let spread = 1.4826 * median(&mut r.iter().map(|x| (x - k).abs()).collect::<Vec<_>>()) / k;
        // The chain's units change by k from this pair on.
        self.ratios.iter_mut().for_each(|x| *x /= k);
        Ok(ScaleEstimate { scale: by_chain * k, spread, pixels: r.len() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// A chain whose depth ratios drift (none, 0.3 % per pair) measured by a robot whose
    /// odometry is off by 5 % (random) per pair: after the first 10 pairs the scale stays within
    /// 5 % and 8 % of the truth; a pair the robot barely moved over is not measured.
    #[test]
    fn the_robots_odometry_keeps_the_chain_metric() {
        for (step, bound) in [(1.0, 0.05), (1.003, 0.08)] {
            let mut rng = SplitMix64::new(3);
            let mut odometry = OdometryScale::default();
            let (truth, pair) = (2.0, 0.3);
            let first = odometry.measure(truth * pair * 1.03, pair, None, 0.05).unwrap();
            let mut chain = first.scale / truth;
            let mut worst: f64 = 0.0;
            for i in 1..80 {
                chain *= step;
                let moved = truth * pair * (1.0 + 0.05 * rng.normal());
                let est = odometry.measure(moved, pair, Some(truth * chain), 0.05).unwrap();
                chain = est.scale / truth;
                if i > 10 {
                    worst = worst.max((chain - 1.0).abs());
                }
            }
            assert!(worst < bound, "drift {step}: worst {worst}");
        }
        let still = OdometryScale::default().measure(0.01, 0.3, Some(2.0), 0.05);
        assert_eq!(still, Err(ScaleError::LittleMotion { moved: 0.01, need: 0.05 }));
    }

    /// A 64x48 pointmap of a slanted wall on a 128x96 frame (grid at half the pixels), and the
    /// wall's depth in metres as a sensor at that frame's size sees it, `scale` times larger.
    fn wall(scale: f64) -> (Pointmap, InputMapping, DepthImage) {
        let (w, h) = (64usize, 48usize);
        let z = |u: f64| 1.0 + 0.01 * u;
        let mut points = Vec::new();
        for v in 0..h {
            for u in 0..w {
                points.extend([u as f32 * 0.01, v as f32 * 0.01, z(u as f64) as f32]);
            }
        }
        let map = Pointmap { width: w, height: h, points, confidence: vec![5.0; w * h] };
        let mapping = InputMapping {
            original_width: 128,
            original_height: 96,
            scale_x: 0.5,
            scale_y: 0.5,
            offset_x: 0.0,
            offset_y: 0.0,
        };
        let metres = (0..96 * 128).map(|i| (z(((i % 128) / 2) as f64) * scale) as f32).collect();
        (map, mapping, DepthImage::from_metres(128, 96, metres).unwrap())
    }

    #[test]
    fn the_scale_is_found_through_sensor_noise_holes_and_flying_pixels() {
        let (mut map, mapping, depth) = wall(2.5);
        let mut rng = SplitMix64::new(7);
        // 2 % noise on every DUSt3R depth, a third of the pixels wrong by up to 3x.
        for (i, p) in map.points.chunks_exact_mut(3).enumerate() {
            p[2] *= 1.0 + 0.02 * rng.normal() as f32;
            if i % 3 == 0 {
                p[2] *= 1.0 + 2.0 * rng.next_f64() as f32;
            }
        }
        let est = depth_scale(&[DepthView { pointmap: &map, mapping: &mapping, depth: &depth }], 3.0).unwrap();
        assert!((est.scale / 2.5 - 1.0).abs() < 0.01, "{est:?}");
        assert!(est.spread > 0.01 && est.spread < 0.5, "{est:?}");
        assert_eq!(est.pixels, 64 * 48);
    }

    #[test]
    fn unconfident_or_unmeasured_pixels_give_no_scale() {
        let (mut map, mapping, _) = wall(1.0);
        let empty = DepthImage::from_metres(128, 96, vec![0.0; 128 * 96]).unwrap();
        let view = DepthView { pointmap: &map, mapping: &mapping, depth: &empty };
        assert_eq!(depth_scale(&[view], 3.0), Err(ScaleError::TooFewPixels { got: 0, need: MIN_DEPTH_PIXELS }));
        let (_, _, depth) = wall(1.0);
        map.confidence.iter_mut().skip(100).for_each(|c| *c = 1.0);
        let view = DepthView { pointmap: &map, mapping: &mapping, depth: &depth };
        assert_eq!(depth_scale(&[view], 3.0), Err(ScaleError::TooFewPixels { got: 100, need: MIN_DEPTH_PIXELS }));
    }
}
