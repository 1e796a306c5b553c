//! Model weights: memory-mapped safetensors files, and where to find them (an explicit folder,
//! an environment variable, the Hugging Face cache, or a download of a pinned revision).

mod hub;
mod safetensors_file;

pub use hub::{
    download_step, hub_cache_dir, resolve, resolve_with, DownloadProgress, HubModel, ResolvedWeights, WeightSource,
};
pub use safetensors_file::{Param, WeightFile};

use std::path::PathBuf;

/// Everything that can go wrong between "the user pointed somewhere" and "a tensor is in memory".
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// None of the ways to find the weights gave them.
    #[error(transparent)]
    NotFound(Box<NotFound>),
    /// A folder that lacks a file.
    #[error("{origin} points to {path}, which lacks {missing}")]
    IncompleteFolder {
        /// Who named the folder.
        origin: String,
        /// The file or folder.
        path: PathBuf,
        /// The missing file(s).
        missing: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not a valid safetensors file.
    #[error("{path} is not a valid safetensors file (truncated or corrupt: {reason})")]
    Corrupt {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A tensor is missing.
    #[error("{path}: tensor `{name}` is missing{alternatives}")]
    MissingTensor {
        /// The file or folder.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Similar names present.
        alternatives: String,
    },
    /// A tensor has another shape.
    #[error("{path}: tensor `{name}` has shape {got:?}, expected {expected:?}")]
    WrongShape {
        /// The file or folder.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its shape.
        got: Vec<usize>,
        /// The shape expected.
        expected: Vec<usize>,
    },
    /// A tensor is not float32.
    #[error("{path}: tensor `{name}` has dtype {got}, expected F32")]
    WrongDtype {
        /// The file or folder.
        path: PathBuf,
        /// The tensor.
        name: String,
        /// Its dtype.
        got: String,
    },
    /// config.json is not usable.
    #[error("{path}: invalid config: {reason}")]
    Config {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Where weights were looked for, and why none were found (boxed in [`WeightsError`]: it is
/// large and happens once).
#[derive(Debug, thiserror::Error)]
#[error(
    "no {model} weights found. Provide them in one of three ways: pass --weights DIR (a folder \
     with {files}; for replay, --superpoint-weights / --dust3r-weights; for the node, its *_weights parameter); set {env_var}=DIR; or put repo {repo} at revision {revision} in the Hugging \
     Face cache ({cache}), e.g. with `huggingface-cli download {repo} --revision {revision}`, \
     which this program also does by itself when online. {why}"
)]
pub struct NotFound {
    model: &'static str,
    files: String,
    env_var: &'static str,
    repo: &'static str,
    revision: &'static str,
    cache: String,
    why: String,
}
