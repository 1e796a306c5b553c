//! Domain results as ROS messages, read back by `rosbags` + numpy the way a ROS tool would:
//! the cloud's fields and points, the pose's quaternion and stamps.

mod common;

use common::{rosbags_read, CdrEntry};
use nalgebra::{Rotation3, UnitQuaternion, Vector3};
use sp_dust3r_core::dust3r::Pointmap;
use sp_dust3r_core::geometry::{PairPose, PnpWorld, PoseMode, TCam1Cam2};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::msg::convert::{debug_image_msg, keypoints_msg, pointcloud_msg, pose_msgs, ColouredPoints};
use sp_dust3r_core::msg::*;
use sp_dust3r_core::superpoint::Keypoints;

fn header(sec: i32, frame: &str) -> std_msgs::Header {
    std_msgs::Header { stamp: builtin_interfaces::Time { sec, nanosec: 500 }, frame_id: frame.into() }
}

#[test]
fn cloud_poses_and_keypoints_read_back_through_rosbags() {
    // Two 2x2 views; one point below the confidence threshold and one NaN are left out.
    let view1 = Pointmap {
        height: 2,
        width: 2,
        points: vec![0.1, 0.2, 1.0, 0.3, 0.4, 1.5, f32::NAN, 0.0, 1.0, 0.5, 0.6, 2.0],
        confidence: vec![5.0, 2.0, 9.0, 4.0],
    };
    let view2 = Pointmap {
        height: 2,
        width: 2,
        points: vec![1.0, 1.1, 3.0, 1.2, 1.3, 3.5, 1.4, 1.5, 4.0, 1.6, 1.7, 4.5],
        confidence: vec![3.5, 3.6, 3.7, 3.8],
    };
    let rgb1: Vec<u8> = vec![255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30];
    let rgb2: Vec<u8> = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 250, 251, 252];
    let cloud = pointcloud_msg(
        header(100, "cam1_optical"),
        &[ColouredPoints { points: &view1, rgb: &rgb1 }, ColouredPoints { points: &view2, rgb: &rgb2 }],
        3.0,
        1,
    );
    assert_eq!(cloud.width, 6);

    let t12: TCam1Cam2 = TCam1Cam2::new(Rotation3::new(Vector3::new(0.1, -0.2, 0.05)), Vector3::new(0.3, 0.0, -0.1));
    let pose = PairPose {
        t_cam1_cam2: t12,
        focal1: 500.0,
        focal2: 510.0,
        num_inliers: 1234,
        used_known_intrinsics: false,
        mode: PoseMode::PairViewer,
        world: PnpWorld::Camera1,
    };
    let (pair, stamped) =
        pose_msgs(&pose, &header(100, "cam1_optical"), builtin_interfaces::Time { sec: 101, nanosec: 7 }, 4.5);

    let kp = Keypoints {
        xy: vec![[10.0, 20.0], [30.5, 40.5]],
        scores: vec![0.9, 0.3],
        descriptors: vec![0.6, 0.8, 1.0, 0.0],
        descriptor_dim: 2,
    };
    let kmsg = keypoints_msg(header(99, "cam"), 640, 480, &kp);

    let r = rosbags_read(&[&CdrEntry::of(&cloud), &CdrEntry::of(&pair), &CdrEntry::of(&stamped), &CdrEntry::of(&kmsg)]);

    let points = r["sensor_msgs/msg/PointCloud2"]["points"].as_array().unwrap();
    // View 1's pixel 1 (confidence 2) and pixel 2 (NaN) are left out; then all of view 2.
    let want = [
        (&view1, &rgb1, 0usize),
        (&view1, &rgb1, 3),
        (&view2, &rgb2, 0),
        (&view2, &rgb2, 1),
        (&view2, &rgb2, 2),
        (&view2, &rgb2, 3),
    ];
    for (p, (map, rgb, i)) in points.iter().zip(want) {
        let xyz = [p["x"].as_f64().unwrap(), p["y"].as_f64().unwrap(), p["z"].as_f64().unwrap()];
        for (k, v) in xyz.iter().enumerate() {
            assert!((v - map.points[i * 3 + k] as f64).abs() < 1e-6, "{p}");
        }
        assert_eq!(p["confidence"].as_f64().unwrap(), map.confidence[i] as f64);
        let c: Vec<u64> = p["rgb"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(c, rgb[i * 3..i * 3 + 3].iter().map(|&v| v as u64).collect::<Vec<_>>());
    }
    assert_eq!(points.len(), 6);
    assert_eq!(r["sensor_msgs/msg/PointCloud2"]["value"]["header"]["frame_id"], "cam1_optical");

    // The pose: header = view 1's stamp and frame (where and when it is expressed, as tf2 reads
    // a header), view 2's stamp in its field, and the quaternion rosbags reads is the rotation
    // we had.
    let pv = &r["sp_dust3r/msg/PairPose"]["value"];
    assert_eq!((pv["header"]["stamp"]["sec"].as_i64(), pv["view2_stamp"]["sec"].as_i64()), (Some(100), Some(101)));
    assert_eq!(pv["header"]["frame_id"], "cam1_optical");
    assert_eq!(pv["num_inliers"].as_u64(), Some(1234));
    let q = &pv["pose"]["orientation"];
    let uq = UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(
        q["w"].as_f64().unwrap(),
        q["x"].as_f64().unwrap(),
        q["y"].as_f64().unwrap(),
        q["z"].as_f64().unwrap(),
    ));
    assert!(uq.to_rotation_matrix().angle_to(&t12.rotation) < 1e-9);
    assert!((pv["pose"]["position"]["x"].as_f64().unwrap() - 0.3).abs() < 1e-12);
    assert_eq!(r["geometry_msgs/msg/PoseStamped"]["value"]["pose"], pv["pose"]);
    assert_eq!(r["geometry_msgs/msg/PoseStamped"]["value"]["header"], pv["header"], "view 1's header");

    let kv = &r["sp_dust3r/msg/Keypoints"]["value"];
    assert_eq!(
        (kv["width"].as_u64(), kv["height"].as_u64(), kv["descriptor_dim"].as_u64()),
        (Some(640), Some(480), Some(2))
    );
    assert_eq!(kv["x"][1].as_f64(), Some(30.5));
    for (_, v) in r.as_object().unwrap() {
        assert_eq!(v["bytes_equal"], true);
    }
}

