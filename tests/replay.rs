//! `sp_dust3r replay`: bags written by PyPI rosbags in, our bag out, read back by rosbags —
//! every good frame answered once with its stamp, camera topics copied through, pairs' clouds
//! and poses stamped as in the node; a truncated input bag is a clear error and the output
//! written so far is a valid bag; a .db3 bag gets the conversion command.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture_dir, peer_python};
use serde_json::{json, Value};
use sp_dust3r_core::bag::replay::{choose_topics, output_topic, CameraTopics, TopicError};

fn rosbags(args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/rosbags_bag.py");
    let out = Command::new(peer_python()).arg(script).args(args).output().expect("rosbags peer");
    assert!(out.status.success(), "rosbags peer: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("peer JSON")
}

/// What `ros2 bag play` offers on a topic from its recorded offers (rosbags' reading of them):
/// a reliability or durability every offer shares; else, as with none, reliable and volatile.
fn play_offer(offers: &Value) -> (String, String) {
    let offers = offers.as_array().map(Vec::as_slice).unwrap_or_default();
    let shared = |k: usize, fallback: &str| match offers.first().and_then(|o| o[k].as_str()) {
        Some(first) if offers.iter().all(|o| o[k].as_str() == Some(first)) => first.to_string(),
        _ => fallback.to_string(),
    };
    (shared(2, "RELIABLE"), shared(3, "VOLATILE"))
}

/// Each display of config/trajectory.rviz whose topic the bag holds gets what it asks for when
/// the bag is played: its reliability and durability are met by the play offer (a transient
/// local request, as the path's and the map's, needs a transient local offer). The node's own
/// outputs are recorded with the QoS it publishes them with.
fn plays_into_trajectory_rviz(bag: &Value) {
    let text =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/trajectory.rviz")).unwrap();
    let requests = common::rviz_subscriptions(&text);
    let held: Vec<&(String, String, String)> = requests.iter().filter(|(t, _, _)| bag.get(t).is_some()).collect();
    assert!(held.len() >= 4, "trajectory.rviz's displays of the replay's topics: {requests:?}");
    for (topic, reliability, durability) in held {
        let (offered_r, offered_d) = play_offer(&bag[topic]["qos"]);
        let met_r = offered_r == "RELIABLE" || reliability == "Best Effort";
        let met_d = offered_d == "TRANSIENT_LOCAL" || durability == "Volatile";
        assert!(
            met_r && met_d,
            "{topic}: RViz asks {reliability} / {durability}, the bag offers {offered_r} / {offered_d}"
        );
    }
    for (topic, want) in [
        ("/cam/path", json!([["KEEP_LAST", 1, "RELIABLE", "TRANSIENT_LOCAL"]])),
        ("/cam/cloud_map", json!([["KEEP_LAST", 1, "RELIABLE", "TRANSIENT_LOCAL"]])),
        ("/cam/odom", json!([["KEEP_LAST", 10, "RELIABLE", "VOLATILE"]])),
        ("/cam/keypoints", json!([["KEEP_LAST", 10, "RELIABLE", "VOLATILE"]])),
        ("/tf", json!([["KEEP_LAST", 10, "RELIABLE", "VOLATILE"]])),
    ] {
        assert_eq!(bag[topic]["qos"], want, "{topic}'s recorded offer");
    }
}

fn replay(args: &[&str]) -> (bool, Value, String) {
    let out = common::run_replay(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary =
        stdout.lines().find(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).unwrap_or(Value::Null);
    (out.status.success(), summary, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn input_bag(dir: &Path, extra: &[&str]) -> PathBuf {
    let plane = common::fixture_plane_npy(dir);
    let bag = dir.join("in");
    let mut args = vec!["write", "--out", bag.to_str().unwrap(), "--image", plane.to_str().unwrap()];
    args.extend_from_slice(extra);
    rosbags(&args);
    bag
}

#[test]
fn every_frame_in_order_with_input_stamps_and_poses_from_the_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let bag = input_bag(dir.path(), &["--frames", "4", "--bad", "2"]);
    // DUSt3R on the mast3r-blackhole double (a known pose for every pair), SuperPoint on the
    // CPU with the fixture weights; every frame a keyframe.
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/tt_model_server.py");
    let port_file = dir.path().join("port");
    let mut double = Command::new(peer_python())
        .arg(server)
        .args(["--model", "dust3r", "--port-file"])
        .arg(&port_file)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while std::fs::read_to_string(&port_file).map_or(true, |s| s.trim().is_empty()) && t.elapsed().as_secs() < 20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let port = std::fs::read_to_string(&port_file).unwrap();
    let params = dir.path().join("params.yaml");
    std::fs::write(
        &params,
        format!("/**:\n  ros__parameters:\n    dust3r_backend: tt-server\n    dust3r_url: http://127.0.0.1:{}\n    fallback: none\n    keyframe_min_interval: 0.0\n    keyframe_max_interval: 0.5\n    max_keypoints: 300\n    publish_tf: true\n", port.trim()),
    )
    .unwrap();
    let out = dir.path().join("out.mcap");
    let ply_dir = dir.path().join("clouds");
    let (ok, summary, stderr) = replay(&[
        "--bag",
        bag.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--params-file",
        params.to_str().unwrap(),
        "--superpoint-weights",
        fixture_dir("superpoint").to_str().unwrap(),
        "--export-ply",
        ply_dir.to_str().unwrap(),
    ]);
    let _ = double.kill();
    let _ = double.wait();
    assert!(ok, "{stderr}");
    assert_eq!(
        (
            summary["counters"]["frames_in"].as_u64(),
            summary["counters"]["errors_bad_frame"].as_u64(),
            summary["counters"]["pairs_processed"].as_u64(),
            summary["poses"].as_u64()
        ),
        (Some(4), Some(1), Some(2), Some(2)),
        "{summary}"
    );
    assert!(stderr.contains("skipping frame 3"), "the bad frame is reported: {stderr}");
    assert!(summary["latency_ms"]["superpoint"]["median"].as_f64().unwrap() > 0.0);

    let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
    let good = json!([[100, 0], [101, 0], [103, 0]]);
    assert_eq!(r["/cam/keypoints"]["stamps"], good, "one keypoints message per good frame, input stamps: {r}");
    assert_eq!(r["/cam/keypoints"]["n"], json!([300, 300, 300]));
    assert_eq!(
        (r["/cam/image_raw"]["count"].as_u64(), r["/cam/camera_info"]["count"].as_u64()),
        (Some(4), Some(4)),
        "camera topics copied: {r}"
    );
    assert!(r.get("/imu_like").is_none(), "other topics are not copied");
    assert_eq!(r["/cam/pointcloud"]["stamps"], json!([[100, 0], [101, 0]]), "clouds carry view 1's stamp: {r}");
    // Poses too: valid at view 1's time in view 1's frame (pairs 100-101 and 101-103).
    assert_eq!(r["/cam/pair_pose"]["stamps"], json!([[100, 0], [101, 0]]), "{r}");
    assert_eq!(r["/cam/pose"]["stamps"], json!([[100, 0], [101, 0]]), "{r}");
    // The keyframe chain: frame 103 is tracked against keyframe 101 (the first pair's second
    // view); its odometry and TF (map -> odom -> camera) carry its stamp, in odom; each pair that
    // joined the chain sent the keyframes' path and the map, in map.
    assert_eq!(summary["counters"]["frames_tracked"].as_u64(), Some(1), "{summary}");
    assert_eq!(r["/cam/odom"]["stamps"], json!([[103, 0]]), "{r}");
    assert_eq!((r["/tf"]["count"].as_u64(), &r["/tf"]["stamps"]), (Some(1), &json!([[103, 0], [103, 0]])), "{r}");
    assert_eq!(r["/cam/odom"]["frames"], json!(["odom"]), "{r}");
    assert_eq!(r["/tf"]["frames"], json!(["map>odom", "odom>cam_optical"]), "{r}");
    assert_eq!((&r["/cam/path"]["frames"], &r["/cam/cloud_map"]["frames"]), (&json!(["map"]), &json!(["map"])), "{r}");
    assert_eq!((r["/cam/path"]["count"].as_u64(), r["/cam/cloud_map"]["count"].as_u64()), (Some(2), Some(2)), "{r}");
    assert_eq!(r["/cam/keypoints"]["type"], "sp_dust3r/msg/Keypoints");
    plays_into_trajectory_rviz(&r);

    // Foxglove's own MCAP libraries decode every message from the embedded definitions alone,
    // with the CRCs checked, and see what rosbags sees.
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/foxglove_mcap.py");
    let fox = Command::new(peer_python()).arg(script).args(["read", "--bag", out.to_str().unwrap()]).output().unwrap();
    assert!(fox.status.success(), "Foxglove's decoder: {}", String::from_utf8_lossy(&fox.stderr));
    let f: Value = serde_json::from_slice(&fox.stdout).unwrap();
    assert_eq!(f["profile"], "ros2");
    let topics = f["topics"].as_object().unwrap();
    assert_eq!(topics.len(), r.as_object().unwrap().len(), "the same topics: {f}");
    for (topic, e) in topics {
        assert_eq!(
            (e["schema_encoding"].as_str(), e["message_encoding"].as_str()),
            (Some("ros2msg"), Some("cdr")),
            "{topic}"
        );
        assert_eq!(e["schema"], r[topic]["type"], "{topic}");
        assert_eq!((&e["count"], &e["stamps"]), (&r[topic]["count"], &r[topic]["stamps"]), "{topic}: {f}");
    }
    assert_eq!(topics["/cam/keypoints"]["n"], json!([300, 300, 300]));
    let cloud = &topics["/cam/pointcloud"]["clouds"][0];
    assert_eq!(
        cloud["fields"],
        json!([["x", 0, 7, 1], ["y", 4, 7, 1], ["z", 8, 7, 1], ["rgb", 12, 7, 1], ["confidence", 16, 7, 1]]),
        "{cloud}"
    );
    assert!(
        cloud["width"].as_u64().unwrap() > 1000
            && cloud["bytes"].as_u64() == Some(cloud["width"].as_u64().unwrap() * 20),
        "{cloud}"
    );
    let pose = &topics["/cam/pair_pose"]["poses"][0];
    assert_eq!(pose["view2_stamp"], json!([101, 0]));
    assert!(pose["position"].as_array().unwrap().iter().all(|v| v.as_f64().unwrap().is_finite()), "{pose}");
    assert_eq!(topics["/tf"]["frames"], json!([["map", "odom"], ["odom", "cam_optical"]]), "{f}");

    // --export-ply: each pair's cloud and the last map as PLY files, which PyPI plyfile reads
    // back with every point of the bag's clouds as rosbags decodes them.
    assert_eq!((summary["ply"]["pairs"].as_u64(), summary["ply"]["map"].is_string()), (Some(2), true), "{summary}");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/ply_check.py");
    let check = Command::new(peer_python())
        .arg(script)
        .args(["bag", "--bag", out.to_str().unwrap(), "--dir", ply_dir.to_str().unwrap()])
        .args(["--cloud-topic", "/cam/pointcloud", "--map-topic", "/cam/cloud_map"])
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let p: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(
        p["files"],
        json!(["map.ply", "pair_100.000000000.ply", "pair_101.000000000.ply"]),
        "one file per cloud, named by view 1's stamp: {p}"
    );
    let fields = common::ply_fields();
    for e in p["pairs"].as_array().unwrap().iter().chain([&p["map"]]) {
        assert_eq!((e["format"].as_str(), &e["fields"]), (Some("little"), &fields), "{e}");
        assert!(e["count"].as_u64().unwrap() > 1000 && e["count"] == e["expected"], "{e}");
        assert_eq!(
            (e["xyz_max_diff"].as_f64(), e["conf_max_diff"].as_f64(), e["rgb_mismatches"].as_u64()),
            (Some(0.0), Some(0.0), Some(0)),
            "{e}"
        );
    }
    assert!(p["map"]["comments"].to_string().contains("the map in frame map"), "{p}");

    // Deterministic: the same input gives the same keypoints again.
    let out2 = dir.path().join("again.mcap");
    let (ok, _, stderr) = replay(&[
        "--bag",
        bag.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "--superpoint-weights",
        fixture_dir("superpoint").to_str().unwrap(),
        "--dust3r-weights",
        "/nonexistent",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(rosbags(&["read", "--bag", out2.to_str().unwrap()])["/cam/keypoints"]["stamps"], good);
}

#[test]
fn compressed_bags_and_a_truncated_bag_still_give_a_valid_output() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = dir.path().join("frame.jpg");
    image::open(fixture_dir("superpoint").join("image.png")).unwrap().to_rgb8().save(&jpeg).unwrap();
    let bag = input_bag(dir.path(), &["--frames", "6", "--compressed", jpeg.to_str().unwrap()]);
    let sp = fixture_dir("superpoint");
    let args = |input: &Path, out: &Path| -> Vec<String> {
        [
            "--bag",
            input.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--superpoint-weights",
            sp.to_str().unwrap(),
            "--dust3r-weights",
            "/nonexistent",
        ]
        .map(String::from)
        .to_vec()
    };
    let out = dir.path().join("out.mcap");
    let (ok, summary, stderr) = replay(&args(&bag, &out).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{stderr}");
    assert_eq!(summary["image_topic"], "/cam/image_raw/compressed");
    let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(6), "{r}");

    // A rosbag2 folder out (metadata.yaml + .mcap), which rosbags opens through its
    // metadata.yaml: the counts there are the messages it reads; an existing folder is refused.
    let folder = dir.path().join("out_folder");
    let (ok, _, stderr) = replay(&args(&bag, &folder).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{stderr}");
    assert!(folder.join("out_folder_0.mcap").is_file());
    let r = rosbags(&["read", "--bag", folder.to_str().unwrap()]);
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(6), "{r}");
    // The offer `ros2 bag play` takes from metadata.yaml: the node's publisher's.
    assert_eq!(r["/cam/keypoints"]["qos"], json!([["KEEP_LAST", 10, "RELIABLE", "VOLATILE"]]), "{r}");
    let meta = &yaml_rust2::YamlLoader::load_from_str(&std::fs::read_to_string(folder.join("metadata.yaml")).unwrap())
        .unwrap()[0]["rosbag2_bagfile_information"];
    assert_eq!((meta["version"].as_i64(), meta["storage_identifier"].as_str()), (Some(5), Some("mcap")));
    let topics = meta["topics_with_message_count"].as_vec().unwrap();
    assert_eq!(topics.len(), r.as_object().unwrap().len(), "{meta:?}");
    for t in topics {
        let name = t["topic_metadata"]["name"].as_str().unwrap();
        assert_eq!(t["message_count"].as_i64().map(|n| n as u64), r[name]["count"].as_u64(), "{name}");
        assert_eq!(t["topic_metadata"]["type"].as_str(), r[name]["type"].as_str(), "{name}");
    }
    let total: u64 = r.as_object().unwrap().values().map(|t| t["count"].as_u64().unwrap()).sum();
    assert_eq!(meta["message_count"].as_i64(), Some(total as i64));
    let (ok, _, stderr) = replay(&args(&bag, &folder).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok && stderr.contains("exists and is not empty"), "{stderr}");

    // The same bag cut at 60 %: an error naming the problem, and a readable output with the
    // frames before the cut.
    let mcap = std::fs::read_dir(&bag)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "mcap"))
        .unwrap();
    let bytes = std::fs::read(&mcap).unwrap();
    let cut = dir.path().join("cut.mcap");
    std::fs::write(&cut, &bytes[..bytes.len() * 6 / 10]).unwrap();
    let out = dir.path().join("cut_out.mcap");
    let (ok, summary, stderr) = replay(&args(&cut, &out).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok, "a truncated bag is an error");
    assert!(stderr.contains("corrupt or truncated MCAP"), "{stderr}");
    let done = summary["counters"]["frames_in"].as_u64().unwrap();
    assert!((1..6).contains(&done), "{summary}");
    let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(done), "the output so far is a valid bag: {r}");

    // sqlite3 bags: the conversion command.
    let db3 = dir.path().join("old.db3");
    std::fs::write(&db3, b"SQLite format 3\0").unwrap();
    let (ok, _, stderr) =
        replay(&args(&db3, &dir.path().join("x.mcap")).iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!ok && stderr.contains("ros2 bag convert"), "{stderr}");
}

#[test]
fn camera_topics_are_chosen_like_a_person_would() {
    let t = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    let bag = t(&[
        ("/front/image_raw", "sensor_msgs/msg/Image"),
        ("/front/camera_info", "sensor_msgs/msg/CameraInfo"),
        ("/rear/camera_info", "sensor_msgs/msg/CameraInfo"),
        ("/imu", "sensor_msgs/msg/Imu"),
    ]);
    assert_eq!(
        choose_topics(&bag, None, None),
        Ok(CameraTopics {
            image: "/front/image_raw".into(),
            compressed: false,
            camera_info: Some("/front/camera_info".into()),
            depth: None,
        })
    );
    let two = t(&[("/a/image", "sensor_msgs/msg/Image"), ("/b/image/compressed", "sensor_msgs/msg/CompressedImage")]);
    assert!(matches!(choose_topics(&two, None, None), Err(TopicError::Ambiguous(_))));
    assert_eq!(choose_topics(&two, Some("/b/image/compressed"), None).map(|c| c.compressed), Ok(true));
    assert!(matches!(choose_topics(&two, Some("/imu"), None), Err(TopicError::NotAnImage { .. })));
    assert!(matches!(choose_topics(&t(&[("/imu", "sensor_msgs/msg/Imu")]), None, None), Err(TopicError::NoImage(_))));
    assert_eq!(output_topic("/cam/image_raw", "keypoints"), "/cam/keypoints");
    assert_eq!(output_topic("/cam/image_raw/compressed", "keypoints"), "/cam/keypoints");
    assert_eq!(output_topic("/image", "pose"), "/pose");
}

/// SIGINT while DUSt3R is reconstructing a pair: the replay stops within 2 s (the pair is
/// abandoned between two steps, nothing of it written), says it was interrupted, and leaves a
/// finished MCAP with every frame it had done, which rosbags and Foxglove's reader (CRCs
/// checked) both read.
#[test]
fn sigint_mid_pair_stops_the_replay_and_leaves_a_finished_bag() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let dust3r = common::tiny_dust3r(dir.path());
    let out = dir.path().join("out.mcap");
    let sample = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sample/sequence.mcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .args(["replay", "--bag", sample.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(["--superpoint-weights", fixture_dir("superpoint").to_str().unwrap()])
        .args(["--dust3r-weights", dust3r.to_str().unwrap()])
        .env("HF_HUB_OFFLINE", "1")
        .env("RUST_LOG", "info,sp_dust3r_core::pipeline=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("DUSt3R: pair ") && line.contains(" started") {
                let _ = tx.send(());
            }
            lines.push(line);
        }
        lines.join("\n")
    });
    rx.recv_timeout(std::time::Duration::from_secs(120)).expect("a pair starts");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = i32::try_from(child.id()).unwrap();
    let signalled = std::time::Instant::now();
    // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let seconds = signalled.elapsed().as_secs_f64();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let log = reader.join().unwrap();
    let ctx = format!("{stdout}\n{log}");
    assert!(seconds <= 2.0, "stopping took {seconds:.2} s: {ctx}");
    assert!(!status.success(), "an interrupted replay is not a success: {ctx}");
    assert!(log.contains("abandoned after") && log.contains("interrupted; the"), "{ctx}");
    let summary: Value = serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(summary["interrupted"], true, "{summary}");
    let frames = summary["counters"]["frames_in"].as_u64().unwrap();
    assert!((2..40).contains(&frames), "{summary}");
    // The bag is finished: both readers open it and find every frame done before the signal,
    // and only the pairs that were complete.
    let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
    assert_eq!(r["/cam/keypoints"]["count"].as_u64(), Some(frames), "{r}");
    assert_eq!(r["/cam/pointcloud"]["count"].as_u64(), summary["counters"]["pairs_processed"].as_u64(), "{r}");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/foxglove_mcap.py");
    let fox = Command::new(peer_python()).arg(script).args(["read", "--bag", out.to_str().unwrap()]).output().unwrap();
    assert!(fox.status.success(), "Foxglove's reader: {}", String::from_utf8_lossy(&fox.stderr));
    let fox: Value = serde_json::from_slice(&fox.stdout).unwrap();
    assert_eq!(fox["topics"]["/cam/keypoints"]["count"].as_u64(), Some(frames), "{fox}");
    eprintln!("SIGINT to exit: {seconds:.2} s after {frames} frames, {} pairs", summary["counters"]["pairs_processed"]);
}

