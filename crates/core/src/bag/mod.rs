//! rosbag2 bags in MCAP storage: reading the camera topics of a recorded bag, and writing the
//! replay's output as a bag that `ros2 bag`, rosbags and Foxglove open (profile `ros2`, schemas
//! `ros2msg` with the full definitions, messages `cdr`).

pub mod export;
mod records;
pub mod replay;

pub use records::MAX_RECORD_BYTES;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use crate::params::qos::Qos;

/// Why a bag could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BagError {
    /// The file or folder could not be read.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The file or folder.
        path: String,
        /// What went wrong.
        reason: String,
    },
    #[error(
        "{path} is a sqlite3 (.db3) bag; replay reads MCAP, rosbag2's default storage. Convert it with \
         `ros2 bag convert -i {path} -o out.yaml`, where out.yaml holds `output_bags: [{{uri: converted, storage_id: mcap}}]`"
    )]
    /// A sqlite3 bag, which this reader does not take.
    Sqlite {
        /// The file or folder.
        path: String,
    },
    #[error(
        "{path}: no .mcap file (a rosbag2 MCAP file, or a bag folder with metadata.yaml and .mcap files, expected)"
    )]
    /// No .mcap file where a bag was expected.
    NoMcap {
        /// The file or folder.
        path: String,
    },
    /// The MCAP data is damaged or cut short.
    #[error("{path}: corrupt or truncated MCAP: {reason}")]
    Corrupt {
        /// The file or folder.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The output could not be written.
    #[error("writing {path}: {reason}")]
    Write {
        /// The file or folder.
        path: String,
        /// What went wrong.
        reason: String,
    },
}

/// Every MCAP file of the bag at `path` (a file, or a rosbag2 folder), opened, in order.
pub fn open_bag(path: &Path) -> Result<Vec<McapFile>, BagError> {
    mcap_files(path)?.iter().map(|p| McapFile::open(p)).collect()
}

/// The .mcap files of a bag: the file itself, or a rosbag2 folder's files in name order
/// (rosbag2 names its splits `<bag>_0.mcap`, `<bag>_1.mcap`, ...).
pub fn mcap_files(path: &Path) -> Result<Vec<PathBuf>, BagError> {
    let io = |e: std::io::Error| BagError::Io { path: path.display().to_string(), reason: e.to_string() };
    let is_db3 = |p: &Path| p.extension().is_some_and(|e| e == "db3");
    if path.is_file() {
        if is_db3(path) {
            return Err(BagError::Sqlite { path: path.display().to_string() });
        }
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(path).map_err(io)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let mcaps: Vec<PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|e| e == "mcap")).cloned().collect();
    if mcaps.is_empty() {
        if files.iter().any(|p| is_db3(p)) {
            return Err(BagError::Sqlite { path: path.display().to_string() });
        }
        return Err(BagError::NoMcap { path: path.display().to_string() });
    }
    Ok(mcaps)
}

/// One message of an input bag.
pub struct BagMessage {
    /// Its topic.
    pub topic: String,
    /// `pkg/msg/Name`.
    pub ros_type: String,
    /// When it was recorded, ns.
    pub log_time: u64,
    /// When it was published, ns.
    pub publish_time: u64,
    /// CDR with its encapsulation header.
    pub data: Vec<u8>,
    /// The channel's schema and metadata, for copying the topic to the output.
    pub schema: Option<(String, Vec<u8>)>,
    /// The channel's metadata (rosbag2's QoS profiles).
    pub channel_metadata: BTreeMap<String, String>,
}

/// A memory-mapped MCAP file.
pub struct McapFile {
    path: PathBuf,
    map: memmap2::Mmap,
}

impl McapFile {
    /// Opens an MCAP file (memory-mapped).
    pub fn open(path: &Path) -> Result<Self, BagError> {
        let io = |e: std::io::Error| BagError::Io { path: path.display().to_string(), reason: e.to_string() };
        let file = File::open(path).map_err(io)?;
        // SAFETY: the file is only read; a bag being rewritten underneath would at worst give
        // garbage bytes, which the MCAP parser reports as corruption.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Self { path: path.to_path_buf(), map })
    }

    /// The file's summary section (channels and statistics), when it has one that reads.
    fn summary(&self) -> Option<records::SummaryView> {
        records::summary(&self.map).ok().flatten()
    }

