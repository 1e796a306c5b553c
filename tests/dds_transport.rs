//! The node's output writer (Cyclone DDS, crates/node/src/cyclone.rs) against subscribers as a stock
//! Ubuntu machine has them: large reliable samples arrive whole and in time at a Cyclone DDS reader
//! whose socket buffer is Ubuntu's default 212992 bytes, and at a Fast DDS subscriber with default
//! settings (what RViz gets). ros2-client's RustDDS, the node's writer before, lost 7 of 40 such
//! 1.06 MB samples to the same capped reader and delivered the rest with p95 48 s; Cyclone DDS's
//! C writer, the reference, p95 0.34 s (examples/dds_large_messages prints both). Also: full
//! resolution clouds (10.5 MB) to a reader with Cyclone's default buffer, and a subscriber that
//! vanishes mid-stream without holding up the others.
//!
//! Each test runs itself again inside a private network namespace (`unshare -n`, loopback only):
//! nothing leaves the machine.

mod common;

#[allow(dead_code)]
#[path = "common/large_messages.rs"]
mod large_messages;

use large_messages::{cloud, keypoints, latencies, node_writer, quantile, reference_clouds, send, Reader};
use sp_dust3r_core::msg::{node_msgs, sensor_msgs, RosMessage};

/// Set in the namespaced re-run.
const INSIDE: &str = "SP_DUST3R_TEST_INSIDE_NETNS";

/// Inside the namespace: true, go on. Outside: runs `test` of this binary again under
/// `unshare -n` with `env`, fails if it fails, and returns false.
fn inside_netns(test: &str, env: &[(&str, &str)]) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        large_messages::ensure_private_network().unwrap();
        return true;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" --exact \"$1\" --nocapture --test-threads 1"])
        .arg(exe)
        .arg(test)
        .env(INSIDE, "1")
        .envs(env.iter().copied())
        .output()
        .expect("unshare (root) is needed for DDS tests");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "{test} inside the namespace failed");
    assert!(text.contains("1 passed"), "{test} did not run inside the namespace");
    false
}

/// Asserts that all `count` samples (of `size`, or all) in a reader's report arrived, with p95
/// latency at most `p95_max` seconds.
fn all_arrive_in_time(what: &str, report: &serde_json::Value, size: Option<&str>, count: usize, p95_max: f64) {
    let lat = latencies(report, size);
    let (p50, p95) = (quantile(&lat, 0.5), quantile(&lat, 0.95));
    eprintln!("{what} x {count}: {} arrived, p50 {p50:.3} s, p95 {p95:.3} s", lat.len());
    assert_eq!(lat.len(), count, "nothing lost: {report}");
    assert!(p95 <= p95_max, "p95 {p95:.3} s: {report}");
}

/// `count` clouds of `mb` MB at 2 Hz from the node's writer to a fresh Cyclone reader (its
/// buffer capped at `max_buffer` when given): none lost, p95 at most `p95_max` seconds.
fn clouds_arrive_in_time(mb: f64, count: usize, max_buffer: Option<u64>, p95_max: f64) {
    let python = common::peer_python();
    let reader = Reader::cyclone(python.to_str().unwrap(), count, 60.0, max_buffer).unwrap();
    let (_participant, writer) = node_writer("rt/big/pointcloud", sensor_msgs::PointCloud2::DDS_TYPE).unwrap();
    send(&writer, count, 0.5, |_| cloud(mb)).unwrap();
    let size = mb.to_string(); // the reader reports by frame_id, which cloud() sets to this
    all_arrive_in_time(&format!("{size} MB clouds"), &reader.report().unwrap(), Some(&size), count, p95_max);
}

#[test]
fn megabyte_samples_reach_a_reader_with_ubuntus_default_socket_buffer() {
    if !inside_netns("megabyte_samples_reach_a_reader_with_ubuntus_default_socket_buffer", &[]) {
        return;
    }
    // The bar: within 2x of the C writer's p95 (0.34-0.36 s here); 1 s leaves room for a busy CI machine.
    clouds_arrive_in_time(1.06, 20, Some(212_992), 1.0);
}

