//! A one-item mailbox between a producer and a worker: the newest item wins, replaced items are
//! counted as drops, so a slow worker never builds a queue (bounded latency, flat memory).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The mailbox: `put` from the producer, `next` in the worker.
pub struct LatestSlot<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

struct State<T> {
    item: Option<T>,
    dropped: u64,
    closed: bool,
}

impl<T> Default for LatestSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> LatestSlot<T> {
    /// An empty, open slot.
    pub fn new() -> Self {
        Self { state: Mutex::new(State { item: None, dropped: 0, closed: false }), ready: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock cannot leave the state inconsistent (plain fields).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offers an item; returns true if it replaced one that was still waiting (a drop).
    pub fn put(&self, item: T) -> bool {
        let mut s = self.lock();
        let replaced = s.item.replace(item).is_some();
        if replaced {
            s.dropped += 1;
        }
        self.ready.notify_one();
        replaced
    }

    /// The waiting item, waiting up to `timeout` for one; `None` on timeout or once closed and
    /// empty.
    pub fn take(&self, timeout: Duration) -> Option<T> {
        let mut s = self.lock();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(item) = s.item.take() {
                return Some(item);
            }
            let now = std::time::Instant::now();
            if s.closed || now >= deadline {
                return None;
            }
            s = self.ready.wait_timeout(s, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// The next item, waiting as long as it takes; `None` once the slot is closed and empty.
    /// A worker's loop: `while let Some(item) = slot.next() { ... }`.
    pub fn next(&self) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(item) = s.item.take() {
                return Some(item);
            }
            if s.closed {
                return None;
            }
            s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits `pause` without taking anything (items that arrive stay for `next`), or less if
    /// the slot is closed meanwhile; returns false once closed.
    pub fn rest(&self, pause: Duration) -> bool {
        let deadline = std::time::Instant::now() + pause;
        let mut s = self.lock();
        loop {
            let now = std::time::Instant::now();
            if s.closed || now >= deadline {
                return !s.closed;
            }
            s = self.ready.wait_timeout(s, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Items replaced before a worker took them.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Wakes waiting workers; later `take`s return what is left, then `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}
