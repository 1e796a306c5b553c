//! The transport-agnostic pipeline pieces both drivers (live node, bag replay) share: keyframe
//! selection, the newest-wins hand-off to workers, cancellation of work in flight, and models
//! that load in the background.

pub mod keyframes;
pub mod loading;
pub mod map;
pub mod matching;
pub mod odometry;
pub mod priority;
pub mod slot;
pub mod tracking;
