//! The pipeline's outputs, built once and emitted through one interface: the live node
//! publishes them, the replayer writes them to a bag. A new output is a new [`Output`] variant
//! (its topic, type and builder here) and one publisher in the node.

pub mod odom;

use crate::backend::{BackendError, CameraK, PairOutput, PairReconstructor, PairRequest};
use crate::geometry::lens::{Camera, Lens, LensError};
use crate::geometry::Intrinsics;
use crate::image::Frame;
use crate::msg::convert::{debug_image_msg, keypoints_msg, pointcloud_msg, pose_msgs, ColouredPoints};
use crate::msg::{geometry_msgs, nav_msgs, node_msgs, sensor_msgs, std_msgs, tf2_msgs, to_cdr, CdrError, RosMessage};
use crate::params::qos::Qos;
use crate::params::topics;
use crate::params::NodeParams;
use crate::superpoint::{Keypoints, PostParams};

/// One message the pipeline emits.
#[derive(Clone, Debug)]
pub enum Output {
    /// A frame's keypoints (the frame's header).
    Keypoints(node_msgs::Keypoints),
    /// A frame with its keypoints drawn (the frame's header).
    DebugImage(sensor_msgs::Image),
    /// A pair's cloud (view 1's header).
    Cloud(sensor_msgs::PointCloud2),
    /// A pair's pose with its evidence (view 1's stamp and frame; view 2's stamp a field).
    PairPose(node_msgs::PairPose),
    /// A pair's pose (as `PairPose`'s header).
    Pose(geometry_msgs::PoseStamped),
    /// A tracked frame's pose in odom (the frame's stamp); boxed, its covariances are large.
    Odometry(Box<nav_msgs::Odometry>),
    /// The keyframes' poses in odom (the newest keyframe's stamp).
    Path(nav_msgs::Path),
    /// The map in odom (the newest keyframe's stamp).
    Map(sensor_msgs::PointCloud2),
    /// `odom_frame` to the camera or base, for a tracked frame (`publish_tf`).
    Tf(tf2_msgs::TFMessage),
}

/// The kinds of [`Output`], for sinks that declare their topics before the first message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// [`Output::Keypoints`].
    Keypoints,
    /// [`Output::DebugImage`].
    DebugImage,
    /// [`Output::Cloud`].
    Cloud,
    /// [`Output::PairPose`].
    PairPose,
    /// [`Output::Pose`].
    Pose,
    /// [`Output::Odometry`].
    Odometry,
    /// [`Output::Path`].
    Path,
    /// [`Output::Map`].
    Map,
    /// [`Output::Tf`].
    Tf,
}

impl OutputKind {
    /// Every kind, in the order the node advertises them.
    pub const ALL: [OutputKind; 9] = [
        OutputKind::Keypoints,
        OutputKind::DebugImage,
        OutputKind::Cloud,
        OutputKind::PairPose,
        OutputKind::Pose,
        OutputKind::Odometry,
        OutputKind::Path,
        OutputKind::Map,
        OutputKind::Tf,
    ];

