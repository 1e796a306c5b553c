//! How long large reliable messages take from the node's output writer (Cyclone DDS through
//! `sp_dust3r_node::cyclone`, what the node publishes with) to a Cyclone DDS reader, next to
//! Cyclone DDS's C writer from Python (the reference) and, with `--rustdds`, ros2-client's RustDDS
//! (the node's stack before); and whether large camera frames from a Cyclone writer reach the
//! node's input QoS: the measurements behind the `cloud_stride` default and docs/transport.md. DDS never leaves the machine: it runs only inside a private network
//! namespace.
//!
//! ```sh
//! cargo build --release --features node --example dds_large_messages
//! unshare -n sh -c 'ip link set lo up && SP_DUST3R_PYTHON=.venv/bin/python target/release/examples/dds_large_messages'
//! # sizes in MB, clouds per size, seconds between clouds; the reader capped at Ubuntu's default
//! # rmem_max; RustDDS measured too, with a Deadline (it then repairs every deadline / 5 ms):
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages 1.2,2.6 20 1.0'
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages 0.27,1.06,2.6 40 0.5 \
//!     --reader-buffer 212992 --rustdds --writer-deadline-ms 5'
//! # 1024-keypoint messages (1.06 MB) at 5 Hz for 20 s to a Fast DDS subscriber with default
//! # settings (tools/peers/fastdds_reader.cpp, Debian's libfastrtps-dev), and Cyclone's C writer
//! # sending as many bytes to another such subscriber:
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages fastdds 1024 20 5'
//! # the other way: camera frames from a Cyclone writer into the node's input QoS, 10 s each
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages images 640x480:rgb8,1280x720:rgb8 10'
//! # camera frames at 30 Hz from stock writers (Cyclone DDS's C library, Fast DDS 2.9's C++),
//! # best effort and reliable, into the node's input and a Cyclone reader at once, 10 s each
//! # (run it once per net.core.rmem_max to compare):
//! unshare -n sh -c 'ip link set lo up && target/release/examples/dds_large_messages camera 640x480,1280x720 10 30'
//! ```
//!
//! Prints per size, for our writer and for Cyclone DDS's C writer (the reference, same QoS and
//! samples, a fresh reader each) side by side: clouds sent, arrived, p50/p95/max latency (or, for
//! `images`, frames sent and received).
//! Needs the Cyclone peer (`tools/test.sh` puts cyclonedds into ./.venv).

#[path = "../tests/common/large_messages.rs"]
mod large_messages;

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use large_messages::{cloud, keypoints, latencies, node_writer, quantile, reference_clouds, send, Reader};
use ros2_client::dds::rustdds::DomainParticipantBuilder;
use ros2_client::{Context, MessageTypeName, Name, Node, NodeName, NodeOptions, Publisher, Subscription};
use sp_dust3r_core::msg::{node_msgs, sensor_msgs, to_cdr, RosMessage};
use sp_dust3r_core::params::args::RosArgs;
use sp_dust3r_core::params::qos::Qos;
use sp_dust3r_core::params::NodeParams;
use sp_dust3r_node::cyclone;
use sp_dust3r_node::dds::Dds;
use sp_dust3r_node::transport::profile;