    /// Topics and types from the channels, without reading the messages (a scan of the data
    /// section when the file has no summary, e.g. a truncated one).
    pub fn topics(&self) -> Result<BTreeMap<String, String>, BagError> {
        let corrupt = |reason: String| BagError::Corrupt { path: self.path.display().to_string(), reason };
        if let Some(summary) = self.summary() {
            return Ok(summary.channels.into_values().collect());
        }
        let mut topics = BTreeMap::new();
        for m in records::messages(&self.map, true) {
            let m = match m {
                Ok(m) => m,
                // Not an MCAP file at all (or broken before its first message) says so; a file
                // broken later has the topics seen up to there.
                Err(e) if topics.is_empty() => return Err(corrupt(e)),
                Err(_) => break,
            };
            topics
                .entry(m.channel.topic.clone())
                .or_insert_with(|| m.channel.schema.as_ref().map(|s| s.name.clone()).unwrap_or_default());
        }
        Ok(topics)
    }

    /// Messages per topic from the file's summary statistics; empty when the file has none
    /// (e.g. a truncated one), since counting would mean reading it all.
    pub fn message_counts(&self) -> BTreeMap<String, u64> {
        let Some(records::SummaryView { channels, counts: Some(counts) }) = self.summary() else {
            return BTreeMap::new();
        };
        let mut per_topic = BTreeMap::new();
        for (id, n) in counts {
            if let Some((topic, _)) = channels.get(&id) {
                *per_topic.entry(topic.clone()).or_insert(0) += n;
            }
        }
        per_topic
    }

    /// The messages in file order (rosbag2 records them in arrival order). A corrupt or
    /// truncated file yields its good messages, then one error; so does one with a record larger
    /// than [`MAX_RECORD_BYTES`].
    pub fn messages(&self) -> impl Iterator<Item = Result<BagMessage, BagError>> + '_ {
        let path = self.path.display().to_string();
        records::messages(&self.map, false).map(move |m| match m {
            Ok(m) => Ok(BagMessage {
                topic: m.channel.topic.clone(),
                ros_type: m.channel.schema.as_ref().map(|s| s.name.clone()).unwrap_or_default(),
                log_time: m.log_time,
                publish_time: m.publish_time,
                data: m.data.into_owned(),
                schema: m.channel.schema.as_ref().map(|s| (s.encoding.clone(), s.data.to_vec())),
                channel_metadata: m.channel.metadata.clone(),
            }),
            Err(reason) => Err(BagError::Corrupt { path: path.clone(), reason }),
        })
    }
}

/// rosbag2's description of what a topic's publisher offered (`offered_qos_profiles`, one
/// profile), with metadata version 5's numeric enums; deadline, lifespan and lease infinite.
/// `ros2 bag play` offers reliable (transient local) when every recorded offer was. Without a
/// known profile: reliable and volatile, history unknown, as rosbag2 records a writer it
/// discovered.
fn offered_qos_yaml(qos: Option<Qos>) -> String {
    let (history, depth) = match qos {
        Some(q) if q.keep_all => (2, 0),
        Some(q) => (1, q.depth.max(0)),
        None => (3, 0),
    };
    let reliability = if qos.is_none_or(|q| q.reliable) { 1 } else { 2 };
    let durability = if qos.is_some_and(|q| q.transient_local) { 1 } else { 2 };
    let infinite = "\n    sec: 2147483647\n    nsec: 4294967295";
    format!(
        "- history: {history}\n  depth: {depth}\n  reliability: {reliability}\n  durability: {durability}\n  \
         deadline:{infinite}\n  lifespan:{infinite}\n  liveliness: 1\n  liveliness_lease_duration:{infinite}\n  \
         avoid_ros_namespace_conventions: false\n"
    )
}

/// What rosbag2's metadata.yaml says of a topic.
struct TopicRecord {
    ros_type: String,
    qos: String,
    count: u64,
}

/// An output bag with the `ros2` profile: one MCAP file (`*.mcap`), or a rosbag2 folder
/// (metadata.yaml + `<folder>_0.mcap`, what `ros2 bag record` makes) for any other path.
pub struct BagWriter {
    path: PathBuf,
    writer: Option<mcap::Writer<BufWriter<File>>>,
    channels: HashMap<String, u16>,
    sequence: u32,
    /// The folder, when writing a rosbag2 folder.
    folder: Option<PathBuf>,
    topics: Vec<(String, TopicRecord)>,
    /// First and last log time, ns.
    span: Option<(u64, u64)>,
}

