//! The p150 through the published tt-model servers (`superpoint-p150`, `mast3r-blackhole`):
//! their HTTP contract is in shared/spec/tt-model-servers.md.
//!
//! A [`Link`] is one server: it knows whether the server is ready (`GET /health` says `ok`),
//! polls it with a growing backoff while it is starting or down, and classifies every answer.
//! Callers send one request at a time (the node's workers do), so no request queues up behind
//! a slow chip. A server that dies is retried after the backoff and picked up again when it
//! answers, without a restart.

use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nalgebra::{Matrix3, Vector3};
use serde_json::{json, Value};

use super::npz::{decode_base64, read_array, Array};
use super::{
    BackendError, BackendHealth, BackendKind, BackendState, FeatureExtractor, PairOutput, PairReconstructor,
    PairRequest,
};
use crate::cancel::{Cancel, Cancelled};
use crate::dust3r::{InputMapping, Pointmap};
use crate::geometry::{NoPose, PairPose, PnpWorld, PoseMode, TCam2Cam1};
use crate::image::{Frame, PixelFormat};
use crate::superpoint::{Keypoints, PostParams};

/// Where `tt-model serve changh95/superpoint-p150` listens by default.
pub const DEFAULT_SUPERPOINT_URL: &str = "http://127.0.0.1:20000";
/// Where `tt-model serve changh95/mast3r-blackhole` listens by default.
pub const DEFAULT_DUST3R_URL: &str = "http://127.0.0.1:20001";

/// How to reach a server.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Base URL, e.g. `http://127.0.0.1:20000`.
    pub url: String,
    /// Limit for each request, connection included.
    pub timeout: Duration,
    /// JPEG quality for colour frames; 0 sends colour as PNG (lossless, larger, slower).
    pub jpeg_quality: u8,
    /// Set at shutdown: a request in flight is given up at once (its thread is left to the
    /// timeout) instead of holding the node for up to `timeout`.
    pub cancel: Cancel,
}

/// Answers larger than this are refused (DUSt3R's pointmaps are ~10 MB of base64).
const MAX_BODY: u64 = 64 << 20;
const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

#[derive(Debug)]
struct LinkState {
    ready: bool,
    info_checked: bool,
    /// Not before this instant is the server asked again (after it was down or starting).
    retry_at: Option<Instant>,
    backoff: Duration,
    /// Since when it has been unavailable, and why (for the log and `describe`).
    waiting_since: Option<Instant>,
    reason: String,
    /// Unavailable because it is still loading its model (503, `/health` "starting"), rather
    /// than unreachable.
    starting: bool,
    /// The model and device its last `/health` named, for `hardware_id`.
    reported: Option<String>,
}

/// One tt-model server.
pub struct Link {
    opts: ServerOptions,
    agent: ureq::Agent,
    /// `model` as /health and /info name it.
    model: &'static str,
    state: Mutex<LinkState>,
}

/// Why an HTTP exchange got no answer.
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    /// Connecting, sending or the timeout.
    #[error(transparent)]
    Transport(Box<ureq::Transport>),
    /// The answer broke off.
    #[error("reading the answer: {0}")]
    Read(#[source] std::io::Error),
    /// The answer is larger than [`MAX_BODY`].
    #[error("answer larger than {MAX_BODY} bytes")]
    TooLarge,
    /// Given up on request (shutdown).
    #[error(transparent)]
    Cancelled(#[from] Cancelled),
}

/// The answer of one HTTP exchange, before classification.
enum Reply {
    Ok(Vec<u8>),
    Status(u16, String),
}

/// A link's reason before its first request.
const NOT_CONTACTED: &str = "not contacted yet";

/// How often a waiting exchange looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// The HTTP exchange itself (blocking, bounded by the agent's timeout).
fn blocking_exchange(agent: &ureq::Agent, method: &str, url: &str, body: Option<&str>) -> Result<Reply, ExchangeError> {
    let req = agent.request(method, url);
    let result = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(b),
        None => req.call(),
    };
    let read = |r: ureq::Response| -> Result<Vec<u8>, ExchangeError> {
        let mut buf = Vec::new();
        r.into_reader().take(MAX_BODY + 1).read_to_end(&mut buf).map_err(ExchangeError::Read)?;
        if buf.len() as u64 > MAX_BODY {
            return Err(ExchangeError::TooLarge);
        }
        Ok(buf)
    };
    match result {
        Ok(r) => read(r).map(Reply::Ok),
        Err(ureq::Error::Status(code, r)) => Ok(Reply::Status(code, r.into_string().unwrap_or_default())),
        Err(ureq::Error::Transport(t)) => Err(ExchangeError::Transport(Box::new(t))),
    }
}

