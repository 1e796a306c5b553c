//! The keyframe chain and frame tracking on the rendered sample, with the trained SuperPoint
//! (`../shared/real/superpoint`) and the scene's true pointmaps in DUSt3R's place: pairs in
//! arbitrary scales come out in one, every frame is placed where the renderer put its camera,
//! a frame of another scene is not tracked and the next good one is again; and each tracked
//! frame's published covariance covers its true error (odom being the first keyframe's camera
//! turned to REP 103's axes).

mod common;

use std::sync::Arc;

use common::covariance::{mahalanobis2, CHI2_6_3SIGMA};
use common::true_scene::{play, sample_pipeline, sample_time, OdometrySink, TruePointmaps};
use nalgebra::{Matrix6, Vector3};
use sp_dust3r_core::backend::cpu::CpuFeatures;
use sp_dust3r_core::backend::{CameraK, FeatureExtractor, PairReconstructor, PairRequest};
use sp_dust3r_core::geometry::lens::{Camera, Lens};
use sp_dust3r_core::geometry::{Intrinsics, Transform};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::outputs::odom::{body_from_optical, UNKNOWN_VARIANCE};
use sp_dust3r_core::sample::{FOCAL, FRAMES, HEIGHT, RATE, WIDTH};
use sp_dust3r_core::superpoint::{Keypoints, PostParams, SuperPoint};
use sp_dust3r_core::vo::odometry::{
    track_frame, Attached, FramePose, NotAttached, OdomOrigin, Odometry, OdometryParams, PairView, Reposed, TOdomFrame,
    TOriginFrame,
};
use sp_dust3r_core::vo::tracking::NotTracked;

const N: usize = 40;

fn sample_k() -> CameraK {
    CameraK { fx: FOCAL, fy: FOCAL, cx: WIDTH as f64 / 2.0 - 0.5, cy: HEIGHT as f64 / 2.0 - 0.5 }
}

fn intrinsics() -> Camera {
    let k = sample_k();
    Camera { k: Intrinsics { fx: k.fx, fy: k.fy, cx: k.cx, cy: k.cy }, lens: Lens::Pinhole }
}

struct Setup {
    scene: TruePointmaps,
    features: CpuFeatures,
}

impl Setup {
    fn new(scales: Vec<f64>) -> Self {
        let mut scene = TruePointmaps::new(N);
        scene.scales = scales;
        let features = CpuFeatures(SuperPoint::load(&common::real_dir().join("superpoint")).unwrap());
        Self { scene, features }
    }
    fn keypoints(&self, frame: &Frame) -> Keypoints {
        self.features.detect(frame, &PostParams::default()).unwrap()
    }
    fn view(&self, i: usize) -> (PairView<usize>, Arc<Frame>) {
        let frame = Arc::new(self.scene.frame(i));
        (PairView { stamp: i as i64, payload: i, keypoints: self.keypoints(&frame) }, frame)
    }
    /// The renderer's pose of frame `i` relative to frame `origin`.
    fn truth(&self, origin: usize, i: usize) -> TOriginFrame {
        let t = self.scene.pose(origin).inverse().compose(&self.scene.pose(i));
        Transform::new(t.rotation, t.translation)
    }
    /// Attaches the pair (a, b) to `odometry`.
    fn attach(&self, odometry: &mut Odometry<usize>, a: usize, b: usize) -> Result<Attached, NotAttached> {
        let ((va, fa), (vb, fb)) = (self.view(a), self.view(b));
        let request = PairRequest {
            first: &fa,
            second: &fb,
            known: Some(sample_k()),
            min_confidence: 3.0,
            conf_pct: 50.0,
            lens: Lens::Pinhole,
        };
        let out = self.scene.reconstruct(&request).unwrap();
        odometry.attach(va, vb, &out)
    }
}

