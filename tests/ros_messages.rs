//! The generated ROS 2 message types against the PyPI package `rosbags` (an independent ROS 2
//! message store and CDR implementation): our field lists equal the standard definitions, and
//! rosbags decodes our CDR bytes to our values and re-encodes them to the same bytes.
//! Needs a Python with rosbags (`tools/setup-peers.sh`; `.ci/run` installs it).

mod common;

use common::{rosbags_read, CdrEntry};
use serde_json::Value;
use sp_dust3r_core::msg::*;

fn header(sec: i32, nanosec: u32, frame: &str) -> std_msgs::Header {
    std_msgs::Header { stamp: builtin_interfaces::Time { sec, nanosec }, frame_id: frame.into() }
}

fn sample<T: RosMessage + serde::Serialize>(msg: T) -> (CdrEntry, Value) {
    (CdrEntry::of(&msg), serde_json::to_value(&msg).unwrap())
}

/// Equal up to float32 rounding (rosbags reports float32 values as float64).
fn same(a: &Value, b: &Value, path: &str) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(
                x.len(),
                y.len(),
                "{path}: fields {:?} vs {:?}",
                x.keys().collect::<Vec<_>>(),
                y.keys().collect::<Vec<_>>()
            );
            for (k, v) in x {
                same(
                    v,
                    y.get(k).unwrap_or_else(|| panic!("{path}.{k} missing in rosbags' value")),
                    &format!("{path}.{k}"),
                );
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{path}: lengths");
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                same(p, q, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let (p, q) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((p - q).abs() <= 1e-6 * p.abs().max(1.0), "{path}: {p} vs {q}");
        }
        (Value::Bool(x), Value::Number(y)) | (Value::Number(y), Value::Bool(x)) => {
            assert_eq!(*x as u64, y.as_u64().unwrap(), "{path}")
        }
        _ => assert_eq!(a, b, "{path}"),
    }
}

