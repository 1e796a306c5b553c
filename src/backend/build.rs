//! Which backend runs each model, and building them: shared by the live node, the bag replayer
//! and the CLI, so a backend is named, configured and constructed in one place.

use std::path::PathBuf;
use std::time::Duration;

use super::cpu::{CpuFeatures, CpuPairs};
use super::tt_server::{ServerOptions, TtDust3r, TtSuperPoint};
use super::{FeatureExtractor, PairReconstructor, WithFallback};
use crate::dust3r::{Dust3r, Dust3rError};
use crate::pipeline::cancel::Cancel;
use crate::superpoint::{SuperPoint, SuperPointError};
use crate::weights::WeightsError;

/// Where a model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// In process, on this machine's CPU.
    Cpu,
    /// On a Tenstorrent p150 behind a tt-model HTTP server.
    TtServer,
}

impl BackendKind {
    /// Every kind, in the order the names are listed.
    pub const ALL: [BackendKind; 2] = [BackendKind::Cpu, BackendKind::TtServer];
    /// The names parameters and command lines use, in [`BackendKind::ALL`]'s order.
    pub const NAMES: [&'static str; 2] = [BackendKind::Cpu.name(), BackendKind::TtServer.name()];

    /// The kind's name in parameters and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::TtServer => "tt-server",
        }
    }

    /// The kind called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl clap::ValueEnum for BackendKind {
    fn value_variants<'a>() -> &'a [Self] {
        &Self::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()))
    }
}

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

/// SuperPoint on the CPU with the weights `config` names (or finds).
pub fn cpu_superpoint(config: &BackendConfig) -> Result<CpuFeatures, BuildError> {
    let dir = crate::weights::resolve(&crate::superpoint::HUB_MODEL, config.superpoint_weights.as_deref())?.dir;
    Ok(CpuFeatures(SuperPoint::load(&dir)?))
}

/// DUSt3R on the CPU with the weights `config` names (or finds).
pub fn cpu_dust3r(config: &BackendConfig) -> Result<CpuPairs, BuildError> {
    let dir = crate::weights::resolve(&crate::dust3r::HUB_MODEL, config.dust3r_weights.as_deref())?.dir;
    Ok(CpuPairs(Dust3r::load(&dir)?.with_cancel(config.cancel.clone())))
}

/// The two backends `config` asks for. A server backend gets the CPU behind it when
/// `cpu_fallback` is set and the CPU weights can be found.
pub fn build_backends(config: &BackendConfig) -> Result<Backends, BuildError> {
    let server = |url: &str| ServerOptions {
        url: url.to_string(),
        timeout: config.server_timeout,
        jpeg_quality: config.jpeg_quality,
        cancel: config.cancel.clone(),
    };
    let features: Box<dyn FeatureExtractor> = match config.superpoint {
        BackendKind::Cpu => Box::new(cpu_superpoint(config)?),
        BackendKind::TtServer => {
            let fallback = config.cpu_fallback.then(|| cpu_superpoint(config)).transpose().unwrap_or_else(|e| {
                tracing::warn!("no CPU fallback for SuperPoint: {e}");
                None
            });
            Box::new(WithFallback { primary: TtSuperPoint::new(server(&config.superpoint_url)), fallback })
        }
    };
    let dust3r: Result<Box<dyn PairReconstructor>, BuildError> = match config.dust3r {
        BackendKind::Cpu => cpu_dust3r(config).map(|m| Box::new(m) as Box<dyn PairReconstructor>),
        BackendKind::TtServer => {
            let fallback = config.cpu_fallback.then(|| cpu_dust3r(config)).transpose().unwrap_or_else(|e| {
                tracing::warn!("no CPU fallback for DUSt3R: {e}");
                None
            });
            Ok(Box::new(WithFallback { primary: TtDust3r::new(server(&config.dust3r_url)), fallback }))
        }
    };
    Ok(Backends { features, dust3r })
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