    /// The topic (see [`topics`]).
    pub fn topic(self) -> &'static str {
        match self {
            OutputKind::Keypoints => topics::KEYPOINTS,
            OutputKind::DebugImage => topics::KEYPOINTS_IMAGE,
            OutputKind::Cloud => topics::POINTCLOUD,
            OutputKind::PairPose => topics::PAIR_POSE,
            OutputKind::Pose => topics::POSE,
            OutputKind::Odometry => topics::ODOM,
            OutputKind::Path => topics::PATH,
            OutputKind::Map => topics::CLOUD_MAP,
            OutputKind::Tf => topics::TF,
        }
    }

    /// The message type's ROS name, DDS name and ros2msg definition.
    fn schema(self) -> (&'static str, &'static str, &'static str) {
        fn of<T: RosMessage>() -> (&'static str, &'static str, &'static str) {
            (T::ROS_TYPE, T::DDS_TYPE, T::DEFINITION)
        }
        match self {
            OutputKind::Keypoints => of::<node_msgs::Keypoints>(),
            OutputKind::DebugImage => of::<sensor_msgs::Image>(),
            OutputKind::Cloud => of::<sensor_msgs::PointCloud2>(),
            OutputKind::PairPose => of::<node_msgs::PairPose>(),
            OutputKind::Pose => of::<geometry_msgs::PoseStamped>(),
            OutputKind::Odometry => of::<nav_msgs::Odometry>(),
            OutputKind::Path => of::<nav_msgs::Path>(),
            OutputKind::Map => of::<sensor_msgs::PointCloud2>(),
            OutputKind::Tf => of::<tf2_msgs::TFMessage>(),
        }
    }

    /// The type's name and ros2msg definition (what a bag's schema holds).
    pub fn definition(self) -> (&'static str, &'static str) {
        let (ros_type, _, definition) = self.schema();
        (ros_type, definition)
    }

    /// The type's DDS name, `pkg::msg::dds_::Name_`.
    pub fn dds_type(self) -> &'static str {
        self.schema().1
    }

    /// What a pair gives.
    pub const OF_PAIRS: [OutputKind; 3] = [OutputKind::Cloud, OutputKind::PairPose, OutputKind::Pose];

    /// What the trajectory gives, with TF when `publish_tf`.
    pub fn of_trajectory(publish_tf: bool) -> Vec<OutputKind> {
        let mut kinds = vec![OutputKind::Odometry, OutputKind::Path, OutputKind::Map];
        if publish_tf {
            kinds.push(OutputKind::Tf);
        }
        kinds
    }

    /// The QoS its publisher has unless overridden: the path and the map are state, kept for
    /// late joiners (transient local, the last one), as a map server's map is; the rest is
    /// reliable, volatile, keep last 10.
    pub fn default_qos(self) -> Qos {
        match self {
            OutputKind::Path | OutputKind::Map => Qos { depth: 1, transient_local: true, ..Qos::OUTPUTS },
            _ => Qos::OUTPUTS,
        }
    }
}

impl Output {
    /// Which output this is.
    pub fn kind(&self) -> OutputKind {
        match self {
            Output::Keypoints(_) => OutputKind::Keypoints,
            Output::DebugImage(_) => OutputKind::DebugImage,
            Output::Cloud(_) => OutputKind::Cloud,
            Output::PairPose(_) => OutputKind::PairPose,
            Output::Pose(_) => OutputKind::Pose,
            Output::Odometry(_) => OutputKind::Odometry,
            Output::Path(_) => OutputKind::Path,
            Output::Map(_) => OutputKind::Map,
            Output::Tf(_) => OutputKind::Tf,
        }
    }

    /// The message as CDR with its encapsulation header (what a bag stores).
    pub fn to_cdr(&self) -> Result<Vec<u8>, CdrError> {
        match self {
            Output::Keypoints(m) => to_cdr(m),
            Output::DebugImage(m) => to_cdr(m),
            Output::Cloud(m) => to_cdr(m),
            Output::PairPose(m) => to_cdr(m),
            Output::Pose(m) => to_cdr(m),
            Output::Odometry(m) => to_cdr(m),
            Output::Path(m) => to_cdr(m),
            Output::Map(m) => to_cdr(m),
            Output::Tf(m) => to_cdr(m),
        }
    }
}

/// Where outputs go: the node's publishers or a bag.
pub trait OutputSink {
    /// Why an output could not be emitted.
    type Error;
    /// Emits one output.
    fn emit(&mut self, output: Output) -> Result<(), Self::Error>;
    /// Whether outputs of `kind` are worth making (the debug image is drawn only for a
    /// reader).
    fn wants(&self, kind: OutputKind) -> bool {
        let _ = kind;
        true
    }
}

