//! sp_dust3r: SuperPoint features and DUSt3R pair reconstruction for ROS 2 camera streams.
//!
//! Data flows image -> preprocess -> backend -> post-processing -> (geometry) -> ROS messages;
//! one module per stage. Neither the compute core nor the models know about ROS.

pub mod backend;
pub mod bag;
pub mod dust3r;
pub mod eval;
pub mod geometry;
pub mod image;
pub mod pipeline;
pub mod ply;
pub mod rng;
pub mod ros;
pub mod sample;
pub mod superpoint;
pub mod tensor;
pub mod weights;
