//! Where the models run: in process on the CPU, or on a Tenstorrent p150 behind the tt-model
//! HTTP servers. The drivers (node, CLI) hold a [`FeatureExtractor`] and a
//! [`PairReconstructor`] and do not care which; results are the same domain types either way.

pub mod build;
pub mod cpu;
pub mod npz;
pub mod tt_server;

use crate::dust3r::{Dust3rError, InputMapping, Pointmap};
use crate::geometry::lens::Lens;
use crate::geometry::pointmaps::{scaled, transformed};
use crate::geometry::{Intrinsics, NoPose, PairPose, TCam1Cam2};
use crate::image::Frame;
use crate::superpoint::{Keypoints, PostParams, SuperPointError};

/// Why a backend gave no answer for a frame or a pair.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// SuperPoint on the CPU failed (boxed: the model's errors are large and rare).
    #[error(transparent)]
    SuperPoint(Box<SuperPointError>),
    /// DUSt3R on the CPU failed.
    #[error(transparent)]
    Dust3r(Box<Dust3rError>),
    /// The work was given up on request (shutdown), not failed.
    #[error("cancelled (shutting down)")]
    Cancelled,
    /// The server cannot be reached (refused, reset, timed out).
    #[error("server {url} unreachable: {reason}")]
    Unreachable {
        /// The server's base URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The server answers but is still loading its model (HTTP 503).
    #[error("server {url} is still starting")]
    Starting {
        /// The server's base URL.
        url: String,
    },
    /// The server refused this input (HTTP 400).
    #[error("server {url} rejected the request (HTTP 400): {message}")]
    Rejected {
        /// The server's base URL.
        url: String,
        /// The server's own words.
        message: String,
    },
    /// The server failed on this input (HTTP 500).
    #[error("server {url} failed (HTTP 500): {message}")]
    ServerFailure {
        /// The server's base URL.
        url: String,
        /// The server's own words.
        message: String,
    },
    /// Another HTTP status.
    #[error("server {url} answered HTTP {status}: {message}")]
    Status {
        /// The server's base URL.
        url: String,
        /// The status code.
        status: u16,
        /// The server's own words.
        message: String,
    },
    /// The answer is not what the contract says.
    #[error("malformed answer from {url}: {reason}")]
    Malformed {
        /// The server's base URL.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// The frame could not be encoded for the request.
    #[error("cannot encode the frame for the server: {0}")]
    Encode(#[source] image::ImageError),
    /// A stand-in for a model (an evaluation's oracle) cannot answer for these frames.
    #[error("{0}")]
    StandIn(String),
}

impl From<SuperPointError> for BackendError {
    fn from(e: SuperPointError) -> Self {
        Self::SuperPoint(Box::new(e))
    }
}

impl From<Dust3rError> for BackendError {
    fn from(e: Dust3rError) -> Self {
        match e {
            Dust3rError::Cancelled(_) => Self::Cancelled,
            e => Self::Dust3r(Box::new(e)),
        }
    }
}

impl BackendError {
    /// The server cannot answer now (down, restarting, starting): worth a fallback or a retry
    /// later, not an error of this input.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Starting { .. })
    }

    /// The work was abandoned on request (shutdown), not failed.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled)
    }

    /// Short name for /diagnostics counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SuperPoint(_) | Self::Dust3r(_) => "cpu",
            Self::Cancelled => "cancelled",
            Self::Unreachable { .. } => "server_unreachable",
            Self::Starting { .. } => "server_starting",
            Self::Rejected { .. } => "server_rejected",
            Self::ServerFailure { .. } => "server_failure",
            Self::Status { .. } => "server_status",
            Self::Malformed { .. } => "server_malformed",
            Self::Encode(_) => "encode",
            Self::StandIn(_) => "stand_in",
        }
    }
}

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

/// Whether a backend can answer now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendState {
    /// It answers (the CPU always; a server whose /health said `ok`).
    Ready,
    /// A server not asked yet (it is, with the first frame or pair).
    NotContacted,
    /// A server that is up but still loading its model.
    Starting,
    /// A server that cannot be reached.
    Unreachable,
}

/// One backend as /diagnostics shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendHealth {
    /// The CPU behind a server rather than the model's own backend.
    pub fallback: bool,
    /// Where it runs: `cpu` or `tt-server`.
    pub kind: BackendKind,
    /// The device: the CPU model and the kernels' instruction set, or the server's URL with
    /// the model (and device) it reports.
    pub hardware_id: String,
    /// Whether it answers now.
    pub state: BackendState,
    /// Its state in words (a server's last reason).
    pub detail: String,
}

/// SuperPoint: keypoints (input pixels, scores descending) and unit descriptors of a frame.
pub trait FeatureExtractor: Send + Sync {
    /// Keypoints and descriptors of `frame` (scores descending, in the frame's pixels).
    fn detect(&self, frame: &Frame, params: &PostParams) -> Result<Keypoints, BackendError>;
    /// What runs it, for /diagnostics and logs.
    fn describe(&self) -> String;
    /// Each backend involved (the model's own first, then any fallback).
    fn health(&self) -> Vec<BackendHealth>;
}

/// A pinhole camera in a frame's own pixels (CameraInfo's K).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CameraK {
    /// Focal length along x, pixels.
    pub fx: f64,
    /// Focal length along y, pixels.
    pub fy: f64,
    /// Principal point x, pixels.
    pub cx: f64,
    /// Principal point y, pixels.
    pub cy: f64,
}

