//! The offline driver: every frame of a recorded bag, in order, through the live node's
//! pipeline ([`Pipeline`]), each pair right after the keyframe that starts it (or, with
//! [`Models::pair_lag`], as late as a live node's DUSt3R would answer); outputs written to a bag
//! with the input stamps. Deterministic (no wall clock).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{BagError, BagWriter, McapFile};
use crate::backend::{FeatureExtractor, PairReconstructor};
use crate::cancel::Cancel;
use crate::diagnostics::{Counter, Stats};
use crate::msg::{from_cdr, sensor_msgs, tf2_msgs, CdrError, RosMessage};
use crate::outputs::{Output, OutputKind, OutputSink};
use crate::params::topics::{TF, TF_STATIC};
use crate::params::NodeParams;
use crate::pipeline::{CameraImage, FrameSide, PairDone, PairJob, PairSide, Pipeline};

/// Which input topics are the camera.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraTopics {
    /// The image topic.
    pub image: String,
    /// Whether it carries sensor_msgs/CompressedImage.
    pub compressed: bool,
    /// The CameraInfo topic, if any.
    pub camera_info: Option<String>,
    /// The registered depth topic (`scale_source: depth`; see [`choose_depth_topic`]).
    pub depth: Option<String>,
}

/// Why the camera topics could not be chosen.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopicError {
    /// No image topic in the bag.
    #[error("the bag has no sensor_msgs/Image or CompressedImage topic (topics: {0})")]
    NoImage(String),
    /// Several image topics and none chosen.
    #[error("the bag has several image topics ({0}); choose one with --image-topic")]
    Ambiguous(String),
    /// No depth topic in the bag, or several and none chosen.
    #[error("scale_source depth needs a registered depth topic: {0}; choose one with --depth-topic")]
    NoDepth(String),
    /// The chosen topic is not an image topic.
    #[error("topic {topic} is {found}, not sensor_msgs/msg/Image or CompressedImage")]
    NotAnImage {
        /// The chosen topic.
        topic: String,
        /// Its type, or that it is missing.
        found: String,
    },
}

const IMAGE: &str = sensor_msgs::Image::ROS_TYPE;
const COMPRESSED: &str = sensor_msgs::CompressedImage::ROS_TYPE;
const CAMERA_INFO: &str = sensor_msgs::CameraInfo::ROS_TYPE;

/// The camera topics: the given image topic, or the bag's only Image/CompressedImage topic; the
/// given camera_info topic, or the CameraInfo topic beside the image (same namespace), or the
/// only one.
pub fn choose_topics(
    topics: &[(String, String)],
    image: Option<&str>,
    camera_info: Option<&str>,
) -> Result<CameraTopics, TopicError> {
    let list = || topics.iter().map(|(t, ty)| format!("{t} [{ty}]")).collect::<Vec<_>>().join(", ");
    let (image, ty) = match image {
        Some(name) => {
            let ty = topics.iter().find(|(t, _)| t == name).map(|(_, ty)| ty.clone()).unwrap_or_default();
            if ty != IMAGE && ty != COMPRESSED {
                return Err(TopicError::NotAnImage {
                    topic: name.to_string(),
                    found: if ty.is_empty() { "not in the bag".into() } else { ty },
                });
            }
            (name.to_string(), ty)
        }
        None => {
            // A depth camera's topics are Images too, and never the colour image.
            let images: Vec<&(String, String)> =
                topics.iter().filter(|(t, ty)| (ty == IMAGE || ty == COMPRESSED) && !t.contains("depth")).collect();
            match images[..] {
                [] => return Err(TopicError::NoImage(list())),
                [(t, ty)] => (t.clone(), ty.clone()),
                _ => {
                    return Err(TopicError::Ambiguous(
                        images.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>().join(", "),
                    ))
                }
            }
        }
    };
    let infos: Vec<&String> = topics.iter().filter(|(_, ty)| ty == CAMERA_INFO).map(|(t, _)| t).collect();
    let ns = |t: &str| t.rsplit_once('/').map(|(n, _)| n.to_string()).unwrap_or_default();
    let image_ns = ns(image.trim_end_matches("/compressed"));
    let camera_info = match camera_info {
        Some(c) => Some(c.to_string()),
        None => infos
            .iter()
            .find(|t| ns(t) == image_ns)
            .or(if infos.len() == 1 { infos.first() } else { None })
            .map(|t| t.to_string()),
    };
    Ok(CameraTopics { image, compressed: ty == COMPRESSED, camera_info, depth: None })
}

