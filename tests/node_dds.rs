//! The node on a real DDS bus against an independent DDS stack (Cyclone DDS from PyPI), inside a
//! private network namespace (`unshare -n`, loopback only): nothing leaves the machine.
//! Frames in, keypoints out with the input stamps; bad frames in between are counted and the node
//! keeps answering; SIGINT ends it cleanly.

mod common;

use common::{fixture_dir, peer_python, run_in_netns, NetnsRun};

#[test]
fn node_answers_frames_from_a_cyclone_peer_inside_a_private_network_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let plane = common::fixture_plane_npy(dir.path());

    // Tiny deterministic DUSt3R weights (the real layout at a small geometry) so pairs run fast,
    // of the 224_linear checkpoint (the DPT one runs in the other node tests).
    let dust3r = common::tiny_checkpoint(dir.path(), "224_linear");
    let node = env!("CARGO_BIN_EXE_sp_dust3r");
    let peer = common::cyclone_peer();
    let weights = fixture_dir("superpoint");
    let script = format!(
        "ip link set lo up || exit 90\n\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_weights:={weights} -p dust3r_weights:={dust3r} \
           -p dust3r_model:=224_linear -p max_keypoints:=256 -p keyframe_min_interval:=0.0 -p keyframe_max_interval:=0.5 -p confidence_threshold:=2.2 -p cloud_stride:=1 > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --ns /cam --frames 3 --timeout 60 --expect-pairs 2\n\
         rc=$?\n\
         for t in /proc/$pid/task/*; do echo \"thread $(cat $t/stat)\"; done\n\
         kill -INT $pid; t=0; while kill -0 $pid 2>/dev/null && [ $t -lt 40 ]; do sleep 0.05; t=$((t+1)); done\n\
         if kill -0 $pid 2>/dev/null; then echo node_exit=timeout; kill -9 $pid; else wait $pid; echo node_exit=$?; fi\n\
         exit $rc\n",
        weights = weights.display(),
        dust3r = dust3r.display(),
        log = dir.path().join("node.log").display(),
        py = peer_python().display(),
        peer = peer.display(),
        plane = plane.display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &dir.path().join("node.log"));
    eprintln!("peer: {report}\nnode log:\n{log}");
    let received = report["received"].as_array().unwrap();
    let sent = report["sent"].as_array().unwrap();
    assert_eq!(received.len(), sent.len(), "every good frame answered: {report}\nnode log:\n{log}");
    for (r, s) in received.iter().zip(sent) {
        assert_eq!(&r["stamp"], s, "keypoints carry the input stamp");
        assert_eq!(r["frame_id"], "cam_optical");
        assert_eq!((r["width"].as_u64(), r["height"].as_u64(), r["dim"].as_u64()), (Some(640), Some(480), Some(256)));
        assert!(r["n"].as_u64().unwrap() > 0 && r["n"].as_u64().unwrap() <= 256);
        assert_eq!((r["unit"].as_bool(), r["descending"].as_bool()), (Some(true), Some(true)));
    }
    // Frames 1 s apart with a 0.5 s maximum interval: every frame is a keyframe, so frames 2 and
    // 3 each pair with the one before. Clouds carry view 1's stamp and frame.
    let clouds = report["clouds"].as_array().unwrap();
    assert_eq!(clouds.len(), 2, "{report}\nnode log:\n{log}");
    for (k, c) in clouds.iter().enumerate() {
        assert_eq!(&c["stamp"], &sent[k], "cloud stamp = view 1's");
        assert_eq!(c["frame_id"], "cam_optical");
        assert_eq!(c["fields"], serde_json::json!(["x", "y", "z", "rgb", "confidence"]));
        assert_eq!(c["bytes"].as_u64(), Some(c["width"].as_u64().unwrap() * 20));
        // At most every pixel of both 224x224 network inputs.
        assert!((1..=2 * 224 * 224).contains(&c["width"].as_u64().unwrap()), "{c}");
        assert_eq!(c["finite"], true, "every published point is finite");
    }
    // Poses: the deterministic test weights are not a trained model, so PairViewer may find no
    // confident points; then the node says so instead of publishing an identity. Every pair is
    // accounted for either way.
    let pairs = report["pairs"].as_array().unwrap();
    let no_pose = log.matches("no pose for the pair").count();
    assert_eq!(pairs.len() + no_pose, 2, "{report}\nnode log:\n{log}");
    for p in pairs {
        let k = sent.iter().position(|s| s == &p["stamp"]).expect("pose stamp is a view-1 input stamp");
        assert_eq!(&p["view2"], &sent[k + 1], "pose: view 1's stamp, view 2's in its field");
        assert_eq!((p["frame_id"].as_str(), p["unit_quaternion"].as_bool()), (Some("cam_optical"), Some(true)));
    }
    assert!(stdout.contains("node_exit=0"), "clean exit on SIGINT within 2 s: {stdout}\nnode log:\n{log}");
    // Pairs ran on the DUSt3R pool's threads at dust3r_nice (19) below the rest of the node
    // (/proc/PID/task/TID/stat: the name in parentheses, then the nice value as field 19).
    let threads: Vec<(String, i64)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("thread "))
        .filter_map(|stat| {
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_string();
            Some((name, rest.split_whitespace().nth(16)?.parse().ok()?))
        })
        .collect();
    let (pool, others): (Vec<_>, Vec<_>) = threads.iter().partition(|(name, _)| name.starts_with("dust3r-"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(pool.len(), cores, "one DUSt3R thread per core: {threads:?}");
    assert!(pool.iter().all(|(_, nice)| *nice == 19), "{threads:?}");
    assert!(others.len() > 2 && others.iter().all(|(_, nice)| *nice == 0), "{threads:?}");
    assert!(log.contains("skipping frame"), "bad frames are reported: {log}");
    assert!(log.contains(&format!("{} errors", report["bad_sent"])), "bad frames are counted: {log}");
    // /diagnostics counts them too, by kind.
    let diag = &report["diagnostics"];
    assert_eq!(diag["errors_bad_frame"].as_str(), Some("3"), "{diag}");
    assert_eq!(diag["frames_in"].as_str(), Some("6"), "{diag}");
    assert_eq!(diag["pairs_processed"].as_str(), Some("2"), "{diag}");
    assert!(diag["input_rate_hz"].as_str().unwrap().parse::<f64>().is_ok(), "{diag}");
}

/// `image_transport: compressed`: JPEG frames on `image/compressed`, corrupt JPEGs in between.
#[test]
fn compressed_input_with_corrupt_jpegs() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = dir.path().join("frame.jpg");
    image::open(fixture_dir("superpoint").join("image.png")).unwrap().to_rgb8().save(&jpeg).unwrap();
    let plane = dir.path().join("plane.npy");
    ndarray_npy::write_npy(&plane, &ndarray::Array2::<u8>::zeros((480, 640))).unwrap();
    let node = env!("CARGO_BIN_EXE_sp_dust3r");
    let peer = common::cyclone_peer();
    let script = format!(
        "ip link set lo up || exit 90\n\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_weights:={weights} -p image_transport:=compressed > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --jpeg {jpeg} --ns /cam --frames 3 --timeout 60\n\
         rc=$?\n\
         kill -TERM $pid; wait $pid; echo node_exit=$?\n\
         exit $rc\n",
        weights = fixture_dir("superpoint").display(),
        log = dir.path().join("node.log").display(),
        py = peer_python().display(),
        peer = peer.display(),
        plane = plane.display(),
        jpeg = jpeg.display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &dir.path().join("node.log"));
    let received = report["received"].as_array().unwrap();
    assert_eq!(received.len(), 3, "{report}\nnode log:\n{log}");
    for (r, s) in received.iter().zip(report["sent"].as_array().unwrap()) {
        assert_eq!(&r["stamp"], s);
        assert_eq!((r["width"].as_u64(), r["height"].as_u64()), (Some(640), Some(480)));
    }
    assert_eq!(report["diagnostics"]["errors_bad_frame"].as_str(), Some("3"), "{report}");
    // All three counted; the log names them throttled (one line per 5 s, the next saying how
    // many were left out).
    let lines = log.matches("cannot decode image").count();
    assert!((1..=2).contains(&lines), "{log}");
    assert!(log.contains("3 bad"), "the shutdown summary counts them all: {log}");
    assert!(stdout.contains("node_exit=0"), "clean exit on SIGTERM: {stdout}");
}

