//! The backends the node's parameters ask for (`superpoint_backend`, `dust3r_backend`, URLs,
//! weights, `fallback`): shared by the live node and the bag replayer.

use std::time::Duration;

use super::node::NodeError;
use super::params::{Backend, NodeParams};
use crate::backend::cpu::{CpuFeatures, CpuPairs};
use crate::backend::tt_server::{ServerOptions, TtDust3r, TtSuperPoint};
use crate::backend::{FeatureExtractor, PairReconstructor, WithFallback};
use crate::dust3r::Dust3r;
use crate::superpoint::SuperPoint;

/// The two models' backends.
pub struct Backends {
    pub features: Box<dyn FeatureExtractor>,
    /// DUSt3R on the CPU without its weights is `Err(why)` rather than a failure of the whole:
    /// the node still serves keypoints; `replay --eval` cannot go on.
    pub dust3r: Result<Box<dyn PairReconstructor>, String>,
}

/// The two backends the parameters ask for. A server backend gets the CPU behind it when
/// `fallback: cpu` and the CPU weights can be found.
pub fn build_backends(params: &NodeParams) -> Result<Backends, NodeError> {
    let server = |url: &str| ServerOptions {
        url: url.to_string(),
        timeout: Duration::from_secs_f64(params.server_timeout),
        jpeg_quality: params.server_jpeg_quality,
    };
    let cpu_superpoint = || -> Result<CpuFeatures, NodeError> {
        Ok(CpuFeatures(SuperPoint::load(
            &crate::weights::resolve(&crate::superpoint::HUB_MODEL, params.superpoint_weights.as_deref())?.dir,
        )?))
    };
    let cpu_dust3r = || -> Result<CpuPairs, String> {
        let dir = crate::weights::resolve(&crate::dust3r::HUB_MODEL, params.dust3r_weights.as_deref())
            .map_err(|e| e.to_string())?
            .dir;
        Dust3r::load(&dir).map(CpuPairs).map_err(|e| e.to_string())
    };
    let features: Box<dyn FeatureExtractor> = match params.superpoint_backend {
        Backend::Cpu => Box::new(cpu_superpoint()?),
        Backend::TtServer => {
            let fallback = params.cpu_fallback.then(cpu_superpoint).transpose().unwrap_or_else(|e| {
                tracing::warn!("no CPU fallback for SuperPoint: {e}");
                None
            });
            Box::new(WithFallback { primary: TtSuperPoint::new(server(&params.superpoint_url)), fallback })
        }
    };
    let dust3r: Result<Box<dyn PairReconstructor>, String> = match params.dust3r_backend {
        Backend::Cpu => cpu_dust3r().map(|m| Box::new(m) as Box<dyn PairReconstructor>),
        Backend::TtServer => {
            let fallback = params.cpu_fallback.then(cpu_dust3r).transpose().unwrap_or_else(|e| {
                tracing::warn!("no CPU fallback for DUSt3R: {e}");
                None
            });
            Ok(Box::new(WithFallback { primary: TtDust3r::new(server(&params.dust3r_url)), fallback }))
        }
    };
    Ok(Backends { features, dust3r })
}
