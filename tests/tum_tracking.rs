//! Tracking on real camera data: the TUM RGB-D fr3/long_office_household frames in
//! `../shared/real` (Asus Xtion, 30 Hz, motion-capture ground truth), with the trained
//! SuperPoint and, in DUSt3R's place, pointmaps made from the registered depth maps (each view's
//! points back-projected with the published intrinsics, view 2 moved into camera 1's frame by the
//! ground truth: the pointmaps a perfect DUSt3R would give, with the sensor's holes and noise).
//! The frames go through `replay` as a bag and its odometry through the same metrics as
//! `sp_dust3r eval`: every frame after the first pair tracked, ATE and RPE against the motion
//! capture.

mod common;

use std::path::{Path, PathBuf};

use common::tum::{depth_oracle, replay_tum, write_bag, DepthEncoding, Sequence, FR3};
use sp_dust3r_core::bag::replay::{choose_depth_topic, choose_topics, ReplaySummary};
use sp_dust3r_core::bag::McapFile;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::{load_ground_truth, GroundTruth};
use sp_dust3r_core::eval::evaluate_bag;
use sp_dust3r_core::eval::trajectory::RpeDelta;
use sp_dust3r_core::params::args::{ParamValue, RosArgs};
use sp_dust3r_core::params::NodeParams;

/// `seq` written as a bag in `dir` (its camera's info found beside the images, and its depth
/// images when `extra` sets `scale_source: depth`) and replayed with `extra` parameters, each
/// pair joining `pair_lag` frames after its keyframe: the input bag, the output bag and the
/// replay's summary.
fn replayed(
    seq: &Sequence,
    extra: Vec<(&str, ParamValue)>,
    pair_lag: usize,
    dir: &Path,
) -> (PathBuf, PathBuf, ReplaySummary) {
    let bag = dir.join("tum.mcap");
    let depth = extra.iter().any(|(k, v)| *k == "scale_source" && *v == ParamValue::String("depth".into()));
    write_bag(seq, &bag, depth.then_some(DepthEncoding::Millimetres));
    let topics: Vec<(String, String)> = McapFile::open(&bag).unwrap().topics().unwrap().into_iter().collect();
    let mut cameras = choose_topics(&topics, None, None).unwrap();
    if depth {
        cameras.depth = Some(choose_depth_topic(&topics, None).unwrap());
    }
    assert_eq!(cameras.camera_info.as_deref(), Some("/camera/rgb/camera_info"));
    let out_path = dir.join("out.mcap");
    let summary = replay_tum(&bag, &cameras, extra, &depth_oracle(seq), pair_lag, &out_path);
    (bag, out_path, summary)
}

#[test]
fn real_frames_are_tracked_against_the_motion_capture() {
    let dir = tempfile::tempdir().unwrap();
    let (bag, out_path, summary) = replayed(&FR3, Vec::new(), 0, dir.path());
    let n = FR3.frames().len();
    let pairs = summary.get(Counter::PairsDone);
    assert_eq!(summary.get(Counter::FramesIn) as usize, n);
    assert_eq!(summary.poses(), pairs, "every pair of depth pointmaps has a pose");
    assert_eq!(summary.get(Counter::PairsUnchained), 0, "every pair joins the chain");

    let gt = load_ground_truth(&GroundTruth::from_path(&bag, None, None)).unwrap();
    let report = evaluate_bag(&out_path, &gt, 0.02, sp_dust3r_core::eval::trajectory::RpeDelta::Frames(1)).unwrap();
    let t = report.trajectory.as_ref().expect("the odometry is scored");
    let before = summary.get(Counter::FramesBeforeMap);
    eprintln!(
        "TUM fr3/long_office_household, {n} frames, {} pairs: {t} ({before} before the first pair, not tracked {:?}), keyframe gaps {:?}, AUC@5 {:.3}",
        pairs,
        summary.get(Counter::FramesNotTracked),
        summary.keyframe_gaps,
        report.auc[0]
    );
    assert_eq!(summary.get(Counter::FramesTracked) + before, n as u64, "every frame after the first pair is tracked");
    assert!(before <= 5, "the first pair joins at frame {before}");
    assert_eq!(t.num_scored, t.num_tracked);
    // The hand-held camera moves about 2 cm in these 0.4 s, so a share of the path (and the
    // alignment's scale over it) says little; the errors are judged in millimetres and degrees,
    // at about twice what was measured (1.7 mm ATE, 2.2 mm and 0.14 deg RPE per frame).
    assert!(t.ate.rmse < 0.004, "{:?}", t.ate);
    assert!(
        t.rpe_translation.rmse < 0.005 && t.rpe_rotation_deg.rmse < 0.3,
        "{:?} {:?}",
        t.rpe_translation,
        t.rpe_rotation_deg
    );
}