/// Where registered depth images are published by the usual drivers: RealSense's aligned depth,
/// openni's registered depth and depth_image_proc's, the TUM bags' `depth/image`.
pub const DEPTH_TOPIC_ENDINGS: [&str; 4] =
    ["aligned_depth_to_color/image_raw", "depth_registered/image_raw", "depth/image_raw", "depth/image"];

/// The depth topic: the given one (a sensor_msgs/Image topic), or the bag's only Image topic
/// whose name ends as a registered depth topic does ([`DEPTH_TOPIC_ENDINGS`]).
pub fn choose_depth_topic(topics: &[(String, String)], depth: Option<&str>) -> Result<String, TopicError> {
    if let Some(name) = depth {
        let ty = topics.iter().find(|(t, _)| t == name).map(|(_, ty)| ty.clone()).unwrap_or_default();
        if ty != IMAGE {
            let found = if ty.is_empty() { "not in the bag".into() } else { ty };
            return Err(TopicError::NotAnImage { topic: name.to_string(), found });
        }
        return Ok(name.to_string());
    }
    let depth: Vec<&String> = topics
        .iter()
        .filter(|(t, ty)| ty == IMAGE && DEPTH_TOPIC_ENDINGS.iter().any(|e| t.ends_with(e)))
        .map(|(t, _)| t)
        .collect();
    match depth[..] {
        [t] => Ok(t.clone()),
        [] => {
            Err(TopicError::NoDepth(format!("the bag has no Image topic ending in {}", DEPTH_TOPIC_ENDINGS.join(", "))))
        }
        _ => Err(TopicError::NoDepth(format!(
            "the bag has several ({})",
            depth.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The topics a replay with `params` reads: the camera's ([`choose_topics`]), and with
/// `scale_source: depth` the registered depth topic ([`choose_depth_topic`], `depth` if given).
pub fn replay_topics(
    topics: &[(String, String)],
    (image, camera_info, depth): (Option<&str>, Option<&str>, Option<&str>),
    params: &NodeParams,
) -> Result<CameraTopics, TopicError> {
    let mut cameras = choose_topics(topics, image, camera_info)?;
    if params.scale_source == crate::vo::scale::ScaleSource::Depth {
        cameras.depth = Some(choose_depth_topic(topics, depth)?);
    }
    Ok(cameras)
}

pub use crate::params::topics::output_topic;

/// The outputs of a replay go to a bag, at the log time of the input that made them.
struct BagSink<'a> {
    out: &'a mut BagWriter,
    image_topic: &'a str,
    log_time: u64,
}

impl BagSink<'_> {
    /// Declares the outputs' topics before the first message (so a bag without poses still
    /// lists the pose topics).
    fn declare(&mut self, kinds: &[OutputKind]) -> Result<(), BagError> {
        for kind in kinds {
            let topic = output_topic(self.image_topic, kind.topic());
            self.out.add_published_topic(&topic, kind.definition(), kind.default_qos())?;
        }
        Ok(())
    }
}

impl OutputSink for BagSink<'_> {
    type Error = BagError;

    fn emit(&mut self, output: Output) -> Result<(), BagError> {
        let topic = output_topic(self.image_topic, output.kind().topic());
        let bytes = output.to_cdr().map_err(|e| BagError::Write { path: topic.clone(), reason: e.to_string() })?;
        self.out.write(&topic, self.log_time, self.log_time, &bytes)
    }

    /// The replay makes no debug images.
    fn wants(&self, kind: OutputKind) -> bool {
        kind != OutputKind::DebugImage
    }
}

/// What the replay did: the pipeline's counters (as /diagnostics names them) and what it
/// measured on each frame and pair.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplaySummary {
    counts: Vec<u64>,
    by_kind: BTreeMap<String, u64>,
    /// For keyframes tracked when they arrived: how far tracking's pose was from the pair's
    /// (degrees, chain units).
    pub keyframe_gaps: Vec<(f64, f64)>,
    /// SuperPoint time per frame, ms.
    pub superpoint_ms: Vec<f64>,
    /// DUSt3R time per pair, ms.
    pub dust3r_ms: Vec<f64>,
    /// Stopped by `cancel` (SIGINT) before the end; what came before is in the output.
    pub interrupted: bool,
}

impl ReplaySummary {
    /// A counter's value.
    pub fn get(&self, c: Counter) -> u64 {
        self.counts.get(c as usize).copied().unwrap_or(0)
    }

    /// Pairs with a pose.
    pub fn poses(&self) -> u64 {
        self.get(Counter::PairsDone) - self.get(Counter::NoPose)
    }

    /// Every counter by its /diagnostics key, the errors by kind among them.
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let named = Counter::ALL.iter().map(|&c| (c.key().to_string(), self.get(c)));
        named.chain(self.by_kind.clone()).collect()
    }

    fn take(&mut self, stats: &Stats) {
        (self.counts, self.by_kind) = (stats.snapshot(), stats.by_kind());
    }
}

