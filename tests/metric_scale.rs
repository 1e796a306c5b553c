//! Metric scale from a registered depth image or from the robot's own odometry. Two scenes, each
//! with DUSt3R replaced by a double that answers every pair at a different unknown scale: the TUM
//! fr3 frames with their depth in the bag and the depth camera's own pointmaps with noise
//! (`common::tum`), and the rendered sample with its rendered depth (or a robot's wheel odometry
//! on /tf) and the scene's true pointmaps (`common::true_scene`). With `scale_source: depth` or
//! `odometry` the odometry comes out in metres: scored against the ground truth with no scale
//! fitted.

mod common;

use common::true_scene::{play, sample_pipeline, sample_time, OdometrySink, TruePointmaps};
use common::tum::{depth_msg, depth_oracle, replay_tum, write_bag, DepthEncoding, DEPTH, FR3};
use sp_dust3r_core::bag::replay::{choose_depth_topic, choose_topics, ReplaySummary};
use sp_dust3r_core::bag::McapFile;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::{load_ground_truth, GroundTruth};
use sp_dust3r_core::eval::evaluate_bag;
use sp_dust3r_core::eval::trajectory::evaluate_trajectory;
use sp_dust3r_core::eval::trajectory::{RpeDelta, TrajectoryReport};
use sp_dust3r_core::eval::StampedPose;
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::msg::convert::cloud_points_of;
use sp_dust3r_core::msg::{from_cdr, geometry_msgs, sensor_msgs, std_msgs, tf2_msgs};
use sp_dust3r_core::outputs::odom::{stamp_of, time_of};
use sp_dust3r_core::params::args::ParamValue;
use sp_dust3r_core::pipeline::Pipeline;
use sp_dust3r_core::rng::SplitMix64;
use sp_dust3r_core::sample::{Room, RATE};

/// Every pair's scale: log-uniform over 0.2 .. 5, so no two pairs agree and none is near 1.
fn unknown_scales(n: usize) -> Vec<f64> {
    common::tum::DepthOracle::arbitrary_scales(n, 0xd3b7)
}

/// What a TUM run gave: its counters, its odometry scored, and each pair's cloud's median depth
/// over its view 1's median sensor depth (1 for a cloud in metres).
struct TumRun {
    summary: ReplaySummary,
    trajectory: TrajectoryReport,
    cloud_scales: Vec<f64>,
}

/// The TUM bag (depth in `encoding`) through the replay with `scale_source`, scored.
fn tum_run(encoding: DepthEncoding, scale_source: &str) -> TumRun {
    let dir = tempfile::tempdir().unwrap();
    let bag = dir.path().join("tum.mcap");
    write_bag(&FR3, &bag, Some(encoding));
    let topics: Vec<(String, String)> = McapFile::open(&bag).unwrap().topics().unwrap().into_iter().collect();
    let mut cameras = choose_topics(&topics, None, None).unwrap();
    assert_eq!(cameras.image, common::tum::IMAGE, "the depth topic is not taken for the colour image");
    cameras.depth = Some(choose_depth_topic(&topics, None).unwrap());
    assert_eq!(cameras.depth.as_deref(), Some(DEPTH));
    let mut depth = depth_oracle(&FR3);
    depth.scales = unknown_scales(32);
    depth.noise = 0.02;
    let out_path = dir.path().join("out.mcap");
    let extra = vec![("scale_source", ParamValue::String(scale_source.into()))];
    let summary = replay_tum(&bag, &cameras, extra, &depth, 0, &out_path);
    let gt = load_ground_truth(&GroundTruth::from_path(&bag, None, None)).unwrap();
    let report = evaluate_bag(&out_path, &gt, 0.02, RpeDelta::Frames(1)).unwrap();
    let trajectory = report.trajectory.expect("the odometry is scored");
    TumRun { summary, trajectory, cloud_scales: cloud_scales(&out_path) }
}

fn median(mut v: Vec<f64>) -> f64 {
    sp_dust3r_core::quantile::quantile_in_place(&mut v, 0.5, sp_dust3r_core::quantile::Method::Linear).unwrap()
}

