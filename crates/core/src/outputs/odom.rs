//! The trajectory as ROS sees it (REP 103 and 105): the chain's origin (the first keyframe's
//! optical frame) placed in the `odom` frame, `nav_msgs/Odometry` and TF for every tracked
//! frame, the keyframes' `nav_msgs/Path` and the map cloud.
//!
//! Without `base_frame`, odom is the first keyframe's camera turned to REP 103's body axes
//! (x forward, y left, z up: a level camera gives a level map), and the child is the image's
//! frame. With `base_frame`, odom is where the robot's base was at the first keyframe, found
//! through the robot's static `base_frame -> camera frame` transform, and the child is the base,
//! so every frame of the robot's tree keeps the one parent it has (as Isaac ROS Visual SLAM and
//! RTAB-Map do). Positions are in metres with a metric `scale_source`, else in DUSt3R's scale,
//! and then the mount contributes its rotation only (see the pipeline).

use nalgebra::{Rotation3, UnitQuaternion, Vector3};

use std::ops::AddAssign;

use crate::geometry::pnp::{covariance_in, Covariance6};
use crate::geometry::Transform;
use crate::msg::convert::{map_cloud_msg, pose_msg};
use crate::msg::{builtin_interfaces, geometry_msgs, nav_msgs, std_msgs, tf2_msgs};
use crate::outputs::Output;
use crate::vo::map::VoxelMap;
use crate::vo::odometry::{Origin, Stamp, TOriginFrame, TOriginKeyframe};
use crate::vo::tracking::FrameCam;

/// The odometry frame (`odom_frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Odom;
/// The robot's base (`base_frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Base;
/// The odometry's child: the robot's base with a mount, else the camera.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Child;

/// The camera's mount on the robot: `base_frame` and the static transform to the camera.
#[derive(Clone, Debug, PartialEq)]
pub struct Mount {
    /// `base_frame`.
    pub base_frame: String,
    /// The camera's pose in the base frame (from /tf_static).
    pub t_base_cam: Transform<Base, FrameCam>,
}

/// REP 103's body axes from an optical frame's: x forward = optical z, y left = -optical x,
/// z up = -optical y (the rotation of a camera_link -> camera_optical_frame transform).
pub fn body_from_optical() -> Rotation3<f64> {
    Rotation3::from_matrix_unchecked(nalgebra::Matrix3::new(0.0, 0.0, 1.0, -1.0, 0.0, 0.0, 0.0, -1.0, 0.0))
}

/// `nanoseconds` as a ROS time.
pub fn time_of(stamp: Stamp) -> builtin_interfaces::Time {
    builtin_interfaces::Time {
        sec: stamp.div_euclid(1_000_000_000) as i32,
        nanosec: stamp.rem_euclid(1_000_000_000) as u32,
    }
}

/// A ROS time in nanoseconds (a keyframe's identity on the chain).
pub fn stamp_of(t: &builtin_interfaces::Time) -> Stamp {
    i64::from(t.sec) * 1_000_000_000 + i64::from(t.nanosec)
}

/// Builds the odometry outputs; remembers the last tracked pose for the twist.
#[derive(Clone, Debug)]
pub struct OdomOutputs {
    /// `odom_frame`.
    pub odom_frame: String,
    /// The camera's mount when `base_frame` is set and its transform known.
    pub mount: Option<Mount>,
    last: Option<(Stamp, TOriginFrame)>,
}

impl OdomOutputs {
    /// Outputs in `odom_frame`, of the base when `mount` is given, else of the camera.
    pub fn new(odom_frame: &str, mount: Option<Mount>) -> Self {
        Self { odom_frame: odom_frame.to_string(), mount, last: None }
    }

    /// Forgets the last pose (a new chain).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Where the origin sits in odom.
    fn t_odom_origin(&self) -> Transform<Odom, Origin> {
        match &self.mount {
            Some(m) => Transform::new(m.t_base_cam.rotation, m.t_base_cam.translation),
            None => Transform::new(body_from_optical(), Vector3::zeros()),
        }
    }

    /// The child frame and its pose in odom for a camera at `t_origin_cam`.
    fn child_pose(&self, camera_frame: &str, t_origin_cam: &TOriginFrame) -> (String, Transform<Odom, Child>) {
        let t_odom_cam = self.t_odom_origin().compose(t_origin_cam);
        let (frame, t) = match &self.mount {
            Some(m) => (m.base_frame.clone(), t_odom_cam.compose(&m.t_base_cam.inverse())),
            None => (camera_frame.to_string(), Transform::new(t_odom_cam.rotation, t_odom_cam.translation)),
        };
        (frame, Transform::new(t.rotation, t.translation))
    }

