//! The transport-agnostic pipeline pieces both drivers (live node, bag replay) share: keyframe
//! selection and the newest-wins hand-off to workers.

pub mod keyframes;
pub mod slot;
