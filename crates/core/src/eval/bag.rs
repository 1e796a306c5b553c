//! Reading what `evaluate` compares from bags: the pair estimates of a replay's output and the
//! ground truth (a TUM file, or a PoseStamped or TF topic of a bag). Shared by `sp_dust3r eval`
//! and `sp_dust3r replay --eval`.

use std::path::{Path, PathBuf};

use nalgebra::{Quaternion, Rotation3, UnitQuaternion, Vector3};

use super::{parse_tum, EvalError, PairEstimate, StampedPose};
use crate::bag::{open_bag, BagMessage};
use crate::geometry::{TCam1Cam2, Transform};
use crate::msg::{from_cdr, geometry_msgs, nav_msgs, node_msgs, sensor_msgs, std_msgs, tf2_msgs, RosMessage};
use crate::params::topics::POINTCLOUD;

const POSE_STAMPED: &str = geometry_msgs::PoseStamped::ROS_TYPE;
const TF_MESSAGE: &str = tf2_msgs::TFMessage::ROS_TYPE;

/// Where the ground truth is.
#[derive(Clone, Debug, PartialEq)]
pub enum GroundTruth {
    /// A TUM trajectory file.
    Tum(PathBuf),
    /// A bag's PoseStamped topic (`None`: the bag's only one), or its TF between two frames
    /// (`topic` is then the TF topic, `/tf` by default).
    Bag {
        /// The bag (file or folder).
        path: PathBuf,
        /// The PoseStamped or TF topic; `None`: the bag's only PoseStamped topic.
        topic: Option<String>,
        /// With TF: the parent and child frames.
        frames: Option<(String, String)>,
    },
}

