//! What the node counts and how /diagnostics reports it, the diagnostic_updater way: one status
//! per task (`<node>: input`, `<node>: superpoint`, `<node>: dust3r`, one per backend), each
//! naming the device it runs on as `hardware_id`, with levels from what happened within a
//! sliding window (a bad frame a minute ago is history), STALE when the input stopped and ERROR
//! when a model cannot run at all.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::backend::{BackendHealth, BackendState};
use crate::msg::{builtin_interfaces, diagnostic_msgs, std_msgs};
use crate::vo::scale::ScaleTrack;

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

            /// Inputs or computations that failed (not publish errors or pairs without a pose).
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
    /// Frames the camera's writer sent that never reached the node whole (a lost datagram or
    /// fragment: the writer's sequence numbers skip them).
    FramesLost => "frames_lost_in_transport", true;
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
    /// Milliseconds SuperPoint rested after frames so that a CPU pair in flight got its share
    /// of the cores (`dust3r_cpu_share`).
    SuperPointRestMs => "superpoint_rested_ms", false;
    /// Pairs skipped while DUSt3R's server could not answer and no fallback ran.
    Dust3rPaused => "dust3r_paused", false;
    /// Frames placed on the keyframe chain.
    FramesTracked => "frames_tracked", false;
    /// Frames not tracked once the chain existed (too few matches, points or inliers).
    FramesNotTracked => "frames_not_tracked", false;
    /// Tracked frames that only the second try's looser matching placed (a fast turn, or a
    /// node that fell behind the camera).
    FramesSecondTry => "frames_tracked_second_try", false;
    /// Tracked frames placed only once described again turned by a likely roll (a camera
    /// rolled far between two frames the node took).
    FramesTurned => "frames_tracked_turned", false;
    /// Tracked frames placed only once the last frame had points drawn from the keyframes'
    /// pointmaps (right after a keyframe whose pair is pending, the camera turning fast).
    FramesDrawn => "frames_tracked_drawn", false;
    /// Tracked frames whose keypoints took their depth from a registered depth image
    /// (`depth_tracking`), for the next frame to be placed against.
    FramesMeasured => "frames_tracked_measured_by_depth", false;
    /// Frames before the chain's first pair (nothing to track against yet).
    FramesBeforeMap => "frames_before_first_pair", false;
    /// Tracked frames held back while base_frame's transform to the camera is unknown.
    FramesNoMount => "frames_waiting_for_tf_static", false;
    /// Frames taken as keyframes (each after the first starts a pair).
    Keyframes => "keyframes", false;
    /// Keyframes put on the chain.
    KeyframesChained => "keyframes_on_chain", false;
    /// Pairs that could not join the chain.
    PairsUnchained => "pairs_off_chain", false;
    /// Depth images received (`scale_source: depth`).
    DepthIn => "depth_in", false;
    /// Depth images that could not be decoded.
    BadDepth => "errors_bad_depth", true;
    /// Pairs whose metric scale was measured.
    PairsScaleMeasured => "pairs_scale_measured", false;
    /// Pairs with a metric scale_source whose scale was not measured (carried over from the chain,
    /// or, for a chain's first pair, left out).
    PairsScaleUnmeasured => "pairs_scale_unmeasured", false;
    /// /tf transforms of the robot's odometry taken (`scale_source: odometry`).
    RobotOdometryIn => "robot_odometry_in", false;
    /// Tracked frames held back because the metric scale has gone unmeasured too long.
    FramesNoScale => "frames_waiting_for_scale", false;
    /// `~/reset` calls: each starts a new chain and clears the map.
    Resets => "resets", false;
    /// `~/save_map` calls that wrote the map.
    MapsSaved => "maps_saved", false;
}

/// Prefix of the keyframe counts by reason.
const KEYFRAMES_FOR: &str = "keyframes_for_";

