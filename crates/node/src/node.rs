//! The live driver: a ROS 2 node on ros2-client (pure-Rust DDS), its pipeline outputs on Cyclone
//! DDS (see cyclone.rs for why).
//!
//! Start-up joins the ROS graph first (the node is listed, its parameters served, /diagnostics
//! says what it waits for), then finds, downloads and loads each model's weights on a thread of
//! its own; each model serves as soon as it is ready, and one that cannot run is an ERROR on
//! /diagnostics, not the end of the node.
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
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ros2_client::dds::rustdds::DomainParticipantBuilder;
use ros2_client::names::NameError;
use ros2_client::{
    qos, Context, CreateError, MessageTypeName, Name, Node, NodeCreateError, NodeName, NodeOptions, Publisher,
    QosProfile, Subscription,
};

use crate::cyclone::{self, CycloneError};
use crate::dds::Dds;
use crate::param_services::{ParamServiceError, ParamServices};
use crate::rosout;
use sp_dust3r_core::backend::build::{build_dust3r, build_superpoint, BackendKind, BuildError, BuildProgress};
use sp_dust3r_core::backend::{BackendHealth, FeatureExtractor, PairOutput, PairReconstructor};
use sp_dust3r_core::cancel::Cancel;
use sp_dust3r_core::diagnostics::{diagnostics, Counter, History, ModelStatus, Report, Stats};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::msg::tf_static::StaticTransforms;
use sp_dust3r_core::msg::{
    builtin_interfaces, diagnostic_msgs, rcl_interfaces, rosgraph_msgs, sensor_msgs, std_msgs, tf2_msgs, CdrError,
    RosMessage,
};
use sp_dust3r_core::outputs::odom::{stamp_of, Mount, OdomOutputs};
use sp_dust3r_core::outputs::{
    check_camera_info, frame_outputs, known_camera, pair_outputs, Output, OutputKind, OutputSink,
};
use sp_dust3r_core::params::args::RosArgs;
use sp_dust3r_core::params::qos::WriterQos;
use sp_dust3r_core::params::topics::{input_topics, resolve, CLOCK, DIAGNOSTICS, ROSOUT, TF_STATIC};
use sp_dust3r_core::params::{NodeParams, ParamError, ParamStore};
use sp_dust3r_core::pipeline::keyframes::{KeyframeDecision, KeyframeSelector};
use sp_dust3r_core::pipeline::loading::{Loader, Phase};
use sp_dust3r_core::pipeline::map::{grow, VoxelMap};
use sp_dust3r_core::pipeline::odometry::{track_frame, Odometry, PairView, TOriginFrame};
use sp_dust3r_core::pipeline::priority::{rest_after, BackgroundPool};
use sp_dust3r_core::pipeline::slot::LatestSlot;
use sp_dust3r_core::pipeline::tracking::NotTracked;
use sp_dust3r_core::superpoint::Keypoints;

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A parameter file or override is wrong.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// DDS refused to create something the node needs.
    #[error("DDS: cannot create {what}")]
    Dds {
        /// What it was.
        what: String,
        /// DDS's reason.
        #[source]
        source: CreateError,
    },
    /// The DDS participant could not be created.
    #[error("DDS: cannot create the domain participant")]
    Participant(#[source] ros2_client::dds::rustdds::dds::CreateError),
    /// The ROS node could not be created.
    #[error("cannot create the ROS node")]
    Node(#[from] NodeCreateError),
    /// A node or topic name is not a valid ROS name.
    #[error("invalid name {name:?}")]
    Name {
        /// The name.
        name: String,
        /// What is wrong with it.
        #[source]
        source: NameError,
    },
    /// The parameter services could not be created.
    #[error(transparent)]
    ParamServices(#[from] ParamServiceError),
    /// The outputs' Cyclone DDS participant or a writer could not be created.
    #[error(transparent)]
    Cyclone(#[from] CycloneError),
}

fn dds(what: impl Into<String>) -> impl FnOnce(CreateError) -> NodeError {
    let what = what.into();
    move |source| NodeError::Dds { what, source }
}

/// An output that did not go out.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The message could not be encoded.
    #[error("encoding the output for {topic}")]
    Encode {
        /// The output's topic (relative to the namespace).
        topic: &'static str,
        /// The encoder's reason.
        #[source]
        source: CdrError,
    },
    /// DDS did not take it.
    #[error(transparent)]
    Write(#[from] CycloneError),
}

/// `ROS_DOMAIN_ID`, 0 when unset.
fn domain_id() -> u16 {
    std::env::var("ROS_DOMAIN_ID").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// `ROS_LOCALHOST_ONLY=1` or `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`: stay on 127.0.0.1.
fn localhost_only() -> bool {
    std::env::var("ROS_LOCALHOST_ONLY").is_ok_and(|v| v == "1")
        || std::env::var("ROS_AUTOMATIC_DISCOVERY_RANGE").is_ok_and(|v| v.eq_ignore_ascii_case("LOCALHOST"))
}

fn ros_name(resolved: &str) -> Result<Name, NodeError> {
    let trimmed = resolved.trim_start_matches('/');
    let (ns, base) = match trimmed.rsplit_once('/') {
        Some((ns, base)) => (format!("/{ns}"), base),
        None => ("/".to_string(), trimmed),
    };
    Name::new(&ns, base).map_err(|source| NodeError::Name { name: resolved.to_string(), source })
}

fn type_name<T: RosMessage>() -> MessageTypeName {
    let mut parts = T::ROS_TYPE.split('/');
    let pkg = parts.next().unwrap_or_default();
    MessageTypeName::new(pkg, parts.nth(1).unwrap_or_default())
}

/// The camera inputs' QoS, SensorDataQoS: best effort, keep last 5.
pub fn sensor_qos() -> QosProfile {
    QosProfile::subscription_default().reliability_best_effort().history(qos::History::KeepLast { depth: 5 })
}

/// rcl's /rosout profile: reliable, transient local (late joiners get recent records), keep last
/// 1000.
fn rosout_qos() -> QosProfile {
    reliable_qos().durability(qos::Durability::TransientLocal).history(qos::History::KeepLast { depth: 1000 })
}

/// tf2's /tf_static profile: reliable, transient local (the transforms were sent long before),
/// enough history for many broadcasters.
fn tf_static_qos() -> QosProfile {
    reliable_qos().durability(qos::Durability::TransientLocal).history(qos::History::KeepLast { depth: 100 })
}

/// The outputs' QoS, what RViz subscribes with: reliable, keep last 10.
pub fn reliable_qos() -> QosProfile {
    QosProfile::publisher_default()
        .reliability_reliable(qos::WhenFull::DEFAULT)
        .history(qos::History::KeepLast { depth: 10 })
}

fn subscribe<T: RosMessage + serde::Serialize + serde::de::DeserializeOwned + 'static>(
    node: &mut Node,
    topic: &str,
    q: QosProfile,
) -> Result<Subscription<Dds<T>>, NodeError> {
    let t = node.create_topic(&ros_name(topic)?, type_name::<T>(), &q).map_err(dds(format!("topic {topic}")))?;
    node.create_subscription(&t, Some(q)).map_err(dds(format!("a subscription to {topic}")))
}

fn advertise<T: RosMessage + serde::Serialize + serde::de::DeserializeOwned>(
    node: &mut Node,
    topic: &str,
    q: QosProfile,
) -> Result<Publisher<Dds<T>>, NodeError> {
    let t = node.create_topic(&ros_name(topic)?, type_name::<T>(), &q).map_err(dds(format!("topic {topic}")))?;
    node.create_publisher(&t, Some(q)).map_err(dds(format!("a publisher on {topic}")))
}

/// The node's output writers, on Cyclone DDS: where [`Output`]s go in the live driver.
struct Publishers {
    keypoints: cyclone::Writer,
    debug_image: cyclone::Writer,
    cloud: cyclone::Writer,
    pair_pose: cyclone::Writer,
    pose: cyclone::Writer,
    odometry: cyclone::Writer,
    path: cyclone::Writer,
    map: cyclone::Writer,
    tf: cyclone::Writer,
    /// Holds the graph announcement; the writers keep the participant itself alive.
    _participant: cyclone::Participant,
}

impl Publishers {
    /// A writer per output on `topic(name)` with `qos(topic)`, announced as the node
    /// `<name>_outputs` in `namespace`.
    fn advertise(
        namespace: &str,
        name: &str,
        topic: impl Fn(&str) -> String,
        qos: impl Fn(&str) -> WriterQos,
    ) -> Result<Self, NodeError> {
        let mut participant = cyclone::Participant::new(u32::from(domain_id()), &cyclone::config(localhost_only()))?;
        let writer = |kind: OutputKind| {
            let t = topic(kind.topic());
            participant.writer(&format!("rt{t}"), kind.dds_type(), qos(&t))
        };
        let (keypoints, debug_image, cloud) =
            (writer(OutputKind::Keypoints)?, writer(OutputKind::DebugImage)?, writer(OutputKind::Cloud)?);
        let (pair_pose, pose, tf) = (writer(OutputKind::PairPose)?, writer(OutputKind::Pose)?, writer(OutputKind::Tf)?);
        let (odometry, path, map) =
            (writer(OutputKind::Odometry)?, writer(OutputKind::Path)?, writer(OutputKind::Map)?);
        participant.announce(
            namespace,
            &outputs_node_name(name),
            &[&keypoints, &debug_image, &cloud, &pair_pose, &pose, &odometry, &path, &map, &tf],
        )?;
        Ok(Self { keypoints, debug_image, cloud, pair_pose, pose, odometry, path, map, tf, _participant: participant })
    }

    fn writer(&self, kind: OutputKind) -> &cyclone::Writer {
        match kind {
            OutputKind::Keypoints => &self.keypoints,
            OutputKind::DebugImage => &self.debug_image,
            OutputKind::Cloud => &self.cloud,
            OutputKind::PairPose => &self.pair_pose,
            OutputKind::Pose => &self.pose,
            OutputKind::Odometry => &self.odometry,
            OutputKind::Path => &self.path,
            OutputKind::Map => &self.map,
            OutputKind::Tf => &self.tf,
        }
    }

    /// Someone reads this output now.
    fn wanted(&self, kind: OutputKind) -> bool {
        self.writer(kind).matched() > 0
    }
}

/// The name under which the ROS graph sees the output writers: a second node of this process.
pub fn outputs_node_name(node_name: &str) -> String {
    format!("{node_name}_outputs")
}

impl OutputSink for &Publishers {
    type Error = PublishError;

    fn emit(&mut self, output: Output) -> Result<(), PublishError> {
        let kind = output.kind();
        let cdr = output.to_cdr().map_err(|source| PublishError::Encode { topic: kind.topic(), source })?;
        Ok(self.writer(kind).write(&cdr)?)
    }
}

/// A frame as it arrived.
#[derive(Clone)]
struct Input {
    header: std_msgs::Header,
    frame: Arc<Frame>,
}

/// A keyframe: its frame, and its keypoints for the chain.
#[derive(Clone)]
struct Keyframe {
    input: Input,
    keypoints: Arc<Keypoints>,
}

/// A keyframe pair waiting for DUSt3R.
struct PairJob {
    first: Keyframe,
    second: Keyframe,
    camera_info: Option<sensor_msgs::CameraInfo>,
    /// The chain it was made for (see [`Shared::chain`]).
    chain: u64,
}

/// What the DDS loop and the two workers share.
struct Shared {
    /// The parameters as loaded; the store has them after any `ros2 param set`.
    initial: NodeParams,
    store: Arc<Mutex<ParamStore>>,
    stats: Stats,
    frames: LatestSlot<Input>,
    pairs: LatestSlot<PairJob>,
    camera_info: Mutex<Option<sensor_msgs::CameraInfo>>,
    /// The keyframe chain: tracked against on the SuperPoint worker, grown on the DUSt3R one.
    odometry: Mutex<Odometry<Keyframe>>,
    /// Which chain is current: a new one starts when input time goes backwards (a bag looped),
    /// and pairs made for an older one, and the map of it, are left behind.
    chain: std::sync::atomic::AtomicU64,
    /// The odometry outputs (the last tracked pose, the camera's mount).
    odom: Mutex<OdomOutputs>,
    /// /tf_static as received (the camera's mount, with base_frame).
    tree: Mutex<StaticTransforms>,
    superpoint: Arc<Loader<dyn FeatureExtractor>>,
    dust3r: Arc<Loader<dyn PairReconstructor>>,
    /// The DUSt3R worker is on a pair (the SuperPoint worker then leaves it its share).
    pair_in_flight: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The tunable parameters as the workers see them now.
    fn current(&self) -> NodeParams {
        self.store.lock().map(|s| s.params().clone()).unwrap_or_else(|_| self.initial.clone())
    }

    /// Emits outputs, counting what DDS did not take and the debug images it did.
    fn emit(&self, publishers: &Publishers, outputs: Vec<Output>) {
        let mut sink = publishers;
        for output in outputs {
            let debug = matches!(output, Output::DebugImage(_));
            match sink.emit(output) {
                Ok(()) if debug => self.stats.bump(Counter::DebugImages),
                Ok(()) => {}
                Err(e) => {
                    self.stats.bump(Counter::PublishErrors);
                    tracing::debug!("{e}: {:?}", std::error::Error::source(&e));
                }
            }
        }
    }
}

/// SuperPoint worker, once the model is ready: keypoints for every frame it takes, keyframes,
/// pair jobs for DUSt3R (unless DUSt3R cannot run).
fn superpoint_worker(shared: &Shared, publishers: &Publishers, stop: &Cancel) {
    let Some(features) = shared.superpoint.wait(stop) else {
        shared.pairs.close();
        return;
    };
    let stats = &shared.stats;
    let mut keyframes: KeyframeSelector<Keyframe> = KeyframeSelector::new(shared.initial.keyframe_policy());
    // With both models on the CPU, a pair in flight is guaranteed `dust3r_cpu_share` of the
    // time: after each frame this worker rests before it takes the next (see `rest_after`).
    let on_shared_cores = [shared.initial.superpoint_backend, shared.initial.dust3r_backend] == [BackendKind::Cpu; 2];
    let mut rest_until = None;
    loop {
        if let Some(until) = rest_until.take().filter(|_| shared.pair_in_flight.load(Ordering::Relaxed)) {
            let pause = Instant::saturating_duration_since(&until, Instant::now());
            if !pause.is_zero() {
                shared.frames.rest(pause);
                stats.add(Counter::SuperPointRestMs, pause.as_millis() as u64);
            }
        }
        let Some(input) = shared.frames.next() else { break };
        let p = shared.current();
        keyframes.set_policy(p.keyframe_policy());
        let t = Instant::now();
        work_on_frame(shared, publishers, &p, features.as_ref(), &mut keyframes, input);
        if on_shared_cores {
            rest_until = Some(Instant::now() + rest_after(t.elapsed(), p.dust3r_cpu_share));
        }
    }
    shared.pairs.close();
}

/// One frame on the SuperPoint worker: its keypoints out, its pose on the chain, and whether it
/// is a keyframe (then a pair for DUSt3R).
fn work_on_frame(
    shared: &Shared,
    publishers: &Publishers,
    p: &NodeParams,
    features: &dyn FeatureExtractor,
    keyframes: &mut KeyframeSelector<Keyframe>,
    input: Input,
) {
    let stats = &shared.stats;
    let post = p.post_params();
    let t = Instant::now();
    match features.detect(&input.frame, &post) {
        Ok(kp) => {
            stats.superpoint_ms.store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
            stats.bump(Counter::FramesDone);
            let debug = publishers.wanted(OutputKind::DebugImage).then_some(&post);
            shared.emit(publishers, frame_outputs(&input.header, &input.frame, &kp, debug));
            if !matches!(shared.dust3r.phase(), Phase::Failed(_)) {
                let camera_info = shared.camera_info.lock().ok().and_then(|c| c.clone());
                let keyframe = Keyframe { input, keypoints: Arc::new(kp) };
                let tracked = track(shared, publishers, p, &keyframe, camera_info.as_ref());
                let stamp = keyframe.input.header.stamp.seconds();
                match keyframes.decide(stamp, &keyframe.keypoints, &keyframe) {
                    KeyframeDecision::Skip { .. } => {}
                    KeyframeDecision::First => {
                        // The first frame, or time went backwards (a bag looped): a new chain.
                        if let (Ok(mut o), Ok(mut out)) = (shared.odometry.lock(), shared.odom.lock()) {
                            o.reset();
                            out.reset();
                            shared.chain.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    KeyframeDecision::New { previous, .. } => {
                        // Paired with the chain's newest keyframe, so the pair can join it.
                        let first = shared.odometry.lock().ok().and_then(|mut o| {
                            if let Some(pose) = tracked {
                                o.keyframe_tracked(stamp_of(&keyframe.input.header.stamp), pose);
                            }
                            o.anchor().map(|a| a.payload.clone())
                        });
                        let chain = shared.chain.load(Ordering::Relaxed);
                        let job = PairJob { first: first.unwrap_or(previous), second: keyframe, camera_info, chain };
                        if shared.pairs.put(job) {
                            stats.bump(Counter::PairDrops);
                        }
                    }
                }
            }
        }
        // The server is down or starting and there is no CPU fallback: paused, and
        // /diagnostics says why (the link logs its state changes).
        Err(e) if e.is_unavailable() => stats.bump(Counter::SuperPointPaused),
        Err(e) => {
            stats.bump(Counter::SuperPointErrors);
            stats.count_kind("superpoint", e.kind());
            sp_dust3r_core::warn_throttled!("SuperPoint: {e}");
        }
    }
}

/// Places a frame on the keyframe chain (the chain's lock is held only to take its newest
/// keyframe) and publishes its odometry and TF; counts what was not tracked and why. Returns
/// the frame's pose on the chain.
fn track(
    shared: &Shared,
    publishers: &Publishers,
    p: &NodeParams,
    frame: &Keyframe,
    camera_info: Option<&sensor_msgs::CameraInfo>,
) -> Option<TOriginFrame> {
    let stats = &shared.stats;
    let anchor = shared.odometry.lock().ok()?.anchor();
    let k = known_camera(camera_info, &frame.input.frame).map(|k| k.intrinsics());
    let header = &frame.input.header;
    match track_frame(anchor.as_deref(), &frame.keypoints, k, &p.odometry_params().tracking) {
        Ok(fp) => {
            let mut odom = shared.odom.lock().ok()?;
            if let (None, Some(base)) = (&odom.mount, &p.base_frame) {
                odom.mount = shared
                    .tree
                    .lock()
                    .ok()?
                    .lookup(base, &header.frame_id)
                    .map(|t_base_cam| Mount { base_frame: base.clone(), t_base_cam });
                if odom.mount.is_none() {
                    stats.bump(Counter::FramesNoMount);
                    sp_dust3r_core::warn_throttled!(
                        "no {TF_STATIC} transform from {base} to {} yet: odometry waits for it",
                        header.frame_id
                    );
                    return Some(fp.t_origin_frame);
                }
            }
            stats.bump(Counter::FramesTracked);
            let outputs = odom.frame(header, &fp.t_origin_frame, p.publish_tf);
            drop(odom);
            shared.emit(publishers, outputs);
            Some(fp.t_origin_frame)
        }
        Err(NotTracked::NoMap) => {
            stats.bump(Counter::FramesBeforeMap);
            None
        }
        Err(e) => {
            stats.bump(Counter::FramesLost);
            stats.count_kind("tracking", e.kind());
            sp_dust3r_core::warn_throttled!(key = e.kind(); "frame stamped {:.3} not tracked: {e}", header.stamp.seconds());
            None
        }
    }
}

/// DUSt3R worker, once the model is ready: the newest keyframe pair's cloud and pose, then the
/// pair joins the keyframe chain and the path and the map go out. A pair in flight at shutdown
/// is abandoned (the CPU model checks `stop` between blocks) and publishes nothing.
fn dust3r_worker(shared: &Shared, publishers: &Publishers, stop: &Cancel) {
    let Some(model) = shared.dust3r.wait(stop) else { return };
    // Pairs run on threads of their own below SuperPoint's priority, so that a frame never waits
    // for a pair's blocks on the shared cores.
    let nice = shared.initial.dust3r_nice;
    match BackgroundPool::new("dust3r", 0, nice) {
        Ok(pool) => {
            tracing::info!("DUSt3R runs on {} threads at nice +{nice} below SuperPoint's", pool.threads());
            pool.install(|| dust3r_loop(shared, publishers, stop, model.as_ref()));
        }
        Err(e) => {
            tracing::warn!("DUSt3R shares SuperPoint's threads and priority: {e}");
            dust3r_loop(shared, publishers, stop, model.as_ref());
        }
    }
}

fn dust3r_loop(shared: &Shared, publishers: &Publishers, stop: &Cancel, model: &dyn PairReconstructor) {
    let stats = &shared.stats;
    // The map lives on this thread only: growing it never holds up a frame.
    let (mut map, mut map_chain) = (None, 0);
    while let Some(job) = shared.pairs.next() {
        let _in_flight = InFlight::mark(&shared.pair_in_flight);
        if job.chain != map_chain {
            (map, map_chain) = (None, job.chain);
        }
        let p = shared.current();
        let t = Instant::now();
        let (a, b) = (&job.first.input, &job.second.input);
        let first = (&a.header, a.frame.as_ref());
        let second = (&b.header, b.frame.as_ref());
        let stamps = (a.header.stamp.seconds(), b.header.stamp.seconds());
        tracing::debug!("DUSt3R: pair {:.3} -> {:.3} started", stamps.0, stamps.1);
        let result = pair_outputs(model, first, second, job.camera_info.as_ref(), &p);
        if result.as_ref().is_err_and(|e| e.is_cancelled()) || stop.is_cancelled() {
            let elapsed = t.elapsed().as_secs_f64();
            let what = if result.is_ok() { "finished" } else { "abandoned" };
            tracing::info!(
                "DUSt3R: pair {:.3} -> {:.3} {what} after {elapsed:.2} s: shutting down",
                stamps.0,
                stamps.1
            );
            break;
        }
        match result {
            Ok(out) => {
                if out.camera_info_mismatch {
                    stats.bump(Counter::CameraInfoMismatch);
                    sp_dust3r_core::warn_throttled!(
                        "camera_info is for another image size than the frames; estimating the focal instead"
                    );
                }
                stats.dust3r_ms.store(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                stats.bump(Counter::PairsDone);
                tracing::debug!(
                    "DUSt3R: pair {:.3} -> {:.3} done in {:.2} s",
                    stamps.0,
                    stamps.1,
                    t.elapsed().as_secs_f64()
                );
                if let Some(reason) = &out.no_pose {
                    stats.bump(Counter::NoPose);
                    tracing::warn!("no pose for the pair: {reason}");
                }
                shared.emit(publishers, out.outputs);
                join_chain(shared, publishers, &p, &job, &out.geometry, &mut map);
            }
            Err(e) if e.is_unavailable() => stats.bump(Counter::Dust3rPaused),
            Err(e) => {
                stats.bump(Counter::Dust3rErrors);
                stats.count_kind("dust3r", e.kind());
                sp_dust3r_core::warn_throttled!("DUSt3R: {e}");
            }
        }
    }
}

/// Says a pair is in flight while it lives, on every way out of the pair's work.
struct InFlight<'a>(&'a std::sync::atomic::AtomicBool);

impl<'a> InFlight<'a> {
    fn mark(flag: &'a std::sync::atomic::AtomicBool) -> Self {
        flag.store(true, Ordering::Relaxed);
        Self(flag)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// A reconstructed pair joins the keyframe chain (prepared outside the chain's lock, added under
/// it), then, outside it, the map grows and the path and the map go out.
fn join_chain(
    shared: &Shared,
    publishers: &Publishers,
    p: &NodeParams,
    job: &PairJob,
    out: &PairOutput,
    map: &mut Option<VoxelMap>,
) {
    let stats = &shared.stats;
    // The chain counter changes under the chain's lock: read under it, it is the chain's.
    let current = |_: &Odometry<Keyframe>| {
        let same = job.chain == shared.chain.load(Ordering::Relaxed);
        if !same {
            tracing::debug!("a pair made before input time went back does not join the new chain");
        }
        same
    };
    let view = |k: &Keyframe| PairView {
        stamp: stamp_of(&k.input.header.stamp),
        payload: k.clone(),
        keypoints: k.keypoints.as_ref().clone(),
    };
    // The chain's lock is held to look the anchor up and to add, not for the depth ratio.
    let Some((anchor, scale_confidence)) = shared
        .odometry
        .lock()
        .ok()
        .filter(|o| current(o))
        .map(|o| (o.anchor_of(stamp_of(&job.first.input.header.stamp)), o.params().scale_confidence))
    else {
        return;
    };
    let joining = Odometry::join(anchor, view(&job.first), view(&job.second), out, scale_confidence);
    let Ok(mut odometry) = shared.odometry.lock() else { return };
    if !current(&odometry) {
        return;
    }
    let (added, path) = match joining.and_then(|j| odometry.commit(j)) {
        Ok(joined) => {
            let added: Vec<_> = joined.added.iter().filter_map(|&k| odometry.keyframe(k).cloned()).collect();
            stats.add(Counter::KeyframesChained, added.len() as u64);
            if let Some((deg, units)) = joined.disagreement {
                tracing::debug!(
                    "keyframe: pair and tracking {deg:.2} deg, {units:.4} apart (scale {:.3})",
                    joined.scale
                );
            }
            (added, odometry.path().to_vec())
        }
        Err(e) => {
            stats.bump(Counter::PairsUnchained);
            sp_dust3r_core::warn_throttled!("the pair does not join the keyframe chain: {e}");
            return;
        }
    };
    drop(odometry);
    if let Err(e) = grow(map, added.iter().map(|k| k.as_ref()), &p.map_settings()) {
        sp_dust3r_core::warn_throttled!("map: {e}");
    }
    let outputs = match shared.odom.lock() {
        // With base_frame, nothing goes out until the camera's mount is known.
        Ok(odom) if p.base_frame.is_none() || odom.mount.is_some() => {
            odom.chain(&job.second.input.header.frame_id, &path, map.as_ref())
        }
        _ => return,
    };
    shared.emit(publishers, outputs);
}

/// Most samples one input topic gives one turn of the DDS loop (the newest frame wins anyway;
/// the bound keeps a flooding writer from starving the other topics).
const MAX_TAKE: usize = 1000;

/// Takes the waiting samples of `sub` (on `topic`) into `each`. A sample that does not decode
/// as the topic's type is counted on /diagnostics, by topic, and logged (throttled), never
/// dropped silently; the reader has moved past it, so the next one is taken.
fn take_all<T: serde::de::DeserializeOwned + 'static>(
    sub: &Subscription<Dds<T>>,
    topic: &str,
    stats: &Stats,
    mut each: impl FnMut(T),
) {
    for _ in 0..MAX_TAKE {
        match sub.take() {
            Ok(Some((Dds(msg), _))) => each(msg),
            Ok(None) => return,
            Err(e) => {
                stats.bump(Counter::MalformedSamples);
                stats.count_kind("malformed", &topic.trim_start_matches('/').replace('/', "_"));
                sp_dust3r_core::warn_throttled!(key = topic;
                    "a sample on {topic} does not decode as its type (another message definition?): {e}");
            }
        }
    }
}

/// The node's DDS inputs (each with its resolved topic) and its own outputs besides the
/// pipeline's (diagnostics, /rosout).
struct Io {
    raw: Option<(Subscription<Dds<sensor_msgs::Image>>, String)>,
    compressed: Option<(Subscription<Dds<sensor_msgs::CompressedImage>>, String)>,
    camera_info: (Subscription<Dds<sensor_msgs::CameraInfo>>, String),
    clock: Option<(Subscription<Dds<rosgraph_msgs::Clock>>, String)>,
    tf_static: Option<(Subscription<Dds<tf2_msgs::TFMessage>>, String)>,
    diagnostics: Publisher<Dds<diagnostic_msgs::DiagnosticArray>>,
    rosout: Publisher<Dds<rcl_interfaces::Log>>,
}

/// Everything the DDS loop needs besides the shared state.
struct Loop<'a> {
    io: Io,
    services: &'a ParamServices,
    log_records: Option<std::sync::mpsc::Receiver<rosout::Record>>,
    logger: String,
    fqn: &'a str,
    /// The resolved input topics, for /diagnostics.
    image_topic: &'a str,
    camera_info_topic: &'a str,
}

/// The DDS loop: newest frame wins; camera info and clock kept; parameter requests answered;
/// log records to /rosout; diagnostics at 1 Hz. Returns when `stop` is set.
fn dds_loop(l: &Loop<'_>, shared: &Shared, stop: &Cancel) {
    let stats = &shared.stats;
    let use_sim_time = shared.initial.use_sim_time;
    let mut sim_time: Option<builtin_interfaces::Time> = None;
    let mut last_diag = Instant::now();
    let mut history = History::new(last_diag);
    while !stop.is_cancelled() {
        let mut got = false;
        // Every frame is counted; a bad one is reported and skipped, never fatal.
        let mut accept = |header: std_msgs::Header, frame: Result<Frame, sp_dust3r_core::image::ImageError>| {
            got = true;
            stats.bump(Counter::FramesIn);
            match frame {
                Ok(frame) => {
                    if shared.frames.put(Input { header, frame: Arc::new(frame) }) {
                        stats.bump(Counter::FrameDrops);
                    }
                }
                Err(e) => {
                    stats.bump(Counter::BadFrames);
                    sp_dust3r_core::warn_throttled!(
                        "dropping a frame stamped {}.{:09}: {e}",
                        header.stamp.sec,
                        header.stamp.nanosec
                    );
                }
            }
        };
        if let Some((sub, topic)) = &l.io.raw {
            take_all(sub, topic, stats, |msg| {
                let bigendian = msg.is_bigendian != 0;
                let frame =
                    Frame::from_raw(&msg.encoding, msg.width, msg.height, msg.step as usize, bigendian, msg.data);
                accept(msg.header, frame);
            });
        }
        if let Some((sub, topic)) = &l.io.compressed {
            take_all(sub, topic, stats, |msg| {
                let frame = Frame::decode(&msg.data);
                accept(msg.header, frame);
            });
        }
        let (sub, topic) = &l.io.camera_info;
        take_all(sub, topic, stats, |info| match check_camera_info(&info) {
            Ok(()) => {
                if let Ok(mut c) = shared.camera_info.lock() {
                    *c = Some(info);
                }
            }
            Err(e) => {
                stats.bump(Counter::BadCameraInfo);
                let stamp = &info.header.stamp;
                sp_dust3r_core::warn_throttled!("ignoring camera_info stamped {}.{:09}: {e}", stamp.sec, stamp.nanosec);
            }
        });
        if let Some((sub, topic)) = &l.io.clock {
            take_all(sub, topic, stats, |clock| sim_time = Some(clock.clock));
        }
        if let Some((sub, topic)) = &l.io.tf_static {
            take_all(sub, topic, stats, |msg| {
                if let Ok(mut tree) = shared.tree.lock() {
                    tree.insert(&msg);
                }
            });
        }
        let stamp = if use_sim_time { sim_time.clone().unwrap_or_default() } else { wall_time() };
        if l.services.poll(ros2_client::builtin_interfaces::Time::new(stamp.sec, stamp.nanosec)) > 0 {
            got = true;
        }
        l.forward_log_records();
        if last_diag.elapsed() >= Duration::from_secs(1) {
            last_diag = Instant::now();
            let limits = shared.current().diagnostic_limits;
            // The window, and the rate's 5 s when the window is shorter.
            let keep = Duration::from_secs_f64(limits.window).max(sp_dust3r_core::diagnostics::RATE_WINDOW);
            history.record(last_diag, stats.snapshot(), keep);
            let report = Report {
                fqn: l.fqn,
                stamp,
                limits,
                image_topic: l.image_topic,
                camera_info_topic: l.camera_info_topic,
                camera_info: describe_camera_info(&shared.camera_info.lock().map(|c| c.clone()).unwrap_or_default()),
                superpoint: model_status(&shared.superpoint, |m| (m.describe(), m.health())),
                dust3r: model_status(&shared.dust3r, |m| (m.describe(), m.health())),
            };
            if l.io.diagnostics.publish(Dds(diagnostics(stats, &history, report))).is_err() {
                stats.bump(Counter::PublishErrors);
            }
        }
        if !got {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A model's loader as /diagnostics shows it; a ready model describes its backends anew each
/// time (a server's state changes).
fn model_status<M: ?Sized>(loader: &Loader<M>, ready: impl Fn(&M) -> (String, Vec<BackendHealth>)) -> ModelStatus {
    match loader.phase() {
        Phase::Loading(step) => ModelStatus::Loading { step, seconds: loader.started().elapsed().as_secs_f64() },
        Phase::Ready(m) => {
            let (backend, health) = ready(&m);
            ModelStatus::Ready { backend, health }
        }
        Phase::Failed(why) => ModelStatus::Failed(why),
    }
}

/// Tells a model's loader how finding, downloading and loading its weights go.
struct LoadSteps<'a, M: ?Sized>(&'a Loader<M>);

impl<M: ?Sized + Send + Sync> sp_dust3r_core::weights::DownloadProgress for LoadSteps<'_, M> {
    fn bytes(&self, file: &str, done: u64, total: u64) {
        let percent = (done * 100).checked_div(total).unwrap_or(0);
        self.0.step(sp_dust3r_core::weights::download_step(file, percent, total));
    }
}

impl<M: ?Sized + Send + Sync> BuildProgress for LoadSteps<'_, M> {
    fn loading(&self, dir: &std::path::Path) {
        self.0.step(format!("loading the weights in {}", dir.display()));
    }
}

/// Builds a model on a thread of its own into `loader`. The thread is not joined: a download
/// in progress at shutdown must not hold the node up.
fn load_in_background<M: ?Sized + Send + Sync + 'static>(
    model: &'static str,
    loader: &Arc<Loader<M>>,
    build: impl FnOnce(&dyn BuildProgress) -> Result<Box<M>, BuildError> + Send + 'static,
    describe: fn(&M) -> String,
) {
    let mine = Arc::clone(loader);
    let spawned = std::thread::Builder::new().name(format!("load {model}")).spawn(move || {
        match build(&LoadSteps(mine.as_ref())) {
            Ok(m) => {
                let m: Arc<M> = Arc::from(m);
                let took = mine.started().elapsed().as_secs_f64();
                tracing::info!("{model} ready on {} ({took:.1} s after start)", describe(&m));
                mine.ready(m);
            }
            Err(e) => {
                tracing::error!("{model} cannot run: {e}");
                mine.failed(e.to_string());
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!("{model} cannot run: no thread to load it: {e}");
        loader.failed(format!("no thread to load it: {e}"));
    }
}

impl Loop<'_> {
    /// Log records so far to /rosout; they carry wall time, as rcl's do.
    fn forward_log_records(&self) {
        if let Some(rx) = &self.log_records {
            for record in rx.try_iter() {
                let _ = self.io.rosout.publish(Dds(record.to_log(&self.logger, wall_time())));
            }
        }
    }
}

/// Runs until `stop` is set (SIGINT/SIGTERM); a DUSt3R pair on the CPU in flight then is
/// abandoned between two blocks, so the node ends within a block's time.
pub fn run(ros: &RosArgs, stop: Cancel) -> Result<(), NodeError> {
    // Records from here on reach /rosout once it exists (transient local: late joiners too).
    let log_records = rosout::collect(1000);
    let name = ros.node_name.clone().unwrap_or_else(|| "sp_dust3r".into());
    let namespace = ros.namespace.clone().unwrap_or_else(|| "/".into());
    let fqn = format!("{}/{name}", namespace.trim_end_matches('/'));
    let topic = |n: &str| resolve(&ros.remaps, &namespace, n);
    let outputs: Vec<(String, WriterQos)> =
        OutputKind::ALL.iter().map(|k| (topic(k.topic()), k.default_qos())).collect();
    let (store, warnings) = ParamStore::resolve_with_outputs(ros, &fqn, &outputs)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let output_qos: Vec<(String, WriterQos)> =
        outputs.iter().map(|(t, default)| (t.clone(), store.output_qos(t, *default))).collect();
    for ((t, qos), (_, default)) in output_qos.iter().zip(&outputs) {
        if qos != default {
            tracing::info!("publisher on {t}: {qos} (qos_overrides)");
        }
    }
    let params = store.params().clone();
    let store = Arc::new(Mutex::new(store));

    let mut node = create_node(&namespace, &name)?;
    let inputs = input_topics(&ros.remaps, &namespace, params.compressed_input);
    let input = &inputs.image;
    fn with_topic<S>(topic: &str) -> impl FnOnce(S) -> (S, String) + '_ {
        move |sub| (sub, topic.to_string())
    }
    let io = Io {
        raw: (!params.compressed_input)
            .then(|| subscribe(&mut node, input, sensor_qos()))
            .transpose()?
            .map(with_topic(input)),
        compressed: params
            .compressed_input
            .then(|| subscribe(&mut node, input, sensor_qos()))
            .transpose()?
            .map(with_topic(input)),
        camera_info: (subscribe(&mut node, &inputs.camera_info, sensor_qos())?, inputs.camera_info.clone()),
        clock: params
            .use_sim_time
            .then(|| subscribe(&mut node, CLOCK, QosProfile::subscription_default()))
            .transpose()?
            .map(with_topic(CLOCK)),
        // Only with base_frame: the camera's mount is all the node reads of the tree.
        tf_static: params
            .base_frame
            .is_some()
            .then(|| subscribe(&mut node, TF_STATIC, tf_static_qos()))
            .transpose()?
            .map(with_topic(TF_STATIC)),
        diagnostics: advertise(&mut node, DIAGNOSTICS, reliable_qos())?,
        rosout: advertise(&mut node, ROSOUT, rosout_qos())?,
    };
    let qos_of = |t: &str| output_qos.iter().find(|(o, _)| o == t).map_or(WriterQos::OUTPUTS, |(_, q)| *q);
    let publishers = Publishers::advertise(&namespace, &name, topic, qos_of)?;
    let services = ParamServices::new(&mut node, &fqn, Arc::clone(&store))?;
    // The spinner keeps ros2-client's view of the ROS graph current.
    let spinner = node.spinner().map_err(dds("the node's spinner"))?;
    let spin_thread = std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    tracing::info!("node {fqn} up (input {input} with {}); loading the models", inputs.camera_info);
    let superpoint: Arc<Loader<dyn FeatureExtractor>> = Arc::new(Loader::new("finding the weights"));
    let dust3r: Arc<Loader<dyn PairReconstructor>> = Arc::new(Loader::new("finding the weights"));
    let config = sp_dust3r_core::backend::build::BackendConfig { cancel: stop.clone(), ..params.backend_config() };
    let c = config.clone();
    load_in_background("SuperPoint", &superpoint, move |p| build_superpoint(&c, Some(p)), |m| m.describe());
    load_in_background("DUSt3R", &dust3r, move |p| build_dust3r(&config, Some(p)), |m| m.describe());

    let odometry = Mutex::new(Odometry::new(params.odometry_params()));
    let odom = Mutex::new(OdomOutputs::new(&params.odom_frame, None));
    let shared = Shared {
        initial: params,
        store,
        stats: Stats::default(),
        frames: LatestSlot::new(),
        pairs: LatestSlot::new(),
        camera_info: Mutex::new(None),
        odometry,
        odom,
        chain: std::sync::atomic::AtomicU64::new(0),
        tree: Mutex::new(StaticTransforms::default()),
        superpoint,
        dust3r,
        pair_in_flight: std::sync::atomic::AtomicBool::new(false),
    };
    let dds = Loop {
        io,
        services: &services,
        log_records,
        logger: rosout::logger_name(&fqn),
        fqn: &fqn,
        image_topic: input,
        camera_info_topic: &inputs.camera_info,
    };
    std::thread::scope(|s| {
        s.spawn(|| superpoint_worker(&shared, &publishers, &stop));
        s.spawn(|| dust3r_worker(&shared, &publishers, &stop));
        dds_loop(&dds, &shared, &stop);
        shared.frames.close();
    });
    let stats = &shared.stats;
    tracing::info!(
        "shutting down: {} frames in, {} processed, {} dropped, {} bad, {} pairs, {} errors",
        stats.get(Counter::FramesIn),
        stats.get(Counter::FramesDone),
        stats.get(Counter::FrameDrops),
        stats.get(Counter::BadFrames),
        stats.get(Counter::PairsDone),
        stats.errors()
    );
    dds.forward_log_records();
    // Endpoints first, then the node and its participant: an endpoint that outlives the
    // participant's event loop cannot unregister and logs an error for it.
    drop(dds);
    drop(services);
    // Dropping the node stops the spinner.
    drop(node);
    if spin_thread.join().is_err() {
        tracing::warn!("the DDS spinner thread panicked");
    }
    Ok(())
}

/// The ROS node on a DDS participant of `ROS_DOMAIN_ID`, on loopback only when asked.
fn create_node(namespace: &str, name: &str) -> Result<Node, NodeError> {
    let mut builder = DomainParticipantBuilder::new(domain_id());
    if localhost_only() {
        builder = builder.with_only_networks([Ipv4Addr::LOCALHOST]);
    }
    let participant = builder.build().map_err(NodeError::Participant)?;
    let context = Context::from_domain_participant(participant).map_err(dds("the ROS context"))?;
    let node_name = NodeName::new(namespace, name)
        .map_err(|source| NodeError::Name { name: format!("{}/{name}", namespace.trim_end_matches('/')), source })?;
    // Our own /rosout writer and parameter services (see rosout.rs, param_services.rs).
    let options = NodeOptions::new().enable_rosout(false).start_parameter_services(false);
    Ok(context.new_node(node_name, options)?)
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
