//! Shared test helpers: the upstream fixtures (tests/fixtures, copied from shared/fixtures) and
//! the real data in ../shared/real.
#![allow(dead_code)]

pub mod covariance;
pub mod detweights;
pub mod markdown;
pub mod true_scene;
pub mod tum;

use std::path::PathBuf;

use ndarray::ArrayD;
use ndarray_npy::NpzReader;

/// The displays of an RViz config (its text) that subscribe a topic: the topic and the
/// reliability and durability they ask for, as RViz spells them ("Reliable", "Transient Local";
/// '' when the config leaves one out).
pub fn rviz_subscriptions(text: &str) -> Vec<(String, String, String)> {
    let docs = yaml_rust2::YamlLoader::load_from_str(text).expect("an RViz config is YAML");
    let displays = docs[0]["Visualization Manager"]["Displays"].as_vec().expect("an RViz config has displays");
    let policy = |t: &yaml_rust2::Yaml, name: &str| t[name].as_str().unwrap_or_default().to_string();
    displays
        .iter()
        .filter_map(|d| {
            let t = &d["Topic"];
            Some((t["Value"].as_str()?.to_string(), policy(t, "Reliability Policy"), policy(t, "Durability Policy")))
        })
        .collect()
}

pub fn fixture_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(name)
}

/// `../shared/real` beside the checkout: the trained SuperPoint weights, the COCO image and the
/// TUM RGB-D frames (read there, never copied into the repository; see its README.md).
pub fn real_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/real");
    assert!(dir.join("README.md").exists(), "{} is missing: the real-data tests read it there", dir.display());
    dir
}

/// The reference arrays of the SuperPoint fixture (HF transformers 5.24, random weights).
pub struct SuperPointFixture {
    npz: NpzReader<std::fs::File>,
}

impl SuperPointFixture {
    pub fn open() -> Self {
        let path = fixture_dir("superpoint").join("superpoint_random_seed0.npz");
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { npz: NpzReader::new(file).expect("fixture npz") }
    }