/// Each pair cloud's median depth over the median measured depth of its view 1 (the frame at
/// the cloud's stamp).
fn cloud_scales(out: &std::path::Path) -> Vec<f64> {
    let sensor: std::collections::HashMap<(i32, u32), f64> = FR3
        .frames()
        .iter()
        .map(|(t, _, _, d)| {
            let stamp = common::tum::time(*t);
            let z = common::tum::depth_metres(d).into_iter().filter(|&z| z > 0.0).map(f64::from).collect();
            ((stamp.sec, stamp.nanosec), median(z))
        })
        .collect();
    let bag = McapFile::open(out).unwrap();
    bag.messages()
        .map(|m| m.unwrap())
        .filter(|m| m.topic == "/camera/rgb/pointcloud")
        .map(|m| {
            let cloud: sensor_msgs::PointCloud2 = from_cdr(&m.data).unwrap();
            let z = cloud_points_of(&cloud).unwrap().iter().map(|p| f64::from(p.xyz[2])).collect();
            median(z) / sensor[&(cloud.header.stamp.sec, cloud.header.stamp.nanosec)]
        })
        .collect()
}

/// On real frames the ground truth's path over these 0.4 s is about 12 mm, too short for a
/// fitted scale to mean much (the motion capture's own noise is millimetres; the same frames with
/// the depth camera's pointmaps at their true scale fit a Sim(3) scale of 0.82): so the units
/// are checked on the published clouds against the sensor, and the trajectory by its rigidly
/// aligned error, which matches that of pointmaps in metres from the start (1.84 mm,
/// tests/tum_tracking.rs).
#[test]
fn with_depth_real_frames_give_clouds_and_odometry_in_metres_whatever_scale_each_pair_has() {
    for encoding in [DepthEncoding::Millimetres, DepthEncoding::Metres] {
        let run = tum_run(encoding, "depth");
        let (s, t) = (&run.summary, &run.trajectory);
        let pairs = s.get(Counter::PairsDone);
        eprintln!(
            "TUM fr3, depth as {}: {pairs} pairs, {} measured, clouds at {:.3?} of the sensor's depth; {t}",
            if encoding == DepthEncoding::Metres { "32FC1" } else { "16UC1" },
            s.get(Counter::PairsScaleMeasured),
            run.cloud_scales
        );
        assert!(pairs >= 3 && s.get(Counter::PairsScaleMeasured) == pairs, "every pair's keyframes have depth");
        // depth_tracking: every tracked frame's keypoints took their depth from its depth image.
        assert_eq!(s.get(Counter::FramesMeasured), s.get(Counter::FramesTracked));
        assert_eq!(s.get(Counter::PairsUnchained), 0);
        assert_eq!(run.cloud_scales.len() as u64, pairs);
        assert!(run.cloud_scales.iter().all(|c| (c - 1.0).abs() < 0.03), "{:?}", run.cloud_scales);
        assert!(t.num_tracked >= 8 && t.ate_se3.rmse < 0.004, "{t}");
    }
    // Without a scale source the clouds keep each pair's own scale.
    let run = tum_run(DepthEncoding::Millimetres, "none");
    eprintln!("TUM fr3, none: clouds at {:.3?} of the sensor's depth; {}", run.cloud_scales, run.trajectory);
    let scales = unknown_scales(run.cloud_scales.len());
    for (c, s) in run.cloud_scales.iter().zip(scales) {
        assert!((c / s - 1.0).abs() < 0.03, "a cloud at {c} for a pair at scale {s}");
    }
}

/// The rendered sample's 40 frames through the pipeline with `scale_source`, each frame's depth
/// delivered 8 ms after it (another topic, another stamp), the camera mounted on a robot's base
/// (`base_frame`); the base's odometry scored against the scene's camera poses carried through
/// the mount.
fn sample_run(scale_source: &str, depths: &[Vec<f32>]) -> (Pipeline, TrajectoryReport) {
    sample_run_with(scale_source, depths, 5)
}

/// [`sample_run`] with `scale_max_unmeasured`; a frame whose depth is empty gets none.
fn sample_run_with(scale_source: &str, depths: &[Vec<f32>], max_unmeasured: i64) -> (Pipeline, TrajectoryReport) {
    let extra = vec![
        ("scale_source", ParamValue::String(scale_source.into())),
        ("scale_max_unmeasured", ParamValue::Integer(max_unmeasured)),
    ];
    base_mounted_run(extra, |pipeline, i, header, _| {
        if !depths[i].is_empty() {
            let stamp = time_of(stamp_of(&header.stamp) + 8_000_000);
            let depth = std_msgs::Header { stamp, ..header.clone() };
            pipeline.on_depth(&depth_msg(depth, &depths[i], DepthEncoding::Millimetres));
        }
    })
}