impl Link {
    /// A link to the server `opts` names, serving `model` (as /health and /info name it).
    pub fn new(opts: ServerOptions, model: &'static str) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(opts.timeout).build();
        let state = LinkState {
            ready: false,
            info_checked: false,
            retry_at: None,
            backoff: MIN_BACKOFF,
            waiting_since: None,
            reason: NOT_CONTACTED.into(),
            starting: false,
            reported: None,
        };
        Self {
            opts: ServerOptions { url: opts.url.trim_end_matches('/').to_string(), ..opts },
            agent,
            model,
            state: Mutex::new(state),
        }
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        &self.opts.url
    }

    /// One HTTP exchange on a thread of its own, so that a shutdown does not wait for it: the
    /// caller polls the answer and [`ServerOptions::cancel`].
    fn exchange(&self, method: &str, path: &str, body: Option<&str>) -> Result<Reply, ExchangeError> {
        let (agent, method, url) = (self.agent.clone(), method.to_string(), format!("{}{path}", self.opts.url));
        let body = body.map(str::to_string);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // The receiver is gone when the exchange was given up; nothing is left to tell.
            let _ = tx.send(blocking_exchange(&agent, &method, &url, body.as_deref()));
        });
        loop {
            match rx.recv_timeout(CANCEL_POLL) {
                Ok(reply) => return reply,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => self.opts.cancel.check()?,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ExchangeError::Read(std::io::Error::other(
                        "the request thread ended without an answer",
                    )))
                }
            }
        }
    }

    fn unavailable(&self, st: &mut LinkState, starting: bool, reason: String) -> BackendError {
        let now = Instant::now();
        let since = *st.waiting_since.get_or_insert(now);
        if st.ready || st.reason != reason {
            tracing::warn!("tt-model server {} ({}): {reason}; retrying with backoff", self.opts.url, self.model);
        } else {
            tracing::info!(
                "waiting for tt-model server {} ({}): {reason} ({:.0} s)",
                self.opts.url,
                self.model,
                since.elapsed().as_secs_f64()
            );
        }
        st.ready = false;
        st.retry_at = Some(now + st.backoff);
        st.backoff = (st.backoff * 2).min(MAX_BACKOFF);
        st.reason = reason.clone();
        st.starting = starting;
        if starting {
            BackendError::Starting { url: self.opts.url.clone() }
        } else {
            BackendError::Unreachable { url: self.opts.url.clone(), reason }
        }
    }

    /// Ready for a request: known ready, or `/health` says `ok` now. While the server is down
    /// or starting, answers at once (no request) until the backoff has passed.
    fn ensure_ready(&self) -> Result<(), BackendError> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| BackendError::Unreachable { url: self.opts.url.clone(), reason: "state poisoned".into() })?;
        if st.ready {
            return Ok(());
        }
        if let Some(at) = st.retry_at {
            if Instant::now() < at {
                return Err(if st.starting {
                    BackendError::Starting { url: self.opts.url.clone() }
                } else {
                    BackendError::Unreachable { url: self.opts.url.clone(), reason: st.reason.clone() }
                });
            }
        }
        let health = match self.exchange("GET", "/health", None) {
            Err(ExchangeError::Cancelled(_)) => return Err(BackendError::Cancelled),
            Err(e) => return Err(self.unavailable(&mut st, false, e.to_string())),
            Ok(Reply::Status(code, body)) => {
                return Err(self.unavailable(
                    &mut st,
                    code == 503,
                    format!("/health answered HTTP {code} {}", snippet(&body)),
                ))
            }
            Ok(Reply::Ok(body)) => body,
        };
        let health: Value = match serde_json::from_slice(&health) {
            Ok(v) => v,
            Err(_) => {
                return Err(self.unavailable(
                    &mut st,
                    false,
                    format!(
                        "/health answered something that is not JSON: {}",
                        snippet(&String::from_utf8_lossy(&health))
                    ),
                ))
            }
        };
        match health.get("status").and_then(Value::as_str) {
            Some("ok") => {}
            Some("starting") => return Err(self.unavailable(&mut st, true, "starting".into())),
            other => return Err(self.unavailable(&mut st, false, format!("/health status {other:?}"))),
        }
        st.reported = Some(reported_device(&health, self.model));
        if let Some(model) = health.get("model").and_then(Value::as_str) {
            if model != self.model {
                tracing::warn!("tt-model server {} serves {model}, expected {}", self.opts.url, self.model);
            }
        }
        match st.waiting_since.take() {
            Some(since) => tracing::info!(
                "tt-model server {} ({}) ready after {:.1} s",
                self.opts.url,
                self.model,
                since.elapsed().as_secs_f64()
            ),
            None => tracing::info!("tt-model server {} ({}) ready", self.opts.url, self.model),
        }
        st.ready = true;
        st.retry_at = None;
        st.backoff = MIN_BACKOFF;
        st.reason = "ready".into();
        if !st.info_checked {
            st.info_checked = true;
            drop(st);
            self.check_info();
        }
        Ok(())
    }

    /// `/info`: warn when the server runs another model, input size or weights revision than
    /// the CPU backend would (results would then differ from what was validated).
    fn check_info(&self) {
        let Ok(Reply::Ok(body)) = self.exchange("GET", "/info", None) else {
            tracing::debug!("tt-model server {}: no /info", self.opts.url);
            return;
        };
        let Ok(info) = serde_json::from_slice::<Value>(&body) else {
            tracing::warn!("tt-model server {}: /info is not JSON", self.opts.url);
            return;
        };
        let model = info
            .get("model")
            .map(|m| m.get("name").unwrap_or(m).as_str().unwrap_or_default().to_string())
            .unwrap_or_default();
        if !model.is_empty() && model != self.model {
            tracing::warn!("tt-model server {}: /info names model {model}, expected {}", self.opts.url, self.model);
        }
        if self.model == SUPERPOINT_MODEL {
            let input = info.get("input");
            let dims = (
                input.and_then(|i| i.get("height")).and_then(Value::as_u64),
                input.and_then(|i| i.get("width")).and_then(Value::as_u64),
            );
            if dims != (Some(480), Some(640)) && input.is_some() {
                tracing::warn!("tt-model server {}: input {dims:?}, expected 480x640", self.opts.url);
            }
            let revision = info.get("weights").and_then(|w| w.get("revision")).and_then(Value::as_str);
            if let Some(rev) = revision.filter(|r| *r != crate::superpoint::HUB_MODEL.revision) {
                tracing::warn!(
                    "tt-model server {}: weights revision {rev}, the CPU backend pins {}",
                    self.opts.url,
                    crate::superpoint::HUB_MODEL.revision
                );
            }
        }
    }

    /// `POST /predict`; one retry at once when the connection drops early (a stale keep-alive
    /// connection looks like that), none after a timeout (a slow chip would only get busier),
    /// then the server counts as down until its backoff has passed.
    pub fn predict(&self, body: &Value) -> Result<Value, BackendError> {
        self.ensure_ready()?;
        let text = body.to_string();
        let t = Instant::now();
        let mut outcome = self.exchange("POST", "/predict", Some(&text));
        let retry = outcome.as_ref().is_err_and(|e| !matches!(e, ExchangeError::Cancelled(_)));
        if retry && t.elapsed() < self.opts.timeout.mul_f64(0.9) {
            outcome = self.exchange("POST", "/predict", Some(&text));
        }
        let url = self.opts.url.clone();
        let message = |body: &str| {
            serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| {
                    v.get("detail")
                        .or_else(|| v.get("error"))
                        .map(|d| d.as_str().map(str::to_string).unwrap_or_else(|| d.to_string()))
                })
                .unwrap_or_else(|| snippet(body))
        };
        match outcome {
            Ok(Reply::Ok(bytes)) => serde_json::from_slice(&bytes).map_err(|e| BackendError::Malformed {
                url,
                reason: format!("not JSON ({e}): {}", snippet(&String::from_utf8_lossy(&bytes))),
            }),
            Ok(Reply::Status(503, _)) => {
                let mut st = self.state.lock().map_err(|_| BackendError::Starting { url: url.clone() })?;
                Err(self.unavailable(&mut st, true, "starting (503)".into()))
            }
            Ok(Reply::Status(400, b)) => Err(BackendError::Rejected { url, message: message(&b) }),
            Ok(Reply::Status(500, b)) => Err(BackendError::ServerFailure { url, message: message(&b) }),
            Ok(Reply::Status(status, b)) => Err(BackendError::Status { url, status, message: message(&b) }),
            Err(ExchangeError::Cancelled(_)) => Err(BackendError::Cancelled),
            Err(e) => {
                let reason = e.to_string();
                let mut st = self
                    .state
                    .lock()
                    .map_err(|_| BackendError::Unreachable { url: url.clone(), reason: reason.clone() })?;
                Err(self.unavailable(&mut st, false, reason))
            }
        }
    }

    /// Blocks until the server is ready or `limit` has passed (for the command line; the node
    /// never waits, it falls back or pauses).
    pub fn wait_ready(&self, limit: Duration) -> Result<(), BackendError> {
        let start = Instant::now();
        loop {
            match self.ensure_ready() {
                Err(e) if e.is_unavailable() && start.elapsed() < limit => {
                    let wait = self
                        .state
                        .lock()
                        .ok()
                        .and_then(|s| s.retry_at)
                        .map_or(MIN_BACKOFF, |at| at.saturating_duration_since(Instant::now()));
                    std::thread::sleep(wait.max(Duration::from_millis(50)).min(limit.saturating_sub(start.elapsed())));
                }
                other => return other,
            }
        }
    }

    /// The server as a backend: the URL with the model and device it reports, and whether it
    /// answers now.
    pub fn health(&self) -> BackendHealth {
        let (ready, starting, reason, reported) = match self.state.lock() {
            Ok(st) => (st.ready, st.starting, st.reason.clone(), st.reported.clone()),
            Err(_) => (false, false, "state poisoned".into(), None),
        };
        let state = if ready {
            BackendState::Ready
        } else if reason == NOT_CONTACTED {
            BackendState::NotContacted
        } else if starting {
            BackendState::Starting
        } else {
            BackendState::Unreachable
        };
        let device = reported.unwrap_or_else(|| format!("{} (not reported yet)", self.model));
        BackendHealth {
            fallback: false,
            kind: BackendKind::TtServer,
            hardware_id: format!("{} {device}", self.opts.url),
            state,
            detail: reason,
        }
    }

    /// The server and its state, for /diagnostics and logs.
    pub fn describe(&self) -> String {
        let state = self.state.lock().map(|s| s.reason.clone()).unwrap_or_default();
        format!("tt-server {} ({}: {state})", self.opts.url, self.model)
    }
}

