//! The live driver: a ROS 2 node whose threads feed the pipeline; its endpoints come from
//! transport.rs (ros2-client for inputs and its own topics, Cyclone DDS for the pipeline's
//! outputs; see cyclone.rs for why).
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

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::node_services::{NodeServices, ServiceHandler, TriggerResponse};
use crate::param_services::{ParamServiceError, ParamServices};
use crate::rosout;
use crate::transport::{granted_receive_buffer, Participant, Reader, Role, Sample, Transport, TransportError, Writer};
use sp_dust3r_core::backend::build::{build_dust3r, build_superpoint, BackendKind, BuildError, BuildProgress};
use sp_dust3r_core::backend::{BackendHealth, FeatureExtractor, PairReconstructor};
use sp_dust3r_core::cancel::Cancel;
use sp_dust3r_core::diagnostics::{
    diagnostics, Counter, History, ModelStatus, ReceiveBuffer, Report, ScaleReport, Stats,
};
use sp_dust3r_core::image::Frame;
use sp_dust3r_core::msg::{
    builtin_interfaces, diagnostic_msgs, geometry_msgs, nav_msgs, node_msgs, rcl_interfaces, rosgraph_msgs,
    sensor_msgs, std_msgs, tf2_msgs,
};
use sp_dust3r_core::outputs::{Output, OutputKind, OutputSink};
use sp_dust3r_core::params::args::RosArgs;
use sp_dust3r_core::params::qos::Qos;
use sp_dust3r_core::params::topics::{input_topics, resolve, InputTopics, CLOCK, DIAGNOSTICS, ROSOUT, TF, TF_STATIC};
use sp_dust3r_core::params::{NodeParams, ParamError, ParamStore};
use sp_dust3r_core::pipeline::{CameraImage, PairDone, PairJob, PairSide, Pipeline};
use sp_dust3r_core::vo::scale::ScaleSource;
use sp_dust3r_core::workers::loading::{BackgroundLoad, Phase};
use sp_dust3r_core::workers::priority::{rest_after, BackgroundPool};
use sp_dust3r_core::workers::slot::LatestSlot;

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// A parameter file or override is wrong.
    #[error(transparent)]
    Params(#[from] ParamError),
    /// The parameter services could not be created.
    #[error(transparent)]
    ParamServices(#[from] ParamServiceError),
    /// The node, an input, an output or a participant for them could not be created.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

type WriterResult<T> = Result<Box<dyn Writer<T>>, TransportError>;

/// The node's output writers: where [`Output`]s go in the live driver.
struct Publishers {
    keypoints: Box<dyn Writer<node_msgs::Keypoints>>,
    debug_image: Box<dyn Writer<sensor_msgs::Image>>,
    cloud: Box<dyn Writer<sensor_msgs::PointCloud2>>,
    pair_pose: Box<dyn Writer<node_msgs::PairPose>>,
    pose: Box<dyn Writer<geometry_msgs::PoseStamped>>,
    odometry: Box<dyn Writer<nav_msgs::Odometry>>,
    path: Box<dyn Writer<nav_msgs::Path>>,
    map: Box<dyn Writer<sensor_msgs::PointCloud2>>,
    tf: Box<dyn Writer<tf2_msgs::TFMessage>>,
}

impl Publishers {
    /// A writer per output on `topic(name)` with `qos(topic)`, announced to the ROS graph.
    fn advertise(
        transport: &mut Transport,
        namespace: &str,
        name: &str,
        topic: impl Fn(&str) -> String,
        qos: impl Fn(&str) -> Qos,
    ) -> Result<Self, TransportError> {
        let open = |kind: OutputKind| {
            let t = topic(kind.topic());
            (Role::Output(kind), t.clone(), qos(&t))
        };
        fn writer<T: Sample>(t: &mut Transport, (role, topic, q): (Role, String, Qos)) -> WriterResult<T> {
            t.writer(role, &topic, q)
        }
        let keypoints = writer(transport, open(OutputKind::Keypoints))?;
        let debug_image = writer(transport, open(OutputKind::DebugImage))?;
        let cloud = writer(transport, open(OutputKind::Cloud))?;
        let pair_pose = writer(transport, open(OutputKind::PairPose))?;
        let pose = writer(transport, open(OutputKind::Pose))?;
        let odometry = writer(transport, open(OutputKind::Odometry))?;
        let path = writer(transport, open(OutputKind::Path))?;
        let map = writer(transport, open(OutputKind::Map))?;
        let tf = writer(transport, open(OutputKind::Tf))?;
        transport.announce(namespace, name)?;
        Ok(Self { keypoints, debug_image, cloud, pair_pose, pose, odometry, path, map, tf })
    }

    /// Sends an output on its writer.
    fn emit(&self, output: &Output) -> Result<(), TransportError> {
        match output {
            Output::Keypoints(m) => self.keypoints.write(m),
            Output::DebugImage(m) => self.debug_image.write(m),
            Output::Cloud(m) => self.cloud.write(m),
            Output::PairPose(m) => self.pair_pose.write(m),
            Output::Pose(m) => self.pose.write(m),
            Output::Odometry(m) => self.odometry.write(m),
            Output::Path(m) => self.path.write(m),
            Output::Map(m) => self.map.write(m),
            Output::Tf(m) => self.tf.write(m),
        }
    }

    /// Someone may read this output now (a stack that does not say counts as yes).
    fn wanted(&self, kind: OutputKind) -> bool {
        let matched = match kind {
            OutputKind::Keypoints => self.keypoints.matched(),
            OutputKind::DebugImage => self.debug_image.matched(),
            OutputKind::Cloud => self.cloud.matched(),
            OutputKind::PairPose => self.pair_pose.matched(),
            OutputKind::Pose => self.pose.matched(),
            OutputKind::Odometry => self.odometry.matched(),
            OutputKind::Path => self.path.matched(),
            OutputKind::Map => self.map.matched(),
            OutputKind::Tf => self.tf.matched(),
        };
        matched.is_none_or(|n| n > 0)
    }
}

/// A frame as it arrived.
struct Input {
    header: std_msgs::Header,
    frame: Arc<Frame>,
}

/// Where the node's pipeline puts its outputs: the Cyclone writers. What DDS does not take is
/// counted, not fatal.
struct Sink<'a> {
    publishers: &'a Publishers,
    stats: &'a Stats,
}

impl OutputSink for Sink<'_> {
    type Error = std::convert::Infallible;

    fn emit(&mut self, output: Output) -> Result<(), Self::Error> {
        let debug = matches!(output, Output::DebugImage(_));
        match self.publishers.emit(&output) {
            Ok(()) if debug => self.stats.bump(Counter::DebugImages),
            Ok(()) => {}
            Err(e) => {
                self.stats.bump(Counter::PublishErrors);
                tracing::debug!("{e}: {:?}", std::error::Error::source(&e));
            }
        }
        Ok(())
    }

    /// The debug image is drawn only while someone reads it.
    fn wants(&self, kind: OutputKind) -> bool {
        kind != OutputKind::DebugImage || self.publishers.wanted(kind)
    }
}

