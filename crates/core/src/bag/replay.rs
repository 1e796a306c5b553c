//! The offline driver: every frame of a recorded bag, in order, through the same backends,
//! keyframe logic and conversions as the live node; outputs written to a bag with the input
//! stamps. Deterministic (no drops, no wall clock).

use std::sync::Arc;
use std::time::Instant;

use super::{BagError, BagWriter, McapFile};
use crate::backend::{FeatureExtractor, PairReconstructor};
use crate::cancel::Cancel;
use crate::image::Frame;
use crate::msg::tf_static::StaticTransforms;
use crate::msg::{from_cdr, sensor_msgs, std_msgs, tf2_msgs, CdrError, RosMessage};
use crate::outputs::odom::{stamp_of, Mount, OdomOutputs};
use crate::outputs::{
    check_camera_info, frame_outputs, known_camera, pair_outputs, CameraInfoError, Output, OutputKind, OutputSink,
};
use crate::params::topics::TF_STATIC;
use crate::params::NodeParams;
use crate::pipeline::keyframes::{KeyframeDecision, KeyframeSelector};
use crate::pipeline::map::grow;
use crate::pipeline::odometry::{track_frame, Odometry, PairView};
use crate::superpoint::Keypoints;

/// Which input topics are the camera.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraTopics {
    /// The image topic.
    pub image: String,
    /// Whether it carries sensor_msgs/CompressedImage.
    pub compressed: bool,
    /// The CameraInfo topic, if any.
    pub camera_info: Option<String>,
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
            let images: Vec<&(String, String)> =
                topics.iter().filter(|(_, ty)| ty == IMAGE || ty == COMPRESSED).collect();
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
    Ok(CameraTopics { image, compressed: ty == COMPRESSED, camera_info })
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
            let (ros_type, definition) = kind.definition();
            let topic = output_topic(self.image_topic, kind.topic());
            self.out.add_defined_topic(&topic, ros_type, definition)?;
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
}

/// Why a camera message of the bag was skipped.
#[derive(Debug, thiserror::Error)]
pub enum SkipError {
    /// The message is not the CDR of its type.
    #[error(transparent)]
    Cdr(#[from] CdrError),
    /// The image inside cannot be used.
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),
    /// The camera info inside cannot be used.
    #[error(transparent)]
    CameraInfo(#[from] CameraInfoError),
}

/// What the replay did; per-stage times in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplaySummary {
    /// Camera messages read.
    pub messages: u64,
    /// Frames read.
    pub frames: u64,
    /// Frames that could not be decoded.
    pub bad_frames: u64,
    /// Frames or pairs a model failed on, and unusable CameraInfo messages.
    pub errors: u64,
    /// Keyframes taken.
    pub keyframes: u64,
    /// Pairs reconstructed.
    pub pairs: u64,
    /// Pairs with a pose.
    pub poses: u64,
    /// Frames placed on the keyframe chain by tracking.
    pub tracked: u64,
    /// Frames not tracked, by reason (`no_map` before the first pair; the rest: lost).
    pub not_tracked: std::collections::BTreeMap<&'static str, u64>,
    /// Keyframes on the chain.
    pub chained: u64,
    /// Pairs that could not join the chain.
    pub unchained: u64,
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

/// The models a replay runs: SuperPoint on every frame, DUSt3R (when there is one) on the
/// keyframe pairs.
#[derive(Clone, Copy)]
pub struct Models<'a> {
    /// SuperPoint.
    pub features: &'a dyn FeatureExtractor,
    /// DUSt3R; `None`: keypoints only.
    pub pairs: Option<&'a dyn PairReconstructor>,
}

/// A keyframe as replay keeps it: what DUSt3R needs of it and what the chain needs.
#[derive(Clone)]
struct Keyframe {
    header: std_msgs::Header,
    frame: Arc<Frame>,
    keypoints: Arc<Keypoints>,
}