    /// A tracked frame (its image's header, its pose on the chain with its uncertainty):
    /// `nav_msgs/Odometry` at the frame's stamp, and TF `odom_frame -> child` when `publish_tf`.
    /// The pose's covariance is tracking's, in odom's axes, its position part widened by the
    /// relative scale uncertainty `scale_sigma` along the position (metric runs; 0 otherwise);
    /// none known: [`UNKNOWN_VARIANCE`] on the diagonal. The twist is the motion since the
    /// previous tracked frame, in the child frame, with an unknown covariance ([`UNKNOWN_VARIANCE`]
    /// on the diagonal, so a filter such as robot_localization gives it no weight).
    pub fn frame(
        &mut self,
        header: &std_msgs::Header,
        t_origin_cam: &TOriginFrame,
        uncertainty: (Option<&Covariance6>, f64),
        publish_tf: bool,
    ) -> Vec<Output> {
        let stamp = stamp_of(&header.stamp);
        let (child, pose) = self.child_pose(&header.frame_id, t_origin_cam);
        let mut twist = geometry_msgs::Twist::default();
        if let Some((then, previous)) = self.last.as_ref().filter(|(then, _)| *then < stamp) {
            let dt = (stamp - then) as f64 * 1e-9;
            let (_, before) = self.child_pose(&header.frame_id, previous);
            // The child's motion since then, in its own frame.
            let delta = before.inverse().compose(&pose);
            let v = delta.translation / dt;
            let w = UnitQuaternion::from_rotation_matrix(&delta.rotation).scaled_axis() / dt;
            twist = geometry_msgs::Twist { linear: vector(&v), angular: vector(&w) };
        }
        self.last = Some((stamp, *t_origin_cam));
        let odom_header = std_msgs::Header { stamp: header.stamp.clone(), frame_id: self.odom_frame.clone() };
        let p = pose_msg(&pose.rotation, &pose.translation);
        let (covariance, scale_sigma) = uncertainty;
        let pose_covariance = covariance.map_or_else(unknown, |c| {
            let mut c = covariance_in(&self.t_odom_origin(), c);
            let along = pose.translation * scale_sigma;
            c.fixed_view_mut::<3, 3>(0, 0).add_assign(&(along * along.transpose()));
            row_major(&c)
        });
        let mut out = vec![Output::Odometry(Box::new(nav_msgs::Odometry {
            header: odom_header.clone(),
            child_frame_id: child.clone(),
            pose: geometry_msgs::PoseWithCovariance { pose: p.clone(), covariance: pose_covariance },
            twist: geometry_msgs::TwistWithCovariance { twist, covariance: unknown() },
        }))];
        if publish_tf {
            out.push(Output::Tf(tf2_msgs::TFMessage {
                transforms: vec![geometry_msgs::TransformStamped {
                    header: odom_header,
                    child_frame_id: child,
                    transform: geometry_msgs::Transform {
                        translation: vector(&pose.translation),
                        rotation: p.orientation,
                    },
                }],
            }));
        }
        out
    }

    /// After a reset: an empty path and an empty map in odom at `stamp`, so that displays that
    /// keep the last one (transient local) clear.
    pub fn cleared(&self, stamp: builtin_interfaces::Time) -> Vec<Output> {
        let header = std_msgs::Header { stamp, frame_id: self.odom_frame.clone() };
        vec![
            Output::Path(nav_msgs::Path { header: header.clone(), poses: Vec::new() }),
            Output::Map(map_cloud_msg(header, &[], &self.t_odom_origin())),
        ]
    }

    /// After the chain grew: the keyframes' path (each keyframe's camera, or base, at its
    /// stamp; the header at the newest one's) and the map cloud in odom, when there is a map.
    pub fn chain(&self, camera_frame: &str, path: &[(Stamp, TOriginKeyframe)], map: Option<&VoxelMap>) -> Vec<Output> {
        let Some(&(newest, _)) = path.iter().max_by_key(|(s, _)| *s) else { return Vec::new() };
        let header = std_msgs::Header { stamp: time_of(newest), frame_id: self.odom_frame.clone() };
        let poses = path
            .iter()
            .map(|(stamp, t)| {
                let (_, pose) = self.child_pose(camera_frame, &Transform::new(t.rotation, t.translation));
                geometry_msgs::PoseStamped {
                    header: std_msgs::Header { stamp: time_of(*stamp), frame_id: self.odom_frame.clone() },
                    pose: pose_msg(&pose.rotation, &pose.translation),
                }
            })
            .collect();
        let mut out = vec![Output::Path(nav_msgs::Path { header: header.clone(), poses })];
        if let Some(map) = map {
            out.push(Output::Map(map_cloud_msg(header, &map.points(), &self.t_odom_origin())));
        }
        out
    }
}

/// The variance stated for what is not estimated (m², rad², and per s² for the twist): large
/// enough that a filter gives it no weight.
pub const UNKNOWN_VARIANCE: f64 = 1e6;

/// A covariance saying nothing is known.
fn unknown() -> [f64; 36] {
    row_major(&(Covariance6::identity() * UNKNOWN_VARIANCE))
}

/// A 6x6 covariance as ROS's row-major array.
fn row_major(c: &Covariance6) -> [f64; 36] {
    std::array::from_fn(|i| c[(i / 6, i % 6)])
}

fn vector(v: &Vector3<f64>) -> geometry_msgs::Vector3 {
    geometry_msgs::Vector3 { x: v.x, y: v.y, z: v.z }
}
