//! The live driver: a ROS 2 node on ros2-client (pure-Rust DDS). Camera frames in, SuperPoint
//! keypoints out, each output stamped with its input's header.
//!
//! Run it as launch files do:
//!
//!     sp_dust3r node --ros-args -r __ns:=/camera -p superpoint_weights:=/path/to/superpoint

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ros2_client::dds::rustdds::DomainParticipantBuilder;
use ros2_client::{Context, MessageTypeName, Name, NodeName, NodeOptions, QosProfile};
use ros2_client::{qos, Subscription};

use super::args::RosArgs;
use super::convert::keypoints_msg;
use super::msg::{sensor_msgs, sp_dust3r_msgs, RosMessage};
use super::params::{NodeParams, ParamError};
use crate::image::Frame;
use crate::superpoint::{PostParams, SuperPoint, HUB_MODEL};

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

/// The name a relative topic `name` gets after remapping (`-r name:=other`).
fn topic_name(ros: &RosArgs, namespace: &str, name: &str) -> Result<Name, NodeError> {
    let remapped = ros.remaps.iter().rev().find(|(from, _)| from == name || from.trim_start_matches('/') == format!("{}/{name}", namespace.trim_matches('/')).trim_start_matches('/')).map(|(_, to)| to.as_str());
    let target = remapped.unwrap_or(name);
    let (ns, base) = if let Some(abs) = target.strip_prefix('/') {
        match abs.rsplit_once('/') {
            Some((ns, base)) => (format!("/{ns}"), base.to_string()),
            None => ("/".to_string(), abs.to_string()),
        }
    } else {
        match target.rsplit_once('/') {
            Some((sub, base)) => (format!("{}/{sub}", namespace.trim_end_matches('/')), base.to_string()),
            None => (namespace.to_string(), target.to_string()),
        }
    };
    Name::new(&ns, &base).map_err(|_| NodeError::Name(format!("{ns}/{base}")))
}

fn type_name<T: RosMessage>() -> MessageTypeName {
    let mut parts = T::ROS_TYPE.split('/');
    let pkg = parts.next().unwrap_or_default();
    let name = parts.nth(1).unwrap_or_default();
    MessageTypeName::new(pkg, name)
}

/// SensorDataQoS: best effort, keep last 5.
fn sensor_qos() -> QosProfile {
    QosProfile::subscription_default().reliability_best_effort().history(qos::History::KeepLast { depth: 5 })
}

/// What RViz subscribes with: reliable, keep last 10.
fn reliable_qos() -> QosProfile {
    QosProfile::publisher_default().reliability_reliable(qos::WhenFull::DEFAULT).history(qos::History::KeepLast { depth: 10 })
}

/// Runs until `stop` is set (SIGINT/SIGTERM).
pub fn run(ros: &RosArgs, stop: Arc<AtomicBool>) -> Result<(), NodeError> {
    let name = ros.node_name.clone().unwrap_or_else(|| "sp_dust3r".into());
    let namespace = ros.namespace.clone().unwrap_or_else(|| "/".into());
    let fqn = format!("{}/{name}", namespace.trim_end_matches('/'));
    let (params, warnings) = NodeParams::resolve(ros, &fqn)?;
    for w in warnings {
        tracing::warn!("{w}");
    }
    let resolved = crate::weights::resolve(&HUB_MODEL, params.superpoint_weights.as_deref())?;
    let model = SuperPoint::load(&resolved.dir)?;
    let post = PostParams { threshold: params.keypoint_threshold as f32, nms_radius: params.nms_radius, border: 4, max_keypoints: params.max_keypoints };

    let domain = std::env::var("ROS_DOMAIN_ID").ok().and_then(|v| v.parse().ok()).unwrap_or(0u16);
    let mut builder = DomainParticipantBuilder::new(domain);
    if localhost_only() {
        builder = builder.with_only_networks([Ipv4Addr::LOCALHOST]);
    }
    let context = Context::from_domain_participant(builder.build().map_err(dds)?).map_err(dds)?;
    let node_name = NodeName::new(&namespace, &name).map_err(|_| NodeError::Name(fqn.clone()))?;
    let mut node = context.new_node(node_name, NodeOptions::new().enable_rosout(true)).map_err(dds)?;

    let image_name = topic_name(ros, &namespace, "image")?;
    let image_topic = node.create_topic(&image_name, type_name::<sensor_msgs::Image>(), &sensor_qos()).map_err(dds)?;
    let images: Subscription<sensor_msgs::Image> = node.create_subscription(&image_topic, Some(sensor_qos())).map_err(dds)?;
    let kp_name = topic_name(ros, &namespace, "keypoints")?;
    let kp_topic = node.create_topic(&kp_name, type_name::<sp_dust3r_msgs::Keypoints>(), &reliable_qos()).map_err(dds)?;
    let keypoints = node.create_publisher::<sp_dust3r_msgs::Keypoints>(&kp_topic, Some(reliable_qos())).map_err(dds)?;
    tracing::info!("node {fqn} up: {image_name:?} -> {kp_name:?}");

    let (mut frames, mut dropped, mut errors) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        // Newest frame wins: take everything waiting, keep the last.
        let mut newest = None;
        loop {
            match images.take() {
                Ok(Some((msg, _))) => {
                    if newest.replace(msg).is_some() {
                        dropped += 1;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    errors += 1;
                    tracing::warn!("image subscription: {e:?}");
                    break;
                }
            }
        }
        let Some(msg) = newest else {
            std::thread::sleep(Duration::from_millis(2));
            continue;
        };
        let frame = match Frame::from_raw(&msg.encoding, msg.width, msg.height, msg.step as usize, msg.is_bigendian != 0, msg.data) {
            Ok(f) => f,
            Err(e) => {
                errors += 1;
                tracing::warn!("dropping a frame: {e}");
                continue;
            }
        };
        match model.detect(&frame.to_luma(), &post) {
            Ok((kp, _)) => {
                frames += 1;
                if let Err(e) = keypoints.publish(keypoints_msg(msg.header, frame.width(), frame.height(), &kp)) {
                    errors += 1;
                    tracing::warn!("publishing keypoints: {e:?}");
                }
            }
            Err(e) => {
                errors += 1;
                tracing::warn!("SuperPoint: {e}");
            }
        }
    }
    tracing::info!("shutting down: {frames} frames, {dropped} dropped, {errors} errors");
    Ok(())
}