fn main() -> anyhow::Result<()> {
    large_messages::ensure_private_network()
        .map_err(|e| anyhow::anyhow!("{e}, e.g. unshare -n sh -c 'ip link set lo up && ...'"))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let python = std::env::var("SP_DUST3R_PYTHON").unwrap_or_else(|_| ".venv/bin/python".into());
    match args.first().map(String::as_str) {
        Some("images") => return images(&python, &args[1..]),
        Some("fastdds") => return fastdds(&python, &args[1..]),
        Some("camera") => return camera(&python, &args[1..]),
        _ => {}
    }
    let opts = Options::parse(&args)?;
    let ours = node_clouds(&python, &opts)?;
    let reference = cyclone_writer(&python, &opts)?;
    let rustdds = opts.rustdds.then(|| rustdds_writer(&python, &opts)).transpose()?;
    println!(
        "reader buffer: {}{}",
        opts.reader_buffer.map_or("Cyclone's default request".into(), |b| format!("at most {b} B")),
        match (&rustdds, opts.writer_deadline_ms) {
            (Some(_), Some(d)) =>
                format!("; RustDDS writer deadline {d} ms (repair every {} ms)", (d / 5).clamp(1, 100)),
            _ => String::new(),
        }
    );
    let header = |who: &str| format!("{:>33}", format!("{who}: arrived p50 p95 max [s]"));
    print!("{:>8} {:>5} | {} | {}", "MB", "sent", header("node (Cyclone)"), header("reference (Cyclone C)"));
    println!("{}", if rustdds.is_some() { format!(" | {}", header("RustDDS")) } else { String::new() });
    for mb in &opts.sizes {
        let size = Some(mb.to_string());
        print!("{mb:>8} {:>5} | {:>33} | {:>33}", opts.count, stats(&ours, &size), stats(&reference, &size));
        println!("{}", rustdds.as_ref().map_or(String::new(), |r| format!(" | {:>33}", stats(r, &size))));
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
    /// Measure RustDDS (ros2-client) too.
    rustdds: bool,
    /// A Deadline on the RustDDS writer (it repairs every deadline / 5, clamped to 1..100 ms).
    writer_deadline_ms: Option<u64>,
    /// Cap the Cyclone reader's socket receive buffer (212992: Ubuntu's default rmem_max).
    reader_buffer: Option<u64>,
}

impl Options {
    /// `[SIZES [COUNT [INTERVAL]]] [--reader-buffer BYTES] [--rustdds [--writer-deadline-ms N]]`.
    fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut positional = Vec::new();
        let (mut writer_deadline_ms, mut reader_buffer, mut rustdds) = (None, None, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().ok_or_else(|| anyhow::anyhow!("{a} needs a value"));
            match a.as_str() {
                "--writer-deadline-ms" => writer_deadline_ms = Some(value()?.parse()?),
                "--reader-buffer" => reader_buffer = Some(value()?.parse()?),
                "--rustdds" => rustdds = true,
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
            rustdds,
            writer_deadline_ms,
            reader_buffer,
        })
    }

    fn total(&self) -> usize {
        self.sizes.len() * self.count
    }

    /// The cloud reader for one writer's run, a fresh one each time.
    fn reader(&self, python: &str) -> anyhow::Result<Reader> {
        let seconds = self.total() as f64 * self.interval + 30.0;
        Reader::cyclone(python, self.total(), seconds, self.reader_buffer)
    }

    /// The clouds in order: every size `count` times.
    fn cloud(&self, k: usize) -> sensor_msgs::PointCloud2 {
        cloud(self.sizes[(k / self.count.max(1)).min(self.sizes.len() - 1)])
    }
}

/// The node's output writer (Cyclone DDS through sp_dust3r_node::cyclone, the outputs' QoS).
fn node_clouds(python: &str, opts: &Options) -> anyhow::Result<serde_json::Value> {
    let reader = opts.reader(python)?;
    let (_participant, writer) = node_writer("rt/big/pointcloud", sensor_msgs::PointCloud2::DDS_TYPE)?;
    send(&writer, opts.total(), opts.interval, |k| opts.cloud(k))?;
    reader.report()
}

/// ros2-client's RustDDS writes (the node's stack before its outputs moved to Cyclone).
fn rustdds_writer(python: &str, opts: &Options) -> anyhow::Result<serde_json::Value> {
    let reader = opts.reader(python)?;
    let mut node = ros_node()?;
    let q = profile(Qos::OUTPUTS).deadline(opts.writer_deadline_ms.map(Duration::from_millis));
    let topic =
        node.create_topic(&Name::new("/big", "pointcloud")?, MessageTypeName::new("sensor_msgs", "PointCloud2"), &q)?;
    let publisher: Publisher<Dds<sensor_msgs::PointCloud2>> = node.create_publisher(&topic, Some(q))?;
    let spinner = node.spinner()?;
    std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    let t = Instant::now();
    while node.subscription_count("/big/pointcloud") == 0 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    // Discovery of the reader is not yet the writer's match with it.
    std::thread::sleep(Duration::from_secs(2));
    for k in 0..opts.total() {
        if let Err(e) = publisher.publish(Dds(opts.cloud(k))) {
            eprintln!("publish: {e:?}");
        }
        std::thread::sleep(Duration::from_secs_f64(opts.interval));
    }
    reader.report()
}

