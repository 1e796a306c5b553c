//! The ROS package files users start the node with: the launch file's executable, `ros2 run`'s
//! command line (the launch files' argument logic and RViz topics: tests/launch_files.rs; the
//! colcon build: tests/colcon.rs).

mod common;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary's name from Cargo.toml (what `exec`/`executable` must name).
fn binary_name() -> String {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let bin = toml.split("[[bin]]").nth(1).unwrap();
    bin.lines().find_map(|l| l.trim().strip_prefix("name = ")).unwrap().trim_matches('"').to_string()
}

#[test]
fn python_launch_compiles_and_starts_the_packages_executable() {
    for file in ["sp_dust3r.launch.py", "bringup.launch.py"] {
        let path = root().join("launch").join(file);
        // Compiled in memory: no __pycache__ in the source tree (colcon would install it).
        let out = std::process::Command::new(common::peer_python())
            .args(["-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
        let text = std::fs::read_to_string(&path).unwrap();
        let starts = format!("package=\"sp_dust3r\", executable=\"{}\"", binary_name());
        assert!(text.contains(&starts), "{file} starts {starts}");
    }
    // The node gets ROS arguments only (launch_ros puts them after `--ros-args`):
    // `sp_dust3r --ros-args ...`.
    let text = std::fs::read_to_string(root().join("launch/sp_dust3r.launch.py")).unwrap();
    assert!(!text.replace("ros_arguments=", "").contains("arguments="), "the node is `sp_dust3r --ros-args ...`");
}

/// `ros2 run sp_dust3r sp_dust3r --ros-args ...` and launch_ros run the binary with `--ros-args`
/// first: that is the node, as `sp_dust3r node --ros-args ...` is. A bad `--log-level` shows it
/// without DDS: the node's own check answers, not the subcommand parser.
#[test]
fn a_leading_ros_args_starts_the_node() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sp_dust3r")).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let node_says = "--log-level loud: expected debug, info, warn, error or fatal";
    for args in [&["node", "--ros-args", "--log-level", "loud"][..], &["--ros-args", "--log-level", "loud"]] {
        let (ok, stderr) = run(args);
        assert!(!ok && stderr.contains(node_says), "{args:?}: {stderr}");
    }
    // Anything else first is still a subcommand (or clap's error).
    let (ok, stderr) = run(&["--ros-arg", "--log-level", "loud"]);
    assert!(!ok && !stderr.contains(node_says) && stderr.contains("--ros-arg"), "{stderr}");
}
