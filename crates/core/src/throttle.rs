//! Rate-limited log lines, as `RCLCPP_WARN_THROTTLE` does: a warning repeated at camera rate
//! (a bad frame, a malformed sample, an unusable CameraInfo) is logged once per period, and
//! the next line says how many were left out, so the log stays readable and nothing is hidden.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One call site's throttle, per key (a call site that names the topic throttles each topic
/// on its own).
pub struct Throttle {
    period: Duration,
    /// Per key: when the last line was let through, and how many were suppressed since.
    state: Mutex<BTreeMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// At most one line per `period` and key.
    pub const fn new(period: Duration) -> Self {
        Self { period, state: Mutex::new(BTreeMap::new()) }
    }

    /// `Some(suppressed)`: log this one, saying `suppressed` were left out since the last;
    /// `None`: leave it out (it is counted).
    pub fn allow(&self, key: &str) -> Option<u64> {
        self.allow_at(key, Instant::now())
    }

    /// [`allow`](Self::allow) at `now`.
    pub fn allow_at(&self, key: &str, now: Instant) -> Option<u64> {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match st.get_mut(key) {
            Some((last, suppressed)) if now.duration_since(*last) < self.period => {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                let n = *suppressed;
                (*last, *suppressed) = (now, 0);
                Some(n)
            }
            None => {
                st.insert(key.to_string(), (now, 0));
                Some(0)
            }
        }
    }
}

/// Seconds between two lines of one throttled warning.
pub const PERIOD: Duration = Duration::from_secs(5);

/// `tracing::warn!` at most once per [`PERIOD`] for this call site (and key, when given as
/// `key = EXPR;`), with the count of the lines left out since the last one.
#[macro_export]
macro_rules! warn_throttled {
    (key = $key:expr; $($arg:tt)+) => {{
        static THROTTLE: $crate::throttle::Throttle = $crate::throttle::Throttle::new($crate::throttle::PERIOD);
        match THROTTLE.allow($key) {
            Some(0) => tracing::warn!($($arg)+),
            Some(n) => tracing::warn!("{} ({n} more like this in the last {} s)", format_args!($($arg)+), $crate::throttle::PERIOD.as_secs()),
            None => {}
        }
    }};
    ($($arg:tt)+) => {
        $crate::warn_throttled!(key = ""; $($arg)+)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_and_key_then_the_count_left_out() {
        let t = Throttle::new(Duration::from_secs(5));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(t.allow_at("a", at(0)), Some(0));
        assert_eq!(t.allow_at("a", at(100)), None);
        // Another key has a period of its own.
        assert_eq!(t.allow_at("b", at(200)), Some(0));
        assert_eq!(t.allow_at("a", at(4_999)), None);
        assert_eq!(t.allow_at("a", at(5_000)), Some(2));
        assert_eq!(t.allow_at("a", at(5_001)), None);
        assert_eq!(t.allow_at("b", at(5_300)), Some(0));
        assert_eq!(t.allow_at("a", at(20_000)), Some(1));
        assert_eq!(t.allow_at("a", at(30_000)), Some(0));
    }
}