/// The reference writes: Cyclone DDS's C library (tools/peers/cyclone_cloud_writer.py), same
/// QoS, same samples, to a fresh reader set up the same way.
fn cyclone_writer(python: &str, opts: &Options) -> anyhow::Result<serde_json::Value> {
    let reader = opts.reader(python)?;
    let sizes: Vec<String> = opts.sizes.iter().map(|mb| mb.to_string()).collect();
    reference_clouds(python, &sizes.join(","), opts.count, opts.interval)?;
    reader.report()
}

/// `arrived p50 p95 max` of one size (all when `None`) in a reader's report.
fn stats(report: &serde_json::Value, size: &Option<String>) -> String {
    let lat = latencies(report, size.as_deref());
    let q = |p| quantile(&lat, p);
    format!("{:>8} {:>6.3} {:>6.3} {:>6.3}", lat.len(), q(0.5), q(0.95), q(1.0))
}

fn ros_node() -> anyhow::Result<Node> {
    let participant = DomainParticipantBuilder::new(0).with_only_networks([Ipv4Addr::LOCALHOST]).build()?;
    let context = Context::from_domain_participant(participant)?;
    Ok(context.new_node(NodeName::new("/", "large_messages")?, NodeOptions::new().enable_rosout(false))?)
}

/// Keypoint messages from the node's output writer to a Fast DDS subscriber with default
/// settings, and the reference: Cyclone DDS's C writer sending clouds of the same size to a fresh
/// subscriber set up the same way. `[KEYPOINTS [SECONDS [HZ]]]`.
fn fastdds(python: &str, args: &[String]) -> anyhow::Result<()> {
    let n: usize = args.first().map_or(Ok(1024), |s| s.parse())?;
    let seconds: f64 = args.get(1).map_or(Ok(20.0), |s| s.parse())?;
    let hz: f64 = args.get(2).map_or(Ok(5.0), |s| s.parse())?;
    let sent = (seconds * hz).round() as usize;
    let (topic, dds_type) = ("rt/big/keypoints", node_msgs::Keypoints::DDS_TYPE);
    let reader = Reader::fastdds(topic, dds_type, sent, seconds + 30.0)?;
    let (_participant, writer) = node_writer(topic, dds_type)?;
    send(&writer, sent, 1.0 / hz, |k| keypoints(n, k))?;
    let ours = reader.report()?;
    let bytes = ours["arrived"][0]["bytes"].as_u64().unwrap_or(0);
    let mb = format!("{:.2}", bytes as f64 / 1e6);

    let reader = Reader::fastdds("rt/big/pointcloud", sensor_msgs::PointCloud2::DDS_TYPE, sent, seconds + 30.0)?;
    reference_clouds(python, &mb, sent, 1.0 / hz)?;
    let reference = reader.report()?;

    let header = |who: &str| format!("{:>33}", format!("{who}: arrived p50 p95 max [s]"));
    println!("Fast DDS subscriber, default settings; {n} keypoints = {mb} MB at {hz} Hz");
    println!("{:>8} {:>5} | {} | {}", "MB", "sent", header("node (Cyclone)"), header("reference (Cyclone C)"));
    println!("{mb:>8} {sent:>5} | {:>33} | {:>33}", stats(&ours, &None), stats(&reference, &None));
    Ok(())
}

