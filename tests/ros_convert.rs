//! Domain results as ROS messages, read back by `rosbags` + numpy the way a ROS tool would:
//! the cloud's fields and points, the pose's quaternion and stamps.

use std::path::PathBuf;
use std::process::Command;

use nalgebra::{Rotation3, UnitQuaternion, Vector3};
use serde_json::Value;
use sp_dust3r::dust3r::Pointmap;
use sp_dust3r::geometry::{PairPose, PoseMode, TCam1Cam2};
use sp_dust3r::ros::convert::{keypoints_msg, pointcloud_msg, pose_msgs, ColouredPoints};
use sp_dust3r::ros::msg::*;
use sp_dust3r::superpoint::Keypoints;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SP_DUST3R_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() { venv } else { "python3".into() }
}

/// rosbags' reading of our messages (see tools/peers/rosbags_cdr.py).
fn rosbags_read(msgs: &[(&str, &str, bool, Vec<u8>)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let manifest: Vec<Value> = msgs
        .iter()
        .enumerate()
        .map(|(i, (t, def, custom, bytes))| {
            let f = dir.path().join(format!("{i}.cdr"));
            std::fs::write(&f, bytes).unwrap();
            serde_json::json!({"type": t, "file": f, "definition": def, "custom": custom})
        })
        .collect();
    let m = dir.path().join("m.json");
    std::fs::write(&m, serde_json::to_string(&manifest).unwrap()).unwrap();
    let out = Command::new(python()).arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/rosbags_cdr.py")).arg(&m).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn entry<T: RosMessage + serde::Serialize>(m: &T) -> (&'static str, &'static str, bool, Vec<u8>) {
    (T::ROS_TYPE, T::DEFINITION.split("\n====").next().unwrap_or(""), T::ROS_TYPE.starts_with("sp_dust3r_msgs/"), to_cdr(m).unwrap())
}

fn header(sec: i32, frame: &str) -> std_msgs::Header {
    std_msgs::Header { stamp: builtin_interfaces::Time { sec, nanosec: 500 }, frame_id: frame.into() }
}

#[test]
fn cloud_poses_and_keypoints_read_back_through_rosbags() {
    // Two 2x2 views; one point below the confidence threshold and one NaN are left out.
    let view1 = Pointmap { height: 2, width: 2, points: vec![0.1, 0.2, 1.0, 0.3, 0.4, 1.5, f32::NAN, 0.0, 1.0, 0.5, 0.6, 2.0], confidence: vec![5.0, 2.0, 9.0, 4.0] };
    let view2 = Pointmap { height: 2, width: 2, points: vec![1.0, 1.1, 3.0, 1.2, 1.3, 3.5, 1.4, 1.5, 4.0, 1.6, 1.7, 4.5], confidence: vec![3.5, 3.6, 3.7, 3.8] };
    let rgb1: Vec<u8> = vec![255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30];
    let rgb2: Vec<u8> = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 250, 251, 252];
    let cloud = pointcloud_msg(header(100, "cam1_optical"), &[ColouredPoints { points: &view1, rgb: &rgb1 }, ColouredPoints { points: &view2, rgb: &rgb2 }], 3.0);
    assert_eq!(cloud.width, 6);

    let t12: TCam1Cam2 = TCam1Cam2::new(Rotation3::new(Vector3::new(0.1, -0.2, 0.05)), Vector3::new(0.3, 0.0, -0.1));
    let pose = PairPose { t_cam1_cam2: t12, focal1: 500.0, focal2: 510.0, num_inliers: 1234, used_known_intrinsics: false, mode: PoseMode::PairViewer };
    let (pair, stamped, tf) = pose_msgs(&pose, &header(100, "cam1_optical"), builtin_interfaces::Time { sec: 101, nanosec: 7 }, "sp_dust3r_view2", 4.5);

    let kp = Keypoints { xy: vec![[10.0, 20.0], [30.5, 40.5]], scores: vec![0.9, 0.3], descriptors: vec![0.6, 0.8, 1.0, 0.0], descriptor_dim: 2 };
    let kmsg = keypoints_msg(header(99, "cam"), 640, 480, &kp);

    let r = rosbags_read(&[entry(&cloud), entry(&pair), entry(&stamped), entry(&tf), entry(&kmsg)]);

    let points = r["sensor_msgs/msg/PointCloud2"]["points"].as_array().unwrap();
    // View 1's pixel 1 (confidence 2) and pixel 2 (NaN) are left out; then all of view 2.
    let want = [(&view1, &rgb1, 0usize), (&view1, &rgb1, 3), (&view2, &rgb2, 0), (&view2, &rgb2, 1), (&view2, &rgb2, 2), (&view2, &rgb2, 3)];
    for (p, (map, rgb, i)) in points.iter().zip(want) {
        let xyz = [p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap(), p["z"].as_f64().unwrap()];
        for k in 0..3 {
            assert!((xyz[k] - map.points[i * 3 + k] as f64).abs() < 1e-6, "{p}");
        }
        assert_eq!(p["confidence"].as_f64().unwrap(), map.confidence[i] as f64);
        let c: Vec<u64> = p["rgb"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(c, rgb[i * 3..i * 3 + 3].iter().map(|&v| v as u64).collect::<Vec<_>>());
    }
    assert_eq!(points.len(), 6);
    assert_eq!(r["sensor_msgs/msg/PointCloud2"]["value"]["header"]["frame_id"], "cam1_optical");

    // The pose: header = view 2's stamp in view 1's frame, reference = view 1's stamp, and the
    // quaternion rosbags reads is the rotation we had.
    let pv = &r["sp_dust3r_msgs/msg/PairPose"]["value"];
    assert_eq!((pv["header"]["stamp"]["sec"].as_i64(), pv["reference_stamp"]["sec"].as_i64()), (Some(101), Some(100)));
    assert_eq!(pv["header"]["frame_id"], "cam1_optical");
    assert_eq!(pv["num_inliers"].as_u64(), Some(1234));
    let q = &pv["pose"]["orientation"];
    let uq = UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(q["w"].as_f64().unwrap(), q["x"].as_f64().unwrap(), q["y"].as_f64().unwrap(), q["z"].as_f64().unwrap()));
    assert!(uq.to_rotation_matrix().angle_to(&t12.rotation) < 1e-9);
    assert!((pv["pose"]["position"]["x"].as_f64().unwrap() - 0.3).abs() < 1e-12);
    let tv = &r["geometry_msgs/msg/TransformStamped"]["value"];
    assert_eq!((tv["header"]["frame_id"].as_str(), tv["child_frame_id"].as_str()), (Some("cam1_optical"), Some("sp_dust3r_view2")));
    assert_eq!(r["geometry_msgs/msg/PoseStamped"]["value"]["pose"], pv["pose"]);

    let kv = &r["sp_dust3r_msgs/msg/Keypoints"]["value"];
    assert_eq!((kv["width"].as_u64(), kv["height"].as_u64(), kv["descriptor_dim"].as_u64()), (Some(640), Some(480), Some(2)));
    assert_eq!(kv["x"][1].as_f64(), Some(30.5));
    for (_, v) in r.as_object().unwrap() {
        assert_eq!(v["bytes_equal"], true);
    }
}
