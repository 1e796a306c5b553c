//! Median time of each SuperPoint post-processing stage on the sample image (a profiling aid).
//!
//!     cargo run --release --example post_times [IMAGE]
use std::time::Instant;

use sp_dust3r_core::image::Frame;
use sp_dust3r_core::superpoint::*;

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("tests/fixtures/superpoint");
    let image = std::env::args().nth(1).map(Into::into).unwrap_or_else(|| dir.join("image.png"));
    let (net, _) = SuperPointNet::load(&dir).expect("fixture weights");
    let input = preprocess(&Frame::open(&image).expect("image").to_luma()).expect("preprocess");
    let out = net.forward(&input.plane, 480, 640).expect("forward");
    let params = PostParams::default();
    let mut t = [Vec::new(), Vec::new(), Vec::new()];
    let mut n = 0;
    for _ in 0..50 {
        let s = Instant::now();
        let heat = depth_to_space_heatmap(&out.logits, 60, 80).expect("heatmap");
        let a = s.elapsed().as_secs_f64();
        let kept = nms(&heat, 480, 640, 4, params.threshold).expect("nms");
        let b = s.elapsed().as_secs_f64();
        n = extract_keypoints(&heat, &kept, &out.descriptors, 60, 80, 256, &params).expect("extract").len();
        let c = s.elapsed().as_secs_f64();
        t[0].push(a);
        t[1].push(b - a);
        t[2].push(c - b);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e3
    };
    println!(
        "heatmap {:.3} ms, nms {:.3} ms, extract {:.3} ms ({n} keypoints)",
        med(&mut t[0]),
        med(&mut t[1]),
        med(&mut t[2])
    );
}
