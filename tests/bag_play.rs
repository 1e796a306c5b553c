//! `ros2 bag play --clock` against the running node, as far as it can run here: a bag written by
//! PyPI rosbags is played onto the DDS bus at its recorded pace with /clock from the bag's time
//! (tools/peers/cyclone_bag_play.py, Cyclone DDS), inside a private network namespace. The node
//! (use_sim_time) answers every frame with the recorded stamps and stamps /diagnostics with the
//! bag's clock.

mod common;

use common::{fixture_dir, peer_python, run_in_netns, NetnsRun};

#[test]
fn a_played_bag_gets_answers_with_its_own_stamps_and_clock() {
    let dir = tempfile::tempdir().unwrap();
    let plane = common::fixture_plane_npy(dir.path());
    let bag = dir.path().join("bag");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let write = std::process::Command::new(peer_python())
        .arg(root.join("tools/peers/rosbags_bag.py"))
        .args(["write", "--out", bag.to_str().unwrap(), "--image", plane.to_str().unwrap(), "--frames", "4"])
        .output()
        .unwrap();
    assert!(write.status.success(), "{}", String::from_utf8_lossy(&write.stderr));
    let script = format!(
        "ip link set lo up || exit 90\n\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_weights:={weights} -p dust3r_weights:=/nonexistent \
           -p use_sim_time:=true -r image:=/cam/image_raw > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --bag {bag}\n\
         rc=$?\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         exit $rc\n",
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
        weights = fixture_dir("superpoint").display(),
        log = dir.path().join("node.log").display(),
        py = peer_python().display(),
        peer = root.join("tools/peers/cyclone_bag_play.py").display(),
        bag = bag.display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &dir.path().join("node.log"));
    let ctx = format!("peer: {report}\nnode log:\n{log}");
    assert_eq!(report["sent"].as_array().map(Vec::len), Some(4), "{ctx}");
    assert_eq!(report["received"], report["sent"], "every played frame answered with its recorded stamp: {ctx}");
    let (start, end) = (report["bag_start_s"].as_f64().unwrap(), report["bag_end_s"].as_f64().unwrap());
    let stamps = report["diagnostics_stamps"].as_array().unwrap();
    assert!(!stamps.is_empty(), "{ctx}");
    for s in stamps {
        let s = s.as_f64().unwrap();
        assert!(
            s == 0.0 || (s >= start - 0.01 && s <= end + 0.01),
            "diagnostics stamped {s}, bag time runs {start}..{end}: {ctx}"
        );
    }
    assert!(stamps.iter().any(|s| s.as_f64().unwrap() >= start), "{ctx}");
    assert!(stdout.contains("node_exit=0"), "{stdout}");
}
