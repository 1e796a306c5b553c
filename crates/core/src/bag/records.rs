//! Reading MCAP records with the bounds the mcap crate leaves out: it reserves a string's
//! declared length (a u32, up to 4 GiB) before reading it, and a record's declared length
//! before inflating it, so a few corrupt bytes could otherwise make it ask for gigabytes.

use std::borrow::Cow;
use std::collections::BTreeMap;

use mcap::records::{op, Record};
use mcap::sans_io::{LinearReadEvent, LinearReader, LinearReaderOptions};

/// The most one record (a message, or a record inside a chunk) may hold (rosbag2 writes 768 KiB
/// chunks and puts a larger message in a chunk of its own; 4K RGB is 25 MB).
pub const MAX_RECORD_BYTES: usize = 256 << 20;

/// A field of a record, as far as its length matters.
#[derive(Clone, Copy)]
enum Field {
    /// `n` bytes of fixed-size fields.
    Fixed(usize),
    /// A string: u32 length, then its bytes.
    Str,
    /// A map of strings: u32 byte length, then key and value strings.
    StrMap,
    /// A map of integers: u32 byte length, then its bytes.
    Bytes,
}

/// The leading fields of each record that holds strings, per the MCAP specification (fields
/// after the last string are left to the crate's own checks).
fn layout(opcode: u8) -> &'static [Field] {
    use Field::*;
    match opcode {
        op::HEADER => &[Str, Str],
        op::SCHEMA => &[Fixed(2), Str, Str],
        op::CHANNEL => &[Fixed(4), Str, Str, StrMap],
        op::CHUNK => &[Fixed(28), Str],
        op::CHUNK_INDEX => &[Fixed(32), Bytes, Fixed(8), Str],
        op::ATTACHMENT => &[Fixed(16), Str, Str],
        op::ATTACHMENT_INDEX => &[Fixed(40), Str, Str],
        op::METADATA => &[Str, StrMap],
        op::METADATA_INDEX => &[Fixed(16), Str],
        _ => &[],
    }
}

/// Why a record is refused before parsing, or `None` when every string it declares fits in it.
pub fn oversized_string(opcode: u8, body: &[u8]) -> Option<String> {
    fn take_len(rest: &mut &[u8]) -> Option<usize> {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = u32::from_le_bytes(*len) as usize;
        let (_, tail) = tail.split_at_checked(len)?;
        *rest = tail;
        Some(len)
    }
    let too_long = || Some(format!("record {opcode:#04x} declares a string longer than the record"));
    let mut rest = body;
    for field in layout(opcode) {
        match field {
            Field::Fixed(n) => match rest.get(*n..) {
                Some(tail) => rest = tail,
                None => return None, // too short: the crate's parser says so without allocating
            },
            Field::Str | Field::Bytes => {
                if rest.len() >= 4 && take_len(&mut rest).is_none() {
                    return too_long();
                }
            }
            Field::StrMap => {
                // Too short for the map: left to the parser, as above.
                let (len, tail) = rest.split_first_chunk::<4>()?;
                let len = u32::from_le_bytes(*len) as usize;
                let mut map = &tail[..len.min(tail.len())];
                while map.len() >= 4 {
                    if take_len(&mut map).is_none() {
                        return too_long();
                    }
                }
                rest = &tail[len.min(tail.len())..];
            }
        }
    }
    None
}

/// The records of `bytes` (a run of top-level records: opcode, u64 length, body) with the offset
/// of each, from the framing alone; a record cut off by the end stops the walk.
#[cfg(test)]
pub fn framed(bytes: &[u8]) -> impl Iterator<Item = (usize, u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let (head, tail) = bytes.get(at..)?.split_first_chunk::<9>()?;
        let len = usize::try_from(u64::from_le_bytes(head[1..].try_into().ok()?)).ok()?;
        let (body, _) = tail.split_at_checked(len)?;
        let record = (at, head[0], body);
        at += 9 + len;
        Some(record)
    })
}

/// The offset in `records` (a run of top-level records: the file after its magic, or its
/// summary section) of the first uncompressed chunk with a record that runs past
/// the end of the chunk's records section (or leaves fewer bytes than a record header there),
/// with why. The crate's reader takes each record inside such a chunk at its word and
/// subtracts its length from what the chunk has left without a check: an overflow (a panic with
/// overflow checks, a wrap without, and then it reads on past the chunk). The walk follows the
/// reader, which streams a chunk's records without waiting for the whole chunk: a chunk cut off
/// by the end of the file (a recording that was killed) is checked as far as it goes, and its
/// whole records still count as good. Compressed chunks are bounded by their decompressor.
pub fn first_overrunning_chunk(records: &[u8]) -> Option<(usize, String)> {
    let mut at = 0usize;
    while let Some((head, tail)) = records.get(at..).and_then(|r| r.split_first_chunk::<9>()) {
        let len = u64::from_le_bytes(head[1..].try_into().ok()?);
        let body = &tail[..usize::try_from(len).map_or(tail.len(), |l| l.min(tail.len()))];
        if head[0] == op::CHUNK {
            if let Some(why) = chunk_overrun(body) {
                return Some((at, format!("has {why}")));
            }
        }
        at = usize::try_from(len).ok().and_then(|l| l.checked_add(9)).and_then(|l| at.checked_add(l))?;
    }
    None
}

