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

use crate::dust3r::{InputMapping, Pointmap};
use crate::image::depth::DepthImage;
use crate::quantile::{quantile_in_place, Method};

/// Where the chain's metric scale comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleSource {
    /// None: DUSt3R's arbitrary scale, set by the first pair.
    None,
    /// A registered depth image beside each keyframe.
    Depth,
}

impl ScaleSource {
    /// The `scale_source` parameter's values.
    pub const NAMES: [&'static str; 2] = ["none", "depth"];

    /// Its parameter value.
    pub fn name(self) -> &'static str {
        match self {
            ScaleSource::None => "none",
            ScaleSource::Depth => "depth",
        }
    }

    /// The source a parameter value names.
    pub fn from_name(name: &str) -> Option<Self> {
        [ScaleSource::None, ScaleSource::Depth].into_iter().find(|s| s.name() == name)
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
    /// Pixels it was measured on.
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

    /// A pair was measured (`Some`) or not.
    pub fn update(&mut self, measured: Option<ScaleEstimate>) {
        match measured {
            Some(m) => (self.last, self.unmeasured) = (Some(m), 0),
            None => self.unmeasured += 1,
        }
    }
}

/// Why a pair has no metric scale.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScaleError {
    /// Neither view has a depth image.
    #[error("no depth image within depth_max_interval of either keyframe")]
    NoDepth,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

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