fn assert_close(got: &TOriginFrame, want: &TOriginFrame, tolerance: f64, what: &str) {
    let (dr, dt) = (got.rotation_error_deg(want), (got.translation - want.translation).norm());
    assert!(
        dr < 0.1 && dt < tolerance,
        "{what}: {dr:.4} deg, {dt:.5} off ({:?} vs {:?})",
        got.translation,
        want.translation
    );
}

#[test]
fn pairs_in_arbitrary_scales_join_the_chain_in_the_first_pairs_scale() {
    // The second pair 3.7 times the first's size, the third 0.4 times: each relative to the
    // chain by its shared keyframe's two pointmaps.
    let s = Setup::new(vec![1.0, 3.7, 0.4]);
    let mut odometry = Odometry::new(OdometryParams::default());
    assert_eq!(s.attach(&mut odometry, 0, 6).unwrap().scale, 1.0);
    let scale = s.attach(&mut odometry, 6, 12).unwrap().scale;
    assert!((scale - 1.0 / 3.7).abs() < 1e-5, "{scale}");
    let scale = s.attach(&mut odometry, 12, 18).unwrap().scale;
    assert!((scale - 1.0 / 0.4).abs() < 1e-5, "{scale}");
    // A pair that starts off the chain does not join it.
    assert_eq!(s.attach(&mut odometry, 3, 9).unwrap_err(), NotAttached::Unanchored);
    let path = odometry.path();
    assert_eq!(path.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 6, 12, 18]);
    for (stamp, pose) in path {
        let pose = Transform::new(pose.rotation, pose.translation);
        assert_close(&pose, &s.truth(0, *stamp as usize), 1e-4, &format!("keyframe {stamp}"));
    }
    // Keyframe 18's own points land where the renderer's are, in the first pair's (metric) scale.
    let kf = odometry.anchor().unwrap();
    assert_eq!(kf.stamp, 18);
    let i = (256 * kf.pointmap.width + 300) * 3;
    let p = nalgebra::Vector3::from_fn(|k, _| kf.pointmap.points[i + k] as f64);
    let (u, v) = kf.mapping.to_original(300.0, 256.0);
    let want =
        s.scene.pose(18).inverse().apply(&sp_dust3r_core::sample::surface_point(&s.scene.pose(18), u, v).unwrap());
    assert!((p - want).norm() < 1e-4, "{p:?} vs {want:?}");
}

#[test]
fn every_frame_is_tracked_where_the_renderer_put_it_and_tracking_recovers_after_a_foreign_frame() {
    let s = Setup::new(vec![1.0, 2.0]);
    let params = OdometryParams::default();
    let mut odometry = Odometry::new(params);
    // Before any pair: no map, no pose.
    let kp1 = s.keypoints(&s.scene.frame(1));
    assert_eq!(track_frame(odometry.anchor().as_deref(), &kp1, None, &params.tracking).unwrap_err(), NotTracked::NoMap);

    // Keyframes 0, 6, 12 as replay takes them: each pair is attached when its second keyframe
    // arrives; the frames in between are tracked against the newest keyframe on the chain.
    s.attach(&mut odometry, 0, 6).unwrap();
    let mut worst = (0.0f64, 0.0f64);
    for i in 1..=16 {
        if i == 12 {
            s.attach(&mut odometry, 6, 12).unwrap();
        }
        let kp = s.keypoints(&s.scene.frame(i));
        // With CameraInfo's K, and with the keyframe's estimated focal (here the known one).
        for k in [Some(intrinsics()), None] {
            let tracked = track_frame(odometry.anchor().as_deref(), &kp, k, &params.tracking)
                .unwrap_or_else(|e| panic!("frame {i}: {e}"));
            let (truth, got) = (s.truth(0, i), on_chain(&tracked));
            let dr = got.rotation_error_deg(&truth);
            let dt = (got.translation - truth.translation).norm();
            worst = (worst.0.max(dr), worst.1.max(dt));
            // The room is 2 to 6 m deep from the camera: 5 mm is 0.1-0.25 % of it (integer
            // keypoint positions: a few tenths of a pixel).
            assert!(
                dr < 0.1 && dt < 5e-3,
                "frame {i}: {dr:.4} deg, {dt:.5} off (against keyframe {}, {} inliers)",
                tracked.keyframe,
                tracked.tracked.inliers
            );
            assert!(tracked.tracked.inliers >= 100, "frame {i}: {:?}", tracked.tracked);
        }
    }
    eprintln!("worst of 32 poses: {:.4} deg, {:.2} mm", worst.0, worst.1 * 1e3);

    // A frame of another scene (the COCO image) matches nothing: no pose, and no pose made up.
    let coco = Frame::decode(&std::fs::read(common::real_dir().join("coco/000000039769.png")).unwrap()).unwrap();
    let lost = track_frame(odometry.anchor().as_deref(), &s.keypoints(&coco), Some(intrinsics()), &params.tracking);
    assert!(
        matches!(
            lost,
            Err(NotTracked::TooFewMatches { .. } | NotTracked::TooFewPoints { .. } | NotTracked::TooFewInliers { .. })
        ),
        "{lost:?}"
    );
    // The next frame of the sequence is tracked again.
    let back = track_frame(odometry.anchor().as_deref(), &s.keypoints(&s.scene.frame(17)), None, &params.tracking);
    assert_close(&on_chain(&back.unwrap()), &s.truth(0, 17), 5e-3, "frame 17");
}

