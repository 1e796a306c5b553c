//! The launch files' argument logic and the node's input topics, from `ros2 launch` arguments to
//! what the node subscribes: remappings as image_transport pairs the topics, parameters where a
//! user's file wins over launch defaults. launch_ros cannot be installed here, so the launch
//! file's own `node_settings` runs under Python; the expected topics are written by hand from
//! the conventions (REP 144 names, image_transport's `/compressed` and camera_info pairing).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::markdown::{code_spans, table_rows};
use serde_json::{json, Value};
use sp_dust3r_core::params::args::{ParamValue, RosArgs};
use sp_dust3r_core::params::topics::{
    input_topics, resolve, InputTopics, CLOUD_MAP, KEYPOINTS, KEYPOINTS_IMAGE, ODOM, PATH, POINTCLOUD,
};
use sp_dust3r_core::params::{declared, NodeParams};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `body` under Python with `module` (launch file `file`, loaded without ROS) and `config`
/// (its declared defaults, the package's params.yaml as `PKG/params.yaml`, updated with
/// `given`); `args` are `sys.argv[3:]`. What `body` prints, as JSON.
fn launch_logic(file: &str, given: &Value, body: &str, args: &[String]) -> Value {
    let script = format!(
        "import importlib.util, json, sys\nsys.dont_write_bytecode = True\n\
         spec = importlib.util.spec_from_file_location('launch_file', sys.argv[1])\n\
         module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n\
         config = {{name: ('PKG/params.yaml' if default is None else default) for name, default, _ in module.ARGUMENTS}}\n\
         config.update(json.loads(sys.argv[2]))\n{body}"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .arg(root().join("launch").join(file))
        .arg(given.to_string())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The launch file's module applied to `given` launch arguments (the others take their
/// declared defaults).
fn launch(given: Value) -> Result<Value, String> {
    let body = "try:\n    print(json.dumps({'settings': module.node_settings(config), 'parameter_arguments':\n        \
                {a: list(p) for a, (p, _) in module.PARAMETER_ARGUMENTS.items()}}))\n\
                except ValueError as e:\n    print(json.dumps({'error': str(e)}))\n";
    let v = launch_logic("sp_dust3r.launch.py", &given, body, &[]);
    match v.get("error") {
        Some(e) => Err(e.as_str().unwrap().to_string()),
        None => Ok(v),
    }
}

/// The remappings of a launch result as the node's command line carries them.
fn remaps(settings: &Value) -> Vec<(String, String)> {
    settings["remappings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_str().unwrap().to_string()))
        .collect()
}

/// What the node subscribes with these launch arguments and the transport.
fn inputs(settings: &Value, compressed: bool) -> (String, String) {
    pair(input_topics(&remaps(settings), settings["namespace"].as_str().unwrap(), compressed))
}

fn pair(t: InputTopics) -> (String, String) {
    (t.image, t.camera_info)
}

fn topics(image: &str, camera_info: &str) -> (String, String) {
    (image.into(), camera_info.into())
}

#[test]
fn launch_arguments_become_remappings_that_find_a_drivers_topics() {
    // Defaults: a driver in /camera publishing image_raw and camera_info.
    let s = &launch(json!({})).unwrap()["settings"];
    assert_eq!((s["name"].as_str(), s["namespace"].as_str()), (Some("sp_dust3r"), Some("/camera")));
    assert_eq!(inputs(s, false), topics("/camera/image_raw", "/camera/camera_info"));
    assert_eq!(inputs(s, true), topics("/camera/image_raw/compressed", "/camera/camera_info"));

    // A RealSense-style driver: colour under a sub-namespace; compressed and camera_info follow.
    let s = &launch(json!({"camera_namespace": "/robot/front", "image_topic": "color/image_raw"})).unwrap()["settings"];
    assert_eq!(s["namespace"], "/robot/front");
    assert_eq!(inputs(s, true), topics("/robot/front/color/image_raw/compressed", "/robot/front/color/camera_info"));

    // Absolute image topic, camera_info elsewhere, outputs in the node's own namespace.
    let s = &launch(json!({
        "image_topic": "/cam/image_rect", "camera_info_topic": "/cam/calibration/camera_info",
        "namespace": "/perception", "node_name": "features",
    }))
    .unwrap()["settings"];
    assert_eq!((s["name"].as_str(), s["namespace"].as_str()), (Some("features"), Some("/perception")));
    assert_eq!(inputs(s, false), topics("/cam/image_rect", "/cam/calibration/camera_info"));
    assert_eq!(inputs(s, true), topics("/cam/image_rect/compressed", "/cam/calibration/camera_info"));
    // The image remapping does not catch the node's own `keypoints/image` output.
    assert_eq!(resolve(&remaps(s), "/perception", KEYPOINTS_IMAGE), "/perception/keypoints/image");
    assert_eq!(resolve(&remaps(s), "/perception", KEYPOINTS), "/perception/keypoints");

    // A relative camera namespace is taken from the root, as a driver's would be.
    let s = &launch(json!({"camera_namespace": "cam"})).unwrap()["settings"];
    assert_eq!(inputs(s, false), topics("/cam/image_raw", "/cam/camera_info"));
}

/// `camera:=<driver>` finds the topics each driver publishes on Jazzy with its defaults
/// (realsense2_camera's rs_launch.py with aligned depth; usb_cam and v4l2_camera without a
/// namespace), and a topic argument given wins over the preset.
#[test]
fn camera_presets_find_real_drivers_topics() {
    let all = |s: &Value| {
        let t = input_topics(&remaps(s), s["namespace"].as_str().unwrap(), false);
        (t.image, t.camera_info, t.depth, s["namespace"].as_str().unwrap().to_string())
    };
    let owned = |a: &str, b: &str, c: &str, d: &str| (a.to_string(), b.to_string(), c.to_string(), d.to_string());
    let s = &launch(json!({"camera": "realsense2_camera"})).unwrap()["settings"];
    assert_eq!(
        all(s),
        owned(
            "/camera/camera/color/image_raw",
            "/camera/camera/color/camera_info",
            "/camera/camera/aligned_depth_to_color/image_raw",
            "/camera/camera"
        )
    );
    for driver in ["usb_cam", "v4l2_camera"] {
        let s = &launch(json!({"camera": driver})).unwrap()["settings"];
        // Outputs not in the root, where /odom is the robot's wheel odometry.
        assert_eq!(all(s), owned("/image_raw", "/camera_info", "/sp_dust3r/depth/image", "/sp_dust3r"), "{driver}");
        assert_eq!(resolve(&remaps(s), "/sp_dust3r", KEYPOINTS), "/sp_dust3r/keypoints");
    }
    // generic is the default, and what the launch file did before presets.
    let s = &launch(json!({"camera": "generic"})).unwrap()["settings"];
    assert_eq!(all(s), owned("/camera/image_raw", "/camera/camera_info", "/camera/depth/image", "/camera"));
    // A second RealSense named front: the namespace given, the preset's topics under it.
    let s = &launch(json!({"camera": "realsense2_camera", "camera_namespace": "/front/camera"})).unwrap()["settings"];
    assert_eq!(
        all(s),
        owned(
            "/front/camera/color/image_raw",
            "/front/camera/color/camera_info",
            "/front/camera/aligned_depth_to_color/image_raw",
            "/front/camera"
        )
    );
    let s = &launch(json!({"camera": "usb_cam", "image_topic": "/usb/image_rect", "namespace": "/vision"})).unwrap()
        ["settings"];
    assert_eq!(all(s), owned("/usb/image_rect", "/usb/camera_info", "/vision/depth/image", "/vision"));
    let e = launch(json!({"camera": "zed"})).unwrap_err();
    assert!(e.contains("camera:='zed' is not one of generic, realsense2_camera, usb_cam, v4l2_camera"), "{e}");
}

/// `log_level:=` reaches the node as `--ros-args --log-level`, which it reads; a level it does
/// not know is refused at launch.
#[test]
fn log_level_becomes_the_nodes_log_level() {
    assert_eq!(launch(json!({})).unwrap()["settings"]["ros_arguments"], json!([]));
    let s = &launch(json!({"log_level": "DEBUG"})).unwrap()["settings"];
    assert_eq!(s["ros_arguments"], json!(["--log-level", "debug"]));
    let args: Vec<String> = s["ros_arguments"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().into()).collect();
    let (_, ros) =
        sp_dust3r_core::params::args::split_ros_args(std::iter::once("--ros-args".to_string()).chain(args)).unwrap();
    assert_eq!(ros.log_level.as_deref(), Some("debug"));
    assert_eq!(ros.bad_log_level(), None);
    let e = launch(json!({"log_level": "verbose"})).unwrap_err();
    assert!(e.contains("log_level:='verbose' is not one of debug, info, warn, error, fatal"), "{e}");
}

/// The bringup launch's plan for `given` arguments with the ROS packages `installed`: the
/// driver, the message, the node's settings and, with rviz, its config's topics.
fn bringup(given: Value, installed: &[&str]) -> Value {
    let body = "plan = module.bringup_plan(config, set(json.loads(sys.argv[3])))\n\
                settings = module.NODE.node_settings(plan['node'])\n\
                rviz = module.rviz_config(open(sys.argv[4]).read(), settings) if plan['rviz'] else None\n\
                print(json.dumps({'driver': plan['driver'], 'message': plan['message'], 'settings': settings, 'rviz': rviz}))\n";
    let template = root().join("config/trajectory.rviz").display().to_string();
    launch_logic("bringup.launch.py", &given, body, &[json!(installed).to_string(), template])
}

/// Every topic an RViz config's displays subscribe, sorted.
fn rviz_topics(text: &str) -> Vec<String> {
    let mut topics: Vec<String> = common::rviz_subscriptions(text).into_iter().map(|(t, _, _)| t).collect();
    topics.sort();
    topics
}

/// bringup.launch.py starts the preset's driver when its package is installed (else says which
/// apt package to install and starts the node alone), the node with sp_dust3r.launch.py's
/// settings, and RViz subscribed to the topics this node publishes and reads, with TF on so the
/// odometry has a place in map.
#[test]
fn bringup_starts_the_driver_it_finds_and_rviz_on_the_nodes_topics() {
    let b = bringup(json!({"camera": "realsense2_camera"}), &["realsense2_camera", "rviz2"]);
    assert_eq!(
        b["driver"],
        json!({"package": "realsense2_camera", "launch": "rs_launch.py", "arguments": {"align_depth.enable": "true"}})
    );
    assert_eq!((b["message"].is_null(), b["rviz"].is_null()), (true, true));
    // The node as sp_dust3r.launch.py starts it, publish_tf left to the params file.
    assert_eq!(b["settings"], launch(json!({"camera": "realsense2_camera"})).unwrap()["settings"]);

    let b = bringup(json!({"camera": "usb_cam"}), &["rviz2"]);
    assert!(b["driver"].is_null());
    let m = b["message"].as_str().unwrap();
    assert!(m.contains("package usb_cam is not installed (sudo apt install ros-$ROS_DISTRO-usb-cam)"), "{m}");
    let b = bringup(json!({"camera": "v4l2_camera"}), &["v4l2_camera"]);
    assert_eq!(b["driver"], json!({"package": "v4l2_camera", "executable": "v4l2_camera_node"}));
    let b = bringup(json!({"camera": "v4l2_camera", "driver": "false"}), &["v4l2_camera"]);
    assert!(b["driver"].is_null() && b["message"].is_null());
    assert!(bringup(json!({}), &[])["driver"].is_null(), "generic: no driver to start");
    // A camera namespace of one's own: the driver publishes there and the node reads it there
    // (rs_launch.py's topics are /<camera_namespace>/<camera_name>/...).
    let b = bringup(json!({"camera": "realsense2_camera", "camera_namespace": "/robot/front"}), &["realsense2_camera"]);
    assert_eq!(
        b["driver"]["arguments"],
        json!({"align_depth.enable": "true", "camera_namespace": "robot", "camera_name": "front"})
    );
    assert_eq!(inputs(&b["settings"], false), topics("/robot/front/color/image_raw", "/robot/front/color/camera_info"));
    let b = bringup(json!({"camera": "usb_cam", "camera_namespace": "/left"}), &["usb_cam"]);
    assert_eq!(b["driver"]["namespace"], "/left");
    assert_eq!(inputs(&b["settings"], false), topics("/left/image_raw", "/left/camera_info"));
    let b = bringup(json!({"camera": "usb_cam", "camera_namespace": "/"}), &["usb_cam"]);
    assert!(b["driver"].get("namespace").is_none(), "the preset's own namespace: the driver's defaults");

    for (given, namespace) in [
        (json!({"camera": "realsense2_camera", "rviz": "true"}), "/camera/camera"),
        (json!({"camera": "usb_cam", "rviz": "true"}), "/sp_dust3r"),
    ] {
        let b = bringup(given.clone(), &[]);
        let s = &b["settings"];
        assert_eq!(s["namespace"], namespace);
        assert_eq!(s["parameters"][1]["publish_tf"], true, "{given}: TF places the odometry in map");
        let ns = s["namespace"].as_str().unwrap();
        let r = remaps(s);
        let mut want = vec![
            input_topics(&r, ns, false).image,
            resolve(&r, ns, CLOUD_MAP),
            resolve(&r, ns, PATH),
            resolve(&r, ns, ODOM),
            resolve(&r, ns, POINTCLOUD),
            resolve(&r, ns, KEYPOINTS_IMAGE),
        ];
        want.sort();
        assert_eq!(rviz_topics(b["rviz"].as_str().unwrap()), want, "{given}");
    }
    // publish_tf given wins over rviz's default.
    let b = bringup(json!({"rviz": "true", "publish_tf": "false"}), &[]);
    assert_eq!(b["settings"]["parameters"][1]["publish_tf"], false);
}

/// image_transport's pairing on the node's own command line (what `ros2 run ... -r` gives).
#[test]
fn compressed_and_camera_info_follow_the_remapped_image() {
    let r = |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    assert_eq!(pair(input_topics(&[], "/", false)), topics("/image", "/camera_info"));
    assert_eq!(pair(input_topics(&[], "/camera", true)), topics("/camera/image/compressed", "/camera/camera_info"));
    let m = r(&[("image", "/cam/left/image_raw")]);
    assert_eq!(pair(input_topics(&m, "/", true)), topics("/cam/left/image_raw/compressed", "/cam/left/camera_info"));
    // Remapping by the resolved name works as well as by the relative one.
    let m = r(&[("/camera/image", "image_color")]);
    assert_eq!(pair(input_topics(&m, "/camera", false)), topics("/camera/image_color", "/camera/camera_info"));
    // An explicit camera_info remapping wins; so does one of the transport topic itself.
    let m = r(&[("image", "/cam/image_raw"), ("camera_info", "/calib/info")]);
    assert_eq!(pair(input_topics(&m, "/", false)), topics("/cam/image_raw", "/calib/info"));
    let m = r(&[("image", "/cam/image_raw"), ("/cam/image_raw/compressed", "/cam/jpeg")]);
    assert_eq!(pair(input_topics(&m, "/", true)), topics("/cam/jpeg", "/cam/camera_info"));
    // The last matching rule applies.
    let m = r(&[("image", "/a/image"), ("image", "/b/image")]);
    assert_eq!(pair(input_topics(&m, "/", false)), topics("/b/image", "/b/camera_info"));
    // Registered depth is `depth/image` in the namespace, remapped to the driver's.
    assert_eq!(input_topics(&[], "/camera", false).depth, "/camera/depth/image");
    let m = r(&[("depth/image", "aligned_depth_to_color/image_raw")]);
    assert_eq!(input_topics(&m, "/camera", false).depth, "/camera/aligned_depth_to_color/image_raw");
}

/// Launch arguments set parameters only when given, after the params file, so a user's file is
/// not overwritten by launch defaults; what they set is declared by the node.
#[test]
fn a_users_params_file_wins_over_launch_defaults() {
    let out = launch(json!({})).unwrap();
    assert_eq!(out["settings"]["parameters"], json!(["PKG/params.yaml"]));
    let names: Vec<String> = declared().iter().map(|s| s.name.to_string()).collect();
    for (argument, parameters) in out["parameter_arguments"].as_object().unwrap() {
        for p in parameters.as_array().unwrap() {
            assert!(
                names.iter().any(|n| Some(n.as_str()) == p.as_str()),
                "{argument} sets {p}, which the node does not declare"
            );
        }
    }

    let given =
        launch(json!({"params_file": "/home/me/robot.yaml", "backend": "tt-server", "use_sim_time": "True"})).unwrap();
    assert_eq!(
        given["settings"]["parameters"],
        json!(["/home/me/robot.yaml", {
            "superpoint_backend": "tt-server", "dust3r_backend": "tt-server", "use_sim_time": true
        }])
    );
    let e = launch(json!({"use_sim_time": "sometimes"})).unwrap_err();
    assert!(e.contains("use_sim_time:='sometimes' is not a boolean"), "{e}");

    // The node's view: launch_ros passes the file, then the dictionary as a file of its own under
    // the node's full name. The user's file sets the backend and sim time.
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("robot.yaml");
    std::fs::write(
        &user,
        "/**/sp_dust3r:\n  ros__parameters:\n    dust3r_backend: tt-server\n    use_sim_time: true\n",
    )
    .unwrap();
    let run = |given: Value| {
        let settings = launch(given).unwrap()["settings"].clone();
        let fqn = format!("{}/{}", settings["namespace"].as_str().unwrap(), settings["name"].as_str().unwrap());
        let mut files = vec![user.clone()];
        if let Some(dict) = settings["parameters"].get(1) {
            let path = dir.path().join("launch_params.yaml");
            let mut yaml = format!("{fqn}:\n  ros__parameters:\n");
            for (k, v) in dict.as_object().unwrap() {
                yaml += &format!("    {k}: {v}\n");
            }
            std::fs::write(&path, yaml).unwrap();
            files.push(path);
        }
        let (p, warnings) = NodeParams::resolve(&RosArgs { params_files: files, ..RosArgs::default() }, &fqn).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        p
    };
    let p = run(json!({"params_file": user.to_str().unwrap()}));
    assert_eq!((p.dust3r_backend.name(), p.superpoint_backend.name(), p.use_sim_time), ("tt-server", "cpu", true));
    // Given on the command line, a launch argument wins over the file.
    let p = run(json!({"params_file": user.to_str().unwrap(), "backend": "cpu", "use_sim_time": "false"}));
    assert_eq!((p.dust3r_backend.name(), p.use_sim_time), ("cpu", false));
    // The README's RealSense line: metres from the aligned depth the preset subscribes.
    let p = run(json!({"params_file": user.to_str().unwrap(), "camera": "realsense2_camera", "scale_source": "depth"}));
    assert_eq!(p.scale_source.name(), "depth");
    // A value the node refuses is refused there, with the parameter's name.
    let p = NodeParams::resolve(
        &RosArgs {
            params: vec![("image_transport".into(), ParamValue::String("theora".into()))],
            ..Default::default()
        },
        "/camera/sp_dust3r",
    );
    assert!(p.unwrap_err().to_string().contains("image_transport"));
}

/// The XML launch file is the Python one's arguments and logic: it includes it and adds nothing.
#[test]
fn xml_launch_includes_the_python_one() {
    let text = std::fs::read_to_string(root().join("launch/sp_dust3r.launch.xml")).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let elements: Vec<_> = doc.root_element().children().filter(|n| n.is_element()).collect();
    assert_eq!(elements.len(), 1, "{text}");
    assert!(elements[0].has_tag_name("include"));
    let file = elements[0].attribute("file").unwrap();
    let relative = file.strip_prefix("$(find-pkg-share sp_dust3r)/").unwrap();
    assert!(root().join(relative).is_file(), "{file}");
}

/// docs/node.md's launch-argument table names exactly the arguments the two launch files
/// declare, and its preset table exactly the presets.
#[test]
fn the_docs_list_every_launch_argument_and_preset() {
    let body = "print(json.dumps({'arguments': [name for name, _, _ in module.ARGUMENTS], \
                'presets': list(module.NODE.PRESETS)}))\n";
    let declared = launch_logic("bringup.launch.py", &json!({}), body, &[]);
    let names = |key: &str| -> std::collections::BTreeSet<String> {
        declared[key].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
    };
    let doc = std::fs::read_to_string(root().join("docs/node.md")).unwrap();
    let first_column = |header: &str| -> std::collections::BTreeSet<String> {
        let rows = table_rows(&doc, header);
        assert!(!rows.is_empty(), "docs/node.md has a table {header}");
        rows.iter().flat_map(|r| code_spans(&r[0])).filter(|c| !c.contains("launch.py")).collect()
    };
    assert_eq!(first_column("| argument | default |"), names("arguments"));
    assert_eq!(first_column("| `camera:=` |"), names("presets"));
}
