//! How long large reliable messages take from this node's DDS stack (RustDDS, through
//! ros2-client) to a Cyclone DDS reader with its default socket buffers, and whether large camera
//! frames from a Cyclone writer reach it: the measurements behind the `cloud_stride` default and
//! README's "Large messages" section. DDS never leaves the
//! machine: it runs only inside a private network namespace.
//!
//! ```sh
//! cargo build --release --example dds_large_messages
//! unshare -n sh -c 'ip link set lo up && SP_DUST3R_PYTHON=.venv/bin/python target/release/examples/dds_large_messages'
//! # sizes in MB, clouds per size, seconds between clouds; the reader capped at Ubuntu's default
//! # rmem_max; a Deadline on our writer (RustDDS then repairs every deadline / 5 ms):
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages 1.2,2.6 20 1.0'
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages 0.27,1.06,2.6 40 0.5 \
//!     --reader-buffer 212992 --writer-deadline-ms 5'
//! # the other way: camera frames from a Cyclone writer into the node's input QoS, 10 s each
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages images 640x480:rgb8,1280x720:rgb8 10'
//! ```
//!
//! Prints per size, for our writer and for Cyclone DDS's C writer (the reference, same QoS and
//! samples, a fresh reader) side by side: clouds sent, arrived, p50/p95/max latency (or, for
//! `images`, frames sent and received).
//! Needs the Cyclone peer (`tools/test.sh` puts cyclonedds into ./.venv).

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ros2_client::dds::rustdds::DomainParticipantBuilder;
use ros2_client::{Context, MessageTypeName, Name, Node, NodeName, NodeOptions, Publisher, Subscription};
use sp_dust3r::ros::msg::{builtin_interfaces, sensor_msgs, std_msgs};
use sp_dust3r::ros::node::{reliable_qos, sensor_qos};

fn main() -> anyhow::Result<()> {
    // The guard: every interface but loopback means a real network is reachable.
    // (/proc/net/dev lists this process's namespace; /sys/class/net may show the host's.)
    let dev = std::fs::read_to_string("/proc/net/dev")?;
    let interfaces: Vec<String> =
        dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(|i| i.trim().to_string()).collect();
    if interfaces.iter().any(|i| i != "lo") {
        anyhow::bail!("interfaces {interfaces:?}: run this inside a private network namespace, e.g. unshare -n sh -c 'ip link set lo up && {}'", std::env::args().next().unwrap_or_default());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let python = std::env::var("SP_DUST3R_PYTHON").unwrap_or_else(|_| ".venv/bin/python".into());
    if args.first().map(String::as_str) == Some("images") {
        return images(&python, &args[1..]);
    }
    let opts = Options::parse(&args)?;
    let ours = rustdds_writer(&python, &opts)?;
    let reference = cyclone_writer(&python, &opts)?;
    println!(
        "reader buffer: {}; RustDDS writer deadline: {}",
        opts.reader_buffer.map_or("Cyclone's default request".into(), |b| format!("at most {b} B")),
        opts.writer_deadline_ms
            .map_or("none".into(), |d| format!("{d} ms (repair every {} ms)", (d / 5).clamp(1, 100)))
    );
    println!(
        "{:>8} {:>5} | {:>26} | {:>26}",
        "MB", "sent", "RustDDS: arrived p50 p95 max [s]", "Cyclone: arrived p50 p95 max [s]"
    );
    for mb in &opts.sizes {
        println!("{mb:>8} {:>5} | {} | {}", opts.count, stats(&ours, *mb), stats(&reference, *mb));
    }
    Ok(())
}

/// What to send and how the reader and the writer are set up.
struct Options {
    /// Sample sizes, MB.
    sizes: Vec<f64>,
    /// Samples per size.
    count: usize,
    /// Seconds between samples.
    interval: f64,
    /// A Deadline on our writer (RustDDS repairs every deadline / 5, clamped to 1..100 ms).
    writer_deadline_ms: Option<u64>,
    /// Cap the Cyclone reader's socket receive buffer (212992: Ubuntu's default rmem_max).
    reader_buffer: Option<u64>,
}

impl Options {
    /// `[SIZES [COUNT [INTERVAL]]] [--writer-deadline-ms N] [--reader-buffer BYTES]`.
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut positional = Vec::new();
        let (mut writer_deadline_ms, mut reader_buffer) = (None, None);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{a} needs a value"));
            match a.as_str() {
                "--writer-deadline-ms" => writer_deadline_ms = Some(value()?.parse()?),
                "--reader-buffer" => reader_buffer = Some(value()?.parse()?),
                _ => positional.push(a.as_str()),
            }
        }
        Ok(Self {
            sizes: positional
                .first()
                .copied()
                .unwrap_or("0.5,1.2,2.6,5.2,10.5")
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()?,
            count: positional.get(1).map_or(Ok(10), |s| s.parse())?,
            interval: positional.get(2).map_or(Ok(1.0), |s| s.parse())?,
            writer_deadline_ms,
            reader_buffer,
        })
    }
}