/// The node's counters and latest measurements, shared by the DDS loop and the workers.
pub struct Stats {
    counts: Vec<AtomicU64>,
    /// The last SuperPoint latency, ms.
    pub superpoint_ms: AtomicU64,
    /// The last DUSt3R pair latency, ms.
    pub dust3r_ms: AtomicU64,
    /// Errors by model and kind (`errors_superpoint_server_malformed`, ...).
    by_kind: Mutex<BTreeMap<String, u64>>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            counts: Counter::ALL.iter().map(|_| AtomicU64::new(0)).collect(),
            superpoint_ms: AtomicU64::new(0),
            dust3r_ms: AtomicU64::new(0),
            by_kind: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Stats {
    /// Counts one more.
    pub fn bump(&self, c: Counter) {
        self.counts[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to a counter.
    pub fn add(&self, c: Counter, n: u64) {
        self.counts[c as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self, c: Counter) -> u64 {
        self.counts[c as usize].load(Ordering::Relaxed)
    }

    /// Counts an error of `model` by its kind (`errors_<model>_<kind>`).
    pub fn count_kind(&self, model: &str, kind: &str) {
        self.count_named(format!("errors_{model}_{kind}"));
    }

    /// Counts a keyframe by what made it one (`keyframes_for_<why>`).
    pub fn count_keyframe(&self, why: &str) {
        self.count_named(format!("{KEYFRAMES_FOR}{why}"));
    }

    fn count_named(&self, key: String) {
        if let Ok(mut m) = self.by_kind.lock() {
            *m.entry(key).or_default() += 1;
        }
    }

    /// Inputs or computations that failed.
    pub fn errors(&self) -> u64 {
        Counter::ALL.iter().filter(|c| c.is_error()).map(|&c| self.get(c)).sum()
    }

    /// Every counter now, in [`Counter::ALL`]'s order.
    pub fn snapshot(&self) -> Vec<u64> {
        Counter::ALL.iter().map(|&c| self.get(c)).collect()
    }

    /// The errors counted by kind so far.
    pub fn by_kind(&self) -> BTreeMap<String, u64> {
        self.by_kind.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The counters as they were at each /diagnostics period: what the sliding window and the
/// input rate are computed from.
pub struct History {
    /// Snapshots, oldest first; the first is all zeros at the start.
    snapshots: VecDeque<(Instant, Vec<u64>)>,
    /// When each counter last grew (the start for one that never did), and whether it ever did.
    last_growth: Vec<(Instant, bool)>,
}

impl History {
    /// Counters all zero at `start`.
    pub fn new(start: Instant) -> Self {
        let zeros = vec![0; Counter::ALL.len()];
        Self { snapshots: VecDeque::from([(start, zeros)]), last_growth: vec![(start, false); Counter::ALL.len()] }
    }

    /// Adds the counters as they were at `now`; forgets what is older than `keep` (one snapshot
    /// at or before `now - keep` stays as the window's baseline).
    pub fn record(&mut self, now: Instant, counts: Vec<u64>, keep: Duration) {
        if let Some((_, last)) = self.snapshots.back() {
            for (i, (&new, &old)) in counts.iter().zip(last).enumerate() {
                if new > old {
                    self.last_growth[i] = (now, true);
                }
            }
        }
        self.snapshots.push_back((now, counts));
        if let Some(horizon) = now.checked_sub(keep) {
            while self.snapshots.get(1).is_some_and(|(second, _)| *second <= horizon) {
                self.snapshots.pop_front();
            }
        }
    }

    /// How much `c` grew over the last `span` (less when the history is shorter), and over how
    /// long that was.
    pub fn growth(&self, c: Counter, span: Duration) -> (u64, Duration) {
        let Some((now, latest)) = self.snapshots.back() else { return (0, Duration::ZERO) };
        let from = now.checked_sub(span);
        let base =
            self.snapshots.iter().rev().find(|(t, _)| from.is_some_and(|f| *t <= f)).or_else(|| self.snapshots.front());
        let Some((t0, base)) = base else { return (0, Duration::ZERO) };
        (latest[c as usize].saturating_sub(base[c as usize]), now.saturating_duration_since(*t0))
    }

    /// How long `c` has not grown as of the last snapshot, and whether it ever did.
    pub fn quiet_for(&self, c: Counter) -> (Duration, bool) {
        let (at, ever) = self.last_growth[c as usize];
        let now = self.snapshots.back().map_or(at, |(t, _)| *t);
        (now.saturating_duration_since(at), ever)
    }
}

/// What the levels look at (the node's `expected_rate`, `rate_tolerance`, `stale_timeout` and
/// `diagnostic_window` parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Frames per second the input should have; 0: no check.
    pub expected_rate: f64,
    /// How far the rate may be off, as a fraction of `expected_rate`.
    pub rate_tolerance: f64,
    /// Seconds without a frame after which the input is STALE.
    pub stale_timeout: f64,
    /// Seconds of history the levels look at.
    pub window: f64,
}

/// Seconds over which the input rate is measured (diagnostic_updater's FrequencyStatus looks
/// at its last 5 updates; ours come at 1 Hz).
pub const RATE_WINDOW: Duration = Duration::from_secs(5);

/// A model as /diagnostics shows it.
pub enum ModelStatus {
    /// Still loading (finding, downloading or reading the weights).
    Loading {
        /// What it does now.
        step: String,
        /// Seconds since loading started.
        seconds: f64,
    },
    /// Serving.
    Ready {
        /// What runs it, in words.
        backend: String,
        /// Each backend (the model's own first, then a fallback).
        health: Vec<BackendHealth>,
    },
    /// It cannot run.
    Failed(String),
}

/// What /diagnostics says besides the counters.
pub struct Report<'a> {
    /// The node's fully qualified name.
    pub fqn: &'a str,
    /// Stamp of the message (sim time under `use_sim_time`).
    pub stamp: builtin_interfaces::Time,
    /// What the levels look at.
    pub limits: Limits,
    /// The image topic (resolved).
    pub image_topic: &'a str,
    /// The camera_info topic (resolved).
    pub camera_info_topic: &'a str,
    /// The CameraInfo in use, in words.
    pub camera_info: String,
    /// SuperPoint.
    pub superpoint: ModelStatus,
    /// DUSt3R.
    pub dust3r: ModelStatus,
    /// The metric scale, when `scale_source` makes outputs metric.
    pub scale: Option<ScaleReport<'a>>,
    /// The input sockets' receive buffer.
    pub receive_buffer: ReceiveBuffer,
}

/// The kernel receive buffer of the DDS input sockets: asked for and granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveBuffer {
    /// Bytes asked for (`receive_buffer_size`).
    pub requested: usize,
    /// Bytes the kernel granted, when it could be read.
    pub granted: Option<usize>,
}

impl ReceiveBuffer {
    /// Whether the kernel granted less than asked (`net.core.rmem_max`).
    pub fn clamped(&self) -> bool {
        self.granted.is_some_and(|g| g < self.requested)
    }

    /// The command that lets the kernel grant the request (until the next boot; a file in
    /// /etc/sysctl.d/ keeps it).
    pub fn fix(&self) -> String {
        format!("sudo sysctl -w net.core.rmem_max={}", self.requested)
    }

    /// When the kernel granted less than asked: how much of what, and the fix, in words.
    pub fn shortfall(&self) -> Option<String> {
        let granted = self.granted.filter(|_| self.clamped())?;
        Some(format!("receive buffer {granted} B of {} B asked: {}", self.requested, self.fix()))
    }
}

/// The metric scale as /diagnostics shows it.
pub struct ScaleReport<'a> {
    /// `scale_source`.
    pub source: &'static str,
    /// Its input topic (the depth topic, or /tf).
    pub topic: &'a str,
    /// How the scale stands.
    pub track: ScaleTrack,
    /// `scale_max_unmeasured`.
    pub max_unmeasured: usize,
}

use diagnostic_msgs::DiagnosticStatus as Level;

/// One task's status as it is built: the worst level wins, and its reasons make the message.
struct Task {
    level: u8,
    reasons: Vec<String>,
    values: Vec<diagnostic_msgs::KeyValue>,
}

impl Task {
    fn new() -> Self {
        Self { level: Level::OK, reasons: Vec::new(), values: Vec::new() }
    }

    /// `level` because of `reason` (kept when it is at least the level so far).
    fn raise(&mut self, level: u8, reason: String) {
        if level > self.level {
            self.level = level;
            self.reasons.clear();
        }
        if level == self.level {
            self.reasons.push(reason);
        }
    }

    fn value(&mut self, key: &str, value: impl ToString) {
        self.values.push(diagnostic_msgs::KeyValue { key: key.into(), value: value.to_string() });
    }

    fn counters(&mut self, stats: &Stats, counters: &[Counter]) {
        for &c in counters {
            self.value(c.key(), stats.get(c));
        }
    }

    fn finish(self, fqn: &str, task: &str, hardware_id: String, ok: String) -> diagnostic_msgs::DiagnosticStatus {
        let message = if self.reasons.is_empty() { ok } else { self.reasons.join("; ") };
        diagnostic_msgs::DiagnosticStatus {
            level: self.level,
            name: format!("{}: {task}", fqn.trim_start_matches('/')),
            message,
            hardware_id,
            values: self.values,
        }
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

/// The input task: rate against `expected_rate`, staleness, undecodable frames and samples.
fn input_status(
    s: &Stats,
    h: &History,
    r: &Report<'_>,
    by_kind: &BTreeMap<String, u64>,
) -> diagnostic_msgs::DiagnosticStatus {
    let l = &r.limits;
    let window = Duration::from_secs_f64(l.window);
    let mut t = Task::new();
    let (frames, over) = h.growth(Counter::FramesIn, RATE_WINDOW);
    let rate = if over.is_zero() { 0.0 } else { frames as f64 / over.as_secs_f64() };
    let (quiet, ever) = h.quiet_for(Counter::FramesIn);
    let stale = quiet.as_secs_f64() >= l.stale_timeout;
    if stale && !ever {
        t.raise(Level::STALE, format!("no frame yet on {}", r.image_topic));
    } else if stale {
        t.raise(Level::STALE, format!("no frame for {} s on {}", secs(quiet), r.image_topic));
    }
    let bad: Vec<String> = [
        (Counter::FramesLost, "frames lost in transport"),
        (Counter::BadFrames, "undecodable frames"),
        (Counter::MalformedSamples, "malformed samples"),
        (Counter::BadCameraInfo, "unusable camera_info"),
    ]
    .iter()
    .filter_map(|&(c, what)| {
        let (n, _) = h.growth(c, window);
        (n > 0).then(|| format!("{n} {what}"))
    })
    .collect();
    if !bad.is_empty() {
        let (lost, _) = h.growth(Counter::FramesLost, window);
        let hint = match r.receive_buffer.shortfall() {
            Some(shortfall) if lost > 0 => format!(" ({shortfall})"),
            _ => String::new(),
        };
        t.raise(Level::WARN, format!("{} in the last {:.0} s{hint}", bad.join(", "), l.window));
    }
    if l.expected_rate > 0.0 && ever && !stale {
        let (lo, hi) = (l.expected_rate * (1.0 - l.rate_tolerance), l.expected_rate * (1.0 + l.rate_tolerance));
        if rate < lo || rate > hi {
            t.raise(
                Level::WARN,
                format!("{rate:.2} Hz, expected {} Hz ± {:.0} %", l.expected_rate, l.rate_tolerance * 100.0),
            );
        }
    }
    t.value("topic", r.image_topic);
    t.value("camera_info_topic", r.camera_info_topic);
    t.value("input_rate_hz", format!("{rate:.2}"));
    t.value("expected_rate_hz", l.expected_rate);
    t.value("last_frame_age_s", if ever { secs(quiet) } else { "never".into() });
    t.counters(
        s,
        &[
            Counter::FramesIn,
            Counter::FramesLost,
            Counter::BadFrames,
            Counter::BadCameraInfo,
            Counter::MalformedSamples,
        ],
    );
    t.value("receive_buffer_requested_bytes", r.receive_buffer.requested);
    t.value("receive_buffer_bytes", r.receive_buffer.granted.map_or("unknown".into(), |g| g.to_string()));
    if r.receive_buffer.clamped() {
        t.value("receive_buffer_fix", r.receive_buffer.fix());
    }
    for (k, v) in by_kind.iter().filter(|(k, _)| k.starts_with("errors_malformed_")) {
        t.value(k, v);
    }
    t.value("camera_info", &r.camera_info);
    let ok = format!("{rate:.2} Hz on {}", r.image_topic);
    t.finish(r.fqn, "input", r.image_topic.to_string(), ok)
}

/// What sets one model's task apart: its counters and names.
struct ModelTask {
    /// `superpoint` or `dust3r`: the task's name and its keys' prefix.
    name: &'static str,
    /// What it takes in: `frames` or `pairs`.
    unit: &'static str,
    done: Counter,
    failed: Counter,
    paused: Counter,
    /// Its other counters, listed as values.
    more: &'static [Counter],
    latency_ms: u64,
}

/// A model's task: ERROR when it cannot run (no weights, server down with no fallback), WARN
/// while it loads and when it failed or paused within the window.
fn model_status(
    s: &Stats,
    h: &History,
    r: &Report<'_>,
    m: &ModelTask,
    status: &ModelStatus,
    by_kind: &BTreeMap<String, u64>,
) -> diagnostic_msgs::DiagnosticStatus {
    let l = &r.limits;
    let window = Duration::from_secs_f64(l.window);
    let mut t = Task::new();
    let (done, _) = h.growth(m.done, window);
    let (failed, _) = h.growth(m.failed, window);
    let (paused, _) = h.growth(m.paused, window);
    let (backend, state, hardware_id) = match status {
        ModelStatus::Loading { step, seconds } => {
            t.raise(Level::WARN, format!("loading ({seconds:.0} s): {step}"));
            ("loading".to_string(), "loading", String::new())
        }
        ModelStatus::Failed(why) => {
            t.raise(Level::ERROR, format!("cannot run: {why}"));
            ("none".to_string(), "failed", String::new())
        }
        ModelStatus::Ready { backend, health } => {
            let primary = health.first();
            if paused > 0 && done == 0 {
                let why = primary.map_or(String::new(), |b| format!(" ({})", b.detail));
                t.raise(
                    Level::ERROR,
                    format!("paused: its server cannot answer{why} and no fallback runs; {paused} {} skipped", m.unit),
                );
            } else if paused > 0 {
                t.raise(Level::WARN, format!("{paused} {} skipped while its server could not answer", m.unit));
            }
            if failed > 0 {
                let of = failed + done;
                t.raise(Level::WARN, format!("{failed} of {of} {} failed in the last {:.0} s", m.unit, l.window));
            }
            if m.done == Counter::PairsDone {
                let (no_pose, _) = h.growth(Counter::NoPose, window);
                if no_pose > 0 {
                    t.raise(
                        Level::WARN,
                        format!("{no_pose} of {done} pairs without a pose in the last {:.0} s", l.window),
                    );
                }
                let (mismatch, _) = h.growth(Counter::CameraInfoMismatch, window);
                if mismatch > 0 {
                    t.raise(
                        Level::WARN,
                        format!("camera_info is for another image size ({mismatch} pairs): focal estimated instead"),
                    );
                }
            }
            (backend.clone(), "ready", primary.map(|b| b.hardware_id.clone()).unwrap_or_default())
        }
    };
    t.value(&format!("{}_backend", m.name), &backend);
    t.value("state", state);
    t.counters(s, &[m.done, m.failed, m.paused]);
    t.counters(s, m.more);
    t.value(&format!("{}_latency_ms", m.name), m.latency_ms);
    let prefix = format!("errors_{}_", m.name);
    for (k, v) in by_kind.iter().filter(|(k, _)| k.starts_with(&prefix)) {
        t.value(k, v);
    }
    let ok = if done > 0 {
        format!("{done} {} in the last {:.0} s, the last in {} ms", m.unit, l.window, m.latency_ms)
    } else {
        format!("ready, no {} in the last {:.0} s", m.unit, l.window)
    };
    t.finish(r.fqn, m.name, hardware_id, ok)
}

/// The tracking task: WARN when frames were not tracked (lost) within the window, or tracked
/// frames wait for base_frame's transform; OK otherwise, saying how many were placed.
fn tracking_status(
    s: &Stats,
    h: &History,
    r: &Report<'_>,
    by_kind: &BTreeMap<String, u64>,
) -> diagnostic_msgs::DiagnosticStatus {
    let window = Duration::from_secs_f64(r.limits.window);
    let mut t = Task::new();
    let (tracked, _) = h.growth(Counter::FramesTracked, window);
    let (lost, _) = h.growth(Counter::FramesNotTracked, window);
    let (waiting, _) = h.growth(Counter::FramesNoMount, window);
    if lost > 0 {
        t.raise(
            Level::WARN,
            format!("{lost} of {} frames not tracked in the last {:.0} s", lost + tracked, r.limits.window),
        );
    }
    if waiting > 0 {
        t.raise(Level::WARN, format!("{waiting} tracked frames wait for base_frame's transform on /tf_static"));
    }
    t.counters(
        s,
        &[
            Counter::FramesTracked,
            Counter::FramesSecondTry,
            Counter::FramesTurned,
            Counter::FramesDrawn,
            Counter::FramesMeasured,
            Counter::FramesNotTracked,
            Counter::FramesBeforeMap,
            Counter::FramesNoMount,
            Counter::Keyframes,
            Counter::KeyframesChained,
            Counter::PairsUnchained,
            Counter::Resets,
            Counter::MapsSaved,
        ],
    );
    for (k, v) in by_kind.iter().filter(|(k, _)| k.starts_with("errors_tracking_") || k.starts_with(KEYFRAMES_FOR)) {
        t.value(k, v);
    }
    let ok = if s.get(Counter::KeyframesChained) == 0 {
        "waiting for the first DUSt3R pair with a pose".to_string()
    } else {
        format!("{tracked} frames tracked in the last {:.0} s", r.limits.window)
    };
    t.finish(r.fqn, "tracking", String::new(), ok)
}

/// The scale task (with a metric `scale_source`): ERROR while metric outputs are held (the
/// scale unmeasured for more than `scale_max_unmeasured` keyframes, or never measured), WARN
/// while pairs go unmeasured or depth images are bad, OK with the scale and its spread.
fn scale_status(s: &Stats, h: &History, r: &Report<'_>, sc: &ScaleReport<'_>) -> diagnostic_msgs::DiagnosticStatus {
    let window = Duration::from_secs_f64(r.limits.window);
    let mut t = Task::new();
    let track = &sc.track;
    let (unmeasured, _) = h.growth(Counter::PairsScaleUnmeasured, window);
    let (bad, _) = h.growth(Counter::BadDepth, window);
    let (depth_in, _) = h.growth(Counter::DepthIn, window);
    let (robot_in, _) = h.growth(Counter::RobotOdometryIn, window);
    if track.held(sc.max_unmeasured) && s.get(Counter::PairsDone) > 0 {
        let why = if track.last.is_none() { "never measured" } else { "not measured" };
        t.raise(
            Level::ERROR,
            format!(
                "metric outputs stopped: the scale was {why} for {} keyframes ({} on {}: {} in the last {:.0} s)",
                track.unmeasured,
                sc.source,
                sc.topic,
                if sc.source == "depth" { depth_in } else { robot_in },
                r.limits.window
            ),
        );
    } else if unmeasured > 0 {
        t.raise(
            Level::WARN,
            format!("{unmeasured} pairs without a scale measurement in the last {:.0} s", r.limits.window),
        );
    }
    if bad > 0 {
        t.raise(Level::WARN, format!("{bad} undecodable depth images in the last {:.0} s", r.limits.window));
    }
    t.value("scale_source", sc.source);
    t.value("units", "m");
    t.value("scale_topic", sc.topic);
    t.value("scale", track.last.map_or("unknown".into(), |e| format!("{:.6}", e.scale)));
    t.value("scale_spread", track.last.map_or("unknown".into(), |e| format!("{:.4}", e.spread)));
    t.value("scale_pixels", track.last.map_or(0, |e| e.pixels));
    t.value("keyframes_since_measured", track.unmeasured);
    t.counters(
        s,
        &[
            Counter::DepthIn,
            Counter::BadDepth,
            Counter::RobotOdometryIn,
            Counter::PairsScaleMeasured,
            Counter::PairsScaleUnmeasured,
            Counter::FramesNoScale,
        ],
    );
    let ok = match track.last {
        Some(e) => format!("metric from {}: {:.4} m per DUSt3R unit ± {:.1} %", sc.source, e.scale, e.spread * 100.0),
        None => format!("metric from {}: waiting for the first pair", sc.source),
    };
    t.finish(r.fqn, "scale", sc.topic.to_string(), ok)
}

/// One backend's task: OK while it answers (or was not asked yet), WARN while its server
/// starts, ERROR while it cannot be reached.
fn backend_status(fqn: &str, model: &str, b: &BackendHealth) -> diagnostic_msgs::DiagnosticStatus {
    let mut t = Task::new();
    match b.state {
        BackendState::Ready | BackendState::NotContacted => {}
        BackendState::Starting => t.raise(Level::WARN, b.detail.clone()),
        BackendState::Unreachable => t.raise(Level::ERROR, b.detail.clone()),
    }
    t.value("kind", b.kind.name());
    t.value("role", if b.fallback { "fallback" } else { "primary" });
    let task = format!("{model} {}", if b.fallback { "fallback backend" } else { "backend" });
    t.finish(fqn, &task, b.hardware_id.clone(), b.detail.clone())
}

/// The /diagnostics message: the input, each model and each backend.
pub fn diagnostics(s: &Stats, h: &History, r: Report<'_>) -> diagnostic_msgs::DiagnosticArray {
    let by_kind = s.by_kind();
    let superpoint = ModelTask {
        name: "superpoint",
        unit: "frames",
        done: Counter::FramesDone,
        failed: Counter::SuperPointErrors,
        paused: Counter::SuperPointPaused,
        more: &[Counter::FrameDrops, Counter::SuperPointRestMs, Counter::DebugImages, Counter::PublishErrors],
        latency_ms: s.superpoint_ms.load(Ordering::Relaxed),
    };
    let dust3r = ModelTask {
        name: "dust3r",
        unit: "pairs",
        done: Counter::PairsDone,
        failed: Counter::Dust3rErrors,
        paused: Counter::Dust3rPaused,
        more: &[Counter::PairDrops, Counter::NoPose, Counter::CameraInfoMismatch],
        latency_ms: s.dust3r_ms.load(Ordering::Relaxed),
    };
    let mut status = vec![
        input_status(s, h, &r, &by_kind),
        model_status(s, h, &r, &superpoint, &r.superpoint, &by_kind),
        model_status(s, h, &r, &dust3r, &r.dust3r, &by_kind),
        tracking_status(s, h, &r, &by_kind),
    ];
    if let Some(sc) = &r.scale {
        status.push(scale_status(s, h, &r, sc));
    }
    for (model, m) in [("superpoint", &r.superpoint), ("dust3r", &r.dust3r)] {
        if let ModelStatus::Ready { health, .. } = m {
            status.extend(health.iter().map(|b| backend_status(r.fqn, model, b)));
        }
    }
    diagnostic_msgs::DiagnosticArray { header: std_msgs::Header { stamp: r.stamp, frame_id: String::new() }, status }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::build::BackendKind;

    #[test]
    fn every_counter_has_its_own_key_and_slot() {
        let keys: std::collections::BTreeSet<&str> = Counter::ALL.iter().map(|c| c.key()).collect();
        assert_eq!(keys.len(), Counter::ALL.len());
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }

    const LIMITS: Limits = Limits { expected_rate: 10.0, rate_tolerance: 0.1, stale_timeout: 5.0, window: 30.0 };

    fn cpu_health() -> BackendHealth {
        BackendHealth {
            fallback: false,
            kind: BackendKind::Cpu,
            hardware_id: "Some CPU, avx2 kernels".into(),
            state: BackendState::Ready,
            detail: "ready".into(),
        }
    }

    fn cpu() -> ModelStatus {
        ModelStatus::Ready { backend: "cpu".into(), health: vec![cpu_health()] }
    }

    fn report(superpoint: ModelStatus, dust3r: ModelStatus) -> Report<'static> {
        Report {
            fqn: "/cam/sp_dust3r",
            stamp: builtin_interfaces::Time::default(),
            limits: LIMITS,
            image_topic: "/cam/image_raw",
            camera_info_topic: "/cam/camera_info",
            camera_info: "none".into(),
            superpoint,
            dust3r,
            scale: None,
            receive_buffer: ReceiveBuffer { requested: 8 << 20, granted: Some(8 << 20) },
        }
    }

    /// A node's counters over `seconds` of 1 Hz updates, `each` changing them every second.
    fn run(seconds: u64, each: impl Fn(u64, &Stats)) -> (Stats, History) {
        let t0 = Instant::now();
        let (s, mut h) = (Stats::default(), History::new(t0));
        for i in 1..=seconds {
            each(i, &s);
            h.record(t0 + Duration::from_secs(i), s.snapshot(), Duration::from_secs(30));
        }
        (s, h)
    }

    fn task(a: &diagnostic_msgs::DiagnosticArray, name: &str) -> diagnostic_msgs::DiagnosticStatus {
        a.status.iter().find(|s| s.name == format!("cam/sp_dust3r: {name}")).cloned().unwrap()
    }

    fn frames(n: u64, s: &Stats) {
        for _ in 0..n {
            s.bump(Counter::FramesIn);
            s.bump(Counter::FramesDone);
        }
    }

    #[test]
    fn a_bad_frame_warns_for_one_window_then_is_history() {
        // 10 Hz, one bad frame at second 5.
        let each = |i: u64, s: &Stats| {
            frames(10, s);
            if i == 5 {
                s.bump(Counter::BadFrames);
            }
        };
        let (s, h) = run(20, each);
        let a = diagnostics(&s, &h, report(cpu(), cpu()));
        let input = task(&a, "input");
        assert_eq!(input.level, Level::WARN, "{input:?}");
        assert_eq!(input.message, "1 undecodable frames in the last 30 s");
        assert_eq!(task(&a, "superpoint").level, Level::OK);
        assert_eq!(task(&a, "superpoint").message, "200 frames in the last 30 s, the last in 0 ms");
        // 35 s after it, the window has moved past it; the lifetime count stays.
        let (s, h) = run(40, each);
        let input = task(&diagnostics(&s, &h, report(cpu(), cpu())), "input");
        assert_eq!(input.level, Level::OK, "{input:?}");
        assert_eq!(input.message, "10.00 Hz on /cam/image_raw");
        assert!(input.values.iter().any(|kv| kv.key == "errors_bad_frame" && kv.value == "1"));
    }

    #[test]
    fn frames_lost_in_transport_warn_with_the_sysctl_when_the_buffer_was_clamped() {
        let value = |t: &diagnostic_msgs::DiagnosticStatus, k: &str| {
            t.values.iter().find(|kv| kv.key == k).map(|kv| kv.value.clone())
        };
        // 10 Hz, 4 frames lost at second 5, the kernel having granted 212992 B of 8 MiB.
        let (s, h) = run(10, |i, s| {
            frames(10, s);
            if i == 5 {
                s.add(Counter::FramesLost, 4);
            }
        });
        let mut r = report(cpu(), cpu());
        r.receive_buffer = ReceiveBuffer { requested: 8 << 20, granted: Some(212_992) };
        let input = task(&diagnostics(&s, &h, r), "input");
        assert_eq!(input.level, Level::WARN);
        assert_eq!(
            input.message,
            "4 frames lost in transport in the last 30 s (receive buffer 212992 B of 8388608 B asked: \
             sudo sysctl -w net.core.rmem_max=8388608)"
        );
        assert_eq!(value(&input, "frames_lost_in_transport").as_deref(), Some("4"));
        assert_eq!(value(&input, "receive_buffer_bytes").as_deref(), Some("212992"));
        assert_eq!(value(&input, "receive_buffer_fix").as_deref(), Some("sudo sysctl -w net.core.rmem_max=8388608"));
        // The buffer granted in full: the loss is still reported, without a sysctl to try.
        let input = task(&diagnostics(&s, &h, report(cpu(), cpu())), "input");
        assert_eq!(input.message, "4 frames lost in transport in the last 30 s");
        assert_eq!(value(&input, "receive_buffer_fix"), None);
        // Clamped without losses: OK, the values say it.
        let (s, h) = run(10, |_, s| frames(10, s));
        let mut r = report(cpu(), cpu());
        r.receive_buffer = ReceiveBuffer { requested: 8 << 20, granted: Some(212_992) };
        let input = task(&diagnostics(&s, &h, r), "input");
        assert_eq!((input.level, value(&input, "receive_buffer_fix").is_some()), (Level::OK, true));
    }

    #[test]
    fn the_scale_task_says_metres_warns_when_unmeasured_and_errs_when_outputs_stop() {
        let value = |t: &diagnostic_msgs::DiagnosticStatus, k: &str| {
            t.values.iter().find(|kv| kv.key == k).map(|kv| kv.value.clone()).unwrap_or_default()
        };
        let scale_task = |s: &Stats, h: &History, unmeasured: usize| {
            let estimate = crate::vo::scale::ScaleEstimate { scale: 0.5, spread: 0.012, pixels: 5000 };
            let track = ScaleTrack { last: Some(estimate), unmeasured };
            let mut r = report(cpu(), cpu());
            r.scale = Some(ScaleReport { source: "depth", topic: "/cam/depth/image", track, max_unmeasured: 2 });
            task(&diagnostics(s, h, r), "scale")
        };
        // A pair a second, each measured.
        let measured = |_: u64, s: &Stats| {
            s.add(Counter::DepthIn, 30);
            s.bump(Counter::PairsDone);
            s.bump(Counter::PairsScaleMeasured);
        };
        let (s, h) = run(10, measured);
        let t = scale_task(&s, &h, 0);
        assert_eq!((t.level, t.message.as_str()), (Level::OK, "metric from depth: 0.5000 m per DUSt3R unit ± 1.2 %"));
        assert_eq!((value(&t, "units"), value(&t, "scale")), ("m".to_string(), "0.500000".to_string()));
        assert_eq!(t.hardware_id, "/cam/depth/image");
        // Depth stops: the pairs go unmeasured; WARN while the chain carries the scale, ERROR
        // once the outputs stop.
        let (s, h) = run(12, |i, s| {
            if i <= 10 {
                measured(i, s);
            } else {
                s.bump(Counter::PairsDone);
                s.bump(Counter::PairsScaleUnmeasured);
            }
        });
        let t = scale_task(&s, &h, 2);
        assert_eq!(
            (t.level, t.message.as_str()),
            (Level::WARN, "2 pairs without a scale measurement in the last 30 s")
        );
        let t = scale_task(&s, &h, 3);
        assert_eq!(t.level, Level::ERROR, "{t:?}");
        assert!(t.message.starts_with("metric outputs stopped: the scale was not measured for 3 keyframes"), "{t:?}");
        // Without a metric scale source there is no scale task.
        assert!(diagnostics(&s, &h, report(cpu(), cpu())).status.iter().all(|t| !t.name.ends_with(": scale")));
    }

    #[test]
    fn rate_against_expected_and_stale_input() {
        let (s, h) = run(10, |_, s| frames(5, s));
        let input = task(&diagnostics(&s, &h, report(cpu(), cpu())), "input");
        assert_eq!((input.level, input.message.as_str()), (Level::WARN, "5.00 Hz, expected 10 Hz ± 10 %"));
        // 9.5 Hz is within 10 %.
        let (s, h) = run(10, |i, s| frames(9 + i % 2, s));
        assert_eq!(task(&diagnostics(&s, &h, report(cpu(), cpu())), "input").level, Level::OK);
        // Frames for 10 s, then none for 6 s: STALE, and the rate no longer matters.
        let (s, h) = run(16, |i, s| frames(if i <= 10 { 10 } else { 0 }, s));
        let input = task(&diagnostics(&s, &h, report(cpu(), cpu())), "input");
        assert_eq!((input.level, input.message.as_str()), (Level::STALE, "no frame for 6.0 s on /cam/image_raw"));
        let (s, h) = run(6, |_, _| {});
        let input = task(&diagnostics(&s, &h, report(cpu(), cpu())), "input");
        assert_eq!((input.level, input.message.as_str()), (Level::STALE, "no frame yet on /cam/image_raw"));
    }

    #[test]
    fn frames_lost_by_tracking_warn_for_a_window_and_tracked_ones_are_counted() {
        // The chain starts at second 2; 10 frames a second tracked, 3 lost at second 10.
        let each = |i: u64, s: &Stats| {
            frames(10, s);
            if i == 2 {
                s.add(Counter::KeyframesChained, 2);
            }
            let lost = if i == 10 { 3 } else { 0 };
            s.add(if i < 2 { Counter::FramesBeforeMap } else { Counter::FramesTracked }, 10 - lost);
            s.add(Counter::FramesNotTracked, lost);
            if i == 10 {
                s.count_keyframe("lost");
                s.add(Counter::FramesSecondTry, 2);
                s.add(Counter::FramesTurned, 1);
            }
        };
        let (s, h) = run(20, each);
        let t = task(&diagnostics(&s, &h, report(cpu(), cpu())), "tracking");
        assert_eq!((t.level, t.message.as_str()), (Level::WARN, "3 of 190 frames not tracked in the last 30 s"));
        assert!(t.values.iter().any(|kv| kv.key == "frames_before_first_pair" && kv.value == "10"));
        assert!(t.values.iter().any(|kv| kv.key == "keyframes_for_lost" && kv.value == "1"), "{:?}", t.values);
        assert!(t.values.iter().any(|kv| kv.key == "frames_tracked_second_try" && kv.value == "2"), "{:?}", t.values);
        assert!(t.values.iter().any(|kv| kv.key == "frames_tracked_turned" && kv.value == "1"), "{:?}", t.values);
        // 31 s after it: history.
        let (s, h) = run(41, each);
        let t = task(&diagnostics(&s, &h, report(cpu(), cpu())), "tracking");
        assert_eq!((t.level, t.message.as_str()), (Level::OK, "300 frames tracked in the last 30 s"));
        // Tracked frames held back for base_frame's transform.
        let (s, h) = run(5, |_, s| s.add(Counter::FramesNoMount, 10));
        let t = task(&diagnostics(&s, &h, report(cpu(), cpu())), "tracking");
        assert_eq!(t.level, Level::WARN, "{t:?}");
        assert!(t.message.contains("wait for base_frame's transform"), "{}", t.message);
    }

    #[test]
    fn a_model_that_cannot_run_is_an_error_and_loading_a_warning() {
        let (s, h) = run(3, |_, s| frames(10, s));
        let loading = ModelStatus::Loading { step: "downloading model.safetensors: 40 %".into(), seconds: 3.0 };
        let a = diagnostics(&s, &h, report(loading, ModelStatus::Failed("no DUSt3R weights found".into())));
        let sp = task(&a, "superpoint");
        assert_eq!(
            (sp.level, sp.message.as_str()),
            (Level::WARN, "loading (3 s): downloading model.safetensors: 40 %")
        );
        let d = task(&a, "dust3r");
        assert_eq!((d.level, d.message.as_str()), (Level::ERROR, "cannot run: no DUSt3R weights found"));
        // No backend statuses for models that are not built (input, the two models, tracking).
        assert_eq!(a.status.len(), 4);
        let t = task(&a, "tracking");
        assert_eq!((t.level, t.message.as_str()), (Level::OK, "waiting for the first DUSt3R pair with a pose"));
    }

    #[test]
    fn a_server_down_without_fallback_is_an_error_with_one_the_model_is_served() {
        let down = |fallback: bool| {
            let server = BackendHealth {
                fallback: false,
                kind: BackendKind::TtServer,
                hardware_id: "http://127.0.0.1:9 superpoint-p150 (not reported yet)".into(),
                state: BackendState::Unreachable,
                detail: "connection refused".into(),
            };
            let mut health = vec![server];
            if fallback {
                health.push(BackendHealth { fallback: true, ..cpu_health() });
            }
            ModelStatus::Ready { backend: "tt-server".into(), health }
        };
        // No fallback: every frame skipped.
        let (s, h) = run(5, |_, s| {
            s.bump(Counter::FramesIn);
            s.bump(Counter::SuperPointPaused);
        });
        let a = diagnostics(&s, &h, report(down(false), cpu()));
        let sp = task(&a, "superpoint");
        assert_eq!(sp.level, Level::ERROR, "{sp:?}");
        assert_eq!(
            sp.message,
            "paused: its server cannot answer (connection refused) and no fallback runs; 5 frames skipped"
        );
        assert_eq!(sp.hardware_id, "http://127.0.0.1:9 superpoint-p150 (not reported yet)");
        let b = task(&a, "superpoint backend");
        assert_eq!((b.level, b.message.as_str()), (Level::ERROR, "connection refused"));
        // With the CPU behind it the frames are served: the model is OK, its server still ERROR.
        let (s, h) = run(5, |_, s| frames(1, s));
        let a = diagnostics(&s, &h, report(down(true), cpu()));
        assert_eq!(task(&a, "superpoint").level, Level::OK);
        assert_eq!(task(&a, "superpoint backend").level, Level::ERROR);
        let f = task(&a, "superpoint fallback backend");
        assert_eq!((f.level, f.hardware_id.as_str()), (Level::OK, "Some CPU, avx2 kernels"));
    }

    #[test]
    fn growth_is_measured_over_the_window_only() {
        let t0 = Instant::now();
        let mut h = History::new(t0);
        for i in 1..=100u64 {
            h.record(t0 + Duration::from_secs(i), vec![i; Counter::ALL.len()], Duration::from_secs(10));
        }
        assert_eq!(h.growth(Counter::FramesIn, Duration::from_secs(10)), (10, Duration::from_secs(10)));
        assert_eq!(h.growth(Counter::FramesIn, Duration::from_secs(3)), (3, Duration::from_secs(3)));
        // Asked for more than is kept: what is kept.
        assert_eq!(h.growth(Counter::FramesIn, Duration::from_secs(60)), (10, Duration::from_secs(10)));
        assert!(h.snapshots.len() <= 12, "{}", h.snapshots.len());
        assert_eq!(h.quiet_for(Counter::FramesIn), (Duration::ZERO, true));
    }
}