    pub fn array(&mut self, name: &str) -> ArrayD<f32> {
        self.npz.by_name(&format!("{name}.npy")).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    /// CHW reference map as HWC, the layout the network produces.
    pub fn chw_as_hwc(&mut self, name: &str) -> (Vec<f32>, [usize; 3]) {
        let a = self.array(name);
        let s = a.shape().to_vec();
        let hwc = a.permuted_axes(vec![1, 2, 0]);
        (hwc.iter().copied().collect(), [s[1], s[2], s[0]])
    }
}

/// Largest absolute difference of two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The fixture's input plane (values k/255) written as an 8-bit grayscale PNG, so end-to-end
/// tests start from an image file like a user does.
pub fn fixture_png(dir: &std::path::Path) -> PathBuf {
    let mut fx = SuperPointFixture::open();
    let image = fx.array("image");
    let (h, w) = (image.shape()[0] as u32, image.shape()[1] as u32);
    let bytes: Vec<u8> = image.iter().map(|v| (v * 255.0).round() as u8).collect();
    let path = dir.join("fixture.png");
    image::GrayImage::from_raw(w, h, bytes).expect("plane size").save(&path).expect("write png");
    path
}

/// Reference keypoints inside the four-sided border: ([x, y] integer pixels, descriptor).
pub fn reference_keypoints() -> Vec<([f32; 2], Vec<f32>)> {
    let mut fx = SuperPointFixture::open();
    let xy = fx.array("keypoints_xy");
    let desc = fx.array("descriptors");
    xy.outer_iter()
        .zip(desc.outer_iter())
        .map(|(p, d)| ([p[0].round(), p[1].round()], d.iter().copied().collect()))
        .filter(|([x, y], _)| *x >= 4.0 && *y >= 4.0 && *x < 636.0 && *y < 476.0)
        .collect()
}

/// Keypoint F1 at exact pixel positions, and the smallest descriptor cosine over matches.
pub fn f1_and_min_cosine(ours: &[([f32; 2], Vec<f32>)], reference: &[([f32; 2], Vec<f32>)]) -> (f64, f32) {
    use std::collections::HashMap;
    let key = |p: &[f32; 2]| (p[0] as i64, p[1] as i64);
    let by_pos: HashMap<(i64, i64), &Vec<f32>> = reference.iter().map(|(p, d)| (key(p), d)).collect();
    let mut matched = 0usize;
    let mut min_cos = 1.0f32;
    for (p, d) in ours {
        if let Some(r) = by_pos.get(&key(p)) {
            matched += 1;
            let cos: f32 = d.iter().zip(r.iter()).map(|(a, b)| a * b).sum();
            min_cos = min_cos.min(cos);
        }
    }
    let precision = matched as f64 / ours.len().max(1) as f64;
    let recall = matched as f64 / reference.len().max(1) as f64;
    (2.0 * precision * recall / (precision + recall).max(1e-12), min_cos)
}

/// evo's metrics (`tools/peers/evo_metrics.py`, PyPI `evo`) of the TUM trajectory `est`
/// against `gt`, the RPE over `delta` frames: its JSON line.
pub fn evo_metrics(gt: &std::path::Path, est: &std::path::Path, delta: usize) -> serde_json::Value {
    let peer = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/evo_metrics.py");
    let out = std::process::Command::new(peer_python())
        .arg(peer)
        .args(["--gt".as_ref(), gt.as_os_str(), "--est".as_ref(), est.as_os_str()])
        .args(["--delta", &delta.to_string()])
        .output()
        .expect("the peer Python runs");
    assert!(out.status.success(), "evo: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("evo_metrics.py prints JSON")
}

/// The Python that has the test peers (rosbags): `$SP_DUST3R_PYTHON` (set by tools/test.sh),
/// else ./.venv/bin/python, else python3.
pub fn peer_python() -> PathBuf {
    if let Some(p) = std::env::var_os("SP_DUST3R_PYTHON") {
        return p.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

/// One message for [`rosbags_read`]: ROS type, its own .msg text, whether it is ours, CDR bytes.
pub struct CdrEntry {
    pub ros_type: &'static str,
    pub definition: &'static str,
    pub custom: bool,
    pub cdr: Vec<u8>,
}

impl CdrEntry {
    pub fn of<T: sp_dust3r_core::msg::RosMessage + serde::Serialize>(msg: &T) -> Self {
        Self {
            ros_type: T::ROS_TYPE,
            definition: T::DEFINITION.split("\n====").next().unwrap_or(""),
            custom: T::ROS_TYPE.starts_with("sp_dust3r/"),
            cdr: sp_dust3r_core::msg::to_cdr(msg).expect("CDR"),
        }
    }
}

/// rosbags' reading of our messages (tools/peers/rosbags_cdr.py): per type, whether our field
/// list equals ROS 2 Jazzy's, whether rosbags re-encodes our bytes identically, the decoded
/// values, and for PointCloud2 the points as numpy reads them.
pub fn rosbags_read(entries: &[&CdrEntry]) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest: Vec<serde_json::Value> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let f = dir.path().join(format!("{i}.cdr"));
            std::fs::write(&f, &e.cdr).expect("write cdr");
            serde_json::json!({"type": e.ros_type, "file": f, "definition": e.definition, "custom": e.custom})
        })
        .collect();
    let m = dir.path().join("manifest.json");
    std::fs::write(&m, serde_json::to_string(&manifest).expect("json")).expect("write manifest");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/rosbags_cdr.py");
    let py = peer_python();
    let out = std::process::Command::new(&py)
        .arg(&script)
        .arg(&m)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", py.display()));
    assert!(
        out.status.success(),
        "rosbags peer failed (tools/test.sh installs it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("peer JSON")
}

/// The sample image (tests/fixtures/superpoint/image.png) as a uint8 (480, 640) .npy plane, the
/// frame the DDS peer publishes.
pub fn fixture_plane_npy(dir: &std::path::Path) -> PathBuf {
    let plane = dir.join("plane.npy");
    let image = image::open(fixture_dir("superpoint").join("image.png")).expect("sample image").to_luma8();
    let arr = ndarray::Array2::from_shape_vec((image.height() as usize, image.width() as usize), image.into_raw())
        .expect("plane shape");
    ndarray_npy::write_npy(&plane, &arr).expect("write npy");
    plane
}

/// The Cyclone DDS camera peer script.
pub fn cyclone_peer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/cyclone_camera.py")
}

/// What a run inside a private network namespace left: the shell's stdout, the peer's JSON
/// report (its first `{` line) and the node's log.
pub struct NetnsRun {
    pub stdout: String,
    pub report: serde_json::Value,
    pub log: String,
}

/// Runs `script` under `unshare -n` (loopback only: nothing can leave the machine); the script
/// writes the node's log to `log`. Fails the test, with the log, if the script fails or the peer
/// printed no report.
pub fn run_in_netns(script: &str, log: &std::path::Path) -> NetnsRun {
    let out = std::process::Command::new("unshare")
        .args(["-n", "sh", "-c", script])
        .output()
        .expect("unshare (root) is needed for DDS tests");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(out.status.success(), "{stdout}\n{}\nnode log:\n{log}", String::from_utf8_lossy(&out.stderr));
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no peer report: {stdout}\nnode log:\n{log}"));
    let report = serde_json::from_str(line).expect("peer JSON");
    NetnsRun { stdout, report, log }
}

/// The tiny DUSt3R geometry of the upstream fixtures (head dimension 64, all DPT shapes real).
pub const TINY_DUST3R: &str = r#"{"output_mode": "pts3d", "head_type": "dpt", "depth_mode": ["exp", -Infinity, Infinity], "conf_mode": ["exp", 1, Infinity],
 "patch_size": 16, "enc_embed_dim": 128, "enc_depth": 2, "enc_num_heads": 2, "dec_embed_dim": 128, "dec_depth": 12, "dec_num_heads": 2, "pos_embed": "RoPE100"}"#;

