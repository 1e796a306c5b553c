//! Tracking on real camera data: the TUM RGB-D fr3/long_office_household frames in
//! `../shared/real` (Asus Xtion, 30 Hz, motion-capture ground truth), with the trained
//! SuperPoint and, in DUSt3R's place, pointmaps made from the registered depth maps (each view's
//! points back-projected with the published intrinsics, view 2 moved into camera 1's frame by the
//! ground truth: the pointmaps a perfect DUSt3R would give, with the sensor's holes and noise).
//! The frames go through `replay` as a bag and its odometry through the same metrics as
//! `sp_dust3r eval`: every frame after the first pair tracked, ATE and RPE against the motion
//! capture.

mod common;

use common::tum::{associations, replay_tum, write_bag, DepthPointmaps, FIRST};
use sp_dust3r_core::bag::replay::choose_topics;
use sp_dust3r_core::bag::McapFile;
use sp_dust3r_core::diagnostics::Counter;
use sp_dust3r_core::eval::bag::{load_ground_truth, GroundTruth};
use sp_dust3r_core::eval::evaluate_bag;

#[test]
fn real_frames_are_tracked_against_the_motion_capture() {
    let dir = tempfile::tempdir().unwrap();
    let bag = dir.path().join("tum.mcap");
    write_bag(&bag, None);
    let topics: Vec<(String, String)> = McapFile::open(&bag).unwrap().topics().unwrap().into_iter().collect();
    let cameras = choose_topics(&topics, None, None).unwrap();
    assert_eq!(cameras.camera_info.as_deref(), Some("/camera/rgb/camera_info"));
    let out_path = dir.path().join("out.mcap");
    let summary = replay_tum(&bag, &cameras, Vec::new(), &DepthPointmaps::new(), &out_path);
    let n = associations().len() - FIRST;
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
