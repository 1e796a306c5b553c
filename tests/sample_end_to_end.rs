//! The sample sequence end to end: replay -> output bag -> eval against the bag's ground truth.
//!
//! 1. With the scene's true pointmaps in DUSt3R's place (ray-cast from the renderer's exact
//!    geometry, through the same preprocessing mapping and PairViewer glue as the CPU backend),
//!    the replay + eval chain recovers the rendered camera path: this checks every convention
//!    between the network's output and the metrics (pose direction, frames, stamps, the ground
//!    truth's optical frame, intrinsics mapping) against the renderer, which knows the truth.
//! 2. README's first command, as written there, runs on the sample and writes the bag, the
//!    metrics and the picture it points at (test weights here: the real checkpoints are a download
//!    away on a user's machine, not on ours).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::true_scene::TruePointmaps;
use common::{fixture_dir, peer_python};
use sp_dust3r_core::backend::cpu::CpuFeatures;
use sp_dust3r_core::bag::replay::{choose_topics, replay, Models};
use sp_dust3r_core::bag::{BagWriter, McapFile};
use sp_dust3r_core::cancel::Cancel;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::{load_ground_truth, GroundTruth};
use sp_dust3r_core::eval::evaluate_bag;
use sp_dust3r_core::geometry::{Cam1, Cam2, Transform};
use sp_dust3r_core::params::args::RosArgs;
use sp_dust3r_core::params::NodeParams;
use sp_dust3r_core::superpoint::SuperPoint;

fn sample_bag() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap")
}