/// The models a replay runs: SuperPoint on every frame, DUSt3R (when there is one) on the
/// keyframe pairs.
#[derive(Clone, Copy)]
pub struct Models<'a> {
    /// SuperPoint.
    pub features: &'a dyn FeatureExtractor,
    /// DUSt3R; `None`: keypoints only.
    pub pairs: Option<&'a dyn PairReconstructor>,
    /// Frames a pair takes: 0, it joins right after the keyframe that starts it; n, after n more
    /// frames, one pair at a time and the newest waiting one wins, as on a live node whose DUSt3R
    /// takes n frame periods (a pair still running when the input ends is left, as at shutdown).
    pub pair_lag: usize,
}

/// The replay's pipeline and where it is.
struct Replay<'a> {
    pipeline: Pipeline,
    frames: FrameSide,
    pairs: PairSide,
    models: Models<'a>,
    cancel: &'a Cancel,
    summary: ReplaySummary,
    /// The pair DUSt3R is on and the frames it still takes (with `pair_lag`).
    running: Option<(PairJob, usize)>,
    /// The pair that waits for it (newest wins).
    waiting: Option<PairJob>,
}

/// Replays `input` into `out`. Returns the summary, and the error that stopped it early (a
/// corrupt or truncated input; what was written before stays a valid bag once `out` finishes).
/// `cancel` (SIGINT) stops it between two frames or two DUSt3R steps, with `interrupted` set.
pub fn replay(
    input: &[McapFile],
    topics: &CameraTopics,
    out: &mut BagWriter,
    models: Models<'_>,
    params: &NodeParams,
    cancel: &Cancel,
    mut progress: impl FnMut(&ReplaySummary),
) -> Result<(ReplaySummary, Option<BagError>), BagError> {
    let mut sink = BagSink { out, image_topic: &topics.image, log_time: 0 };
    sink.declare(&[OutputKind::Keypoints])?;
    if models.pairs.is_some() {
        sink.declare(&OutputKind::OF_PAIRS)?;
        sink.declare(&OutputKind::of_trajectory(params.publish_tf))?;
    }
    let pipeline = Pipeline::new(params.clone());
    let frames = pipeline.frame_side();
    let mut r = Replay {
        pipeline,
        frames,
        pairs: PairSide::default(),
        models,
        cancel,
        summary: ReplaySummary::default(),
        running: None,
        waiting: None,
    };
    // The robot's odometry on /tf, when it gives the scale (the node then broadcasts no TF).
    let robot_odometry = params.scale_source == crate::vo::scale::ScaleSource::Odometry;
    for file in input {
        for m in file.messages() {
            if cancel.is_cancelled() {
                r.summary.interrupted = true;
            }
            let m = match m {
                Ok(m) if !r.summary.interrupted => m,
                Ok(_) => return Ok((r.finish(), None)),
                Err(e) => return Ok((r.finish(), Some(e))),
            };
            let is_image = m.topic == topics.image;
            let is_info = Some(&m.topic) == topics.camera_info.as_ref();
            let is_depth = Some(&m.topic) == topics.depth.as_ref();
            let tf_static = m.topic == TF_STATIC && m.ros_type == tf2_msgs::TFMessage::ROS_TYPE;
            let robot_tf = robot_odometry && m.topic == TF && m.ros_type == tf2_msgs::TFMessage::ROS_TYPE;
            if !(is_image || is_info || is_depth || tf_static || robot_tf) {
                continue;
            }
            // The camera topics go through unchanged, with their own schema and QoS.
            if let Some((encoding, schema)) = &m.schema {
                sink.out.add_topic(&m.topic, &m.ros_type, encoding, schema, Some(&m.channel_metadata))?;
            }
            sink.out.write(&m.topic, m.log_time, m.publish_time, &m.data)?;
            sink.log_time = m.log_time;
            let p = &r.pipeline;
            if tf_static || robot_tf {
                match from_cdr::<tf2_msgs::TFMessage>(&m.data) {
                    Ok(msg) if tf_static => p.on_static_transforms(&msg),
                    Ok(msg) => p.on_transforms(&msg),
                    Err(e) => p.on_malformed(&m.topic, &e),
                }
            } else if is_info {
                match from_cdr::<sensor_msgs::CameraInfo>(&m.data) {
                    Ok(info) => p.on_camera_info(info),
                    Err(e) => p.on_malformed(&m.topic, &e),
                }
            } else if is_depth {
                match from_cdr::<sensor_msgs::Image>(&m.data) {
                    Ok(depth) => p.on_depth(&depth),
                    Err(e) => p.on_malformed(&m.topic, &e),
                }
            } else {
                match camera_image(&m.data, topics.compressed) {
                    Ok(msg) => r.image(msg, &mut sink)?,
                    Err(e) => p.on_malformed(&m.topic, &e),
                }
            }
            r.summary.take(r.pipeline.stats());
            progress(&r.summary);
        }
    }
    Ok((r.finish(), None))
}