/// `model` as /health names it (or `expected`), with its `device {arch, id}` when given:
/// `superpoint-p150 on blackhole 0`.
fn reported_device(health: &Value, expected: &str) -> String {
    let model = health.get("model").and_then(Value::as_str).unwrap_or(expected);
    let device = health.get("device");
    let field =
        |k: &str| device.and_then(|d| d.get(k)).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    match (field("arch"), field("id")) {
        (Some(arch), Some(id)) => format!("{model} on {arch} {id}"),
        (Some(arch), None) => format!("{model} on {arch}"),
        _ => model.to_string(),
    }
}

fn snippet(text: &str) -> String {
    let t: String = text.chars().take(160).collect();
    if t.len() < text.len() {
        format!("{t}…")
    } else {
        t
    }
}

/// A frame as the servers take it: PNG for grey frames (lossless, small), JPEG at the given
/// quality for colour (PNG when the quality is 0). Base64. SuperPoint sees only luminance, so
/// its frames always go as grey PNG (`grey`): the server's RGB->L conversion uses the same
/// BT.601 weights, and a grey PNG costs ~1 ms where a colour JPEG costs ~6 ms at 640x480.
pub fn encode_frame(frame: &Frame, jpeg_quality: u8, grey: bool) -> Result<String, BackendError> {
    use base64::Engine;
    use image::ImageEncoder;
    let (w, h) = (frame.width(), frame.height());
    let mut out = Vec::new();
    let enc = BackendError::Encode;
    let png = |out: &mut Vec<u8>, data: &[u8], ty: image::ExtendedColorType| {
        image::codecs::png::PngEncoder::new_with_quality(
            out,
            image::codecs::png::CompressionType::Fast,
            image::codecs::png::FilterType::Sub,
        )
        .write_image(data, w, h, ty)
    };
    match frame.format() {
        format if grey || matches!(format, PixelFormat::Mono8 | PixelFormat::Mono16) => {
            let luma: Vec<u8> =
                frame.to_luma().data.iter().map(|v| (v * 255.0).round().clamp(0.0, 255.0) as u8).collect();
            png(&mut out, &luma, image::ExtendedColorType::L8).map_err(enc)?;
        }
        _ if jpeg_quality == 0 => png(&mut out, &frame.to_rgb8(), image::ExtendedColorType::Rgb8).map_err(enc)?,
        _ => image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, jpeg_quality.min(100))
            .write_image(&frame.to_rgb8(), w, h, image::ExtendedColorType::Rgb8)
            .map_err(enc)?,
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(out))
}