/// A frame's odometry pose read on the chain: here no keyframe was tracked before its pair
/// joined, so every keyframe's odometry pose is its chain pose and the two frames are one.
fn on_chain(fp: &FramePose) -> TOriginFrame {
    TOriginFrame::new(fp.t_odom_frame.rotation, fp.t_odom_frame.translation)
}

/// REP 105 on the chain: a keyframe that tracking placed off its pair's pose keeps tracking's
/// pose in the odometry (frames tracked after it go on from there, no step), and the chain's
/// correction, `map -> odom`, puts it and them where the pairs (here the renderer) say.
#[test]
fn a_keyframe_tracked_off_its_pair_pose_keeps_the_odometry_continuous_and_the_correction_moves_to_the_map() {
    let s = Setup::new(vec![1.0, 2.0, 0.5]);
    let params = OdometryParams::default();
    let mut odometry = Odometry::new(params);
    s.attach(&mut odometry, 0, 6).unwrap();
    assert_close(&on_map(&odometry, &Transform::identity()), &Transform::identity(), 1e-9, "no correction yet");

    // Tracking had drifted by 1 degree and 2 cm when keyframe 12 arrived.
    let drift = Transform::<OdomOrigin, OdomOrigin>::new(
        nalgebra::Rotation3::from_euler_angles(0.0, 1f64.to_radians(), 0.0),
        Vector3::new(0.02, 0.0, 0.0),
    );
    let in_odom = |t: TOriginFrame| drift.compose(&TOdomFrame::new(t.rotation, t.translation));
    let tracked = in_odom(s.truth(0, 12));
    odometry.keyframe_tracked(12, tracked);
    let joined = s.attach(&mut odometry, 6, 12).unwrap();
    let (deg, _) = joined.disagreement.expect("keyframe 12 was tracked");
    assert!((deg - 1.0).abs() < 0.01, "pair and tracking {deg} degrees apart");
    let kf = odometry.keyframe(12).unwrap().clone();
    assert_eq!((kf.t_odom_kf.rotation, kf.t_odom_kf.translation), (tracked.rotation, tracked.translation));
    assert_close(
        &TOriginFrame::new(kf.t_origin_kf.rotation, kf.t_origin_kf.translation),
        &s.truth(0, 12),
        1e-4,
        "on the chain",
    );

    // A frame tracked against it: in the odometry where the drift put it, on the map where the
    // renderer did.
    let frame =
        track_frame(odometry.anchor().as_deref(), &s.keypoints(&s.scene.frame(14)), None, &params.tracking).unwrap();
    let want = in_odom(s.truth(0, 14));
    let odom_error = (frame.t_odom_frame.translation - want.translation).norm();
    assert!(odom_error < 5e-3 && frame.t_odom_frame.rotation_error_deg(&want) < 0.1, "in odom: {odom_error}");
    assert_close(&on_map(&odometry, &frame.t_odom_frame), &s.truth(0, 14), 5e-3, "frame 14 on the map");

    // A keyframe that joins untracked takes its pair's pose moved by the same correction.
    s.attach(&mut odometry, 12, 18).unwrap();
    let kf = odometry.keyframe(18).unwrap().clone();
    let want = in_odom(s.truth(0, 18));
    assert!((kf.t_odom_kf.translation - want.translation).norm() < 1e-4, "keyframe 18 in odom");
    assert_close(
        &on_map(&odometry, &Transform::new(kf.t_odom_kf.rotation, kf.t_odom_kf.translation)),
        &s.truth(0, 18),
        1e-4,
        "keyframe 18 on the map",
    );

    // Moved in the odometry (a late pair caught up with), the newest keyframe takes `map ->
    // odom` with it: a frame tracked against it lands elsewhere in the odometry and where the
    // renderer put it on the map.
    let further = Transform::<OdomOrigin, OdomOrigin>::new(
        nalgebra::Rotation3::from_euler_angles(0.5f64.to_radians(), 0.0, 0.0),
        Vector3::new(0.0, 0.01, 0.0),
    );
    let reposed = Reposed { keyframe: 18, t_odom_kf: further.compose(&kf.t_odom_kf) };
    assert!(!odometry.repose(Reposed { keyframe: 19, ..reposed }), "not on the chain");
    assert!(odometry.repose(reposed));
    let frame =
        track_frame(odometry.anchor().as_deref(), &s.keypoints(&s.scene.frame(20)), None, &params.tracking).unwrap();
    let want = further.compose(&in_odom(s.truth(0, 20)));
    let odom_error = (frame.t_odom_frame.translation - want.translation).norm();
    assert!(odom_error < 5e-3 && frame.t_odom_frame.rotation_error_deg(&want) < 0.1, "in odom: {odom_error}");
    assert_close(&on_map(&odometry, &frame.t_odom_frame), &s.truth(0, 20), 5e-3, "frame 20 on the map");
}

