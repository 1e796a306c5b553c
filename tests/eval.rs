//! `sp_dust3r eval` on a small synthetic case whose metrics are computed by hand: three pairs
//! (a perfect one, one with a 12 degree rotation error, one without a pose) against a TUM
//! trajectory, and against the same trajectory as PoseStamped and as TF in bags.

mod common;

use std::process::Command;

use nalgebra::{Rotation3, Vector3};
use serde_json::Value;
use sp_dust3r_core::bag::BagWriter;
use sp_dust3r_core::dust3r::Pointmap;
use sp_dust3r_core::geometry::{PairPose, PnpWorld, PoseMode, TCam1Cam2};
use sp_dust3r_core::msg::convert::{pointcloud_msg, pose_msgs, ColouredPoints};
use sp_dust3r_core::msg::{builtin_interfaces, geometry_msgs, node_msgs, sensor_msgs, std_msgs, tf2_msgs, to_cdr};

fn header(sec: i32) -> std_msgs::Header {
    std_msgs::Header { stamp: builtin_interfaces::Time { sec, nanosec: 0 }, frame_id: "cam_optical".into() }
}

fn tum_line(t: f64, r: &Rotation3<f64>, p: &Vector3<f64>) -> String {
    let q = nalgebra::UnitQuaternion::from_rotation_matrix(r);
    format!("{t} {} {} {} {} {} {} {}\n", p.x, p.y, p.z, q.i, q.j, q.k, q.w)
}