impl Replay<'_> {
    /// A camera image through the pipeline, then the pair that is due.
    fn image(&mut self, msg: CameraImage, sink: &mut BagSink<'_>) -> Result<(), BagError> {
        let Some((header, frame)) = self.pipeline.on_image(msg) else { return Ok(()) };
        let done = self.pipeline.on_frame(
            &mut self.frames,
            header,
            Arc::new(frame),
            self.models.features,
            self.models.pairs.is_some(),
            sink,
        )?;
        self.summary.superpoint_ms.extend(done.superpoint.map(ms));
        if done.pair.is_some_and(|job| self.waiting.replace(job).is_some()) {
            self.pipeline.stats().bump(Counter::PairDrops);
        }
        if let Some((_, left)) = &mut self.running {
            *left = left.saturating_sub(1);
        }
        if self.running.is_none() {
            self.running = self.waiting.take().map(|job| (job, self.models.pair_lag));
        }
        match self.running.take() {
            Some((job, 0)) => self.pair(&job, sink),
            running => {
                self.running = running;
                Ok(())
            }
        }
    }

    /// A pair through the pipeline.
    fn pair(&mut self, job: &PairJob, sink: &mut BagSink<'_>) -> Result<(), BagError> {
        let Some(model) = self.models.pairs else { return Ok(()) };
        let s = &mut self.summary;
        match self.pipeline.on_pair(&mut self.pairs, job, model, self.cancel, sink)? {
            PairDone::Done { took, keyframe_gap } => {
                s.dust3r_ms.push(ms(took));
                s.keyframe_gaps.extend(keyframe_gap);
            }
            PairDone::Failed => {}
            PairDone::Abandoned => s.interrupted = true,
        }
        Ok(())
    }

    fn finish(mut self) -> ReplaySummary {
        self.summary.take(self.pipeline.stats());
        self.summary
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A camera message from its CDR (`compressed`: a CompressedImage, else an Image).
pub fn camera_image(data: &[u8], compressed: bool) -> Result<CameraImage, CdrError> {
    Ok(if compressed {
        CameraImage::Compressed(from_cdr::<sensor_msgs::CompressedImage>(data)?)
    } else {
        CameraImage::Raw(from_cdr::<sensor_msgs::Image>(data)?)
    })
}