#[allow(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom; the 100-line limit holds for the library and binaries"
)]
#[test]
fn cdr_bytes_and_definitions_agree_with_rosbags() {
    let pose = geometry_msgs::Pose {
        position: geometry_msgs::Point { x: 0.25, y: -1.5, z: 3.0 },
        orientation: geometry_msgs::Quaternion { x: 0.1, y: 0.2, z: 0.3, w: 0.927 },
    };
    let samples = vec![
        sample(builtin_interfaces::Time { sec: -3, nanosec: 999_999_999 }),
        sample(header(1_700_000_000, 123, "camera_optical")),
        sample(sensor_msgs::Image {
            header: header(5, 6, "cam"),
            height: 2,
            width: 3,
            encoding: "rgb8".into(),
            is_bigendian: 0,
            step: 9,
            data: (0..18).collect(),
        }),
        sample(sensor_msgs::CompressedImage {
            header: header(7, 8, "c"),
            format: "jpeg".into(),
            data: vec![0xff, 0xd8, 0xff, 0xe0, 1],
        }),
        sample(sensor_msgs::CameraInfo {
            header: header(9, 10, "cam_optical"),
            height: 480,
            width: 640,
            distortion_model: "plumb_bob".into(),
            d: vec![0.1, -0.2, 0.001, 0.002, 0.0],
            k: [500.0, 0.0, 320.0, 0.0, 501.0, 240.0, 0.0, 0.0, 1.0],
            r: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
            p: [500.0, 0.0, 320.0, 0.0, 0.0, 501.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            binning_x: 1,
            binning_y: 2,
            roi: sensor_msgs::RegionOfInterest { x_offset: 1, y_offset: 2, height: 3, width: 4, do_rectify: true },
        }),
        sample(sensor_msgs::PointCloud2 {
            header: header(11, 12, "cam1"),
            height: 1,
            width: 2,
            fields: vec![
                sensor_msgs::PointField {
                    name: "x".into(),
                    offset: 0,
                    datatype: sensor_msgs::PointField::FLOAT32,
                    count: 1,
                },
                sensor_msgs::PointField {
                    name: "rgb".into(),
                    offset: 12,
                    datatype: sensor_msgs::PointField::FLOAT32,
                    count: 1,
                },
            ],
            is_bigendian: false,
            point_step: 16,
            row_step: 32,
            data: (0..32).collect(),
            is_dense: true,
        }),
        sample(geometry_msgs::PoseStamped { header: header(13, 14, "cam1"), pose: pose.clone() }),
        sample(tf2_msgs::TFMessage {
            transforms: vec![geometry_msgs::TransformStamped {
                header: header(15, 16, "cam1"),
                child_frame_id: "cam2".into(),
                transform: geometry_msgs::Transform {
                    translation: geometry_msgs::Vector3 { x: 1.0, y: 2.0, z: 3.0 },
                    rotation: geometry_msgs::Quaternion::default(),
                },
            }],
        }),
        sample(rosgraph_msgs::Clock { clock: builtin_interfaces::Time { sec: 42, nanosec: 7 } }),
        sample(rcl_interfaces::Log {
            stamp: builtin_interfaces::Time { sec: 43, nanosec: 8 },
            level: rcl_interfaces::Log::WARN,
            name: "cam.sp_dust3r".into(),
            msg: "dropping a frame".into(),
            file: "crates/node/src/node.rs".into(),
            function: "sp_dust3r_node::node".into(),
            line: 321,
        }),
        sample(diagnostic_msgs::DiagnosticArray {
            header: header(17, 18, ""),
            status: vec![diagnostic_msgs::DiagnosticStatus {
                level: diagnostic_msgs::DiagnosticStatus::WARN,
                name: "sp_dust3r: superpoint".into(),
                message: "dropping frames".into(),
                hardware_id: "cpu".into(),
                values: vec![diagnostic_msgs::KeyValue { key: "drops".into(), value: "3".into() }],
            }],
        }),
        sample(node_msgs::Keypoints {
            header: header(19, 20, "cam"),
            height: 480,
            width: 640,
            x: vec![1.5, 2.5, 3.5],
            y: vec![4.0, 5.0, 6.0],
            scores: vec![0.9, 0.5, 0.1],
            descriptor_dim: 2,
            descriptors: vec![1.0, 0.0, 0.0, 1.0, 0.6, 0.8],
        }),
        sample(node_msgs::PairPose {
            header: header(21, 22, "cam1"),
            view2_stamp: builtin_interfaces::Time { sec: 20, nanosec: 5 },
            pose: pose.clone(),
            focal_reference: 512.5,
            focal_query: 498.25,
            used_known_intrinsics: true,
            num_inliers: 12345,
            mean_confidence: 2.75,
        }),
        sample(nav_msgs::Odometry {
            header: header(23, 24, "odom"),
            child_frame_id: "cam".into(),
            pose: geometry_msgs::PoseWithCovariance {
                pose: pose.clone(),
                covariance: std::array::from_fn(|i| i as f64 * 0.5),
            },
            twist: geometry_msgs::TwistWithCovariance {
                twist: geometry_msgs::Twist {
                    linear: geometry_msgs::Vector3 { x: 0.1, y: -0.2, z: 0.3 },
                    angular: geometry_msgs::Vector3 { x: -0.01, y: 0.02, z: 0.03 },
                },
                covariance: std::array::from_fn(|i| 100.0 - i as f64),
            },
        }),
        sample(nav_msgs::Path {
            header: header(25, 26, "odom"),
            poses: vec![
                geometry_msgs::PoseStamped { header: header(1, 2, "odom"), pose: pose.clone() },
                geometry_msgs::PoseStamped { header: header(3, 4, "odom"), pose: geometry_msgs::Pose::default() },
            ],
        }),
    ];

    let report = rosbags_read(&samples.iter().map(|(e, _)| e).collect::<Vec<_>>());
    for (s, json) in &samples {
        let r = &report[s.ros_type];
        if !s.custom {
            assert_eq!(r["fields_match"], true, "{}: our definition differs from ROS 2 Jazzy's", s.ros_type);
        }
        assert_eq!(r["bytes_equal"], true, "{}: rosbags re-encodes our CDR differently", s.ros_type);
        same(json, &r["value"], s.ros_type);
        assert_eq!(&s.cdr[..4], &[0, 1, 0, 0]);
    }
    let kp: node_msgs::Keypoints = from_cdr(&samples[11].0.cdr).unwrap();
    assert_eq!(kp.descriptor_dim, 2);
    assert!(from_cdr::<node_msgs::Keypoints>(&[9, 9, 9]).is_err());
}

#[test]
fn type_names_follow_ros2_conventions() {
    assert_eq!(node_msgs::Keypoints::DDS_TYPE, "sp_dust3r::msg::dds_::Keypoints_");
    assert_eq!(sensor_msgs::PointCloud2::ROS_TYPE, "sensor_msgs/msg/PointCloud2");
    // The schema text MCAP carries: the type's own definition, then every nested one once.
    let def = node_msgs::PairPose::DEFINITION;
    for nested in [
        "MSG: std_msgs/Header",
        "MSG: builtin_interfaces/Time",
        "MSG: geometry_msgs/Pose",
        "MSG: geometry_msgs/Point",
        "MSG: geometry_msgs/Quaternion",
    ] {
        assert_eq!(def.matches(nested).count(), 1, "{nested} in\n{def}");
    }
    assert_eq!(geometry_msgs::Quaternion::default().w, 1.0);
}
