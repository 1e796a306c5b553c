//! The trajectory as ROS sees it (REP 103 and 105): `nav_msgs/Odometry` and TF `odom -> child`
//! for every tracked frame from the odometry (continuous, drifting), TF `map -> odom` from the
//! chain's correction of it, and the keyframes' `nav_msgs/Path` and the map cloud in `map`.
//!
//! Both frames start at the first keyframe's pose (the chain's two origins, see
//! [`crate::vo::odometry`]). Without `base_frame`, that is the first keyframe's camera turned to
//! REP 103's body axes (x forward, y left, z up: a level camera gives a level map), and the
//! child is the image's frame. With `base_frame`, it is where the robot's base was at the first keyframe, found
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
use crate::vo::odometry::{OdomOrigin, Origin, Stamp, TOdomFrame, TOriginKeyframe, TOriginOdom};
use crate::vo::tracking::FrameCam;

/// The map frame (`map_frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Map;
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

/// The map and odometry frames' names.
#[derive(Clone, Debug, PartialEq)]
pub struct Frames {
    /// `map_frame`.
    pub map: String,
    /// `odom_frame`.
    pub odom: String,
}

/// Builds the odometry outputs; remembers the last tracked pose for the twist.
#[derive(Clone, Debug)]
pub struct OdomOutputs {
    /// The frames the outputs are in.
    pub frames: Frames,
    /// The camera's mount when `base_frame` is set and its transform known.
    pub mount: Option<Mount>,
    last: Option<(Stamp, TOdomFrame)>,
}

impl OdomOutputs {
    /// Outputs in `frames`, of the base when `mount` is given, else of the camera.
    pub fn new(frames: Frames, mount: Option<Mount>) -> Self {
        Self { frames, mount, last: None }
    }

    /// Forgets the last pose (a new chain).
    pub fn reset(&mut self) {
        self.last = None;
    }

    /// Where the first keyframe's camera sits in the map and in odom (the same for both).
    fn start<A, B>(&self) -> Transform<A, B> {
        match &self.mount {
            Some(m) => Transform::new(m.t_base_cam.rotation, m.t_base_cam.translation),
            None => Transform::new(body_from_optical(), Vector3::zeros()),
        }
    }

    /// The chain's correction as REP 105's `map -> odom`.
    pub fn t_map_odom(&self, t_origin_odom: &TOriginOdom) -> Transform<Map, Odom> {
        let t_odom_origin: Transform<Odom, OdomOrigin> = self.start();
        self.start::<Map, Origin>().compose(t_origin_odom).compose(&t_odom_origin.inverse())
    }

    /// The child frame and its pose in a fixed frame for a camera at `t_fixed_cam` there.
    fn child<A>(&self, camera_frame: &str, t_fixed_cam: Transform<A, FrameCam>) -> (String, Transform<A, Child>) {
        let (frame, t) = match &self.mount {
            Some(m) => (m.base_frame.clone(), t_fixed_cam.compose(&m.t_base_cam.inverse())),
            None => (camera_frame.to_string(), Transform::new(t_fixed_cam.rotation, t_fixed_cam.translation)),
        };
        (frame, Transform::new(t.rotation, t.translation))
    }

    /// The child frame and its pose in odom for a camera at `t_odom_cam`.
    fn child_pose(&self, camera_frame: &str, t_odom_cam: &TOdomFrame) -> (String, Transform<Odom, Child>) {
        self.child(camera_frame, self.start::<Odom, OdomOrigin>().compose(t_odom_cam))
    }

