//! Cyclone DDS writers for the node's pipeline outputs (keypoints, debug image, clouds, poses,
//! TF), as raw CDR from our own message types.
//!
//! Why a second DDS stack beside ros2-client's RustDDS: RustDDS sends a large reliable sample as
//! one burst of 256-byte fragments and then repairs a few fragments per 10 ms, so a reader with
//! Ubuntu's default 212992-byte socket buffer (RViz on Fast DDS, untuned) gets a 1 MB message
//! seconds late or never. Cyclone DDS, a Tier-1 ROS 2 middleware, delivers the same samples to
//! the same reader in tens of milliseconds (`examples/dds_large_messages` prints both;
//! docs/benchmarks.md). The node
//! keeps ros2-client for the rest: inputs, parameter services in both RMW framings, /rosout,
//! /parameter_events, /diagnostics.
//!
//! Cyclone's writers live on a DDS participant of their own, so the ROS graph sees them as a
//! second node of the process, `<node name>_outputs` (announced on `ros_discovery_info`, as rmw
//! does), the way tf2's listener brings a node of its own.

use std::ffi::{c_void, CStr, CString};
use std::sync::Arc;

use cyclors as cdds;
use sp_dust3r_core::params::qos::Qos;

use sp_dust3r_core::msg::{rmw_dds_common, to_cdr, CdrError};

/// Why Cyclone DDS could not do something.
#[derive(Debug, thiserror::Error)]
pub enum CycloneError {
    /// A domain, participant, topic or writer could not be created.
    #[error("Cyclone DDS: cannot create {what}: {reason} ({code})")]
    Create {
        /// What it was.
        what: String,
        /// Cyclone's return code.
        code: i32,
        /// Cyclone's text for it.
        reason: String,
    },
    /// A sample was not taken.
    #[error("Cyclone DDS: writing on {topic}: {reason} ({code})")]
    Write {
        /// The DDS topic.
        topic: String,
        /// Cyclone's return code.
        code: i32,
        /// Cyclone's text for it.
        reason: String,
    },
    /// A name or the configuration has a NUL byte.
    #[error("Cyclone DDS: {what} contains a NUL byte")]
    Nul {
        /// Which string.
        what: String,
        /// Where.
        #[source]
        source: std::ffi::NulError,
    },
    /// The graph announcement could not be encoded.
    #[error("Cyclone DDS: encoding ros_discovery_info")]
    Encode(#[source] CdrError),
}

/// Cyclone's text for a return code.
fn reason(code: i32) -> String {
    // SAFETY: dds_strretcode accepts any code and returns a static NUL-terminated string.
    let text = unsafe { CStr::from_ptr(cdds::dds_strretcode(code)) };
    text.to_string_lossy().into_owned()
}

fn created(what: impl Into<String>, entity: cdds::dds_entity_t) -> Result<cdds::dds_entity_t, CycloneError> {
    if entity > 0 {
        Ok(entity)
    } else {
        Err(CycloneError::Create { what: what.into(), code: entity, reason: reason(entity) })
    }
}

fn c_string(what: &str, s: &str) -> Result<CString, CycloneError> {
    CString::new(s).map_err(|source| CycloneError::Nul { what: what.to_string(), source })
}

/// How the outputs' writers send and repair a large sample for a reader that cannot take it in
/// one burst (a stock 212992-byte socket buffer overflows on the first ~150 kB of a 1 MB
/// sample); docs/benchmarks.md has the measurements behind each setting:
/// - 16 kB fragments in datagrams of up to 65000 B (Cyclone's: 1344 B in 14720 B; Fast DDS, the
///   default RMW, also sends datagrams of up to ~64 kB). A reader NACKs at most 256 fragments per
///   round (RTPS's 256-bit NACKFRAG set), so small fragments make a multi-MB cloud need many
///   heartbeat rounds to repair, and the reader has more datagrams to take in. On a lossy link
///   every lost IP fragment costs its whole datagram, as it does with Fast DDS's defaults; a
///   user's `CYCLONEDDS_URI` can set smaller ones.
/// - Each heartbeat draws the reader's NACK for what it lost, so the heartbeat cadence sets the
///   pace of repair. Cyclone halves its interval twice while more than its high watermark
///   (500 kB) is unacknowledged, again while throttling, down to `minsched`: for samples of 1 MB
///   and more, `minsched` (10 ms here, Cyclone's 20 ms) is the cadence.
/// - Cyclone's retransmit queue (200 messages) stays: with 16 kB fragments its size made no
///   difference.
///
/// A user's `CYCLONEDDS_URI` is applied after these and can set any of them.
const PACING: &str = concat!(
    "<CycloneDDS><Domain><General>",
    "<FragmentSize>16384B</FragmentSize><MaxMessageSize>65000B</MaxMessageSize>",
    "</General><Internal>",
    "<HeartbeatInterval min=\"5ms\" minsched=\"10ms\">40ms</HeartbeatInterval>",
    "</Internal></Domain></CycloneDDS>"
);

/// Settings that keep Cyclone on 127.0.0.1 (`ROS_LOCALHOST_ONLY`): discovery by unicast to the
/// local participants' ports, so it also works where loopback has no multicast.
pub const LOCALHOST_ONLY: &str = concat!(
    "<CycloneDDS><Domain><General><Interfaces><NetworkInterface address=\"127.0.0.1\"/></Interfaces></General>",
    "<Discovery><Peers><Peer address=\"127.0.0.1\"/></Peers><ParticipantIndex>auto</ParticipantIndex>",
    "<MaxAutoParticipantIndex>50</MaxAutoParticipantIndex></Discovery></Domain></CycloneDDS>"
);

/// The configuration the domain is created with: our pacing, the user's `CYCLONEDDS_URI`
/// as rmw_cyclonedds reads it, then the loopback settings when asked.
pub fn config(localhost_only: bool) -> String {
    let mut parts = vec![PACING.to_string()];
    parts.extend(std::env::var("CYCLONEDDS_URI").into_iter().filter(|u| !u.trim().is_empty()));
    if localhost_only {
        parts.push(LOCALHOST_ONLY.to_string());
    }
    parts.join(",")
}

/// `ros_discovery_info`'s profile: reliable, transient local, keep last 1.
const DISCOVERY_QOS: Qos = Qos { reliable: true, keep_all: false, depth: 1, transient_local: true };

/// The domain and participant; deleted (and with them every writer) when the last handle goes.
struct Domain {
    domain: cdds::dds_entity_t,
    participant: cdds::dds_entity_t,
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: both handles came from Cyclone and are deleted once, here; deleting the
        // participant deletes its topics and writers, whose handles are no longer used.
        unsafe {
            cdds::dds_delete(self.participant);
            cdds::dds_delete(self.domain);
        }
    }
}

