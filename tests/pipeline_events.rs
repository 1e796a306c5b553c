//! The pipeline as both drivers run it, fed event by event: the rendered sample's frames with
//! the trained SuperPoint (`../shared/real/superpoint`) and the scene's true pointmaps in
//! DUSt3R's place, its outputs collected. A parameter changed while it runs reaches the chain;
//! with `base_frame`, nothing in odom goes out before the camera's mount is known.

mod common;

use std::sync::Arc;

use common::true_scene::TruePointmaps;
use sp_dust3r_core::backend::cpu::CpuFeatures;
use sp_dust3r_core::cancel::Cancel;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::msg::{builtin_interfaces, geometry_msgs, sensor_msgs, std_msgs, tf2_msgs};
use sp_dust3r_core::outputs::{Output, OutputKind, OutputSink};
use sp_dust3r_core::params::args::{ParamValue, RosArgs};
use sp_dust3r_core::params::NodeParams;
use sp_dust3r_core::pipeline::{FrameSide, PairDone, PairSide, Pipeline};
use sp_dust3r_core::sample::{FOCAL, HEIGHT, RATE, WIDTH};
use sp_dust3r_core::superpoint::SuperPoint;

const N: usize = 40;

/// Outputs as they come.
#[derive(Default)]
struct Collect(Vec<Output>);

impl OutputSink for Collect {
    type Error = std::convert::Infallible;
    fn emit(&mut self, output: Output) -> Result<(), Self::Error> {
        self.0.push(output);
        Ok(())
    }
}

impl Collect {
    fn count(&self, kind: OutputKind) -> usize {
        self.0.iter().filter(|o| o.kind() == kind).count()
    }
}

struct Run {
    scene: TruePointmaps,
    features: CpuFeatures,
    pipeline: Pipeline,
    frames: FrameSide,
    pairs: PairSide,
    sink: Collect,
}

fn params(extra: &[(&str, ParamValue)]) -> NodeParams {
    let mut ros = RosArgs::default();
    ros.params.push(("keyframe_min_interval".into(), ParamValue::Double(0.0)));
    ros.params.push(("keyframe_max_interval".into(), ParamValue::Double(0.5)));
    ros.params.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    NodeParams::resolve(&ros, "/sp_dust3r").unwrap().0
}

impl Run {
    fn new(params: NodeParams) -> Self {
        let scene = TruePointmaps::new(N);
        let features = CpuFeatures(SuperPoint::load(&common::real_dir().join("superpoint")).unwrap());
        let pipeline = Pipeline::new(params);
        let (fx, cx, cy) = (FOCAL, WIDTH as f64 / 2.0 - 0.5, HEIGHT as f64 / 2.0 - 0.5);
        pipeline.on_camera_info(sensor_msgs::CameraInfo {
            width: WIDTH,
            height: HEIGHT,
            k: [fx, 0.0, cx, 0.0, fx, cy, 0.0, 0.0, 1.0],
            ..Default::default()
        });
        let frames = pipeline.frame_side();
        Self { scene, features, pipeline, frames, pairs: PairSide::default(), sink: Collect::default() }
    }

    /// Frames `range` of the sample at its rate, each pair right after its keyframe (as the
    /// replay runs them).
    fn frames(&mut self, range: std::ops::Range<usize>) {
        for i in range {
            let ns = (i as f64 / RATE * 1e9) as u64;
            let header = std_msgs::Header {
                stamp: builtin_interfaces::Time {
                    sec: 100 + (ns / 1_000_000_000) as i32,
                    nanosec: (ns % 1_000_000_000) as u32,
                },
                frame_id: "cam_optical".into(),
            };
            let frame = Arc::new(self.scene.frame(i));
            let p = &self.pipeline;
            let Ok(done) = p.on_frame(&mut self.frames, header, frame, &self.features, true, &mut self.sink);
            if let Some(job) = done.pair {
                let Ok(end) = p.on_pair(&mut self.pairs, &job, &self.scene, &Cancel::new(), &mut self.sink);
                assert!(matches!(end, PairDone::Done { .. }), "{end:?}");
            }
        }
    }

