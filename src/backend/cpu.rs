//! The in-process CPU backend: our SuperPoint and DUSt3R, PairViewer for the pose.

use std::sync::OnceLock;

use super::{
    BackendError, BackendHealth, BackendKind, BackendState, FeatureExtractor, PairOutput, PairReconstructor,
    PairRequest,
};
use crate::dust3r::{prepare, Dust3r, Dust3rError, PairPrediction, PrepMode, PreparedView};
use crate::geometry::{relative_pose, PoseOptions};
use crate::image::Frame;
use crate::superpoint::{Keypoints, PostParams, SuperPoint};

/// SuperPoint on this machine's CPU.
pub struct CpuFeatures(pub SuperPoint);

impl FeatureExtractor for CpuFeatures {
    fn detect(&self, frame: &Frame, params: &PostParams) -> Result<Keypoints, BackendError> {
        self.0.detect(&frame.to_luma(), params).map(|(kp, _)| kp).map_err(BackendError::from)
    }
    fn describe(&self) -> String {
        "cpu".into()
    }
    fn health(&self) -> Vec<BackendHealth> {
        vec![cpu_health()]
    }
}

/// DUSt3R with PairViewer on this machine's CPU.
pub struct CpuPairs(pub Dust3r);

impl PairReconstructor for CpuPairs {
    /// Both views padded to the network's square (as the tt-model server does), the forward
    /// pass and the swapped one on the same encoder outputs, then PairViewer.
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        let v1 = prepare(r.first, PrepMode::Pad).map_err(Dust3rError::from)?;
        let v2 = prepare(r.second, PrepMode::Pad).map_err(Dust3rError::from)?;
        let e1 = self.0.encode(&v1.image, v1.height as usize, v1.width as usize)?;
        let e2 = self.0.encode(&v2.image, v2.height as usize, v2.width as usize)?;
        let forward = self.0.predict(&e1, &e2)?;
        let swapped = self.0.predict(&e2, &e1)?;
        Ok(pair_output(r, v1, v2, forward, swapped))
    }
    fn describe(&self) -> String {
        "cpu".into()
    }
    fn health(&self) -> Vec<BackendHealth> {
        vec![cpu_health()]
    }
}

/// This machine's CPU as a backend: always ready.
fn cpu_health() -> BackendHealth {
    BackendHealth {
        fallback: false,
        kind: BackendKind::Cpu,
        hardware_id: cpu_id().to_string(),
        state: BackendState::Ready,
        detail: "ready".into(),
    }
}

/// The CPU's model name (`/proc/cpuinfo`, else the architecture) and the instruction set the
/// kernels use on it: our machines of one kind differ, and speeds only compare within one.
pub fn cpu_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines().find_map(|l| {
                    l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string())
                })
            })
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("{model}, {threads} threads, {} kernels", crate::tensor::simd::Level::best().name())
    })
}

/// PairViewer on a pair's two predictions (forward: view 1's and view 2's points in camera 1's
/// frame; swapped: the same in camera 2's), with the request's known intrinsics moved into the
/// network grid: the pointmaps-to-pose step of the CPU backend, for any source of pointmaps.
pub fn pair_output(
    r: &PairRequest<'_>,
    v1: PreparedView,
    v2: PreparedView,
    forward: PairPrediction,
    swapped: PairPrediction,
) -> PairOutput {
    let known_intrinsics = r.known.map(|k| k.in_network(&v2.mapping));
    let opts = PoseOptions {
        known_intrinsics,
        min_confidence: r.min_confidence,
        grid_per_original_px: [v1.mapping.scale(), v2.mapping.scale()],
        ..PoseOptions::default()
    };
    let pose = relative_pose(&forward, &swapped, &opts);
    PairOutput { view1: forward.view1, view2_in_1: forward.view2_in_1, rgb1: v1.rgb, rgb2: v2.rgb, pose }
}
