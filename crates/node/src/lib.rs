//! sp_dust3r's live driver: the ROS 2 node. Inputs, parameter services, /rosout and
//! /diagnostics go over ros2-client (pure-Rust DDS); the pipeline's outputs over Cyclone DDS.

pub mod cyclone;
pub mod dds;
pub mod node;
pub mod param_services;
pub mod rosout;