impl From<Intrinsics> for CameraK {
    fn from(k: Intrinsics) -> Self {
        Self { fx: k.fx, fy: k.fy, cx: k.cx, cy: k.cy }
    }
}

impl CameraK {
    /// The same camera as PnP's intrinsics (the frame's pixels).
    pub fn intrinsics(&self) -> Intrinsics {
        Intrinsics { fx: self.fx, fy: self.fy, cx: self.cx, cy: self.cy }
    }

    /// The same camera in the network grid of a view prepared through `m` (scaled, padded or
    /// cropped): what PairViewer's known-intrinsics path works in.
    pub fn in_network(&self, m: &InputMapping) -> Intrinsics {
        let (cx, cy) = m.to_network(self.cx, self.cy);
        Intrinsics { fx: self.fx * m.scale_x, fy: self.fy * m.scale_y, cx, cy }
    }
}

/// A keyframe pair to reconstruct: view 1 is the reference camera.
pub struct PairRequest<'a> {
    /// View 1, the reference camera.
    pub first: &'a Frame,
    /// View 2.
    pub second: &'a Frame,
    /// Both views' intrinsics when known (same camera, same size).
    pub known: Option<CameraK>,
    /// The known camera's lens, undone on the pixels PnP sees (pinhole when none).
    pub lens: Lens,
    /// PairViewer's confidence mask (the CPU path).
    pub min_confidence: f32,
    /// The server's share of view-2 pixels that enter PnP, in percent.
    pub conf_pct: f64,
}

/// DUSt3R's answer for a pair: both pointmaps in camera 1's frame with the network images'
/// colours (interleaved RGB, same grid), and the relative pose or why there is none; all in one
/// scale (the forward pass's: view 1 as reference).
pub struct PairOutput {
    /// View 1's points in camera 1's frame.
    pub view1: Pointmap,
    /// View 2's points in camera 1's frame.
    pub view2_in_1: Pointmap,
    /// View 2's points in camera 2's own frame, when there is a pose (what a frame after the
    /// pair is tracked against).
    pub view2: Option<Pointmap>,
    /// Where each view's grid lies in its frame (view 1, view 2): to look up a frame pixel's point.
    pub mappings: [InputMapping; 2],
    /// View 1's colours on the network grid (interleaved RGB).
    pub rgb1: Vec<u8>,
    /// View 2's colours on the network grid.
    pub rgb2: Vec<u8>,
    /// Camera 2's pose in camera 1's frame, or why there is none.
    pub pose: Result<PairPose, NoPose>,
}

impl PairOutput {
    /// The output of a backend whose pose is in the forward pass's scale (a tt-model server's):
    /// view 2's own points are its points in camera 1's frame moved by the pose.
    pub fn from_forward(
        view1: Pointmap,
        view2_in_1: Pointmap,
        mappings: [InputMapping; 2],
        rgb: [Vec<u8>; 2],
        pose: Result<PairPose, NoPose>,
    ) -> Self {
        let view2 = pose.as_ref().ok().map(|p| transformed(&view2_in_1, &p.t_cam1_cam2.inverse()));
        let [rgb1, rgb2] = rgb;
        Self { view1, view2_in_1, view2, mappings, rgb1, rgb2, pose }
    }

    /// The pair `s` times larger: its points and its pose's translation (a change of units,
    /// such as to metres).
    pub fn scaled(&self, s: f64) -> Self {
        let pose = self.pose.clone().map(|mut p| {
            p.t_cam1_cam2 = TCam1Cam2::new(p.t_cam1_cam2.rotation, p.t_cam1_cam2.translation * s);
            p
        });
        Self {
            view1: scaled(&self.view1, s),
            view2_in_1: scaled(&self.view2_in_1, s),
            view2: self.view2.as_ref().map(|v| scaled(v, s)),
            mappings: self.mappings,
            rgb1: self.rgb1.clone(),
            rgb2: self.rgb2.clone(),
            pose,
        }
    }
}

/// DUSt3R: a keyframe pair's pointmaps and relative pose.
pub trait PairReconstructor: Send + Sync {
    /// The pair's pointmaps and pose.
    fn reconstruct(&self, request: &PairRequest<'_>) -> Result<PairOutput, BackendError>;
    /// What runs it, for /diagnostics and logs.
    fn describe(&self) -> String;
    /// Each backend involved (the model's own first, then any fallback).
    fn health(&self) -> Vec<BackendHealth>;
}

fn with_fallback_health(primary: Vec<BackendHealth>, fallback: Option<Vec<BackendHealth>>) -> Vec<BackendHealth> {
    let behind = fallback.into_iter().flatten().map(|h| BackendHealth { fallback: true, ..h });
    primary.into_iter().chain(behind).collect()
}

/// A server backend with the CPU behind it: while the server cannot answer, the CPU does (when
/// configured), so outputs continue at CPU speed instead of pausing.
pub struct WithFallback<P, F> {
    /// The server backend, asked first.
    pub primary: P,
    /// The CPU backend, used while the server cannot answer.
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
    fn health(&self) -> Vec<BackendHealth> {
        with_fallback_health(self.primary.health(), self.fallback.as_ref().map(F::health))
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
    fn health(&self) -> Vec<BackendHealth> {
        with_fallback_health(self.primary.health(), self.fallback.as_ref().map(F::health))
    }
}