/// Tiny DUSt3R weights ([`TINY_DUST3R`], deterministic, the real layout) written to
/// `dir/dust3r`, whose path is returned.
pub fn tiny_dust3r(dir: &std::path::Path) -> PathBuf {
    tiny_dust3r_as(dir, "dust3r", TINY_DUST3R)
}

/// Tiny deterministic DUSt3R weights of the published checkpoint `name` (`512_dpt`,
/// `512_linear`, `224_linear`: its head and input size) written to `dir/<name>`.
pub fn tiny_checkpoint(dir: &std::path::Path, name: &str) -> PathBuf {
    let config = match name {
        "512_dpt" => TINY_DUST3R.to_string(),
        "512_linear" => TINY_DUST3R.replace("\"dpt\"", "\"linear\", \"img_size\": [512, 512]"),
        "224_linear" => TINY_DUST3R.replace("\"dpt\"", "\"linear\", \"img_size\": [224, 224]"),
        other => panic!("no checkpoint {other}"),
    };
    tiny_dust3r_as(dir, name, &config)
}

fn tiny_dust3r_as(dir: &std::path::Path, folder: &str, config: &str) -> PathBuf {
    let path = dir.join(folder);
    std::fs::create_dir_all(&path).expect("create the weights folder");
    sp_dust3r_core::dust3r::synthetic::write_checkpoint(&path, config).expect("write the tiny checkpoint");
    path
}

/// `sp_dust3r replay ARGS` run offline (no weights download), its output captured.
pub fn run_replay(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r"))
        .arg("replay")
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("the sp_dust3r binary runs")
}

