//! Per-layer timing of the SuperPoint convolutions at 480x640 (a profiling aid).
//!
//!     cargo run --release --example layer_times
use sp_dust3r_core::tensor::{Conv3x3, FeatureMap};
use std::time::Instant;

fn time<F: FnMut()>(name: &str, gflop: f64, mut f: F) {
    f();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("{name:>28}: {:7.2} ms  {:6.0} GFLOP/s", best * 1e3, gflop / best);
}

fn main() {
    for &(h, w, ci, co) in &[
        (480, 640, 1, 64),
        (480, 640, 64, 64),
        (240, 320, 64, 64),
        (120, 160, 64, 128),
        (120, 160, 128, 128),
        (60, 80, 128, 128),
        (60, 80, 128, 512),
    ] {
        let wt: Vec<f32> = (0..co * ci * 9).map(|i| ((i * 7919) % 101) as f32 / 101.0 - 0.5).collect();
        let conv = Conv3x3::from_torch(co, ci, &wt, &vec![0.1; co]).unwrap();
        let x = FeatureMap::from_dense(h, w, ci, &vec![0.5; h * w * ci]).unwrap();
        let gflop = (h * w * ci * co * 9 * 2) as f64 / 1e9;
        time(&format!("conv3x3 {h}x{w} {ci}->{co}"), gflop, || {
            let _ = conv.forward(&x, true).unwrap();
        });
        if h >= 120 && ci == co {
            time(&format!("maxpool {h}x{w}x{ci}"), 0.0, || {
                let _ = x.max_pool_2x2();
            });
        }
    }
}
