//! The in-process CPU backend: our SuperPoint and DUSt3R, PairViewer for the pose.

use super::{BackendError, FeatureExtractor, PairOutput, PairReconstructor, PairRequest};
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
