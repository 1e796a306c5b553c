//! SuperPoint with the trained weights (Magic Leap's superpoint_v1, `../shared/real/superpoint`)
//! on the COCO image of the transformers integration test (`../shared/real/coco`), against the
//! values that test expects from the float32 checkpoint. Our copy of the weights has its
//! kernels rounded to float16 once (shared/real/superpoint/README.md): the same keypoints, and
//! scores and descriptors within ~1.5e-3 of the published values.

mod common;

use sp_dust3r::image::Frame;
use sp_dust3r::superpoint::{PostParams, SuperPoint};

/// The published scores, against float16-rounded kernels (README: up to ~1.5e-3 apart; 2e-3
/// allowed on scores and descriptors).
const FP16_TOLERANCE: f32 = 2e-3;

#[test]
fn trained_weights_on_the_coco_image_give_the_transformers_test_values() {
    let real = common::real_dir();
    let model = SuperPoint::load(&real.join("superpoint")).unwrap();
    let png = std::fs::read(real.join("coco/000000039769.png")).unwrap();
    let frame = Frame::decode(&png).unwrap();
    assert_eq!((frame.width(), frame.height()), (640, 480), "no resize, as in the transformers test");
    // The transformers default config: NMS radius 4, threshold 0.005, border 4, every keypoint.
    let params = PostParams { threshold: 0.005, nms_radius: 4, border: 4, max_keypoints: None };
    let (kp, _) = model.detect(&frame.to_luma(), &params).unwrap();
    assert_eq!(kp.len(), 568);

    // Their order is row-major (torch.nonzero); ours is by score. Match by position.
    let mut row_major: Vec<usize> = (0..kp.len()).collect();
    row_major.sort_by_key(|&i| (kp.xy[i][1] as i64, kp.xy[i][0] as i64));
    let first_xy = [[0.75, 0.0188], [0.7719, 0.0188], [0.7641, 0.0333]];
    for (n, want) in first_xy.iter().enumerate() {
        let [x, y] = kp.xy[row_major[n]];
        // Published to 4 decimals of x/W and y/H: within half a unit of the last digit.
        assert!(
            (x / 640.0 - want[0]).abs() <= 5e-5 && (y / 480.0 - want[1]).abs() <= 5e-5,
            "keypoint {n}: ({x}, {y}) vs {want:?}"
        );
    }
    let first_scores = [0.0064, 0.0139, 0.0591, 0.0727, 0.5170, 0.0175, 0.1526, 0.2057, 0.0335];
    let mut worst = 0.0f32;
    for (n, want) in first_scores.iter().enumerate() {
        let got = kp.scores[row_major[n]];
        assert!((got - want).abs() <= FP16_TOLERANCE + 5e-5, "score {n}: {got} vs {want}");
        worst = worst.max((got - want).abs());
    }
    let d0 = kp.descriptors[row_major[0] * kp.descriptor_dim];
    assert!((d0 - -0.1095).abs() <= FP16_TOLERANCE + 5e-5, "descriptor 0[0]: {d0}");
    eprintln!("568 keypoints; largest score difference {worst:.2e}; descriptor 0[0] {d0:.4} (published -0.1095)");
}
