//! What the live node's threads use to share the work: the newest-wins hand-off between them,
//! the priority of the background (pair) threads, and models that load in the background.

pub mod loading;
pub mod priority;
pub mod slot;