/// What a frame gives: its keypoints, and the debug image (captioned with the settings it was
/// found with) when someone looks at it.
pub fn frame_outputs(
    header: &std_msgs::Header,
    frame: &Frame,
    kp: &Keypoints,
    debug_image: Option<&PostParams>,
) -> Vec<Output> {
    let mut out = vec![Output::Keypoints(keypoints_msg(header.clone(), frame.width(), frame.height(), kp))];
    if let Some(settings) = debug_image {
        out.push(Output::DebugImage(debug_image_msg(header.clone(), frame, kp, settings)));
    }
    out
}

/// The camera of `frame` from a CameraInfo [`check_camera_info`] accepted, when it is for frames
/// of its size: K and the lens D describes; for `rectified` images (`rectified_images`, as
/// image_proc's `image_rect`, whose CameraInfo still describes the raw camera) P's pinhole and no
/// lens (K when P is unset).
pub fn known_camera(camera_info: Option<&sensor_msgs::CameraInfo>, frame: &Frame, rectified: bool) -> Option<Camera> {
    let i = camera_info.filter(|i| i.width == frame.width() && i.height == frame.height())?;
    let p_set = i.p[0] > 0.0 && i.p[5] > 0.0 && [i.p[0], i.p[2], i.p[5], i.p[6]].iter().all(|v| v.is_finite());
    if rectified && p_set {
        return Some(Camera { k: Intrinsics { fx: i.p[0], fy: i.p[5], cx: i.p[2], cy: i.p[6] }, lens: Lens::Pinhole });
    }
    let lens = if rectified {
        Lens::Pinhole
    } else {
        Lens::from_camera_info(&i.distortion_model, &i.d).unwrap_or(Lens::Pinhole)
    };
    Some(Camera { k: Intrinsics { fx: i.k[0], fy: i.k[4], cx: i.k[2], cy: i.k[5] }, lens })
}

/// What DUSt3R gave for a keyframe pair.
pub struct Reconstructed {
    /// The backend's answer.
    pub geometry: PairOutput,
    /// CameraInfo was for another image size than the frames (the focal was estimated).
    pub camera_info_mismatch: bool,
}

/// A keyframe pair through the DUSt3R backend. CameraInfo's K is used when it describes the
/// frames.
pub fn reconstruct_pair(
    model: &dyn PairReconstructor,
    first: &Frame,
    second: &Frame,
    camera_info: Option<&sensor_msgs::CameraInfo>,
    params: &NodeParams,
) -> Result<Reconstructed, BackendError> {
    let rectified = params.rectified_images;
    let known =
        known_camera(camera_info, first, rectified).filter(|_| known_camera(camera_info, second, rectified).is_some());
    let camera_info_mismatch = camera_info.is_some() && known.is_none();
    let request = PairRequest {
        first,
        second,
        known: known.map(|c| CameraK::from(c.k)),
        min_confidence: params.pose_confidence_threshold as f32,
        conf_pct: params.server_conf_pct,
        lens: known.map_or(Lens::Pinhole, |c| c.lens),
    };
    let geometry = model.reconstruct(&request)?;
    Ok(Reconstructed { geometry, camera_info_mismatch })
}

/// What a pair gives: the cloud of both views (view 1's stamp and frame) and, when it has a
/// pose, the pose messages.
pub fn pair_messages(
    out: &PairOutput,
    first: &std_msgs::Header,
    second: &std_msgs::Header,
    params: &NodeParams,
) -> Vec<Output> {
    let cloud = pointcloud_msg(
        first.clone(),
        &[
            ColouredPoints { points: &out.view1, rgb: &out.rgb1 },
            ColouredPoints { points: &out.view2_in_1, rgb: &out.rgb2 },
        ],
        params.confidence_threshold as f32,
        params.cloud_stride,
    );
    let mut outputs = vec![Output::Cloud(cloud)];
    if let Ok(pose) = &out.pose {
        let mean_conf = {
            let all = out.view1.confidence.iter().chain(&out.view2_in_1.confidence);
            let n = out.view1.confidence.len() + out.view2_in_1.confidence.len();
            (all.map(|&c| c as f64).sum::<f64>() / n.max(1) as f64) as f32
        };
        let (pair, stamped) = pose_msgs(pose, first, second.stamp.clone(), mean_conf);
        outputs.push(Output::PairPose(pair));
        outputs.push(Output::Pose(stamped));
    }
    outputs
}