/// Replays `input` into `out`. Returns the summary, and the error that stopped it early (a
/// corrupt or truncated input; what was written before stays a valid bag once `out` finishes).
/// `cancel` (SIGINT) stops it between two frames or two DUSt3R steps, with `interrupted` set.
pub fn replay(
    input: &[McapFile],
    topics: &CameraTopics,
    out: &mut BagWriter,
    Models { features, pairs }: Models<'_>,
    params: &NodeParams,
    cancel: &Cancel,
    mut progress: impl FnMut(&ReplaySummary),
) -> Result<(ReplaySummary, Option<BagError>), BagError> {
    let mut sink = BagSink { out, image_topic: &topics.image, log_time: 0 };
    sink.declare(&[OutputKind::Keypoints])?;
    if pairs.is_some() {
        sink.declare(&OutputKind::OF_PAIRS)?;
    }
    if pairs.is_some() {
        sink.declare(&OutputKind::of_trajectory(params.publish_tf))?;
    }
    let post = params.post_params();
    let mut keyframes: KeyframeSelector<Keyframe> = KeyframeSelector::new(params.keyframe_policy());
    let odometry_params = params.odometry_params();
    let mut odometry: Odometry<Keyframe> = Odometry::new(odometry_params);
    let mut map = None;
    let mut odom = OdomOutputs::new(&params.odom_frame, None);
    let mut tree = StaticTransforms::default();
    let mut camera_info: Option<sensor_msgs::CameraInfo> = None;
    let mut s = ReplaySummary::default();
    for file in input {
        for m in file.messages() {
            if cancel.is_cancelled() {
                s.interrupted = true;
                return Ok((s, None));
            }
            let m = match m {
                Ok(m) => m,
                Err(e) => return Ok((s, Some(e))),
            };
            let camera_topic = m.topic == topics.image || Some(&m.topic) == topics.camera_info.as_ref();
            let tf_static = m.topic == TF_STATIC && m.ros_type == tf2_msgs::TFMessage::ROS_TYPE;
            if !camera_topic && !tf_static {
                continue;
            }
            s.messages += 1;
            // The camera topics go through unchanged, with their own schema and QoS.
            if let Some((encoding, schema)) = &m.schema {
                sink.out.add_topic(&m.topic, &m.ros_type, encoding, schema, Some(&m.channel_metadata))?;
            }
            sink.out.write(&m.topic, m.log_time, m.publish_time, &m.data)?;
            sink.log_time = m.log_time;
            if tf_static {
                match from_cdr::<tf2_msgs::TFMessage>(&m.data) {
                    Ok(msg) => tree.insert(&msg),
                    Err(e) => tracing::warn!("ignoring a {TF_STATIC} message at {}: {e}", m.log_time),
                }
                continue;
            }
            if Some(&m.topic) == topics.camera_info.as_ref() {
                let checked = from_cdr::<sensor_msgs::CameraInfo>(&m.data)
                    .map_err(SkipError::from)
                    .and_then(|i| check_camera_info(&i).map(|_| i).map_err(SkipError::from));
                match checked {
                    Ok(i) => camera_info = Some(i),
                    Err(e) => {
                        s.errors += 1;
                        tracing::warn!("ignoring a camera_info message at {}: {e}", m.log_time);
                    }
                }
                continue;
            }
            s.frames += 1;
            let (header, frame) = match decode_frame(&m.data, topics.compressed) {
                Ok(x) => x,
                Err(e) => {
                    s.bad_frames += 1;
                    tracing::warn!("skipping frame {} (log time {}): {e}", s.frames, m.log_time);
                    progress(&s);
                    continue;
                }
            };
            let t = Instant::now();
            let kp = match features.detect(&frame, &post) {
                Ok(kp) => kp,
                Err(e) => {
                    s.errors += 1;
                    tracing::warn!("SuperPoint on frame {}: {e}", s.frames);
                    progress(&s);
                    continue;
                }
            };
            s.superpoint_ms.push(t.elapsed().as_secs_f64() * 1e3);
            for output in frame_outputs(&header, &frame, &kp, None) {
                sink.emit(output)?;
            }
            if let Some(model) = pairs {
                let frame = Arc::new(frame);
                let k = known_camera(camera_info.as_ref(), &frame).map(|k| k.intrinsics());
                let tracked = track_frame(odometry.anchor().as_deref(), &kp, k, &odometry_params.tracking);
                if let (None, Some(base)) = (&odom.mount, &params.base_frame) {
                    odom.mount = tree
                        .lookup(base, &header.frame_id)
                        .map(|t_base_cam| Mount { base_frame: base.clone(), t_base_cam });
                }
                match &tracked {
                    // With base_frame, nothing goes out until the camera's mount is known.
                    Ok(_) if params.base_frame.is_some() && odom.mount.is_none() => {
                        *s.not_tracked.entry("no_mount").or_default() += 1;
                        crate::warn_throttled!(
                            "no {TF_STATIC} transform from base_frame to {} yet: odometry waits for it",
                            header.frame_id
                        );
                    }
                    Ok(fp) => {
                        s.tracked += 1;
                        for output in odom.frame(&header, &fp.t_origin_frame, params.publish_tf) {
                            sink.emit(output)?;
                        }
                    }
                    Err(e) => *s.not_tracked.entry(e.kind()).or_default() += 1,
                }
                let this = Keyframe { header: header.clone(), frame, keypoints: Arc::new(kp) };
                match keyframes.decide(header.stamp.seconds(), &this.keypoints, &this) {
                    KeyframeDecision::Skip { .. } => {}
                    KeyframeDecision::First => {
                        // The first frame, or time went backwards (a new sequence).
                        s.keyframes += 1;
                        odometry.reset();
                        odom.reset();
                        map = None;
                    }
                    KeyframeDecision::New { previous, .. } => {
                        s.keyframes += 1;
                        if let Ok(fp) = &tracked {
                            odometry.keyframe_tracked(stamp_of(&header.stamp), fp.t_origin_frame);
                        }
                        // The new keyframe pairs with the chain's newest, so the pair can join it.
                        let first = odometry.anchor().map_or(previous, |a| a.payload.clone());
                        let t = Instant::now();
                        tracing::debug!("DUSt3R: pair ending at frame {} started", s.frames);
                        let result = pair_outputs(
                            model,
                            (&first.header, first.frame.as_ref()),
                            (&header, &this.frame),
                            camera_info.as_ref(),
                            params,
                        );
                        if cancel.is_cancelled() {
                            // Abandoned between two blocks: nothing of this pair is written.
                            tracing::info!("DUSt3R: pair ending at frame {} abandoned: interrupted", s.frames);
                            s.interrupted = true;
                            return Ok((s, None));
                        }
                        let r = match result {
                            Ok(r) => r,
                            Err(e) => {
                                s.errors += 1;
                                tracing::warn!("DUSt3R on the pair ending at frame {}: {e}", s.frames);
                                progress(&s);
                                continue;
                            }
                        };
                        s.dust3r_ms.push(t.elapsed().as_secs_f64() * 1e3);
                        s.pairs += 1;
                        match &r.no_pose {
                            None => s.poses += 1,
                            Some(reason) => {
                                tracing::info!("no pose for the pair ending at frame {}: {reason}", s.frames)
                            }
                        }
                        for output in r.outputs {
                            sink.emit(output)?;
                        }
                        let view = |k: &Keyframe| PairView {
                            stamp: stamp_of(&k.header.stamp),
                            payload: k.clone(),
                            keypoints: k.keypoints.as_ref().clone(),
                        };
                        match odometry.attach(view(&first), view(&this), &r.geometry) {
                            Ok(joined) => {
                                s.chained += joined.added.len() as u64;
                                s.keyframe_gaps.extend(joined.disagreement);
                                let added = joined.added.iter().filter_map(|&k| odometry.keyframe(k));
                                if let Err(e) = grow(&mut map, added.map(|k| k.as_ref()), &params.map_settings()) {
                                    tracing::warn!("map: {e}");
                                }
                                for output in odom.chain(&header.frame_id, odometry.path(), map.as_ref()) {
                                    sink.emit(output)?;
                                }
                            }
                            Err(e) => {
                                s.unchained += 1;
                                tracing::info!("the pair ending at frame {} does not join the chain: {e}", s.frames);
                            }
                        }
                    }
                }
            }
            progress(&s);
        }
    }
    Ok((s, None))
}

/// A camera message's header and frame (`compressed`: a CompressedImage, else an Image).
pub fn decode_frame(data: &[u8], compressed: bool) -> Result<(std_msgs::Header, Frame), SkipError> {
    if compressed {
        let c = from_cdr::<sensor_msgs::CompressedImage>(data)?;
        Ok((c.header, Frame::decode(&c.data)?))
    } else {
        let i = from_cdr::<sensor_msgs::Image>(data)?;
        let frame = Frame::from_raw(&i.encoding, i.width, i.height, i.step as usize, i.is_bigendian != 0, i.data)?;
        Ok((i.header, frame))
    }
}
