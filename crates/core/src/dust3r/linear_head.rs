//! The linear head of the `*_linear` checkpoints: one linear layer maps each `dec_norm`-ed last
//! decoder token to its whole patch of outputs (x, y, z, confidence for every pixel of the
//! patch), which a pixel shuffle lays out on the image grid.

use super::layers::{BranchHooks, Encoded, WeightsReader};
use super::Dust3rError;
use crate::tensor::{FeatureMap, Linear, Precision};

/// Values per output pixel: x, y, z and the confidence.
const OUT_CHANNELS: usize = 4;

pub(super) struct LinearHead {
    proj: Linear,
    patch: usize,
}

impl LinearHead {
    /// `{name}.proj`: `dec_dim -> 4 * patch * patch`. It is the head's last layer, so it stays
    /// float32 whatever the model's precision.
    pub fn load(l: &WeightsReader, name: &str, dec_dim: usize, patch: usize) -> Result<Self, Dust3rError> {
        let out = OUT_CHANNELS * patch * patch;
        let w = l.param(&format!("{name}.proj.weight"), &[out, dec_dim])?;
        let b = l.param(&format!("{name}.proj.bias"), &[out])?;
        Ok(Self { proj: Linear::with_precision(dec_dim, out, w, b, Precision::Fp32)?, patch })
    }

    /// The 4-channel output map at image resolution. Output `c * p * p + dy * p + dx` of the
    /// token at grid (row, col) is channel `c` of pixel `(p * row + dy, p * col + dx)`.
    pub fn forward(&self, encoded: &Encoded, branch: &BranchHooks) -> Result<FeatureMap, Dust3rError> {
        let (rows, cols, p) = (encoded.rows, encoded.cols, self.patch);
        let last = &branch.hooks[2];
        let per_token = self.proj.forward(last, rows * cols, self.proj.in_dim())?;
        let mut map = FeatureMap::zeros(rows * p, cols * p, OUT_CHANNELS);
        for (t, out) in per_token.chunks_exact(OUT_CHANNELS * p * p).enumerate() {
            let (row, col) = (t / cols, t % cols);
            for dy in 0..p {
                for dx in 0..p {
                    let pixel = map.pixel_mut(row * p + dy, col * p + dx);
                    for (c, v) in pixel.iter_mut().enumerate() {
                        *v = out[c * p * p + dy * p + dx];
                    }
                }
            }
        }
        Ok(map)
    }
}