/// The sample's camera 0.3 m ahead of `base_link` and 0.2 m above it, looking forward; DUSt3R's
/// pairs at unknown scales; `extra` parameters; `feed(pipeline, i, header, base pose)` after
/// frame `i`. The base's odometry scored against its true poses.
fn base_mounted_run(
    mut extra: Vec<(&str, ParamValue)>,
    mut feed: impl FnMut(&Pipeline, usize, &std_msgs::Header, &Transform<Room, Room>),
) -> (Pipeline, TrajectoryReport) {
    let n = sp_dust3r_core::sample::FRAMES;
    extra.push(("base_frame", ParamValue::String("base_link".into())));
    let pipeline = sample_pipeline(extra, "plumb_bob", vec![0.0; 5]);
    // The camera 0.3 m ahead of the base and 0.2 m above it, looking forward.
    let tf = geometry_msgs::TransformStamped::fixed;
    pipeline.on_static_transforms(&tf2_msgs::TFMessage {
        transforms: vec![
            tf("base_link", "cam_link", [0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0]),
            tf("cam_link", "cam_optical", [0.0, 0.0, 0.0], [-0.5, 0.5, -0.5, 0.5]),
        ],
    });
    let t_base_cam = Transform::<Room, Room>::new(
        nalgebra::Rotation3::from_matrix(&nalgebra::Matrix3::new(0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0)),
        nalgebra::Vector3::new(0.3, 0.0, 0.2),
    );
    let mut scene = TruePointmaps::new(n);
    scene.scales = unknown_scales(n);
    // The base's poses: the camera's, carried back through the mount.
    let base = |i: usize| {
        let p = scene.pose(i);
        Transform::<Room, Room>::new(p.rotation, p.translation).compose(&t_base_cam.inverse())
    };
    let mut sink = OdometrySink::default();
    play(&pipeline, &scene, &mut sink, |i, header| feed(&pipeline, i, header, &base(i)));
    let truth: Vec<StampedPose> = (0..n)
        .map(|i| StampedPose { t: sample_time(i), pose: Transform::new(base(i).rotation, base(i).translation) })
        .collect();
    let report = evaluate_trajectory(&sink.poses(), n, &truth, 0.001, RpeDelta::Frames(1)).unwrap();
    (pipeline, report)
}

#[test]
fn on_the_rendered_sample_with_depth_the_odometry_is_metric_whatever_scale_each_pair_has() {
    let scene = TruePointmaps::new(sp_dust3r_core::sample::FRAMES);
    let depths: Vec<Vec<f32>> = (0..sp_dust3r_core::sample::FRAMES).map(|i| scene.depth(i)).collect();
    let (pipeline, t) = sample_run("depth", &depths);
    let s = pipeline.stats();
    eprintln!(
        "sample, depth: {} pairs, {} measured, last scale {:?}: {t}",
        s.get(Counter::PairsDone),
        s.get(Counter::PairsScaleMeasured),
        pipeline.scale().last
    );
    assert!(s.get(Counter::PairsDone) >= 5);
    assert_eq!(s.get(Counter::PairsScaleMeasured), s.get(Counter::PairsDone));
    assert!(t.num_tracked >= 30, "{t}");
    assert!(t.scale_error < 0.03, "scale error {:.2} %", t.scale_error * 100.0);
    assert!(t.ate_se3_percent_of_path < 3.0, "{t}");

    let (_, t) = sample_run("none", &depths);
    eprintln!("sample, none: {t}");
    assert!(t.scale_error > 0.2 && t.ate_se3_percent_of_path > 3.0, "{t}");
}

