//! The node with SuperPoint on a tt-model server (the superpoint-p150 double), on a real DDS bus
//! inside a private network namespace: keypoints come from the server with the input stamps, a
//! malformed answer is counted by kind and the next frames are served; with the server gone and
//! `fallback: none`, outputs pause and /diagnostics says why.

mod common;

use common::{peer_python, run_in_netns, NetnsRun};

fn script(dir: &std::path::Path, start_server: bool, faults: &str, frames: u32, timeout: u32) -> String {
    let node = env!("CARGO_BIN_EXE_sp_dust3r");
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let plane = common::fixture_plane_npy(dir);
    let port_file = dir.join("port");
    let server = if start_server {
        format!(
            "{py} {double} --model superpoint --faults '{faults}' --port-file {pf} > /dev/null 2> {d}/server.log &\n\
             spid=$!\n\
             t=0; while [ ! -s {pf} ] && [ $t -lt 200 ]; do sleep 0.05; t=$((t+1)); done\n",
            py = peer_python().display(),
            double = root.join("tools/peers/tt_model_server.py").display(),
            pf = port_file.display(),
            d = dir.display(),
        )
    } else {
        // Nothing listens on this port.
        format!("echo 9 > {}\nspid=\n", port_file.display())
    };
    format!(
        "ip link set lo up || exit 90\n\
         {server}\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam -p superpoint_backend:=tt-server \
           -p superpoint_url:=http://127.0.0.1:$(cat {pf}) -p fallback:=none -p max_keypoints:=256 -p dust3r_weights:=/nonexistent > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --ns /cam --frames {frames} --timeout {timeout}\n\
         rc=$?\n\
         kill -INT $pid; wait $pid; echo node_exit=$?\n\
         [ -n \"$spid\" ] && kill $spid\n\
         exit $rc\n",
        pf = port_file.display(),
        log = dir.join("node.log").display(),
        py = peer_python().display(),
        peer = common::cyclone_peer().display(),
        plane = plane.display(),
    )
}

/// The server's base URL as the node logged it (`tt-model server http://127.0.0.1:PORT (...`).
fn log_url(log: &str) -> String {
    let start = log.find("tt-model server http://").map(|i| i + "tt-model server ".len()).unwrap_or(0);
    log[start..].split_whitespace().next().unwrap_or_default().to_string()
}

#[test]
fn keypoints_from_the_server_and_a_pause_with_the_reason_when_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    // The server's first answer is garbage: that frame is lost and counted, the next ones come.
    let NetnsRun { stdout, report, log } =
        run_in_netns(&script(dir.path(), true, "garbage", 3, 30), &dir.path().join("node.log"));
    let ctx = format!("peer: {report}\nnode log:\n{log}");
    let received = report["received"].as_array().unwrap();
    let sent = report["sent"].as_array().unwrap();
    assert_eq!(received.len(), 2, "{ctx}");
    assert_eq!(report["diagnostics"]["errors_superpoint_server_malformed"].as_str(), Some("1"), "{ctx}");
    assert!(log.contains("SuperPoint: malformed answer from http://127.0.0.1:"), "{ctx}");
    for (r, s) in received.iter().zip(&sent[1..]) {
        assert_eq!(&r["stamp"], s, "{ctx}");
        assert_eq!(
            (r["n"].as_u64(), r["dim"].as_u64(), r["unit"].as_bool(), r["descending"].as_bool()),
            (Some(256), Some(256), Some(true), Some(true)),
            "{ctx}"
        );
    }
    assert!(report["diagnostics"]["superpoint_backend"].as_str().unwrap().contains("superpoint-p150: ready"), "{ctx}");
    // hardware_id names the server and the model and device its /health reports.
    let status = &report["diagnostics"]["_status"];
    let server = format!("{} superpoint-p150 on blackhole 0", log_url(&log));
    assert_eq!(status["superpoint"]["hardware_id"].as_str(), Some(server.as_str()), "{ctx}");
    assert_eq!(status["superpoint backend"]["hardware_id"].as_str(), Some(server.as_str()), "{ctx}");
    assert_eq!(status["superpoint backend"]["level"].as_u64(), Some(0), "{ctx}");
    assert!(stdout.contains("node_exit=0"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let NetnsRun { stdout, report, log } =
        run_in_netns(&script(dir.path(), false, "", 2, 8), &dir.path().join("node.log"));
    let ctx = format!("peer: {report}\nnode log:\n{log}");
    assert!(report["received"].as_array().unwrap().is_empty(), "{ctx}");
    let diag = &report["diagnostics"];
    assert_eq!(diag["superpoint_paused"].as_str(), Some("2"), "{ctx}");
    assert_eq!(diag["errors_superpoint"].as_str(), Some("0"), "a pause is not an input error: {ctx}");
    // Every frame skipped with `fallback: none`: SuperPoint cannot run at all, an ERROR that
    // says why; the server's own status is an ERROR too.
    let status = &diag["_status"];
    assert_eq!(status["superpoint"]["level"].as_u64(), Some(2), "ERROR: {ctx}");
    let message = status["superpoint"]["message"].as_str().unwrap();
    assert!(message.starts_with("paused: its server cannot answer") && message.contains("no fallback"), "{ctx}");
    assert_eq!(status["superpoint backend"]["level"].as_u64(), Some(2), "{ctx}");
    assert_eq!(
        status["superpoint backend"]["hardware_id"].as_str(),
        Some("http://127.0.0.1:9 superpoint-p150 (not reported yet)"),
        "{ctx}"
    );
    assert!(diag["superpoint_backend"].as_str().unwrap().contains("127.0.0.1:9/health"), "{ctx}");
    assert!(log.contains("tt-model server http://127.0.0.1:9 (superpoint-p150)"), "{ctx}");
    assert!(stdout.contains("node_exit=0"), "{stdout}");
}

/// SIGINT while the mast3r-blackhole double takes 30 s over a pair (server_timeout 60 s): the
/// node gives the request up and exits within 2 s instead of waiting for the answer.
#[test]
fn sigint_while_the_server_computes_a_pair_ends_the_node_within_two_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let setup = format!(
        "{py} {double} --model dust3r --faults slow:30 --port-file {pf} > /dev/null 2> {d}/server.log &\n\
         spid=$!\n\
         t=0; while [ ! -s {pf} ] && [ $t -lt 200 ]; do sleep 0.05; t=$((t+1)); done\n",
        py = peer_python().display(),
        double = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers/tt_model_server.py").display(),
        pf = port_file.display(),
        d = dir.path().display(),
    );
    let params = format!(
        "-p dust3r_backend:=tt-server -p dust3r_url:=http://127.0.0.1:$(cat {}) -p fallback:=none -p server_timeout:=60.0",
        port_file.display()
    );
    let seconds = common::interrupt_mid_pair(dir.path(), &setup, &params);
    eprintln!("SIGINT to exit: {seconds:.2} s");
}