/// The superpoint-p150 server's model name.
pub const SUPERPOINT_MODEL: &str = "superpoint-p150";
/// The mast3r-blackhole server's model name.
pub const DUST3R_MODEL: &str = "mast3r-blackhole";

/// Where a server request's time went on this side: encoding the frames, the HTTP exchange
/// (which contains the server's own `timing_ms.total`), checking and decoding the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostTiming {
    /// Encoding the frames, ms.
    pub encode_ms: f64,
    /// The HTTP exchange, ms (contains the server's own total).
    pub request_ms: f64,
    /// Checking and decoding the answer, ms.
    pub parse_ms: f64,
    /// The server's own `timing_ms.total`, when it reports one.
    pub server_total_ms: Option<f64>,
}

impl HostTiming {
    /// What this side adds to the server's own time: encode + transfer + decode.
    pub fn overhead_ms(&self) -> Option<f64> {
        self.server_total_ms.map(|s| self.encode_ms + self.parse_ms + (self.request_ms - s))
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn server_total(v: &Value) -> Option<f64> {
    v.get("timing_ms")?.get("total")?.as_f64()
}

/// SuperPoint on the `superpoint-p150` server.
pub struct TtSuperPoint {
    link: Link,
    jpeg_quality: u8,
}

impl TtSuperPoint {
    /// SuperPoint on the server `opts` names.
    pub fn new(opts: ServerOptions) -> Self {
        let jpeg_quality = opts.jpeg_quality;
        Self { link: Link::new(opts, SUPERPOINT_MODEL), jpeg_quality }
    }

    /// The server link (readiness, state).
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// [`FeatureExtractor::detect`] with the host-side timing.
    pub fn detect_timed(&self, frame: &Frame, params: &PostParams) -> Result<(Keypoints, HostTiming), BackendError> {
        let t = Instant::now();
        let image = encode_frame(frame, self.jpeg_quality, true)?;
        let encode_ms = ms_since(t);
        let body = json!({
            "image": image,
            "max_keypoints": params.max_keypoints.map_or(-1, |k| k as i64),
            "keypoint_threshold": params.threshold,
            // The server runs radius 0..32 (4 on the device); larger radii are capped.
            "nms_radius": params.nms_radius.min(32),
            "return_descriptors": true,
        });
        let t = Instant::now();
        let answer = self.link.predict(&body)?;
        let request_ms = ms_since(t);
        let t = Instant::now();
        let kp = parse_superpoint(self.link.url(), &answer, frame.width(), frame.height())?;
        Ok((kp, HostTiming { encode_ms, request_ms, parse_ms: ms_since(t), server_total_ms: server_total(&answer) }))
    }
}

fn malformed(url: &str, reason: impl Into<String>) -> BackendError {
    BackendError::Malformed { url: url.to_string(), reason: reason.into() }
}

fn floats(v: Option<&Value>) -> Option<Vec<f64>> {
    v?.as_array()?.iter().map(Value::as_f64).collect()
}

fn npz_field(url: &str, v: &Value, key: &str) -> Result<Array, BackendError> {
    let bad = |e: super::npz::NpzError| malformed(url, format!("{key}: {e}"));
    let data =
        v.get("data").and_then(Value::as_str).ok_or_else(|| malformed(url, format!("{key}: no base64 `data`")))?;
    let name = v.get("key").and_then(Value::as_str).unwrap_or(key);
    read_array(&decode_base64(data).map_err(bad)?, name).map_err(bad)
}

/// The `superpoint-p150` answer as our keypoints, checked: counts agree, values finite,
/// positions inside the image, scores descending, descriptors N x D. Positions move from the
/// server's convention (network pixel x W/640) to ours (pixel centres: `(x+0.5) W/640 - 0.5`)
/// so both backends place a keypoint at the same pixel.
pub fn parse_superpoint(url: &str, v: &Value, width: u32, height: u32) -> Result<Keypoints, BackendError> {
    let n = v.get("num_keypoints").and_then(Value::as_u64).ok_or_else(|| malformed(url, "no num_keypoints"))? as usize;
    let kp = v.get("keypoints").and_then(Value::as_array).ok_or_else(|| malformed(url, "no keypoints"))?;
    let scores = floats(v.get("scores")).ok_or_else(|| malformed(url, "no scores"))?;
    if kp.len() != n || scores.len() != n {
        return Err(malformed(
            url,
            format!("num_keypoints {n}, but {} keypoints and {} scores", kp.len(), scores.len()),
        ));
    }
    let size = v.get("original_size");
    let (oh, ow) = (
        size.and_then(|s| s.get("height")).and_then(Value::as_u64),
        size.and_then(|s| s.get("width")).and_then(Value::as_u64),
    );
    if (oh, ow) != (Some(height as u64), Some(width as u64)) {
        return Err(malformed(url, format!("original_size {ow:?}x{oh:?} is not the frame's {width}x{height}")));
    }
    let scale = v.get("scale");
    let sx = scale
        .and_then(|s| s.get("x"))
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| malformed(url, "no positive scale.x"))?;
    let sy = scale
        .and_then(|s| s.get("y"))
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| malformed(url, "no positive scale.y"))?;
    let mut xy = Vec::with_capacity(n);
    for p in kp {
        let p = floats(Some(p)).filter(|p| p.len() == 2).ok_or_else(|| malformed(url, "a keypoint is not [x, y]"))?;
        let (x, y) = (p[0] + 0.5 * sx - 0.5, p[1] + 0.5 * sy - 0.5);
        if !(x > -1.0 && x < width as f64 && y > -1.0 && y < height as f64) {
            return Err(malformed(url, format!("keypoint ({}, {}) outside the {width}x{height} image", p[0], p[1])));
        }
        xy.push([x as f32, y as f32]);
    }
    if scores.iter().any(|s| !s.is_finite()) || scores.windows(2).any(|w| w[0] < w[1]) {
        return Err(malformed(url, "scores are not finite and descending"));
    }
    let desc = npz_field(url, v.get("descriptors").ok_or_else(|| malformed(url, "no descriptors"))?, "descriptors")?;
    if desc.shape.len() != 2 || desc.shape[0] != n || desc.shape[1] == 0 {
        return Err(malformed(url, format!("descriptors of shape {:?} for {n} keypoints", desc.shape)));
    }
    let dim = desc.shape[1];
    let mut descriptors = desc.data;
    // float16 on the wire: renormalise the rows (and refuse zero or non-finite ones).
    for row in descriptors.chunks_exact_mut(dim) {
        let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Err(malformed(url, "a descriptor row is zero or not finite"));
        }
        row.iter_mut().for_each(|v| *v /= norm);
    }
    Ok(Keypoints { xy, scores: scores.iter().map(|&s| s as f32).collect(), descriptors, descriptor_dim: dim })
}