#[test]
fn cloud_stride_keeps_every_nth_pixel_of_each_view() {
    // 4x4 view whose x is the pixel index: stride 2 keeps pixels (0,0) (0,2) (2,0) (2,2).
    let points: Vec<f32> = (0..16).flat_map(|i| [i as f32, 0.0, 1.0]).collect();
    let view = Pointmap { height: 4, width: 4, points, confidence: vec![5.0; 16] };
    let rgb = vec![0u8; 48];
    let cloud = pointcloud_msg(header(1, "c"), &[ColouredPoints { points: &view, rgb: &rgb }], 3.0, 2);
    let xs: Vec<f32> = cloud.data.chunks_exact(20).map(|p| f32::from_le_bytes([p[0], p[1], p[2], p[3]])).collect();
    assert_eq!(xs, vec![0.0, 2.0, 8.0, 10.0]);
    assert_eq!(cloud.width, 4);
    let all = pointcloud_msg(header(1, "c"), &[ColouredPoints { points: &view, rgb: &rgb }], 3.0, 1);
    assert_eq!(all.width, 16);
}

#[test]
fn debug_image_is_rgb8_with_the_keypoints_marked_and_reads_back() {
    // A mono8 frame of mid grey; two keypoints.
    let (w, h) = (40u32, 30u32);
    let frame = Frame::from_raw("mono8", w, h, w as usize, false, vec![128; (w * h) as usize]).unwrap();
    let kp = Keypoints {
        xy: vec![[10.0, 12.0], [30.0, 5.0]],
        scores: vec![0.9, 0.5],
        descriptors: vec![1.0, 1.0],
        descriptor_dim: 1,
    };
    let msg = debug_image_msg(header(42, "cam"), &frame, &kp, &sp_dust3r_core::superpoint::PostParams::default());
    let r = rosbags_read(&[&CdrEntry::of(&msg)]);
    let v = &r["sensor_msgs/msg/Image"]["value"];
    assert_eq!(
        (v["encoding"].as_str(), v["width"].as_u64(), v["height"].as_u64(), v["step"].as_u64()),
        (Some("rgb8"), Some(40), Some(30), Some(120))
    );
    assert_eq!(v["header"]["stamp"]["sec"].as_i64(), Some(42));
    assert_eq!(r["sensor_msgs/msg/Image"]["bytes_equal"], true);
    // Rings in the colours of their scores (the strongest yellow, the weakest blue-purple), the
    // grey between them untouched; this image is too small for a caption band.
    use sp_dust3r_core::image::draw::score_colour;
    let px = |x: u32, y: u32| &msg.data[((y * w + x) * 3) as usize..((y * w + x) * 3 + 3) as usize];
    assert_eq!(px(10, 12), &score_colour(1.0));
    assert_eq!(px(13, 12), &score_colour(1.0));
    assert_eq!(px(30, 5), &score_colour(0.0));
    assert_eq!(px(20, 20), &[128, 128, 128]);
}