#[test]
fn full_resolution_clouds_reach_a_reader_with_cyclones_default_buffer_within_a_second() {
    if !inside_netns("full_resolution_clouds_reach_a_reader_with_cyclones_default_buffer_within_a_second", &[]) {
        return;
    }
    // A pair's cloud at cloud_stride 1 (2 x 512 x 512 points, 10.5 MB) at 2 Hz. With Cyclone's
    // 1344-byte fragments this took p95 3.3-4.1 s; the C writer 0.6-1.2 s, and up to 1.8 s when
    // this shared machine is slow. So the bar is 1 s or 1.5x the C writer's p95 measured just
    // before, whichever is larger.
    let (mb, count) = (10.5, 10);
    let python = common::peer_python();
    let reader = Reader::cyclone(python.to_str().unwrap(), count, 60.0, None).unwrap();
    reference_clouds(python.to_str().unwrap(), &mb.to_string(), count, 0.5).unwrap();
    let reference = latencies(&reader.report().unwrap(), Some(&mb.to_string()));
    let reference_p95 = quantile(&reference, 0.95);
    eprintln!("the C writer: {} of {count} arrived, p95 {reference_p95:.3} s", reference.len());
    clouds_arrive_in_time(mb, count, None, (1.5 * reference_p95).max(1.0));
}

#[test]
fn a_subscriber_that_vanishes_does_not_hold_up_the_others() {
    if !inside_netns("a_subscriber_that_vanishes_does_not_hold_up_the_others", &[]) {
        return;
    }
    // Two capped readers; one is killed after a few clouds and, silent, stays matched until its
    // lease (10 s) ends. The other must still get every cloud in time: the writer may not wait
    // for acknowledgements that will never come.
    let python = common::peer_python();
    let python = python.to_str().unwrap();
    let (before, after, interval) = (4, 20, 0.5);
    let stays = Reader::cyclone(python, before + after, 90.0, Some(212_992)).unwrap();
    let vanishes = Reader::cyclone(python, before + after, 90.0, Some(212_992)).unwrap();
    let (_participant, writer) = node_writer("rt/big/pointcloud", sensor_msgs::PointCloud2::DDS_TYPE).unwrap();
    assert_eq!(writer.matched(), 2, "both readers matched");
    send(&writer, before, interval, |_| cloud(1.06)).unwrap();
    vanishes.kill();
    assert_eq!(writer.matched(), 2, "a killed reader leaves no goodbye: still matched");
    send(&writer, after, interval, |_| cloud(1.06)).unwrap();
    all_arrive_in_time("1.06 MB clouds", &stays.report().unwrap(), Some("1.06"), before + after, 1.0);
}

#[test]
fn keypoints_reach_a_fast_dds_subscriber_with_default_settings() {
    if !inside_netns("keypoints_reach_a_fast_dds_subscriber_with_default_settings", &[]) {
        return;
    }
    // 1024 keypoints (1.06 MB, the node's default) at 5 Hz.
    let (count, hz) = (25, 5.0);
    let (topic, dds_type) = ("rt/cam/keypoints", node_msgs::Keypoints::DDS_TYPE);
    let reader = Reader::fastdds(topic, dds_type, count, 60.0).unwrap();
    let (_participant, writer) = node_writer(topic, dds_type).unwrap();
    send(&writer, count, 1.0 / hz, |k| keypoints(1024, k)).unwrap();
    let report = reader.report().unwrap();
    all_arrive_in_time("keypoints", &report, None, count, 0.5);
    let bytes = report["arrived"][0]["bytes"].as_u64().unwrap();
    assert!((1_060_000..1_070_000).contains(&bytes), "a 1024-keypoint message is 1.06 MB: {bytes}");
}

#[test]
fn the_writer_survives_cyclone_content_tracing() {
    let dir = std::env::temp_dir().join(format!("sp_dust3r_trace_{}", std::process::id()));
    let trace = dir.join("cyclone.log");
    let uri = format!(
        "<CycloneDDS><Domain><Tracing><Verbosity>finest</Verbosity><OutputFile>{}</OutputFile></Tracing></Domain></CycloneDDS>",
        trace.display()
    );
    if std::env::var_os(INSIDE).is_none() {
        std::fs::create_dir_all(&dir).unwrap();
    }
    if !inside_netns("the_writer_survives_cyclone_content_tracing", &[("CYCLONEDDS_URI", &uri)]) {
        // Cyclone printed the samples it wrote, through our print operation.
        let log = std::fs::read_to_string(&trace).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(log.contains("bytes of CDR"), "no sample in the trace: {} lines", log.lines().count());
        return;
    }
    let participant = sp_dust3r_node::cyclone::Participant::new(0, &sp_dust3r_node::cyclone::config(true)).unwrap();
    let writer = participant
        .writer("rt/big/pointcloud", sensor_msgs::PointCloud2::DDS_TYPE, sp_dust3r_core::params::qos::Qos::OUTPUTS)
        .unwrap();
    writer.write(&sp_dust3r_core::msg::to_cdr(&cloud(0.01)).unwrap()).unwrap();
}
