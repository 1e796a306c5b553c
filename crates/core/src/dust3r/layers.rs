//! Layer types both the ViT (model.rs) and the DPT heads (dpt.rs) use: the weight loader, the
//! layer norm, and what the encoder and decoder hand to a head.

use std::sync::Arc;

use super::Dust3rError;
use crate::tensor::{layer_norm, Linear, Precision};
use crate::weights::{Param, WeightFile, WeightsError};

/// LayerNorm epsilon everywhere in the model.
const LN_EPS: f32 = 1e-6;

/// Loading helpers shared with the DPT head.
pub(super) struct WeightsReader {
    pub file: Arc<WeightFile>,
    /// What [`WeightsReader::linear`]'s layers compute in.
    pub precision: Precision,
}

impl WeightsReader {
    pub fn param(&self, name: &str, shape: &[usize]) -> Result<Param, WeightsError> {
        self.file.f32_param(&[name], shape)
    }

    pub fn tensor(&self, names: &[&str], shape: &[usize]) -> Result<Vec<f32>, WeightsError> {
        Ok(self.file.f32_tensor(names, shape)?.into_owned())
    }

    pub fn linear(&self, prefix: &str, in_dim: usize, out_dim: usize) -> Result<Linear, Dust3rError> {
        let w = self.param(&format!("{prefix}.weight"), &[out_dim, in_dim])?;
        let b = self.param(&format!("{prefix}.bias"), &[out_dim])?;
        Ok(Linear::with_precision(in_dim, out_dim, w, b, self.precision)?)
    }

    pub fn norm(&self, prefix: &str, dim: usize) -> Result<Norm, Dust3rError> {
        Ok(Norm {
            gamma: self.param(&format!("{prefix}.weight"), &[dim])?,
            beta: self.param(&format!("{prefix}.bias"), &[dim])?,
        })
    }
}

pub(super) struct Norm {
    gamma: Param,
    beta: Param,
}

impl Norm {
    pub fn apply(&self, x: &[f32]) -> Result<Vec<f32>, Dust3rError> {
        let g = self.gamma.as_slice();
        Ok(layer_norm(x, g.len(), g, self.beta.as_slice(), LN_EPS)?)
    }
}

/// One view after the encoder: `enc_norm` output tokens on a `rows x cols` grid.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// Token values, `rows * cols x width`.
    pub tokens: Vec<f32>,
    /// Token grid rows.
    pub rows: usize,
    /// Token grid columns.
    pub cols: usize,
    /// Token width.
    pub width: usize,
}

impl Encoded {
    /// Token positions (row, column), row-major.
    pub fn positions(&self) -> Vec<(usize, usize)> {
        (0..self.rows).flat_map(|r| (0..self.cols).map(move |c| (r, c))).collect()
    }
}

/// The decoder outputs a DPT head reads from one branch: list entries at the middle hooks and
/// the `dec_norm`-ed last one (`dec_width` wide each).
#[derive(Clone, Debug)]
pub struct BranchHooks {
    /// The three hooked decoder outputs.
    pub hooks: [Vec<f32>; 3],
}
