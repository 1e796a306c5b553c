//! DUSt3R (naver, `DUSt3R_ViTLarge_BaseDecoder_512_dpt`) on the compute core: a ViT encoder shared
//! by both views, a two-branch cross-attending decoder, and one DPT head per branch producing
//! pointmaps of both views in camera 1's frame.

pub mod cloud;
mod config;
mod dpt;
mod layers;
mod model;
mod post;
pub mod preprocess;
pub mod synthetic;

pub use config::{ConfigError, Dust3rConfig};
pub use layers::{BranchHooks, Encoded};
pub use model::{Dust3r, PairPrediction};
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

/// Why DUSt3R could not load or run.
#[derive(Debug, thiserror::Error)]
pub enum Dust3rError {
    /// The weights could not be loaded.
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
    /// A tensor operation was given inconsistent shapes (a bug).
    #[error("internal shape error: {0}")]
    Tensor(#[from] crate::tensor::TensorError),
    /// The input image does not fit the patch grid.
    #[error("image must be 3 x H x W with H and W positive multiples of the patch size {patch}, got {channels} x {height} x {width}")]
    InputSize {
        /// Channels given.
        channels: usize,
        /// Height given.
        height: usize,
        /// Width given.
        width: usize,
        /// The patch size.
        patch: usize,
    },
    /// The frame could not be resized to the network input.
    #[error(transparent)]
    Resize(#[from] preprocess::ResizeError),
    /// The two views' token grids differ.
    #[error("the two views have different token grids ({0:?} vs {1:?})")]
    GridMismatch((usize, usize), (usize, usize)),
    /// The pair was abandoned between two steps (the node or replay is shutting down).
    #[error(transparent)]
    Cancelled(#[from] crate::cancel::Cancelled),
}
