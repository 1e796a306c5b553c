//! The odometry's stated uncertainty against its true error: the rendered sample with the trained
//! SuperPoint and the scene's true pointmaps (`common::true_scene`), each tracked frame's pose
//! error in odom (against the renderer's camera, odom being the first keyframe's camera turned to
//! REP 103's axes) measured in the covariance it was published with.

mod common;

use common::true_scene::{play, sample_time, OdometrySink, TruePointmaps};
use nalgebra::{Matrix6, Vector3, Vector6};
use sp_dust3r_core::geometry::Transform;
use sp_dust3r_core::msg::sensor_msgs;
use sp_dust3r_core::outputs::odom::{body_from_optical, UNKNOWN_VARIANCE};
use sp_dust3r_core::params::args::{ParamValue, RosArgs};
use sp_dust3r_core::params::NodeParams;
use sp_dust3r_core::pipeline::Pipeline;
use sp_dust3r_core::sample::{camera, FRAMES, RATE};

struct Odom;
struct Cam;

#[test]
fn the_stated_covariance_covers_the_true_error_of_nine_in_ten_tracked_frames() {
    let ros = RosArgs {
        params: vec![
            ("keyframe_min_interval".into(), ParamValue::Double(0.0)),
            ("keyframe_max_interval".into(), ParamValue::Double(0.5)),
        ],
        ..RosArgs::default()
    };
    let pipeline = Pipeline::new(NodeParams::resolve(&ros, "/sp_dust3r").unwrap().0);
    let k = camera(sp_dust3r_core::geometry::lens::Lens::Pinhole).k;
    let (w, h) = (sp_dust3r_core::sample::WIDTH, sp_dust3r_core::sample::HEIGHT);
    let kk = [k.fx, 0.0, k.cx, 0.0, k.fy, k.cy, 0.0, 0.0, 1.0];
    pipeline.on_camera_info(sensor_msgs::CameraInfo { width: w, height: h, k: kk, ..Default::default() });
    let scene = TruePointmaps::new(FRAMES);
    let mut sink = OdometrySink::default();
    play(&pipeline, &scene, &mut sink, |_, _| {});
    // odom: frame 0's camera (the first keyframe) with REP 103's axes.
    let t_odom_cam0 = Transform::<Odom, Cam>::new(body_from_optical(), Vector3::zeros());
    let cam0 = scene.pose(0);
    let mut m2 = Vec::new();
    for o in &sink.0 {
        let i = ((o.header.stamp.seconds() - sample_time(0)) * RATE).round() as usize;
        let motion = cam0.inverse().compose(&scene.pose(i));
        let truth = t_odom_cam0.compose(&Transform::<Cam, Cam>::new(motion.rotation, motion.translation));
        let (p, q) = (&o.pose.pose.position, &o.pose.pose.orientation);
        let r = nalgebra::UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(q.w, q.x, q.y, q.z));
        // The error as the left perturbation that takes the truth to the estimate, in odom.
        let d = r.to_rotation_matrix() * truth.rotation.inverse();
        let (phi, rho) = (d.scaled_axis(), Vector3::new(p.x, p.y, p.z) - d * truth.translation);
        let e = Vector6::new(rho.x, rho.y, rho.z, phi.x, phi.y, phi.z);
        let cov = Matrix6::from_row_slice(&o.pose.covariance);
        assert!(cov.diagonal().iter().all(|&v| v > 0.0 && v < 1.0), "a stated covariance: {cov}");
        assert_eq!(o.twist.covariance[0], UNKNOWN_VARIANCE, "the twist's is unknown");
        m2.push((e.transpose() * cov.try_inverse().unwrap() * e)[0]);
    }
    let n = m2.len();
    let within = m2.iter().filter(|&&m| m <= 20.06).count();
    let sigmas: Vec<f64> = sink.0.iter().map(|o| o.pose.covariance[0].sqrt() * 1e3).collect();
    eprintln!(
        "{within} of {n} tracked frames within the stated 3 sigma (x sigma {sigmas:.2?} mm); Mahalanobis^2 {m2:.1?}"
    );
    assert!(n >= 30);
    assert!(within * 10 >= n * 9, "{within} of {n}");
}
