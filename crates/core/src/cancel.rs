//! Stopping work in flight. A SIGINT must end the node within 2 s even while a DUSt3R pair
//! (30 s on two cores) is being reconstructed, so the signal sets a shared flag that long
//! computations check between their steps (transformer blocks, DPT stages).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cancellation flag shared by whoever may stop the work (a signal handler) and the work.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

/// Two handles are equal when they share one flag.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// The work was cancelled before it finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cancelled (shutting down)")]
pub struct Cancelled;

impl Cancel {
    /// A flag nobody has set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The flag itself, for `signal_hook::flag::register`.
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.0
    }

    /// Has SIGINT and SIGTERM set this flag (the node's and the replay's way to stop).
    pub fn set_on_termination_signals(&self) -> std::io::Result<()> {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&self.0))?;
        }
        Ok(())
    }

    /// Asks the work to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the work was asked to stop.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Cancelled)` once the work was asked to stop: the check between steps.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.is_cancelled() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }
}
