//! The in-process CPU backend: our SuperPoint and DUSt3R, PairViewer for the pose.

use std::sync::OnceLock;

use super::{
    BackendError, BackendHealth, BackendKind, BackendState, FeatureExtractor, PairOutput, PairReconstructor,
    PairRequest,
};
use crate::dust3r::{prepare, Dust3r, Dust3rError, PairPrediction, Pointmap, PrepMode, PreparedView};
use crate::geometry::lens::{Camera, Lens};
use crate::geometry::pairviewer::Undistort;
use crate::geometry::pointmaps::{depth_ratio, scaled, transformed, MIN_SCALE_PIXELS};
use crate::geometry::{relative_pose, NoPose, PairPose, PnpWorld, PoseOptions};
use crate::image::Frame;
use crate::superpoint::{Keypoints, PostParams, SuperPoint};
use crate::tensor::Precision;

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
    /// Both views padded to the checkpoint's square (as the tt-model server does), the forward
    /// pass and the swapped one on the same encoder outputs, then PairViewer.
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        let size = self.0.config().input_size();
        let v1 = prepare(r.first, PrepMode::Pad, size).map_err(Dust3rError::from)?;
        let v2 = prepare(r.second, PrepMode::Pad, size).map_err(Dust3rError::from)?;
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
        let mut health = cpu_health();
        if self.0.precision() == Precision::Bf16 {
            health.hardware_id = format!("{}, {}", health.hardware_id, Precision::Bf16.running());
        }
        vec![health]
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
        use crate::tensor::simd::{Level, LEVEL_ENV};
        let (level, detected) = (Level::best(), Level::detected());
        if level == detected {
            format!("{model}, {threads} threads, {} kernels", level.name())
        } else {
            format!(
                "{model}, {threads} threads, {} kernels ({LEVEL_ENV}; the CPU has {})",
                level.name(),
                detected.name()
            )
        }
    })
}

/// PairViewer on a pair's two predictions (forward: view 1's and view 2's points in camera 1's
/// frame; swapped: the same in camera 2's), with the request's known intrinsics moved into the
/// network grid: the pointmaps-to-pose step of the CPU backend, for any source of pointmaps.
/// Everything comes out in the forward pass's scale: view 2's own points are the swapped pass's,
/// and a translation PnP found in the swapped pass's frame is rescaled, both by the ratio of the
/// two passes' depths of one view, measured where both passes see it confidently.
pub fn pair_output(
    r: &PairRequest<'_>,
    v1: PreparedView,
    v2: PreparedView,
    forward: PairPrediction,
    swapped: PairPrediction,
) -> PairOutput {
    let known_intrinsics = r.known.map(|k| k.in_network(&v2.mapping));
    let undistort = r
        .known
        .filter(|_| r.lens != Lens::Pinhole)
        .map(|k| Undistort { camera: Camera { k: k.intrinsics(), lens: r.lens }, mappings: [v1.mapping, v2.mapping] });
    let opts = PoseOptions {
        known_intrinsics,
        undistort,
        min_confidence: r.min_confidence,
        grid_per_original_px: [v1.mapping.scale(), v2.mapping.scale()],
        ..PoseOptions::default()
    };
    let (pose, view2) = match relative_pose(&forward, &swapped, &opts) {
        Ok(pose) => match in_forward_scale(pose, &forward, &swapped, r.min_confidence) {
            Some((pose, view2)) => (Ok(pose), Some(view2)),
            None => (Err(NoPose::Scale(MIN_SCALE_PIXELS)), None),
        },
        Err(e) => (Err(e), None),
    };
    PairOutput {
        view1: forward.view1,
        view2_in_1: forward.view2_in_1,
        view2,
        mappings: [v1.mapping, v2.mapping],
        rgb1: v1.rgb,
        rgb2: v2.rgb,
        pose,
    }
}