impl BagWriter {
    /// Creates the output at `path`: an .mcap file, or a rosbag2 folder for any other path.
    pub fn create(path: &Path) -> Result<Self, BagError> {
        let err = |reason: String| BagError::Write { path: path.display().to_string(), reason };
        let (file_path, folder) = if path.extension().is_some_and(|e| e == "mcap") {
            (path.to_path_buf(), None)
        } else {
            // As rosbag2 does, never write into an existing bag or other folder.
            if std::fs::read_dir(path).is_ok_and(|mut d| d.next().is_some()) {
                return Err(err("the folder exists and is not empty; remove it or choose another".into()));
            }
            std::fs::create_dir_all(path).map_err(|e| err(e.to_string()))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "bag".into());
            (path.join(format!("{name}_0.mcap")), Some(path.to_path_buf()))
        };
        let file = File::create(&file_path).map_err(|e| err(e.to_string()))?;
        let writer = mcap::WriteOptions::new()
            .profile("ros2")
            .library(concat!("sp_dust3r ", env!("CARGO_PKG_VERSION")))
            .compression(Some(mcap::Compression::Zstd))
            .create(BufWriter::new(file))
            .map_err(|e| err(e.to_string()))?;
        Ok(Self {
            path: file_path,
            writer: Some(writer),
            channels: HashMap::new(),
            sequence: 0,
            folder,
            topics: Vec::new(),
            span: None,
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> BagError {
        BagError::Write { path: self.path.display().to_string(), reason: e.to_string() }
    }

    /// Declares `topic` with its type and ros2msg definition (our generated types carry it),
    /// or the input channel's schema when copying a topic through.
    pub fn add_topic(
        &mut self,
        topic: &str,
        ros_type: &str,
        schema_encoding: &str,
        definition: &[u8],
        metadata: Option<&BTreeMap<String, String>>,
    ) -> Result<(), BagError> {
        if self.channels.contains_key(topic) {
            return Ok(());
        }
        let default = BTreeMap::from([("offered_qos_profiles".to_string(), offered_qos_yaml(None))]);
        let metadata = metadata.unwrap_or(&default);
        let w = self
            .writer
            .as_mut()
            .ok_or_else(|| BagError::Write { path: String::new(), reason: "already finished".into() })?;
        let schema = w
            .add_schema(ros_type, schema_encoding, definition)
            .map_err(|e| BagError::Write { path: String::new(), reason: e.to_string() })?;
        let channel = w
            .add_channel(schema, topic, "cdr", metadata)
            .map_err(|e| BagError::Write { path: String::new(), reason: e.to_string() })?;
        self.channels.insert(topic.to_string(), channel);
        let qos = metadata.get("offered_qos_profiles").cloned().unwrap_or_default();
        self.topics.push((topic.to_string(), TopicRecord { ros_type: ros_type.to_string(), qos, count: 0 }));
        Ok(())
    }

    /// A generated message type's topic.
    pub fn add_typed_topic<T: crate::msg::RosMessage>(&mut self, topic: &str) -> Result<(), BagError> {
        self.add_defined_topic(topic, T::ROS_TYPE, T::DEFINITION)
    }

    /// A topic of `ros_type` whose ros2msg definition (with its nested ones) is `definition`.
    pub fn add_defined_topic(&mut self, topic: &str, ros_type: &str, definition: &str) -> Result<(), BagError> {
        self.add_topic(topic, ros_type, "ros2msg", definition.as_bytes(), None)
    }

    /// [`BagWriter::add_defined_topic`] for a topic a publisher with `qos` wrote: the bag offers
    /// the same on playback (a path and a map kept for late joiners reach RViz's latched
    /// displays).
    pub fn add_published_topic(
        &mut self,
        topic: &str,
        (ros_type, definition): (&str, &str),
        qos: Qos,
    ) -> Result<(), BagError> {
        let metadata = BTreeMap::from([("offered_qos_profiles".to_string(), offered_qos_yaml(Some(qos)))]);
        self.add_topic(topic, ros_type, "ros2msg", definition.as_bytes(), Some(&metadata))
    }

    /// Writes one CDR message on a declared topic.
    pub fn write(&mut self, topic: &str, log_time: u64, publish_time: u64, cdr: &[u8]) -> Result<(), BagError> {
        let channel_id = *self.channels.get(topic).ok_or_else(|| self.err(format!("topic {topic} was not added")))?;
        self.sequence += 1;
        let header = mcap::records::MessageHeader { channel_id, sequence: self.sequence, log_time, publish_time };
        let w = self
            .writer
            .as_mut()
            .ok_or_else(|| BagError::Write { path: String::new(), reason: "already finished".into() })?;
        w.write_to_known_channel(&header, cdr)
            .map_err(|e| BagError::Write { path: String::new(), reason: e.to_string() })?;
        if let Some((_, t)) = self.topics.iter_mut().find(|(t, _)| t == topic) {
            t.count += 1;
        }
        self.span = Some(self.span.map_or((log_time, log_time), |(a, b)| (a.min(log_time), b.max(log_time))));
        Ok(())
    }

    /// Writes the summary and closes the file: a valid bag however the replay ended.
    pub fn finish(&mut self) -> Result<(), BagError> {
        if let Some(mut w) = self.writer.take() {
            w.finish().map_err(|e| self.err(e))?;
            if let Some(folder) = &self.folder {
                let path = folder.join("metadata.yaml");
                std::fs::write(&path, self.metadata_yaml())
                    .map_err(|e| BagError::Write { path: path.display().to_string(), reason: e.to_string() })?;
            }
        }
        Ok(())
    }

    /// rosbag2's metadata.yaml, version 5 (Humble's; later rosbag2 and rosbags read it too,
    /// and it needs no type hashes).
    fn metadata_yaml(&self) -> String {
        use yaml_rust2::yaml::{Hash, Yaml};
        let map = |pairs: Vec<(&str, Yaml)>| {
            Yaml::Hash(pairs.into_iter().map(|(k, v)| (Yaml::String(k.into()), v)).collect::<Hash>())
        };
        let int = |v: u64| Yaml::Integer(v.min(i64::MAX as u64) as i64);
        let (start, end) = self.span.unwrap_or((0, 0));
        let total: u64 = self.topics.iter().map(|(_, t)| t.count).sum();
        let file = self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let duration = || map(vec![("nanoseconds", int(end - start))]);
        let starting = || map(vec![("nanoseconds_since_epoch", int(start))]);
        let topics = self
            .topics
            .iter()
            .map(|(name, t)| {
                map(vec![
                    (
                        "topic_metadata",
                        map(vec![
                            ("name", Yaml::String(name.clone())),
                            ("type", Yaml::String(t.ros_type.clone())),
                            ("serialization_format", Yaml::String("cdr".into())),
                            ("offered_qos_profiles", Yaml::String(t.qos.clone())),
                        ]),
                    ),
                    ("message_count", int(t.count)),
                ])
            })
            .collect();
        let info = map(vec![
            ("version", int(5)),
            ("storage_identifier", Yaml::String("mcap".into())),
            ("duration", duration()),
            ("starting_time", starting()),
            ("message_count", int(total)),
            ("topics_with_message_count", Yaml::Array(topics)),
            ("compression_format", Yaml::String(String::new())),
            ("compression_mode", Yaml::String(String::new())),
            ("relative_file_paths", Yaml::Array(vec![Yaml::String(file.clone())])),
            (
                "files",
                Yaml::Array(vec![map(vec![
                    ("path", Yaml::String(file)),
                    ("starting_time", starting()),
                    ("duration", duration()),
                    ("message_count", int(total)),
                ])]),
            ),
        ]);
        let mut out = String::new();
        // Emitting plain strings and numbers into a String cannot fail.
        let _ = yaml_rust2::YamlEmitter::new(&mut out).dump(&map(vec![("rosbag2_bagfile_information", info)]));
        out.push('\n');
        out
    }
}

impl Drop for BagWriter {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bag of three String messages, one a chunk (mcap's writer closes a chunk once it passes
    /// chunk_size), and where its chunk records start.
    fn three_message_bag(path: &Path, compression: Option<mcap::Compression>) -> (Vec<u8>, Vec<usize>) {
        let mut w = mcap::WriteOptions::new()
            .chunk_size(Some(1))
            .compression(compression)
            .create(std::io::BufWriter::new(File::create(path).unwrap()))
            .unwrap();
        let schema = w.add_schema("std_msgs/msg/String", "ros2msg", b"string data").unwrap();
        let channel = w.add_channel(schema, "/t", "cdr", &BTreeMap::new()).unwrap();
        for i in 0..3u32 {
            let header =
                mcap::records::MessageHeader { channel_id: channel, sequence: i, log_time: i as u64, publish_time: 0 };
            w.write_to_known_channel(&header, &[0, 1, 0, 0, 2, 0, 0, 0, b'a' + i as u8, 0]).unwrap();
        }
        w.finish().unwrap();
        drop(w);
        let bytes = std::fs::read(path).unwrap();
        let starts = records::framed(&bytes[8..]).filter(|r| r.1 == 0x06).map(|r| 8 + r.0).collect();
        (bytes, starts)
    }

    /// The bag at `path` reads as its first two messages ('a', 'b'), then an error saying `why`,
    /// and still lists its topic.
    fn assert_two_then_error(path: &Path, why: &str) {
        let (got, topics) = read_back(path);
        assert_eq!(got.len(), 3, "two messages, then the error");
        assert_eq!(got[0].as_ref().unwrap().data[8], b'a');
        assert_eq!(got[1].as_ref().unwrap().data[8], b'b');
        let err = got[2].as_ref().err().unwrap().to_string();
        assert!(err.contains(why), "{err}");
        assert_eq!(topics, ["/t"]);
    }

    /// Reads the bag at `path` whole: its messages (then an error, if any) and its topics.
    fn read_back(path: &Path) -> (Vec<Result<BagMessage, BagError>>, Vec<String>) {
        let bag = McapFile::open(path).unwrap();
        let got = bag.messages().collect();
        (got, bag.topics().unwrap().into_keys().collect())
    }

    /// Found by the fuzzer (tools/fuzz.sh, target mcap): a chunk header's uncompressed size said
    /// 8 EB and the small corrupt bag aborted the process. The stream now yields every message,
    /// that chunk's too, then one error (its zstd data ends long before the size it declared).
    #[test]
    fn a_chunk_that_claims_exabytes_ends_the_stream_with_an_error_after_the_good_messages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bag.mcap");
        let (mut bytes, starts) = three_message_bag(&path, Some(mcap::Compression::Zstd));
        // The last chunk holds the last message (the first may hold only the schema and channel);
        // its uncompressed_size comes after opcode, length and two times.
        let last = *starts.last().unwrap();
        bytes[last + 25..last + 33].copy_from_slice(&(1u64 << 60).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();

        let (got, topics) = read_back(&path);
        assert_eq!(got.len(), 4, "three messages, then the error");
        for (m, want) in got.iter().zip(b"abc") {
            assert_eq!(m.as_ref().unwrap().data[8], *want);
        }
        let err = got[3].as_ref().err().unwrap().to_string();
        assert!(err.contains("corrupt or truncated MCAP: Error during decompression"), "{err}");
        assert_eq!(topics, ["/t"]);
    }

    /// Found by the fuzzer (tools/fuzz.sh, target mcap): a record inside a compressed chunk
    /// declared 2^60 bytes and the mcap crate reserved that much while inflating it (abort).
    /// Records are now bounded by [`MAX_RECORD_BYTES`]: the messages before, then one error.
    #[test]
    fn a_record_in_a_compressed_chunk_that_claims_exabytes_ends_the_stream_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bag.mcap");
        let (bytes, starts) = three_message_bag(&path, Some(mcap::Compression::Zstd));
        // Replace the last chunk with one whose zstd records start with a message record
        // (opcode 0x05) declaring 2^60 bytes.
        let mut records = vec![0x05];
        records.extend((1u64 << 60).to_le_bytes());
        records.extend([7u8; 22]);
        let compressed = zstd::bulk::compress(&records, 0).unwrap();
        let mut body = Vec::new();
        body.extend(2u64.to_le_bytes()); // start time
        body.extend(2u64.to_le_bytes()); // end time
        body.extend((records.len() as u64).to_le_bytes());
        body.extend(0u32.to_le_bytes()); // no CRC
        body.extend(4u32.to_le_bytes());
        body.extend(b"zstd");
        body.extend((compressed.len() as u64).to_le_bytes());
        body.extend(&compressed);
        let last = *starts.last().unwrap();
        let old_len = u64::from_le_bytes(bytes[last + 1..last + 9].try_into().unwrap()) as usize;
        let mut mutated = bytes[..last].to_vec();
        mutated.push(0x06);
        mutated.extend((body.len() as u64).to_le_bytes());
        mutated.extend(&body);
        mutated.extend(&bytes[last + 9 + old_len..]);
        std::fs::write(&path, &mutated).unwrap();
        assert_two_then_error(&path, "length exceeds limit: `1152921504606846976`");
    }

    /// Found by the fuzzer (tools/fuzz.sh, target mcap): a record inside an uncompressed chunk
    /// declared more bytes than the chunk had left, and the mcap crate's reader subtracted its
    /// length from the chunk's remainder unchecked (an overflow; in a release build it then read
    /// on past the chunk). The messages before that chunk, then one error naming it; also when
    /// the chunk itself claims more than the file holds (the reader streams a chunk's records
    /// without waiting for all of it: the fuzzer's second form). A bag merely cut off inside a
    /// chunk is not such a chunk: its whole messages still come, then the reader's own error.
    #[test]
    fn a_record_that_overruns_its_uncompressed_chunk_ends_the_stream_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bag.mcap");
        let (bytes, starts) = three_message_bag(&path, None);
        assert_eq!(records::first_overrunning_chunk(&bytes[8..]), None);
        let (got, _) = read_back(&path);
        assert_eq!(got.iter().filter(|m| m.is_ok()).count(), 3, "the intact bag reads whole");
        // The last chunk's only record is the last message: after opcode, length, 28 bytes of
        // times, size and CRC, the empty compression string and the records' length.
        let last = *starts.last().unwrap();
        let record = last + 9 + 28 + 4 + 8;
        assert_eq!(bytes[record], mcap::records::op::MESSAGE);
        let len = u64::from_le_bytes(bytes[record + 1..record + 9].try_into().unwrap());
        let mut overrun = bytes.clone();
        overrun[record + 1..record + 9].copy_from_slice(&(len + 40).to_le_bytes());
        // The same, and the chunk says it runs far past the end of the file.
        let mut beyond = overrun.clone();
        beyond[last + 1..last + 9].copy_from_slice(&43_089u64.to_le_bytes());
        for mutated in [overrun, beyond] {
            std::fs::write(&path, &mutated).unwrap();
            let why = format!(
                "the uncompressed chunk at byte {last} has a record of {} bytes where {len} are left",
                len + 40
            );
            assert_two_then_error(&path, &why);
        }
        // Cut inside the last message: not an overrun; the two whole messages, then an error.
        std::fs::write(&path, &bytes[..record + 12]).unwrap();
        assert_eq!(records::first_overrunning_chunk(&bytes[8..record + 12]), None);
        let (got, _) = read_back(&path);
        assert_eq!(got.len(), 3, "two messages, then the reader's error");
        assert!(got[2].is_err());
    }

    /// Found by the fuzzer: the footer's summary_start pointed at such a chunk, and
    /// `mcap::Summary::read` (which reads every record from there on with the same reader)
    /// overflowed. That summary is not used: topics come from a scan, counts are unknown.
    #[test]
    fn a_summary_section_holding_an_overrunning_chunk_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bag.mcap");
        let (mut bytes, starts) = three_message_bag(&path, None);
        let bag = McapFile::open(&path).unwrap();
        assert_eq!(bag.message_counts().get("/t"), Some(&3), "the intact bag's summary reads");
        let last = *starts.last().unwrap();
        let record = last + 9 + 28 + 4 + 8;
        let len = u64::from_le_bytes(bytes[record + 1..record + 9].try_into().unwrap());
        bytes[record + 1..record + 9].copy_from_slice(&(len + 40).to_le_bytes());
        // The footer (29 bytes before the closing magic): opcode, length, then summary_start.
        let footer = bytes.len() - 8 - 29;
        bytes[footer + 9..footer + 17].copy_from_slice(&(last as u64).to_le_bytes());
        assert!(records::first_overrunning_chunk(&bytes[last..]).is_some());
        std::fs::write(&path, &bytes).unwrap();
        let bag = McapFile::open(&path).unwrap();
        assert!(bag.message_counts().is_empty());
        assert_eq!(bag.topics().unwrap().into_keys().collect::<Vec<_>>(), ["/t"]);
    }
}
