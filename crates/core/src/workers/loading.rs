//! A model that loads in the background while the driver already serves (the node joins the
//! ROS graph first): where loading stands, for status reports, and a wait for the worker that
//! needs the model, which gives up when the driver stops.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::cancel::Cancel;

/// Where a model's loading stands.
pub enum Phase<M: ?Sized> {
    /// Still loading; what it does now, in words.
    Loading(String),
    /// Loaded and serving.
    Ready(Arc<M>),
    /// It cannot run, and why (no weights, weights that do not load).
    Failed(String),
}

impl<M: ?Sized> Clone for Phase<M> {
    fn clone(&self) -> Self {
        match self {
            Self::Loading(s) => Self::Loading(s.clone()),
            Self::Ready(m) => Self::Ready(Arc::clone(m)),
            Self::Failed(s) => Self::Failed(s.clone()),
        }
    }
}

/// A model being loaded by one thread and waited for by others.
pub struct BackgroundLoad<M: ?Sized> {
    phase: Mutex<Phase<M>>,
    changed: Condvar,
    started: Instant,
}

/// How often a waiting worker looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);

impl<M: ?Sized> BackgroundLoad<M> {
    /// Loading, doing `step`.
    pub fn new(step: impl Into<String>) -> Self {
        Self { phase: Mutex::new(Phase::Loading(step.into())), changed: Condvar::new(), started: Instant::now() }
    }

    fn set(&self, phase: Phase<M>) {
        if let Ok(mut p) = self.phase.lock() {
            *p = phase;
        }
        self.changed.notify_all();
    }

    /// Still loading, now doing `step` (ignored once the model is ready or failed).
    pub fn step(&self, step: impl Into<String>) {
        if let Ok(mut p) = self.phase.lock() {
            if matches!(*p, Phase::Loading(_)) {
                *p = Phase::Loading(step.into());
            }
        }
    }

    /// The model is loaded.
    pub fn ready(&self, model: Arc<M>) {
        self.set(Phase::Ready(model));
    }

    /// The model cannot run, because of `why`.
    pub fn failed(&self, why: impl Into<String>) {
        self.set(Phase::Failed(why.into()));
    }

    /// Where it stands now.
    pub fn phase(&self) -> Phase<M> {
        self.phase.lock().map_or_else(|_| Phase::Failed("loader state poisoned".into()), |p| p.clone())
    }

    /// Since when it has been loading (or loaded).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The model once ready; `None` when it failed or `stop` was set first.
    pub fn wait(&self, stop: &Cancel) -> Option<Arc<M>> {
        let mut p = self.phase.lock().ok()?;
        loop {
            match &*p {
                Phase::Ready(m) => return Some(Arc::clone(m)),
                Phase::Failed(_) => return None,
                Phase::Loading(_) if stop.is_cancelled() => return None,
                Phase::Loading(_) => p = self.changed.wait_timeout(p, STOP_POLL).ok()?.0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_worker_gets_the_model_or_gives_up() {
        let loader = Arc::new(BackgroundLoad::<str>::new("finding weights"));
        let stop = Cancel::new();
        let l = Arc::clone(&loader);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            l.step("loading");
            l.ready(Arc::from("model"));
        });
        assert_eq!(loader.wait(&stop).as_deref(), Some("model"));
        t.join().unwrap();
        // Steps after the end change nothing.
        loader.step("again");
        assert!(matches!(loader.phase(), Phase::Ready(_)));

        let failed = BackgroundLoad::<str>::new("x");
        failed.failed("no weights");
        assert!(failed.wait(&stop).is_none());
        assert!(matches!(failed.phase(), Phase::Failed(w) if w == "no weights"));

        // Stopping ends the wait of a model that never loads.
        let never = BackgroundLoad::<str>::new("downloading");
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            s.cancel();
        });
        let start = Instant::now();
        assert!(never.wait(&stop).is_none());
        assert!(start.elapsed() < Duration::from_secs(1));
        t.join().unwrap();
    }
}