/// A Cyclone DDS participant on `ROS_DOMAIN_ID`.
pub struct Participant {
    domain: Arc<Domain>,
    /// Kept for the participant's life: transient local, late joiners read it.
    announcement: Option<Writer>,
}

impl Participant {
    /// Joins `domain_id` with `config` (see [`config`]); the participant says `enclave=/;` in its
    /// user data, as rmw's do.
    pub fn new(domain_id: u32, config: &str) -> Result<Self, CycloneError> {
        let config = c_string("the configuration", config)?;
        // SAFETY: config is a valid NUL-terminated string that Cyclone only reads.
        let domain = created("the domain", unsafe { cdds::dds_create_domain(domain_id, config.as_ptr()) })?;
        let user_data = b"enclave=/;";
        // SAFETY: the QoS object is created, filled with a slice that outlives the call (Cyclone
        // copies it), used once and freed here.
        let participant = unsafe {
            let qos = cdds::dds_create_qos();
            cdds::dds_qset_userdata(qos, user_data.as_ptr() as *const c_void, user_data.len());
            let p = cdds::dds_create_participant(domain_id, qos, std::ptr::null());
            cdds::dds_delete_qos(qos);
            p
        };
        let participant = match created("the participant", participant) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the domain was created above and is not used after this.
                unsafe { cdds::dds_delete(domain) };
                return Err(e);
            }
        };
        Ok(Self { domain: Arc::new(Domain { domain, participant }), announcement: None })
    }

    /// A writer of raw CDR samples of the DDS type `dds_type` (`pkg::msg::dds_::Name_`) on the
    /// DDS topic `topic` (`rt/...` for a ROS topic).
    pub fn writer(&self, topic: &str, dds_type: &str, qos: Qos) -> Result<Writer, CycloneError> {
        // Held from the topic's creation to its writer's: a type's operations are patched (see
        // `printable`) only while no writer of it exists, so no sample can read them meanwhile.
        // Every cyclors topic of the process is made here, and Cyclone hands an equal type that
        // exists already to a new topic, so a type is either new or patched before.
        let _types = TYPES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let name = c_string("a topic name", topic)?;
        let ty = c_string("a type name", dds_type)?;
        // SAFETY: the strings are valid for the call and Cyclone copies them; the participant
        // handle is alive (self holds the domain).
        let t = unsafe {
            cdds::cdds_create_blob_topic(self.domain.participant, name.as_ptr() as *mut _, ty.as_ptr() as *mut _, true)
        };
        let t = created(format!("topic {topic}"), t)?;
        let mut sertype: *const cdds::ddsi_sertype = std::ptr::null();
        // SAFETY: the topic was just created; Cyclone fills the pointer with its type.
        let rc = unsafe { cdds::dds_get_entity_sertype(t, &mut sertype) };
        if rc < 0 || sertype.is_null() {
            return Err(CycloneError::Create { what: format!("the type of {topic}"), code: rc, reason: reason(rc) });
        }
        // SAFETY: the pointer is the topic's live type, and under `TYPES` it is new (no writer,
        // so no sample) or already patched.
        unsafe { printable(sertype) };
        // SAFETY: the QoS object is created, set, used once and freed here.
        let w = unsafe {
            let q = cdds::dds_create_qos();
            let kind = if qos.reliable {
                cdds::dds_reliability_kind_DDS_RELIABILITY_RELIABLE
            } else {
                cdds::dds_reliability_kind_DDS_RELIABILITY_BEST_EFFORT
            };
            // rmw's max blocking time for reliable writers: 100 ms.
            cdds::dds_qset_reliability(q, kind, 100_000_000);
            if qos.keep_all {
                cdds::dds_qset_history(q, cdds::dds_history_kind_DDS_HISTORY_KEEP_ALL, 0);
            } else {
                cdds::dds_qset_history(q, cdds::dds_history_kind_DDS_HISTORY_KEEP_LAST, qos.depth);
            }
            let durability = if qos.transient_local {
                cdds::dds_durability_kind_DDS_DURABILITY_TRANSIENT_LOCAL
            } else {
                cdds::dds_durability_kind_DDS_DURABILITY_VOLATILE
            };
            cdds::dds_qset_durability(q, durability);
            // Plain CDR (XCDR1), what every ROS 2 RMW reads and what our encoder writes.
            let xcdr1 = cdds::DDS_DATA_REPRESENTATION_XCDR1 as cdds::dds_data_representation_id_t;
            cdds::dds_qset_data_representation(q, 1, &xcdr1);
            let w = cdds::dds_create_writer(self.domain.participant, t, q, std::ptr::null());
            cdds::dds_delete_qos(q);
            w
        };
        let entity = created(format!("a writer on {topic}"), w)?;
        // The type lives as long as the topic, deleted only with the participant.
        Ok(Writer { _domain: Arc::clone(&self.domain), entity, sertype, topic: topic.to_string() })
    }

    /// Tells the ROS graph (`ros2 node list`, `ros2 topic info -v`) that the writers with the
    /// GUIDs `writers` (see [`Writer::gid`]) belong to the node `namespace`/`name`, as rmw does
    /// on `ros_discovery_info`.
    pub fn announce(&mut self, namespace: &str, name: &str, writers: &[[u8; 16]]) -> Result<(), CycloneError> {
        let writer = match self.announcement.take() {
            Some(w) => w,
            None => {
                self.writer("ros_discovery_info", "rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_", DISCOVERY_QOS)?
            }
        };
        let info = rmw_dds_common::ParticipantEntitiesInfo {
            gid: rmw_dds_common::Gid { data: guid(self.domain.participant) },
            node_entities_info_seq: vec![rmw_dds_common::NodeEntitiesInfo {
                node_namespace: namespace.to_string(),
                node_name: name.to_string(),
                reader_gid_seq: Vec::new(),
                writer_gid_seq: writers.iter().map(|&data| rmw_dds_common::Gid { data }).collect(),
            }],
        };
        let written = writer.write(&to_cdr(&info).map_err(CycloneError::Encode)?);
        self.announcement = Some(writer);
        written
    }
}

