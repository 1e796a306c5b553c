//! A frame neither matching places is described again turned back by a likely roll: a
//! handheld camera rolls tens of degrees between frames a busy node takes, and SuperPoint's
//! descriptors, unlike ORB's, do not follow the turn (docs/benchmarks.md). The turned frame's
//! keypoints are mapped back into the frame's own pixels, so tracking sees them as any other.

use crate::backend::{BackendError, FeatureExtractor};
use crate::image::turn::Turn;
use crate::image::Frame;
use crate::superpoint::{Keypoints, PostParams};

/// The turns tried, in degrees, nearest first, in steps of 45 degrees: SuperPoint's matches hold
/// to about half a step either side, and a frame a busy node takes late in a fast roll can be
/// turned 90-140 degrees from every keyframe. A half turn placed no frame and is not tried.
pub(super) const TURNS_DEG: [f64; 6] = [45.0, -45.0, 90.0, -90.0, 135.0, -135.0];

/// How soon after the last frame placed (tracked, or the newest keyframe) a lost one is
/// described again turned. A first pair that joins late leaves the newest keyframe 2 s behind
/// the first frames tracked when frames come 0.67 s apart (docs/benchmarks.md).
pub(super) const WITHIN: std::time::Duration = std::time::Duration::from_secs(3);

/// Keypoints this close to the frame's edge once turned back are dropped: the edge the turn
/// brought in from outside the frame makes corners of its own.
const EDGE_PX: f64 = 8.0;

/// `frame`'s keypoints and descriptors as found on it turned by `degrees`, in the frame's own
/// pixels, scores descending; those near or past its edge dropped.
pub(super) fn keypoints_turned(
    features: &dyn FeatureExtractor,
    frame: &Frame,
    degrees: f64,
    post: &PostParams,
) -> Result<Keypoints, BackendError> {
    let (w, h) = (frame.width(), frame.height());
    let turn = Turn::about_centre(degrees.to_radians(), w, h);
    let found = features.detect(&turn.apply(frame), post)?;
    let inside = |p: [f64; 2]| {
        p[0] >= EDGE_PX && p[1] >= EDGE_PX && p[0] <= w as f64 - 1.0 - EDGE_PX && p[1] <= h as f64 - 1.0 - EDGE_PX
    };
    let mut kept = Keypoints { descriptor_dim: found.descriptor_dim, ..Keypoints::default() };
    for (i, xy) in found.xy.iter().enumerate() {
        let p = turn.to_original([xy[0] as f64, xy[1] as f64]);
        if inside(p) {
            kept.xy.push([p[0] as f32, p[1] as f32]);
            kept.scores.push(found.scores[i]);
            kept.descriptors.extend_from_slice(found.descriptor(i));
        }
    }
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendHealth;

    /// A stand-in for SuperPoint: a keypoint at each pixel brighter than its eight neighbours
    /// and a third of full scale, described by its brightness.
    struct Dots;

    impl FeatureExtractor for Dots {
        fn detect(&self, frame: &Frame, _: &PostParams) -> Result<Keypoints, BackendError> {
            let luma = frame.to_luma();
            let (w, h) = (luma.width as usize, luma.height as usize);
            let v = |x: usize, y: usize| luma.data[y * w + x];
            let mut found = Keypoints { descriptor_dim: 1, ..Default::default() };
            for y in 1..h - 1 {
                for x in 1..w - 1 {
                    let around = (y - 1..=y + 1).flat_map(|j| (x - 1..=x + 1).map(move |i| (i, j)));
                    if v(x, y) > 0.33 && around.filter(|&p| p != (x, y)).all(|(i, j)| v(i, j) < v(x, y)) {
                        found.xy.push([x as f32, y as f32]);
                        found.scores.push(v(x, y));
                        found.descriptors.push(v(x, y));
                    }
                }
            }
            // Scores descending, as the trait has it.
            let mut order: Vec<usize> = (0..found.len()).collect();
            order.sort_by(|&a, &b| found.scores[b].total_cmp(&found.scores[a]));
            let pick = |v: &[f32]| order.iter().map(|&i| v[i]).collect::<Vec<f32>>();
            let xy = order.iter().map(|&i| found.xy[i]).collect();
            Ok(Keypoints { xy, scores: pick(&found.scores), descriptors: pick(&found.descriptors), descriptor_dim: 1 })
        }
        fn describe(&self) -> String {
            "dots".into()
        }
        fn health(&self) -> Vec<BackendHealth> {
            Vec::new()
        }
    }

    #[test]
    fn keypoints_found_on_the_turned_frame_land_where_the_frame_shows_them() {
        // Dots of two brightnesses (a bright centre, dimmer cross), one of them near the edge.
        let (w, h) = (64usize, 48usize);
        let mut data = vec![0u8; w * h];
        for (x, y, peak) in [(20usize, 15usize, 250u8), (41, 31, 200), (4, 40, 250)] {
            data[y * w + x] = peak;
            for (i, j) in [(x - 1, y), (x + 1, y), (x, y - 1), (x, y + 1)] {
                data[j * w + i] = peak / 2;
            }
        }
        let frame = Frame::from_raw("mono8", w as u32, h as u32, w, false, data).unwrap();
        for degrees in TURNS_DEG {
            let kept = keypoints_turned(&Dots, &frame, degrees, &PostParams::default()).unwrap();
            assert_eq!(kept.len(), 2, "{degrees} degrees: the dot by the edge is dropped: {:?}", kept.xy);
            let at = |x: f32, y: f32| {
                let i = kept.xy.iter().position(|p| (p[0] - x).hypot(p[1] - y) < 1.0);
                i.unwrap_or_else(|| panic!("{degrees} degrees: no keypoint at ({x}, {y}): {:?}", kept.xy))
            };
            // Each descriptor came with its keypoint: the brighter dot's is the larger.
            let (bright, dim) = (at(20.0, 15.0), at(41.0, 31.0));
            assert!(kept.descriptors[bright] > kept.descriptors[dim], "{:?}", kept.descriptors);
            assert!(kept.scores.windows(2).all(|s| s[0] >= s[1]), "scores stay descending");
        }
    }
}
