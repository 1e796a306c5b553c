//! Where the models run: in process on the CPU, or on a Tenstorrent p150 behind the tt-model
//! HTTP servers. The drivers (node, CLI) hold a [`FeatureExtractor`] and a
//! [`PairReconstructor`] and do not care which; results are the same domain types either way.

pub mod cpu;
pub mod npz;
pub mod tt_server;

use crate::dust3r::Pointmap;
use crate::geometry::PairPose;
use crate::image::Frame;
use crate::superpoint::{Keypoints, PostParams};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Cpu(String),
    #[error("server {url} unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("server {url} is still starting")]
    Starting { url: String },
    #[error("server {url} rejected the request (HTTP 400): {message}")]
    Rejected { url: String, message: String },
    #[error("server {url} failed (HTTP 500): {message}")]
    ServerFailure { url: String, message: String },
    #[error("server {url} answered HTTP {status}: {message}")]
    Status { url: String, status: u16, message: String },
    #[error("malformed answer from {url}: {reason}")]
    Malformed { url: String, reason: String },
    #[error("cannot encode the frame for the server: {0}")]
    Encode(String),
}

impl BackendError {
    /// The server cannot answer now (down, restarting, starting): worth a fallback or a retry
    /// later, not an error of this input.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Starting { .. })
    }

    /// Short name for /diagnostics counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Cpu(_) => "cpu",
            Self::Unreachable { .. } => "server_unreachable",
            Self::Starting { .. } => "server_starting",
            Self::Rejected { .. } => "server_rejected",
            Self::ServerFailure { .. } => "server_failure",
            Self::Status { .. } => "server_status",
            Self::Malformed { .. } => "server_malformed",
            Self::Encode(_) => "encode",
        }
    }
}

/// SuperPoint: keypoints (input pixels, scores descending) and unit descriptors of a frame.
pub trait FeatureExtractor: Send + Sync {
    fn detect(&self, frame: &Frame, params: &PostParams) -> Result<Keypoints, BackendError>;
    /// What runs it, for /diagnostics and logs.
    fn describe(&self) -> String;
}

/// A pinhole camera in a frame's own pixels (CameraInfo's K).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraK {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// A keyframe pair to reconstruct: view 1 is the reference camera.
pub struct PairRequest<'a> {
    pub first: &'a Frame,
    pub second: &'a Frame,
    /// Both views' intrinsics when known (same camera, same size).
    pub known: Option<CameraK>,
    /// PairViewer's confidence mask (the CPU path).
    pub min_confidence: f32,
    /// The server's share of view-2 pixels that enter PnP, in percent.
    pub conf_pct: f64,
}

/// DUSt3R's answer for a pair: both pointmaps in camera 1's frame with the network images'
/// colours (interleaved RGB, same grid), and the relative pose or why there is none.
pub struct PairOutput {
    pub view1: Pointmap,
    pub view2_in_1: Pointmap,
    pub rgb1: Vec<u8>,
    pub rgb2: Vec<u8>,
    pub pose: Result<PairPose, String>,
}

pub trait PairReconstructor: Send + Sync {
    fn reconstruct(&self, request: &PairRequest<'_>) -> Result<PairOutput, BackendError>;
    fn describe(&self) -> String;
}

/// A server backend with the CPU behind it: while the server cannot answer, the CPU does (when
/// configured), so outputs continue at CPU speed instead of pausing.
pub struct WithFallback<P, F> {
    pub primary: P,
    pub fallback: Option<F>,
}

impl<P: FeatureExtractor, F: FeatureExtractor> FeatureExtractor for WithFallback<P, F> {
    fn detect(&self, frame: &Frame, params: &PostParams) -> Result<Keypoints, BackendError> {
        match (self.primary.detect(frame, params), &self.fallback) {
            (Err(e), Some(cpu)) if e.is_unavailable() => cpu.detect(frame, params),
            (result, _) => result,
        }
    }
    fn describe(&self) -> String {
        match &self.fallback {
            Some(f) => format!("{} (fallback: {})", self.primary.describe(), f.describe()),
            None => self.primary.describe(),
        }
    }
}

impl<P: PairReconstructor, F: PairReconstructor> PairReconstructor for WithFallback<P, F> {
    fn reconstruct(&self, request: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        match (self.primary.reconstruct(request), &self.fallback) {
            (Err(e), Some(cpu)) if e.is_unavailable() => cpu.reconstruct(request),
            (result, _) => result,
        }
    }
    fn describe(&self) -> String {
        match &self.fallback {
            Some(f) => format!("{} (fallback: {})", self.primary.describe(), f.describe()),
            None => self.primary.describe(),
        }
    }
}
