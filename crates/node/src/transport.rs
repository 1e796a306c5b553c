//! The node's DDS endpoints behind one small interface: a [`Reader`] and a [`Writer`] of a
//! message type, made by a [`Transport`], which asks [`stack_for`] which DDS stack carries each.
//! The node's code names topics, message types and [`Qos`], never a stack.
//!
//! Two stacks (see cyclone.rs for why): ros2-client on RustDDS, the one here with readers and
//! request/reply services (the parameter services, param_services.rs, are its own), and Cyclone
//! DDS for writers of large samples. Cyclone's writers live on a participant of their own, which
//! the ROS graph sees as the node `<name>_outputs` ([`Transport::announce`]).

use std::collections::HashMap;
use std::marker::PhantomData;

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ros2_client::dds::rustdds::{DomainParticipant, DomainParticipantBuilder};
use ros2_client::{qos, Context, Gid, MessageTypeName, Name, Node, NodeName, NodeOptions, QosProfile};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sp_dust3r_core::msg::{to_cdr, CdrError, RosMessage};
use sp_dust3r_core::outputs::OutputKind;
use sp_dust3r_core::params::qos::Qos;

use crate::cyclone::{self, CycloneError};
use crate::dds::Dds;
use crate::replies::DiscoveredReaders;

/// Log targets of the DDS stacks that stay silent unless named (`--log-level NAME:=LEVEL`, or
/// `RUST_LOG`, which replaces the whole filter). RustDDS's UDP listener logs an error at every
/// shutdown for leaving a multicast group it never joined (with `ROS_LOCALHOST_ONLY` only `lo`
/// is used, which has no multicast): its Drop does not check whether the join succeeded. Its
/// other records, the failed join among them, are warnings, which the default filter does not
/// show anyway.
pub const QUIET_LOG_TARGETS: &[&str] = &["rustdds::network::udp_listener"];

/// A DDS stack of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// ros2-client on RustDDS.
    RustDds,
    /// Cyclone DDS (cyclors).
    Cyclone,
}

/// What an endpoint is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A camera input, /clock or /tf_static.
    Input,
    /// One of the pipeline's outputs.
    Output(OutputKind),
    /// /diagnostics.
    Diagnostics,
    /// /rosout.
    Rosout,
}

/// Which stack carries an endpoint: the pipeline's outputs (clouds and images of megabytes,
/// which RustDDS delivers seconds late to a stock socket buffer) go on Cyclone DDS; the rest on
/// RustDDS, whose node ros2-client announces with its parameter services.
pub fn stack_for(role: Role) -> Stack {
    match role {
        Role::Output(_) => Stack::Cyclone,
        Role::Input | Role::Diagnostics | Role::Rosout => Stack::RustDds,
    }
}

