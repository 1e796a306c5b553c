//! The robot's static transforms (/tf_static) as far as the node needs them: where the camera
//! is mounted on `base_frame`, through any chain of fixed frames between them (e.g.
//! `base_link -> camera_link -> camera_optical_frame`).

use std::collections::HashMap;

use nalgebra::{Quaternion, UnitQuaternion, Vector3};

use crate::geometry::Transform;
use crate::msg::{builtin_interfaces, geometry_msgs, tf2_msgs};

/// Any frame of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeFrame;

/// The static transforms seen so far: each child's parent and pose in it (a later message for a
/// child replaces the earlier, as tf2's static buffer does).
#[derive(Clone, Debug, Default)]
pub struct StaticTransforms {
    parent_of: HashMap<String, (String, Transform<TreeFrame, TreeFrame>)>,
}

/// Frames a chain of transforms may climb before it is taken for a loop.
const MAX_DEPTH: usize = 64;

impl StaticTransforms {
    /// Adds a /tf_static message's transforms (those with a finite pose, a unit-able quaternion
    /// and two named frames; the others are skipped).
    pub fn insert(&mut self, msg: &tf2_msgs::TFMessage) {
        for t in &msg.transforms {
            let parent = t.header.frame_id.trim_start_matches('/');
            let child = t.child_frame_id.trim_start_matches('/');
            if let (false, false, Some(pose)) = (parent.is_empty(), child.is_empty(), transform_of(&t.transform)) {
                self.parent_of.insert(child.to_string(), (parent.to_string(), pose));
            }
        }
    }

    /// Whether no transform was seen.
    pub fn is_empty(&self) -> bool {
        self.parent_of.is_empty()
    }

    /// `frame`'s pose in the root of its tree, and that root.
    fn in_root(&self, frame: &str) -> Option<(String, Transform<TreeFrame, TreeFrame>)> {
        let mut t = Transform::identity();
        let mut at = frame.to_string();
        for _ in 0..MAX_DEPTH {
            match self.parent_of.get(&at) {
                Some((parent, p)) => {
                    t = p.compose(&t);
                    at = parent.clone();
                }
                None => return Some((at, t)),
            }
        }
        None
    }

    /// The pose of `source` in `target` (`T_target_source`), when both hang in one tree.
    pub fn lookup<A, B>(&self, target: &str, source: &str) -> Option<Transform<A, B>> {
        let (target, source) = (target.trim_start_matches('/'), source.trim_start_matches('/'));
        let (root_t, t_root_target) = self.in_root(target)?;
        let (root_s, t_root_source) = self.in_root(source)?;
        (root_t == root_s).then(|| {
            let t = t_root_target.inverse().compose(&t_root_source);
            Transform::new(t.rotation, t.translation)
        })
    }
}

/// The transforms `parent -> child` in a /tf message (leading `/` ignored, as tf2 does), with
/// their stamps; those that are not rigid transforms are left out.
pub fn transforms_between(
    msg: &tf2_msgs::TFMessage,
    parent: &str,
    child: &str,
) -> Vec<(builtin_interfaces::Time, Transform<TreeFrame, TreeFrame>)> {
    let (parent, child) = (parent.trim_start_matches('/'), child.trim_start_matches('/'));
    msg.transforms
        .iter()
        .filter(|t| {
            t.header.frame_id.trim_start_matches('/') == parent && t.child_frame_id.trim_start_matches('/') == child
        })
        .filter_map(|t| Some((t.header.stamp.clone(), transform_of(&t.transform)?)))
        .collect()
}

/// A `geometry_msgs/Transform` as a rigid transform, when it is one.
fn transform_of(t: &geometry_msgs::Transform) -> Option<Transform<TreeFrame, TreeFrame>> {
    let (r, p) = (&t.rotation, &t.translation);
    let q = Quaternion::new(r.w, r.x, r.y, r.z);
    let finite = [r.w, r.x, r.y, r.z, p.x, p.y, p.z].iter().all(|v| v.is_finite());
    (finite && q.norm() > 1e-9)
        .then(|| Transform::new(UnitQuaternion::from_quaternion(q).to_rotation_matrix(), Vector3::new(p.x, p.y, p.z)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use geometry_msgs::TransformStamped as Tf;

    #[test]
    fn a_chain_of_static_transforms_gives_the_cameras_mount() {
        let mut tree = StaticTransforms::default();
        let h = std::f64::consts::FRAC_1_SQRT_2;
        // base_link -> camera_link 0.2 m forward, 0.1 up; camera_link -> optical: the usual
        // (-90 deg about z, then -90 deg about x) as its quaternion (-0.5, 0.5, -0.5, 0.5).
        tree.insert(&tf2_msgs::TFMessage {
            transforms: vec![
                Tf::fixed("base_link", "camera_link", [0.2, 0.0, 0.1], [0.0, 0.0, 0.0, 1.0]),
                Tf::fixed("camera_link", "camera_optical", [0.0, 0.0, 0.0], [-0.5, 0.5, -0.5, 0.5]),
                Tf::fixed("base_link", "bad", [f64::NAN, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]),
            ],
        });
        tree.insert(&tf2_msgs::TFMessage {
            transforms: vec![Tf::fixed("map", "elsewhere", [1.0, 0.0, 0.0], [0.0, 0.0, h, h])],
        });
        let t: Transform<TreeFrame, TreeFrame> = tree.lookup("base_link", "/camera_optical").unwrap();
        // The optical z axis (forward) is the base's x; optical x (right) is the base's -y.
        assert!((t.rotation * Vector3::z() - Vector3::x()).norm() < 1e-12);
        assert!((t.rotation * Vector3::x() + Vector3::y()).norm() < 1e-12);
        assert!((t.translation - Vector3::new(0.2, 0.0, 0.1)).norm() < 1e-12);
        // And back the other way.
        let back: Transform<TreeFrame, TreeFrame> = tree.lookup("camera_optical", "base_link").unwrap();
        assert!((back.compose(&t).translation).norm() < 1e-12);
        assert!(tree.lookup::<TreeFrame, TreeFrame>("base_link", "elsewhere").is_none(), "another tree");
        assert!(tree.lookup::<TreeFrame, TreeFrame>("base_link", "bad").is_none(), "the NaN one was skipped");
    }

    /// Only `odom -> base_link` is taken, with or without leading slashes; a non-rigid one is not.
    #[test]
    fn the_transforms_between_two_frames() {
        let mut bad = Tf::fixed("odom", "base_link", [0.0; 3], [0.0; 4]);
        bad.header.stamp.sec = 9;
        let mut later = Tf::fixed("/odom", "/base_link", [2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]);
        later.header.stamp.sec = 2;
        let msg = tf2_msgs::TFMessage {
            transforms: vec![
                Tf::fixed("odom", "base_link", [1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]),
                Tf::fixed("map", "odom", [5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]),
                Tf::fixed("odom", "wheel", [5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]),
                bad,
                later,
            ],
        };
        let found = transforms_between(&msg, "odom", "base_link");
        let xs: Vec<(i32, f64)> = found.iter().map(|(t, p)| (t.sec, p.translation.x)).collect();
        assert_eq!(xs, vec![(0, 1.0), (2, 2.0)]);
    }
}
