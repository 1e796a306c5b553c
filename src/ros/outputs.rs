//! The pipeline's outputs, built once and emitted through one interface: the live node
//! publishes them, the replayer writes them to a bag. A new output is a new [`Output`] variant
//! (its topic, type and builder here) and one publisher in the node.

use super::convert::{debug_image_msg, keypoints_msg, pointcloud_msg, pose_msgs, ColouredPoints};
use super::msg::{geometry_msgs, node_msgs, sensor_msgs, std_msgs, tf2_msgs, to_cdr, CdrError, RosMessage};
use super::params::NodeParams;
use super::topics;
use crate::backend::{BackendError, CameraK, PairReconstructor, PairRequest};
use crate::geometry::NoPose;
use crate::image::Frame;
use crate::superpoint::Keypoints;

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
    /// View 1's frame to view 2's.
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
    /// [`Output::Tf`].
    Tf,
}

impl OutputKind {
    /// Every kind, in the order the node advertises them.
    pub const ALL: [OutputKind; 6] = [
        OutputKind::Keypoints,
        OutputKind::DebugImage,
        OutputKind::Cloud,
        OutputKind::PairPose,
        OutputKind::Pose,
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

    /// What a pair gives, with TF when `publish_tf`.
    pub fn of_pairs(publish_tf: bool) -> Vec<OutputKind> {
        let mut kinds = vec![OutputKind::Cloud, OutputKind::PairPose, OutputKind::Pose];
        if publish_tf {
            kinds.push(OutputKind::Tf);
        }
        kinds
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
}

/// What a frame gives: its keypoints, and the debug image when someone looks at it.
pub fn frame_outputs(header: &std_msgs::Header, frame: &Frame, kp: &Keypoints, debug_image: bool) -> Vec<Output> {
    let mut out = vec![Output::Keypoints(keypoints_msg(header.clone(), frame.width(), frame.height(), kp))];
    if debug_image {
        out.push(Output::DebugImage(debug_image_msg(header.clone(), frame, kp)));
    }
    out
}

/// What a keyframe pair gave.
pub struct PairOutputs {
    /// The cloud, and the pose messages when there is a pose.
    pub outputs: Vec<Output>,
    /// CameraInfo was for another image size than the frames (the focal was estimated).
    pub camera_info_mismatch: bool,
    /// Why there is no pose, when there is none.
    pub no_pose: Option<NoPose>,
}

/// A keyframe pair through the DUSt3R backend: the cloud of both views (view 1's stamp and
/// frame), the pose messages (and TF when `publish_tf`), or why there is no pose. CameraInfo's
/// K is used when it describes the frames.
pub fn pair_outputs(
    model: &dyn PairReconstructor,
    first: (&std_msgs::Header, &Frame),
    second: (&std_msgs::Header, &Frame),
    camera_info: Option<&sensor_msgs::CameraInfo>,
    params: &NodeParams,
) -> Result<PairOutputs, BackendError> {
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
    let mut outputs = vec![Output::Cloud(cloud)];
    let no_pose = match out.pose {
        Ok(pose) => {
            let mean_conf = {
                let all = out.view1.confidence.iter().chain(&out.view2_in_1.confidence);
                let n = out.view1.confidence.len() + out.view2_in_1.confidence.len();
                (all.map(|&c| c as f64).sum::<f64>() / n.max(1) as f64) as f32
            };
            let child = format!("{}_view2", first.0.frame_id);
            let (pair, stamped, tf) = pose_msgs(&pose, first.0, second.0.stamp.clone(), &child, mean_conf);
            outputs.push(Output::PairPose(pair));
            outputs.push(Output::Pose(stamped));
            if params.publish_tf {
                outputs.push(Output::Tf(tf2_msgs::TFMessage { transforms: vec![tf] }));
            }
            None
        }
        Err(reason) => Some(reason),
    };
    Ok(PairOutputs { outputs, camera_info_mismatch, no_pose })
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
        /// K[0].
        fx: f64,
        /// K[4].
        fy: f64,
    },
    /// The principal point is not finite.
    #[error("K has a non-finite principal point ({cx}, {cy})")]
    PrincipalPoint {
        /// K[2].
        cx: f64,
        /// K[5].
        cy: f64,
    },
}

/// A CameraInfo the pose can use: a size, and a pinhole K with positive finite focals and a
/// finite principal point. (Rectification and distortion are not applied: DUSt3R sees the image
/// as it arrives.)
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
    Ok(())
}
