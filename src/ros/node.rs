//! The live driver: a ROS 2 node on ros2-client (pure-Rust DDS).
//!
//! Threads: the main loop takes frames off DDS and leaves the newest in a slot; the SuperPoint
//! worker publishes keypoints for every frame it can keep up with and picks keyframes; the
//! DUSt3R worker reconstructs each new keyframe pair (newest pair wins) and publishes the cloud,
//! the pose and TF. Every output carries its input's stamp.
//!
//! Run it as launch files do:
//!
//! ```sh
//! sp_dust3r node --ros-args -r __ns:=/camera -p superpoint_weights:=/path/to/superpoint
//! ```

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ros2_client::dds::rustdds::DomainParticipantBuilder;
use ros2_client::{
    qos, Context, MessageTypeName, Name, Node, NodeName, NodeOptions, Publisher, QosProfile, Subscription,
};

use super::args::RosArgs;
use super::backends::{build_backends, Backends};
use super::convert::{debug_image_msg, keypoints_msg};
use super::msg::{
    builtin_interfaces, diagnostic_msgs, geometry_msgs, rcl_interfaces, rosgraph_msgs, sensor_msgs, sp_dust3r_msgs,
    std_msgs, tf2_msgs, RosMessage,
};
use super::pair::{check_camera_info, reconstruct};
use super::param_services::ParamServices;
use super::params::{ParamError, ParamStore};
use super::rosout;
use crate::image::Frame;
use crate::pipeline::keyframes::{KeyframeDecision, KeyframeSelector};
use crate::pipeline::slot::LatestSlot;

#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    Params(#[from] ParamError),
    #[error("DDS: {0}")]
    Dds(String),
    #[error("invalid name {0:?}")]
    Name(String),
    #[error(transparent)]
    Model(#[from] crate::superpoint::SuperPointError),
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightsError),
}

fn dds<E: std::fmt::Debug>(e: E) -> NodeError {
    NodeError::Dds(format!("{e:?}"))
}

/// `ROS_LOCALHOST_ONLY=1` or `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`: stay on 127.0.0.1.
fn localhost_only() -> bool {
    std::env::var("ROS_LOCALHOST_ONLY").is_ok_and(|v| v == "1")
        || std::env::var("ROS_AUTOMATIC_DISCOVERY_RANGE").is_ok_and(|v| v.eq_ignore_ascii_case("LOCALHOST"))
}

/// The name a topic gets: absolute names stay, relative ones go under the node's namespace,
/// after `-r from:=to` remapping (matched on the relative or the resolved name).
pub fn resolve_topic(ros: &RosArgs, namespace: &str, name: &str) -> String {
    let ns = namespace.trim_end_matches('/');
    let full = |n: &str| if n.starts_with('/') { n.to_string() } else { format!("{ns}/{n}") };
    let resolved = full(name);
    let target =
        ros.remaps.iter().rev().find(|(from, _)| *from == name || full(from) == resolved).map(|(_, to)| full(to));
    target.unwrap_or(resolved)
}

fn ros_name(resolved: &str) -> Result<Name, NodeError> {
    let trimmed = resolved.trim_start_matches('/');
    let (ns, base) = match trimmed.rsplit_once('/') {
        Some((ns, base)) => (format!("/{ns}"), base),
        None => ("/".to_string(), trimmed),
    };
    Name::new(&ns, base).map_err(|_| NodeError::Name(resolved.to_string()))
}

fn type_name<T: RosMessage>() -> MessageTypeName {
    let mut parts = T::ROS_TYPE.split('/');
    let pkg = parts.next().unwrap_or_default();
    MessageTypeName::new(pkg, parts.nth(1).unwrap_or_default())
}

pub const IMAGE: &str = "image";
pub const IMAGE_COMPRESSED: &str = "image/compressed";
pub const CAMERA_INFO: &str = "camera_info";
pub const CLOCK: &str = "/clock";
pub const KEYPOINTS: &str = "keypoints";
pub const KEYPOINTS_IMAGE: &str = "keypoints/image";
pub const POINTCLOUD: &str = "pointcloud";
pub const PAIR_POSE: &str = "pair_pose";
pub const POSE: &str = "pose";
pub const TF: &str = "/tf";
pub const DIAGNOSTICS: &str = "/diagnostics";
pub const ROSOUT: &str = "/rosout";

