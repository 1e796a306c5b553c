//! Service replies held until the client can receive them.
//!
//! A client's reply reader is volatile: a reply written before the server's reply writer has
//! matched it is lost, and the client waits for ever. A fresh client (`ros2 service call`) sends
//! its request as soon as its own endpoints match the server's, which does not mean the server
//! has discovered the client's reply reader yet. rmw_fastrtps and rmw_cyclonedds block a reply
//! for up to 100 ms until that reader is matched; the node's DDS loop must not block, so it holds
//! every reply and writes it on a later poll, a moment after the participant has discovered the
//! reader (RustDDS's writers do not say whom they matched).

use std::cell::{OnceCell, RefCell};
use std::time::{Duration, Instant};

use ros2_client::dds::rustdds::DomainParticipant;
use ros2_client::service::{RmwRequestId, Server, ServiceMapping};
use ros2_client::Message;

/// How long a reply waits for the client's reply reader before it is written anyway (to a
/// client that has gone, or one whose reader the check below cannot name).
pub const REPLY_WAIT: Duration = Duration::from_secs(5);

/// How long after the reader is first seen discovered the reply is written: discovery records a
/// reader before it tells the writer, which matches it on the DDS event loop's next turn.
pub const MATCH_MARGIN: Duration = Duration::from_millis(20);

/// A GUID's entity kind (its last byte) has this bit set for readers, never for writers (RTPS
/// 9.3.1.2).
const READER_KIND_BIT: u8 = 0x04;

/// Whether the reader that will take the reply to a request from `client` is among `readers`
/// (DDS topic, GUID) on `reply_topic`. In rmw_cyclonedds' framing `client` keeps the first 8
/// bytes of the request writer's GUID (the rest is the client's own number), and any reader of
/// that participant on the reply topic will do, as rmw_cyclonedds' own server accepts. Otherwise
/// the request names the reader itself when the client put it in the request's related sample
/// identity (rmw_fastrtps), else the request's writer, read as in Cyclone's framing.
pub fn reply_reader_known<'a>(
    mapping: ServiceMapping,
    client: [u8; 16],
    reply_topic: &str,
    readers: impl IntoIterator<Item = (&'a str, [u8; 16])>,
) -> bool {
    let names_a_reader = mapping != ServiceMapping::Cyclone && client[15] & READER_KIND_BIT != 0;
    readers.into_iter().any(|(topic, guid)| {
        if names_a_reader {
            guid == client
        } else {
            topic == reply_topic && guid[..8] == client[..8]
        }
    })
}

/// The readers the participant has discovered, read once per poll and only when asked.
pub struct DiscoveredReaders<'a> {
    participant: &'a DomainParticipant,
    seen: OnceCell<Vec<(String, [u8; 16])>>,
}

impl<'a> DiscoveredReaders<'a> {
    /// A view of `participant`'s discovery, read on first use.
    pub fn new(participant: &'a DomainParticipant) -> Self {
        Self { participant, seen: OnceCell::new() }
    }

    /// See [`reply_reader_known`].
    fn knows(&self, mapping: ServiceMapping, client: [u8; 16], reply_topic: &str) -> bool {
        let seen = self.seen.get_or_init(|| {
            let readers = self.participant.discovered_readers();
            readers
                .into_iter()
                .map(|r| (r.subscription_topic_data.topic_name, r.reader_proxy.remote_reader_guid.to_bytes()))
                .collect()
        });
        reply_reader_known(mapping, client, reply_topic, seen.iter().map(|(t, g)| (t.as_str(), *g)))
    }
}

/// A reply waiting for its client's reader.
struct Held<R> {
    id: RmwRequestId,
    reply: R,
    since: Instant,
    /// Since when the reader has been seen discovered, if it is.
    seen: Option<Instant>,
}

/// What to do with a held reply now.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    /// Keep holding it.
    Hold,
    /// Write it: the client's reader is matched.
    Send,
    /// Write it anyway: [`REPLY_WAIT`] has passed.
    Late,
}

/// A reply held `since`, its reader seen discovered since `seen` if at all: what to do at `now`.
pub fn due(since: Instant, seen: Option<Instant>, now: Instant) -> Due {
    let matched = seen.is_some_and(|t| now.duration_since(t) >= MATCH_MARGIN);
    match (matched, now.duration_since(since) >= REPLY_WAIT) {
        (true, _) => Due::Send,
        (false, true) => Due::Late,
        (false, false) => Due::Hold,
    }
}

/// A ROS service server whose replies wait for the client's reply reader (see the module).
pub struct Service<Q: Message, R: Message> {
    server: Server<Q, R>,
    /// How requests name their client.
    mapping: ServiceMapping,
    /// The DDS topic of the replies (`rr<service>Reply`).
    reply_topic: String,
    /// The service's name, for the log.
    name: String,
    held: RefCell<Vec<Held<R>>>,
}