    fn get(&self, c: Counter) -> u64 {
        self.pipeline.stats().get(c)
    }
}

/// `ros2 param set pose_confidence_threshold` while frames flow: the true pointmaps' confidence
/// is 10, so at 20 no pair has a pose; at 3 every pair has one and joins the chain, which takes
/// the depth ratio of the shared keyframe's pointmaps over pixels above the new threshold (at
/// the old one there would be none, and every pair after the first would stay off the chain).
#[test]
fn a_confidence_threshold_set_at_run_time_reaches_the_chains_scale_test() {
    let high = params(&[("pose_confidence_threshold", ParamValue::Double(20.0))]);
    let mut run = Run::new(high.clone());
    run.frames(0..12);
    let (pairs, no_pose) = (run.get(Counter::PairsDone), run.get(Counter::NoPose));
    assert!(pairs >= 2 && no_pose == pairs, "{pairs} pairs, {no_pose} without a pose");
    assert_eq!((run.get(Counter::PairsUnchained), run.get(Counter::KeyframesChained)), (pairs, 0));

    run.pipeline.set_params(NodeParams { pose_confidence_threshold: 3.0, ..high });
    run.frames(12..N);
    let later = run.get(Counter::PairsDone) - pairs;
    assert!(later >= 3, "{later} pairs after the change");
    assert_eq!(run.get(Counter::NoPose), no_pose, "every later pair has a pose");
    assert_eq!(run.get(Counter::PairsUnchained), pairs, "every later pair joins the chain");
    assert_eq!(run.get(Counter::KeyframesChained), later + 1, "the first later pair starts it with both views");
    assert!(run.get(Counter::FramesTracked) > 0);
}

/// With `base_frame`, odometry, path, map and TF wait for the camera's mount: before /tf_static
/// only the keypoints and the pairs' own outputs (camera frame) go out; once it arrives, the
/// next tracked frame and the next pair send them, with the base as the child.
#[test]
fn with_base_frame_nothing_in_odom_goes_out_before_the_mount_is_known() {
    let base = ("base_frame", ParamValue::String("base_link".into()));
    let mut run = Run::new(params(&[base, ("publish_tf", ParamValue::Bool(true))]));
    run.frames(0..20);
    let sink = &run.sink;
    assert!(run.get(Counter::KeyframesChained) >= 3 && run.get(Counter::FramesNoMount) > 0);
    assert_eq!(sink.count(OutputKind::Keypoints), 20);
    assert!(sink.count(OutputKind::Cloud) >= 2 && sink.count(OutputKind::Pose) >= 2);
    for kind in [OutputKind::Odometry, OutputKind::Tf, OutputKind::Path, OutputKind::Map] {
        assert_eq!(sink.count(kind), 0, "{kind:?} before the mount is known");
    }
    assert_eq!(run.get(Counter::FramesTracked), 0);

    let tf = geometry_msgs::TransformStamped::fixed;
    run.pipeline.on_static_transforms(&tf2_msgs::TFMessage {
        transforms: vec![
            tf("base_link", "cam_link", [0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0]),
            tf("cam_link", "cam_optical", [0.0, 0.0, 0.0], [-0.5, 0.5, -0.5, 0.5]),
        ],
    });
    run.sink = Collect::default();
    run.frames(20..N);
    let tracked = run.get(Counter::FramesTracked) as usize;
    assert!(tracked >= 15, "{tracked}");
    assert_eq!((run.sink.count(OutputKind::Odometry), run.sink.count(OutputKind::Tf)), (tracked, tracked));
    assert!(run.sink.count(OutputKind::Path) >= 1 && run.sink.count(OutputKind::Map) >= 1);
    for o in &run.sink.0 {
        if let Output::Odometry(m) = o {
            assert_eq!((m.header.frame_id.as_str(), m.child_frame_id.as_str()), ("odom", "base_link"));
        }
    }
}