/// Why an endpoint could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// RustDDS refused to create something.
    #[error("DDS: cannot create {what}")]
    Create {
        /// What it was.
        what: String,
        /// ros2-client's reason.
        #[source]
        source: ros2_client::CreateError,
    },
    /// The DDS participant could not be created.
    #[error("DDS: cannot create the domain participant")]
    Participant(#[source] ros2_client::dds::rustdds::dds::CreateError),
    /// The ROS node could not be created.
    #[error("cannot create the ROS node")]
    Node(#[from] ros2_client::NodeCreateError),
    /// A node or topic name is not a valid ROS name.
    #[error("invalid name {name:?}")]
    Name {
        /// The name.
        name: String,
        /// What is wrong with it.
        #[source]
        source: ros2_client::names::NameError,
    },
    /// Cyclone DDS refused something, or did not take a sample.
    #[error(transparent)]
    Cyclone(#[from] CycloneError),
    /// The stack has no such endpoint.
    #[error("{0:?} has no {1} here")]
    Unsupported(Stack, &'static str),
    /// A sample could not be encoded.
    #[error("encoding a sample for {topic}")]
    Encode {
        /// The topic.
        topic: String,
        /// The encoder's reason.
        #[source]
        source: CdrError,
    },
    /// RustDDS did not take a sample, or a sample did not decode as the topic's type.
    #[error("{0}")]
    Sample(String),
}

/// A message type the node's endpoints carry (every type of the core's `msg`).
pub trait Sample: RosMessage + Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}

impl<T: RosMessage + Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Sample for T {}

/// Takes a topic's samples.
pub trait Reader<T>: Send + Sync {
    /// The next waiting sample, `None` when there is none. `Err`: one that does not decode as
    /// the type (the reader has moved past it).
    fn take(&self) -> Result<Option<T>, TransportError>;
    /// Samples its writers sent that never reached it, so far: the sequence numbers skipped
    /// between two samples taken from one writer (a lost datagram or fragment, or a sample its
    /// history replaced before it was taken).
    fn lost(&self) -> u64;
}

/// Sends a topic's samples.
pub trait Writer<T>: Send + Sync {
    /// Sends one sample.
    fn write(&self, msg: &T) -> Result<(), TransportError>;
    /// How many readers are matched now; `None` when the stack does not say.
    fn matched(&self) -> Option<usize>;
}

/// A [`Qos`] as ros2-client's profile.
pub fn profile(q: Qos) -> QosProfile {
    let base = if q.reliable {
        QosProfile::publisher_default()
    } else {
        QosProfile::subscription_default().reliability_best_effort()
    };
    let history =
        if q.keep_all { qos::History::KeepAll } else { qos::History::KeepLast { depth: q.depth.max(1) as usize } };
    let durability = if q.transient_local { qos::Durability::TransientLocal } else { qos::Durability::Volatile };
    base.history(history).durability(durability)
}

/// Each writer's last sequence number, and how many numbers were skipped between samples taken:
/// best effort drops a sample that misses one fragment, silently, but the next sample's number
/// tells.
#[derive(Default)]
struct SequenceGaps {
    last: Mutex<HashMap<Gid, i64>>,
    lost: AtomicU64,
}

impl SequenceGaps {
    /// Notes a sample of `writer` numbered `n`; a writer's first sample counts nothing lost
    /// (it may have started before this reader), nor does one older than the last.
    fn note(&self, writer: Gid, n: i64) {
        let Ok(mut last) = self.last.lock() else { return };
        let previous = last.entry(writer).or_insert(n);
        if n > *previous + 1 {
            self.lost.fetch_add((n - *previous - 1) as u64, Ordering::Relaxed);
        }
        *previous = (*previous).max(n);
    }

    fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

/// A ros2-client subscription that counts the samples its writers sent and it never got.
struct Sequenced<T> {
    subscription: ros2_client::Subscription<Dds<T>>,
    gaps: SequenceGaps,
}

impl<T: Serialize + DeserializeOwned + Send + Sync + 'static> Reader<T> for Sequenced<T> {
    fn take(&self) -> Result<Option<T>, TransportError> {
        match self.subscription.take() {
            Ok(Some((Dds(msg), info))) => {
                self.gaps.note(info.publisher_gid(), info.sequence_number());
                Ok(Some(msg))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(TransportError::Sample(e.to_string())),
        }
    }

    fn lost(&self) -> u64 {
        self.gaps.lost()
    }
}

impl<T: Serialize + DeserializeOwned + Clone + Send + Sync> Writer<T> for ros2_client::Publisher<Dds<T>> {
    fn write(&self, msg: &T) -> Result<(), TransportError> {
        self.publish(Dds(msg.clone())).map_err(|e| TransportError::Sample(e.to_string()))
    }
    fn matched(&self) -> Option<usize> {
        None
    }
}

/// A Cyclone writer of raw CDR, typed.
struct CycloneWriter<T> {
    writer: cyclone::Writer,
    _type: PhantomData<fn(&T)>,
}

impl<T: RosMessage + Serialize> Writer<T> for CycloneWriter<T> {
    fn write(&self, msg: &T) -> Result<(), TransportError> {
        let cdr = to_cdr(msg).map_err(|source| TransportError::Encode { topic: self.writer.topic().into(), source })?;
        Ok(self.writer.write(&cdr)?)
    }
    fn matched(&self) -> Option<usize> {
        Some(self.writer.matched())
    }
}

/// Makes the node's endpoints on the stack [`stack_for`] says.
pub struct Transport {
    node: Node,
    /// Cyclone's participant, made with its first writer.
    cyclone: Option<cyclone::Participant>,
    /// Cyclone's participant settings: `ROS_DOMAIN_ID`, loopback only.
    cyclone_domain: (u32, bool),
    /// The Cyclone writers made so far, for the ROS graph.
    cyclone_gids: Vec<[u8; 16]>,
}

/// The RustDDS participant under the node, for the driver to drop after the [`Transport`]:
/// ros2-client's context drops its discovery writer after its own handle on the participant,
/// and a writer whose participant is gone cannot unregister (an error in the log at every
/// shutdown).
pub struct Participant(DomainParticipant);

impl Participant {
    /// A view of the readers the participant has discovered, for the services' replies.
    pub fn readers(&self) -> DiscoveredReaders<'_> {
        DiscoveredReaders::new(&self.0)
    }
}

/// The receive buffer the kernel grants a UDP socket that asks for `requested` bytes, as the
/// input's sockets ask: Linux clamps the request to `net.core.rmem_max` and reports back twice
/// what it grants (the other half is its bookkeeping).
pub fn granted_receive_buffer(requested: usize) -> std::io::Result<usize> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)?;
    socket.set_recv_buffer_size(requested)?;
    Ok(socket.recv_buffer_size()? / 2)
}

