//! The transport-agnostic pipeline pieces both drivers (live node, bag replay) share: keyframe
//! selection, the newest-wins hand-off to workers, and cancellation of work in flight.

pub mod cancel;
pub mod keyframes;
pub mod slot;