    /// A tracked frame (its image's header, its pose in the odometry with its uncertainty, the
    /// chain's correction): `nav_msgs/Odometry` at the frame's stamp, and TF `map_frame ->
    /// odom_frame -> child` when `publish_tf` (`map -> odom` with every frame, so that a lookup
    /// at any frame's stamp finds both).
    /// The pose's covariance is tracking's, in odom's axes, its position part widened by the
    /// relative scale uncertainty `scale_sigma` along the position (metric runs; 0 otherwise);
    /// none known: [`UNKNOWN_VARIANCE`] on the diagonal. The twist is the motion since the
    /// previous tracked frame, in the child frame, with an unknown covariance ([`UNKNOWN_VARIANCE`]
    /// on the diagonal, so a filter such as robot_localization gives it no weight).
    pub fn frame(
        &mut self,
        header: &std_msgs::Header,
        (t_odom_cam, t_origin_odom): (&TOdomFrame, &TOriginOdom),
        uncertainty: (Option<&Covariance6>, f64),
        publish_tf: bool,
    ) -> Vec<Output> {
        let stamp = stamp_of(&header.stamp);
        let (child, pose) = self.child_pose(&header.frame_id, t_odom_cam);
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
        self.last = Some((stamp, *t_odom_cam));
        let odom_header = std_msgs::Header { stamp: header.stamp.clone(), frame_id: self.frames.odom.clone() };
        let p = pose_msg(&pose.rotation, &pose.translation);
        let (covariance, scale_sigma) = uncertainty;
        let pose_covariance = covariance.map_or_else(unknown, |c| {
            let mut c = covariance_in(&self.start::<Odom, OdomOrigin>(), c);
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
            let map_header = std_msgs::Header { stamp: header.stamp.clone(), frame_id: self.frames.map.clone() };
            let t_map_odom = self.t_map_odom(t_origin_odom);
            out.push(Output::Tf(tf2_msgs::TFMessage {
                transforms: vec![
                    transform_stamped(map_header, &self.frames.odom, &t_map_odom),
                    transform_stamped(odom_header, &child, &pose),
                ],
            }));
        }
        out
    }

    /// After a reset: an empty path and an empty map in the map frame at `stamp`, so that
    /// displays that keep the last one (transient local) clear.
    pub fn cleared(&self, stamp: builtin_interfaces::Time) -> Vec<Output> {
        let header = std_msgs::Header { stamp, frame_id: self.frames.map.clone() };
        vec![
            Output::Path(nav_msgs::Path { header: header.clone(), poses: Vec::new() }),
            Output::Map(map_cloud_msg(header, &[], &self.start::<Map, Origin>())),
        ]
    }

    /// After the chain grew: the keyframes' path (each keyframe's camera, or base, at its chain
    /// pose and stamp; the header at the newest one's) and the map cloud in the map frame, when
    /// there is a map.
    pub fn chain(&self, camera_frame: &str, path: &[(Stamp, TOriginKeyframe)], map: Option<&VoxelMap>) -> Vec<Output> {
        let Some(&(newest, _)) = path.iter().max_by_key(|(s, _)| *s) else { return Vec::new() };
        let header = std_msgs::Header { stamp: time_of(newest), frame_id: self.frames.map.clone() };
        let t_map_origin = self.start::<Map, Origin>();
        let poses = path
            .iter()
            .map(|(stamp, t)| {
                let t = t_map_origin.compose(t);
                let (_, pose) = self.child(camera_frame, Transform::<Map, FrameCam>::new(t.rotation, t.translation));
                geometry_msgs::PoseStamped {
                    header: std_msgs::Header { stamp: time_of(*stamp), frame_id: self.frames.map.clone() },
                    pose: pose_msg(&pose.rotation, &pose.translation),
                }
            })
            .collect();
        let mut out = vec![Output::Path(nav_msgs::Path { header: header.clone(), poses })];
        if let Some(map) = map {
            out.push(Output::Map(map_cloud_msg(header, &map.points(), &t_map_origin)));
        }
        out
    }
}

/// `t` as TF's `header.frame_id -> child`.
fn transform_stamped<A, B>(
    header: std_msgs::Header,
    child: &str,
    t: &Transform<A, B>,
) -> geometry_msgs::TransformStamped {
    let p = pose_msg(&t.rotation, &t.translation);
    geometry_msgs::TransformStamped {
        header,
        child_frame_id: child.to_string(),
        transform: geometry_msgs::Transform { translation: vector(&t.translation), rotation: p.orientation },
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

#[cfg(test)]
mod tests {
    use super::*;
    use nalgebra::Point3;

    fn frames() -> Frames {
        Frames { map: "map".into(), odom: "odom".into() }
    }

    /// A TF transform as a matrix.
    fn matrix(t: &geometry_msgs::TransformStamped) -> nalgebra::Isometry3<f64> {
        let (r, v) = (&t.transform.rotation, &t.transform.translation);
        let q = UnitQuaternion::from_quaternion(nalgebra::Quaternion::new(r.w, r.x, r.y, r.z));
        nalgebra::Isometry3::from_parts(nalgebra::Translation3::new(v.x, v.y, v.z), q)
    }

    #[test]
    fn map_to_odom_to_camera_on_tf_is_the_frames_pose_on_the_chain_in_rep_103_axes() {
        let t_origin_odom =
            TOriginOdom::new(Rotation3::from_euler_angles(0.1, -0.2, 0.3), Vector3::new(0.4, -0.5, 0.6));
        let t_odom_cam = TOdomFrame::new(Rotation3::from_euler_angles(-0.3, 0.2, 0.1), Vector3::new(1.0, 2.0, -3.0));
        let header = std_msgs::Header { stamp: time_of(5_000_000_007), frame_id: "cam".into() };
        let mut outputs = OdomOutputs::new(frames(), None);
        let out = outputs.frame(&header, (&t_odom_cam, &t_origin_odom), (None, 0.0), true);
        let [Output::Odometry(odometry), Output::Tf(tf)] = &out[..] else { panic!("{out:?}") };
        let [map_odom, odom_cam] = &tf.transforms[..] else { panic!("{tf:?}") };
        let edges = [map_odom, odom_cam]
            .map(|t| (t.header.frame_id.as_str(), t.child_frame_id.as_str(), t.header.stamp.clone()));
        assert_eq!(edges, [("map", "odom", header.stamp.clone()), ("odom", "cam", header.stamp.clone())]);
        assert_eq!((odometry.header.frame_id.as_str(), odometry.child_frame_id.as_str()), ("odom", "cam"));

        // A point of the camera, through TF, against the same point moved by the chain's poses
        // and turned to REP 103's axes (x forward = optical z, y left = -optical x, z up =
        // -optical y).
        let p = Vector3::new(0.3, -0.7, 2.0);
        let on_chain = t_origin_odom.apply(&t_odom_cam.apply(&p));
        let want = Vector3::new(on_chain.z, -on_chain.x, -on_chain.y);
        let got = (matrix(map_odom) * matrix(odom_cam)) * Point3::from(p);
        assert!((got.coords - want).norm() < 1e-12, "{got:?} vs {want:?}");
        // The odometry message is TF's odom -> camera.
        let in_odom = t_odom_cam.apply(&p);
        let pose = &odometry.pose.pose.position;
        let got = matrix(odom_cam) * Point3::from(p);
        assert!((got.coords - Vector3::new(in_odom.z, -in_odom.x, -in_odom.y)).norm() < 1e-12);
        assert_eq!(
            [pose.x, pose.y, pose.z],
            [odom_cam.transform.translation.x, odom_cam.transform.translation.y, odom_cam.transform.translation.z]
        );

        // Path and map are in the map frame.
        let path = [(
            5_000_000_007,
            t_origin_odom.compose(&Transform::<OdomOrigin, crate::vo::tracking::KeyframeCam>::new(
                t_odom_cam.rotation,
                t_odom_cam.translation,
            )),
        )];
        let [Output::Path(path)] = &outputs.chain("cam", &path, None)[..] else { panic!() };
        assert_eq!((path.header.frame_id.as_str(), path.poses[0].header.frame_id.as_str()), ("map", "map"));
        let q = &path.poses[0].pose.position;
        let got = matrix(map_odom) * matrix(odom_cam) * Point3::origin();
        assert!((Vector3::new(q.x, q.y, q.z) - got.coords).norm() < 1e-12);
        assert!(outputs.cleared(header.stamp.clone()).iter().all(|o| match o {
            Output::Path(p) => p.header.frame_id == "map",
            Output::Map(m) => m.header.frame_id == "map",
            _ => false,
        }));
    }
}
