//! The offline driver: every frame of a recorded bag, in order, through the same backends,
//! keyframe logic and conversions as the live node; outputs written to a bag with the input
//! stamps. Deterministic (no drops, no wall clock).

use std::time::Instant;

use super::{BagError, BagWriter, McapFile};
use crate::backend::{FeatureExtractor, PairReconstructor};
use crate::image::Frame;
use crate::pipeline::keyframes::{KeyframeDecision, KeyframeSelector};
use crate::ros::convert::keypoints_msg;
use crate::ros::msg::{from_cdr, geometry_msgs, sensor_msgs, sp_dust3r_msgs, std_msgs, tf2_msgs, to_cdr, RosMessage};
use crate::ros::pair::{check_camera_info, reconstruct};
use crate::ros::params::NodeParams;

/// Which input topics are the camera.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraTopics {
    pub image: String,
    pub compressed: bool,
    pub camera_info: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopicError {
    #[error("the bag has no sensor_msgs/Image or CompressedImage topic (topics: {0})")]
    NoImage(String),
    #[error("the bag has several image topics ({0}); choose one with --image-topic")]
    Ambiguous(String),
    #[error("topic {topic} is {found}, not sensor_msgs/msg/Image or CompressedImage")]
    NotAnImage { topic: String, found: String },
}

const IMAGE: &str = "sensor_msgs/msg/Image";
const COMPRESSED: &str = "sensor_msgs/msg/CompressedImage";
const CAMERA_INFO: &str = "sensor_msgs/msg/CameraInfo";

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

/// Where the outputs go: beside the image topic, as the node's would under the camera's
/// namespace (`/cam/image_raw` -> `/cam/keypoints`).
pub fn output_topic(image_topic: &str, name: &str) -> String {
    let base = image_topic.trim_end_matches("/compressed");
    match base.rsplit_once('/') {
        Some((ns, _)) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => format!("/{name}"),
    }
}

/// What the replay did; per-stage times in milliseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplaySummary {
    pub messages: u64,
    pub frames: u64,
    pub bad_frames: u64,
    pub errors: u64,
    pub keyframes: u64,
    pub pairs: u64,
    pub poses: u64,
    pub superpoint_ms: Vec<f64>,
    pub dust3r_ms: Vec<f64>,
}