/// Each published checkpoint (tiny weights of its head and input size) runs through the
/// replay's CPU DUSt3R with `dust3r_model` set to it, every pair giving a cloud of its input's
/// size; weights of another checkpoint than the one configured are refused by name, and the
/// replay still serves keypoints.
#[test]
fn each_checkpoint_runs_through_the_replay_and_a_mismatch_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let bag = input_bag(dir.path(), &["--frames", "3"]);
    let sp = fixture_dir("superpoint");
    // Every frame a keyframe; every pixel of a pair in its cloud.
    let run = |weights: &Path, model: &str, out: &Path, extra: &[&str]| {
        let model = format!("dust3r_model:={model}");
        let mut args = vec![
            "--bag",
            bag.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--superpoint-weights",
            sp.to_str().unwrap(),
            "--dust3r-weights",
            weights.to_str().unwrap(),
            "-p",
            &model,
        ];
        for p in
            ["keyframe_min_interval:=0.0", "keyframe_max_interval:=0.5", "cloud_stride:=1", "confidence_threshold:=1.0"]
                .iter()
                .chain(extra)
        {
            args.extend(["-p", p]);
        }
        replay(&args)
    };
    for (model, side) in [("224_linear", 224u64), ("512_linear", 512), ("512_dpt", 512)] {
        let weights = common::tiny_checkpoint(dir.path(), model);
        let out = dir.path().join(format!("{model}.mcap"));
        let (ok, summary, stderr) = run(&weights, model, &out, &[]);
        assert!(ok, "{model}: {stderr}");
        assert_eq!(summary["counters"]["pairs_processed"].as_u64(), Some(2), "{model}: {summary}\n{stderr}");
        let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
        let widths = &r["/cam/pointcloud"]["points"];
        eprintln!("{model}: cloud widths {widths}");
        for w in widths.as_array().unwrap() {
            // Every pixel of both views' network inputs (stride 1, every confidence above 1).
            assert_eq!(w.as_u64(), Some(2 * side * side), "{model}: {side}x{side} inputs: {r}");
        }
    }
    let wrong = common::tiny_checkpoint(dir.path(), "224_linear");
    let (ok, summary, stderr) = run(&wrong, "512_dpt", &dir.path().join("wrong.mcap"), &[]);
    assert!(ok, "{stderr}");
    assert_eq!(summary["counters"]["pairs_processed"].as_u64(), Some(0), "{summary}");
    assert!(stderr.contains("holds DUSt3R 224_linear, but 512_dpt is configured"), "{stderr}");

    // A tt-model server runs 512_dpt whatever the CPU is configured for, and says so.
    let weights = common::tiny_checkpoint(dir.path(), "224_linear");
    let out = dir.path().join("server.mcap");
    let server = ["dust3r_backend:=tt-server", "dust3r_url:=http://127.0.0.1:9"];
    let (ok, summary, stderr) = run(&weights, "224_linear", &out, &server);
    assert!(ok, "{stderr}");
    // The server cannot be reached: the CPU fallback runs the configured 224_linear.
    assert_eq!(summary["counters"]["pairs_processed"].as_u64(), Some(2), "{summary}\n{stderr}");
    let r = rosbags(&["read", "--bag", out.to_str().unwrap()]);
    assert_eq!(r["/cam/pointcloud"]["points"], json!([2 * 224 * 224, 2 * 224 * 224]), "{r}");
    assert!(
        stderr.contains("dust3r_model is 224_linear, but the mast3r-blackhole server runs 512_dpt (its contract): only the CPU fallback runs it"),
        "{stderr}"
    );
}