/// Replays the sample with the scene's true pointmaps and evaluates against the bag's ground
/// truth; `camera_info: false` leaves the intrinsics to PairViewer's focal estimate.
fn replay_true_pointmaps(camera_info: bool) -> sp_dust3r_core::eval::Report {
    let path = sample_bag();
    let input = vec![McapFile::open(&path).unwrap()];
    let topics: Vec<(String, String)> = input[0].topics().unwrap().into_iter().collect();
    let mut cameras = choose_topics(&topics, None, None).unwrap();
    assert_eq!(cameras.camera_info.as_deref(), Some("/cam/camera_info"));
    if !camera_info {
        cameras.camera_info = None;
    }
    // The trained SuperPoint matches the whole 8 s sequence too well for its match ratio to
    // call a keyframe: one every 2 s of input instead (the 5 s default would give one pair).
    let ros = RosArgs {
        params: vec![
            ("keyframe_max_interval".into(), sp_dust3r_core::params::args::ParamValue::Double(2.0)),
            ("publish_tf".into(), sp_dust3r_core::params::args::ParamValue::Bool(true)),
        ],
        ..RosArgs::default()
    };
    let (params, _) = NodeParams::resolve(&ros, "/sp_dust3r").unwrap();
    // The trained SuperPoint: tracking matches its descriptors frame to frame.
    let features = CpuFeatures(SuperPoint::load(&common::real_dir().join("superpoint")).unwrap());
    let truth = TruePointmaps::new(40);
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.mcap");
    let mut out = BagWriter::create(&out_path).unwrap();
    let (summary, stopped) = replay(
        &input,
        &cameras,
        &mut out,
        Models { features: &features, pairs: Some(&truth), pair_lag: 0 },
        &params,
        &Cancel::new(),
        |_| {},
    )
    .unwrap();
    out.finish().unwrap();
    assert!(stopped.is_none());
    let pairs = summary.get(Counter::PairsDone);
    assert_eq!(summary.get(Counter::FramesIn), 40);
    assert!(pairs >= 3, "pairs: {pairs}");
    assert_eq!(summary.poses(), pairs, "every pair of true pointmaps has a pose");

    let gt = load_ground_truth(&GroundTruth::from_path(&path, None, None)).unwrap();
    assert_eq!(gt.len(), 40);
    let report = evaluate_bag(&out_path, &gt, 0.05, sp_dust3r_core::eval::trajectory::RpeDelta::Frames(1)).unwrap();
    assert_eq!(
        (report.num_pairs, report.num_without_pose, report.num_without_ground_truth),
        (pairs as usize, 0, 0),
        "{report:?}"
    );
    // Every frame after the first pair is tracked: the frames until then have no map, and no
    // frame is lost; every pair joins the chain.
    let (tracked, before) = (summary.get(Counter::FramesTracked), summary.get(Counter::FramesBeforeMap));
    let lost = (summary.get(Counter::FramesNotTracked), summary.get(Counter::FramesNoMount));
    assert_eq!(lost, (0, 0), "{:?}", summary.counters());
    assert_eq!(tracked + before, 40);
    assert!(before <= 20, "the first pair joins by frame {before}");
    assert_eq!((summary.get(Counter::KeyframesChained), summary.get(Counter::PairsUnchained)), (pairs + 1, 0));
    let t = report.trajectory.as_ref().expect("the odometry is scored");
    assert_eq!((t.num_tracked, t.num_scored, t.num_frames), (tracked as usize, tracked as usize, 40));
    eprintln!("camera_info {camera_info}: {t}, keyframe gaps {:?}", summary.keyframe_gaps);
    assert!(t.ate_percent_of_path <= 0.5, "ATE {:?} over a {} m path", t.ate, t.path_length);
    // The same frames on the map through /tf, as they went out and after the fact.
    for on_map in [&report.map_trajectory, &report.refined_map_trajectory] {
        let m = on_map.as_ref().expect("the frames on the map are scored");
        assert_eq!(m.num_scored, tracked as usize);
        assert!(m.ate_percent_of_path <= 0.5, "on the map: ATE {:?} over a {} m path", m.ate, m.path_length);
    }
    let after_the_fact = report.refined_map_trajectory.as_ref().map_or(f64::NAN, |m| m.ate.rmse);
    let by_evo = evo_ate_of_written_trajectory(&out_path, &gt, "map_after_the_fact.tum");
    assert!(
        (by_evo - after_the_fact).abs() <= 1e-9 * after_the_fact,
        "after the fact: evo {by_evo}, ours {after_the_fact}"
    );
    // Without base_frame, map and odom start at frame 0's camera turned to REP 103's body axes (x forward =
    // optical z, y left = -optical x, z up = -optical y), and the child is the camera (checked
    // with CameraInfo; with the estimated focal the chain drifts by a few hundredths of a degree
    // per pair, see the AUC tests below).
    if camera_info {
        let body = Transform::<Cam1, Cam2>::new(
            nalgebra::Rotation3::from_matrix(&nalgebra::Matrix3::new(0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0)),
            nalgebra::Vector3::zeros(),
        );
        let checked = odometry_against_the_renderer(&out_path, "cam_optical", &body, &Transform::identity(), 5e-3);
        assert_eq!(checked, tracked as usize);
    }
    if camera_info {
        rviz_config_fits_the_bag(&out_path, "sample.rviz", &["/cam/pointcloud", "/cam/pose", "/cam/image_raw"], &[]);
        rviz_config_fits_the_bag(
            &out_path,
            "trajectory.rviz",
            &["/cam/cloud_map", "/cam/path", "/cam/odom", "/cam/pointcloud", "/cam/image_raw", "/cam/keypoints/image"],
            &["/cam/keypoints/image"],
        );
    }
    report
}