/// `ROS_DOMAIN_ID`, 0 when unset.
pub fn domain_id() -> u16 {
    std::env::var("ROS_DOMAIN_ID").ok().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// `ROS_LOCALHOST_ONLY=1` or `ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`: stay on 127.0.0.1.
pub fn localhost_only() -> bool {
    std::env::var("ROS_LOCALHOST_ONLY").is_ok_and(|v| v == "1")
        || std::env::var("ROS_AUTOMATIC_DISCOVERY_RANGE").is_ok_and(|v| v.eq_ignore_ascii_case("LOCALHOST"))
}

impl Transport {
    /// Joins the ROS graph as the node `namespace`/`name` on `ROS_DOMAIN_ID`, on loopback only
    /// when asked (see [`localhost_only`]), its input sockets asking for `receive_buffer` bytes.
    pub fn join(namespace: &str, name: &str, receive_buffer: usize) -> Result<(Self, Participant), TransportError> {
        let mut builder = DomainParticipantBuilder::new(domain_id()).socket_receive_buffer_size(receive_buffer);
        if localhost_only() {
            builder = builder.with_only_networks([Ipv4Addr::LOCALHOST]);
        }
        let participant = builder.build().map_err(TransportError::Participant)?;
        let context = Context::from_domain_participant(participant.clone())
            .map_err(|source| TransportError::Create { what: "the ROS context".into(), source })?;
        let fqn = format!("{}/{name}", namespace.trim_end_matches('/'));
        let node_name = NodeName::new(namespace, name).map_err(|source| TransportError::Name { name: fqn, source })?;
        // Our own /rosout writer and parameter services (see rosout.rs, param_services.rs).
        let options = NodeOptions::new().enable_rosout(false).start_parameter_services(false);
        let node = context.new_node(node_name, options)?;
        let cyclone_domain = (u32::from(domain_id()), localhost_only());
        Ok((Self { node, cyclone: None, cyclone_domain, cyclone_gids: Vec::new() }, Participant(participant)))
    }

    /// Keeps ros2-client's view of the ROS graph current on a thread of its own, until the
    /// transport is dropped.
    pub fn spin(&mut self) -> Result<std::thread::JoinHandle<()>, TransportError> {
        let spinner = self
            .node
            .spinner()
            .map_err(|source| TransportError::Create { what: "the node's spinner".into(), source })?;
        Ok(std::thread::spawn(move || {
            if let Err(e) = futures::executor::block_on(spinner.spin()) {
                tracing::warn!("the DDS graph spinner stopped: {e}");
            }
        }))
    }

    /// The ros2-client node, for the parameter services (ros2-client's own request/reply).
    pub fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    /// A reader of `topic` (a resolved ROS name).
    pub fn reader<T: Sample>(&mut self, topic: &str, q: Qos) -> Result<Box<dyn Reader<T>>, TransportError> {
        match stack_for(Role::Input) {
            Stack::RustDds => {
                let p = profile(q);
                let t = self.node.create_topic(&ros_name(topic)?, type_name::<T>(), &p).map_err(create(topic))?;
                let sub = self.node.create_subscription::<Dds<T>>(&t, Some(p)).map_err(create(topic))?;
                Ok(Box::new(Sequenced { subscription: sub, gaps: SequenceGaps::default() }))
            }
            Stack::Cyclone => Err(TransportError::Unsupported(Stack::Cyclone, "readers")),
        }
    }

    /// A writer of `topic` (a resolved ROS name) for `role`.
    pub fn writer<T: Sample>(&mut self, role: Role, topic: &str, q: Qos) -> Result<Box<dyn Writer<T>>, TransportError> {
        match stack_for(role) {
            Stack::RustDds => {
                let p = profile(q);
                let t = self.node.create_topic(&ros_name(topic)?, type_name::<T>(), &p).map_err(create(topic))?;
                Ok(Box::new(self.node.create_publisher::<Dds<T>>(&t, Some(p)).map_err(create(topic))?))
            }
            Stack::Cyclone => {
                let participant = match &mut self.cyclone {
                    Some(p) => p,
                    None => {
                        let (domain, localhost_only) = self.cyclone_domain;
                        self.cyclone.insert(cyclone::Participant::new(domain, &cyclone::config(localhost_only))?)
                    }
                };
                let writer = participant.writer(&format!("rt{topic}"), T::DDS_TYPE, q)?;
                self.cyclone_gids.push(writer.gid());
                Ok(Box::new(CycloneWriter { writer, _type: PhantomData }))
            }
        }
    }

    /// Tells the ROS graph that the Cyclone writers made so far belong to the node
    /// `namespace`/`<name>_outputs` (`ros2 node list`, `ros2 topic info -v`).
    pub fn announce(&mut self, namespace: &str, name: &str) -> Result<(), TransportError> {
        match &mut self.cyclone {
            Some(p) => Ok(p.announce(namespace, &outputs_node_name(name), &self.cyclone_gids)?),
            None => Ok(()),
        }
    }
}

/// The name under which the ROS graph sees the Cyclone writers: a second node of this process.
pub fn outputs_node_name(node_name: &str) -> String {
    format!("{node_name}_outputs")
}

fn create(topic: &str) -> impl FnOnce(ros2_client::CreateError) -> TransportError + '_ {
    move |source| TransportError::Create { what: format!("an endpoint on {topic}"), source }
}

