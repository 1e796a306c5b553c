//! sp_dust3r's live driver: the ROS 2 node. Its endpoints are made through one interface
//! (transport.rs), which decides the stack: inputs, parameter services, /rosout and /diagnostics
//! on ros2-client (pure-Rust DDS), the pipeline's outputs on Cyclone DDS.

#[cfg(feature = "cyclone")]
pub mod cyclone;
pub mod dds;
#[cfg(feature = "cyclone")]
pub mod node;
pub mod node_services;
pub mod param_services;
pub mod replies;
pub mod rosout;
#[cfg(feature = "cyclone")]
pub mod transport;
