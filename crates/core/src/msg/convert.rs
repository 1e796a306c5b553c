//! Domain results to ROS messages. Every output carries the header of the input it came from
//! (stamp and frame), never wall time.

use nalgebra::{Rotation3, UnitQuaternion, Vector3};

pub use crate::dust3r::cloud::ColouredPoints;
use crate::dust3r::cloud::{cloud_points, CloudPoint};
use crate::geometry::{PairPose, TCam1Cam2, Transform};
use crate::image::draw::draw_keypoints;
use crate::image::Frame;
use crate::msg::{builtin_interfaces, geometry_msgs, node_msgs, sensor_msgs, std_msgs};
use crate::superpoint::{Keypoints, PostParams};
use crate::vo::map::MapPoint;

/// `sp_dust3r/msg/Keypoints` of one image (`width x height`, keypoints in its pixels).
pub fn keypoints_msg(header: std_msgs::Header, width: u32, height: u32, kp: &Keypoints) -> node_msgs::Keypoints {
    node_msgs::Keypoints {
        header,
        height,
        width,
        x: kp.xy.iter().map(|p| p[0]).collect(),
        y: kp.xy.iter().map(|p| p[1]).collect(),
        scores: kp.scores.clone(),
        descriptor_dim: kp.descriptor_dim as u32,
        descriptors: kp.descriptors.clone(),
    }
}

/// Bytes per point of [`pointcloud_msg`]: x, y, z, rgb, confidence as float32.
pub const POINT_STEP: u32 = 20;