fn ros_name(resolved: &str) -> Result<Name, TransportError> {
    let trimmed = resolved.trim_start_matches('/');
    let (ns, base) = match trimmed.rsplit_once('/') {
        Some((ns, base)) => (format!("/{ns}"), base),
        None => ("/".to_string(), trimmed),
    };
    Name::new(&ns, base).map_err(|source| TransportError::Name { name: resolved.to_string(), source })
}

fn type_name<T: RosMessage>() -> MessageTypeName {
    let mut parts = T::ROS_TYPE.split('/');
    let pkg = parts.next().unwrap_or_default();
    MessageTypeName::new(pkg, parts.nth(1).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_sequence_numbers_are_lost_samples_per_writer() {
        let gaps = SequenceGaps::default();
        let (a, b) = (Gid::from([1; 16]), Gid::from([2; 16]));
        // A writer met at its 7th sample: nothing before counts. 8, then 11: 9 and 10 lost.
        for n in [7, 8, 11] {
            gaps.note(a, n);
        }
        assert_eq!(gaps.lost(), 2);
        // Another writer's numbers are its own; a late, older sample is no loss and no reset.
        for n in [1, 2, 3] {
            gaps.note(b, n);
        }
        gaps.note(a, 10);
        gaps.note(a, 12);
        assert_eq!(gaps.lost(), 2);
        gaps.note(b, 5);
        assert_eq!(gaps.lost(), 3);
    }

    #[test]
    fn the_receive_buffer_granted_is_the_request_up_to_rmem_max() {
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
        for requested in [65_536, 212_992, 8 << 20, 64 << 20] {
            assert_eq!(granted_receive_buffer(requested).unwrap(), requested.min(rmem_max), "{requested}");
        }
    }
}