/// Replays `input` into `out`. Returns the summary, and the error that stopped it early (a
/// corrupt or truncated input; what was written before stays a valid bag once `out` finishes).
#[allow(clippy::too_many_arguments)]
pub fn replay(
    input: &[McapFile],
    topics: &CameraTopics,
    out: &mut BagWriter,
    features: &dyn FeatureExtractor,
    pairs: Option<&dyn PairReconstructor>,
    params: &NodeParams,
    mut progress: impl FnMut(&ReplaySummary),
) -> Result<(ReplaySummary, Option<BagError>), BagError> {
    let keypoints_topic = output_topic(&topics.image, "keypoints");
    let cloud_topic = output_topic(&topics.image, "pointcloud");
    let pair_topic = output_topic(&topics.image, "pair_pose");
    let pose_topic = output_topic(&topics.image, "pose");
    out.add_typed_topic::<sp_dust3r_msgs::Keypoints>(&keypoints_topic)?;
    if pairs.is_some() {
        out.add_typed_topic::<sensor_msgs::PointCloud2>(&cloud_topic)?;
        out.add_typed_topic::<sp_dust3r_msgs::PairPose>(&pair_topic)?;
        out.add_typed_topic::<geometry_msgs::PoseStamped>(&pose_topic)?;
        if params.publish_tf {
            out.add_typed_topic::<tf2_msgs::TFMessage>("/tf")?;
        }
    }
    let post = params.post_params();
    let mut keyframes: KeyframeSelector<(std_msgs::Header, std::sync::Arc<Frame>)> =
        KeyframeSelector::new(params.keyframe_policy());
    let mut camera_info: Option<sensor_msgs::CameraInfo> = None;
    let mut s = ReplaySummary::default();
    let write = |out: &mut BagWriter, topic: &str, t: u64, msg: &dyn erased::Cdr| -> Result<(), BagError> {
        let bytes = msg.cdr().map_err(|e| BagError::Write { path: String::new(), reason: e })?;
        out.write(topic, t, t, &bytes)
    };
    for file in input {
        for m in file.messages()? {
            let m = match m {
                Ok(m) => m,
                Err(e) => return Ok((s, Some(e))),
            };
            let camera_topic = m.topic == topics.image || Some(&m.topic) == topics.camera_info.as_ref();
            if !camera_topic {
                continue;
            }
            s.messages += 1;
            // The camera topics go through unchanged, with their own schema and QoS.
            if let Some((encoding, schema)) = &m.schema {
                out.add_topic(&m.topic, &m.ros_type, encoding, schema, Some(&m.channel_metadata))?;
            }
            out.write(&m.topic, m.log_time, m.publish_time, &m.data)?;
            if Some(&m.topic) == topics.camera_info.as_ref() {
                match from_cdr::<sensor_msgs::CameraInfo>(&m.data)
                    .map_err(|e| e.to_string())
                    .and_then(|i| check_camera_info(&i).map(|_| i))
                {
                    Ok(i) => camera_info = Some(i),
                    Err(e) => {
                        s.errors += 1;
                        tracing::warn!("ignoring a camera_info message at {}: {e}", m.log_time);
                    }
                }
                continue;
            }
            let decoded: Result<(std_msgs::Header, Frame), String> = if topics.compressed {
                from_cdr::<sensor_msgs::CompressedImage>(&m.data)
                    .map_err(|e| e.to_string())
                    .and_then(|c| Frame::decode(&c.data).map(|f| (c.header, f)).map_err(|e| e.to_string()))
            } else {
                from_cdr::<sensor_msgs::Image>(&m.data).map_err(|e| e.to_string()).and_then(|i| {
                    Frame::from_raw(&i.encoding, i.width, i.height, i.step as usize, i.is_bigendian != 0, i.data)
                        .map(|f| (i.header, f))
                        .map_err(|e| e.to_string())
                })
            };
            s.frames += 1;
            let (header, frame) = match decoded {
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
            write(
                out,
                &keypoints_topic,
                m.log_time,
                &keypoints_msg(header.clone(), frame.width(), frame.height(), &kp),
            )?;
            if let Some(model) = pairs {
                let stamp = header.stamp.seconds();
                let frame = std::sync::Arc::new(frame);
                match keyframes.decide(stamp, &kp, &(header.clone(), frame.clone())) {
                    KeyframeDecision::Skip { .. } => {}
                    KeyframeDecision::First => s.keyframes += 1,
                    KeyframeDecision::New { previous, .. } => {
                        s.keyframes += 1;
                        let t = Instant::now();
                        match reconstruct(
                            model,
                            (&previous.0, &previous.1),
                            (&header, &frame),
                            camera_info.as_ref(),
                            params,
                        ) {
                            Ok(r) => {
                                s.dust3r_ms.push(t.elapsed().as_secs_f64() * 1e3);
                                s.pairs += 1;
                                write(out, &cloud_topic, m.log_time, &r.cloud)?;
                                match r.pose {
                                    Ok((pair, pose, tf)) => {
                                        s.poses += 1;
                                        write(out, &pair_topic, m.log_time, &pair)?;
                                        write(out, &pose_topic, m.log_time, &pose)?;
                                        if params.publish_tf {
                                            write(
                                                out,
                                                "/tf",
                                                m.log_time,
                                                &tf2_msgs::TFMessage { transforms: vec![tf] },
                                            )?;
                                        }
                                    }
                                    Err(reason) => {
                                        tracing::info!("no pose for the pair ending at frame {}: {reason}", s.frames)
                                    }
                                }
                            }
                            Err(e) => {
                                s.errors += 1;
                                tracing::warn!("DUSt3R on the pair ending at frame {}: {e}", s.frames);
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

/// CDR of any generated message, behind one object-safe trait (the replay writes several types).
mod erased {
    pub trait Cdr {
        fn cdr(&self) -> Result<Vec<u8>, String>;
    }
    impl<T: serde::Serialize + super::RosMessage> Cdr for T {
        fn cdr(&self) -> Result<Vec<u8>, String> {
            super::to_cdr(self).map_err(|e| e.to_string())
        }
    }
}