/// Serialises the creation of topics and their writers (see [`Participant::writer`]).
static TYPES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// cyclors' raw-CDR sample operations plus a `print`, which theirs lack: Cyclone's `content`
/// tracing (`CYCLONEDDS_URI` with verbosity `finest`) calls it for every sample written, and a
/// missing one is a null call.
static PRINTABLE_OPS: std::sync::OnceLock<cdds::ddsi_serdata_ops> = std::sync::OnceLock::new();

/// What tracing shows of a sample: its size.
unsafe extern "C" fn print_sample(
    _type: *const cdds::ddsi_sertype,
    sample: *const cdds::ddsi_serdata,
    buf: *mut std::os::raw::c_char,
    size: usize,
) -> usize {
    if buf.is_null() || size == 0 {
        return 0;
    }
    // SAFETY: Cyclone passes a live sample of this type.
    let bytes = unsafe { cdds::ddsi_serdata_size(sample) };
    let text = format!("({bytes} bytes of CDR)");
    let n = text.len().min(size - 1);
    // SAFETY: buf has room for `size` bytes (Cyclone's contract); n + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    n
}

/// Gives the type's samples [`PRINTABLE_OPS`].
///
/// # Safety
/// `sertype` is a live blob type of cyclors with no writer yet (so no sample), or one already
/// patched; [`Participant::writer`] makes sure of that by holding `TYPES`.
unsafe fn printable(sertype: *const cdds::ddsi_sertype) {
    // SAFETY: the type is live (the caller's contract), so its operations are readable.
    let current = unsafe { (*sertype).serdata_ops };
    // SAFETY: as above; the copy is of a plain table of function pointers.
    let ops = PRINTABLE_OPS.get_or_init(|| cdds::ddsi_serdata_ops { print: Some(print_sample), ..unsafe { *current } });
    if !std::ptr::eq(current, ops) {
        // SAFETY: the type was allocated by cyclocut (heap, writable) and no sample of it exists,
        // so nothing reads this field concurrently; every later sample takes its operations from
        // here, and they are cyclocut's own but for `print`.
        unsafe { (*(sertype as *mut cdds::ddsi_sertype)).serdata_ops = ops };
    }
}

