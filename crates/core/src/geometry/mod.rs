//! Geometry of a pair: typed rigid transforms, focal estimation, PnP + RANSAC, the PairViewer
//! relative pose, and pointmaps moved and compared in scale.

pub mod focal;
pub mod lens;
pub mod pairviewer;
pub mod pnp;
pub mod pointmaps;
mod transform;

pub use pairviewer::{relative_pose, NoPose, PairPose, PnpWorld, PoseMode, PoseOptions};
pub use pnp::{Intrinsics, PnpError, RansacParams};
pub use transform::{Cam1, Cam2, TCam1Cam2, TCam2Cam1, Transform};