/// SIGINT while DUSt3R is reconstructing a pair on the CPU (the tiny geometry still takes
/// seconds: its DPT heads have the real shapes): the node abandons the pair between two steps
/// and exits cleanly within 2 s, instead of finishing the pair first.
#[test]
fn sigint_while_a_pair_is_in_flight_ends_the_node_within_two_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let dust3r = common::tiny_dust3r(dir.path());
    let params = format!("-p dust3r_weights:={}", dust3r.display());
    let seconds = common::interrupt_mid_pair(dir.path(), "", &params);
    eprintln!("SIGINT to exit: {seconds:.2} s");
}

/// A peer with other message definitions publishes 300 undecodable samples under the Image and
/// the CameraInfo type names, then good frames, then leaves without a goodbye. Every bad sample
/// is counted by topic on /diagnostics, the log names the problem once per topic (throttled),
/// the good frames are answered, and with the subscriber gone the log stays quiet (the DDS
/// stacks' own records are shown at error level only).
#[test]
fn malformed_samples_are_counted_and_a_vanished_subscriber_keeps_the_log_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let plane = common::fixture_plane_npy(dir.path());
    let log = dir.path().join("node.log");
    let peer = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/cyclone_malformed.py");
    let script = format!(
        "ip link set lo up || exit 90\n\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_weights:={weights} \
           -p dust3r_weights:=/nonexistent > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --ns /cam --bad 300\n\
         rc=$?\n\
         before=$(wc -l < {log})\n\
         sleep 15\n\
         after=$(wc -l < {log})\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         echo quiet_lines=$((after - before))\n\
         exit $rc\n",
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
        weights = fixture_dir("superpoint").display(),
        log = log.display(),
        py = peer_python().display(),
        peer = peer.display(),
        plane = plane.display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &log);
    let ctx = format!("{stdout}\n{report}\nnode log:\n{log}");
    let diag = &report["diagnostics"];
    assert_eq!(diag["errors_malformed_cam_image"].as_str(), Some("300"), "{ctx}");
    assert_eq!(diag["errors_malformed_cam_camera_info"].as_str(), Some("300"), "{ctx}");
    assert_eq!(diag["errors_malformed_sample"].as_str(), Some("600"), "{ctx}");
    assert_eq!(report["keypoints"], report["good_sent"], "the good frames after them are served: {ctx}");
    for topic in ["/cam/image", "/cam/camera_info"] {
        let lines = log.lines().filter(|l| l.contains(&format!("a sample on {topic} does not decode"))).count();
        assert_eq!(lines, 1, "{topic}: named once in 3 s (throttled): {ctx}");
    }
    assert!(stdout.contains("node_exit=0"), "{ctx}");
    let quiet: usize = stdout.split("quiet_lines=").nth(1).unwrap().trim().parse().unwrap();
    assert!(quiet <= 2, "{quiet} log lines in 15 s after the subscriber left: {ctx}");
}