/// `sp_dust3r eval --trajectories` on a replay's output bag: it writes the odometry, the map as
/// published and after the fact, and the keyframes; evo (PyPI `evo`) scores the file `name`
/// against `gt`, and its ATE RMSE (Sim(3)) comes back.
fn evo_ate_of_written_trajectory(out_bag: &Path, gt: &[sp_dust3r_core::eval::StampedPose], name: &str) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let (gt_tum, written) = (dir.path().join("gt.tum"), dir.path().join("trajectories"));
    std::fs::write(&gt_tum, sp_dust3r_core::eval::format_tum(gt)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .arg("eval")
        .args(["--bag".as_ref(), out_bag.as_os_str(), "--ground-truth".as_ref(), gt_tum.as_os_str()])
        .args(["--trajectories".as_ref(), written.as_os_str()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["odom.tum", "map.tum", "map_after_the_fact.tum", "keyframes.tum"] {
        assert!(written.join(file).is_file(), "{file} written");
    }
    common::evo_metrics(&gt_tum, &written.join(name), 1)["ape"]["rmse"].as_f64().unwrap()
}

#[test]
fn true_pointmaps_recover_the_rendered_camera_path() {
    // With the bag's CameraInfo (fx = fy = 500): PnP on exact points, float32 only.
    let report = replay_true_pointmaps(true);
    for m in &report.pairs {
        let (r, t) = (m.rotation_error_deg.unwrap(), m.translation_error_deg.unwrap());
        assert!(
            r < 1e-3 && t < 1e-2,
            "pair {} -> {}: rotation {r} deg, translation direction {t} deg",
            m.reference_time,
            m.query_time
        );
    }
    assert!(report.auc[0] > 0.999, "AUC@5 {:?}", report.auc);
}

#[test]
fn true_pointmaps_without_camera_info_use_the_estimated_focal() {
    // Upstream's PairViewer puts the principal point at (W/2, H/2) of the grid's indices, 256;
    // the frame's centre lands at 255.6 in the padded 512 grid. That 0.4 px, over a focal of
    // 400 grid pixels, is the ~0.06 degrees left here (measured: 0.066 rotation, <= 0.091
    // translation direction).
    let report = replay_true_pointmaps(false);
    for m in &report.pairs {
        let (r, t) = (m.rotation_error_deg.unwrap(), m.translation_error_deg.unwrap());
        assert!(
            r < 0.1 && t < 0.2,
            "pair {} -> {}: rotation {r} deg, translation direction {t} deg",
            m.reference_time,
            m.query_time
        );
    }
    assert!(report.auc[0] > 0.95, "AUC@5 {:?}", report.auc);
}

#[test]
fn readme_main_command_replays_the_sample_and_evaluates() {
    let (main, test) = common::readme_commands();
    assert_eq!(test, "tools/test.sh");
    let ci = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == "tools/test.sh"), ".ci/run runs the README's test command");
    let args: Vec<&str> =
        main.strip_prefix("cargo run --release -- ").expect("a cargo run command").split_whitespace().collect();
    assert!(args.contains(&"data/sample/sequence.mcap"), "{main}");

    // Run from a scratch folder that sees the repository's data/, so the outputs land there.
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(Path::new(env!("CARGO_MANIFEST_DIR")).join("data"), dir.path().join("data")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"));
    let (summary, stderr) = common::run_with_test_weights(cmd.args(&args).current_dir(dir.path()), dir.path());
    let pairs = summary["counters"]["pairs_processed"].as_u64().unwrap();
    assert!(pairs >= 1, "{summary}");

    // The three outputs it names exist where README says, and say the same.
    let at = |key: &serde_json::Value| dir.path().join(key.as_str().unwrap());
    let (bag, metrics, plot) = (at(&summary["out"]), at(&summary["eval"]["metrics"]), at(&summary["eval"]["plot"]));
    for p in [&bag, &metrics, &plot] {
        assert!(p.exists(), "{} missing; {summary}", p.display());
        let shown = p.strip_prefix(dir.path()).unwrap().display().to_string();
        assert!(stderr.contains(&shown), "the log points at {shown}: {stderr}");
    }
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&metrics).unwrap()).unwrap();
    assert_eq!(m["num_pairs"].as_u64(), Some(pairs), "every pair is scored (a pair without a pose as a failure): {m}");
    assert_eq!(m["auc"], summary["eval"]["auc"]);
    let png = image::open(&plot).unwrap();
    assert_eq!((png.width(), png.height()), sp_dust3r_core::eval::plot::SIZE);
    // rosbags reads the bag: the camera copied, a keypoints message per frame, a cloud per pair.
    let r = rosbags_read(&bag);
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(40), "{r}");
    assert_eq!(r["/cam/image_raw"]["count"].as_u64(), Some(40), "{r}");
    assert_eq!(r["/cam/pointcloud"]["count"].as_u64(), Some(pairs), "{r}");
}

