//! A plain `colcon build` and `colcon test` of a workspace holding the repository, with Debian's
//! colcon, colcon-ros and ament_cmake (tools/test.sh installs them). rosidl_default_generators
//! is not installable here, so the build must say so once and still install the node; rosidl's
//! own parser (Debian's python3-rosidl) checks the message files it would be given.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sp_dust3r_core::msg::{node_msgs, RosMessage};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Debian's Python, where colcon's and rosidl's modules are (a pyenv or venv python3 on the
/// PATH lacks them, as it would on a robot with ROS).
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e} (tools/test.sh installs colcon)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The msg/ files, sorted, as `msg/Name.msg`.
fn message_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("msg"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".msg"))
        .map(|n| format!("msg/{n}"))
        .collect();
    files.sort();
    files
}

#[test]
fn colcon_builds_installs_and_tests_the_package_from_a_workspace() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.path().join("src")).unwrap();
    std::os::unix::fs::symlink(root(), ws.path().join("src/sp_dust3r")).unwrap();
    // A user's shell: without the variables cargo sets for this test (ring's build script
    // tracks CARGO_MANIFEST_DIR, so they would make cargo rebuild what this run has built).
    let colcon = || {
        let mut c = Command::new("colcon");
        c.current_dir(ws.path());
        for (name, _) in std::env::vars() {
            let cargo_set = name.starts_with("CARGO_") && name != "CARGO_HOME";
            if cargo_set || ["CARGO", "OUT_DIR", "RUST_RECURSION_COUNT", "LD_LIBRARY_PATH"].contains(&name.as_str()) {
                c.env_remove(name);
            }
        }
        c
    };

    // One package, found at the repository's root, as ament_cmake.
    let list = run(colcon().arg("list"));
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "sp_dust3r\tsrc/sp_dust3r\t(ros.ament_cmake)");

    // The build reuses this test run's cargo output (same sources, same profile), so it takes
    // seconds here; on a robot, the first build compiles everything (minutes).
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_sp_dust3r"));
    let profile_dir = exe.parent().unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let profile = match profile_dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev",
        other => other,
    };
    let build = run(colcon()
        .args(["build", "--event-handlers", "console_direct+", "--cmake-args"])
        .arg(format!("-DPython3_EXECUTABLE={SYSTEM_PYTHON}"))
        .arg(format!("-DSP_DUST3R_CARGO_PROFILE={profile}"))
        .env("CARGO_TARGET_DIR", target_dir));
    let console = String::from_utf8_lossy(&build.stdout);
    let log = std::fs::read_to_string(ws.path().join("log/latest_build/sp_dust3r/stdout_stderr.log")).unwrap();
    // Without rosidl: exactly one warning, naming what is not generated, and the build goes on.
    assert_eq!(log.matches("CMake Warning").count(), 1, "{log}");
    let warning = log.split("CMake Warning").nth(1).unwrap().split("\n\n").next().unwrap().replace("\n  ", " ");
    assert!(warning.contains("rosidl_default_generators not found"), "{warning}");
    assert!(warning.contains(&message_files().join(", ")), "the interface list lacks a msg/ file: {warning}");
    assert!(console.contains("cargo build --profile"), "{console}");
    // Nothing rebuilt: the workspace's cargo saw this run's artifacts as current.
    assert!(!log.contains("Compiling "), "{log}");

    // The install tree ros2 run / ros2 launch look in.
    let share = ws.path().join("install/sp_dust3r/share");
    let node = ws.path().join("install/sp_dust3r/lib/sp_dust3r/sp_dust3r");
    assert!(node.metadata().unwrap().permissions().mode() & 0o111 != 0, "{} is not executable", node.display());
    for file in [
        "launch/sp_dust3r.launch.py",
        "launch/sp_dust3r.launch.xml",
        "config/params.yaml",
        "config/sample.rviz",
        "config/trajectory.rviz",
        "launch/bringup.launch.py",
        "package.xml",
    ] {
        let installed = share.join("sp_dust3r").join(file);
        assert_eq!(std::fs::read(&installed).unwrap(), std::fs::read(root().join(file)).unwrap(), "{file}");
    }
    assert!(share.join("ament_index/resource_index/packages/sp_dust3r").is_file(), "ament index entry");
    // The installed executable is the node: `ros2 run sp_dust3r sp_dust3r --ros-args ...`.
    let out = Command::new(&node).args(["--ros-args", "--log-level", "loud"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--log-level loud: expected debug"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // colcon test runs the package's ament test (the ROS-facing cargo tests) and records it.
    run(colcon().args(["test", "--event-handlers", "console_direct+"]).env("CARGO_TARGET_DIR", target_dir));
    let results = run(colcon().args(["test-result", "--all", "--verbose"]));
    let summary = String::from_utf8_lossy(&results.stdout).into_owned();
    assert!(summary.contains("build/sp_dust3r/test_results/sp_dust3r/ros_package.xml"), "{summary}");
    let tested = std::fs::read_to_string(ws.path().join("log/latest_test/sp_dust3r/stdout_stderr.log")).unwrap();
    for suite in ["ros_package", "ros_args", "launch_files"] {
        assert!(tested.contains(&format!("Running tests/{suite}.rs")), "{suite} did not run:\n{tested}");
    }
    assert!(summary.contains("0 errors, 0 failures"), "{summary}");
    assert!(!summary.starts_with("Summary: 0 tests"), "{summary}");
}

/// The package's metadata agrees with the message files: the packages they refer to are the
/// dependencies the CMakeLists hands rosidl and package.xml declares, the package is named as
/// the types are, and rosidl's own parser reads every file with the fields build.rs generated.
#[test]
fn rosidl_reads_the_message_files_and_the_package_declares_their_dependencies() {
    let cmake = std::fs::read_to_string(root().join("CMakeLists.txt")).unwrap();
    let package = std::fs::read_to_string(root().join("package.xml")).unwrap();
    let listed = cmake.split("set(SP_DUST3R_MESSAGE_DEPENDENCIES").nth(1).unwrap().split(')').next().unwrap();
    let mut listed: Vec<&str> = listed.split_whitespace().collect();
    listed.sort();
    let mut referenced = Vec::new();
    for def in [node_msgs::Keypoints::DEFINITION, node_msgs::PairPose::DEFINITION] {
        for line in def.lines().filter_map(|l| l.strip_prefix("MSG: ")) {
            let pkg = line.split('/').next().unwrap();
            if !referenced.contains(&pkg) {
                referenced.push(pkg);
            }
        }
    }
    referenced.sort();
    assert_eq!(listed, referenced, "CMakeLists.txt's message dependencies");
    for pkg in &referenced {
        assert!(package.contains(&format!("<depend>{pkg}</depend>")), "package.xml lacks <depend>{pkg}</depend>");
    }
    let name = package.split("<name>").nth(1).unwrap().split("</name>").next().unwrap();
    assert_eq!(node_msgs::PairPose::ROS_TYPE, format!("{name}/msg/PairPose"));
    assert!(package.contains("<member_of_group>rosidl_interface_packages</member_of_group>"));
    assert!(package.contains("<exec_depend>launch_ros</exec_depend>"));
    assert!(cmake.contains("file(GLOB SP_DUST3R_MESSAGES") && cmake.contains("msg/*.msg"));

    // rosidl_adapter parses each file as package `name`: the field names and types it reads are
    // those of our generated definition (its first section, before the nested ones).
    let script = "import json, sys\n\
                  from rosidl_adapter.parser import parse_message_file\n\
                  out = {}\n\
                  for path in sys.argv[2:]:\n\
                  \x20   spec = parse_message_file(sys.argv[1], path)\n\
                  \x20   out[spec.msg_name] = [[str(f.type), f.name] for f in spec.fields]\n\
                  print(json.dumps(out))";
    let files: Vec<PathBuf> = message_files().iter().map(|f| root().join(f)).collect();
    let out = run(Command::new(SYSTEM_PYTHON).args(["-c", script, name]).args(&files));
    let parsed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed.as_object().unwrap().len(), files.len());
    for (msg, def) in [("Keypoints", node_msgs::Keypoints::DEFINITION), ("PairPose", node_msgs::PairPose::DEFINITION)] {
        let ours: Vec<(String, String)> = def
            .split("\n=====")
            .next()
            .unwrap()
            .lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| !l.is_empty() && !l.contains('='))
            .map(|l| {
                let mut it = l.split_whitespace();
                (it.next().unwrap().to_string(), it.next().unwrap().to_string())
            })
            .collect();
        let theirs: Vec<(String, String)> = parsed[msg]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f[0].as_str().unwrap().to_string(), f[1].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{msg}: {theirs:?}");
        for ((our_type, our_name), (their_type, their_name)) in ours.iter().zip(&theirs) {
            assert_eq!(our_name, their_name, "{msg}");
            // rosidl qualifies types (`std_msgs/Header`); the .msg may write them short.
            let short = |t: &str| Path::new(t).file_name().unwrap().to_str().unwrap().to_string();
            assert_eq!(short(our_type), short(their_type), "{msg}.{our_name}");
        }
    }
}