/// Each tracked frame's squared Mahalanobis distance from the motion capture under the
/// odometry's stated covariance, with its position error and stated x sigma (mm). The covariance
/// states how well a frame is placed against its keyframe, so the frame is judged where its
/// keyframe stands on the chain: on the map (its odometry pose and covariance moved by the TF
/// `map -> odom` beside it), against the camera's motion since the first keyframe (the map's
/// origin, with REP 103's axes).
fn stated_against_true(seq: &Sequence) -> Vec<(f64, f64, f64)> {
    use common::covariance::mahalanobis2;
    use sp_dust3r_core::eval::pose_at;
    use sp_dust3r_core::geometry::Transform;
    use sp_dust3r_core::msg::{from_cdr, nav_msgs, tf2_msgs, RosMessage};
    use sp_dust3r_core::outputs::odom::body_from_optical;
    let dir = tempfile::tempdir().unwrap();
    let (_, out_path, _) = replayed(seq, vec![("publish_tf", ParamValue::Bool(true))], 0, dir.path());
    let gt = seq.ground_truth();
    let origin = pose_at(&gt, seq.frames()[0].0, 0.0).unwrap();
    let optical = Transform::<(), ()>::new(body_from_optical(), nalgebra::Vector3::zeros());
    let mut judged = Vec::new();
    let mut map_odom = std::collections::HashMap::new();
    let messages: Vec<_> = McapFile::open(&out_path).unwrap().messages().map(Result::unwrap).collect();
    for m in messages.iter().filter(|m| m.ros_type == tf2_msgs::TFMessage::ROS_TYPE) {
        let tf: tf2_msgs::TFMessage = from_cdr(&m.data).unwrap();
        let t = tf.transforms.iter().find(|t| t.header.frame_id == "map" && t.child_frame_id == "odom").unwrap();
        map_odom.insert((t.header.stamp.sec, t.header.stamp.nanosec), t.transform.clone());
    }
    for m in messages.iter().filter(|m| m.ros_type == nav_msgs::Odometry::ROS_TYPE) {
        let o = on_map(from_cdr(&m.data).unwrap(), &map_odom);
        let motion = origin.inverse().compose(&pose_at(&gt, o.header.stamp.seconds(), 0.0).unwrap());
        let truth = optical.compose(&Transform::<(), ()>::new(motion.rotation, motion.translation));
        let p = &o.pose.pose.position;
        let error = (nalgebra::Vector3::new(p.x, p.y, p.z) - truth.translation).norm();
        judged.push((mahalanobis2(&o, &truth), error * 1e3, o.pose.covariance[0].sqrt() * 1e3));
    }
    judged
}

/// An odometry message moved onto the map by the `map -> odom` transform at its stamp (sec,
/// nanosec): its pose composed, its covariance turned.
fn on_map(
    mut o: sp_dust3r_core::msg::nav_msgs::Odometry,
    map_odom: &std::collections::HashMap<(i32, u32), sp_dust3r_core::msg::geometry_msgs::Transform>,
) -> sp_dust3r_core::msg::nav_msgs::Odometry {
    use nalgebra::{Isometry3, Matrix6, Quaternion, Translation3, UnitQuaternion};
    let m = &map_odom[&(o.header.stamp.sec, o.header.stamp.nanosec)];
    let iso = |t: [f64; 3], q: [f64; 4]| {
        Isometry3::from_parts(
            Translation3::new(t[0], t[1], t[2]),
            UnitQuaternion::from_quaternion(Quaternion::new(q[3], q[0], q[1], q[2])),
        )
    };
    let (mt, mq) = (&m.translation, &m.rotation);
    let map = iso([mt.x, mt.y, mt.z], [mq.x, mq.y, mq.z, mq.w]);
    let (p, q) = (&o.pose.pose.position, &o.pose.pose.orientation);
    let pose = map * iso([p.x, p.y, p.z], [q.x, q.y, q.z, q.w]);
    (o.pose.pose.position.x, o.pose.pose.position.y, o.pose.pose.position.z) =
        (pose.translation.x, pose.translation.y, pose.translation.z);
    let r = pose.rotation;
    (o.pose.pose.orientation.x, o.pose.pose.orientation.y, o.pose.pose.orientation.z, o.pose.pose.orientation.w) =
        (r.i, r.j, r.k, r.w);
    // Position and orientation errors both turn with the map's rotation.
    let mut turn = Matrix6::zeros();
    let rm = map.rotation.to_rotation_matrix();
    turn.fixed_view_mut::<3, 3>(0, 0).copy_from(rm.matrix());
    turn.fixed_view_mut::<3, 3>(3, 3).copy_from(rm.matrix());
    let c = turn * Matrix6::from_row_slice(&o.pose.covariance) * turn.transpose();
    o.pose.covariance = std::array::from_fn(|i| c[(i / 6, i % 6)]);
    o
}

