//! Visual odometry on keyframes: which frames become keyframes, matching SuperPoint descriptors,
//! tracking a frame against the newest keyframe's pointmap, the chain of keyframe poses that
//! DUSt3R's pairs grow, and the voxel map of their points.

pub mod carried;
pub mod keyframes;
pub mod map;
pub mod matching;
pub mod odometry;
pub mod robot_odometry;
pub mod scale;
pub mod tracking;
pub mod uncertainty;
