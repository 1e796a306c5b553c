//! The robot's own odometry (wheel encoders, a legged robot's kinematics) as /tf carries it:
//! `scale_odom_frame -> base_frame` at its stamps. Between two keyframes' stamps it tells how
//! far the camera moved in metres, which a DUSt3R pair cannot.

use std::collections::VecDeque;

use nalgebra::UnitQuaternion;

use crate::geometry::Transform;
use crate::msg::tf2_msgs;
use crate::msg::tf_static::transform_of;
use crate::outputs::odom::{stamp_of, Base};
use crate::vo::odometry::Stamp;

/// The robot odometry's fixed frame (`scale_odom_frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RobotOdom;

/// The base's pose in the robot's odometry frame.
pub type TRobotOdomBase = Transform<RobotOdom, Base>;

/// How much history is kept, ns: keyframe pairs look back a few seconds at most.
const KEEP: Stamp = 30_000_000_000;

/// Two samples further apart than this are not interpolated between, ns (tf2 would, but a
/// robot whose odometry stalled for that long has not told where it was).
const MAX_GAP: Stamp = 500_000_000;

/// The robot's odometry poses seen on /tf, in stamp order.
#[derive(Clone, Debug, Default)]
pub struct RobotOdometry {
    poses: VecDeque<(Stamp, TRobotOdomBase)>,
}

impl RobotOdometry {
    /// Takes a /tf message's transforms `odom_frame -> base_frame` (finite, with a unit-able
    /// quaternion); returns how many.
    pub fn insert(&mut self, msg: &tf2_msgs::TFMessage, odom_frame: &str, base_frame: &str) -> usize {
        let mut taken = 0;
        for t in &msg.transforms {
            let parent = t.header.frame_id.trim_start_matches('/');
            let child = t.child_frame_id.trim_start_matches('/');
            if parent != odom_frame.trim_start_matches('/') || child != base_frame.trim_start_matches('/') {
                continue;
            }
            let Some(pose) = transform_of(&t.transform) else { continue };
            let stamp = stamp_of(&t.header.stamp);
            let at = self.poses.partition_point(|(s, _)| *s < stamp);
            match self.poses.get(at) {
                Some((s, _)) if *s == stamp => self.poses[at].1 = Transform::new(pose.rotation, pose.translation),
                _ => self.poses.insert(at, (stamp, Transform::new(pose.rotation, pose.translation))),
            }
            taken += 1;
        }
        if let Some(&(newest, _)) = self.poses.back() {
            while self.poses.front().is_some_and(|(s, _)| *s < newest - KEEP) {
                self.poses.pop_front();
            }
        }
        taken
    }

    /// Forgets every pose (time went backwards).
    pub fn clear(&mut self) {
        self.poses.clear();
    }

    /// The base's pose at `stamp`: interpolated between the samples around it (linear in
    /// translation, spherical in rotation) when they are at most 0.5 s apart; exact at a
    /// sample; `None` outside the samples (no extrapolation).
    pub fn pose_at(&self, stamp: Stamp) -> Option<TRobotOdomBase> {
        let at = self.poses.partition_point(|(s, _)| *s < stamp);
        let (s1, p1) = self.poses.get(at)?;
        if *s1 == stamp {
            return Some(*p1);
        }
        let (s0, p0) = self.poses.get(at.checked_sub(1)?)?;
        if s1 - s0 > MAX_GAP {
            return None;
        }
        let f = (stamp - s0) as f64 / (s1 - s0) as f64;
        let (q0, q1) =
            (UnitQuaternion::from_rotation_matrix(&p0.rotation), UnitQuaternion::from_rotation_matrix(&p1.rotation));
        let q = q0.try_slerp(&q1, f, 1e-9).unwrap_or(q0);
        Some(Transform::new(q.to_rotation_matrix(), p0.translation.lerp(&p1.translation, f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::geometry_msgs::TransformStamped;
    use crate::outputs::odom::time_of;
    use nalgebra::Vector3;

    fn tf(parent: &str, child: &str, stamp: Stamp, x: f64, yaw: f64) -> TransformStamped {
        let mut t =
            TransformStamped::fixed(parent, child, [x, 0.0, 0.0], [0.0, 0.0, (yaw / 2.0).sin(), (yaw / 2.0).cos()]);
        t.header.stamp = time_of(stamp);
        t
    }

    /// Only `odom -> base_link` is taken; between samples the pose is interpolated, at a sample
    /// it is the sample, and beyond the samples or across a gap there is none.
    #[test]
    fn the_robots_pose_between_its_samples() {
        let mut odometry = RobotOdometry::default();
        let s = 1_000_000_000;
        let msg = tf2_msgs::TFMessage {
            transforms: vec![
                tf("odom", "base_link", s + 4 * s / 10, 2.0, 0.2),
                tf("/odom", "/base_link", s, 1.0, 0.0),
                tf("map", "odom", s, 9.0, 0.0),
                tf("odom", "wheel", s, 9.0, 0.0),
                tf("odom", "base_link", 4 * s, 3.0, 0.0),
            ],
        };
        assert_eq!(odometry.insert(&msg, "odom", "base_link"), 3);
        let mid = odometry.pose_at(s + s / 10).unwrap();
        assert!((mid.translation - Vector3::new(1.25, 0.0, 0.0)).norm() < 1e-12);
        assert!((mid.rotation.angle() - 0.05).abs() < 1e-12);
        assert_eq!(odometry.pose_at(s + 4 * s / 10).unwrap().translation.x, 2.0);
        assert!(odometry.pose_at(s - 1).is_none() && odometry.pose_at(4 * s + 1).is_none());
        assert!(odometry.pose_at(3 * s).is_none(), "2.6 s between samples: no pose");
        odometry.insert(
            &tf2_msgs::TFMessage { transforms: vec![tf("odom", "base_link", 40 * s, 0.0, 0.0)] },
            "odom",
            "base_link",
        );
        assert!(odometry.pose_at(s).is_none(), "older than 30 s before the newest: forgotten");
    }
}