/// `sensor_msgs/PointCloud2` with float32 fields x, y, z, rgb (RViz's packed 0x00RRGGBB read as
/// float32), confidence; the finite points of every view whose confidence exceeds
/// `min_confidence`, taking every `stride`-th pixel along rows and columns (1: all). An
/// unorganised cloud (height 1), little endian, dense.
pub fn pointcloud_msg(
    header: std_msgs::Header,
    views: &[ColouredPoints<'_>],
    min_confidence: f32,
    stride: usize,
) -> sensor_msgs::PointCloud2 {
    let mut data = Vec::new();
    for p in cloud_points(views, min_confidence, stride) {
        push_point(&mut data, p.xyz, p.rgb, p.confidence);
    }
    cloud(header, data)
}

/// One point of a cloud: x, y, z, the colour as RViz's packed 0x00RRGGBB read as float32, the
/// confidence.
fn push_point(data: &mut Vec<u8>, xyz: [f32; 3], [r, g, b]: [u8; 3], confidence: f32) {
    let rgb = f32::from_bits((u32::from(r) << 16) | (u32::from(g) << 8) | u32::from(b));
    for v in [xyz[0], xyz[1], xyz[2], rgb, confidence] {
        data.extend_from_slice(&v.to_le_bytes());
    }
}

/// An unorganised little-endian cloud of [`POINT_STEP`]-byte x, y, z, rgb, confidence points.
fn cloud(header: std_msgs::Header, data: Vec<u8>) -> sensor_msgs::PointCloud2 {
    let field = |name: &str, offset: u32| sensor_msgs::PointField {
        name: name.into(),
        offset,
        datatype: sensor_msgs::PointField::FLOAT32,
        count: 1,
    };
    let n = (data.len() / POINT_STEP as usize) as u32;
    sensor_msgs::PointCloud2 {
        header,
        height: 1,
        width: n,
        fields: vec![field("x", 0), field("y", 4), field("z", 8), field("rgb", 12), field("confidence", 16)],
        is_bigendian: false,
        point_step: POINT_STEP,
        row_step: POINT_STEP * n,
        data,
        is_dense: true,
    }
}

/// A rigid transform as `geometry_msgs/Pose`.
pub fn pose_msg(rotation: &Rotation3<f64>, translation: &Vector3<f64>) -> geometry_msgs::Pose {
    let q = UnitQuaternion::from_rotation_matrix(rotation);
    geometry_msgs::Pose {
        position: geometry_msgs::Point { x: translation.x, y: translation.y, z: translation.z },
        orientation: geometry_msgs::Quaternion { x: q.i, y: q.j, z: q.k, w: q.w },
    }
}

fn pose_of(t: &TCam1Cam2) -> geometry_msgs::Pose {
    pose_msg(&t.rotation, &t.translation)
}

/// The map as `sensor_msgs/PointCloud2` in odom (the same fields as [`pointcloud_msg`]: x, y,
/// z, rgb, confidence), its points moved from the chain's origin by `t_map_origin`.
pub fn map_cloud_msg<A, B>(
    header: std_msgs::Header,
    points: &[MapPoint],
    t_map_origin: &Transform<A, B>,
) -> sensor_msgs::PointCloud2 {
    let mut data = Vec::with_capacity(points.len() * POINT_STEP as usize);
    for p in points {
        let q = t_map_origin.apply(&Vector3::new(p.xyz[0] as f64, p.xyz[1] as f64, p.xyz[2] as f64));
        push_point(&mut data, [q.x as f32, q.y as f32, q.z as f32], p.rgb, p.confidence);
    }
    cloud(header, data)
}

/// The pair's pose as `PairPose` and `PoseStamped` (header: view 1's, the frame and time the
/// pose is expressed in; `PairPose.view2_stamp` names view 2's time).
pub fn pose_msgs(
    pose: &PairPose,
    view1: &std_msgs::Header,
    view2_stamp: builtin_interfaces::Time,
    mean_confidence: f32,
) -> (node_msgs::PairPose, geometry_msgs::PoseStamped) {
    // Valid at view 1's time in view 1's frame (tf2's reading); view 2's time is a field.
    let header = view1.clone();
    let p = pose_of(&pose.t_cam1_cam2);
    let pair = node_msgs::PairPose {
        header: header.clone(),
        view2_stamp,
        pose: p.clone(),
        focal_reference: pose.focal1,
        focal_query: pose.focal2,
        used_known_intrinsics: pose.used_known_intrinsics,
        num_inliers: pose.num_inliers as u32,
        mean_confidence,
    };
    let stamped = geometry_msgs::PoseStamped { header, pose: p };
    (pair, stamped)
}

/// The debug image `keypoints/image`: the frame as rgb8 with the keypoints drawn (rings coloured
/// by score, a caption with the count and `settings`), under the input's header.
pub fn debug_image_msg(
    header: std_msgs::Header,
    frame: &Frame,
    kp: &Keypoints,
    settings: &PostParams,
) -> sensor_msgs::Image {
    let (width, height) = (frame.width(), frame.height());
    let mut img = frame.to_rgb_image();
    draw_keypoints(&mut img, &kp.xy, &kp.scores, &settings.caption(kp.len()));
    let data = img.into_raw();
    sensor_msgs::Image { header, height, width, encoding: "rgb8".into(), is_bigendian: 0, step: width * 3, data }
}

/// Why a `sensor_msgs/PointCloud2` cannot be read as coloured points.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CloudLayoutError {
    /// A coordinate field is missing or not float32.
    #[error("the cloud has no float32 field {0}")]
    MissingField(&'static str),
    /// A field reaches past the end of a point.
    #[error("field {name} at offset {offset} does not fit in a point of {point_step} bytes")]
    FieldOutside {
        /// The field.
        name: String,
        /// Its offset.
        offset: u32,
        /// The point's size.
        point_step: u32,
    },
    /// The data is shorter than the header says.
    #[error("{width} x {height} points of {point_step} bytes in rows of {row_step} need more than its {len} bytes")]
    Short {
        /// Points per row.
        width: u32,
        /// Rows.
        height: u32,
        /// Bytes per point.
        point_step: u32,
        /// Bytes per row.
        row_step: u32,
        /// Bytes of data.
        len: usize,
    },
}

/// The points of any `sensor_msgs/PointCloud2` with float32 x, y, z: the colour from a packed
/// `rgb` or `rgba` field (float32 or uint32, 0x00RRGGBB; white without one), the confidence from
/// a float32 `confidence` field (1, DUSt3R's least, without one). Points with a non-finite
/// coordinate (an organised cloud's holes) are left out.
pub fn cloud_points_of(msg: &sensor_msgs::PointCloud2) -> Result<Vec<CloudPoint>, CloudLayoutError> {
    use sensor_msgs::PointField;
    let step = msg.point_step;
    let field = |names: &[&str], types: &[u8]| -> Result<Option<u32>, CloudLayoutError> {
        let Some(f) = msg.fields.iter().find(|f| names.contains(&f.name.as_str()) && types.contains(&f.datatype))
        else {
            return Ok(None);
        };
        if f.offset.checked_add(4).is_none_or(|end| end > step) {
            return Err(CloudLayoutError::FieldOutside { name: f.name.clone(), offset: f.offset, point_step: step });
        }
        Ok(Some(f.offset))
    };
    let coordinate =
        |name: &'static str| field(&[name], &[PointField::FLOAT32])?.ok_or(CloudLayoutError::MissingField(name));
    let (x, y, z) = (coordinate("x")?, coordinate("y")?, coordinate("z")?);
    let rgb = field(&["rgb", "rgba"], &[PointField::FLOAT32, PointField::UINT32])?;
    let confidence = field(&["confidence"], &[PointField::FLOAT32])?;
    let (w, h, row_step) = (msg.width as usize, msg.height as usize, msg.row_step as usize);
    // An empty cloud is a valid message; its height alone must not set the work (a fuzzed
    // 0 x 4e9 cloud with row_step 0 passes every size check below and took seconds of empty rows).
    if w == 0 || h == 0 {
        return Ok(Vec::new());
    }
    let short = || CloudLayoutError::Short {
        width: msg.width,
        height: msg.height,
        point_step: step,
        row_step: msg.row_step,
        len: msg.data.len(),
    };
    // Every point's bytes lie inside its row and every row inside the data (x's check above
    // made the point step at least 4).
    let row_bytes = w.checked_mul(step as usize).ok_or_else(short)?;
    if h > 1 && row_step < row_bytes {
        return Err(short());
    }
    let needed = (h - 1).checked_mul(row_step).and_then(|b| b.checked_add(row_bytes)).ok_or_else(short)?;
    if needed > msg.data.len() {
        return Err(short());
    }
    let word = |point: &[u8], offset: u32| -> [u8; 4] {
        let o = offset as usize;
        let b = [point[o], point[o + 1], point[o + 2], point[o + 3]];
        if msg.is_bigendian {
            [b[3], b[2], b[1], b[0]]
        } else {
            b
        }
    };
    let float = |point: &[u8], offset: u32| f32::from_le_bytes(word(point, offset));
    let mut points = Vec::with_capacity(w * h);
    for row in 0..h {
        let bytes = &msg.data[row * row_step..row * row_step + row_bytes];
        for point in bytes.chunks_exact(step as usize) {
            let xyz = [float(point, x), float(point, y), float(point, z)];
            if !xyz.iter().all(|v| v.is_finite()) {
                continue;
            }
            let rgb = rgb.map_or([255; 3], |o| {
                let v = u32::from_le_bytes(word(point, o));
                [(v >> 16) as u8, (v >> 8) as u8, v as u8]
            });
            let confidence = confidence.map_or(1.0, |o| float(point, o));
            points.push(CloudPoint { xyz, rgb, confidence });
        }
    }
    Ok(points)
}
