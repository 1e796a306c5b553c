//! DUSt3R replaced by the rendered sample's exact geometry: each view's pointmap is the wall
//! point seen through every network pixel (mapped back to the frame's pixels as the CPU backend
//! maps them), expressed in the reference camera's frame, through the same PairViewer glue as
//! the CPU backend. Frames are recognised by their pixels among the rendered ones. `scales`
//! multiplies the n-th pair's pointmaps (both passes), as DUSt3R's arbitrary per-pair scale does.

use std::sync::Mutex;

use sp_dust3r_core::backend::cpu::pair_output;
use sp_dust3r_core::backend::{BackendError, PairOutput, PairReconstructor, PairRequest};
use sp_dust3r_core::dust3r::{prepare, PairPrediction, Pointmap, PrepMode, PreparedView};
use sp_dust3r_core::geometry::lens::Lens;
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::sample::{
    camera_pose, render_through, surface_point, true_pointmap_through, CameraOptical, Room, HEIGHT, WIDTH,
};

pub struct TruePointmaps {
    /// Each rendered frame, 8-bit grey.
    grey: Vec<Vec<u8>>,
    /// The same as RGB, to recognise frames by.
    frames: Vec<Vec<u8>>,
    /// The lens the frames were rendered through (and the pointmaps follow).
    lens: Lens,
    /// The scale of each pair in the order they are asked for (1 after the list ends).
    pub scales: Vec<f64>,
    asked: Mutex<usize>,
}

impl TruePointmaps {
    /// The sample of `n` frames.
    pub fn new(n: usize) -> Self {
        Self::through(Lens::Pinhole, n)
    }

    /// The sample of `n` frames rendered through `lens`.
    pub fn through(lens: Lens, n: usize) -> Self {
        let grey: Vec<Vec<u8>> = (0..n).map(|i| render_through(lens, i, n)).collect();
        let frames = grey
            .iter()
            .map(|g| Frame::from_raw("mono8", WIDTH, HEIGHT, WIDTH as usize, false, g.clone()).unwrap().to_rgb8())
            .collect();
        Self { grey, frames, lens, scales: Vec::new(), asked: Mutex::new(0) }
    }

    /// How many pairs it was asked for.
    pub fn asked(&self) -> usize {
        *self.asked.lock().unwrap()
    }

    /// Which rendered frame this is.
    pub fn index_of(&self, frame: &Frame) -> usize {
        let rgb = frame.to_rgb8();
        self.frames.iter().position(|f| *f == rgb).expect("a frame of the sample")
    }

    /// The rendered frame `i` as a mono8 frame.
    pub fn frame(&self, i: usize) -> Frame {
        Frame::from_raw("mono8", WIDTH, HEIGHT, WIDTH as usize, false, self.grey[i].clone()).unwrap()
    }

    /// Frame `i` as a depth camera registered to it sees it: metres along the optical axis, row
    /// major.
    pub fn depth(&self, i: usize) -> Vec<f32> {
        let pose = self.pose(i);
        let to_camera = pose.inverse();
        (0..HEIGHT * WIDTH)
            .map(|k| {
                let (x, y) = ((k % WIDTH) as f64, (k / WIDTH) as f64);
                surface_point(&pose, x, y).map_or(0.0, |p| to_camera.apply(&p).z as f32)
            })
            .collect()
    }

    /// The camera of rendered frame `i`.
    pub fn pose(&self, i: usize) -> Transform<Room, CameraOptical> {
        camera_pose(i, self.frames.len())
    }

    /// The points of `view` (seen from `pose`) in the frame of the camera at `reference`, times
    /// `scale`.
    pub fn pointmap(
        &self,
        view: &PreparedView,
        pose: &Transform<Room, CameraOptical>,
        reference: &Transform<Room, CameraOptical>,
        scale: f64,
    ) -> Pointmap {
        let size = (view.width as usize, view.height as usize);
        true_pointmap_through(self.lens, &view.mapping, size, pose, reference, scale)
    }
}

impl PairReconstructor for TruePointmaps {
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        let n = {
            let mut asked = self.asked.lock().unwrap();
            *asked += 1;
            *asked - 1
        };
        let s = self.scales.get(n).copied().unwrap_or(1.0);
        let (p1, p2) = (self.pose(self.index_of(r.first)), self.pose(self.index_of(r.second)));
        let v1 = prepare(r.first, PrepMode::Pad, 512).unwrap();
        let v2 = prepare(r.second, PrepMode::Pad, 512).unwrap();
        let forward =
            PairPrediction { view1: self.pointmap(&v1, &p1, &p1, s), view2_in_1: self.pointmap(&v2, &p2, &p1, s) };
        let swapped =
            PairPrediction { view1: self.pointmap(&v2, &p2, &p2, s), view2_in_1: self.pointmap(&v1, &p1, &p2, s) };
        Ok(pair_output(r, v1, v2, forward, swapped))
    }
    fn describe(&self) -> String {
        "the scene's true pointmaps".into()
    }
    fn health(&self) -> Vec<sp_dust3r_core::backend::BackendHealth> {
        Vec::new()
    }
}