/// A run that must fail: its stderr.
fn eval_error(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sp_dust3r")).arg("eval").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn eval(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_sp_dust3r")).arg("eval").args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[allow(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom; the 100-line limit holds for the library and binaries"
)]
#[test]
fn metrics_match_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    // The relative motion between consecutive frames: camera 2 in camera 1's frame.
    let p = TCam1Cam2::new(Rotation3::new(Vector3::new(0.02, -0.1, 0.01)), Vector3::new(0.2, 0.0, 0.05));
    let bag = dir.path().join("out.mcap");
    let mut w = BagWriter::create(&bag).unwrap();
    w.add_typed_topic::<node_msgs::PairPose>("/cam/pair_pose").unwrap();
    w.add_typed_topic::<sensor_msgs::PointCloud2>("/cam/pointcloud").unwrap();
    let map = Pointmap { height: 1, width: 1, points: vec![0.0, 0.0, 1.0], confidence: vec![5.0] };
    for (s1, s2, with_pose) in [(100, 101, true), (101, 103, true), (103, 104, false)] {
        let cloud = pointcloud_msg(header(s1), &[ColouredPoints { points: &map, rgb: &[1, 2, 3] }], 1.0, 1);
        let t = s2 as u64 * 1_000_000_000;
        w.write("/cam/pointcloud", t, t, &to_cdr(&cloud).unwrap()).unwrap();
        if with_pose {
            let pose = PairPose {
                t_cam1_cam2: p,
                focal1: 500.0,
                focal2: 500.0,
                num_inliers: 100,
                used_known_intrinsics: false,
                mode: PoseMode::PairViewer,
                world: PnpWorld::Camera1,
            };
            let (pair, _) = pose_msgs(&pose, &header(s1), builtin_interfaces::Time { sec: s2, nanosec: 0 }, 3.0);
            w.write("/cam/pair_pose", t, t, &to_cdr(&pair).unwrap()).unwrap();
        }
    }
    w.finish().unwrap();

    // Ground truth: T_w_100 = I, T_w_101 = P, T_w_103 = P P with an extra 12 degrees about z on
    // the rotation only (so pair 2's rotation is 10 degrees off and its translation exact),
    // T_w_104 = anything.
    // P twice (the typed compose refuses Cam1->Cam2 twice, rightly: here they are frames 101->103).
    let pp = (p.rotation * p.rotation, p.rotation * p.translation + p.translation);
    let rz = Rotation3::from_axis_angle(&Vector3::z_axis(), 12f64.to_radians());
    let poses = [
        (100.0, Rotation3::identity(), Vector3::zeros()),
        (101.0, p.rotation, p.translation),
        (103.0, pp.0 * rz, pp.1),
        (104.0, Rotation3::identity(), Vector3::x()),
    ];
    let tum = dir.path().join("gt.tum");
    std::fs::write(&tum, poses.iter().map(|(t, r, x)| tum_line(*t, r, x)).collect::<String>()).unwrap();
    let json_out = dir.path().join("metrics.json");
    let r = eval(&[
        "--bag",
        bag.to_str().unwrap(),
        "--ground-truth",
        tum.to_str().unwrap(),
        "--out",
        json_out.to_str().unwrap(),
    ]);

    // Errors: pair 1 0/0, pair 2 12/0, pair 3 no pose (infinite). Sorted max errors 0, 12, inf;
    // recall 1/3, 2/3, 1. AUC@5 = (5 x 1/3) / 5 = 1/3; AUC@10 = (10 x 1/3) / 10 = 1/3;
    // AUC@30 = (12 x (1/3 + 2/3) / 2 + 18 x 2/3) / 30 = 18/30 = 0.6.
    let pairs = r["pairs"].as_array().unwrap();
    assert_eq!((r["num_pairs"].as_u64(), r["num_without_pose"].as_u64()), (Some(3), Some(1)), "{r}");
    assert!(
        pairs[0]["rotation_error_deg"].as_f64().unwrap() < 1e-6
            && pairs[0]["translation_error_deg"].as_f64().unwrap() < 1e-6,
        "{r}"
    );
    assert!((pairs[1]["rotation_error_deg"].as_f64().unwrap() - 12.0).abs() < 1e-6, "{r}");
    assert!(pairs[1]["translation_error_deg"].as_f64().unwrap() < 1e-6, "{r}");
    assert!(pairs[2]["rotation_error_deg"].is_null());
    let auc: Vec<f64> = r["auc"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (a, b) in auc.iter().zip([1.0 / 3.0, 1.0 / 3.0, 0.6]) {
        assert!((a - b).abs() < 1e-9, "{auc:?}");
    }
    assert_eq!(serde_json::from_str::<Value>(&std::fs::read_to_string(&json_out).unwrap()).unwrap(), r);
    // The picture beside it: two rotation markers (red) and a translation marker (blue) drawn.
    let png = image::open(json_out.with_extension("png")).expect("metrics.png").to_rgb8();
    assert_eq!(png.dimensions(), sp_dust3r_core::eval::plot::SIZE);
    let count = |c: image::Rgb<u8>| png.pixels().filter(|p| **p == c).count();
    assert!(
        count(sp_dust3r_core::eval::plot::ROTATION) >= 2 * 25 && count(sp_dust3r_core::eval::plot::TRANSLATION) >= 25
    );

    // The same trajectory as geometry_msgs/PoseStamped in a bag: the same metrics.
    let gt_bag = dir.path().join("gt.mcap");
    let mut w = BagWriter::create(&gt_bag).unwrap();
    w.add_typed_topic::<geometry_msgs::PoseStamped>("/ground_truth").unwrap();
    for (t, rot, x) in &poses {
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(rot);
        let msg = geometry_msgs::PoseStamped {
            header: header(*t as i32),
            pose: geometry_msgs::Pose {
                position: geometry_msgs::Point { x: x.x, y: x.y, z: x.z },
                orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
            },
        };
        let ns = (*t as u64) * 1_000_000_000;
        w.write("/ground_truth", ns, ns, &to_cdr(&msg).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let r2 = eval(&[
        "--bag",
        bag.to_str().unwrap(),
        "--ground-truth",
        gt_bag.to_str().unwrap(),
        "--gt-topic",
        "/ground_truth",
    ]);
    let auc2: Vec<f64> = r2["auc"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (a, b) in auc.iter().zip(&auc2) {
        assert!((a - b).abs() < 1e-9);
    }
    // The bag's only PoseStamped topic is the ground truth when none is named.
    assert_eq!(eval(&["--bag", bag.to_str().unwrap(), "--ground-truth", gt_bag.to_str().unwrap()])["auc"], r2["auc"]);
    // Two PoseStamped topics: which one is for the user to say.
    let two = dir.path().join("two.mcap");
    let mut w = BagWriter::create(&two).unwrap();
    for topic in ["/ground_truth", "/odom_pose"] {
        w.add_typed_topic::<geometry_msgs::PoseStamped>(topic).unwrap();
        let msg = geometry_msgs::PoseStamped {
            header: header(100),
            pose: geometry_msgs::Pose {
                position: geometry_msgs::Point { x: 0.0, y: 0.0, z: 0.0 },
                orientation: geometry_msgs::Quaternion { x: 0.0, y: 0.0, z: 0.0, w: 1.0 },
            },
        };
        w.write(topic, 100_000_000_000, 100_000_000_000, &to_cdr(&msg).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let e = eval_error(&["--bag", bag.to_str().unwrap(), "--ground-truth", two.to_str().unwrap()]);
    assert!(e.contains("several geometry_msgs/msg/PoseStamped topics (/ground_truth, /odom_pose)"), "{e}");
    assert!(eval_error(&[
        "--bag",
        bag.to_str().unwrap(),
        "--ground-truth",
        two.to_str().unwrap(),
        "--gt-topic",
        "/nope"
    ])
    .contains("has no topic /nope"));
    // A bag with neither pairs nor tracked frames (the replay's input, not its output).
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap");
    let e = eval_error(&["--bag", sample.to_str().unwrap(), "--ground-truth", sample.to_str().unwrap()]);
    assert!(e.contains("sequence.mcap has no pairs"), "{e}");

    // And as TF (world -> cam_optical) among other transforms on /tf: the same metrics.
    let tf_bag = dir.path().join("tf.mcap");
    let mut w = BagWriter::create(&tf_bag).unwrap();
    w.add_typed_topic::<tf2_msgs::TFMessage>("/tf").unwrap();
    for (t, rot, x) in &poses {
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(rot);
        let transform = |parent: &str, child: &str| geometry_msgs::TransformStamped {
            header: std_msgs::Header {
                stamp: builtin_interfaces::Time { sec: *t as i32, nanosec: 0 },
                frame_id: parent.into(),
            },
            child_frame_id: child.into(),
            transform: geometry_msgs::Transform {
                translation: geometry_msgs::Vector3 { x: x.x, y: x.y, z: x.z },
                rotation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
            },
        };
        let mut other = transform("world", "base_link");
        other.transform.translation.x += 5.0;
        let msg = tf2_msgs::TFMessage { transforms: vec![other, transform("world", "cam_optical")] };
        let ns = (*t as u64) * 1_000_000_000;
        w.write("/tf", ns, ns, &to_cdr(&msg).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let r3 = eval(&[
        "--bag",
        bag.to_str().unwrap(),
        "--ground-truth",
        tf_bag.to_str().unwrap(),
        "--gt-topic",
        "/tf",
        "--gt-frames",
        "world",
        "cam_optical",
    ]);
    let auc3: Vec<f64> = r3["auc"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (a, b) in auc.iter().zip(&auc3) {
        assert!((a - b).abs() < 1e-9, "{r3}");
    }
    // --gt-frames alone reads /tf; /tf without the frames, or a TF-only bag without a topic, is
    // an error that says what is missing.
    assert_eq!(
        eval(&[
            "--bag",
            bag.to_str().unwrap(),
            "--ground-truth",
            tf_bag.to_str().unwrap(),
            "--gt-frames",
            "world",
            "cam_optical"
        ])["auc"],
        r3["auc"]
    );
    let e =
        eval_error(&["--bag", bag.to_str().unwrap(), "--ground-truth", tf_bag.to_str().unwrap(), "--gt-topic", "/tf"]);
    assert!(e.contains("needs its two frames"), "{e}");
    let e = eval_error(&["--bag", bag.to_str().unwrap(), "--ground-truth", tf_bag.to_str().unwrap()]);
    assert!(e.contains("has no geometry_msgs/msg/PoseStamped topic"), "{e}");
}

/// The odometry's metrics against evo's (PyPI `evo`, the reference implementation of ATE and
/// RPE): a camera on a helix, turning; the estimate the same motion in another frame at 0.37
/// times the scale, with a few millimetres of deterministic noise and 10 of 60 frames not
/// tracked, in a bag as a replay writes it (nav_msgs/Odometry, one Keypoints message per frame).
/// `sp_dust3r eval` and evo align (Sim(3)) and score it alike, over 1- and 3-frame RPE deltas.
#[test]
fn trajectory_metrics_agree_with_evo() {
    let dir = tempfile::tempdir().unwrap();
    let gt: Vec<(f64, Rotation3<f64>, Vector3<f64>)> = (0..60)
        .map(|i| {
            let a = i as f64 * 0.08;
            let r = Rotation3::new(Vector3::new(0.1 * a.sin(), a, 0.05 * a));
            (100.0 + i as f64 * 0.1, r, Vector3::new(2.0 * a.cos(), 0.3 * a, 2.0 * a.sin()))
        })
        .collect();
    let g = Rotation3::new(Vector3::new(0.3, -1.1, 0.4));
    let (s, shift) = (0.37, Vector3::new(1.0, -2.0, 0.5));
    let mut rng = sp_dust3r_core::rng::SplitMix64::new(7);
    let mut noise = |k: f64| (rng.next_f64() - 0.5) * k;
    let bag = dir.path().join("out.mcap");
    let mut w = BagWriter::create(&bag).unwrap();
    w.add_typed_topic::<node_msgs::Keypoints>("/cam/keypoints").unwrap();
    w.add_typed_topic::<sp_dust3r_core::msg::nav_msgs::Odometry>("/cam/odom").unwrap();
    let mut gt_tum = String::new();
    for (i, (t, r, p)) in gt.iter().enumerate() {
        let stamp = builtin_interfaces::Time { sec: *t as i32, nanosec: ((t - t.floor()) * 1e9).round() as u32 };
        let ns = (t * 1e9).round() as u64;
        let kp = node_msgs::Keypoints {
            header: std_msgs::Header { stamp: stamp.clone(), frame_id: "cam".into() },
            ..Default::default()
        };
        w.write("/cam/keypoints", ns, ns, &to_cdr(&kp).unwrap()).unwrap();
        gt_tum += &tum_line(*t, r, p);
        if i % 6 == 5 {
            continue; // not tracked
        }
        let er = g * Rotation3::new(Vector3::new(noise(0.004), noise(0.004), noise(0.004))) * r;
        let ep = g * (p + Vector3::new(noise(0.01), noise(0.01), noise(0.01))) * s + shift;
        let q = nalgebra::UnitQuaternion::from_rotation_matrix(&er);
        let odom = sp_dust3r_core::msg::nav_msgs::Odometry {
            header: std_msgs::Header { stamp, frame_id: "odom".into() },
            child_frame_id: "cam".into(),
            pose: geometry_msgs::PoseWithCovariance {
                pose: geometry_msgs::Pose {
                    position: geometry_msgs::Point { x: ep.x, y: ep.y, z: ep.z },
                    orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
                },
                ..Default::default()
            },
            ..Default::default()
        };
        w.write("/cam/odom", ns, ns, &to_cdr(&odom).unwrap()).unwrap();
    }
    w.finish().unwrap();
    let gt_path = dir.path().join("gt.tum");
    std::fs::write(&gt_path, gt_tum).unwrap();

    for delta in [1, 3] {
        let d = delta.to_string();
        // evo scores the odometry as `--trajectories` writes it.
        let written = dir.path().join(format!("delta{delta}"));
        let ours = eval(&[
            "--bag",
            bag.to_str().unwrap(),
            "--ground-truth",
            gt_path.to_str().unwrap(),
            "--rpe-frames",
            &d,
            "--trajectories",
            written.to_str().unwrap(),
        ]);
        let est_path = written.join("odom.tum");
        // Without /tf and a path in the bag, only the odometry.
        let names: std::collections::BTreeSet<_> =
            std::fs::read_dir(&written).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["odom.tum"]);
        let t = &ours["trajectory"];
        assert_eq!((t["num_frames"].as_u64(), t["num_tracked"].as_u64()), (Some(60), Some(50)), "{t}");
        let evo = common::evo_metrics(&gt_path, &est_path, delta);
        assert_eq!(evo["matched"].as_u64(), Some(50));
        let close = |a: &Value, b: &Value, what: &str| {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1e-6), "{what} (delta {delta}): ours {a}, evo {b}");
        };
        close(&t["scale"], &evo["scale"], "scale");
        for k in ["rmse", "mean", "median", "max"] {
            close(&t["ate"][k], &evo["ape"][k], &format!("ATE {k}"));
            close(&t["rpe_translation"][k], &evo["rpe_translation"][k], &format!("RPE translation {k}"));
            close(&t["rpe_rotation_deg"][k], &evo["rpe_rotation_deg"][k], &format!("RPE rotation {k}"));
        }
        assert!(t["ate"]["rmse"].as_f64().unwrap() > 1e-3, "the noise shows: {t}");
    }
}
