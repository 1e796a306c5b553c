//! Lens distortion undone: the rendered sample seen through a strongly distorted lens (the
//! renderer bends every pixel's ray as the lens model says; DUSt3R's double gives the true points
//! on those bent rays), with CameraInfo carrying the lens, is tracked as accurately as the same
//! scene through a pinhole; with the lens left out of CameraInfo it is not.

mod common;

use common::true_scene::{play, sample_pipeline, sample_time, OdometrySink, TruePointmaps};
use sp_dust3r_core::eval::trajectory::{evaluate_trajectory, RpeDelta, TrajectoryReport};
use sp_dust3r_core::eval::StampedPose;
use sp_dust3r_core::geometry::lens::Lens;
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::sample::FRAMES;

/// `scene`'s frames, with a CameraInfo saying `model` and `d`, through the pipeline; the
/// odometry scored against the scene's camera poses.
fn run(scene: &TruePointmaps, model: &str, d: Vec<f64>) -> TrajectoryReport {
    let pipeline = sample_pipeline(Vec::new(), model, d);
    let mut sink = OdometrySink::default();
    play(&pipeline, scene, &mut sink, |_, _| {});
    let truth: Vec<StampedPose> = (0..FRAMES)
        .map(|i| {
            let p = scene.pose(i);
            StampedPose { t: sample_time(i), pose: Transform::new(p.rotation, p.translation) }
        })
        .collect();
    evaluate_trajectory(&sink.poses(), FRAMES, &truth, 0.001, RpeDelta::Frames(1)).unwrap()
}

#[test]
fn a_strongly_distorted_camera_is_tracked_as_accurately_as_a_pinhole() {
    let pinhole = run(&TruePointmaps::new(FRAMES), "plumb_bob", vec![0.0; 5]);
    eprintln!("pinhole: {pinhole}");
    // Barrel distortion moving the image corners by about 70 px.
    let d = [-0.35, 0.12, 0.001, -0.001, -0.02];
    let scene = TruePointmaps::through(Lens::PlumbBob(d), FRAMES);
    let distorted = run(&scene, "plumb_bob", d.to_vec());
    eprintln!("plumb_bob {d:?}, undone: {distorted}");
    let ignored = run(&scene, "plumb_bob", vec![0.0; 5]);
    eprintln!("plumb_bob {d:?}, left out of CameraInfo: {ignored}");
    assert!(distorted.num_tracked + 2 >= pinhole.num_tracked, "{distorted}");
    assert!(distorted.ate.rmse < pinhole.ate.rmse * 2.0 + 0.002, "{distorted}\nvs {pinhole}");
    assert!(distorted.rpe_rotation_deg.rmse < pinhole.rpe_rotation_deg.rmse * 2.0 + 0.05, "{distorted}");
    assert!(ignored.ate.rmse > distorted.ate.rmse * 3.0, "{ignored}");
}