/// Every topic the node uses, relative ones under its namespace: (name, ROS type, published).
pub const TOPICS: &[(&str, &str, bool)] = &[
    (IMAGE, sensor_msgs::Image::ROS_TYPE, false),
    (IMAGE_COMPRESSED, sensor_msgs::CompressedImage::ROS_TYPE, false),
    (CAMERA_INFO, sensor_msgs::CameraInfo::ROS_TYPE, false),
    (CLOCK, rosgraph_msgs::Clock::ROS_TYPE, false),
    (KEYPOINTS, sp_dust3r_msgs::Keypoints::ROS_TYPE, true),
    (KEYPOINTS_IMAGE, sensor_msgs::Image::ROS_TYPE, true),
    (POINTCLOUD, sensor_msgs::PointCloud2::ROS_TYPE, true),
    (PAIR_POSE, sp_dust3r_msgs::PairPose::ROS_TYPE, true),
    (POSE, geometry_msgs::PoseStamped::ROS_TYPE, true),
    (TF, tf2_msgs::TFMessage::ROS_TYPE, true),
    (DIAGNOSTICS, diagnostic_msgs::DiagnosticArray::ROS_TYPE, true),
    (ROSOUT, rcl_interfaces::Log::ROS_TYPE, true),
];

/// The camera inputs' QoS, SensorDataQoS: best effort, keep last 5.
pub fn sensor_qos() -> QosProfile {
    QosProfile::subscription_default().reliability_best_effort().history(qos::History::KeepLast { depth: 5 })
}

/// rcl's /rosout profile: reliable, transient local (late joiners get recent records), keep last
/// 1000.
fn rosout_qos() -> QosProfile {
    reliable_qos().durability(qos::Durability::TransientLocal).history(qos::History::KeepLast { depth: 1000 })
}

/// The outputs' QoS, what RViz subscribes with: reliable, keep last 10.
pub fn reliable_qos() -> QosProfile {
    QosProfile::publisher_default()
        .reliability_reliable(qos::WhenFull::DEFAULT)
        .history(qos::History::KeepLast { depth: 10 })
}

fn subscribe<T: RosMessage + ros2_client::Message + 'static>(
    node: &mut Node,
    topic: &str,
    q: QosProfile,
) -> Result<Subscription<T>, NodeError> {
    let t = node.create_topic(&ros_name(topic)?, type_name::<T>(), &q).map_err(dds)?;
    node.create_subscription(&t, Some(q)).map_err(dds)
}

fn advertise<T: RosMessage + ros2_client::Message>(
    node: &mut Node,
    topic: &str,
    q: QosProfile,
) -> Result<Publisher<T>, NodeError> {
    let t = node.create_topic(&ros_name(topic)?, type_name::<T>(), &q).map_err(dds)?;
    node.create_publisher(&t, Some(q)).map_err(dds)
}

/// Counters /diagnostics reports.
#[derive(Default)]
struct Stats {
    frames_in: AtomicU64,
    frames_done: AtomicU64,
    frame_drops: AtomicU64,
    pair_drops: AtomicU64,
    pairs_done: AtomicU64,
    bad_frames: AtomicU64,
    bad_camera_info: AtomicU64,
    /// Pairs whose frames differ in size from the CameraInfo (focal estimated instead).
    camera_info_mismatch: AtomicU64,
    debug_images: AtomicU64,
    superpoint_errors: AtomicU64,
    dust3r_errors: AtomicU64,
    no_pose: AtomicU64,
    publish_errors: AtomicU64,
    superpoint_ms: AtomicU64,
    dust3r_ms: AtomicU64,
    /// Frames or pairs skipped while a server could not answer and no fallback ran.
    superpoint_paused: AtomicU64,
    /// Frames received per second over the last /diagnostics period, in millihertz.
    input_rate_mhz: AtomicU64,
    dust3r_paused: AtomicU64,
    /// Errors by model and kind (`errors_superpoint_server_malformed`, ...).
    by_kind: Mutex<std::collections::BTreeMap<String, u64>>,
}

impl Stats {
    fn count_kind(&self, model: &str, kind: &str) {
        if let Ok(mut m) = self.by_kind.lock() {
            *m.entry(format!("errors_{model}_{kind}")).or_default() += 1;
        }
    }