/// A bag as rosbags reads it: per topic its type, count, stamps and frames.
fn rosbags_read(bag: &Path) -> serde_json::Value {
    let read = Command::new(peer_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/rosbags_bag.py"))
        .args(["read", "--bag", bag.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    serde_json::from_slice(&read.stdout).unwrap()
}

/// An RViz config (config/`name`) against the replay's bag as rosbags read it: its displays show
/// `topics` in order, each in the bag with messages of the type that display draws (except
/// `live_only`, which a replay does not write), and every 3D display's messages are in the fixed
/// frame or one the bag's /tf reaches from it (what RViz can place).
fn rviz_config_fits_the_bag(bag_path: &Path, name: &str, topics: &[&str], live_only: &[&str]) {
    let bag = rosbags_read(bag_path);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config").join(name);
    let docs = yaml_rust2::YamlLoader::load_from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let manager = &docs[0]["Visualization Manager"];
    let fixed = manager["Global Options"]["Fixed Frame"].as_str().unwrap();
    let tf_edges: Vec<String> = bag["/tf"]["frames"]
        .as_array()
        .map_or(Vec::new(), |e| e.iter().filter_map(|f| f.as_str().map(str::to_string)).collect());
    // The frames /tf reaches from the fixed frame, parent to child.
    let mut reachable = vec![fixed.to_string()];
    while let Some(next) = tf_edges.iter().find_map(|e| {
        let (parent, child) = e.split_once('>')?;
        (reachable.iter().any(|r| r == parent) && !reachable.iter().any(|r| r == child)).then(|| child.to_string())
    }) {
        reachable.push(next);
    }
    let mut shown = Vec::new();
    for d in manager["Displays"].as_vec().unwrap() {
        let class = d["Class"].as_str().unwrap();
        if class == "rviz_default_plugins/TF" {
            assert!(!tf_edges.is_empty(), "{name} shows TF, and the bag has none");
            continue;
        }
        let Some(topic) = d["Topic"]["Value"].as_str() else { continue };
        let drawn = match class {
            "rviz_default_plugins/PointCloud2" => "sensor_msgs/msg/PointCloud2",
            "rviz_default_plugins/Pose" => "geometry_msgs/msg/PoseStamped",
            "rviz_default_plugins/Image" => "sensor_msgs/msg/Image",
            "rviz_default_plugins/Path" => "nav_msgs/msg/Path",
            "rviz_default_plugins/Odometry" => "nav_msgs/msg/Odometry",
            other => panic!("{other}: no expectation for this display"),
        };
        shown.push(topic);
        if live_only.contains(&topic) {
            assert!(bag[topic].is_null(), "{topic} is in the bag");
            continue;
        }
        let entry = &bag[topic];
        assert_eq!(entry["type"].as_str(), Some(drawn), "{class} on {topic}");
        assert!(entry["count"].as_u64() > Some(0), "{topic} has no messages");
        if class != "rviz_default_plugins/Image" {
            let frames = entry["frames"].as_array().unwrap();
            assert!(
                frames.len() == 1 && frames[0].as_str().is_some_and(|f| reachable.iter().any(|r| r == f)),
                "{topic} in {frames:?}, not in the fixed frame {fixed} or below it in /tf"
            );
        }
    }
    assert_eq!(shown, topics, "{name}");
}

#[test]
fn replay_eval_says_what_is_missing_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let replay = |args: &[&str]| {
        let out = common::run_replay(args);
        assert!(!out.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let sample = sample_bag();
    let sp = fixture_dir("superpoint");
    // No DUSt3R: nothing to score, so no replay and no output.
    let out = dir.path().join("a.mcap");
    let e = replay(&[
        "--bag",
        sample.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--eval",
        "--superpoint-weights",
        sp.to_str().unwrap(),
        "--dust3r-weights",
        "/nonexistent",
    ]);
    assert!(e.contains("--eval needs DUSt3R") && e.contains("/nonexistent"), "{e}");
    assert!(!out.exists());
    // A bag without ground truth: said before any weights are looked at.
    let bare = dir.path().join("bare.mcap");
    let mut w = BagWriter::create(&bare).unwrap();
    w.add_typed_topic::<sp_dust3r_core::msg::sensor_msgs::Image>("/cam/image_raw").unwrap();
    w.finish().unwrap();
    let out = dir.path().join("b.mcap");
    let e = replay(&[
        "--bag",
        bare.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--eval",
        "--superpoint-weights",
        "/nonexistent",
    ]);
    assert!(e.contains("has no geometry_msgs/msg/PoseStamped topic") && !e.contains("weights"), "{e}");
    assert!(!out.exists());
}

/// `base_frame` as a robot uses it: the sample bag with a /tf_static that mounts the camera on
/// `base_link` (0.3 m forward, 0.2 m up, through `cam_link`, with the usual optical rotation),
/// replayed with `base_frame: base_link`. The odometry is then the base's: its child is
/// `base_link`, odom is where the base was at the first keyframe, and each pose is the renderer's
/// camera motion carried through the mount's rotation (its offset is metric and this chain is
/// not; tests/metric_scale.rs has the whole mount with a metric one).
#[test]
fn with_base_frame_the_odometry_is_the_bases_through_the_bags_static_transform() {
    use sp_dust3r_core::msg::{geometry_msgs, tf2_msgs, to_cdr};
    let dir = tempfile::tempdir().unwrap();
    let bag = dir.path().join("mounted.mcap");
    let mut w = BagWriter::create(&bag).unwrap();
    w.add_typed_topic::<tf2_msgs::TFMessage>("/tf_static").unwrap();
    let tf = geometry_msgs::TransformStamped::fixed;
    let mount = tf2_msgs::TFMessage {
        transforms: vec![
            tf("base_link", "cam_link", [0.3, 0.0, 0.2], [0.0, 0.0, 0.0, 1.0]),
            tf("cam_link", "cam_optical", [0.0, 0.0, 0.0], [-0.5, 0.5, -0.5, 0.5]),
        ],
    };
    w.write("/tf_static", 0, 0, &to_cdr(&mount).unwrap()).unwrap();
    for m in McapFile::open(&sample_bag()).unwrap().messages() {
        let m = m.unwrap();
        let (encoding, schema) = m.schema.as_ref().unwrap();
        w.add_topic(&m.topic, &m.ros_type, encoding, schema, Some(&m.channel_metadata)).unwrap();
        w.write(&m.topic, m.log_time, m.publish_time, &m.data).unwrap();
    }
    w.finish().unwrap();

    let input = vec![McapFile::open(&bag).unwrap()];
    let topics: Vec<(String, String)> = input[0].topics().unwrap().into_iter().collect();
    let cameras = choose_topics(&topics, None, None).unwrap();
    let double = sp_dust3r_core::params::args::ParamValue::Double;
    let ros = RosArgs {
        params: vec![
            ("keyframe_max_interval".into(), double(2.0)),
            ("base_frame".into(), sp_dust3r_core::params::args::ParamValue::String("base_link".into())),
            ("publish_tf".into(), sp_dust3r_core::params::args::ParamValue::Bool(true)),
        ],
        ..RosArgs::default()
    };
    let (params, _) = NodeParams::resolve(&ros, "/sp_dust3r").unwrap();
    let features = CpuFeatures(SuperPoint::load(&common::real_dir().join("superpoint")).unwrap());
    let truth = TruePointmaps::new(40);
    let out_path = dir.path().join("out.mcap");
    let mut out = BagWriter::create(&out_path).unwrap();
    let models = Models { features: &features, pairs: Some(&truth), pair_lag: 0 };
    let (summary, _) = replay(&input, &cameras, &mut out, models, &params, &Cancel::new(), |_| {}).unwrap();
    out.finish().unwrap();
    let tracked = summary.get(Counter::FramesTracked);
    assert!(tracked >= 20 && summary.get(Counter::FramesNoMount) == 0, "{summary:?}");

    let mount = Transform::<Cam1, Cam2>::new(
        nalgebra::Rotation3::from_matrix(&nalgebra::Matrix3::new(0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0)),
        nalgebra::Vector3::new(0.3, 0.0, 0.2),
    );
    // Without a metric scale_source the mount's offset (metres) is not composed with the chain
    // (DUSt3R's scale): the base's axes, at the camera.
    let axes = Transform::<Cam1, Cam2>::new(mount.rotation, nalgebra::Vector3::zeros());
    let checked = odometry_against_the_renderer(&out_path, "base_link", &axes, &axes.inverse(), 5e-3);
    assert_eq!(checked, tracked as usize);
}

/// The sample replayed with the trained SuperPoint, node parameters `params`, and `pairs`
/// taking `pair_lag` frames (as a live node's DUSt3R does), into `out`.
fn replay_sample(
    params: Vec<(&str, sp_dust3r_core::params::args::ParamValue)>,
    pairs: &dyn sp_dust3r_core::backend::PairReconstructor,
    pair_lag: usize,
    out: &Path,
) -> sp_dust3r_core::bag::replay::ReplaySummary {
    let input = vec![McapFile::open(&sample_bag()).unwrap()];
    let topics: Vec<(String, String)> = input[0].topics().unwrap().into_iter().collect();
    let cameras = choose_topics(&topics, None, None).unwrap();
    let ros = RosArgs { params: params.into_iter().map(|(k, v)| (k.into(), v)).collect(), ..RosArgs::default() };
    let (params, _) = NodeParams::resolve(&ros, "/sp_dust3r").unwrap();
    let features = CpuFeatures(SuperPoint::load(&common::real_dir().join("superpoint")).unwrap());
    let mut writer = BagWriter::create(out).unwrap();
    let models = Models { features: &features, pairs: Some(pairs), pair_lag };
    let (summary, stopped) = replay(&input, &cameras, &mut writer, models, &params, &Cancel::new(), |_| {}).unwrap();
    writer.finish().unwrap();
    assert!(stopped.is_none());
    summary
}

/// The sample with a keyframe every 0.6 s and pairs of true pointmaps `pair_lag` frames late.
fn replay_with_late_pairs(pair_lag: usize, dir: &Path) -> (sp_dust3r_core::bag::replay::ReplaySummary, PathBuf) {
    use sp_dust3r_core::params::args::ParamValue;
    let out = dir.join(format!("lag{pair_lag}.mcap"));
    let params = vec![("keyframe_max_interval", ParamValue::Double(0.6)), ("publish_tf", ParamValue::Bool(true))];
    (replay_sample(params, &TruePointmaps::new(40), pair_lag, &out), out)
}

/// Pairs that answer seven frames late, one at a time, with the newest waiting one winning (three
/// keyframes are decided before the first pair joins): every pair that runs joins the chain, the
/// map comes exactly seven frames later than with pairs that answer at once, and every frame
/// after it is tracked where the renderer put the camera (1 cm, 0.1 degrees).
#[test]
fn pairs_that_answer_late_join_the_chain_and_every_frame_after_the_first_is_tracked() {
    let dir = tempfile::tempdir().unwrap();
    let (at_once, _) = replay_with_late_pairs(0, dir.path());
    let (late, out) = replay_with_late_pairs(7, dir.path());
    let counts = |s: &sp_dust3r_core::bag::replay::ReplaySummary| {
        [Counter::Keyframes, Counter::PairsDone, Counter::PairDrops, Counter::PairsUnchained, Counter::FramesBeforeMap]
            .map(|c| s.get(c))
    };
    let ([kf0, pairs0, drops0, unchained0, before0], [kf, pairs, drops, unchained, before]) =
        (counts(&at_once), counts(&late));
    eprintln!("at once {:?}\nlate {:?}", at_once.counters(), late.counters());
    assert_eq!((kf, drops0, unchained0), (kf0, 0, 0), "the same keyframes; at once nothing waits");
    assert!(drops >= 1 && pairs < pairs0, "late, a waiting pair is replaced: {drops} dropped");
    assert_eq!(unchained, 0, "every pair that ran joined the chain");
    assert_eq!(before, before0 + 7);
    assert_eq!(late.get(Counter::FramesTracked), 40 - before, "{:?}", late.counters());
    let body = Transform::<Cam1, Cam2>::new(
        nalgebra::Rotation3::from_matrix(&nalgebra::Matrix3::new(0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0)),
        nalgebra::Vector3::zeros(),
    );
    // Frames are placed against keyframes further back than when pairs answer at once (5 mm).
    let checked = odometry_against_the_renderer(&out, "cam_optical", &body, &Transform::identity(), 1e-2);
    assert_eq!(checked, 40 - before as usize);
}

/// The scene's true pointmaps, except that the first pair has no pose (as when DUSt3R's pair
/// is too ambiguous for PairViewer).
struct FirstPairWithoutPose(TruePointmaps);

impl sp_dust3r_core::backend::PairReconstructor for FirstPairWithoutPose {
    fn reconstruct(
        &self,
        r: &sp_dust3r_core::backend::PairRequest<'_>,
    ) -> Result<sp_dust3r_core::backend::PairOutput, sp_dust3r_core::backend::BackendError> {
        let first = self.0.asked() == 0;
        let mut out = self.0.reconstruct(r)?;
        if first {
            (out.pose, out.view2) = (Err(sp_dust3r_core::geometry::NoPose::TooFewPoints { got: 0, need: 3 }), None);
        }
        Ok(out)
    }
    fn describe(&self) -> String {
        "the scene's true pointmaps, the first pair without a pose".into()
    }
    fn health(&self) -> Vec<sp_dust3r_core::backend::BackendHealth> {
        Vec::new()
    }
}

/// A first pair without a pose starts no chain; the next pair starts at its second keyframe
/// (the newest DUSt3R saw, not the first keyframe, which the camera may have left), and the
/// chain, the path and the tracking start there.
#[test]
fn after_a_first_pair_without_a_pose_the_chain_starts_at_its_second_keyframe() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.mcap");
    let params = vec![("keyframe_max_interval", sp_dust3r_core::params::args::ParamValue::Double(2.0))];
    let summary = replay_sample(params, &FirstPairWithoutPose(TruePointmaps::new(40)), 0, &out_path);
    let c = |k: Counter| summary.get(k);
    assert_eq!((c(Counter::NoPose), c(Counter::PairsUnchained)), (1, 1), "{:?}", summary.counters());
    // Keyframes every 2 s of the 5 Hz sample: 0, 10, 20, 30; the chain starts at frame 10.
    let found = sp_dust3r_core::eval::bag::odometry_estimates(&out_path).unwrap();
    let starts = found.keyframes.first().map(|k| k.t);
    assert_eq!(starts, Some(1002.0), "the path's first keyframe: {:?}", found.keyframes);
    assert_eq!(c(Counter::FramesBeforeMap), 21, "no map before the second pair (frame 20) joined");
    assert_eq!(c(Counter::FramesTracked), 19);
}

/// Checks every odometry message of a replay of the sample (made with `publish_tf`): in `odom`,
/// of `child`; placed on the map by the TF `map -> odom` beside it, at the pose `t_fixed_origin *
/// (the renderer's camera motion since frame 0, the first keyframe) * t_cam_child`
/// (`on_map_within_m`, 0.1 degrees), and in odom, which drifts between the pairs' corrections,
/// near it (2 cm, 0.5 degrees). Returns how many there were.
fn odometry_against_the_renderer(
    out: &Path,
    child: &str,
    t_fixed_origin: &Transform<Cam1, Cam2>,
    t_cam_child: &Transform<Cam2, Cam1>,
    on_map_within_m: f64,
) -> usize {
    use sp_dust3r_core::msg::{from_cdr, nav_msgs};
    let gt = load_ground_truth(&GroundTruth::from_path(&sample_bag(), None, None)).unwrap();
    for m in McapFile::open(out).unwrap().messages() {
        let m = m.unwrap();
        if m.topic == "/cam/odom" {
            let o: nav_msgs::Odometry = from_cdr(&m.data).unwrap();
            assert_eq!((o.header.frame_id.as_str(), o.child_frame_id.as_str()), ("odom", child));
        }
    }
    let found = sp_dust3r_core::eval::bag::odometry_estimates(out).unwrap();
    assert_eq!(found.map.len(), found.odom.len(), "map -> odom on /tf beside every odometry message");
    let mut drift = (0.0f64, 0.0f64);
    for (on_map, in_odom) in found.map.iter().zip(&found.odom) {
        let motion = gt[0].pose.inverse().compose(&sp_dust3r_core::eval::pose_at(&gt, on_map.t, 0.0).unwrap());
        let motion = Transform::<Cam2, Cam2>::new(motion.rotation, motion.translation);
        let want = t_fixed_origin.compose(&motion).compose(t_cam_child);
        let off = |got: &sp_dust3r_core::eval::StampedPose| {
            let (r, t) = (got.pose.rotation, got.pose.translation);
            ((t - want.translation).norm(), r.angle_to(&want.rotation).to_degrees())
        };
        let (dt, dr) = off(on_map);
        assert!(dt < on_map_within_m && dr < 0.1, "on the map at {}: {dt:.4}, {dr:.3} deg", on_map.t);
        let (dt, dr) = off(in_odom);
        assert!(dt < 2e-2 && dr < 0.5, "in odom at {}: {dt:.4}, {dr:.3} deg", in_odom.t);
        drift = (drift.0.max(dt), drift.1.max(dr));
    }
    eprintln!("odom's drift from the renderer's path: at most {:.2} mm, {:.3} deg", drift.0 * 1e3, drift.1);
    found.odom.len()
}
