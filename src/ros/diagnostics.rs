//! What the node counts and how /diagnostics reports it: one table of counters (name and
//! meaning together), the latest latencies and input rate, and the message built from them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::msg::{builtin_interfaces, diagnostic_msgs, std_msgs};

/// Declares the counters once: variant, /diagnostics key, and whether it counts a failure.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $variant:ident => $key:literal, $error:literal;)*) => {
        /// Something the node counts.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Counter {
            /// Every counter, in the order /diagnostics lists them.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];

            /// Its key on /diagnostics.
            pub fn key(self) -> &'static str {
                match self {
                    $(Counter::$variant => $key,)*
                }
            }

            /// Inputs or computations that failed (not publish errors or pairs without a pose):
            /// these make the status WARN.
            pub fn is_error(self) -> bool {
                match self {
                    $(Counter::$variant => $error,)*
                }
            }
        }
    };
}

counters! {
    /// Frames received.
    FramesIn => "frames_in", false;
    /// Frames SuperPoint answered.
    FramesDone => "frames_processed", false;
    /// Frames replaced by a newer one before SuperPoint took them.
    FrameDrops => "frames_dropped", false;
    /// Keyframe pairs DUSt3R answered.
    PairsDone => "pairs_processed", false;
    /// Pairs replaced by a newer one before DUSt3R took them.
    PairDrops => "pairs_dropped", false;
    /// Frames that could not be decoded.
    BadFrames => "errors_bad_frame", true;
    /// CameraInfo messages that were ignored.
    BadCameraInfo => "errors_camera_info", true;
    /// Samples on an input topic that do not decode as its type (a mismatched message
    /// definition, a foreign writer); by topic as `errors_malformed_<topic>`.
    MalformedSamples => "errors_malformed_sample", true;
    /// Pairs whose frames differ in size from the CameraInfo (focal estimated instead).
    CameraInfoMismatch => "camera_info_size_mismatch", false;
    /// Debug images published.
    DebugImages => "debug_images", false;
    /// SuperPoint failures.
    SuperPointErrors => "errors_superpoint", true;
    /// DUSt3R failures.
    Dust3rErrors => "errors_dust3r", true;
    /// Outputs that could not be published.
    PublishErrors => "errors_publish", false;
    /// Pairs without a pose.
    NoPose => "no_pose", false;
    /// Frames skipped while SuperPoint's server could not answer and no fallback ran.
    SuperPointPaused => "superpoint_paused", false;
    /// Pairs skipped while DUSt3R's server could not answer and no fallback ran.
    Dust3rPaused => "dust3r_paused", false;
}

/// The node's counters and latest measurements, shared by the DDS loop and the workers.
pub struct Stats {
    counts: Vec<AtomicU64>,
    /// The last SuperPoint latency, ms.
    pub superpoint_ms: AtomicU64,
    /// The last DUSt3R pair latency, ms.
    pub dust3r_ms: AtomicU64,
    /// Frames received per second over the last /diagnostics period, in millihertz.
    pub input_rate_mhz: AtomicU64,
    /// Errors by model and kind (`errors_superpoint_server_malformed`, ...).
    by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            counts: Counter::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            superpoint_ms: AtomicU64::new(0),
            dust3r_ms: AtomicU64::new(0),
            input_rate_mhz: AtomicU64::new(0),
            by_kind: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Stats {
    /// Counts one more.
    pub fn bump(&self, c: Counter) {
        self.counts[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self, c: Counter) -> u64 {
        self.counts[c as usize].load(Ordering::Relaxed)
    }

    /// Counts an error of `model` by its kind (`errors_<model>_<kind>`).
    pub fn count_kind(&self, model: &str, kind: &str) {
        if let Ok(mut m) = self.by_kind.lock() {
            *m.entry(format!("errors_{model}_{kind}")).or_default() += 1;
        }
    }

    /// Inputs or computations that failed.
    pub fn errors(&self) -> u64 {
        Counter::ALL.iter().filter(|c| c.is_error()).map(|&c| self.get(c)).sum()
    }
}

/// What /diagnostics says besides the counters.
pub struct Status<'a> {
    /// The node's fully qualified name.
    pub fqn: &'a str,
    /// Stamp of the message (sim time under `use_sim_time`).
    pub stamp: builtin_interfaces::Time,
    /// What runs SuperPoint.
    pub superpoint_backend: String,
    /// What runs DUSt3R, or `None` when it is disabled.
    pub dust3r_backend: Option<String>,
    /// The CameraInfo in use, in words.
    pub camera_info: String,
}

/// The /diagnostics message: WARN while anything failed, a model is paused or DUSt3R is off.
pub fn diagnostics(s: &Stats, status: Status<'_>) -> diagnostic_msgs::DiagnosticArray {
    let kv = |k: &str, v: String| diagnostic_msgs::KeyValue { key: k.into(), value: v };
    let dust3r_on = status.dust3r_backend.is_some();
    let paused = s.get(Counter::SuperPointPaused) + s.get(Counter::Dust3rPaused);
    let level = if s.errors() > 0 || paused > 0 || !dust3r_on {
        diagnostic_msgs::DiagnosticStatus::WARN
    } else {
        diagnostic_msgs::DiagnosticStatus::OK
    };
    let mut values: Vec<diagnostic_msgs::KeyValue> =
        Counter::ALL.iter().map(|&c| kv(c.key(), s.get(c).to_string())).collect();
    let rate = s.input_rate_mhz.load(Ordering::Relaxed) as f64 / 1000.0;
    values.extend([
        kv("input_rate_hz", format!("{rate:.2}")),
        kv("camera_info", status.camera_info),
        kv("superpoint_latency_ms", s.superpoint_ms.load(Ordering::Relaxed).to_string()),
        kv("dust3r_latency_ms", s.dust3r_ms.load(Ordering::Relaxed).to_string()),
        kv("superpoint_backend", status.superpoint_backend),
        kv("dust3r_backend", status.dust3r_backend.unwrap_or_else(|| "disabled".into())),
    ]);
    if let Ok(m) = s.by_kind.lock() {
        values.extend(m.iter().map(|(k, v)| kv(k, v.to_string())));
    }
    diagnostic_msgs::DiagnosticArray {
        header: std_msgs::Header { stamp: status.stamp, frame_id: String::new() },
        status: vec![diagnostic_msgs::DiagnosticStatus {
            level,
            name: format!("{}: pipeline", status.fqn.trim_start_matches('/')),
            message: if dust3r_on { "running".into() } else { "running; DUSt3R disabled (no weights)".into() },
            hardware_id: "cpu".into(),
            values,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_has_its_own_key_and_slot() {
        let keys: std::collections::BTreeSet<&str> = Counter::ALL.iter().map(|c| c.key()).collect();
        assert_eq!(keys.len(), Counter::ALL.len());
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    #[test]
    fn errors_make_the_status_warn() {
        let s = Stats::default();
        let status = |s: &Stats| {
            let st = Status {
                fqn: "/n",
                stamp: builtin_interfaces::Time::default(),
                superpoint_backend: "cpu".into(),
                dust3r_backend: Some("cpu".into()),
                camera_info: "none".into(),
            };
            diagnostics(s, st).status[0].level
        };
        s.bump(Counter::FramesIn);
        s.bump(Counter::PublishErrors);
        assert_eq!(status(&s), diagnostic_msgs::DiagnosticStatus::OK);
        s.bump(Counter::BadFrames);
        assert_eq!(s.errors(), 1);
        assert_eq!(status(&s), diagnostic_msgs::DiagnosticStatus::WARN);
    }
}