/// The Cyclone reader (tools/peers/cyclone_cloud_reader.py), started and ready; its socket
/// receive buffer capped when asked.
fn start_reader(
    python: &str,
    opts: &Options,
) -> anyhow::Result<(std::process::Child, impl Iterator<Item = std::io::Result<String>>)> {
    let reader = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peers/cyclone_cloud_reader.py");
    let wait = opts.sizes.len() as f64 * opts.count as f64 * opts.interval + 30.0;
    let mut command = Command::new(python);
    command
        .args([reader, "--duration", &wait.to_string(), "--expect", &(opts.sizes.len() * opts.count).to_string()])
        .stdout(Stdio::piped());
    if let Some(bytes) = opts.reader_buffer {
        command.args(["--max-buffer", &bytes.to_string()]);
    }
    let mut peer = command
        .spawn()
        .map_err(|e| anyhow::anyhow!("{python}: {e} (set SP_DUST3R_PYTHON to a Python with cyclonedds)"))?;
    let mut lines = BufReader::new(peer.stdout.take().ok_or_else(|| anyhow::anyhow!("no peer stdout"))?).lines();
    anyhow::ensure!(lines.next().transpose()?.as_deref() == Some("READY"), "the Cyclone reader did not start");
    Ok((peer, lines))
}

/// The reader's report: every sample that arrived, with its size and latency.
fn report(
    mut peer: std::process::Child,
    mut lines: impl Iterator<Item = std::io::Result<String>>,
) -> anyhow::Result<serde_json::Value> {
    let report: serde_json::Value = match lines.find_map(|l| l.ok().filter(|l| l.starts_with('{'))) {
        Some(l) => serde_json::from_str(&l)?,
        None => anyhow::bail!("no report from the Cyclone reader"),
    };
    let _ = peer.wait();
    Ok(report)
}

/// Our stack writes (RustDDS through ros2-client, the node's output QoS).
fn rustdds_writer(python: &str, opts: &Options) -> anyhow::Result<serde_json::Value> {
    let (peer, lines) = start_reader(python, opts)?;
    let mut node = ros_node()?;
    let q = reliable_qos().deadline(opts.writer_deadline_ms.map(Duration::from_millis));
    let topic =
        node.create_topic(&Name::new("/big", "pointcloud")?, MessageTypeName::new("sensor_msgs", "PointCloud2"), &q)?;
    let publisher: Publisher<sensor_msgs::PointCloud2> = node.create_publisher(&topic, Some(q))?;
    let spinner = node.spinner()?;
    std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    let t = Instant::now();
    while node.subscription_count("/big/pointcloud") == 0 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Discovery of the reader is not yet the writer's match with it.
    std::thread::sleep(Duration::from_secs(2));

    for mb in &opts.sizes {
        let points = (mb * 1e6 / 20.0) as usize;
        for _ in 0..opts.count {
            let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
            let cloud = sensor_msgs::PointCloud2 {
                header: std_msgs::Header {
                    stamp: builtin_interfaces::Time { sec: now.as_secs() as i32, nanosec: now.subsec_nanos() },
                    frame_id: mb.to_string(),
                },
                height: 1,
                width: points as u32,
                fields: Vec::new(),
                is_bigendian: false,
                point_step: 20,
                row_step: 20 * points as u32,
                data: vec![0; points * 20],
                is_dense: true,
            };
            if let Err(e) = publisher.publish(cloud) {
                eprintln!("publish {mb} MB: {e:?}");
            }
            std::thread::sleep(Duration::from_secs_f64(opts.interval));
        }
    }
    report(peer, lines)
}

