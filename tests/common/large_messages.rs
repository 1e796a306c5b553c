//! Large samples from the node's output writer (Cyclone DDS through `sp_dust3r_node::cyclone`) to
//! independent readers: a Cyclone DDS reader from PyPI (`tools/peers/cyclone_cloud_reader.py`,
//! its socket buffer capped when asked) and a Fast DDS subscriber with default settings
//! (`tools/peers/fastdds_reader.cpp`). Shared by tests/dds_transport.rs and
//! examples/dds_large_messages.rs (which includes this file). Run only inside a private network
//! namespace.

use std::io::{BufRead, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, ensure, Context as _};
use sp_dust3r_core::msg::{builtin_interfaces, node_msgs, sensor_msgs, std_msgs, to_cdr, RosMessage};
use sp_dust3r_core::params::qos::Qos;
use sp_dust3r_node::cyclone;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Fails unless loopback is the only interface: DDS must not reach a real network.
/// (/proc/net/dev lists this process's namespace; /sys/class/net may show the host's.)
pub fn ensure_private_network() -> anyhow::Result<()> {
    let dev = std::fs::read_to_string("/proc/net/dev")?;
    let interfaces: Vec<&str> = dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
    ensure!(
        interfaces.iter().all(|i| *i == "lo"),
        "interfaces {interfaces:?}: run this inside a private network namespace (unshare -n)"
    );
    Ok(())
}

/// Now as a message stamp.
pub fn stamp_now() -> builtin_interfaces::Time {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    builtin_interfaces::Time { sec: now.as_secs() as i32, nanosec: now.subsec_nanos() }
}

/// A cloud of `mb` MB stamped now, its size in frame_id (what the Cyclone reader reports by).
pub fn cloud(mb: f64) -> sensor_msgs::PointCloud2 {
    let points = (mb * 1e6 / 20.0) as usize;
    sensor_msgs::PointCloud2 {
        header: std_msgs::Header { stamp: stamp_now(), frame_id: mb.to_string() },
        height: 1,
        width: points as u32,
        fields: Vec::new(),
        is_bigendian: false,
        point_step: 20,
        row_step: 20 * points as u32,
        data: vec![0; points * 20],
        is_dense: true,
    }
}

/// `n` keypoints with 256-d descriptors, stamped now (1024: 1.06 MB, the node's default).
pub fn keypoints(n: usize, k: usize) -> node_msgs::Keypoints {
    node_msgs::Keypoints {
        header: std_msgs::Header { stamp: stamp_now(), frame_id: "cam_optical".into() },
        height: 480,
        width: 640,
        x: (0..n).map(|i| (i % 640) as f32).collect(),
        y: (0..n).map(|i| (i / 640) as f32).collect(),
        scores: vec![0.5; n],
        descriptor_dim: 256,
        descriptors: (0..n * 256).map(|i| ((i + k) % 97) as f32 / 97.0).collect(),
    }
}

