//! Every topic the node, the replayer and eval use: one table, so a name or a type is written
//! once. Relative names go under the node's namespace (or beside the bag's image topic in a
//! replay); absolute ones stay as they are.

use super::msg::{
    diagnostic_msgs, geometry_msgs, rcl_interfaces, rosgraph_msgs, sensor_msgs, sp_dust3r_msgs, tf2_msgs, RosMessage,
};

/// Raw camera frames (`image_transport: raw`).
pub const IMAGE: &str = "image";
/// Compressed camera frames (`image_transport: compressed`).
pub const IMAGE_COMPRESSED: &str = "image/compressed";
/// The camera's intrinsics.
pub const CAMERA_INFO: &str = "camera_info";
/// Simulated time (`use_sim_time`).
pub const CLOCK: &str = "/clock";
/// SuperPoint keypoints and descriptors of every processed frame.
pub const KEYPOINTS: &str = "keypoints";
/// The frame with its keypoints drawn, while someone subscribes.
pub const KEYPOINTS_IMAGE: &str = "keypoints/image";
/// DUSt3R's cloud of a keyframe pair.
pub const POINTCLOUD: &str = "pointcloud";
/// A pair's relative pose with its evidence.
pub const PAIR_POSE: &str = "pair_pose";
/// A pair's relative pose as a PoseStamped.
pub const POSE: &str = "pose";
/// TF from view 1's camera frame to view 2's (`publish_tf`).
pub const TF: &str = "/tf";
/// The node's health.
pub const DIAGNOSTICS: &str = "/diagnostics";
/// The node's log records.
pub const ROSOUT: &str = "/rosout";

/// Whether the node reads or writes a topic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The node subscribes.
    Input,
    /// The node publishes.
    Output,
}

/// One topic of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topic {
    /// Its name, relative (under the namespace) or absolute.
    pub name: &'static str,
    /// Its ROS type, `pkg/msg/Type`.
    pub ros_type: &'static str,
    /// Read or written.
    pub direction: Direction,
}

const fn topic<T: RosMessage>(name: &'static str, direction: Direction) -> Topic {
    Topic { name, ros_type: T::ROS_TYPE, direction }
}

/// Every topic the node uses.
pub const TOPICS: &[Topic] = &[
    topic::<sensor_msgs::Image>(IMAGE, Direction::Input),
    topic::<sensor_msgs::CompressedImage>(IMAGE_COMPRESSED, Direction::Input),
    topic::<sensor_msgs::CameraInfo>(CAMERA_INFO, Direction::Input),
    topic::<rosgraph_msgs::Clock>(CLOCK, Direction::Input),
    topic::<sp_dust3r_msgs::Keypoints>(KEYPOINTS, Direction::Output),
    topic::<sensor_msgs::Image>(KEYPOINTS_IMAGE, Direction::Output),
    topic::<sensor_msgs::PointCloud2>(POINTCLOUD, Direction::Output),
    topic::<sp_dust3r_msgs::PairPose>(PAIR_POSE, Direction::Output),
    topic::<geometry_msgs::PoseStamped>(POSE, Direction::Output),
    topic::<tf2_msgs::TFMessage>(TF, Direction::Output),
    topic::<diagnostic_msgs::DiagnosticArray>(DIAGNOSTICS, Direction::Output),
    topic::<rcl_interfaces::Log>(ROSOUT, Direction::Output),
];

/// Where an output goes in a replay: beside the image topic, as the node's would under the
/// camera's namespace (`/cam/image_raw` -> `/cam/keypoints`); absolute names stay.
pub fn output_topic(image_topic: &str, name: &str) -> String {
    if name.starts_with('/') {
        return name.to_string();
    }
    let base = image_topic.trim_end_matches("/compressed");
    match base.rsplit_once('/') {
        Some((ns, _)) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => format!("/{name}"),
    }
}