/// The depth camera stops for 2.4 s (frames 14 to 25) and comes back: the chain carries its
/// scale over `scale_max_unmeasured` (1) keyframe, then the metric outputs stop (counted, the
/// scale track says how many keyframes went unmeasured), and resume with the next measurement,
/// still in metres.
#[test]
fn when_depth_stops_metric_outputs_stop_and_resume_when_it_returns() {
    let scene = TruePointmaps::new(sp_dust3r_core::sample::FRAMES);
    let gap = 14..26;
    let depths: Vec<Vec<f32>> = (0..sp_dust3r_core::sample::FRAMES)
        .map(|i| if gap.contains(&i) { Vec::new() } else { scene.depth(i) })
        .collect();
    let (pipeline, t) = sample_run_with("depth", &depths, 1);
    let s = pipeline.stats();
    let frame_of =
        |p: &sp_dust3r_core::eval::trajectory::TrajectoryPoint| ((p.t - sample_time(0)) * RATE).round() as usize;
    let tracked: Vec<usize> = t.points.iter().map(frame_of).collect();
    eprintln!(
        "depth gap {gap:?}: odometry at frames {tracked:?}; {} pairs unmeasured, {} frames held; {t}",
        s.get(Counter::PairsScaleUnmeasured),
        s.get(Counter::FramesNoScale)
    );
    assert!(s.get(Counter::PairsScaleUnmeasured) >= 3, "{:?}", pipeline.scale());
    assert!(s.get(Counter::FramesNoScale) >= 3);
    let held: Vec<usize> = gap.clone().filter(|i| !tracked.contains(i)).collect();
    assert!(held.len() >= 3 && held.iter().all(|&i| i >= gap.start + 2), "held {held:?}");
    assert!(tracked.iter().filter(|&&i| i >= gap.end + 3).count() >= 8, "resumes: {tracked:?}");
    assert_eq!(pipeline.scale().unmeasured, 0, "measured again at the end");
    assert!(t.scale_error < 0.03 && t.ate_se3_percent_of_path < 3.0, "{t}");
}

/// The robot's wheel odometry on /tf (`odom -> base_link` at every frame's stamp, 2 % long and
/// with 3 mm of noise per sample, as wheels slip) gives the scale: the base's odometry is metric
/// within the wheels' error, whatever scale each pair has. When /tf stops (frame 28 on), the
/// chain carries the scale over `scale_max_unmeasured` (2) keyframes, then the metric outputs
/// stop. A configuration in which the wheels' frame and ours would both parent base_link is
/// refused.
#[test]
fn on_the_rendered_sample_the_robots_odometry_gives_the_scale() {
    let mut rng = SplitMix64::new(0x0d0);
    let extra = vec![
        ("scale_source", ParamValue::String("odometry".into())),
        ("odom_frame", ParamValue::String("visual_odom".into())),
        ("scale_max_unmeasured", ParamValue::Integer(2)),
    ];
    let (pipeline, t) = base_mounted_run(extra, |pipeline, i, header, base| {
        if i >= 28 {
            return;
        }
        let noise = nalgebra::Vector3::from_fn(|_, _| 0.003 * rng.normal());
        let p = base.translation * 1.02 + noise;
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(&base.rotation);
        let mut tf = geometry_msgs::TransformStamped::fixed("odom", "base_link", [p.x, p.y, p.z], [q.i, q.j, q.k, q.w]);
        tf.header.stamp = header.stamp.clone();
        pipeline.on_transforms(&tf2_msgs::TFMessage { transforms: vec![tf] });
    });
    let s = pipeline.stats();
    eprintln!(
        "sample, odometry: {} pairs, {} measured, {} not, {} frames held, last scale {:?}: {t}",
        s.get(Counter::PairsDone),
        s.get(Counter::PairsScaleMeasured),
        s.get(Counter::PairsScaleUnmeasured),
        s.get(Counter::FramesNoScale),
        pipeline.scale()
    );
    assert_eq!(s.get(Counter::RobotOdometryIn), 28);
    assert!(s.get(Counter::PairsScaleMeasured) >= 8, "measured while /tf came");
    assert!(s.get(Counter::PairsScaleUnmeasured) >= 3 && pipeline.scale().unmeasured >= 3, "not after");
    assert!(s.get(Counter::FramesNoScale) >= 3, "metric outputs held once /tf stopped");
    assert!(t.num_tracked >= 24, "{t}");
    assert!(t.scale_error < 0.05, "scale error {:.2} %", t.scale_error * 100.0);
    assert!(t.ate_se3_percent_of_path < 4.0, "{t}");

    for (extra, refused) in [
        (vec![("odom_frame", "odom")], "odom_frame"),
        (vec![("odom_frame", "visual_odom"), ("publish_tf", "true")], "publish_tf"),
    ] {
        let mut ros = sp_dust3r_core::params::args::RosArgs::default();
        ros.params.push(("scale_source".into(), ParamValue::String("odometry".into())));
        ros.params.push(("base_frame".into(), ParamValue::String("base_link".into())));
        for (k, v) in extra {
            let v = if v == "true" { ParamValue::Bool(true) } else { ParamValue::String(v.into()) };
            ros.params.push((k.into(), v));
        }
        let e = sp_dust3r_core::params::NodeParams::resolve(&ros, "/sp_dust3r").expect_err("refused");
        eprintln!("{e}");
        assert!(e.to_string().contains(refused), "{e}");
    }
}
