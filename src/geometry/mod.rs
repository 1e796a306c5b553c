//! Geometry of a pair: typed rigid transforms, focal estimation, PnP + RANSAC, and the
//! PairViewer relative pose.

pub mod focal;
pub mod pairviewer;
pub mod pnp;
mod transform;

pub use pairviewer::{relative_pose, NoPose, PairPose, PoseMode, PoseOptions};
pub use pnp::{Intrinsics, PnpError, RansacParams};
pub use transform::{Cam1, Cam2, TCam1Cam2, TCam2Cam1, Transform};
