//! Timing of the SuperPoint post-processing stages on the fixture (a profiling aid).
//!
//!     cargo run --release --example post_times
use std::time::Instant;
use sp_dust3r::superpoint::*;

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/superpoint");
    let (net, _) = SuperPointNet::load(&dir).unwrap();
    let plane: Vec<f32> = (0..480 * 640).map(|i| ((i * 7919 % 255) as f32) / 255.0).collect();
    let out = net.forward(&plane, 480, 640).unwrap();
    let params = PostParams::default();
    for _ in 0..3 {
        let t = Instant::now();
        let heat = depth_to_space_heatmap(&out.logits, 60, 80).unwrap();
        let t1 = t.elapsed();
        let n = nms(&heat, 480, 640, 4, params.threshold).unwrap();
        let t2 = t.elapsed();
        let kp = extract_keypoints(&heat, &n, &out.descriptors, 60, 80, 256, &params).unwrap();
        let t3 = t.elapsed();
        println!("heatmap {:?} nms {:?} extract {:?} ({} kp)", t1, t2 - t1, t3 - t2, kp.len());
    }
}