/// Camera frames from a Cyclone writer (best effort) into a subscription with the node's input
/// QoS: how many of those sent arrive whole, per size.
fn images(python: &str, args: &[String]) -> anyhow::Result<()> {
    let sizes = args.first().map_or("640x480:mono8,640x480:rgb8,1280x720:rgb8,1920x1080:rgb8", |s| s.as_str());
    let seconds: f64 = args.get(1).map_or(Ok(10.0), |s| s.parse())?;
    let mut node = ros_node()?;
    let q = profile(Qos::SENSOR_DATA);
    let topic = node.create_topic(&Name::new("/big", "image")?, MessageTypeName::new("sensor_msgs", "Image"), &q)?;
    let subscription: Subscription<Dds<sensor_msgs::Image>> = node.create_subscription(&topic, Some(q))?;
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
                Ok(Some((Dds(frame), _))) if frame.data.len() == frame.step as usize * frame.height as usize => {
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

/// Camera frames (rgb8) at a camera's rate from stock writers, Cyclone DDS's C library with its
/// defaults (driven from here) and Fast DDS 2.9's C++ peer with its defaults, best effort and
/// reliable, into the node's input (RustDDS with its QoS and receive buffer request) and a
/// Cyclone reader (best effort, Cyclone's defaults) in the same run: frames received of those
/// sent, p50 and p95 latency from the stamp (the writer's clock when it sent). `[SIZES [SECONDS
/// [HZ]]]`, sizes as WxH.
fn camera(python: &str, args: &[String]) -> anyhow::Result<()> {
    let sizes = args.first().map_or("640x480,1280x720", |s| s.as_str());
    let seconds: f64 = args.get(1).map_or(Ok(10.0), |s| s.parse())?;
    let hz: f64 = args.get(2).map_or(Ok(30.0), |s| s.parse())?;
    let rmem_max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")?;
    let asked = NodeParams::resolve(&RosArgs::default(), "/sp_dust3r")?.0.receive_buffer_size;
    let granted = sp_dust3r_node::transport::granted_receive_buffer(asked)?;
    println!("net.core.rmem_max {} B; the node's input asks for {asked} B and gets {granted} B", rmem_max.trim());
    let participant = DomainParticipantBuilder::new(0)
        .with_only_networks([Ipv4Addr::LOCALHOST])
        .socket_receive_buffer_size(asked)
        .build()?;
    let context = Context::from_domain_participant(participant)?;
    let mut node = context.new_node(NodeName::new("/", "camera_input")?, NodeOptions::new().enable_rosout(false))?;
    let q = profile(Qos::SENSOR_DATA);
    let topic = node.create_topic(&Name::new("/big", "image")?, MessageTypeName::new("sensor_msgs", "Image"), &q)?;
    let input: Subscription<Dds<sensor_msgs::Image>> = node.create_subscription(&topic, Some(q))?;
    let spinner = node.spinner()?;
    std::thread::spawn(move || futures::executor::block_on(spinner.spin()));
    let header = |who: &str| format!("{:>28}", format!("{who}: got p50 p95 [s]"));
    println!(
        "{:>9} {:>8} {:>11} {:>5} | {} | {}",
        "frame",
        "writer",
        "reliability",
        "sent",
        header("node"),
        header("Cyclone")
    );
    for size in sizes.split(',') {
        let (w, h) = size.split_once('x').ok_or_else(|| anyhow::anyhow!("{size}: WxH expected"))?;
        let (w, h): (u32, u32) = (w.parse()?, h.parse()?);
        for writer in ["cyclone", "fastdds"] {
            for reliable in [false, true] {
                while let Ok(Some(_)) = input.take() {}
                let reference = Reader::cyclone_images(python, "rt/big/image", seconds + 10.0)?;
                let (sent, ours) = camera_run(&input, writer, w, h, hz, seconds, reliable)?;
                let theirs = latencies(&reference.report()?, None);
                let row =
                    |lat: &[f64]| format!("{:>11} {:>6.3} {:>6.3}", lat.len(), quantile(lat, 0.5), quantile(lat, 0.95));
                let reliability = if reliable { "reliable" } else { "best effort" };
                println!(
                    "{size:>9} {writer:>8} {reliability:>11} {sent:>5} | {:>28} | {:>28}",
                    row(&ours),
                    row(&theirs)
                );
            }
        }
    }
    Ok(())
}

/// One writer's frames into `input` until the writer is done and a second more: the frames sent
/// and the sorted latencies of the whole frames taken.
fn camera_run(
    input: &Subscription<Dds<sensor_msgs::Image>>,
    writer: &str,
    w: u32,
    h: u32,
    hz: f64,
    seconds: f64,
    reliable: bool,
) -> anyhow::Result<(usize, Vec<f64>)> {
    let sending = match writer {
        "cyclone" => {
            let handle = std::thread::spawn(move || cyclone_camera(w, h, hz, seconds, reliable));
            Sending::Thread(handle)
        }
        _ => {
            let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peers/build-fastdds-peer.sh"))
                .arg("image_writer")
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "building the Fast DDS writer: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let reliability = if reliable { "reliable" } else { "best_effort" };
            let child = Command::new(String::from_utf8(out.stdout)?.trim())
                .args(["rt/big/image", &w.to_string(), &h.to_string(), "rgb8", &hz.to_string(), &seconds.to_string()])
                .arg(reliability)
                .stdout(Stdio::piped())
                .spawn()?;
            Sending::Child(child)
        }
    };
    let mut lat = Vec::new();
    let mut done_at: Option<Instant> = None;
    let mut sending = Some(sending);
    let mut sent = 0;
    while done_at.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
        match input.take() {
            Ok(Some((Dds(frame), _))) if frame.data.len() == frame.step as usize * frame.height as usize => {
                let stamp = f64::from(frame.header.stamp.sec) + f64::from(frame.header.stamp.nanosec) * 1e-9;
                lat.push(now_seconds() - stamp);
            }
            _ => std::thread::sleep(Duration::from_millis(1)),
        }
        if done_at.is_none() && sending.as_mut().is_some_and(Sending::finished) {
            sent = sending.take().map_or(Ok(0), Sending::sent)?;
            done_at = Some(Instant::now());
        }
    }
    lat.sort_by(f64::total_cmp);
    Ok((sent, lat))
}

/// A camera writer running: a thread of this process or a peer process.
enum Sending {
    Thread(std::thread::JoinHandle<anyhow::Result<usize>>),
    Child(std::process::Child),
}

impl Sending {
    fn finished(&mut self) -> bool {
        match self {
            Sending::Thread(t) => t.is_finished(),
            Sending::Child(c) => c.try_wait().ok().flatten().is_some(),
        }
    }

    /// How many frames it sent.
    fn sent(self) -> anyhow::Result<usize> {
        match self {
            Sending::Thread(t) => t.join().map_err(|_| anyhow::anyhow!("the Cyclone camera panicked"))?,
            Sending::Child(mut c) => {
                let line = c
                    .stdout
                    .take()
                    .and_then(|o| BufReader::new(o).lines().map_while(Result::ok).find(|l| l.starts_with('{')));
                let report: serde_json::Value = serde_json::from_str(&line.unwrap_or_default())?;
                Ok(report["sent"].as_u64().unwrap_or(0) as usize)
            }
        }
    }
}

/// Cyclone DDS's C library with its own defaults (loopback only), as a camera driver on Cyclone
/// sends: `w`x`h` rgb8 frames at `hz` for `seconds`, stamped when sent, once both readers matched.
fn cyclone_camera(w: u32, h: u32, hz: f64, seconds: f64, reliable: bool) -> anyhow::Result<usize> {
    let participant = cyclone::Participant::new(0, cyclone::LOCALHOST_ONLY)?;
    let qos = if reliable {
        Qos { reliable: true, keep_all: false, depth: 10, transient_local: false }
    } else {
        Qos::SENSOR_DATA
    };
    let writer = participant.writer("rt/big/image", sensor_msgs::Image::DDS_TYPE, qos)?;
    let t = Instant::now();
    while writer.matched() < 2 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut frame = sensor_msgs::Image {
        height: h,
        width: w,
        encoding: "rgb8".into(),
        step: w * 3,
        data: vec![128; (w * h * 3) as usize],
        ..Default::default()
    };
    frame.header.frame_id = "cam".into();
    let start = Instant::now();
    let mut sent = 0usize;
    while start.elapsed().as_secs_f64() < seconds {
        let target = Duration::from_secs_f64(sent as f64 / hz);
        if let Some(wait) = target.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        frame.header.stamp = large_messages::stamp_now();
        writer.write(&to_cdr(&frame)?)?;
        sent += 1;
    }
    std::thread::sleep(Duration::from_secs(2));
    Ok(sent)
}

/// The wall clock in seconds, as stamps carry it.
fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