/// What the DDS loop and the two workers share.
struct Shared {
    /// The parameter services change the store; the pipeline gets every change.
    store: Arc<Mutex<ParamStore>>,
    pipeline: Pipeline,
    frames: LatestSlot<Input>,
    pairs: LatestSlot<PairJob>,
    superpoint: Arc<BackgroundLoad<dyn FeatureExtractor>>,
    dust3r: Arc<BackgroundLoad<dyn PairReconstructor>>,
    /// The DUSt3R worker is on a pair (the SuperPoint worker then leaves it its share).
    pair_in_flight: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn sink<'a>(&'a self, publishers: &'a Publishers) -> Sink<'a> {
        Sink { publishers, stats: self.pipeline.stats() }
    }
}

/// SuperPoint worker, once the model is ready: the pipeline's frame side on every frame it
/// takes; the pairs it starts go to the DUSt3R worker (unless DUSt3R cannot run).
fn superpoint_worker(shared: &Shared, publishers: &Publishers, stop: &Cancel) {
    let Some(features) = shared.superpoint.wait(stop) else {
        shared.pairs.close();
        return;
    };
    let (pipeline, stats) = (&shared.pipeline, shared.pipeline.stats());
    let mut side = pipeline.frame_side();
    let mut sink = shared.sink(publishers);
    // With both models on the CPU, a pair in flight is guaranteed `dust3r_cpu_share` of the
    // time: after each frame this worker rests before it takes the next (see `rest_after`).
    let p = pipeline.params();
    let on_shared_cores = [p.superpoint_backend, p.dust3r_backend] == [BackendKind::Cpu; 2];
    let mut rest_until = None;
    loop {
        if let Some(until) = rest_until.take().filter(|_| shared.pair_in_flight.load(Ordering::Relaxed)) {
            let pause = Instant::saturating_duration_since(&until, Instant::now());
            if !pause.is_zero() {
                shared.frames.rest(pause);
                stats.add(Counter::SuperPointRestMs, pause.as_millis() as u64);
            }
        }
        let Some(Input { header, frame }) = shared.frames.next() else { break };
        let t = Instant::now();
        let pairs = !matches!(shared.dust3r.phase(), Phase::Failed(_));
        let Ok(done) = pipeline.on_frame(&mut side, header, frame, features.as_ref(), pairs, &mut sink);
        if done.pair.is_some_and(|job| shared.pairs.put(job)) {
            stats.bump(Counter::PairDrops);
        }
        if on_shared_cores {
            rest_until = Some(Instant::now() + rest_after(t.elapsed(), pipeline.params().dust3r_cpu_share));
        }
    }
    shared.pairs.close();
}