impl FeatureExtractor for TtSuperPoint {
    fn detect(&self, frame: &Frame, params: &PostParams) -> Result<Keypoints, BackendError> {
        self.detect_timed(frame, params).map(|(kp, _)| kp)
    }
    fn describe(&self) -> String {
        self.link.describe()
    }
    fn health(&self) -> Vec<BackendHealth> {
        vec![self.link.health()]
    }
}

/// DUSt3R on the `mast3r-blackhole` server (pointmaps and, with `return_pose`, its pose).
pub struct TtDust3r {
    link: Link,
    jpeg_quality: u8,
    /// Ask for the pose (the server then also runs the swapped pair: twice the device time).
    pub return_pose: bool,
}

impl TtDust3r {
    /// DUSt3R on the server `opts` names.
    pub fn new(opts: ServerOptions) -> Self {
        let jpeg_quality = opts.jpeg_quality;
        Self { link: Link::new(opts, DUST3R_MODEL), jpeg_quality, return_pose: true }
    }

    /// The server link (readiness, state).
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// [`PairReconstructor::reconstruct`] with the host-side timing.
    pub fn reconstruct_timed(&self, r: &PairRequest<'_>) -> Result<(PairOutput, HostTiming), BackendError> {
        let t = Instant::now();
        let mut body = json!({
            "image1": encode_frame(r.first, self.jpeg_quality, false)?,
            "image2": encode_frame(r.second, self.jpeg_quality, false)?,
            "output_format": "npz",
            "return_pose": self.return_pose,
            "conf_pct": r.conf_pct,
        });
        if let Some(k) = r.known {
            body["intrinsics"] = json!([[k.fx, 0.0, k.cx], [0.0, k.fy, k.cy], [0.0, 0.0, 1.0]]);
        }
        let encode_ms = ms_since(t);
        let t = Instant::now();
        let answer = self.link.predict(&body)?;
        let request_ms = ms_since(t);
        let t = Instant::now();
        let out = parse_dust3r(self.link.url(), &answer, r.first, r.second)?;
        Ok((out, HostTiming { encode_ms, request_ms, parse_ms: ms_since(t), server_total_ms: server_total(&answer) }))
    }
}

