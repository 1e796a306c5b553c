//! The ROS 2 side: messages (and, with the node, topics, parameters and conversions).

pub mod msg;