/// The pose and view 2's own points (the swapped pass's `view1`) in the forward pass's scale.
/// DUSt3R scales each pass by its own reference view, so the passes differ by a factor `s`:
/// measured on one view seen by both passes in one camera's frame, through the pose (which is
/// in the scale of the pass PnP worked in). `None` when too few pixels are confident in both.
fn in_forward_scale(
    mut pose: PairPose,
    forward: &PairPrediction,
    swapped: &PairPrediction,
    min_confidence: f32,
) -> Option<(PairPose, Pointmap)> {
    let s = match pose.world {
        // The pose is in the forward scale: view 2 in camera 2's frame both ways.
        PnpWorld::Camera1 => {
            let forward_view2 = transformed(&forward.view2_in_1, &pose.t_cam1_cam2.inverse());
            depth_ratio(&forward_view2, &swapped.view1, min_confidence)?
        }
        // The pose is in the swapped scale: view 1 in camera 1's frame both ways; the
        // translation then takes the forward scale too.
        PnpWorld::Camera2 => {
            let swapped_view1 = transformed(&swapped.view2_in_1, &pose.t_cam1_cam2);
            let s = depth_ratio(&forward.view1, &swapped_view1, min_confidence)?;
            pose.t_cam1_cam2.translation *= s;
            s
        }
    };
    Some((pose, scaled(&swapped.view1, s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CameraK;
    use crate::dust3r::InputMapping;
    use crate::geometry::{TCam1Cam2, Transform};
    use crate::sample::{camera_pose, true_pointmap, CameraOptical, Room, FOCAL, HEIGHT, WIDTH};

    /// A 64x48 grid over the sample's 640x480 frames (one grid pixel per 10 frame pixels).
    fn view() -> PreparedView {
        let (w, h) = (WIDTH / 10, HEIGHT / 10);
        let mapping = InputMapping {
            original_width: WIDTH,
            original_height: HEIGHT,
            scale_x: 0.1,
            scale_y: 0.1,
            offset_x: 0.0,
            offset_y: 0.0,
        };
        PreparedView { image: Vec::new(), width: w, height: h, mapping, rgb: vec![0; (w * h * 3) as usize] }
    }

    /// The wall points a camera at `pose` sees through the grid, in the frame of the camera at
    /// `reference`, multiplied by `scale`; every confidence `conf`.
    fn pointmap(
        pose: &Transform<Room, CameraOptical>,
        reference: &Transform<Room, CameraOptical>,
        scale: f64,
        conf: f32,
    ) -> Pointmap {
        let v = view();
        let map = true_pointmap(&v.mapping, (v.width as usize, v.height as usize), pose, reference, scale);
        Pointmap { confidence: vec![conf; map.confidence.len()], ..map }
    }

    #[test]
    fn a_swapped_pass_in_another_scale_comes_out_in_the_forward_scale_whichever_pass_pnp_used() {
        let (p1, p2) = (camera_pose(2, 20), camera_pose(9, 20));
        let truth = p1.inverse().compose(&p2);
        let truth = TCam1Cam2::new(truth.rotation, truth.translation);
        let frame = Frame::from_raw("mono8", 1, 1, 1, false, vec![0]).unwrap();
        let request = PairRequest {
            first: &frame,
            second: &frame,
            known: Some(CameraK { fx: FOCAL, fy: FOCAL, cx: 319.5, cy: 239.5 }),
            min_confidence: 3.0,
            conf_pct: 50.0,
            lens: Lens::Pinhole,
        };
        // The forward pass is metric; the swapped one 2.5 times larger. PairViewer picks the
        // pass with the higher confidence for PnP.
        for (forward_conf, world) in [(9.0, PnpWorld::Camera1), (5.0, PnpWorld::Camera2)] {
            let forward = PairPrediction {
                view1: pointmap(&p1, &p1, 1.0, forward_conf),
                view2_in_1: pointmap(&p2, &p1, 1.0, forward_conf),
            };
            let swapped =
                PairPrediction { view1: pointmap(&p2, &p2, 2.5, 7.0), view2_in_1: pointmap(&p1, &p2, 2.5, 7.0) };
            let out = pair_output(&request, view(), view(), forward, swapped);
            let pose = out.pose.unwrap();
            assert_eq!(pose.world, world);
            let t = pose.t_cam1_cam2;
            assert!((t.translation - truth.translation).norm() < 1e-3 * truth.translation.norm(), "{world:?}: {t:?}");
            assert!(t.rotation_error_deg(&truth) < 1e-3);
            let view2 = out.view2.unwrap();
            let want = pointmap(&p2, &p2, 1.0, 7.0);
            let worst = view2.points.iter().zip(&want.points).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(worst < 1e-4, "{world:?}: view 2's own points off by {worst}");
        }
    }
}
