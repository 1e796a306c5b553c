//! Every topic the node, the replayer and eval use: one table, so a name or a type is written
//! once. Relative names go under the node's namespace (or beside the bag's image topic in a
//! replay); absolute ones stay as they are.

use crate::msg::{
    diagnostic_msgs, geometry_msgs, nav_msgs, node_msgs, rcl_interfaces, rosgraph_msgs, sensor_msgs, tf2_msgs,
    RosMessage,
};

/// Raw camera frames (`image_transport: raw`).
pub const IMAGE: &str = "image";
/// Compressed camera frames (`image_transport: compressed`).
pub const IMAGE_COMPRESSED: &str = "image/compressed";
/// The camera's intrinsics.
pub const CAMERA_INFO: &str = "camera_info";
/// Depth registered to the camera's frames (`scale_source: depth`).
pub const DEPTH_IMAGE: &str = "depth/image";
/// The robot's static transforms (the camera's mount, with `base_frame`).
pub const TF_STATIC: &str = "/tf_static";
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
/// A tracked frame's pose in the odometry frame (nav_msgs/Odometry).
pub const ODOM: &str = "odom";
/// The keyframes' poses in the odometry frame (nav_msgs/Path).
pub const PATH: &str = "path";
/// The keyframes' points merged in the odometry frame (PointCloud2, transient local); RTAB-Map's
/// name (nav2's `map` is an OccupancyGrid).
pub const CLOUD_MAP: &str = "cloud_map";
/// TF from the odometry frame to the camera or the robot's base (`publish_tf`).
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
    topic::<sensor_msgs::Image>(DEPTH_IMAGE, Direction::Input),
    topic::<rosgraph_msgs::Clock>(CLOCK, Direction::Input),
    topic::<tf2_msgs::TFMessage>(TF_STATIC, Direction::Input),
    topic::<node_msgs::Keypoints>(KEYPOINTS, Direction::Output),
    topic::<sensor_msgs::Image>(KEYPOINTS_IMAGE, Direction::Output),
    topic::<sensor_msgs::PointCloud2>(POINTCLOUD, Direction::Output),
    topic::<node_msgs::PairPose>(PAIR_POSE, Direction::Output),
    topic::<geometry_msgs::PoseStamped>(POSE, Direction::Output),
    topic::<nav_msgs::Odometry>(ODOM, Direction::Output),
    topic::<nav_msgs::Path>(PATH, Direction::Output),
    topic::<sensor_msgs::PointCloud2>(CLOUD_MAP, Direction::Output),
    topic::<tf2_msgs::TFMessage>(TF, Direction::Output),
    topic::<diagnostic_msgs::DiagnosticArray>(DIAGNOSTICS, Direction::Output),
    topic::<rcl_interfaces::Log>(ROSOUT, Direction::Output),
];

/// The name `name` gets in a node of `namespace`: absolute names stay, relative ones go under
/// the namespace, then the last `-r from:=to` whose `from` is `name` or resolves to the same
/// name applies (rcl's remapping; `to` resolved the same way).
pub fn resolve(remaps: &[(String, String)], namespace: &str, name: &str) -> String {
    remapped(remaps, namespace, &absolute(namespace, name))
}

/// `name` under `namespace` unless it is absolute.
fn absolute(namespace: &str, name: &str) -> String {
    if name.starts_with('/') {
        name.to_string()
    } else {
        format!("{}/{name}", namespace.trim_end_matches('/'))
    }
}

/// An already resolved name after the remappings that match it.
fn remapped(remaps: &[(String, String)], namespace: &str, resolved: &str) -> String {
    remap_of(remaps, namespace, resolved).unwrap_or_else(|| resolved.to_string())
}

/// Where the last remapping whose `from` resolves to `resolved` sends it, if one does.
fn remap_of(remaps: &[(String, String)], namespace: &str, resolved: &str) -> Option<String> {
    remaps.iter().rev().find(|(from, _)| absolute(namespace, from) == resolved).map(|(_, to)| absolute(namespace, to))
}

/// The camera topics a node subscribes to, paired as image_transport pairs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputTopics {
    /// The frames: the resolved `image`, with `/compressed` appended for the compressed
    /// transport (so remapping `image` moves both).
    pub image: String,
    /// The intrinsics: `camera_info` beside the resolved `image` (`/cam/image_raw` ->
    /// `/cam/camera_info`), unless `camera_info` itself is remapped.
    pub camera_info: String,
    /// Registered depth: the resolved `depth/image` (remap it to the driver's, e.g.
    /// `/camera/aligned_depth_to_color/image_raw`).
    pub depth: String,
}

/// The inputs of a node in `namespace` with `remaps`, reading `compressed` frames or raw ones.
pub fn input_topics(remaps: &[(String, String)], namespace: &str, compressed: bool) -> InputTopics {
    let base = resolve(remaps, namespace, IMAGE);
    let image = if compressed {
        let transport = IMAGE_COMPRESSED.strip_prefix(IMAGE).unwrap_or("/compressed");
        remapped(remaps, namespace, &format!("{base}{transport}"))
    } else {
        base.clone()
    };
    let camera_info = remap_of(remaps, namespace, &absolute(namespace, CAMERA_INFO)).unwrap_or_else(|| {
        let parent = base.rsplit_once('/').map_or("", |(parent, _)| parent);
        remapped(remaps, namespace, &format!("{parent}/{CAMERA_INFO}"))
    });
    InputTopics { image, camera_info, depth: resolve(remaps, namespace, DEPTH_IMAGE) }
}

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
