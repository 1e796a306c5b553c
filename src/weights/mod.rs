//! Model weights: memory-mapped safetensors files, and where to find them (an explicit folder,
//! an environment variable, the Hugging Face cache, or a download of a pinned revision).

mod hub;
mod safetensors_file;

pub use hub::{hub_cache_dir, resolve, HubModel, ResolvedWeights, WeightSource};
pub use safetensors_file::{Param, WeightFile};

use std::path::PathBuf;

/// Everything that can go wrong between "the user pointed somewhere" and "a tensor is in memory".
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error(
        "no {model} weights found. Provide them in one of three ways: pass --weights DIR (a folder \
         with {files}; for replay, --superpoint-weights / --dust3r-weights; for the node, its *_weights parameter); set {env_var}=DIR; or put repo {repo} at revision {revision} in the Hugging \
         Face cache ({cache}), e.g. with `huggingface-cli download {repo} --revision {revision}`, \
         which this program also does by itself when online. {why}"
    )]
    NotFound {
        model: &'static str,
        files: String,
        env_var: &'static str,
        repo: &'static str,
        revision: &'static str,
        cache: String,
        why: String,
    },
    #[error("{origin} points to {path}, which lacks {missing}")]
    IncompleteFolder { origin: String, path: PathBuf, missing: String },
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a valid safetensors file (truncated or corrupt: {reason})")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: tensor `{name}` is missing{alternatives}")]
    MissingTensor { path: PathBuf, name: String, alternatives: String },
    #[error("{path}: tensor `{name}` has shape {got:?}, expected {expected:?}")]
    WrongShape { path: PathBuf, name: String, got: Vec<usize>, expected: Vec<usize> },
    #[error("{path}: tensor `{name}` has dtype {got}, expected F32")]
    WrongDtype { path: PathBuf, name: String, got: String },
    #[error("{path}: invalid config: {reason}")]
    Config { path: PathBuf, reason: String },
}
