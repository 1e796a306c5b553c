//! The robot's own odometry (wheel encoders, a legged robot's kinematics) as /tf carries it:
//! `scale_odom_frame -> base_frame` at its stamps. Between two keyframes' stamps it tells how
//! far the camera moved in metres, which a DUSt3R pair cannot.

use std::collections::VecDeque;

use nalgebra::UnitQuaternion;

use crate::geometry::Transform;
use crate::vo::odometry::Stamp;

/// The robot odometry's fixed frame (`scale_odom_frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RobotOdom;

/// `base_frame` as the robot's odometry moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RobotBase;

/// The base's pose in the robot's odometry frame.
pub type TRobotOdomBase = Transform<RobotOdom, RobotBase>;

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
    /// Adds the base's pose at `stamp` (a later one for the same stamp replaces it); forgets
    /// what is more than 30 s older than the newest.
    pub fn insert(&mut self, stamp: Stamp, pose: TRobotOdomBase) {
        let at = self.poses.partition_point(|(s, _)| *s < stamp);
        match self.poses.get_mut(at) {
            Some((s, p)) if *s == stamp => *p = pose,
            _ => self.poses.insert(at, (stamp, pose)),
        }
        if let Some(&(newest, _)) = self.poses.back() {
            while self.poses.front().is_some_and(|(s, _)| *s < newest - KEEP) {
                self.poses.pop_front();
            }
        }
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
    use nalgebra::{Rotation3, Vector3};

    fn pose(x: f64, yaw: f64) -> TRobotOdomBase {
        Transform::new(Rotation3::from_axis_angle(&Vector3::z_axis(), yaw), Vector3::new(x, 0.0, 0.0))
    }

    /// Between samples the pose is interpolated, at a sample it is the sample, and beyond the
    /// samples, across a gap or past the history there is none.
    #[test]
    fn the_robots_pose_between_its_samples() {
        let mut odometry = RobotOdometry::default();
        let s = 1_000_000_000;
        odometry.insert(s + 4 * s / 10, pose(2.0, 0.2));
        odometry.insert(s, pose(1.0, 0.0));
        odometry.insert(4 * s, pose(3.0, 0.0));
        let mid = odometry.pose_at(s + s / 10).unwrap();
        assert!((mid.translation - Vector3::new(1.25, 0.0, 0.0)).norm() < 1e-12);
        assert!((mid.rotation.angle() - 0.05).abs() < 1e-12);
        assert_eq!(odometry.pose_at(s + 4 * s / 10).unwrap().translation.x, 2.0);
        assert!(odometry.pose_at(s - 1).is_none() && odometry.pose_at(4 * s + 1).is_none());
        assert!(odometry.pose_at(3 * s).is_none(), "2.6 s between samples: no pose");
        odometry.insert(40 * s, pose(0.0, 0.0));
        assert!(odometry.pose_at(s).is_none(), "older than 30 s before the newest: forgotten");
    }
}