/// Why a CameraInfo cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CameraInfoError {
    /// Width or height is zero.
    #[error("zero image size {width}x{height}")]
    ZeroSize {
        /// The message's width.
        width: u32,
        /// The message's height.
        height: u32,
    },
    /// A focal length is not a positive finite number.
    #[error("K has no usable focal lengths (fx {fx}, fy {fy})")]
    Focal {
        /// `K[0]`.
        fx: f64,
        /// `K[4]`.
        fy: f64,
    },
    /// The distortion model is unknown or its coefficients unusable.
    #[error(transparent)]
    Lens(#[from] LensError),
    /// The principal point is not finite.
    #[error("K has a non-finite principal point ({cx}, {cy})")]
    PrincipalPoint {
        /// `K[2]`.
        cx: f64,
        /// `K[5]`.
        cy: f64,
    },
}

/// A CameraInfo the pose can use: a size, a pinhole K with positive finite focals and a finite
/// principal point, and a distortion model this node applies (all-zero D: none). DUSt3R sees the
/// image as it arrives; the lens is undone on the pixels PnP sees.
pub fn check_camera_info(i: &sensor_msgs::CameraInfo) -> Result<(), CameraInfoError> {
    if i.width == 0 || i.height == 0 {
        return Err(CameraInfoError::ZeroSize { width: i.width, height: i.height });
    }
    let (fx, fy, cx, cy) = (i.k[0], i.k[4], i.k[2], i.k[5]);
    if !(fx.is_finite() && fy.is_finite() && fx > 0.0 && fy > 0.0) {
        return Err(CameraInfoError::Focal { fx, fy });
    }
    if !(cx.is_finite() && cy.is_finite()) {
        return Err(CameraInfoError::PrincipalPoint { cx, cy });
    }
    Lens::from_camera_info(&i.distortion_model, &i.d)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_images_take_k_and_the_lens_and_rectified_ones_p_and_none() {
        let frame = Frame::from_raw("mono8", 4, 2, 4, false, vec![0; 8]).unwrap();
        let mut info = sensor_msgs::CameraInfo {
            width: 4,
            height: 2,
            distortion_model: "plumb_bob".into(),
            d: vec![0.1, 0.0, 0.0, 0.0, 0.0],
            k: [500.0, 0.0, 2.0, 0.0, 510.0, 1.0, 0.0, 0.0, 1.0],
            p: [480.0, 0.0, 2.5, 0.0, 0.0, 490.0, 1.5, 0.0, 0.0, 0.0, 1.0, 0.0],
            ..Default::default()
        };
        let raw = known_camera(Some(&info), &frame, false).unwrap();
        assert_eq!(raw.k, Intrinsics { fx: 500.0, fy: 510.0, cx: 2.0, cy: 1.0 });
        assert_eq!(raw.lens, Lens::PlumbBob([0.1, 0.0, 0.0, 0.0, 0.0]));
        let rectified = known_camera(Some(&info), &frame, true).unwrap();
        assert_eq!(rectified, Camera { k: Intrinsics { fx: 480.0, fy: 490.0, cx: 2.5, cy: 1.5 }, lens: Lens::Pinhole });
        // No P (an uncalibrated driver's zeros): K, still without the lens.
        info.p = [0.0; 12];
        let rectified = known_camera(Some(&info), &frame, true).unwrap();
        assert_eq!((rectified.k.fx, rectified.lens), (500.0, Lens::Pinhole));
        // Another image size: not this camera.
        info.width = 8;
        assert_eq!(known_camera(Some(&info), &frame, false), None);
    }
}