/// The stated 3-sigma bounds hold the true error of nine in ten tracked frames, on fr3 and on
/// the first 4 s of the fast, distorted fr1/rpy (measured on the map: fr3 8 of 8, fr1/rpy 110
/// of 116).
#[test]
fn the_stated_covariance_covers_the_true_error_on_real_frames() {
    use common::covariance::CHI2_6_3SIGMA;
    for seq in [FR3, common::tum::rpy(120)] {
        let judged = stated_against_true(&seq);
        let within = judged.iter().filter(|m| m.0 <= CHI2_6_3SIGMA).count();
        eprintln!(
            "{}: {within} of {} tracked frames within 3 sigma; (Mahalanobis^2, error mm, x sigma mm) {judged:.2?}",
            seq.dir,
            judged.len()
        );
        assert!(judged.len() >= 8);
        assert!(within * 10 >= judged.len() * 9, "{}: {within} of {}", seq.dir, judged.len());
    }
}

/// The node's own keyframe intervals, in place of replay_tum's close ones.
fn node_keyframe_intervals() -> Vec<(&'static str, ParamValue)> {
    let (node, _) = NodeParams::resolve(&RosArgs::default(), "/sp_dust3r").unwrap();
    vec![
        ("keyframe_min_interval", ParamValue::Double(node.keyframe_min_interval)),
        ("keyframe_max_interval", ParamValue::Double(node.keyframe_max_interval)),
    ]
}

/// fr1/rpy's every `step`th frame replayed at the node's own keyframe intervals (in place of
/// replay_tum's close ones), pairs joining `pair_lag` frames late. Asserts that every frame
/// after the first pair is tracked, that `placed_by` (how the frames the test is about were
/// placed) counts at least that many, and that the odometry's rotation error per frame stays
/// under `max_deg` (its median under `median_deg`).
fn all_tracked_far_apart(step: usize, pair_lag: usize, placed_by: (Counter, u64), (max_deg, median_deg): (f64, f64)) {
    let seq = Sequence { step, ..common::tum::rpy(usize::MAX) };
    let dir = tempfile::tempdir().unwrap();
    let (bag, out_path, summary) = replayed(&seq, node_keyframe_intervals(), pair_lag, dir.path());
    let gt = load_ground_truth(&GroundTruth::from_path(&bag, None, None)).unwrap();
    let report = evaluate_bag(&out_path, &gt, 0.02, RpeDelta::Frames(1)).unwrap();
    let t = report.trajectory.expect("the odometry is scored");
    let n = seq.frames().len() as u64;
    let before = summary.get(Counter::FramesBeforeMap);
    let [second, turned, drawn] =
        [Counter::FramesSecondTry, Counter::FramesTurned, Counter::FramesDrawn].map(|c| summary.get(c));
    eprintln!(
        "fr1/rpy every {step}th frame, pairs {pair_lag} frames late, {n} frames: {t} ({before} before the first pair, {second} by the second try, {turned} turned, {drawn} on drawn points)"
    );
    assert_eq!(summary.get(Counter::FramesTracked) + before, n, "every frame after the first pair is tracked");
    let (counter, at_least) = placed_by;
    assert!(summary.get(counter) >= at_least, "{counter:?}: {} (at least {at_least})", summary.get(counter));
    let r = &t.rpe_rotation_deg;
    assert!(r.max < max_deg && r.median < median_deg, "{r:?}");
}

/// Issue 35's live losses, offline: fr1/rpy's every 12th frame (0.4 s apart, the spacing a live
/// node sharing its cores took during the fast roll; the camera turns 25-45 degrees between
/// frames), at the default keyframe parameters. Frames whose descriptors changed past the first
/// matching are placed by the second try, and every frame after the first pair is tracked, each
/// frame's motion within a few degrees of the motion capture's.
#[test]
fn frames_far_apart_in_a_fast_roll_are_all_tracked() {
    // Measured: RPE 20 mm / 1.06 degrees median, 1.72 degrees at most, between frames 0.4 s
    // and up to 45 degrees apart.
    all_tracked_far_apart(12, 0, (Counter::FramesSecondTry, 1), (3.5, 2.0));
}

/// Frames further apart still: every 20th (0.67 s; the camera rolls up to 55 degrees between
/// two). Frames rolled too far for either matching are placed once described again turned
/// back, and every frame after the first pair is tracked (without the turn, 6 of 8).
#[test]
fn frames_rolled_far_between_two_are_placed_described_again_turned() {
    // Measured: RPE 10 mm / 0.98 degrees median, 1.51 degrees at most.
    all_tracked_far_apart(20, 0, (Counter::FramesTurned, 1), (3.5, 2.0));
}