/// A view's `preprocess` block: network pixel (u, v) = ((x + offx) * scale, (y + offy) * scale).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServerMapping {
    /// Original image width.
    pub orig_w: u32,
    /// Original image height.
    pub orig_h: u32,
    /// Horizontal offset added before scaling, original pixels.
    pub offx: f64,
    /// Vertical offset added before scaling, original pixels.
    pub offy: f64,
    /// Original-to-network scale.
    pub scale: f64,
}

impl ServerMapping {
    /// The same mapping in our terms (the contract's `u = (x + offx) * scale`, which is how
    /// [`crate::dust3r::prepare`] maps too).
    pub fn input_mapping(&self) -> InputMapping {
        InputMapping {
            original_width: self.orig_w,
            original_height: self.orig_h,
            scale_x: self.scale,
            scale_y: self.scale,
            offset_x: self.offx * self.scale,
            offset_y: self.offy * self.scale,
        }
    }
}

fn parse_mapping(url: &str, v: Option<&Value>, frame: &Frame, which: &str) -> Result<ServerMapping, BackendError> {
    let v = v.ok_or_else(|| malformed(url, format!("no preprocess block for {which}")))?;
    let num = |k: &str| {
        v.get(k)
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite())
            .ok_or_else(|| malformed(url, format!("preprocess.{which}.{k} missing")))
    };
    let m = ServerMapping {
        orig_w: num("orig_w")? as u32,
        orig_h: num("orig_h")? as u32,
        offx: num("offx")?,
        offy: num("offy")?,
        scale: num("scale")?,
    };
    if (m.orig_w, m.orig_h) != (frame.width(), frame.height()) || m.scale <= 0.0 {
        return Err(malformed(
            url,
            format!(
                "preprocess.{which}: {}x{} at scale {} for a {}x{} frame",
                m.orig_w,
                m.orig_h,
                m.scale,
                frame.width(),
                frame.height()
            ),
        ));
    }
    Ok(m)
}

