//! DUSt3R (naver, `DUSt3R_ViTLarge_BaseDecoder_512_dpt`) on the compute core: a ViT encoder shared
//! by both views, a two-branch cross-attending decoder, and one DPT head per branch producing
//! pointmaps of both views in camera 1's frame.

mod config;
mod dpt;
mod model;
mod post;
pub mod preprocess;
pub mod synthetic;

pub use config::Dust3rConfig;
pub use model::{BranchHooks, Dust3r, Encoded, PairPrediction};
pub use post::Pointmap;
pub use preprocess::{prepare, InputMapping, PrepMode, PreparedView};

use crate::weights::HubModel;

/// The checkpoint the mast3r-blackhole tt-model server pins; the CPU backend resolves the same.
pub const HUB_MODEL: HubModel = HubModel {
    name: "DUSt3R",
    repo: "naver/DUSt3R_ViTLarge_BaseDecoder_512_dpt",
    revision: "61c57447d7b0adc8a1a30b2b0adec7a8935aa2a3",
    env_var: "SP_DUST3R_DUST3R_WEIGHTS",
    files: &["model.safetensors", "config.json"],
};

#[derive(Debug, thiserror::Error)]
pub enum Dust3rError {
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    #[error("internal shape error: {0}")]
    Tensor(#[from] crate::tensor::TensorError),
    #[error("image must be 3 x H x W with H and W positive multiples of the patch size {patch}, got {channels} x {height} x {width}")]
    InputSize { channels: usize, height: usize, width: usize, patch: usize },
    #[error(transparent)]
    Resize(#[from] preprocess::ResizeError),
    #[error("the two views have different token grids ({0:?} vs {1:?})")]
    GridMismatch((usize, usize), (usize, usize)),
}