/// How an uncompressed chunk's records overrun its records section, if they do (see
/// [`first_overrunning_chunk`]); `body` may be cut short by the end of the file.
fn chunk_overrun(body: &[u8]) -> Option<String> {
    // Start and end time, uncompressed size and CRC, the compression, the records' length.
    let (compression_len, rest) = body.get(28..)?.split_first_chunk::<4>()?;
    let (compression, rest) = rest.split_at_checked(u32::from_le_bytes(*compression_len) as usize)?;
    let (declared, records) = rest.split_first_chunk::<8>()?;
    if !compression.is_empty() {
        return None;
    }
    let declared = u64::from_le_bytes(*declared);
    let mut at = 0u64;
    while at < declared {
        let left = declared - at;
        if left < 9 {
            return Some(format!("{left} bytes after its last record, too few for another"));
        }
        // Cut off by the end of the file: the reader stops there with an error of its own.
        let head = usize::try_from(at).ok().and_then(|a| records.get(a..)?.split_first_chunk::<9>())?.0;
        let len = u64::from_le_bytes(head[1..].try_into().ok()?);
        if len > left - 9 {
            return Some(format!("a record of {len} bytes where {} are left", left - 9));
        }
        at += 9 + len;
    }
    None
}

/// The linked messages of an MCAP file in file order, as `mcap::MessageStream` yields them (its
/// schema and channel checks, through the crate's [`mcap::read::ChannelAccumulator`]), read with
/// the crate's sans-io [`LinearReader`] bounded by [`MAX_RECORD_BYTES`] and with each schema and
/// channel checked by [`oversized_string`] before it is parsed; other records are skipped
/// unparsed; the file is read only up to [`first_overrunning_chunk`], which is then the error.
/// Nothing is yielded after the first error. `stop_at_data_end`: end at the data end
/// record (a scan for the channels); otherwise the summary after it is read to the end magic,
/// so a truncated file is reported after its last message.
pub fn messages(
    bytes: &[u8],
    stop_at_data_end: bool,
) -> impl Iterator<Item = Result<mcap::Message<'static>, String>> + '_ {
    let options =
        LinearReaderOptions::default().with_record_length_limit(MAX_RECORD_BYTES).with_skip_end_magic(stop_at_data_end);
    let mut reader = LinearReader::new_with_options(options);
    let mut channels = mcap::read::ChannelAccumulator::default();
    let overrun = bytes
        .get(8..)
        .and_then(first_overrunning_chunk)
        .map(|(at, why)| (8 + at, format!("the uncompressed chunk at byte {} {why}", 8 + at)));
    let mut rest = &bytes[..overrun.as_ref().map_or(bytes.len(), |o| o.0)];
    let mut overrun = overrun.map(|o| o.1);
    let mut past_data_end = false;
    let mut done = false;
    std::iter::from_fn(move || {
        while !done {
            let (opcode, data) = match reader.next_event()? {
                Ok(LinearReadEvent::ReadRequest(need)) => {
                    if rest.is_empty() {
                        if let Some(why) = overrun.take() {
                            done = true;
                            return Some(Err(why));
                        }
                    }
                    feed(&mut reader, &mut rest, need);
                    continue;
                }
                Ok(LinearReadEvent::Record { opcode, data }) => (opcode, data),
                Err(e) => {
                    done = true;
                    return Some(Err(e.to_string()));
                }
            };
            let linked = match opcode {
                op::DATA_END if stop_at_data_end => return None,
                op::DATA_END => {
                    past_data_end = true;
                    continue;
                }
                // The summary repeats the schemas and channels; like the crate, not re-checked.
                op::SCHEMA | op::CHANNEL if past_data_end => continue,
                op::SCHEMA | op::CHANNEL | op::MESSAGE => link(&mut channels, opcode, data),
                _ => continue,
            };
            match linked {
                Ok(None) => {}
                Ok(Some(m)) => return Some(Ok(m)),
                Err(e) => {
                    done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    })
}

/// What [`summary`] keeps of a summary section: each channel's topic and type, and the
/// statistics' message count per channel.
#[derive(Debug, Default)]
pub struct SummaryView {
    pub channels: BTreeMap<u16, (String, String)>,
    pub counts: Option<BTreeMap<u16, u64>>,
}

/// The summary section the footer points at, read as `mcap::Summary::read` reads it (every
/// record from summary_start to the end magic, through the crate's reader, so a chunk there is
/// inflated and its records read too) but with each record checked by [`oversized_string`]
/// before it is parsed, and only schemas, channels and statistics parsed at all (a chunk index
/// whose compression string claimed 3.4 GB got through the crate's summary reader).
/// `Ok(None)`: the file says it has no summary.
pub fn summary(file: &[u8]) -> Result<Option<SummaryView>, String> {
    // The footer: opcode, u64 length, summary_start u64, summary_offset_start u64, CRC u32.
    let footer = file.len().checked_sub(29 + 8).and_then(|at| file.get(at..)).ok_or("too short for a footer")?;
    if footer[0] != op::FOOTER || &footer[29..] != mcap::MAGIC {
        return Err("no footer and end magic".into());
    }
    let start = u64::from_le_bytes(footer[9..17].try_into().map_err(|_| "footer")?);
    if start == 0 {
        return Ok(None);
    }
    let section = usize::try_from(start).ok().and_then(|s| file.get(s..)).ok_or("summary_start is past the end")?;
    if let Some((at, why)) = first_overrunning_chunk(section) {
        return Err(format!("the uncompressed chunk at byte {} {why}", start as usize + at));
    }
    let mut channels = mcap::read::ChannelAccumulator::default();
    let mut view = SummaryView::default();
    for_each_record(section, |opcode, data| {
        if let Some(why) = oversized_string(opcode, data) {
            return Err(why);
        }
        if !matches!(opcode, op::SCHEMA | op::CHANNEL | op::STATISTICS) {
            return Ok(());
        }
        let error = |e: mcap::McapError| e.to_string();
        match mcap::parse_record(opcode, data).map_err(error)? {
            Record::Schema { header, data } => channels.add_schema_from_slice(header, &data).map_err(error)?,
            Record::Channel(channel) => {
                let id = channel.id;
                channels.add_channel(channel).map_err(error)?;
                if let Some(c) = channels.get(id) {
                    let ros_type = c.schema.as_ref().map(|s| s.name.clone()).unwrap_or_default();
                    view.channels.insert(id, (c.topic.clone(), ros_type));
                }
            }
            Record::Statistics(stats) => view.counts = Some(stats.channel_message_counts),
            _ => {}
        }
        Ok(())
    })?;
    Ok(Some(view))
}

/// Feeds `records` (top-level records after the start magic, up to the end magic) to the
/// crate's reader bounded by [`MAX_RECORD_BYTES`], and each record it reads to `f`.
fn for_each_record(records: &[u8], mut f: impl FnMut(u8, &[u8]) -> Result<(), String>) -> Result<(), String> {
    let options = LinearReaderOptions::default()
        .with_skip_start_magic(true)
        .with_record_length_limit(MAX_RECORD_BYTES.min(records.len()));
    let mut reader = LinearReader::new_with_options(options);
    let mut rest = records;
    while let Some(event) = reader.next_event() {
        match event.map_err(|e| e.to_string())? {
            LinearReadEvent::ReadRequest(need) => feed(&mut reader, &mut rest, need),
            LinearReadEvent::Record { opcode, data } => f(opcode, data)?,
        }
    }
    Ok(())
}

/// Answers the reader's request for `need` bytes from the front of `rest` (fewer at the end:
/// none tells it the input ended).
fn feed(reader: &mut LinearReader, rest: &mut &[u8], need: usize) {
    let n = need.min(rest.len());
    reader.insert(n).copy_from_slice(&rest[..n]);
    reader.notify_read(n);
    *rest = &rest[n..];
}

/// Adds a schema or channel to `channels`, or links a message to its channel.
fn link(
    channels: &mut mcap::read::ChannelAccumulator<'static>,
    opcode: u8,
    data: &[u8],
) -> Result<Option<mcap::Message<'static>>, String> {
    if let Some(why) = oversized_string(opcode, data) {
        return Err(why);
    }
    match mcap::parse_record(opcode, data).map_err(|e| e.to_string())? {
        Record::Schema { header, data } => channels.add_schema_from_slice(header, &data).map_err(|e| e.to_string())?,
        Record::Channel(channel) => channels.add_channel(channel).map_err(|e| e.to_string())?,
        Record::Message { header, data } => {
            let channel = channels
                .get(header.channel_id)
                .ok_or_else(|| mcap::McapError::UnknownChannel(header.sequence, header.channel_id).to_string())?;
            return Ok(Some(mcap::Message {
                channel,
                sequence: header.sequence,
                log_time: header.log_time,
                publish_time: header.publish_time,
                data: Cow::Owned(data.into_owned()),
            }));
        }
        _ => {}
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_longer_than_their_record_are_refused_and_those_that_fit_pass() {
        // A channel: id, schema id, topic "/t", encoding "cdr", metadata {"k": "v"}.
        let mut channel = vec![1, 0, 0, 0];
        for s in ["/t", "cdr"] {
            channel.extend((s.len() as u32).to_le_bytes());
            channel.extend(s.as_bytes());
        }
        channel.extend(10u32.to_le_bytes());
        for s in ["k", "v"] {
            channel.extend(1u32.to_le_bytes());
            channel.extend(s.as_bytes());
        }
        assert_eq!(oversized_string(op::CHANNEL, &channel), None);
        assert!(matches!(mcap::parse_record(op::CHANNEL, &channel), Ok(Record::Channel(_))));
        // The topic says 2.5 GB (the fuzzer's finding), then a metadata value says 2 bytes.
        let mut long_topic = channel.clone();
        long_topic[4..8].copy_from_slice(&2_566_914_064u32.to_le_bytes());
        assert!(oversized_string(op::CHANNEL, &long_topic).unwrap().contains("0x04"));
        let mut long_value = channel.clone();
        let at = channel.len() - 5;
        long_value[at..at + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(oversized_string(op::CHANNEL, &long_value).is_some());
        // Cut short before a string: left to the parser, which fails without allocating.
        assert_eq!(oversized_string(op::CHANNEL, &channel[..3]), None);
        assert!(mcap::parse_record(op::CHANNEL, &channel[..3]).is_err());
    }

    #[test]
    fn a_summary_whose_metadata_name_claims_gigabytes_is_refused_before_parsing() {
        let mut w = mcap::WriteOptions::new().create(std::io::Cursor::new(Vec::new())).unwrap();
        let metadata = mcap::records::Metadata {
            name: "calibration".into(),
            metadata: [("camera".to_string(), "cam".to_string())].into(),
        };
        w.write_metadata(&metadata).unwrap();
        w.finish().unwrap();
        let mut bytes = w.into_inner().into_inner();
        assert!(summary(&bytes).unwrap().is_some());
        // The metadata record's name (its first field) says 3.5 GiB and the footer's
        // summary_start points at it (the fuzzer's finding).
        let at = 8 + framed(&bytes[8..]).find(|r| r.1 == op::METADATA).unwrap().0;
        bytes[at + 9..at + 13].copy_from_slice(&3_758_096_384u32.to_le_bytes());
        let footer = bytes.len() - 8 - 29;
        bytes[footer + 9..footer + 17].copy_from_slice(&(at as u64).to_le_bytes());
        let why = summary(&bytes).unwrap_err();
        assert!(why.contains("0x0c"), "{why}");
    }

    /// One record: opcode, u64 length, body.
    fn record(opcode: u8, body: &[u8]) -> Vec<u8> {
        let mut r = vec![opcode];
        r.extend((body.len() as u64).to_le_bytes());
        r.extend(body);
        r
    }

    /// The fuzzer's finding: the summary held an uncompressed chunk, whose records the crate's
    /// summary reader reads too, and a chunk index in it declared a 3.4 GB compression string
    /// (the crate reserved it and the process aborted).
    #[test]
    fn a_chunk_index_inside_a_summary_chunk_is_checked_before_parsing() {
        let mut index = vec![0u8; 32];
        index.extend(0u32.to_le_bytes()); // message_index_offsets: empty
        index.extend(0u64.to_le_bytes()); // message_index_length
        index.extend(3_400_000_000u32.to_le_bytes()); // compression
        index.extend(b"zstd");
        let inner = record(op::CHUNK_INDEX, &index);
        let mut chunk = vec![0u8; 28]; // start and end time, uncompressed size, CRC (0: none)
        chunk[16..24].copy_from_slice(&(inner.len() as u64).to_le_bytes());
        chunk.extend(0u32.to_le_bytes()); // no compression
        chunk.extend((inner.len() as u64).to_le_bytes());
        chunk.extend(&inner);
        let mut header = Vec::new();
        for s in ["", "fuzz"] {
            header.extend((s.len() as u32).to_le_bytes());
            header.extend(s.as_bytes());
        }
        let mut file = mcap::MAGIC.to_vec();
        file.extend(record(op::HEADER, &header));
        let chunk_at = file.len() as u64;
        file.extend(record(op::CHUNK, &chunk));
        let mut footer = chunk_at.to_le_bytes().to_vec();
        footer.extend([0u8; 12]);
        file.extend(record(op::FOOTER, &footer));
        file.extend(mcap::MAGIC);
        let why = summary(&file).unwrap_err();
        assert!(why.contains("0x08") && why.contains("longer than the record"), "{why}");
        // The same chunk index with its string as long as it says reads.
        let fits = file.len() - 8 - 29 - 4;
        file[fits - 4..fits].copy_from_slice(&4u32.to_le_bytes());
        assert!(summary(&file).unwrap().unwrap().channels.is_empty());
    }
}
