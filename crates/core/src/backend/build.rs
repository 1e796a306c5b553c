//! Which backend runs each model, and building them: shared by the live node, the bag replayer
//! and the CLI, so a backend is named, configured and constructed in one place.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cpu::{CpuFeatures, CpuPairs};
use super::tt_server::{ServerOptions, TtDust3r, TtSuperPoint};
pub use super::BackendKind;
use super::{FeatureExtractor, PairReconstructor, WithFallback};
use crate::cancel::Cancel;
use crate::dust3r::{Checkpoint, Dust3r, Dust3rError};
use crate::superpoint::{SuperPoint, SuperPointError};
use crate::tensor::Precision;
use crate::weights::{DownloadProgress, HubModel, WeightsError};

/// What the node's parameters (or a command line) say about the backends.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendConfig {
    /// Where SuperPoint runs.
    pub superpoint: BackendKind,
    /// SuperPoint's weights folder for the CPU; `None`: environment, Hugging Face cache, download.
    pub superpoint_weights: Option<PathBuf>,
    /// Base URL of the superpoint-p150 server.
    pub superpoint_url: String,
    /// Where DUSt3R runs.
    pub dust3r: BackendKind,
    /// DUSt3R's weights folder for the CPU; `None` as for SuperPoint.
    pub dust3r_weights: Option<PathBuf>,
    /// Base URL of the mast3r-blackhole server.
    pub dust3r_url: String,
    /// What the CPU's DUSt3R computes its encoder and decoder in.
    pub dust3r_precision: Precision,
    /// The DUSt3R checkpoint the CPU runs (a server runs its own).
    pub dust3r_model: Checkpoint,
    /// Run a model on the CPU while its server cannot answer.
    pub cpu_fallback: bool,
    /// Limit for each server request, connection included.
    pub server_timeout: Duration,
    /// JPEG quality of colour frames sent to the servers; 0 sends colour as PNG.
    pub jpeg_quality: u8,
    /// Set by the driver's signal handler: a pair in flight is abandoned between two steps.
    pub cancel: Cancel,
}

/// Why a model's backend could not be built (boxed sources: they are large and rare).
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The CPU backend's weights were not found.
    #[error(transparent)]
    Weights(Box<WeightsError>),
    /// SuperPoint's weights were found but do not load.
    #[error(transparent)]
    SuperPoint(Box<SuperPointError>),
    /// DUSt3R's weights were found but do not load.
    #[error(transparent)]
    Dust3r(Box<Dust3rError>),
}

impl From<WeightsError> for BuildError {
    fn from(e: WeightsError) -> Self {
        Self::Weights(Box::new(e))
    }
}

impl From<SuperPointError> for BuildError {
    fn from(e: SuperPointError) -> Self {
        Self::SuperPoint(Box::new(e))
    }
}

impl From<Dust3rError> for BuildError {
    fn from(e: Dust3rError) -> Self {
        Self::Dust3r(Box::new(e))
    }
}

/// The two models' backends.
pub struct Backends {
    /// SuperPoint.
    pub features: Box<dyn FeatureExtractor>,
    /// DUSt3R on the CPU without its weights is an error of its own rather than a failure of
    /// the whole: the node still serves keypoints; `replay --eval` cannot go on.
    pub dust3r: Result<Box<dyn PairReconstructor>, BuildError>,
}

/// Told where building a model's backend stands (the node shows it on /diagnostics while it
/// already serves the ROS graph).
pub trait BuildProgress: DownloadProgress {
    /// The weights are in `dir`; they load now.
    fn loading(&self, dir: &Path);
}

/// SuperPoint on the CPU with the weights `config` names (or finds).
pub fn cpu_superpoint(config: &BackendConfig, progress: Option<&dyn BuildProgress>) -> Result<CpuFeatures, BuildError> {
    let dir = cpu_weights(&crate::superpoint::HUB_MODEL, config.superpoint_weights.as_deref(), progress)?;
    Ok(CpuFeatures(SuperPoint::load(&dir)?))
}