    /// Inputs or computations that failed (not publish errors or pairs without a pose).
    fn errors(&self) -> u64 {
        [&self.bad_frames, &self.bad_camera_info, &self.superpoint_errors, &self.dust3r_errors]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A frame as it arrived.
#[derive(Clone)]
struct Input {
    header: std_msgs::Header,
    frame: Arc<Frame>,
}

struct PairJob {
    first: Input,
    second: Input,
    camera_info: Option<sensor_msgs::CameraInfo>,
}

/// Runs until `stop` is set (SIGINT/SIGTERM).
pub fn run(ros: &RosArgs, stop: Arc<AtomicBool>) -> Result<(), NodeError> {
    // Records from here on reach /rosout once it exists (transient local: late joiners too).
    let log_records = rosout::collect(1000);
    let name = ros.node_name.clone().unwrap_or_else(|| "sp_dust3r".into());
    let namespace = ros.namespace.clone().unwrap_or_else(|| "/".into());
    let fqn = format!("{}/{name}", namespace.trim_end_matches('/'));
    let (store, warnings) = ParamStore::resolve(ros, &fqn)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let params = store.params().clone();
    let store = Arc::new(Mutex::new(store));
    // The tunable parameters as the workers see them: the store's, after any `ros2 param set`.
    let current = || store.lock().map(|s| s.params().clone()).unwrap_or_else(|_| params.clone());
    let Backends { features, dust3r } = build_backends(&params)?;
    let dust3r = dust3r.map_err(|e| tracing::warn!("DUSt3R disabled: {e}")).ok();
    tracing::info!(
        "SuperPoint on {}; DUSt3R on {}",
        features.describe(),
        dust3r.as_ref().map_or("nothing (disabled)".into(), |d| d.describe())
    );

    let domain = std::env::var("ROS_DOMAIN_ID").ok().and_then(|v| v.parse().ok()).unwrap_or(0u16);
    let mut builder = DomainParticipantBuilder::new(domain);
    if localhost_only() {
        builder = builder.with_only_networks([Ipv4Addr::LOCALHOST]);
    }
    let context = Context::from_domain_participant(builder.build().map_err(dds)?).map_err(dds)?;
    let node_name = NodeName::new(&namespace, &name).map_err(|_| NodeError::Name(fqn.clone()))?;
    // Our own /rosout writer and parameter services (see rosout.rs, param_services.rs).
    let options = NodeOptions::new().enable_rosout(false).start_parameter_services(false);
    let mut node = context.new_node(node_name, options).map_err(dds)?;
    let topic = |n: &str| resolve_topic(ros, &namespace, n);

    let raw: Option<Subscription<sensor_msgs::Image>> =
        (!params.compressed_input).then(|| subscribe(&mut node, &topic(IMAGE), sensor_qos())).transpose()?;
    let compressed: Option<Subscription<sensor_msgs::CompressedImage>> =
        params.compressed_input.then(|| subscribe(&mut node, &topic(IMAGE_COMPRESSED), sensor_qos())).transpose()?;
    let info_sub: Subscription<sensor_msgs::CameraInfo> = subscribe(&mut node, &topic(CAMERA_INFO), sensor_qos())?;
    let clock_sub: Option<Subscription<rosgraph_msgs::Clock>> =
        params.use_sim_time.then(|| subscribe(&mut node, CLOCK, QosProfile::subscription_default())).transpose()?;
    let pub_kp: Publisher<sp_dust3r_msgs::Keypoints> = advertise(&mut node, &topic(KEYPOINTS), reliable_qos())?;
    let pub_debug: Publisher<sensor_msgs::Image> = advertise(&mut node, &topic(KEYPOINTS_IMAGE), reliable_qos())?;
    let pub_cloud: Publisher<sensor_msgs::PointCloud2> = advertise(&mut node, &topic(POINTCLOUD), reliable_qos())?;
    let pub_pair: Publisher<sp_dust3r_msgs::PairPose> = advertise(&mut node, &topic(PAIR_POSE), reliable_qos())?;
    let pub_pose: Publisher<geometry_msgs::PoseStamped> = advertise(&mut node, &topic(POSE), reliable_qos())?;
    let pub_tf: Publisher<tf2_msgs::TFMessage> = advertise(&mut node, TF, reliable_qos())?;
    let pub_diag: Publisher<diagnostic_msgs::DiagnosticArray> = advertise(&mut node, DIAGNOSTICS, reliable_qos())?;
    let pub_rosout: Publisher<rcl_interfaces::Log> = advertise(&mut node, ROSOUT, rosout_qos())?;
    let services =
        ParamServices::new(&mut node, &fqn, Arc::clone(&store)).map_err(|e| NodeError::Dds(e.to_string()))?;
    // The spinner keeps ros2-client's view of the ROS graph current.
    let spinner = node.spinner().map_err(dds)?;
    let spin_thread = std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    let logger = rosout::logger_name(&fqn);
    tracing::info!(
        "node {fqn} up (input {}, DUSt3R {})",
        if params.compressed_input { topic(IMAGE_COMPRESSED) } else { topic(IMAGE) },
        if dust3r.is_some() { "on" } else { "off" }
    );

    let stats = Stats::default();
    let frames: LatestSlot<Input> = LatestSlot::new();
    let pairs: LatestSlot<PairJob> = LatestSlot::new();
    let camera_info: Mutex<Option<sensor_msgs::CameraInfo>> = Mutex::new(None);
    let sim_time: Mutex<Option<builtin_interfaces::Time>> = Mutex::new(None);
    let debug_wanted = AtomicBool::new(false);

    std::thread::scope(|s| {
        // SuperPoint worker: keypoints for every frame it takes; keyframes; pair jobs.
        s.spawn(|| {
            let mut keyframes: KeyframeSelector<Input> = KeyframeSelector::new(params.keyframe_policy());
            while let Some(input) = frames.next() {
                let p = current();
                keyframes.set_policy(p.keyframe_policy());
                let t = Instant::now();
                match features.detect(&input.frame, &p.post_params()) {
                    Ok(kp) => {
                        stats.superpoint_ms.store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                        bump(&stats.frames_done);
                        if pub_kp
                            .publish(keypoints_msg(
                                input.header.clone(),
                                input.frame.width(),
                                input.frame.height(),
                                &kp,
                            ))
                            .is_err()
                        {
                            bump(&stats.publish_errors);
                        }
                        if debug_wanted.load(Ordering::Relaxed) {
                            match pub_debug.publish(debug_image_msg(input.header.clone(), &input.frame, &kp)) {
                                Ok(()) => bump(&stats.debug_images),
                                Err(_) => bump(&stats.publish_errors),
                            }
                        }
                        if dust3r.is_some() {
                            if let KeyframeDecision::New { previous, .. } =
                                keyframes.decide(input.header.stamp.seconds(), &kp, &input)
                            {
                                let info = camera_info.lock().ok().and_then(|c| c.clone());
                                if pairs.put(PairJob { first: previous, second: input, camera_info: info }) {
                                    bump(&stats.pair_drops);
                                }
                            }
                        }
                    }
                    // The server is down or starting and there is no CPU fallback: paused, and
                    // /diagnostics says why (the link logs its state changes).
                    Err(e) if e.is_unavailable() => bump(&stats.superpoint_paused),
                    Err(e) => {
                        bump(&stats.superpoint_errors);
                        stats.count_kind("superpoint", e.kind());
                        tracing::warn!("SuperPoint: {e}");
                    }
                }
            }
            pairs.close();
        });
        // DUSt3R worker.
        if let Some(model) = &dust3r {
            s.spawn(|| {
                while let Some(job) = pairs.next() {
                    let p = current();
                    let t = Instant::now();
                    match reconstruct(model.as_ref(), (&job.first.header, &job.first.frame), (&job.second.header, &job.second.frame), job.camera_info.as_ref(), &p) {
                        Ok(out) => {
                            if out.camera_info_mismatch {
                                bump(&stats.camera_info_mismatch);
                                tracing::warn!("camera_info is for another image size than the frames; estimating the focal instead");
                            }
                            stats.dust3r_ms.store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                            bump(&stats.pairs_done);
                            let mut ok = pub_cloud.publish(out.cloud).is_ok();
                            match out.pose {
                                Ok((pair, pose, tf)) => {
                                    ok &= pub_pair.publish(pair).is_ok() && pub_pose.publish(pose).is_ok();
                                    if p.publish_tf {
                                        ok &= pub_tf.publish(tf2_msgs::TFMessage { transforms: vec![tf] }).is_ok();
                                    }
                                }
                                Err(reason) => {
                                    bump(&stats.no_pose);
                                    tracing::warn!("no pose for the pair: {reason}");
                                }
                            }
                            if !ok {
                                bump(&stats.publish_errors);
                            }
                        }
                        Err(e) if e.is_unavailable() => bump(&stats.dust3r_paused),
                        Err(e) => {
                            bump(&stats.dust3r_errors);
                            stats.count_kind("dust3r", e.kind());
                            tracing::warn!("DUSt3R: {e}");
                        }
                    }
                }
            });
        }

        // The DDS loop: newest frame wins; camera info and clock kept; parameter requests
        // answered; log records to /rosout; diagnostics at 1 Hz.
        let mut last_diag = Instant::now();
        let mut last_graph_check = Instant::now();
        let mut frames_at_last_diag = 0u64;
        let debug_topic = topic(KEYPOINTS_IMAGE);
        let now = || {
            if params.use_sim_time {
                sim_time.lock().ok().and_then(|t| t.clone()).unwrap_or_default()
            } else {
                wall_time()
            }
        };
        while !stop.load(Ordering::Relaxed) {
            let mut got = false;
            // Every frame is counted; a bad one is reported and skipped, never fatal.
            let mut accept = |header: std_msgs::Header, frame: Result<Frame, crate::image::ImageError>| {
                got = true;
                bump(&stats.frames_in);
                match frame {
                    Ok(frame) => offer(&frames, &stats, Input { header, frame: Arc::new(frame) }),
                    Err(e) => {
                        bump(&stats.bad_frames);
                        tracing::warn!(
                            "dropping a frame stamped {}.{:09}: {e}",
                            header.stamp.sec,
                            header.stamp.nanosec
                        );
                    }
                }
            };
            if let Some(sub) = &raw {
                while let Ok(Some((msg, _))) = sub.take() {
                    let frame = Frame::from_raw(
                        &msg.encoding,
                        msg.width,
                        msg.height,
                        msg.step as usize,
                        msg.is_bigendian != 0,
                        msg.data,
                    );
                    accept(msg.header, frame);
                }
            }
            if let Some(sub) = &compressed {
                while let Ok(Some((msg, _))) = sub.take() {
                    let frame = Frame::decode(&msg.data);
                    accept(msg.header, frame);
                }
            }
            while let Ok(Some((info, _))) = info_sub.take() {
                match check_camera_info(&info) {
                    Ok(()) => {
                        if let Ok(mut c) = camera_info.lock() {
                            *c = Some(info);
                        }
                    }
                    Err(e) => {
                        bump(&stats.bad_camera_info);
                        tracing::warn!(
                            "ignoring camera_info stamped {}.{:09}: {e}",
                            info.header.stamp.sec,
                            info.header.stamp.nanosec
                        );
                    }
                }
            }
            if let Some(sub) = &clock_sub {
                while let Ok(Some((clock, _))) = sub.take() {
                    if let Ok(mut t) = sim_time.lock() {
                        *t = Some(clock.clock);
                    }
                }
            }
            if last_graph_check.elapsed() >= Duration::from_millis(100) {
                // Discovered readers of the debug image (Publisher::get_subscription_count
                // needs a match event first and logs an error per call until then).
                last_graph_check = Instant::now();
                debug_wanted.store(node.subscription_count(&debug_topic) > 0, Ordering::Relaxed);
            }
            let stamp = now();
            if services.poll(ros2_client::builtin_interfaces::Time::new(stamp.sec, stamp.nanosec)) > 0 {
                got = true;
            }
            if let Some(rx) = &log_records {
                for record in rx.try_iter() {
                    // Records carry wall time, as rcl's do.
                    let _ = pub_rosout.publish(record.to_log(&logger, wall_time()));
                }
            }
            if last_diag.elapsed() >= Duration::from_secs(1) {
                let frames_in = stats.frames_in.load(Ordering::Relaxed);
                let rate = (frames_in - frames_at_last_diag) as f64 / last_diag.elapsed().as_secs_f64();
                stats.input_rate_mhz.store((rate * 1000.0) as u64, Ordering::Relaxed);
                frames_at_last_diag = frames_in;
                last_diag = Instant::now();
                let info = describe_camera_info(&camera_info.lock().map(|c| c.clone()).unwrap_or_default());
                let backends = [features.describe(), dust3r.as_ref().map_or("disabled".into(), |d| d.describe())];
                if pub_diag.publish(diagnostics(&fqn, stamp, &stats, backends, dust3r.is_some(), info)).is_err() {
                    bump(&stats.publish_errors);
                }
            }
            if !got {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        frames.close();
    });
    tracing::info!(
        "shutting down: {} frames in, {} processed, {} dropped, {} bad, {} pairs, {} errors",
        stats.frames_in.load(Ordering::Relaxed),
        stats.frames_done.load(Ordering::Relaxed),
        stats.frame_drops.load(Ordering::Relaxed),
        stats.bad_frames.load(Ordering::Relaxed),
        stats.pairs_done.load(Ordering::Relaxed),
        stats.errors()
    );
    if let Some(rx) = &log_records {
        for record in rx.try_iter() {
            let _ = pub_rosout.publish(record.to_log(&logger, wall_time()));
        }
    }
    // Dropping the node stops the spinner.
    drop(node);
    if spin_thread.join().is_err() {
        tracing::warn!("the DDS spinner thread panicked");
    }
    Ok(())
}

fn offer(frames: &LatestSlot<Input>, stats: &Stats, input: Input) {
    if frames.put(input) {
        bump(&stats.frame_drops);
    }
}

fn wall_time() -> builtin_interfaces::Time {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    builtin_interfaces::Time { sec: d.as_secs() as i32, nanosec: d.subsec_nanos() }
}

fn describe_camera_info(c: &Option<sensor_msgs::CameraInfo>) -> String {
    match c {
        Some(i) => {
            format!("{}x{} fx {:.1} fy {:.1} cx {:.1} cy {:.1}", i.width, i.height, i.k[0], i.k[4], i.k[2], i.k[5])
        }
        None => "none".into(),
    }
}

fn diagnostics(
    fqn: &str,
    stamp: builtin_interfaces::Time,
    s: &Stats,
    backends: [String; 2],
    dust3r_on: bool,
    camera_info: String,
) -> diagnostic_msgs::DiagnosticArray {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed).to_string();
    let kv = |k: &str, v: String| diagnostic_msgs::KeyValue { key: k.into(), value: v };
    let errors = s.errors();
    let paused = s.superpoint_paused.load(Ordering::Relaxed) + s.dust3r_paused.load(Ordering::Relaxed);
    let level = if errors > 0 || paused > 0 || !dust3r_on {
        diagnostic_msgs::DiagnosticStatus::WARN
    } else {
        diagnostic_msgs::DiagnosticStatus::OK
    };
    diagnostic_msgs::DiagnosticArray {
        header: std_msgs::Header { stamp, frame_id: String::new() },
        status: vec![diagnostic_msgs::DiagnosticStatus {
            level,
            name: format!("{}: pipeline", fqn.trim_start_matches('/')),
            message: if dust3r_on { "running".into() } else { "running; DUSt3R disabled (no weights)".into() },
            hardware_id: "cpu".into(),
            values: vec![
                kv("frames_in", get(&s.frames_in)),
                kv("input_rate_hz", format!("{:.2}", s.input_rate_mhz.load(Ordering::Relaxed) as f64 / 1000.0)),
                kv("frames_processed", get(&s.frames_done)),
                kv("frames_dropped", get(&s.frame_drops)),
                kv("pairs_processed", get(&s.pairs_done)),
                kv("pairs_dropped", get(&s.pair_drops)),
                kv("errors_bad_frame", get(&s.bad_frames)),
                kv("errors_camera_info", get(&s.bad_camera_info)),
                kv("camera_info_size_mismatch", get(&s.camera_info_mismatch)),
                kv("camera_info", camera_info),
                kv("debug_images", get(&s.debug_images)),
                kv("errors_superpoint", get(&s.superpoint_errors)),
                kv("errors_dust3r", get(&s.dust3r_errors)),
                kv("errors_publish", get(&s.publish_errors)),
                kv("no_pose", get(&s.no_pose)),
                kv("superpoint_latency_ms", get(&s.superpoint_ms)),
                kv("dust3r_latency_ms", get(&s.dust3r_ms)),
                kv("superpoint_paused", get(&s.superpoint_paused)),
                kv("dust3r_paused", get(&s.dust3r_paused)),
                kv("superpoint_backend", backends[0].clone()),
                kv("dust3r_backend", backends[1].clone()),
            ]
            .into_iter()
            .chain(
                s.by_kind
                    .lock()
                    .map(|m| m.iter().map(|(k, v)| kv(k, v.to_string())).collect::<Vec<_>>())
                    .unwrap_or_default(),
            )
            .collect(),
        }],
    }
}
