//! The node as ROS tools see it, against an independent DDS stack (Cyclone DDS from PyPI) inside
//! a private network namespace (`unshare -n`, loopback only): parameter services framed as
//! rmw_cyclonedds frames them (describe with ranges, get, list, set with refusals and an effect
//! on the next frame), /rosout records, sim time from /clock on /diagnostics, camera_info (a bad
//! one counted, a good one sent with the pairs), the debug image only while someone subscribes,
//! and the pairs' clouds and poses — both models here on tt-model server doubles (DUSt3R's with a
//! known pose, so every pair has one), the pairs joining the keyframe chain (path and map in odom,
//! transient local), `~/save_map` writing the map as PLY and `~/reset` clearing it and starting a
//! new chain (std_srvs/Trigger, framed as rmw_cyclonedds frames them).

mod common;

use common::{peer_python, run_in_netns, NetnsRun};
use serde_json::json;
use sp_dust3r_core::outputs::OutputKind;
use sp_dust3r_core::params::qos_override_name;
use sp_dust3r_core::params::topics::resolve;

#[allow(
    clippy::too_many_lines,
    reason = "one scenario read top to bottom; the 100-line limit holds for the library and binaries"
)]
#[test]
fn node_serves_parameters_rosout_sim_time_camera_info_debug_image_and_poses() {
    let dir = tempfile::tempdir().unwrap();
    let plane = common::fixture_plane_npy(dir.path());
    let node = env!("CARGO_BIN_EXE_sp_dust3r");
    let peer = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/cyclone_ros_graph.py");
    // Both models on tt-model server doubles: DUSt3R on a mast3r-blackhole double with a known
    // scene and pose, so that every pair has a pose whose value is known; SuperPoint on a
    // superpoint-p150 double answering with the fixture's reference keypoints.
    // QoS overrides as rclcpp reads them, in a parameter file's nested form: the poses kept for
    // late joiners, the pair poses kept whole; one for a topic the node does not publish.
    let qos_file = dir.path().join("qos.yaml");
    std::fs::write(
        &qos_file,
        "/cam:\n  sp_dust3r:\n    ros__parameters:\n      qos_overrides:\n\
         \x20       /cam/pose:\n          publisher:\n            durability: transient_local\n            depth: 3\n\
         \x20       /cam/pair_pose:\n          publisher:\n            history: keep_all\n\
         \x20       /cam/elsewhere:\n          publisher:\n            depth: 1\n",
    )
    .unwrap();
    let port_file = dir.path().join("port");
    let sp_port_file = dir.path().join("sp_port");
    let script = format!(
        "ip link set lo up || exit 90\n\
         export ROS_DOMAIN_ID=7\n\
         {doubles}\
         RMW_IMPLEMENTATION=rmw_cyclonedds_cpp HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam --params-file {qos_file} \
           -p superpoint_backend:=tt-server -p superpoint_url:=http://127.0.0.1:$(cat {sp_port_file}) -p dust3r_backend:=tt-server -p dust3r_url:=http://127.0.0.1:$(cat {port_file}) -p fallback:=none \
           -p use_sim_time:=true -p publish_tf:=true -p keyframe_min_interval:=0.0 -p keyframe_max_interval:=0.5 \
           -p map_save_path:={dir}/saved_map.ply > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --ns /cam --node /cam/sp_dust3r\n\
         rc=$?\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         kill $spid $sppid\n\
         exit $rc\n",
        dir = dir.path().display(),
        sp_port_file = sp_port_file.display(),
        port_file = port_file.display(),
        qos_file = qos_file.display(),
        log = dir.path().join("node.log").display(),
        doubles = common::start_tt_doubles(dir.path()),
        py = peer_python().display(),
        peer = peer.display(),
        plane = plane.display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &dir.path().join("node.log"));
    let ctx = format!("peer: {report}\nnode log:\n{log}");
    assert!(stdout.contains("node_exit=0"), "{stdout}\n{ctx}");

    // describe: description, type, read-only flag and range as declared; unknown: NOT_SET.
    let d = report["describe"].as_array().unwrap_or_else(|| panic!("no describe reply: {ctx}"));
    assert_eq!(d.len(), 4, "{ctx}");
    assert_eq!(
        (d[0]["name"].as_str(), d[0]["type"].as_u64(), d[0]["read_only"].as_bool()),
        (Some("keypoint_threshold"), Some(3), Some(false))
    );
    assert_eq!(d[0]["float_range"], json!([[0.0, 1.0]]));
    assert!(d[0]["description"].as_str().unwrap().contains("score"), "{ctx}");
    assert_eq!((d[1]["type"].as_u64(), d[1]["read_only"].as_bool()), (Some(4), Some(true)));
    assert_eq!(d[1]["constraints"], "one of: raw, compressed");
    assert_eq!((d[2]["type"].as_u64(), &d[2]["int_range"]), (Some(2), &json!([[-1, 100000]])));
    assert_eq!(d[3]["type"].as_u64(), Some(0));
    // get and list
    assert_eq!(report["get"], json!([[2, 1024], [4, "raw"], [3, 0.005]]), "{ctx}");
    let names: Vec<&str> = report["list"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    // The declared parameters, then the QoS overrides of each output (read-only, as rclcpp's).
    let mut declared: Vec<String> = sp_dust3r_core::params::declared().iter().map(|s| s.name.to_string()).collect();
    for kind in OutputKind::ALL {
        let topic = resolve(&[], "/cam", kind.topic());
        for policy in ["reliability", "history", "depth", "durability"] {
            declared.push(qos_override_name(&topic, policy));
        }
    }
    assert_eq!(names, declared);
    // set: read-only refused, out of range refused, wrong type refused, a valid one applied...
    let set = report["set"].as_array().unwrap_or_else(|| panic!("no set reply: {ctx}"));
    assert_eq!(
        set.iter().map(|r| r[0].as_bool().unwrap()).collect::<Vec<_>>(),
        vec![false, false, true, false],
        "{ctx}"
    );
    assert!(set[0][1].as_str().unwrap().contains("read-only"), "{ctx}");
    assert!(set[1][1].as_str().unwrap().contains("outside [0, 1]"), "{ctx}");
    assert!(
        set[3][1].as_str().unwrap().contains("expected a integer") || set[3][1].as_str().unwrap().contains("integer"),
        "{ctx}"
    );
    assert_eq!(report["get_after_set"], json!([5]));
    // ...and in effect on the next frames: at most 5 keypoints.
    let counts = report["kp_counts"].as_array().unwrap();
    assert_eq!(counts.len(), 3);
    assert!(counts.iter().all(|c| c.as_u64().is_some_and(|n| (1..=5).contains(&n))), "{ctx}");

    // The debug image: none while nobody subscribed (frame 200), then one per frame (201, 202).
    let debug = report["debug_images"].as_array().unwrap();
    assert_eq!(debug.iter().map(|i| i["stamp"].as_i64().unwrap()).collect::<Vec<_>>(), vec![201, 202], "{ctx}");
    for i in debug {
        assert_eq!((i["encoding"].as_str(), &i["size"]), (Some("rgb8"), &json!([640, 480])));
        assert!(i["ring_pixels"].as_u64().unwrap() > 0, "keypoints are drawn: {ctx}");
    }
    let diag = &report["diagnostics"];
    // Two more frames after the reset below, drawn too.
    assert_eq!(diag["debug_images"].as_str(), Some("4"), "{ctx}");

    // camera_info: the one without focals is counted; the good one is used for the poses.
    assert_eq!(diag["errors_camera_info"].as_str(), Some("1"), "{ctx}");
    assert_eq!(diag["camera_info"].as_str(), Some("640x480 fx 500.0 fy 500.0 cx 320.0 cy 240.0"), "{ctx}");
    assert!(log.contains("ignoring camera_info stamped 199.000000000: K has no usable focal lengths"), "{ctx}");

    // Two pairs: clouds, PairPose, PoseStamped and TF all with view 1's stamp and frame (tf2's
    // reading of a header), view 2's stamp in PairPose's field; TF from view 1's frame to the
    // view-2 child frame. The server reported
    // X_cam2 = R X_cam1 + t; the pose published is camera 2 in camera 1's frame: -R^T t.
    let stamps = |k: &str| report[k].as_array().unwrap().iter().map(|v| v["stamp"].clone()).collect::<Vec<_>>();
    assert_eq!(stamps("clouds"), vec![json!(200), json!(201)], "{ctx}");
    assert!(
        report["clouds"].as_array().unwrap().iter().all(|c| c["finite"] == true && c["width"].as_u64() > Some(1000)),
        "{ctx}"
    );
    assert_eq!(stamps("poses"), vec![json!(200), json!(201)], "{ctx}");
    let (r, t) = mock_server_pose();
    let expected = -(r.transpose() * t);
    let pairs = report["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 2, "{ctx}");
    for (p, pose) in pairs.iter().zip(report["poses"].as_array().unwrap()) {
        let s = p["stamp"][0].as_i64().unwrap();
        assert_eq!(p["view2"], json!([s + 1, 0]));
        assert_eq!(
            (pose["stamp"].as_i64(), pose["frame_id"].as_str(), p["unit_quaternion"].as_bool()),
            (Some(s), Some("cam_optical"), Some(true))
        );
        // CameraInfo's K went to the server with the pair (it reports using it, focal = fx).
        assert_eq!(p["used_known_intrinsics"], true, "{ctx}");
        assert!((p["focal"][1].as_f64().unwrap() - 500.0).abs() < 1e-9, "{ctx}");
        for k in 0..3 {
            assert!(
                (pose["position"][k].as_f64().unwrap() - expected[k]).abs() < 1e-9,
                "position {} vs {expected}: {ctx}",
                pose["position"]
            );
        }
    }
    // Both pairs joined the keyframe chain: the keyframes' path (200, 201, 202) and the map, in
    // the map frame, reach a late-joining reader (transient local). The frames after the pairs came after
    // a reset (below), so nothing was tracked and no odometry or TF went out (publish_tf is on).
    let path = report["paths"].as_array().unwrap().last().unwrap_or_else(|| panic!("no path: {ctx}"));
    assert_eq!(path["frame_id"], "map", "{ctx}");
    assert_eq!(path["poses"], json!([[200, "map"], [201, "map"], [202, "map"]]), "{ctx}");
    let map = report["maps"].as_array().unwrap().last().unwrap_or_else(|| panic!("no map: {ctx}"));
    assert!(map["frame_id"] == "map" && map["finite"] == true && map["width"].as_u64() > Some(100), "{ctx}");
    assert_eq!(report["tf"], json!([]), "{ctx}");
    let saved_points = map["width"].as_u64().unwrap();
    check_reset_and_save_map(&report, &dir.path().join("saved_map.ply"), saved_points, &ctx);
    assert_eq!(
        (report["diagnostics"]["keyframes_on_chain"].as_str(), report["diagnostics"]["frames_tracked"].as_str()),
        (Some("5"), Some("0")),
        "{ctx}"
    );
    assert!(report["diagnostics"]["dust3r_backend"].as_str().unwrap().contains("mast3r-blackhole: ready"), "{ctx}");
    assert!(report["diagnostics"]["superpoint_backend"].as_str().unwrap().contains("superpoint-p150: ready"), "{ctx}");

    // Sim time: /diagnostics is stamped from /clock (5000 s on), not wall time.
    let diag_stamps = report["diagnostics_stamps"].as_array().unwrap();
    assert!(!diag_stamps.is_empty(), "{ctx}");
    let sim_now = report["sim_now"].as_f64().unwrap();
    for s in diag_stamps {
        let s = s.as_f64().unwrap();
        assert!(s > 5000.0 && s <= sim_now + 0.01, "diagnostics stamp {s} vs sim time {sim_now}: {ctx}");
    }

    // /rosout: the node's own records, under its rcl logger name, with levels.
    let rosout = report["rosout"].as_array().unwrap();
    let find = |text: &str| rosout.iter().find(|r| r["msg"].as_str().is_some_and(|m| m.contains(text)));
    let up = find("node /cam/sp_dust3r up").unwrap_or_else(|| panic!("start-up record on /rosout: {ctx}"));
    assert_eq!((up["name"].as_str(), up["level"].as_u64()), (Some("cam.sp_dust3r"), Some(20)));
    assert!(up["file"].as_str().unwrap().ends_with("node.rs") && up["line"].as_u64().unwrap() > 0);
    let set_rec =
        find("parameter max_keypoints set to").unwrap_or_else(|| panic!("parameter change on /rosout: {ctx}"));
    assert_eq!(set_rec["level"].as_u64(), Some(20));
    let refused = find("parameter change refused").unwrap_or_else(|| panic!("refusal on /rosout: {ctx}"));
    assert_eq!(refused["level"].as_u64(), Some(30));

    // The ROS graph as `ros2 node list` and `ros2 topic info -v` read it: the node, and the
    // pipeline's outputs (Cyclone DDS, on a participant of their own) under `sp_dust3r_outputs`.
    let graph = &report["graph"];
    let nodes: Vec<&str> = graph["nodes"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    for node in ["/cam/sp_dust3r", "/cam/sp_dust3r_outputs"] {
        assert_eq!(nodes.iter().filter(|n| **n == node).count(), 1, "{node} once in {nodes:?}: {graph}");
    }
    let writers = |topic: &str| graph["writers"][topic].clone();
    for topic in [
        "rt/cam/keypoints",
        "rt/cam/keypoints/image",
        "rt/cam/pointcloud",
        "rt/cam/pair_pose",
        "rt/cam/pose",
        "rt/cam/odom",
        "rt/cam/path",
        "rt/cam/cloud_map",
        "rt/tf",
    ] {
        assert_eq!(writers(topic), json!(["/cam/sp_dust3r_outputs"]), "{topic}: {graph}");
    }
    for topic in ["rt/diagnostics", "rt/rosout"] {
        assert_eq!(writers(topic), json!(["/cam/sp_dust3r"]), "{topic}: {graph}");
    }
    // The QoS the output writers offer: the overrides where given, the node's profile elsewhere.
    let offered = |topic: &str| {
        let q = &graph["qos"][topic][0];
        let policy = |i: usize| q[i].as_str().unwrap_or_else(|| panic!("{topic}: no QoS in {graph}")).to_string();
        (policy(0), policy(1), policy(2))
    };
    let reliable = |(r, _, _): &(String, String, String)| r.starts_with("Policy.Reliability.Reliable");
    let (pose, pair_pose, cloud) = (offered("rt/cam/pose"), offered("rt/cam/pair_pose"), offered("rt/cam/pointcloud"));
    assert!(reliable(&pose) && reliable(&pair_pose) && reliable(&cloud), "{graph}");
    assert_eq!(
        (pose.1.as_str(), pose.2.as_str()),
        ("Policy.History.KeepLast(depth=3)", "Policy.Durability.TransientLocal")
    );
    assert_eq!((pair_pose.1.as_str(), pair_pose.2.as_str()), ("Policy.History.KeepAll", "Policy.Durability.Volatile"));
    // The path and the map are kept for late joiners; odometry is a stream.
    for state in ["rt/cam/path", "rt/cam/cloud_map"] {
        let q = offered(state);
        assert_eq!(
            (q.1.as_str(), q.2.as_str()),
            ("Policy.History.KeepLast(depth=1)", "Policy.Durability.TransientLocal")
        );
    }
    assert_eq!(offered("rt/cam/odom").2, "Policy.Durability.Volatile");
    assert_eq!(
        (cloud.1.as_str(), cloud.2.as_str()),
        ("Policy.History.KeepLast(depth=10)", "Policy.Durability.Volatile")
    );
    assert!(log.contains("publisher on /cam/pose: reliable, keep last 3, transient local (qos_overrides)"), "{log}");
    assert!(
        log.contains("parameter qos_overrides./cam/elsewhere.publisher.depth is not declared by this node; ignored"),
        "{log}"
    );
    // ros2-client's node keeps a /parameter_events writer of its own beside the one our
    // parameter services publish on: both are the node's.
    let events = writers("rt/parameter_events");
    let events = events.as_array().map(Vec::as_slice).unwrap_or_default();
    assert!(!events.is_empty() && events.iter().all(|w| w == "/cam/sp_dust3r"), "parameter_events: {graph}");
}

/// The relative pose of tools/peers/tt_model_server.py's scene: rotation vector (0.05, -0.2,
/// 0.03), t = (0.3, -0.05, 0.1), as X_cam2 = R X_cam1 + t.
fn mock_server_pose() -> (nalgebra::Matrix3<f64>, nalgebra::Vector3<f64>) {
    let r = nalgebra::Rotation3::new(nalgebra::Vector3::new(0.05, -0.2, 0.03));
    (*r.matrix(), nalgebra::Vector3::new(0.3, -0.05, 0.1))
}

/// `~/save_map` wrote the last map (`points` of them) as a binary PLY at `saved`; `~/reset`
/// answered, cleared the path and the map for transient-local readers, left nothing to save, and
/// the next two frames (203, 204) started a new chain of their own.
fn check_reset_and_save_map(report: &serde_json::Value, saved: &std::path::Path, points: u64, ctx: &str) {
    let message = format!("{points} points saved to {}", saved.display());
    assert_eq!(report["save_map"], json!([true, message]), "{ctx}");
    let bytes = std::fs::read(saved).unwrap_or_else(|e| panic!("{}: {e}: {ctx}", saved.display()));
    let end = bytes.windows(11).position(|w| w == b"end_header\n").expect("a PLY header") + 11;
    let header = String::from_utf8_lossy(&bytes[..end]);
    assert!(header.starts_with("ply\nformat binary_little_endian 1.0\n"), "{header}");
    assert!(header.contains(&format!("element vertex {points}\n")) && header.contains("in frame map"), "{header}");
    assert_eq!(bytes.len() - end, points as usize * 19, "x y z confidence as float, r g b as uchar: {header}");
    assert_eq!(report["reset"][0], true, "{ctx}");
    let cleared = &report["after_reset"];
    assert_eq!(
        cleared["paths"],
        json!([{"stamp": cleared["paths"][0]["stamp"], "frame_id": "map", "poses": []}]),
        "{ctx}"
    );
    assert_eq!(
        (cleared["maps"][0]["width"].as_u64(), cleared["maps"].as_array().map(Vec::len)),
        (Some(0), Some(1)),
        "{ctx}"
    );
    assert_eq!(report["save_map_after_reset"][0], false, "{ctx}");
    assert!(report["save_map_after_reset"][1].as_str().unwrap().contains("no map yet"), "{ctx}");
    assert!(report["kp_counts_after_reset"].as_array().unwrap().iter().all(|c| c.as_u64() > Some(0)), "{ctx}");
    let path = report["new_chain"]["paths"].as_array().unwrap().last().unwrap_or_else(|| panic!("no new path: {ctx}"));
    assert_eq!(path["poses"], json!([[203, "map"], [204, "map"]]), "{ctx}");
    let map = report["new_chain"]["maps"].as_array().unwrap().last().unwrap_or_else(|| panic!("no new map: {ctx}"));
    assert!(map["width"].as_u64() > Some(100), "{ctx}");
    assert_eq!(
        (report["diagnostics"]["resets"].as_str(), report["diagnostics"]["maps_saved"].as_str()),
        (Some("1"), Some("1")),
        "{ctx}"
    );
}