/// DUSt3R worker, once the model is ready: the pipeline's pair side on the newest keyframe
/// pair. A pair in flight at shutdown is abandoned (the CPU model checks `stop` between blocks)
/// and publishes nothing.
fn dust3r_worker(shared: &Shared, publishers: &Publishers, stop: &Cancel) {
    let Some(model) = shared.dust3r.wait(stop) else { return };
    // Pairs run on threads of their own below SuperPoint's priority, so that a frame never waits
    // for a pair's blocks on the shared cores.
    let nice = shared.pipeline.params().dust3r_nice;
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
    // The map lives on this thread only: growing it never holds up a frame.
    let mut side = PairSide::default();
    let mut sink = shared.sink(publishers);
    while let Some(job) = shared.pairs.next() {
        let _in_flight = InFlight::mark(&shared.pair_in_flight);
        let Ok(done) = shared.pipeline.on_pair(&mut side, &job, model, stop, &mut sink);
        if done == PairDone::Abandoned {
            break;
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

/// Most samples one input topic gives one turn of the DDS loop (the newest frame wins anyway;
/// the bound keeps a flooding writer from starving the other topics).
const MAX_TAKE: usize = 1000;

/// Takes the waiting samples of `reader` (on `topic`) into `each`. A sample that does not
/// decode as the topic's type is counted and reported by the pipeline, never dropped silently;
/// the reader has moved past it, so the next one is taken. Returns whether there was any.
fn take_all<T>(reader: &dyn Reader<T>, topic: &str, pipeline: &Pipeline, mut each: impl FnMut(T)) -> bool {
    for n in 0..MAX_TAKE {
        match reader.take() {
            Ok(Some(msg)) => each(msg),
            Ok(None) => return n > 0,
            Err(e) => pipeline.on_malformed(topic, &e),
        }
    }
    true
}

/// The node's DDS inputs (each with its resolved topic) and its own outputs besides the
/// pipeline's (diagnostics, /rosout).
struct Io {
    raw: Option<(Box<dyn Reader<sensor_msgs::Image>>, String)>,
    compressed: Option<(Box<dyn Reader<sensor_msgs::CompressedImage>>, String)>,
    camera_info: (Box<dyn Reader<sensor_msgs::CameraInfo>>, String),
    depth: Option<(Box<dyn Reader<sensor_msgs::Image>>, String)>,
    clock: Option<(Box<dyn Reader<rosgraph_msgs::Clock>>, String)>,
    tf_static: Option<(Box<dyn Reader<tf2_msgs::TFMessage>>, String)>,
    /// /tf, with `scale_source: odometry`: the robot's odometry.
    tf: Option<(Box<dyn Reader<tf2_msgs::TFMessage>>, String)>,
    diagnostics: Box<dyn Writer<diagnostic_msgs::DiagnosticArray>>,
    rosout: Box<dyn Writer<rcl_interfaces::Log>>,
    /// The input sockets' receive buffer, asked for and granted.
    receive_buffer: ReceiveBuffer,
    /// Image samples the image reader had found lost when last asked.
    frames_lost: std::cell::Cell<u64>,
}

/// Everything the DDS loop needs besides the shared state.
struct Loop<'a> {
    io: Io,
    services: &'a ParamServices,
    /// `~/reset` and `~/save_map`.
    node_services: &'a NodeServices,
    /// Where the services' clients' reply readers are looked up (see [`crate::replies`]).
    participant: &'a Participant,
    /// Where a reset's cleared path and map go.
    publishers: &'a Publishers,
    log_records: Option<std::sync::mpsc::Receiver<rosout::Record>>,
    logger: String,
    fqn: &'a str,
    /// The resolved input topics, for /diagnostics.
    image_topic: &'a str,
    camera_info_topic: &'a str,
    /// The scale source's topic: depth with `scale_source: depth`, /tf with `odometry`.
    scale_topic: Option<&'a str>,
}

/// The DDS loop: newest frame wins; camera info and clock kept; parameter requests answered
/// (and the pipeline given every change); log records to /rosout; diagnostics at 1 Hz. Returns
/// when `stop` is set.
fn dds_loop(l: &Loop<'_>, shared: &Shared, stop: &Cancel) {
    let use_sim_time = shared.pipeline.params().use_sim_time;
    let mut sim_time: Option<builtin_interfaces::Time> = None;
    let mut last_diag = Instant::now();
    let mut history = History::new(last_diag);
    while !stop.is_cancelled() {
        let mut got = take_inputs(&l.io, shared, &mut sim_time);
        let stamp = if use_sim_time { sim_time.clone().unwrap_or_default() } else { wall_time() };
        let readers = l.participant.readers();
        if l.services.poll(&stamp, &readers) > 0 {
            got = true;
            if let Ok(store) = shared.store.lock() {
                shared.pipeline.set_params(store.params().clone());
            }
        }
        let handler = &mut Handler { shared, publishers: l.publishers, stamp: stamp.clone() };
        got |= l.node_services.poll(handler, &readers) > 0;
        l.forward_log_records();
        if last_diag.elapsed() >= Duration::from_secs(1) {
            last_diag = Instant::now();
            l.publish_diagnostics(shared, &mut history, last_diag, stamp);
        }
        if !got {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// `~/reset` and `~/save_map` on the pipeline, from the DDS loop at `stamp`.
struct Handler<'a> {
    shared: &'a Shared,
    publishers: &'a Publishers,
    stamp: builtin_interfaces::Time,
}

impl ServiceHandler for Handler<'_> {
    fn reset(&mut self) -> TriggerResponse {
        let mut sink = self.shared.sink(self.publishers);
        for output in self.shared.pipeline.reset(self.stamp.clone()) {
            let Ok(()) = sink.emit(output);
        }
        let message = "a new keyframe chain starts at the next frame; map cleared";
        tracing::info!("~/reset: {message}");
        TriggerResponse { success: true, message: message.into() }
    }

    fn save_map(&mut self) -> TriggerResponse {
        let path = home_expanded(&self.shared.pipeline.params().map_save_path);
        match self.shared.pipeline.save_map(&path) {
            Ok(n) => {
                tracing::info!("map saved: {n} points in {}", path.display());
                TriggerResponse { success: true, message: format!("{n} points saved to {}", path.display()) }
            }
            Err(e) => {
                let reason = match std::error::Error::source(&e) {
                    Some(source) => format!("{e}: {source}"),
                    None => e.to_string(),
                };
                tracing::warn!("~/save_map: {reason}");
                TriggerResponse { success: false, message: reason }
            }
        }
    }
}

/// `path` with a leading `~/` taken as the user's home (`HOME`), as ROS tools read paths.
fn home_expanded(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

/// Takes what the input topics hold: frames decoded into the slot (newest wins), the rest into
/// the pipeline or the clock. Returns whether there was anything.
fn take_inputs(io: &Io, shared: &Shared, sim_time: &mut Option<builtin_interfaces::Time>) -> bool {
    let pipeline = &shared.pipeline;
    let accept = |msg| {
        if let Some((header, frame)) = pipeline.on_image(msg) {
            if shared.frames.put(Input { header, frame: Arc::new(frame) }) {
                pipeline.stats().bump(Counter::FrameDrops);
            }
        }
    };
    let mut got = false;
    if let Some((sub, topic)) = &io.raw {
        got |= take_all(sub.as_ref(), topic, pipeline, |msg| accept(CameraImage::Raw(msg)));
    }
    if let Some((sub, topic)) = &io.compressed {
        got |= take_all(sub.as_ref(), topic, pipeline, |msg| accept(CameraImage::Compressed(msg)));
    }
    let image_lost = match (&io.raw, &io.compressed) {
        (Some((sub, topic)), _) => Some((sub.lost(), topic)),
        (None, Some((sub, topic))) => Some((sub.lost(), topic)),
        (None, None) => None,
    };
    if let Some((lost, topic)) = image_lost {
        let new = lost.saturating_sub(io.frames_lost.replace(lost));
        if new > 0 {
            pipeline.on_frames_lost(topic, new, &io.receive_buffer);
        }
    }
    let (sub, topic) = &io.camera_info;
    got |= take_all(sub.as_ref(), topic, pipeline, |info| pipeline.on_camera_info(info));
    if let Some((sub, topic)) = &io.depth {
        got |= take_all(sub.as_ref(), topic, pipeline, |depth| pipeline.on_depth(&depth));
    }
    if let Some((sub, topic)) = &io.clock {
        got |= take_all(sub.as_ref(), topic, pipeline, |clock| *sim_time = Some(clock.clock));
    }
    if let Some((sub, topic)) = &io.tf_static {
        got |= take_all(sub.as_ref(), topic, pipeline, |msg| pipeline.on_static_transforms(&msg));
    }
    if let Some((sub, topic)) = &io.tf {
        got |= take_all(sub.as_ref(), topic, pipeline, |msg| pipeline.on_transforms(&msg));
    }
    got
}

/// A model's loader as /diagnostics shows it; a ready model describes its backends anew each
/// time (a server's state changes).
fn status_of<M: ?Sized>(loader: &BackgroundLoad<M>, ready: impl Fn(&M) -> (String, Vec<BackendHealth>)) -> ModelStatus {
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
struct LoadSteps<'a, M: ?Sized>(&'a BackgroundLoad<M>);

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
    loader: &Arc<BackgroundLoad<M>>,
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
    /// /diagnostics now, from the counters' history.
    fn publish_diagnostics(
        &self,
        shared: &Shared,
        history: &mut History,
        now: Instant,
        stamp: builtin_interfaces::Time,
    ) {
        let stats = shared.pipeline.stats();
        let params = shared.pipeline.params();
        let limits = params.diagnostic_limits;
        // The window, and the rate's 5 s when the window is shorter.
        let keep = Duration::from_secs_f64(limits.window).max(sp_dust3r_core::diagnostics::RATE_WINDOW);
        history.record(now, stats.snapshot(), keep);
        let report = Report {
            fqn: self.fqn,
            stamp,
            limits,
            image_topic: self.image_topic,
            camera_info_topic: self.camera_info_topic,
            camera_info: describe_camera_info(&shared.pipeline.camera_info()),
            superpoint: status_of(&shared.superpoint, |m| (m.describe(), m.health())),
            dust3r: status_of(&shared.dust3r, |m| (m.describe(), m.health())),
            scale: self.scale_topic.map(|topic| ScaleReport {
                source: params.scale_source.name(),
                topic,
                track: shared.pipeline.scale(),
                max_unmeasured: params.scale_max_unmeasured,
            }),
            receive_buffer: self.io.receive_buffer,
        };
        if self.io.diagnostics.write(&diagnostics(stats, history, report)).is_err() {
            stats.bump(Counter::PublishErrors);
        }
    }

    /// Log records so far to /rosout; they carry wall time, as rcl's do.
    fn forward_log_records(&self) {
        if let Some(rx) = &self.log_records {
            for record in rx.try_iter() {
                let _ = self.io.rosout.write(&record.to_log(&self.logger, wall_time()));
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
    let outputs: Vec<(String, Qos)> = OutputKind::ALL.iter().map(|k| (topic(k.topic()), k.default_qos())).collect();
    let (store, warnings) = ParamStore::resolve_with_outputs(ros, &fqn, &outputs)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let output_qos: Vec<(String, Qos)> =
        outputs.iter().map(|(t, default)| (t.clone(), store.output_qos(t, *default))).collect();
    for ((t, qos), (_, default)) in output_qos.iter().zip(&outputs) {
        if qos != default {
            tracing::info!("publisher on {t}: {qos} (qos_overrides)");
        }
    }
    let params = store.params().clone();
    let store = Arc::new(Mutex::new(store));

    let receive_buffer = receive_buffer(params.receive_buffer_size);
    let (mut transport, participant) = Transport::join(&namespace, &name, receive_buffer.requested)?;
    let inputs = input_topics(&ros.remaps, &namespace, params.compressed_input);
    let input = &inputs.image;
    let io = open_io(&mut transport, &params, &inputs, receive_buffer)?;
    let qos_of = |t: &str| output_qos.iter().find(|(o, _)| o == t).map_or(Qos::OUTPUTS, |(_, q)| *q);
    let publishers = Publishers::advertise(&mut transport, &namespace, &name, topic, qos_of)?;
    let services = ParamServices::new(transport.node_mut(), &fqn, Arc::clone(&store))?;
    let node_services = NodeServices::new(transport.node_mut(), &fqn)?;
    let spin_thread = transport.spin()?;
    let depth = params.scale_source;
    let with_depth = if depth == ScaleSource::Depth { format!(", depth {}", inputs.depth) } else { String::new() };
    tracing::info!("node {fqn} up (input {input} with {}{with_depth}); loading the models", inputs.camera_info);
    let superpoint: Arc<BackgroundLoad<dyn FeatureExtractor>> = Arc::new(BackgroundLoad::new("finding the weights"));
    let dust3r: Arc<BackgroundLoad<dyn PairReconstructor>> = Arc::new(BackgroundLoad::new("finding the weights"));
    let config = sp_dust3r_core::backend::build::BackendConfig { cancel: stop.clone(), ..params.backend_config() };
    let c = config.clone();
    load_in_background("SuperPoint", &superpoint, move |p| build_superpoint(&c, Some(p)), |m| m.describe());
    load_in_background("DUSt3R", &dust3r, move |p| build_dust3r(&config, Some(p)), |m| m.describe());

    let shared = Shared {
        store,
        pipeline: Pipeline::new(params),
        frames: LatestSlot::new(),
        pairs: LatestSlot::new(),
        superpoint,
        dust3r,
        pair_in_flight: std::sync::atomic::AtomicBool::new(false),
    };
    let dds = Loop {
        io,
        services: &services,
        node_services: &node_services,
        participant: &participant,
        publishers: &publishers,
        log_records,
        logger: rosout::logger_name(&fqn),
        fqn: &fqn,
        image_topic: input,
        camera_info_topic: &inputs.camera_info,
        scale_topic: match depth {
            ScaleSource::None => None,
            ScaleSource::Depth => Some(inputs.depth.as_str()),
            ScaleSource::Odometry => Some(TF),
        },
    };
    std::thread::scope(|s| {
        s.spawn(|| superpoint_worker(&shared, &publishers, &stop));
        s.spawn(|| dust3r_worker(&shared, &publishers, &stop));
        dds_loop(&dds, &shared, &stop);
        shared.frames.close();
    });
    let stats = shared.pipeline.stats();
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
    drop(publishers);
    drop(services);
    drop(node_services);
    // Dropping the node stops the spinner.
    drop(transport);
    if spin_thread.join().is_err() {
        tracing::warn!("the DDS spinner thread panicked");
    }
    drop(participant);
    Ok(())
}

/// The receive buffer the input's sockets will get when they ask for `requested` bytes; one
/// WARN when the kernel grants less, with the sysctl that lets it grant all.
fn receive_buffer(requested: usize) -> ReceiveBuffer {
    let buffer = match granted_receive_buffer(requested) {
        Ok(granted) => ReceiveBuffer { requested, granted: Some(granted) },
        Err(e) => {
            tracing::warn!("cannot read the receive buffer the kernel grants: {e}");
            ReceiveBuffer { requested, granted: None }
        }
    };
    if let Some(shortfall) = buffer.shortfall() {
        tracing::warn!(
            "the kernel limits the DDS input sockets (net.core.rmem_max), {shortfall} (a file in /etc/sysctl.d/ \
             keeps it); a camera frame larger than the buffer can be lost whole"
        );
    }
    buffer
}

/// The node's subscriptions (what `params` asks for) and its own publishers.
fn open_io(
    t: &mut Transport,
    params: &NodeParams,
    inputs: &InputTopics,
    receive_buffer: ReceiveBuffer,
) -> Result<Io, TransportError> {
    fn with_topic<S>(topic: &str) -> impl FnOnce(S) -> (S, String) + '_ {
        move |sub| (sub, topic.to_string())
    }
    let input = &inputs.image;
    let compressed = params.compressed_input;
    Ok(Io {
        raw: (!compressed).then(|| t.reader(input, Qos::SENSOR_DATA)).transpose()?.map(with_topic(input)),
        compressed: compressed.then(|| t.reader(input, Qos::SENSOR_DATA)).transpose()?.map(with_topic(input)),
        camera_info: (t.reader(&inputs.camera_info, Qos::SENSOR_DATA)?, inputs.camera_info.clone()),
        depth: (params.scale_source == ScaleSource::Depth)
            .then(|| t.reader(&inputs.depth, Qos::SENSOR_DATA))
            .transpose()?
            .map(with_topic(&inputs.depth)),
        clock: params.use_sim_time.then(|| t.reader(CLOCK, Qos::CLOCK)).transpose()?.map(with_topic(CLOCK)),
        // Only with base_frame: the camera's mount is all the node reads of the tree.
        tf_static: params
            .base_frame
            .is_some()
            .then(|| t.reader(TF_STATIC, Qos::TF_STATIC))
            .transpose()?
            .map(with_topic(TF_STATIC)),
        tf: (params.scale_source == ScaleSource::Odometry)
            .then(|| t.reader(TF, Qos::TF))
            .transpose()?
            .map(with_topic(TF)),
        diagnostics: t.writer(Role::Diagnostics, DIAGNOSTICS, Qos::OUTPUTS)?,
        rosout: t.writer(Role::Rosout, ROSOUT, Qos::ROSOUT)?,
        receive_buffer,
        frames_lost: std::cell::Cell::new(0),
    })
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
