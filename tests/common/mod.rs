//! Shared test helpers: the upstream fixtures (tests/fixtures, copied from shared/fixtures).
#![allow(dead_code)]

use std::path::PathBuf;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;

pub fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(name)
}

/// The reference arrays of the SuperPoint fixture (HF transformers 5.24, random weights).
pub struct SuperPointFixture {
    npz: NpzReader<std::fs::File>,
}

impl SuperPointFixture {
    pub fn open() -> Self {
        let path = fixture_dir("superpoint").join("superpoint_random_seed0.npz");
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { npz: NpzReader::new(file).expect("fixture npz") }
    }

    pub fn array(&mut self, name: &str) -> ArrayD<f32> {
        self.npz.by_name(&format!("{name}.npy")).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    /// CHW reference map as HWC, the layout the network produces.
    pub fn chw_as_hwc(&mut self, name: &str) -> (Vec<f32>, [usize; 3]) {
        let a = self.array(name);
        let s = a.shape().to_vec();
        let hwc = a.permuted_axes(vec![1, 2, 0]);
        (hwc.iter().copied().collect(), [s[1], s[2], s[0]])
    }
}

/// Largest absolute difference of two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
