//! DUSt3R (naver's `DUSt3R_ViTLarge_BaseDecoder_{512_dpt,512_linear,224_linear}`) on the compute
//! core: a ViT encoder shared by both views, a two-branch cross-attending decoder, and one head
//! per branch (DPT or linear) producing pointmaps of both views in camera 1's frame.

mod checkpoint;
pub mod cloud;
mod config;
mod dpt;
mod layers;
mod linear_head;
mod model;
mod post;
pub mod preprocess;
pub mod synthetic;

pub use checkpoint::{Checkpoint, UnknownCheckpoint};
pub use config::{ConfigError, Dust3rConfig, HeadKind};
pub use layers::{BranchHooks, Encoded};
pub use model::{Dust3r, PairPrediction};
pub use post::Pointmap;
pub use preprocess::{prepare, InputMapping, PrepMode, PreparedView};

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
    /// The weights are another published checkpoint than the one configured.
    #[error(
        "{} holds DUSt3R {found}, but {configured} is configured: configure {found} (dust3r_model, --model) to \
         run it, or give the weights of {configured}",
        dir.display()
    )]
    WrongCheckpoint {
        /// The weights folder.
        dir: std::path::PathBuf,
        /// What its config.json describes.
        found: Checkpoint,
        /// What was configured.
        configured: Checkpoint,
    },
    /// The pair was abandoned between two steps (the node or replay is shutting down).
    #[error(transparent)]
    Cancelled(#[from] crate::cancel::Cancelled),
}