/// Starts the node (SuperPoint on the CPU with the fixture weights, every frame a keyframe,
/// `params` for DUSt3R) inside a private network namespace with the camera peer sending
/// frames, sends SIGINT 0.5 s after a DUSt3R pair has started, and checks what a user relies
/// on: a clean exit (status 0) within 2 s, the pair abandoned rather than finished, and no
/// DUSt3R error for it. `setup` runs first (a server double; it sets `spid` to be stopped at
/// the end). Returns the seconds from SIGINT
/// to exit.
pub fn interrupt_mid_pair(dir: &std::path::Path, setup: &str, params: &str) -> f64 {
    let plane = fixture_plane_npy(dir);
    let log = dir.join("node.log");
    let script = format!(
        "ip link set lo up || exit 90\n\
         spid=\n\
         {setup}\
         HF_HUB_OFFLINE=1 ROS_LOCALHOST_ONLY=1 {node} node --ros-args -r __ns:=/cam --log-level debug \
           -p superpoint_weights:={weights} -p keyframe_min_interval:=0.0 -p keyframe_max_interval:=0.5 {params} > {log} 2>&1 &\n\
         pid=$!\n\
         {py} {peer} --image {plane} --ns /cam --frames 3 --timeout 30 > {dir}/peer.out 2>&1 &\n\
         peer=$!\n\
         t=0; while ! grep -q 'DUSt3R: pair .* started' {log} && [ $t -lt 600 ]; do sleep 0.05; t=$((t+1)); done\n\
         sleep 0.5\n\
         start=$(date +%s.%N)\n\
         kill -INT $pid\n\
         t=0; while kill -0 $pid 2>/dev/null && [ $t -lt 250 ]; do sleep 0.02; t=$((t+1)); done\n\
         end=$(date +%s.%N)\n\
         if kill -0 $pid 2>/dev/null; then code=timeout; kill -9 $pid; else wait $pid; code=$?; fi\n\
         kill $peer $spid 2>/dev/null\n\
         echo \"{{\\\"exit\\\": \\\"$code\\\", \\\"seconds\\\": $(awk \"BEGIN {{print $end - $start}}\")}}\"\n",
        node = env!("CARGO_BIN_EXE_sp_dust3r"),
        weights = fixture_dir("superpoint").display(),
        log = log.display(),
        dir = dir.display(),
        py = peer_python().display(),
        peer = cyclone_peer().display(),
        plane = plane.display(),
    );
    let NetnsRun { report, log, .. } = run_in_netns(&script, &log);
    let ctx = format!("{report}\nnode log:\n{log}");
    assert_eq!(report["exit"], "0", "{ctx}");
    let seconds = report["seconds"].as_f64().unwrap();
    assert!(seconds <= 2.0, "exit took {seconds:.2} s: {ctx}");
    // Abandoned between two steps (a pair that ran to its end would say "finished"), and not
    // counted as a DUSt3R error.
    let line = log.lines().find(|l| l.contains("abandoned after")).unwrap_or_else(|| panic!("{ctx}"));
    assert!(line.contains("shutting down"), "{ctx}");
    assert!(!log.lines().any(|l| l.contains("WARN") && l.contains("DUSt3R")), "{ctx}");
    // A Ctrl-C is an ordinary end, with the log filter a user has (no RUST_LOG): the node's
    // endpoints go before their participants, so none of them fails to unregister, and nothing
    // else logs an error.
    let after: Vec<&str> = log.lines().skip_while(|l| !l.contains("shutting down")).collect();
    let errors: Vec<&&str> = after.iter().filter(|l| l.contains("ERROR")).collect();
    assert!(!after.is_empty() && errors.is_empty(), "{errors:#?}\n{ctx}");
    seconds
}

/// The vertex properties every PLY we write has, as PyPI plyfile names them (name, numpy dtype):
/// what MeshLab, CloudCompare and Open3D read as positions, colours and a scalar field.
pub fn ply_fields() -> serde_json::Value {
    serde_json::json!([
        ["x", "f4"],
        ["y", "f4"],
        ["z", "f4"],
        ["red", "u1"],
        ["green", "u1"],
        ["blue", "u1"],
        ["confidence", "f4"]
    ])
}

/// README's first command block: (main command, test command).
pub fn readme_commands() -> (String, String) {
    let readme = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let block =
        readme.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("README opens with a sh block");
    let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "two commands: {lines:?}");
    (lines[0].to_string(), lines[1].to_string())
}

/// Runs `cmd` (README's main command) with the test weights in place of the Hub's checkpoints:
/// the fixture SuperPoint and tiny DUSt3R weights written into `dir`. Returns its JSON summary
/// and its log; fails the test if it fails.
pub fn run_with_test_weights(cmd: &mut std::process::Command, dir: &std::path::Path) -> (serde_json::Value, String) {
    let run = cmd
        .env("SP_DUST3R_SUPERPOINT_WEIGHTS", fixture_dir("superpoint"))
        .env("SP_DUST3R_DUST3R_WEIGHTS", tiny_dust3r(dir))
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .expect("the command runs");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&run.stdout).expect("JSON summary");
    assert_eq!(summary["counters"]["frames_in"].as_u64(), Some(40), "{summary}");
    (summary, stderr)
}

/// Shell lines that start both tt-model server doubles (tools/peers/tt_model_server.py:
/// DUSt3R's with its known scene and pose, SuperPoint's with the fixture's keypoints) and wait
/// for them: their ports in `dir/port` and `dir/sp_port`, their PIDs in `$spid` and `$sppid`,
/// their logs beside.
pub fn start_tt_doubles(dir: &std::path::Path) -> String {
    let server = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/peers/tt_model_server.py");
    format!(
        "{py} {server} --model dust3r --port-file {d}/port > /dev/null 2> {d}/server.log &\n\
         spid=$!\n\
         {py} {server} --model superpoint --port-file {d}/sp_port > /dev/null 2> {d}/sp_server.log &\n\
         sppid=$!\n\
         t=0; while ( [ ! -s {d}/port ] || [ ! -s {d}/sp_port ] ) && [ $t -lt 200 ]; do sleep 0.05; t=$((t+1)); done\n",
        py = peer_python().display(),
        server = server.display(),
        d = dir.display(),
    )
}