/// `replay --export-ply` reads a bag's clouds by their fields: our own cloud comes back point for
/// point; a foreign layout (big endian, fields reordered, a uint32 `rgba`, no confidence, padded
/// rows, an organised cloud's NaN hole) gives the same points; a layout that does not fit its data
/// is an error, never a panic.
#[test]
fn clouds_are_read_back_by_their_field_layout() {
    use sp_dust3r_core::dust3r::cloud::CloudPoint;
    use sp_dust3r_core::msg::convert::{cloud_points_of, CloudLayoutError};
    let view = Pointmap {
        height: 1,
        width: 3,
        points: vec![0.1, 0.2, 1.0, -0.3, 0.4, 1.5, 2.0, -1.0, 0.5],
        confidence: vec![5.0, 4.0, 9.0],
    };
    let rgb: Vec<u8> = vec![255, 0, 0, 10, 20, 30, 0, 0, 255];
    let ours = pointcloud_msg(header(7, "c"), &[ColouredPoints { points: &view, rgb: &rgb }], 3.0, 1);
    let got = cloud_points_of(&ours).unwrap();
    let want: Vec<CloudPoint> = (0..3)
        .map(|i| CloudPoint {
            xyz: [view.points[3 * i], view.points[3 * i + 1], view.points[3 * i + 2]],
            rgb: [rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]],
            confidence: view.confidence[i],
        })
        .collect();
    assert_eq!(got, want);

    // Foreign: big endian, 16-byte points (z, x, rgba as uint32, y), 2 x 2 organised with 8 bytes
    // of padding per row and one NaN point.
    let field = |name: &str, offset: u32, datatype: u8| sensor_msgs::PointField {
        name: name.into(),
        offset,
        datatype,
        count: 1,
    };
    let mut data = Vec::new();
    let rows: [[Option<&CloudPoint>; 2]; 2] = [[Some(&want[0]), None], [Some(&want[1]), Some(&want[2])]];
    for row in rows {
        for p in row {
            let (xyz, c) = p.map_or(([f32::NAN; 3], [0u8; 3]), |p| (p.xyz, p.rgb));
            data.extend_from_slice(&xyz[2].to_be_bytes());
            data.extend_from_slice(&xyz[0].to_be_bytes());
            data.extend_from_slice(&(u32::from(c[0]) << 16 | u32::from(c[1]) << 8 | u32::from(c[2])).to_be_bytes());
            data.extend_from_slice(&xyz[1].to_be_bytes());
        }
        data.extend_from_slice(&[0xee; 8]);
    }
    let foreign = sensor_msgs::PointCloud2 {
        header: header(7, "c"),
        height: 2,
        width: 2,
        fields: vec![
            field("z", 0, sensor_msgs::PointField::FLOAT32),
            field("x", 4, sensor_msgs::PointField::FLOAT32),
            field("rgba", 8, sensor_msgs::PointField::UINT32),
            field("y", 12, sensor_msgs::PointField::FLOAT32),
        ],
        is_bigendian: true,
        point_step: 16,
        row_step: 40,
        data,
        is_dense: false,
    };
    let got = cloud_points_of(&foreign).unwrap();
    let without_confidence: Vec<CloudPoint> = want.iter().map(|p| CloudPoint { confidence: 1.0, ..*p }).collect();
    assert_eq!(got, without_confidence);

    // Layouts that do not fit.
    let short = sensor_msgs::PointCloud2 { data: foreign.data[..70].to_vec(), ..foreign.clone() };
    assert!(matches!(cloud_points_of(&short), Err(CloudLayoutError::Short { len: 70, .. })));
    let narrow_rows = sensor_msgs::PointCloud2 { row_step: 16, ..foreign.clone() };
    assert!(matches!(cloud_points_of(&narrow_rows), Err(CloudLayoutError::Short { .. })));
    let huge = sensor_msgs::PointCloud2 { width: u32::MAX, height: u32::MAX, row_step: u32::MAX, ..foreign.clone() };
    assert!(matches!(cloud_points_of(&huge), Err(CloudLayoutError::Short { .. })));
    let outside = sensor_msgs::PointCloud2 { point_step: 14, ..foreign.clone() };
    assert!(matches!(cloud_points_of(&outside), Err(CloudLayoutError::FieldOutside { offset: 12, .. })));
    let zero = sensor_msgs::PointCloud2 { point_step: 0, ..foreign.clone() };
    assert!(cloud_points_of(&zero).is_err());
    // Empty clouds are valid and empty, whatever their other dimension says.
    let no_rows = sensor_msgs::PointCloud2 { height: 0, ..foreign.clone() };
    assert_eq!(cloud_points_of(&no_rows), Ok(Vec::new()));
    let empty_rows = sensor_msgs::PointCloud2 { width: 0, height: u32::MAX, row_step: 0, ..foreign.clone() };
    assert_eq!(cloud_points_of(&empty_rows), Ok(Vec::new()));
    let no_y = sensor_msgs::PointCloud2 { fields: foreign.fields[..3].to_vec(), ..foreign };
    assert_eq!(cloud_points_of(&no_y), Err(CloudLayoutError::MissingField("y")));
}