/// The 16-byte GUID of an entity (its ROS gid since Iron).
fn guid(entity: cdds::dds_entity_t) -> [u8; 16] {
    let mut g = cdds::dds_guid_t { v: [0; 16] };
    // SAFETY: g is a valid out-parameter; on error Cyclone leaves it zero.
    unsafe { cdds::dds_get_guid(entity, &mut g) };
    g.v
}

/// A writer of raw CDR samples; the participant lives at least as long.
pub struct Writer {
    /// Keeps the participant, and so this writer's topic and type, alive.
    _domain: Arc<Domain>,
    entity: cdds::dds_entity_t,
    sertype: *const cdds::ddsi_sertype,
    topic: String,
}

// SAFETY: the writer is a Cyclone handle (an integer) and a pointer to its topic's immutable
// type descriptor; Cyclone's API is thread-safe and the type lives as long as the participant,
// which `_domain` keeps alive.
unsafe impl Send for Writer {}
// SAFETY: as above; `write` and `matched` only pass them to Cyclone's thread-safe calls.
unsafe impl Sync for Writer {}

impl Writer {
    /// Writes one sample: `cdr` is the message with its encapsulation header, as [`to_cdr`]
    /// makes it. Cyclone copies it.
    pub fn write(&self, cdr: &[u8]) -> Result<(), CycloneError> {
        let iov = cdds::iovec { iov_base: cdr.as_ptr() as *mut c_void, iov_len: cdr.len() };
        // SAFETY: the sertype belongs to this writer's topic (alive: self holds the domain); the
        // iovec points at `cdr`, which outlives the call and is copied by the blob serdata;
        // dds_writecdr takes over the serdata's reference whatever it returns.
        let rc = unsafe {
            let serdata =
                cdds::ddsi_serdata_from_ser_iov(self.sertype, cdds::ddsi_serdata_kind_SDK_DATA, 1, &iov, cdr.len());
            if serdata.is_null() {
                cdds::DDS_RETCODE_OUT_OF_RESOURCES
            } else {
                cdds::dds_writecdr(self.entity, serdata)
            }
        };
        if rc < 0 {
            return Err(CycloneError::Write { topic: self.topic.clone(), code: rc, reason: reason(rc) });
        }
        Ok(())
    }

    /// How many readers are matched now.
    pub fn matched(&self) -> usize {
        // SAFETY: zeroed is a valid value of this plain C struct, an out-parameter here.
        let mut status: cdds::dds_publication_matched_status_t = unsafe { std::mem::zeroed() };
        // SAFETY: the writer handle is alive (self holds the domain).
        let rc = unsafe { cdds::dds_get_publication_matched_status(self.entity, &mut status) };
        if rc < 0 {
            0
        } else {
            status.current_count as usize
        }
    }

    /// The DDS topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Its GUID, which the ROS graph knows it by (its gid since Iron).
    pub fn gid(&self) -> [u8; 16] {
        guid(self.entity)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: the handle is this writer's own and is not used after this; the participant
        // is still alive (`_domain`, a field, is dropped after this body).
        unsafe { cdds::dds_delete(self.entity) };
    }
}