/// The frame's colours on the network grid (nearest pixel; grey outside, like the padding).
fn colours(frame: &Frame, m: &ServerMapping, height: usize, width: usize) -> Vec<u8> {
    let rgb = frame.to_rgb8();
    let (w, h) = (frame.width() as i64, frame.height() as i64);
    let mut out = Vec::with_capacity(width * height * 3);
    for v in 0..height {
        for u in 0..width {
            let x = ((u as f64 + 0.5) / m.scale - m.offx - 0.5).round() as i64;
            let y = ((v as f64 + 0.5) / m.scale - m.offy - 0.5).round() as i64;
            if (0..w).contains(&x) && (0..h).contains(&y) {
                let i = ((y * w + x) * 3) as usize;
                out.extend_from_slice(&rgb[i..i + 3]);
            } else {
                out.extend_from_slice(&[128, 128, 128]);
            }
        }
    }
    out
}

/// The `mast3r-blackhole` answer as our pair output, checked: pointmaps (H, W, 3) and
/// confidences (H, W) of one grid, confidences >= 1, preprocess blocks for these frames, a
/// proper rotation in the pose. The server's pose is `X_cam2 = R X_cam1 + t` (T_cam2_cam1);
/// ours is its inverse, camera 2 in camera 1's frame.
pub fn parse_dust3r(url: &str, v: &Value, first: &Frame, second: &Frame) -> Result<PairOutput, BackendError> {
    let npz = decode_base64(v.get("npz_b64").and_then(Value::as_str).ok_or_else(|| malformed(url, "no npz_b64"))?)
        .map_err(|e| malformed(url, e.to_string()))?;
    let get = |k: &str| read_array(&npz, k).map_err(|e| malformed(url, e.to_string()));
    let (p1, p2, c1, c2) = (get("pts3d1")?, get("pts3d2")?, get("conf1")?, get("conf2")?);
    let [h, w] = match p1.shape[..] {
        [h, w, 3] if h > 0 && w > 0 => [h, w],
        _ => return Err(malformed(url, format!("pts3d1 has shape {:?}, (H, W, 3) expected", p1.shape))),
    };
    for (name, a, shape) in [("pts3d2", &p2, vec![h, w, 3]), ("conf1", &c1, vec![h, w]), ("conf2", &c2, vec![h, w])] {
        if a.shape != shape {
            return Err(malformed(url, format!("{name} has shape {:?}, {shape:?} expected", a.shape)));
        }
    }
    if !c1.data.iter().chain(&c2.data).all(|c| *c >= 1.0) {
        return Err(malformed(url, "confidences below 1 or not finite"));
    }
    let pre = v.get("preprocess");
    let view = |i: usize, key: &str| pre.and_then(|p| p.get(i).or_else(|| p.get(key)));
    let m1 = parse_mapping(url, view(0, "view1"), first, "view1")?;
    let m2 = parse_mapping(url, view(1, "view2"), second, "view2")?;
    let pose = match v.get("pose") {
        None | Some(Value::Null) => Err(NoPose::NotReturned),
        Some(p) => Ok(parse_pose(url, p)?),
    };
    Ok(PairOutput::from_forward(
        Pointmap { height: h, width: w, points: p1.data, confidence: c1.data },
        Pointmap { height: h, width: w, points: p2.data, confidence: c2.data },
        [m1.input_mapping(), m2.input_mapping()],
        [colours(first, &m1, h, w), colours(second, &m2, h, w)],
        pose,
    ))
}