/// Pairs that join a frame late, at every 15th frame (0.5 s): the first frames after the first
/// pair come with no tracked frame before them, rolled 90-140 degrees from both keyframes, and
/// are placed described again turned by a quarter turn or more (with turns of 45 degrees either
/// way alone, 9 of 11).
#[test]
fn frames_rolled_a_quarter_turn_while_a_pair_was_late_are_placed_turned() {
    // Measured: RPE 15 mm / 1.10 degrees median, 2.86 degrees at most.
    all_tracked_far_apart(15, 1, (Counter::FramesTurned, 2), (4.0, 2.0));
}

/// Every 18th frame (0.6 s), pairs joining 2 frames late: the frame after a keyframe whose pair is
/// pending matches it on 39 keypoints only, 13-15 of them with a point even once the pointmaps
/// are drawn into it, and is placed described again turned (without the turn, 6 of 7 tracked).
#[test]
fn a_frame_with_too_few_points_even_drawn_is_placed_turned() {
    // Two turned: one more than the frame whose descriptors alone matched too little.
    // Measured: RPE 17 mm / 1.44 degrees median, 2.69 degrees at most.
    all_tracked_far_apart(18, 2, (Counter::FramesTurned, 2), (4.0, 2.5));
}

/// Every 8th frame (0.27 s), pairs joining a frame late: a keyframe placed on few points (by the
/// second try, against an older keyframe) carries few to the frame after it, whose matches land
/// on it while its pair is pending. That frame is placed on the keyframes' pointmaps drawn into
/// the keyframe's view (without them, 20 of 21: too few points).
#[test]
fn the_frame_after_a_keyframe_whose_pair_is_late_is_placed_on_pointmaps_drawn_into_it() {
    // Measured: RPE 14 mm / 0.83 degrees median, 1.92 degrees at most.
    all_tracked_far_apart(8, 1, (Counter::FramesDrawn, 1), (3.5, 2.0));
}

/// Every 20th frame (0.67 s), pairs joining 2 frames late: the first pair joins as the fourth
/// frame comes, the two keyframes between are left out of the chain (newer pairs replaced
/// theirs), so the first frame tracked comes 2 s after the newest keyframe on the chain, rolled
/// past both matchings, and is placed described again turned (turning only within 2 s of the
/// last frame placed, 5 of 6 tracked).
#[test]
fn the_first_frame_after_a_first_pair_that_joined_late_is_placed_turned() {
    // Measured: RPE 24 mm / 2.32 degrees median, 3.73 degrees at most, over motions of 24-73
    // degrees; the ORB baseline's on the same motions 1.44 median, 2.78 at most.
    all_tracked_far_apart(20, 2, (Counter::FramesTurned, 1), (4.5, 3.0));
}

/// Pairs 1.5 s late, as slow pairs come (fr1/rpy's every 3rd frame, pairs joining 15 frames
/// late), with the registered depth images in the bag and `scale_source: depth`: the frames
/// between pairs stand on the depth their own images measured (`depth_tracking`), not on depth
/// carried from an ever older pointmap, and the odometry, in metres, drifts about as little as
/// the ORB baseline's, which reads each frame's depth too (3.46 % of its path).
#[test]
fn with_depth_images_the_frames_between_late_pairs_stand_on_measured_depth() {
    // Measured: ATE 3.5 % of the path (3.9 % rigidly aligned, no scale fitted), RPE 6.8 mm
    // median; with `depth_tracking: false`, 5.2 % (6.6 %) and 8.3 mm.
    let seq = Sequence { step: 3, ..common::tum::rpy(usize::MAX) };
    let dir = tempfile::tempdir().unwrap();
    let mut params = node_keyframe_intervals();
    params.push(("scale_source", ParamValue::String("depth".into())));
    let (bag, out_path, summary) = replayed(&seq, params, 15, dir.path());
    let gt = load_ground_truth(&GroundTruth::from_path(&bag, None, None)).unwrap();
    let t =
        evaluate_bag(&out_path, &gt, 0.02, RpeDelta::Frames(1)).unwrap().trajectory.expect("the odometry is scored");
    eprintln!("fr1/rpy every 3rd frame, pairs 15 frames late, depth in tracking: {t}");
    let n = seq.frames().len() as u64;
    assert_eq!(summary.get(Counter::FramesTracked) + summary.get(Counter::FramesBeforeMap), n);
    assert_eq!(summary.get(Counter::FramesMeasured), summary.get(Counter::FramesTracked));
    assert!(t.ate_percent_of_path < 4.3 && t.ate_se3_percent_of_path < 5.0, "{t}");
    assert!(t.rpe_translation.median < 0.0076, "{:?}", t.rpe_translation);
}
