//! Post-processing from the reference heatmap and descriptor map (HF transformers 5.24 outputs
//! on the fixture), so network rounding cannot leak in: the keypoint set must match exactly.

mod common;

use common::SuperPointFixture;
use sp_dust3r_core::superpoint::{extract_keypoints, nms, PostParams};

const H: usize = 480;
const W: usize = 640;

struct Reference {
    heat: Vec<f32>,
    heat_nms: Vec<f32>,
    desc_map: Vec<f32>,
    /// Reference keypoints (x, y), scores and descriptors, in HF's row-major order.
    xy: Vec<[f32; 2]>,
    scores: Vec<f32>,
    descriptors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    let mut fx = SuperPointFixture::open();
    let heat = fx.array("heatmap").iter().copied().collect();
    let heat_nms = fx.array("heatmap_nms").iter().copied().collect();
    let (desc_map, _) = fx.chw_as_hwc("descriptor_map");
    // HF derives absolute positions from relative ones, so a few carry float noise
    // (124.99999 for pixel 125): they are integer pixel indices.
    let xy: Vec<[f32; 2]> = fx.array("keypoints_xy").outer_iter().map(|r| [r[0].round(), r[1].round()]).collect();
    let raw = fx.array("keypoints_xy");
    let noise = raw.iter().map(|v| (v - v.round()).abs()).fold(0.0, f32::max);
    assert!(noise < 1e-3, "reference keypoints are not integer pixels (off by {noise})");
    let scores = fx.array("scores").iter().copied().collect();
    let descriptors = fx.array("descriptors").outer_iter().map(|r| r.iter().copied().collect()).collect();
    Reference { heat, heat_nms, desc_map, xy, scores, descriptors }
}

/// The reference keypoints inside the four-sided 4-pixel border, sorted by score descending
/// (stable, so equal scores keep HF's row-major order).
fn reference_inside_border(r: &Reference) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..r.xy.len())
        .filter(|&i| {
            let [x, y] = r.xy[i];
            x >= 4.0 && y >= 4.0 && x < (W - 4) as f32 && y < (H - 4) as f32
        })
        .collect();
    idx.sort_by(|&a, &b| r.scores[b].total_cmp(&r.scores[a]));
    idx
}

#[test]
fn nms_keeps_exactly_the_reference_maxima_above_threshold() {
    let r = reference();
    let kept = nms(&r.heat, H, W, 4, 0.005).unwrap();
    let expected: Vec<usize> = (0..H * W).filter(|&i| r.heat_nms[i] > 0.005).collect();
    assert_eq!(kept.len(), expected.len());
    assert_eq!(kept, expected);
}

#[test]
fn keypoints_match_reference_inside_four_sided_border_in_score_order() {
    let r = reference();
    let params = PostParams { threshold: 0.005, nms_radius: 4, border: 4, max_keypoints: None };
    let kept = nms(&r.heat, H, W, 4, params.threshold).unwrap();
    let kp = extract_keypoints(&r.heat, &kept, &r.desc_map, 60, 80, 256, &params).unwrap();

    let expected = reference_inside_border(&r);
    // HF keeps the right and bottom bands (its border bug); the fixture has keypoints there.
    let dropped = r.xy.len() - expected.len();
    assert!(dropped > 100, "fixture should exercise the right/bottom border, dropped {dropped}");
    assert_eq!(kp.len(), expected.len());
    for (n, &i) in expected.iter().enumerate() {
        assert_eq!(kp.xy[n], r.xy[i], "keypoint {n}");
        assert_eq!(kp.scores[n], r.scores[i], "score {n}");
        let d = kp.descriptor(n);
        let diff = d.iter().zip(&r.descriptors[i]).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff < 1e-5, "descriptor {n} differs by {diff}");
    }
    assert!(kp.scores.windows(2).all(|w| w[0] >= w[1]), "scores must be descending");
}

#[test]
fn top_k_keeps_the_best_scores() {
    let r = reference();
    let params = PostParams { threshold: 0.005, nms_radius: 4, border: 4, max_keypoints: Some(1024) };
    let kept = nms(&r.heat, H, W, 4, params.threshold).unwrap();
    let kp = extract_keypoints(&r.heat, &kept, &r.desc_map, 60, 80, 256, &params).unwrap();
    let expected = reference_inside_border(&r);
    assert_eq!(kp.len(), 1024);
    let want: Vec<[f32; 2]> = expected[..1024].iter().map(|&i| r.xy[i]).collect();
    assert_eq!(kp.xy, want);
}

#[test]
fn radius_zero_disables_nms_and_threshold_is_strict() {
    let r = reference();
    let kept = nms(&r.heat, H, W, 0, 0.005).unwrap();
    let expected = r.heat.iter().filter(|&&v| v > 0.005).count();
    assert_eq!(kept.len(), expected);
    // Strictness: a threshold equal to a pixel's score drops that pixel.
    let s = r.heat[kept[0]];
    assert!(!nms(&r.heat, H, W, 0, s).unwrap().contains(&kept[0]));
}