/// Odometry messages as a pipeline emits them.
#[derive(Default)]
pub struct OdometrySink(pub Vec<sp_dust3r_core::msg::nav_msgs::Odometry>);

impl sp_dust3r_core::outputs::OutputSink for OdometrySink {
    type Error = std::convert::Infallible;
    fn emit(&mut self, output: sp_dust3r_core::outputs::Output) -> Result<(), Self::Error> {
        if let sp_dust3r_core::outputs::Output::Odometry(m) = output {
            self.0.push(*m);
        }
        Ok(())
    }
}

impl OdometrySink {
    /// Each message's pose in its frame, at its stamp.
    pub fn poses(&self) -> Vec<sp_dust3r_core::eval::StampedPose> {
        self.0
            .iter()
            .map(|m| {
                let (p, q) = (&m.pose.pose.position, &m.pose.pose.orientation);
                let r = nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(q.w, q.x, q.y, q.z));
                let pose = Transform::new(r.to_rotation_matrix(), nalgebra::Vector3::new(p.x, p.y, p.z));
                sp_dust3r_core::eval::StampedPose { t: m.header.stamp.seconds(), pose }
            })
            .collect()
    }
}

/// When frame `i` of the sample is stamped: from 100 s at its rate.
pub fn sample_time(i: usize) -> f64 {
    100.0 + i as f64 / sp_dust3r_core::sample::RATE
}

/// `scene`'s frames through `pipeline` (the trained SuperPoint; `scene` in DUSt3R's place), each
/// stamped [`sample_time`] in `cam_optical` and each pair run right after the keyframe that
/// starts it, as the replay runs them; `after(i, header)` runs after frame `i` (to deliver its
/// depth, say).
pub fn play(
    pipeline: &sp_dust3r_core::pipeline::Pipeline,
    scene: &TruePointmaps,
    sink: &mut OdometrySink,
    mut after: impl FnMut(usize, &sp_dust3r_core::msg::std_msgs::Header),
) {
    use sp_dust3r_core::pipeline::{PairDone, PairSide};
    let features = sp_dust3r_core::backend::cpu::CpuFeatures(
        sp_dust3r_core::superpoint::SuperPoint::load(&super::real_dir().join("superpoint")).unwrap(),
    );
    let (mut frames, mut pairs) = (pipeline.frame_side(), PairSide::default());
    for i in 0..scene.frames.len() {
        let t = sample_time(i);
        let stamp = sp_dust3r_core::msg::builtin_interfaces::Time {
            sec: t.floor() as i32,
            nanosec: (t.fract() * 1e9).round() as u32,
        };
        let header = sp_dust3r_core::msg::std_msgs::Header { stamp, frame_id: "cam_optical".into() };
        let frame = std::sync::Arc::new(scene.frame(i));
        let Ok(done) = pipeline.on_frame(&mut frames, header.clone(), frame, &features, true, sink);
        after(i, &header);
        if let Some(job) = done.pair {
            let cancel = sp_dust3r_core::cancel::Cancel::new();
            let Ok(end) = pipeline.on_pair(&mut pairs, &job, scene, &cancel, sink);
            assert!(matches!(end, PairDone::Done { .. }), "{end:?}");
        }
    }
}

/// A pipeline for the sample (a keyframe every 0.5 s of its time at most) with `extra`
/// parameters, given the sample camera's CameraInfo with the lens `model` and `d` (accepted).
pub fn sample_pipeline(
    extra: Vec<(&str, sp_dust3r_core::params::args::ParamValue)>,
    model: &str,
    d: Vec<f64>,
) -> sp_dust3r_core::pipeline::Pipeline {
    use sp_dust3r_core::params::args::{ParamValue, RosArgs};
    let mut params =
        vec![("keyframe_min_interval", ParamValue::Double(0.0)), ("keyframe_max_interval", ParamValue::Double(0.5))];
    params.extend(extra);
    let ros = RosArgs { params: params.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), ..RosArgs::default() };
    let params = sp_dust3r_core::params::NodeParams::resolve(&ros, "/sp_dust3r").unwrap().0;
    let pipeline = sp_dust3r_core::pipeline::Pipeline::new(params);
    let k = sp_dust3r_core::sample::camera(Lens::Pinhole).k;
    pipeline.on_camera_info(sp_dust3r_core::msg::sensor_msgs::CameraInfo {
        width: WIDTH,
        height: HEIGHT,
        distortion_model: model.into(),
        d,
        k: [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0],
        ..Default::default()
    });
    assert!(pipeline.camera_info().is_some(), "the CameraInfo is accepted");
    pipeline
}