/// Runs the node with `params` against the Cyclone camera sending 1280x720 rgb8 frames at 30 Hz
/// for 4 s between three 8x8 frames before and three after, which arrive whole (the node counts
/// the sequence numbers a writer skipped between two frames that arrived); the writer's report
/// with the node's last /diagnostics, and the node's log.
fn large_frames_into_the_node(dir: &std::path::Path, params: &str) -> (serde_json::Value, String) {
    let log = dir.join("node.log");
    let writer = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/cyclone_image_writer.py");
    let script = format!(
        "ip link set lo up || exit 90\n\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_weights:=/nonexistent \
           -p dust3r_weights:=/nonexistent {params} > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {writer} --topic rt/cam/image --width 1280 --height 720 --rate 30 --duration 4 --markers 3 --diagnostics\n\
         rc=$?\n\
         kill -INT $pid; wait $pid\n\
         exit $rc\n",
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
        log = log.display(),
        py = peer_python().display(),
        writer = writer.display(),
    );
    let NetnsRun { report, log, .. } = run_in_netns(&script, &log);
    (report, log)
}

/// A stock Ubuntu receive buffer (212992 B, the node asked for no more) against 2.7 MB frames at
/// 30 Hz: frames that lose a fragment are lost whole, and every one is counted (frames in and
/// frames lost add up to the frames the writer sent from its first frame that arrived on); /diagnostics warns and says what buffer the
/// sockets have. Then the default request (8 MiB): what the kernel grants, by `net.core.rmem_max`
/// read here, and the sysctl named when it granted less.
#[test]
fn frames_that_do_not_arrive_whole_are_counted_and_the_receive_buffer_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (report, log) = large_frames_into_the_node(dir.path(), "-p receive_buffer_size:=212992");
    eprintln!("writer: {report}\nnode log:\n{log}");
    let d = &report["diagnostics"];
    let count = |k: &str| d[k].as_str().and_then(|v| v.parse::<u64>().ok()).unwrap_or_else(|| panic!("{k}: {d}"));
    let sent = report["sent"].as_u64().unwrap() + report["markers"].as_u64().unwrap();
    let (arrived, lost) = (count("frames_in"), count("frames_lost_in_transport"));
    assert!(lost > 0, "a 212992 B buffer loses some of these frames: {d}");
    assert_eq!(arrived + lost, sent, "every frame sent is either in or counted lost: {d}");
    assert_eq!((count("receive_buffer_requested_bytes"), count("receive_buffer_bytes")), (212_992, 212_992));
    let input = &d["_status"]["input"];
    assert_eq!(input["level"], 1, "{input}");
    assert!(input["message"].as_str().unwrap().contains(&format!("{lost} frames lost in transport")), "{input}");
    assert!(log.contains("did not arrive whole"), "{log}");

    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap().trim().parse().unwrap();
    let (report, log) = large_frames_into_the_node(dir.path(), "");
    let d = &report["diagnostics"];
    let asked = 8 << 20;
    assert_eq!(d["receive_buffer_requested_bytes"].as_str(), Some(asked.to_string().as_str()), "{d}");
    assert_eq!(d["receive_buffer_bytes"].as_str(), Some(rmem_max.min(asked).to_string().as_str()), "{d}");
    let fix = "sudo sysctl -w net.core.rmem_max=8388608";
    assert_eq!(d["receive_buffer_fix"].as_str(), (rmem_max < asked).then_some(fix), "{d}");
    assert_eq!(log.contains(fix), rmem_max < asked, "{log}");
}