impl<Q: Message + 'static, R: Message + 'static> Service<Q, R> {
    /// Wraps `server`, framed by `mapping`, whose replies go out on the DDS topic `reply_topic`.
    pub fn new(server: Server<Q, R>, mapping: ServiceMapping, reply_topic: String, name: String) -> Self {
        Self { server, mapping, reply_topic, name, held: RefCell::new(Vec::new()) }
    }

    /// Whether `id`'s reply reader is among `readers`.
    fn reader_known(&self, id: &RmwRequestId, readers: &DiscoveredReaders<'_>) -> bool {
        readers.knows(self.mapping, id.writer_gid.to_bytes16(), &self.reply_topic)
    }

    /// The next request, if any.
    pub fn take(&self) -> ros2_client::ReadResult<Option<(RmwRequestId, Q)>> {
        self.server.receive_request()
    }

    /// Holds the reply to `id` until its client's reader is matched (see [`due`]).
    pub fn answer(&self, id: RmwRequestId, reply: R, readers: &DiscoveredReaders<'_>) {
        let now = Instant::now();
        let seen = self.reader_known(&id, readers).then_some(now);
        self.held.borrow_mut().push(Held { id, reply, since: now, seen });
    }

    /// Writes the held replies that are due (see [`due`]).
    pub fn release(&self, readers: &DiscoveredReaders<'_>) {
        if self.held.borrow().is_empty() {
            return;
        }
        let now = Instant::now();
        let held = std::mem::take(&mut *self.held.borrow_mut());
        for mut h in held {
            let known = self.reader_known(&h.id, readers);
            h.seen = if known { h.seen.or(Some(now)) } else { None };
            match due(h.since, h.seen, now) {
                Due::Send => self.send(h.id, h.reply),
                Due::Late => {
                    tracing::warn!(
                        "{}: the client's reply reader was not discovered within {} s; replied anyway",
                        self.name,
                        REPLY_WAIT.as_secs()
                    );
                    self.send(h.id, h.reply);
                }
                Due::Hold => self.held.borrow_mut().push(h),
            }
        }
    }

    fn send(&self, id: RmwRequestId, reply: R) {
        if let Err(e) = self.server.send_response(id, reply) {
            tracing::warn!("{} reply failed: {e:?}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GUID of participant `p` with entity kind `kind` (0x04, 0x07: readers; 0x02, 0x03: writers).
    fn guid(p: u8, entity: u8, kind: u8) -> [u8; 16] {
        let mut g = [p; 16];
        g[12..].copy_from_slice(&[0, 0, entity, kind]);
        g
    }

    #[test]
    fn a_request_naming_its_reader_waits_for_that_reader() {
        let reader = guid(1, 5, 0x04);
        let other_reader = guid(1, 6, 0x04);
        let known = |readers: &[(&str, [u8; 16])]| {
            reply_reader_known(ServiceMapping::Enhanced, reader, "rr/a/sReply", readers.iter().copied())
        };
        assert!(!known(&[]));
        assert!(!known(&[("rr/a/sReply", other_reader)]));
        assert!(known(&[("rr/a/sReply", other_reader), ("rr/a/sReply", reader)]));
    }

    #[test]
    fn a_request_naming_a_writer_waits_for_a_reader_of_its_participant_on_the_reply_topic() {
        let writer = guid(1, 9, 0x03);
        // rmw_cyclonedds' header keeps the first 8 bytes; the rest is the client's own number,
        // which may look like a reader's entity kind.
        let mut cyclone = writer;
        cyclone[8..].copy_from_slice(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x07]);
        for (mapping, client) in [(ServiceMapping::Enhanced, writer), (ServiceMapping::Cyclone, cyclone)] {
            let known = |topic, reader| reply_reader_known(mapping, client, "rr/a/sReply", [(topic, reader)]);
            assert!(!known("rr/a/tReply", guid(1, 5, 0x04)));
            assert!(!known("rr/a/sReply", guid(2, 5, 0x04)));
            assert!(known("rr/a/sReply", guid(1, 5, 0x04)));
        }
    }

    #[test]
    fn a_held_reply_goes_once_its_reader_has_been_discovered_a_while_or_when_the_wait_is_over() {
        let since = Instant::now();
        let at = |ms| since + Duration::from_millis(ms);
        assert_eq!(due(since, None, at(10)), Due::Hold);
        // Just discovered: the writer may not have matched it yet.
        assert_eq!(due(since, Some(at(10)), at(10)), Due::Hold);
        assert_eq!(due(since, Some(at(10)), at(10) + MATCH_MARGIN), Due::Send);
        assert_eq!(due(since, Some(since), since), Due::Hold);
        assert_eq!(due(since, None, since + REPLY_WAIT), Due::Late);
        assert_eq!(due(since, Some(since), since + REPLY_WAIT), Due::Send);
    }
}
