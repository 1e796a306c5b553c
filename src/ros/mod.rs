//! The ROS 2 side: messages, the `--ros-args` command line and parameter files, the node's
//! declared parameters (and, with the node, topics and conversions).

pub mod args;
pub mod convert;
pub mod cyclone;
pub mod diagnostics;
pub mod msg;
pub mod node;
pub mod odom;
pub mod outputs;
pub mod param_services;
pub mod params;
pub mod rosout;
pub mod tf_static;
pub mod throttle;
pub mod topics;