/// A pose in the odometry placed on the chain by its newest correction.
fn on_map(odometry: &Odometry<usize>, t_odom_frame: &TOdomFrame) -> TOriginFrame {
    odometry.t_origin_odom().compose(t_odom_frame)
}

struct Odom;
struct Cam;

#[test]
fn the_stated_covariance_covers_the_true_error_of_nine_in_ten_tracked_frames() {
    let pipeline = sample_pipeline(Vec::new(), "plumb_bob", vec![0.0; 5]);
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
        let cov = Matrix6::from_row_slice(&o.pose.covariance);
        assert!(cov.diagonal().iter().all(|&v| v > 0.0 && v < 1.0), "a stated covariance: {cov}");
        assert_eq!(o.twist.covariance[0], UNKNOWN_VARIANCE, "the twist's is unknown");
        m2.push(mahalanobis2(o, &truth));
    }
    let n = m2.len();
    let within = m2.iter().filter(|&&m| m <= CHI2_6_3SIGMA).count();
    let sigmas: Vec<f64> = sink.0.iter().map(|o| o.pose.covariance[0].sqrt() * 1e3).collect();
    eprintln!(
        "{within} of {n} tracked frames within the stated 3 sigma (x sigma {sigmas:.2?} mm); Mahalanobis^2 {m2:.1?}"
    );
    assert!(n >= 30);
    assert!(within * 10 >= n * 9, "{within} of {n}");
}
