//! Start-up never hides: the node joins the ROS graph and serves its parameters at once, while
//! SuperPoint's weights download in the background from a slow stand-in of the Hugging Face
//! Hub (on loopback inside `unshare -n`) with the progress on /diagnostics and in the log;
//! keypoints follow once the model is ready, and DUSt3R, whose weights are nowhere, is an ERROR
//! on /diagnostics naming the three ways to provide them while the node stays up.

mod common;

use common::{fixture_dir, fixture_plane_npy, peer_python, run_in_netns, NetnsRun};
use serde_json::Value;

/// Seconds from the peer's start of the first timeline entry of `task` matching `pred`.
fn first(timeline: &[Value], task: &str, pred: impl Fn(u64, &str) -> bool) -> Option<f64> {
    timeline.iter().find_map(|e| {
        let (t, name, level, message) = (e[0].as_f64()?, e[1].as_str()?, e[2].as_u64()?, e[3].as_str()?);
        (name == task && pred(level, message)).then_some(t)
    })
}

#[test]
fn the_node_is_in_the_graph_while_its_weights_download_and_serves_once_they_are_in() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("hf_home");
    let peers = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/peers");
    let log = dir.path().join("node.log");
    let script = format!(
        "ip link set lo up || exit 90\n\
         {py} {peers}/hub_mirror.py --dir {weights} --repo {repo} --revision {rev} --rate 1000000 --port-file {d}/port &\n\
         mpid=$!\n\
         t=0; while [ ! -s {d}/port ] && [ $t -lt 200 ]; do sleep 0.05; t=$((t+1)); done\n\
         env -u HF_HUB_OFFLINE -u HF_HUB_CACHE -u SP_DUST3R_SUPERPOINT_WEIGHTS -u SP_DUST3R_DUST3R_WEIGHTS \
           HF_HOME={home} HF_ENDPOINT=http://127.0.0.1:$(cat {d}/port) ROS_LOCALHOST_ONLY=1 RMW_IMPLEMENTATION=rmw_cyclonedds_cpp \
           {node} node --ros-args -r __ns:=/cam -p stale_timeout:=3.0 > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peers}/cyclone_startup.py --image {plane} --seconds 16 > {d}/peer.out 2>&1\n\
         cat {d}/peer.out\n\
         kill -INT $pid\n\
         t=0; while kill -0 $pid 2>/dev/null && [ $t -lt 100 ]; do sleep 0.02; t=$((t+1)); done\n\
         if kill -0 $pid 2>/dev/null; then kill -9 $pid; echo node_exit=timeout; else wait $pid; echo node_exit=$?; fi\n\
         kill $mpid\n",
        py = peer_python().display(),
        peers = peers.display(),
        weights = fixture_dir("superpoint").display(),
        repo = sp_dust3r_core::superpoint::HUB_MODEL.repo,
        rev = sp_dust3r_core::superpoint::HUB_MODEL.revision,
        d = dir.path().display(),
        home = home.display(),
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
        log = log.display(),
        plane = fixture_plane_npy(dir.path()).display(),
    );
    let NetnsRun { stdout, report, log } = run_in_netns(&script, &log);
    let ctx = format!("peer: {report}\nnode log:\n{log}");
    let timeline = report["timeline"].as_array().unwrap();

    // The download: progress on /diagnostics part-way, then ready.
    let downloading = |level: u64, m: &str| {
        let pct = m.split("downloading model.safetensors: ").nth(1).and_then(|r| r.split(' ').next());
        level == 1 && pct.and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| p > 0 && p < 100)
    };
    let downloading_at = first(timeline, "superpoint", downloading).unwrap_or_else(|| panic!("no progress: {ctx}"));
    let ready_at = first(timeline, "superpoint", |level, _| level == 0).unwrap_or_else(|| panic!("never ready: {ctx}"));
    assert!(downloading_at < ready_at, "{ctx}");
    // 5.2 MB at 1 MB/s: seconds of download, during which the node is already a ROS node.
    let in_graph = report["in_graph_s"].as_f64().unwrap_or_else(|| panic!("never in the graph: {ctx}"));
    let params = report["params_s"].as_f64().unwrap_or_else(|| panic!("parameters never answered: {ctx}"));
    assert!(in_graph < downloading_at.max(ready_at - 2.0) && params < ready_at - 2.0, "{ctx}");
    println!(
        "in the graph at {in_graph:.2} s, parameters answered at {params:.2} s, downloading at \
         {downloading_at:.2} s, SuperPoint ready at {ready_at:.2} s"
    );
    assert_eq!(report["params"], serde_json::json!(["", 3.0]), "{ctx}");
    assert!(log.contains("downloading model.safetensors: 50 % of 5.2 MB"), "{ctx}");
    assert!(log.contains("SuperPoint ready on cpu"), "{ctx}");
    // Keypoints only once the model is there, then for the frames that follow.
    let keypoints: Vec<f64> = report["keypoints_s"].as_array().unwrap().iter().filter_map(Value::as_f64).collect();
    assert!(keypoints.len() >= 5, "{ctx}");
    assert!(keypoints[0] >= ready_at - 1.0, "{ctx}");
    let status = &report["diagnostics"]["_status"];
    assert!(status["superpoint"]["hardware_id"].as_str().unwrap().contains("kernels"), "the CPU: {ctx}");
    assert_eq!(status["superpoint backend"]["level"].as_u64(), Some(0), "{ctx}");

    // DUSt3R's weights are nowhere (not in the cache, not on the mirror): an ERROR that says
    // how to provide them, for the whole run, and the node goes on.
    let dust3r = &status["dust3r"];
    assert_eq!(dust3r["level"].as_u64(), Some(2), "{ctx}");
    let message = dust3r["message"].as_str().unwrap();
    for way in ["cannot run: no DUSt3R", "--weights DIR", "SP_DUST3R_DUST3R_WEIGHTS=DIR", "Hugging Face cache"] {
        assert!(message.contains(way), "{way:?} in {message:?}");
    }
    assert!(first(timeline, "dust3r", |level, _| level == 0).is_none(), "{ctx}");
    // The input status is current: frames arrive every 0.5 s.
    assert_eq!(status["input"]["level"].as_u64(), Some(0), "{ctx}");
    assert!(stdout.contains("node_exit=0"), "{stdout}");
}
