//! SuperPoint with the trained weights (Magic Leap's superpoint_v1, `../shared/real/superpoint`)
//! on the COCO image of the transformers integration test (`../shared/real/coco`), against the
//! values that test expects from the float32 checkpoint. Our copy of the weights has its
//! kernels rounded to float16 once (shared/real/superpoint/README.md): the same keypoints, and
//! scores and descriptors within ~1.5e-3 of the published values.

mod common;

use sp_dust3r_core::image::Frame;
use sp_dust3r_core::superpoint::{PostParams, SuperPoint};

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

/// `superpoint --draw`: the COCO image with the trained weights as a PNG that decodes to the
/// input's size, each keypoint's centre in the colour of its score (where no stronger keypoint's
/// ring covers it), the strongest keypoint's whole ring in the top colour, and a caption band
/// along the bottom: the picture darkened, with light text in it.
#[test]
fn drawn_keypoints_are_ringed_in_their_scores_colours_under_a_caption() {
    use sp_dust3r_core::image::draw::{caption_size, ring_radius, score_colour, score_position};
    let dir = tempfile::tempdir().unwrap();
    let image = common::real_dir().join("coco/000000039769.png");
    let (npz, png) = (dir.path().join("kp.npz"), dir.path().join("kp.png"));
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .arg("superpoint")
        .args(["--weights".as_ref(), common::real_dir().join("superpoint").as_os_str()])
        .args(["--image".as_ref(), image.as_os_str(), "--out".as_ref(), npz.as_os_str()])
        .args(["--draw".as_ref(), png.as_os_str()])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let mut reader = ndarray_npy::NpzReader::new(std::fs::File::open(&npz).unwrap()).unwrap();
    let xy: ndarray::Array2<f32> = reader.by_name("keypoints").unwrap();
    let scores: ndarray::Array1<f32> = reader.by_name("scores").unwrap();
    let drawn = image::open(&png).unwrap().to_rgb8();
    let input = image::open(&image).unwrap().to_rgb8();
    assert_eq!(drawn.dimensions(), input.dimensions());
    let (w, h) = drawn.dimensions();
    let band_top = h - (caption_size(w, h) * 1.6).ceil() as u32;
    let radius = ring_radius(w, h);
    let (lo, hi) = scores.iter().fold((f32::MAX, f32::MIN), |(l, m), &s| (l.min(s), m.max(s)));
    assert!(xy.nrows() > 100 && hi > lo, "{} keypoints", xy.nrows());
    let colour = |s: f32| image::Rgb(score_colour(score_position(s, lo, hi)));

    // Centres above the band: their own colour unless a stronger keypoint's ring lies on them.
    let (mut own, mut above) = (0, 0);
    for (p, &s) in xy.rows().into_iter().zip(&scores) {
        let (x, y) = (p[0].round() as u32, p[1].round() as u32);
        if y + radius as u32 >= band_top {
            continue;
        }
        above += 1;
        if *drawn.get_pixel(x, y) == colour(s) {
            own += 1;
        }
    }
    assert!(own * 10 >= above * 9, "{own} of {above} centres in their score's colour");
    // The strongest (drawn last): its whole ring.
    let best = scores.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
    let (bx, by) = (xy[[best, 0]].round() as i64, xy[[best, 1]].round() as i64);
    for (dx, dy) in [(radius, 0), (-radius, 0), (0, radius), (0, -radius)] {
        let (x, y) = (bx + dx as i64, by + dy as i64);
        if (0..w as i64).contains(&x) && (0..band_top as i64).contains(&y) {
            assert_eq!(*drawn.get_pixel(x as u32, y as u32), colour(hi), "ring pixel ({x}, {y})");
        }
    }
    // Untouched between keypoints: most pixels above the band are the input's.
    let same = (0..band_top)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .filter(|&(x, y)| drawn.get_pixel(x, y) == input.get_pixel(x, y))
        .count();
    assert!(same as f64 > 0.7 * (w * band_top) as f64, "{same} pixels unchanged");
    // The band: darkened to a third, with light text (the caption) in it.
    let band: Vec<_> = (band_top..h).flat_map(|y| (0..w).map(move |x| (x, y))).collect();
    let dark = band.iter().filter(|&&(x, y)| drawn.get_pixel(x, y).0.iter().all(|&c| c <= 86)).count();
    let light = band.iter().filter(|&&(x, y)| drawn.get_pixel(x, y).0.iter().all(|&c| c >= 200)).count();
    assert!(dark * 10 > band.len() * 7 && light > 200, "{dark} dark and {light} light of {} band pixels", band.len());
}
