//! A keyframe pair to ROS messages, shared by the live node and the bag replayer: the backend's
//! reconstruction, the cloud of both views and the pose messages, CameraInfo's K when it
//! describes the frames.

use super::convert::{pointcloud_msg, pose_msgs, ColouredPoints};
use super::msg::{geometry_msgs, sensor_msgs, sp_dust3r_msgs, std_msgs};
use super::params::NodeParams;
use crate::backend::{BackendError, CameraK, PairReconstructor, PairRequest};
use crate::image::Frame;

/// What a pair gives: the cloud (view 1's stamp and frame), whether CameraInfo was for another
/// image size, and the pose messages or why there is no pose.
pub struct Reconstruction {
    pub cloud: sensor_msgs::PointCloud2,
    pub camera_info_mismatch: bool,
    pub pose: Result<(sp_dust3r_msgs::PairPose, geometry_msgs::PoseStamped, geometry_msgs::TransformStamped), String>,
}

/// A keyframe pair through the DUSt3R backend: the cloud of both views (view 1's stamp and
/// frame) and the pose messages, or why there is no pose.
pub fn reconstruct(
    model: &dyn PairReconstructor,
    first: (&std_msgs::Header, &Frame),
    second: (&std_msgs::Header, &Frame),
    camera_info: Option<&sensor_msgs::CameraInfo>,
    params: &NodeParams,
) -> Result<Reconstruction, BackendError> {
    // Known intrinsics from CameraInfo when it describes these frames.
    let fits = |i: &&sensor_msgs::CameraInfo| {
        [first.1, second.1].iter().all(|f| i.width == f.width() && i.height == f.height())
    };
    let camera_info_mismatch = camera_info.is_some_and(|i| !fits(&i));
    let known = camera_info.filter(fits).map(|i| CameraK { fx: i.k[0], fy: i.k[4], cx: i.k[2], cy: i.k[5] });
    let request = PairRequest {
        first: first.1,
        second: second.1,
        known,
        min_confidence: params.pose_confidence_threshold as f32,
        conf_pct: params.server_conf_pct,
    };
    let out = model.reconstruct(&request)?;
    let cloud = pointcloud_msg(
        first.0.clone(),
        &[
            ColouredPoints { points: &out.view1, rgb: &out.rgb1 },
            ColouredPoints { points: &out.view2_in_1, rgb: &out.rgb2 },
        ],
        params.confidence_threshold as f32,
        params.cloud_stride,
    );
    let mean_conf = {
        let all = out.view1.confidence.iter().chain(&out.view2_in_1.confidence);
        let n = out.view1.confidence.len() + out.view2_in_1.confidence.len();
        (all.map(|&c| c as f64).sum::<f64>() / n.max(1) as f64) as f32
    };
    let child = format!("{}_view2", first.0.frame_id);
    let pose = out.pose.map(|p| pose_msgs(&p, first.0, second.0.stamp.clone(), &child, mean_conf));
    Ok(Reconstruction { cloud, camera_info_mismatch, pose })
}

/// A CameraInfo the pose can use: a size, and a pinhole K with positive finite focals and a
/// finite principal point. (Rectification and distortion are not applied: DUSt3R sees the image
/// as it arrives.)
pub fn check_camera_info(i: &sensor_msgs::CameraInfo) -> Result<(), String> {
    if i.width == 0 || i.height == 0 {
        return Err(format!("zero image size {}x{}", i.width, i.height));
    }
    let (fx, fy, cx, cy) = (i.k[0], i.k[4], i.k[2], i.k[5]);
    if !(fx.is_finite() && fy.is_finite() && fx > 0.0 && fy > 0.0) {
        return Err(format!("K has no usable focal lengths (fx {fx}, fy {fy})"));
    }
    if !(cx.is_finite() && cy.is_finite()) {
        return Err(format!("K has a non-finite principal point ({cx}, {cy})"));
    }
    Ok(())
}