/// The reference writes: Cyclone DDS's C library (tools/peers/cyclone_cloud_writer.py), same
/// QoS, same samples, to a fresh reader set up the same way.
fn cyclone_writer(python: &str, opts: &Options) -> anyhow::Result<serde_json::Value> {
    let (peer, lines) = start_reader(python, opts)?;
    let writer = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peers/cyclone_cloud_writer.py");
    let sizes: Vec<String> = opts.sizes.iter().map(|mb| mb.to_string()).collect();
    let status = Command::new(python)
        .args([writer, "--sizes", &sizes.join(","), "--count", &opts.count.to_string()])
        .args(["--interval", &opts.interval.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "the Cyclone writer failed");
    report(peer, lines)
}

/// `arrived p50 p95 max` of one size in a reader's report.
fn stats(report: &serde_json::Value, mb: f64) -> String {
    let mut lat: Vec<f64> = report["arrived"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["size"].as_str() == Some(mb.to_string().as_str()))
        .filter_map(|a| a["latency_s"].as_f64())
        .collect();
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| lat.get(((lat.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN);
    format!("{:>8} {:>6.3} {:>6.3} {:>6.3}", lat.len(), at(0.5), at(0.95), at(1.0))
}

fn ros_node() -> anyhow::Result<Node> {
    let participant = DomainParticipantBuilder::new(0).with_only_networks([Ipv4Addr::LOCALHOST]).build()?;
    let context = Context::from_domain_participant(participant)?;
    Ok(context.new_node(NodeName::new("/", "large_messages")?, NodeOptions::new().enable_rosout(false))?)
}

/// Camera frames from a Cyclone writer (best effort) into a subscription with the node's input
/// QoS: how many of those sent arrive whole, per size.
fn images(python: &str, args: &[String]) -> anyhow::Result<()> {
    let sizes = args.first().map_or("640x480:mono8,640x480:rgb8,1280x720:rgb8,1920x1080:rgb8", |s| s.as_str());
    let seconds: f64 = args.get(1).map_or(Ok(10.0), |s| s.parse())?;
    let mut node = ros_node()?;
    let q = sensor_qos();
    let topic = node.create_topic(&Name::new("/big", "image")?, MessageTypeName::new("sensor_msgs", "Image"), &q)?;
    let subscription: Subscription<sensor_msgs::Image> = node.create_subscription(&topic, Some(q))?;
    let spinner = node.spinner()?;
    std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    let writer = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peers/cyclone_image_writer.py");
    println!("{:>16} {:>6} {:>9} {:>9}", "frame", "sent", "received", "rate [Hz]");
    for size in sizes.split(',') {
        let (dims, encoding) = size.split_once(':').unwrap_or((size, "rgb8"));
        let (w, h) = dims.split_once('x').ok_or_else(|| anyhow::anyhow!("{size}: WxH:encoding expected"))?;
        let mut peer = Command::new(python)
            .args([writer, "--width", w, "--height", h, "--encoding", encoding, "--duration", &seconds.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut received = 0usize;
        // Until the writer is done, then a second for stragglers.
        let mut done_at: Option<Instant> = None;
        while done_at.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
            match subscription.take() {
                Ok(Some((frame, _))) if frame.data.len() == frame.step as usize * frame.height as usize => {
                    received += 1
                }
                Ok(Some(_)) | Ok(None) | Err(_) => std::thread::sleep(Duration::from_millis(1)),
            }
            if done_at.is_none() && peer.try_wait()?.is_some() {
                done_at = Some(Instant::now());
            }
        }
        let report: serde_json::Value = peer
            .stdout
            .take()
            .and_then(|o| BufReader::new(o).lines().map_while(Result::ok).find(|l| l.starts_with('{')))
            .map_or(Ok(serde_json::Value::Null), |l| serde_json::from_str(&l))?;
        let sent = report["sent"].as_u64().unwrap_or(0);
        let rate = sent as f64 / report["seconds"].as_f64().unwrap_or(f64::NAN);
        println!("{size:>16} {sent:>6} {received:>9} {rate:>9.1}");
    }
    Ok(())
}