fn parse_pose(url: &str, p: &Value) -> Result<PairPose, BackendError> {
    let rows: Vec<Vec<f64>> = p
        .get("R")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(|row| floats(Some(row))).collect())
        .unwrap_or_default();
    let t = floats(p.get("t")).filter(|t| t.len() == 3).ok_or_else(|| malformed(url, "pose.t is not 3 numbers"))?;
    if rows.len() != 3 || rows.iter().any(|r| r.len() != 3) {
        return Err(malformed(url, "pose.R is not 3x3"));
    }
    let r = Matrix3::from_fn(|i, j| rows[i][j]);
    let orthonormal =
        (r.transpose() * r - Matrix3::identity()).abs().max() < 1e-3 && (r.determinant() - 1.0).abs() < 1e-3;
    if !orthonormal || !t.iter().all(|v| v.is_finite()) {
        return Err(malformed(url, "pose.R is not a rotation or pose.t is not finite"));
    }
    let focal = |k: &str| {
        p.get(k)
            .and_then(Value::as_f64)
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| malformed(url, format!("pose.{k} is not a positive number")))
    };
    let t21 = TCam2Cam1::from_matrix(&r, Vector3::new(t[0], t[1], t[2]));
    Ok(PairPose {
        t_cam1_cam2: t21.inverse(),
        focal1: focal("focal_1")?,
        focal2: focal("focal_2")?,
        // The server does not report its inlier count.
        num_inliers: 0,
        used_known_intrinsics: p.get("used_known_intrinsics").and_then(Value::as_bool).unwrap_or(false),
        mode: PoseMode::Server,
        // The server locates camera 2 against view 2's points in camera 1's frame.
        world: PnpWorld::Camera1,
    })
}

impl PairReconstructor for TtDust3r {
    fn reconstruct(&self, r: &PairRequest<'_>) -> Result<PairOutput, BackendError> {
        self.reconstruct_timed(r).map(|(out, _)| out)
    }
    fn describe(&self) -> String {
        self.link.describe()
    }
    fn health(&self) -> Vec<BackendHealth> {
        vec![self.link.health()]
    }
}