/// DUSt3R on the CPU with the weights `config` names (or finds).
pub fn cpu_dust3r(config: &BackendConfig, progress: Option<&dyn BuildProgress>) -> Result<CpuPairs, BuildError> {
    let dir = cpu_weights(&config.dust3r_model.hub_model(), config.dust3r_weights.as_deref(), progress)?;
    if let Some(why) = config.dust3r_precision.warning() {
        tracing::warn!("dust3r_precision: {why}");
    }
    config.dust3r_model.confirm(&dir)?;
    Ok(CpuPairs(Dust3r::load_in(&dir, config.dust3r_precision)?.with_cancel(config.cancel.clone())))
}

fn cpu_weights(
    model: &HubModel,
    explicit: Option<&Path>,
    progress: Option<&dyn BuildProgress>,
) -> Result<PathBuf, BuildError> {
    let dir = crate::weights::resolve_with(model, explicit, progress.map(|p| p as &dyn DownloadProgress))?.dir;
    if let Some(p) = progress {
        p.loading(&dir);
    }
    Ok(dir)
}

fn server_options(config: &BackendConfig, url: &str) -> ServerOptions {
    ServerOptions {
        url: url.to_string(),
        timeout: config.server_timeout,
        jpeg_quality: config.jpeg_quality,
        cancel: config.cancel.clone(),
    }
}

/// The CPU behind a server when `cpu_fallback` is set; without its weights, none (a warning
/// says why: the server alone still runs the model).
fn cpu_fallback<T>(config: &BackendConfig, model: &str, cpu: impl FnOnce() -> Result<T, BuildError>) -> Option<T> {
    config.cpu_fallback.then(cpu).transpose().unwrap_or_else(|e| {
        tracing::warn!("no CPU fallback for {model}: {e}");
        None
    })
}

/// SuperPoint's backend as `config` asks for it: a server gets the CPU behind it when
/// `cpu_fallback` is set and the CPU weights can be found.
pub fn build_superpoint(
    config: &BackendConfig,
    progress: Option<&dyn BuildProgress>,
) -> Result<Box<dyn FeatureExtractor>, BuildError> {
    Ok(match config.superpoint {
        BackendKind::Cpu => Box::new(cpu_superpoint(config, progress)?),
        BackendKind::TtServer => {
            let fallback = cpu_fallback(config, "SuperPoint", || cpu_superpoint(config, progress));
            let primary = TtSuperPoint::new(server_options(config, &config.superpoint_url));
            Box::new(WithFallback { primary, fallback })
        }
    })
}

/// DUSt3R's backend as `config` asks for it (a server with the CPU behind it as for SuperPoint).
pub fn build_dust3r(
    config: &BackendConfig,
    progress: Option<&dyn BuildProgress>,
) -> Result<Box<dyn PairReconstructor>, BuildError> {
    Ok(match config.dust3r {
        BackendKind::Cpu => Box::new(cpu_dust3r(config, progress)?),
        BackendKind::TtServer => {
            if config.dust3r_model != Checkpoint::Dpt512 {
                let cpu = if config.cpu_fallback { "only the CPU fallback runs it" } else { "nothing runs it" };
                tracing::warn!(
                    "dust3r_model is {}, but the mast3r-blackhole server runs {} (its contract): {cpu}",
                    config.dust3r_model,
                    Checkpoint::Dpt512
                );
            }
            let fallback = cpu_fallback(config, "DUSt3R", || cpu_dust3r(config, progress));
            Box::new(WithFallback { primary: TtDust3r::new(server_options(config, &config.dust3r_url)), fallback })
        }
    })
}

/// The two backends `config` asks for, built one after the other (the command line and replay;
/// the node builds each in the background).
pub fn build_backends(config: &BackendConfig) -> Result<Backends, BuildError> {
    Ok(Backends { features: build_superpoint(config, None)?, dust3r: build_dust3r(config, None) })
}

#[cfg(test)]
mod tests {
    use super::BackendKind;

    #[test]
    fn names_round_trip() {
        for kind in BackendKind::ALL {
            assert_eq!(BackendKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(BackendKind::from_name("gpu"), None);
        assert_eq!(BackendKind::NAMES, ["cpu", "tt-server"]);
    }
}