impl GroundTruth {
    /// A bag when `path` is a folder or an .mcap/.db3 file, else a TUM file.
    pub fn from_path(path: &Path, topic: Option<String>, frames: Option<(String, String)>) -> Self {
        let is_bag = path.is_dir() || path.extension().is_some_and(|e| e == "mcap" || e == "db3");
        if is_bag || topic.is_some() || frames.is_some() {
            GroundTruth::Bag { path: path.to_path_buf(), topic, frames }
        } else {
            GroundTruth::Tum(path.to_path_buf())
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(data: &[u8], topic: &str) -> Result<T, EvalError> {
    from_cdr(data).map_err(|e| EvalError::Message { topic: topic.to_string(), reason: e.to_string() })
}

fn rotation_of(q: &geometry_msgs::Quaternion) -> Rotation3<f64> {
    UnitQuaternion::from_quaternion(Quaternion::new(q.w, q.x, q.y, q.z)).to_rotation_matrix()
}

/// A pose with its header's stamp.
fn stamped(header: &std_msgs::Header, pose: &geometry_msgs::Pose) -> StampedPose {
    let (r, t) = pose_of(pose);
    StampedPose { t: header.stamp.seconds(), pose: Transform::new(r, t) }
}

/// A TF transform as a typed one.
fn transform_of<A, B>(t: &geometry_msgs::Transform) -> Transform<A, B> {
    Transform::new(rotation_of(&t.rotation), Vector3::new(t.translation.x, t.translation.y, t.translation.z))
}

fn pose_of(p: &geometry_msgs::Pose) -> (Rotation3<f64>, Vector3<f64>) {
    (rotation_of(&p.orientation), Vector3::new(p.position.x, p.position.y, p.position.z))
}

/// The tracked frames of a replay's output bag.
#[derive(Clone, Debug, Default)]
pub struct OdometryEstimates {
    /// Its nav_msgs/Odometry topic: the pose of the child frame in odom at each frame's stamp.
    pub odom: Vec<StampedPose>,
    /// The same frames on the map: each odometry pose moved by the /tf transform to its frame
    /// (`map -> odom`) at its stamp (none without TF).
    pub map: Vec<StampedPose>,
    /// How many frames it processed (its sp_dust3r/msg/Keypoints messages, one per frame).
    pub frames: usize,
    /// The keyframes' poses on the map as its last nav_msgs/Path gave them.
    pub keyframes: Vec<StampedPose>,
    /// The same frames on the map after the fact (see [`super::refined::refined_map`]).
    pub refined: Vec<StampedPose>,
}

/// What a replay's output bag is scored on, read in one pass: its pairs (none when it has none)
/// and its tracked frames.
#[derive(Clone, Debug, Default)]
pub struct BagEstimates {
    /// Those with a pose (sp_dust3r/msg/PairPose) and those without (a cloud whose view-1 stamp
    /// has no PairPose: the pipeline reconstructed the pair but found no pose).
    pub pairs: Vec<PairEstimate>,
    /// Its tracked frames.
    pub odometry: OdometryEstimates,
}

/// The pairs and tracked frames of a replay's output bag (see [`BagEstimates`]).
pub fn bag_estimates(bag: &Path) -> Result<BagEstimates, EvalError> {
    let (mut pairs, mut frames) = (PairsSeen::default(), FramesSeen::default());
    for_each_message(bag, |m| {
        pairs.take(m)?;
        frames.take(m)
    })?;
    Ok(BagEstimates { pairs: pairs.finish(), odometry: frames.finish() })
}

/// The tracked frames of a replay's output bag (see [`OdometryEstimates`]), without decoding
/// its pairs' clouds.
pub fn odometry_estimates(bag: &Path) -> Result<OdometryEstimates, EvalError> {
    let mut frames = FramesSeen::default();
    for_each_message(bag, |m| frames.take(m))?;
    Ok(frames.finish())
}

/// Every message of `bag` (file or folder), in order, to `take`.
fn for_each_message(bag: &Path, mut take: impl FnMut(&BagMessage) -> Result<(), EvalError>) -> Result<(), EvalError> {
    for f in open_bag(bag)? {
        for m in f.messages() {
            take(&m?)?;
        }
    }
    Ok(())
}

/// The pair messages of a bag, as they are read.
#[derive(Default)]
struct PairsSeen {
    with_pose: Vec<PairEstimate>,
    clouds: Vec<f64>,
}

impl PairsSeen {
    fn take(&mut self, m: &BagMessage) -> Result<(), EvalError> {
        match m.ros_type.as_str() {
            t if t == node_msgs::PairPose::ROS_TYPE => {
                let p: node_msgs::PairPose = decode(&m.data, &m.topic)?;
                let (r, t) = pose_of(&p.pose);
                self.with_pose.push(PairEstimate {
                    t1: p.header.stamp.seconds(),
                    t2: p.view2_stamp.seconds(),
                    t_cam1_cam2: Some(TCam1Cam2::new(r, t)),
                });
            }
            // The pairs' clouds, not the map (also a PointCloud2). A message starts with its
            // header: only that is read, not the points.
            t if t == sensor_msgs::PointCloud2::ROS_TYPE && m.topic.rsplit('/').next() == Some(POINTCLOUD) => {
                let header: std_msgs::Header = decode(&m.data, &m.topic)?;
                self.clouds.push(header.stamp.seconds());
            }
            _ => {}
        }
        Ok(())
    }

    /// The pairs with a pose, then those without: a cloud carries view 1's stamp only, so a
    /// pair without a pose has no known view-2 time.
    fn finish(self) -> Vec<PairEstimate> {
        let PairsSeen { mut with_pose, clouds } = self;
        let without: Vec<PairEstimate> = clouds
            .iter()
            .filter(|&&t1| !with_pose.iter().any(|p| (p.t1 - t1).abs() < 1e-9))
            .map(|&t1| PairEstimate { t1, t2: f64::NAN, t_cam1_cam2: None })
            .collect();
        with_pose.extend(without);
        with_pose
    }
}

/// The odometry, TF, path and keypoints messages of a bag, as they are read.
#[derive(Default)]
struct FramesSeen {
    found: OdometryEstimates,
    odometry: Vec<(std_msgs::Header, Transform<super::World, super::Camera>)>,
    parents: std::collections::HashMap<(String, i32, u32), Transform<super::World, super::World>>,
}

impl FramesSeen {
    fn take(&mut self, m: &BagMessage) -> Result<(), EvalError> {
        if m.ros_type == nav_msgs::Odometry::ROS_TYPE {
            let o: nav_msgs::Odometry = decode(&m.data, &m.topic)?;
            let (r, t) = pose_of(&o.pose.pose);
            self.odometry.push((o.header, Transform::new(r, t)));
        } else if m.ros_type == TF_MESSAGE {
            let tf: tf2_msgs::TFMessage = decode(&m.data, &m.topic)?;
            for t in tf.transforms {
                let key = (t.child_frame_id, t.header.stamp.sec, t.header.stamp.nanosec);
                self.parents.insert(key, transform_of(&t.transform));
            }
        } else if m.ros_type == nav_msgs::Path::ROS_TYPE {
            let path: nav_msgs::Path = decode(&m.data, &m.topic)?;
            self.found.keyframes = path.poses.iter().map(|p| stamped(&p.header, &p.pose)).collect();
        } else if m.ros_type == node_msgs::Keypoints::ROS_TYPE {
            self.found.frames += 1;
        }
        Ok(())
    }

    /// Each frame in odom, and on the map through the `map -> odom` sent with its stamp.
    fn finish(self) -> OdometryEstimates {
        let FramesSeen { mut found, odometry, parents } = self;
        for (header, pose) in odometry {
            let t = header.stamp.seconds();
            if let Some(t_map_odom) = parents.get(&(header.frame_id, header.stamp.sec, header.stamp.nanosec)) {
                found.map.push(StampedPose { t, pose: t_map_odom.compose(&pose) });
            }
            found.odom.push(StampedPose { t, pose });
        }
        found.odom.sort_by(|a, b| a.t.total_cmp(&b.t));
        found.map.sort_by(|a, b| a.t.total_cmp(&b.t));
        found.refined = super::refined::refined_map(&found.odom, &found.map, &found.keyframes);
        found
    }
}

/// The ground-truth trajectory, sorted by time.
pub fn load_ground_truth(source: &GroundTruth) -> Result<Vec<StampedPose>, EvalError> {
    let (path, topic, frames) = match source {
        GroundTruth::Tum(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| EvalError::Io { path: path.display().to_string(), reason: e.to_string() })?;
            return parse_tum(&text);
        }
        GroundTruth::Bag { path, topic, frames } => (path, topic, frames),
    };
    let files = open_bag(path)?;
    let mut topics: Vec<(String, String)> = Vec::new();
    for f in &files {
        topics.extend(f.topics()?);
    }
    let topic = match (topic, frames) {
        (Some(t), _) => t.clone(),
        (None, Some(_)) => crate::params::topics::TF.to_string(),
        (None, None) => {
            let found: Vec<&String> = topics.iter().filter(|(_, ty)| ty == POSE_STAMPED).map(|(t, _)| t).collect();
            match found[..] {
                [t] => t.clone(),
                [] => {
                    return Err(EvalError::GroundTruthTopic(format!(
                        "{} has no {POSE_STAMPED} topic; name one (PoseStamped, or TF with its two frames)",
                        path.display()
                    )))
                }
                _ => {
                    let names = found.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ");
                    return Err(EvalError::GroundTruthTopic(format!(
                        "{} has several {POSE_STAMPED} topics ({names}); name one",
                        path.display()
                    )));
                }
            }
        }
    };
    let ty = topics.iter().find(|(t, _)| *t == topic).map(|(_, ty)| ty.clone());
    match ty.as_deref() {
        None => return Err(EvalError::GroundTruthTopic(format!("{} has no topic {topic}", path.display()))),
        Some(TF_MESSAGE) if frames.is_none() => {
            return Err(EvalError::GroundTruthTopic(format!(
                "TF ground truth ({topic}) needs its two frames: PARENT CHILD"
            )))
        }
        Some(POSE_STAMPED | TF_MESSAGE) => {}
        Some(other) => {
            return Err(EvalError::GroundTruthTopic(format!(
                "ground-truth topic {topic} is {other}, not {POSE_STAMPED} or {TF_MESSAGE}"
            )))
        }
    }
    let mut poses = Vec::new();
    for f in &files {
        for m in f.messages() {
            let m = m?;
            if m.topic != topic {
                continue;
            }
            if m.ros_type == POSE_STAMPED {
                let p: geometry_msgs::PoseStamped = decode(&m.data, &m.topic)?;
                poses.push(stamped(&p.header, &p.pose));
            } else if let Some((parent, child)) = frames {
                let tf: tf2_msgs::TFMessage = decode(&m.data, &m.topic)?;
                for t in tf.transforms.iter().filter(|t| &t.header.frame_id == parent && &t.child_frame_id == child) {
                    poses.push(StampedPose { t: t.header.stamp.seconds(), pose: transform_of(&t.transform) });
                }
            }
        }
    }
    if poses.is_empty() {
        return Err(EvalError::Empty);
    }
    poses.sort_by(|a, b| a.t.total_cmp(&b.t));
    Ok(poses)
}