/// A reader process that printed READY and will print one JSON report.
pub struct Reader {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Reader {
    fn start(mut command: Command, what: &str) -> anyhow::Result<Self> {
        let mut child = command.stdout(Stdio::piped()).spawn().with_context(|| format!("starting {what}"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout from {what}"))?;
        let mut lines = BufReader::new(stdout).lines();
        ensure!(lines.next().transpose()?.as_deref() == Some("READY"), "{what} did not start");
        Ok(Self { child, lines })
    }

    /// The PyPI Cyclone DDS reader of PointCloud2 on `rt/big/pointcloud`, its socket receive
    /// buffer capped at `max_buffer` bytes when given.
    pub fn cyclone(python: &str, expect: usize, seconds: f64, max_buffer: Option<u64>) -> anyhow::Result<Self> {
        let mut command = Command::new(python);
        command.arg(format!("{ROOT}/tools/peers/cyclone_cloud_reader.py"));
        command.args(["--duration", &seconds.to_string(), "--expect", &expect.to_string()]);
        if let Some(bytes) = max_buffer {
            command.args(["--max-buffer", &bytes.to_string()]);
        }
        Self::start(command, "the Cyclone reader (set SP_DUST3R_PYTHON to a Python with cyclonedds)")
    }

    /// The PyPI Cyclone DDS reader of sensor_msgs/Image on `topic`, best effort keep last 5 (a
    /// camera subscriber's QoS), Cyclone's defaults on loopback (the node's loopback settings,
    /// which Fast DDS's discovery also finds).
    #[allow(dead_code)] // the example's; the tests include this file too
    pub fn cyclone_images(python: &str, topic: &str, seconds: f64) -> anyhow::Result<Self> {
        let mut command = Command::new(python);
        command.env("CYCLONEDDS_URI", cyclone::LOCALHOST_ONLY);
        command.arg(format!("{ROOT}/tools/peers/cyclone_cloud_reader.py"));
        command.args(["--image", "--topic", topic, "--duration", &seconds.to_string()]);
        Self::start(command, "the Cyclone reader (set SP_DUST3R_PYTHON to a Python with cyclonedds)")
    }

    /// The Fast DDS subscriber (default settings) of `dds_type` on `topic`, built first if needed.
    pub fn fastdds(topic: &str, dds_type: &str, expect: usize, seconds: f64) -> anyhow::Result<Self> {
        let out = Command::new(format!("{ROOT}/tools/peers/build-fastdds-peer.sh")).arg("reader").output()?;
        ensure!(out.status.success(), "building the Fast DDS peer: {}", String::from_utf8_lossy(&out.stderr));
        let mut command = Command::new(String::from_utf8(out.stdout)?.trim());
        command.args([topic, dds_type, &seconds.to_string(), &expect.to_string()]);
        Self::start(command, "the Fast DDS reader")
    }

    /// Kills it (SIGKILL): a subscriber that vanishes without a goodbye, as a crashed viewer or
    /// a dropped link does; its participant stays matched until its lease ends.
    #[allow(dead_code)] // tests/dds_transport.rs's; the example includes this file too
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its report: `{"arrived": [{"latency_s": .., "size"|"bytes": ..}, ..]}`.
    pub fn report(mut self) -> anyhow::Result<serde_json::Value> {
        let line = self.lines.find_map(|l| l.ok().filter(|l| l.starts_with('{')));
        let _ = self.child.wait();
        match line {
            Some(l) => Ok(serde_json::from_str(&l)?),
            None => bail!("no report from the reader"),
        }
    }
}

/// The node's writer for `dds_type` on `topic` (the outputs' QoS, loopback only), once a reader
/// has matched and settled.
pub fn node_writer(topic: &str, dds_type: &str) -> anyhow::Result<(cyclone::Participant, cyclone::Writer)> {
    let participant = cyclone::Participant::new(0, &cyclone::config(true))?;
    let writer = participant.writer(topic, dds_type, Qos::OUTPUTS)?;
    let t = Instant::now();
    while writer.matched() == 0 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    ensure!(writer.matched() > 0, "no reader matched {topic} in 20 s");
    // Discovery done is not yet the reader's match with us: let it settle, as the peers do.
    std::thread::sleep(Duration::from_secs(2));
    Ok((participant, writer))
}

/// Writes `count` messages made by `make(k)` at `interval` seconds, then waits for reliable
/// delivery of what is left in the history.
pub fn send<T: RosMessage + serde::Serialize>(
    writer: &cyclone::Writer,
    count: usize,
    interval: f64,
    mut make: impl FnMut(usize) -> T,
) -> anyhow::Result<()> {
    for k in 0..count {
        writer.write(&to_cdr(&make(k))?)?;
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
    std::thread::sleep(Duration::from_secs(5));
    Ok(())
}

/// The sorted latencies in a report, of one size (the frame_id the cloud reader reports) or all.
pub fn latencies(report: &serde_json::Value, size: Option<&str>) -> Vec<f64> {
    let mut lat: Vec<f64> = report["arrived"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| size.is_none() || a["size"].as_str() == size)
        .filter_map(|a| a["latency_s"].as_f64())
        .collect();
    lat.sort_by(f64::total_cmp);
    lat
}

/// The `q` quantile (nearest rank) of sorted values; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted.get(((sorted.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or(f64::NAN)
}

/// Runs Cyclone DDS's C writer (tools/peers/cyclone_cloud_writer.py): `count` clouds of each of
/// `sizes` (MB, comma-separated), `interval` seconds apart.
pub fn reference_clouds(python: &str, sizes: &str, count: usize, interval: f64) -> anyhow::Result<()> {
    let status = std::process::Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/peers/cyclone_cloud_writer.py"))
        .args(["--sizes", sizes, "--count", &count.to_string(), "--interval", &interval.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "the Cyclone writer failed");
    Ok(())
}
