//! The command line `ros2 launch` gives the node, its parameter files, and the declared
//! parameters' types and ranges.

use sp_dust3r_core::backend::build::BackendKind;
use sp_dust3r_core::params::args::{
    load_params_file, node_name_matches, split_ros_args, ArgsError, ParamValue, RosArgs,
};
use sp_dust3r_core::params::{declared, NodeParams, ParamError};

fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn launch_style_command_line_is_split_and_parsed() {
    let (own, ros) = split_ros_args(args(&[
        "node",
        "--verbose",
        "--ros-args",
        "-r",
        "__node:=front_sp",
        "-r",
        "__ns:=/camera",
        "--params-file",
        "/tmp/p.yaml",
        "-p",
        "max_keypoints:=512",
        "-p",
        "publish_tf:=true",
        "-p",
        "keypoint_threshold:=0.01",
        "-p",
        "superpoint_weights:=/w/sp",
        "-r",
        "image:=/cam/left/image_raw",
        "--log-level",
        "debug",
        "--",
        "trailing",
    ]))
    .unwrap();
    assert_eq!(own, args(&["node", "--verbose", "trailing"]));
    assert_eq!(ros.node_name.as_deref(), Some("front_sp"));
    assert_eq!(ros.namespace.as_deref(), Some("/camera"));
    assert_eq!(ros.remaps, vec![("image".to_string(), "/cam/left/image_raw".to_string())]);
    assert_eq!(ros.params_files, vec![std::path::PathBuf::from("/tmp/p.yaml")]);
    assert_eq!(ros.log_level.as_deref(), Some("debug"));
    assert_eq!(
        ros.params,
        vec![
            ("max_keypoints".into(), ParamValue::Integer(512)),
            ("publish_tf".into(), ParamValue::Bool(true)),
            ("keypoint_threshold".into(), ParamValue::Double(0.01)),
            ("superpoint_weights".into(), ParamValue::String("/w/sp".into())),
        ]
    );
    assert_eq!(ParamValue::parse("[1, 2, 3]"), Some(ParamValue::IntegerArray(vec![1, 2, 3])));
    assert_eq!(ParamValue::parse("[a, b]"), Some(ParamValue::StringArray(vec!["a".into(), "b".into()])));
}

#[test]
fn malformed_ros_args_are_reported() {
    assert_eq!(
        split_ros_args(args(&["n", "--ros-args", "-p"])).unwrap_err(),
        ArgsError::MissingValue { flag: "-p".into() }
    );
    assert!(matches!(
        split_ros_args(args(&["n", "--ros-args", "-r", "image"])).unwrap_err(),
        ArgsError::Malformed { what: "remapping", .. }
    ));
    assert!(matches!(
        split_ros_args(args(&["n", "--ros-args", "-p", "x=1"])).unwrap_err(),
        ArgsError::Malformed { what: "parameter", .. }
    ));
    assert_eq!(
        split_ros_args(args(&["n", "--ros-args", "--bogus"])).unwrap_err(),
        ArgsError::Unknown("--bogus".into())
    );
}

#[test]
fn parameter_files_apply_wildcard_name_and_namespaced_sections_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("params.yaml");
    std::fs::write(
        &path,
        "/**:\n  ros__parameters:\n    use_sim_time: true\n    max_keypoints: 100\nother_node:\n  ros__parameters:\n    max_keypoints: 7\n\
         /camera/sp_dust3r:\n  ros__parameters:\n    max_keypoints: 2048\n    keypoint_threshold: 0\n    image_transport: compressed\n    nested:\n      a: 1.5\n",
    )
    .unwrap();
    let file = load_params_file(&path, "/camera/sp_dust3r").unwrap();
    assert_eq!(file.unmatched, vec!["/other_node".to_string()]);
    assert_eq!(
        file.params,
        vec![
            ("use_sim_time".into(), ParamValue::Bool(true)),
            ("max_keypoints".into(), ParamValue::Integer(100)),
            ("max_keypoints".into(), ParamValue::Integer(2048)),
            ("keypoint_threshold".into(), ParamValue::Integer(0)),
            ("image_transport".into(), ParamValue::String("compressed".into())),
            ("nested.a".into(), ParamValue::Double(1.5)),
        ]
    );
    // Files, then -p overrides; integers are accepted for doubles; undeclared names warn.
    let ros = RosArgs {
        params_files: vec![path.clone()],
        params: vec![("max_keypoints".into(), ParamValue::Integer(-1))],
        ..RosArgs::default()
    };
    let (p, warnings) = NodeParams::resolve(&ros, "/camera/sp_dust3r").unwrap();
    assert_eq!(p.max_keypoints, None);
    assert!(p.use_sim_time && p.compressed_input);
    assert_eq!(p.keypoint_threshold, 0.0);
    assert_eq!(p.superpoint_backend, BackendKind::Cpu);
    assert_eq!(
        warnings,
        vec![
            format!(
                "parameter file {}: section /other_node matches no node named /camera/sp_dust3r; not applied",
                path.display()
            ),
            "parameter nested.a is not declared by this node; ignored".to_string()
        ]
    );

    std::fs::write(&path, "/**:\n  ros__parameters: [1, 2\n").unwrap();
    assert!(matches!(load_params_file(&path, "/sp_dust3r"), Err(ArgsError::ParamsFile { .. })));
    assert!(matches!(
        load_params_file(&dir.path().join("missing.yaml"), "/sp_dust3r"),
        Err(ArgsError::ParamsFile { .. })
    ));
}

/// rcl's section matching: the hand-written table of what users write, then every pattern
/// against every name, compared with rclcpp's own rule run by Python's `re` (rclcpp rewrites
/// `/*` to `(/\w+)`, so `/**` becomes `(/\w+)*`, and needs a full match).
#[test]
fn parameter_file_sections_match_nodes_as_rcl_does() {
    let table = [
        ("/**", "/camera/sp_dust3r", true),
        ("/**", "/sp_dust3r", true),
        ("/camera/sp_dust3r", "/camera/sp_dust3r", true),
        ("camera/sp_dust3r", "/camera/sp_dust3r", true),
        // A bare node name is the node at the root namespace only.
        ("sp_dust3r", "/sp_dust3r", true),
        ("sp_dust3r", "/camera/sp_dust3r", false),
        ("/**/sp_dust3r", "/camera/sp_dust3r", true),
        ("/**/sp_dust3r", "/robot/front/sp_dust3r", true),
        ("/**/sp_dust3r", "/sp_dust3r", true),
        ("/**/sp_dust3r", "/camera/sp_dust3r_outputs", false),
        ("/camera/**", "/camera/sp_dust3r", true),
        ("/camera/**", "/camera/front/sp_dust3r", true),
        ("/camera/**", "/cam/sp_dust3r", false),
        ("/*/sp_dust3r", "/camera/sp_dust3r", true),
        ("/*/sp_dust3r", "/sp_dust3r", false),
        ("/*/sp_dust3r", "/robot/camera/sp_dust3r", false),
        ("/camera/*", "/camera/sp_dust3r", true),
        ("/camera", "/camera/sp_dust3r", false),
    ];
    for (pattern, fqn, expected) in table {
        assert_eq!(node_name_matches(pattern, fqn), expected, "{pattern} against {fqn}");
    }
    let patterns = [
        "/**",
        "/*",
        "/**/sp_dust3r",
        "/*/sp_dust3r",
        "/a/**",
        "/a/*",
        "/a/**/sp_dust3r",
        "/**/a/**",
        "/*/*",
        "/a/sp_dust3r",
        "/sp_dust3r",
        "/a/*/sp_dust3r",
        "/**/b/*",
    ];
    let names = ["/sp_dust3r", "/a/sp_dust3r", "/b/sp_dust3r", "/a/b/sp_dust3r", "/a/b/c", "/a", "/b/a/sp_dust3r"];
    let script = "import json, re, sys\n\
                  pats, names = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n\
                  print(json.dumps([[re.fullmatch(p.replace('/*', '(/\\\\w+)'), n) is not None for n in names] for p in pats]))";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(serde_json::to_string(&patterns).unwrap())
        .arg(serde_json::to_string(&names).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rclcpp: Vec<Vec<bool>> = serde_json::from_slice(&out.stdout).unwrap();
    let mut seen = [0, 0];
    for (p, row) in patterns.iter().zip(&rclcpp) {
        for (n, &expected) in names.iter().zip(row) {
            assert_eq!(node_name_matches(p, n), expected, "{p} against {n}");
            seen[usize::from(expected)] += 1;
        }
    }
    assert!(seen[0] > 20 && seen[1] > 20, "{seen:?}");
}

/// The nested form (`/camera: sp_dust3r: ros__parameters:`) and wildcards reach the node; a
/// section for another node is named in a warning; ros__parameters at the top is an error.
#[test]
fn nested_and_wildcard_sections_apply_and_strangers_warn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("params.yaml");
    std::fs::write(
        &path,
        "/camera:\n  sp_dust3r:\n    ros__parameters:\n      max_keypoints: 11\n  other:\n    ros__parameters:\n      x: 1\n\
         /**/sp_dust3r:\n  ros__parameters:\n    nms_radius: 2\n\
         /camera/**:\n  ros__parameters:\n    keypoint_threshold: 0.01\n\
         sp_dust3r:\n  ros__parameters:\n    cloud_stride: 5\n",
    )
    .unwrap();
    let ros = RosArgs { params_files: vec![path.clone()], ..RosArgs::default() };
    let (p, warnings) = NodeParams::resolve(&ros, "/camera/sp_dust3r").unwrap();
    assert_eq!((p.max_keypoints, p.nms_radius, p.keypoint_threshold, p.cloud_stride), (Some(11), 2, 0.01, 1));
    let warned = |section: &str| {
        format!(
            "parameter file {}: section {section} matches no node named /camera/sp_dust3r; not applied",
            path.display()
        )
    };
    assert_eq!(warnings, vec![warned("/camera/other"), warned("/sp_dust3r")]);
    // The same file for the node at the root: the bare name applies, /camera's do not.
    let (p, warnings) = NodeParams::resolve(&ros, "/sp_dust3r").unwrap();
    assert_eq!((p.max_keypoints, p.nms_radius, p.keypoint_threshold, p.cloud_stride), (Some(1024), 2, 0.005, 5));
    assert_eq!(warnings.len(), 3, "{warnings:?}");

    std::fs::write(&path, "ros__parameters:\n  max_keypoints: 1\n").unwrap();
    let e = load_params_file(&path, "/sp_dust3r").unwrap_err();
    assert!(e.to_string().contains("ros__parameters without a node name"), "{e}");
    std::fs::write(&path, "/camera:\n  sp_dust3r: 3\n").unwrap();
    let e = load_params_file(&path, "/sp_dust3r").unwrap_err();
    assert!(e.to_string().contains("/camera/sp_dust3r: a value where a node name"), "{e}");
}

#[test]
fn declared_parameters_check_type_and_range() {
    let with = |name: &str, v: ParamValue| {
        NodeParams::resolve(&RosArgs { params: vec![(name.into(), v)], ..RosArgs::default() }, "/sp_dust3r")
    };
    assert!(matches!(with("nms_radius", ParamValue::Integer(65)), Err(ParamError::Range { .. })));
    assert!(matches!(with("keypoint_threshold", ParamValue::Double(1.5)), Err(ParamError::Range { .. })));
    assert!(matches!(with("keypoint_threshold", ParamValue::Double(f64::NAN)), Err(ParamError::Range { .. })));
    assert!(matches!(with("image_transport", ParamValue::String("theora".into())), Err(ParamError::Range { .. })));
    assert!(matches!(
        with("publish_tf", ParamValue::String("yes".into())),
        Err(ParamError::Type { expected: "bool", .. })
    ));
    assert!(matches!(with("keyframe_max_interval", ParamValue::Double(0.1)), Err(ParamError::Invalid { .. })));
    assert!(matches!(with("dust3r_precision", ParamValue::String("fp16".into())), Err(ParamError::Range { .. })));
    let bf16 = with("dust3r_precision", ParamValue::String("bf16".into())).unwrap().0;
    assert_eq!(bf16.backend_config().dust3r_precision, sp_dust3r_core::tensor::Precision::Bf16);
    use sp_dust3r_core::dust3r::Checkpoint;
    assert!(matches!(with("dust3r_model", ParamValue::String("224_dpt".into())), Err(ParamError::Range { .. })));
    let linear = with("dust3r_model", ParamValue::String("224_linear".into())).unwrap().0;
    assert_eq!(linear.backend_config().dust3r_model, Checkpoint::Linear224);
    assert_eq!(
        with("max_keypoints", ParamValue::Integer(5)).unwrap().0.backend_config().dust3r_model,
        Checkpoint::Dpt512
    );
    // map -> odom on TF needs two frames with names.
    for (name, frame) in [("map_frame", "odom"), ("map_frame", "/odom"), ("map_frame", ""), ("odom_frame", "")] {
        let err = with(name, ParamValue::String(frame.into())).unwrap_err();
        assert!(matches!(&err, ParamError::Invalid { name: n, .. } if n == name), "{name} {frame:?}: {err}");
    }
    assert!(with("map_frame", ParamValue::String("world".into())).is_ok());
    let err = with("nms_radius", ParamValue::Integer(65)).unwrap_err().to_string();
    assert!(err.contains("nms_radius") && err.contains("65") && err.contains("[0, 64]"), "{err}");
    // The issue's names, all declared, each with a description.
    let names: Vec<String> = declared().iter().map(|s| s.name.to_string()).collect();
    for n in [
        "image_transport",
        "superpoint_backend",
        "superpoint_weights",
        "dust3r_backend",
        "dust3r_weights",
        "max_keypoints",
        "keypoint_threshold",
        "nms_radius",
        "keyframe_match_ratio",
        "keyframe_min_interval",
        "keyframe_max_interval",
        "confidence_threshold",
        "publish_tf",
        "use_sim_time",
    ] {
        assert!(names.iter().any(|d| d == n), "{n} not declared");
    }
    assert!(declared().iter().all(|s| !s.description.is_empty()));
    let (defaults, _) = NodeParams::resolve(&RosArgs::default(), "/sp_dust3r").unwrap();
    assert_eq!(
        (defaults.max_keypoints, defaults.nms_radius, defaults.keypoint_threshold, defaults.keyframe_match_ratio),
        (Some(1024), 4, 0.005, 0.5)
    );
}

/// config/params.yaml names only declared parameters, with valid values, and states the defaults.
#[test]
fn shipped_params_file_is_valid_and_states_the_defaults() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/params.yaml");
    let given = load_params_file(&path, "/sp_dust3r").unwrap().params;
    let specs = declared();
    assert_eq!(given.len(), specs.len(), "params.yaml should list every declared parameter");
    for (name, value) in &given {
        let spec = specs.iter().find(|s| s.name == *name).unwrap_or_else(|| panic!("{name} is not declared"));
        assert_eq!(value, &spec.default, "{name}: params.yaml and the declaration disagree");
    }
    let (p, warnings) =
        NodeParams::resolve(&RosArgs { params_files: vec![path], ..RosArgs::default() }, "/camera/sp_dust3r").unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(p, NodeParams::resolve(&RosArgs::default(), "/sp_dust3r").unwrap().0);
}

/// What `ros2 param set` may change while the node runs: tunables yes, what was loaded or
/// subscribed at start-up no; a batch is applied whole or not at all.
#[test]
fn runtime_changes_are_checked_and_atomic() {
    use sp_dust3r_core::params::ParamStore;
    let (mut store, _) = ParamStore::resolve(&RosArgs::default(), "/sp_dust3r").unwrap();
    let set = |s: &mut ParamStore, changes: &[(&str, ParamValue)]| {
        s.set(&changes.iter().map(|(n, v)| (n.to_string(), v.clone())).collect::<Vec<_>>())
    };

    let applied =
        set(&mut store, &[("max_keypoints", ParamValue::Integer(5)), ("confidence_threshold", ParamValue::Integer(4))])
            .unwrap();
    assert_eq!(
        applied,
        vec![
            ("max_keypoints".into(), ParamValue::Integer(5)),
            ("confidence_threshold".into(), ParamValue::Double(4.0))
        ]
    );
    assert_eq!((store.params().max_keypoints, store.params().confidence_threshold), (Some(5), 4.0));

    let err = set(&mut store, &[("image_transport", ParamValue::String("compressed".into()))]).unwrap_err().to_string();
    assert!(err.contains("read-only"), "{err}");
    let err = set(&mut store, &[("nms_radius", ParamValue::Integer(65))]).unwrap_err().to_string();
    assert!(err.contains("outside [0, 64]"), "{err}");
    let err = set(&mut store, &[("no_such", ParamValue::Bool(true))]).unwrap_err().to_string();
    assert!(err.contains("not declared"), "{err}");
    // The interval pair is checked together: min above max is refused, and nothing of the
    // batch is applied.
    let err = set(
        &mut store,
        &[("max_keypoints", ParamValue::Integer(7)), ("keyframe_min_interval", ParamValue::Double(9.0))],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("keyframe_max_interval"), "{err}");
    assert_eq!((store.params().max_keypoints, store.params().keyframe_min_interval), (Some(5), 0.5));
    assert_eq!(store.get("max_keypoints").map(|(_, v)| v.clone()), Some(ParamValue::Integer(5)));
}

#[test]
fn log_level_maps_to_tracing() {
    let level = |l: &str| split_ros_args(["--ros-args", "--log-level", l].map(String::from)).unwrap().1.tracing_level();
    assert_eq!(level("DEBUG"), Some("debug"));
    assert_eq!(level("fatal"), Some("error"));
    assert_eq!(level("loud"), None);
    // The filter: our records at the node's level, other crates' at error unless named.
    let parsed = |a: &[&str]| {
        let args = std::iter::once("--ros-args").chain(a.iter().copied()).map(String::from);
        split_ros_args(args.collect::<Vec<_>>()).unwrap().1
    };
    assert_eq!(parsed(&[]).log_filter(), "error,sp_dust3r=info");
    assert_eq!(parsed(&["--log-level", "DEBUG"]).log_filter(), "error,sp_dust3r=debug");
    let named = parsed(&["--log-level", "warn", "--log-level", "rustdds:=info"]);
    assert_eq!(named.log_filter(), "error,rustdds=info,sp_dust3r=warn");
    assert_eq!(parsed(&["--log-level", "sp_dust3r:=warn"]).log_filter(), "error,sp_dust3r=warn");
    assert_eq!(parsed(&["--log-level", "rustdds:=loud"]).bad_log_level(), Some("loud"));
    assert_eq!(named.bad_log_level(), None);
    let (_, ros) = split_ros_args(["--ros-args", "--disable-rosout-logs"].map(String::from)).unwrap();
    assert!(ros.disable_rosout);
}

/// `qos_overrides.<topic>.publisher.<policy>` for the node's outputs, as rclcpp reads them:
/// declared per output (read-only, the node's profile as default), checked, applied.
#[test]
fn qos_overrides_apply_to_the_outputs_they_name() {
    use sp_dust3r_core::params::qos::Qos;
    use sp_dust3r_core::params::ParamStore;
    let outputs = vec![("/cam/pointcloud".to_string(), Qos::OUTPUTS), ("/cam/pose".to_string(), Qos::OUTPUTS)];
    let resolve = |params: &[(&str, ParamValue)]| {
        let ros =
            RosArgs { params: params.iter().map(|(n, v)| (n.to_string(), v.clone())).collect(), ..Default::default() };
        ParamStore::resolve_with_outputs(&ros, "/cam/sp_dust3r", &outputs)
    };
    let s = |v: &str| ParamValue::String(v.into());
    let (store, warnings) = resolve(&[
        ("qos_overrides./cam/pointcloud.publisher.reliability", s("best_effort")),
        ("qos_overrides./cam/pointcloud.publisher.depth", ParamValue::Integer(1)),
        ("qos_overrides./cam/pose.publisher.history", s("keep_all")),
        ("qos_overrides./cam/pose.publisher.durability", s("transient_local")),
        ("qos_overrides./cam/keypoints.publisher.depth", ParamValue::Integer(2)),
    ])
    .unwrap();
    assert_eq!(
        store.output_qos("/cam/pointcloud", Qos::OUTPUTS),
        Qos { reliable: false, keep_all: false, depth: 1, transient_local: false }
    );
    assert_eq!(
        store.output_qos("/cam/pose", Qos::OUTPUTS),
        Qos { reliable: true, keep_all: true, depth: 10, transient_local: true }
    );
    // Not an output given to the store: not declared, so warned about and not applied.
    assert_eq!(
        warnings,
        vec!["parameter qos_overrides./cam/keypoints.publisher.depth is not declared by this node; ignored".to_string()]
    );
    let (spec, value) = store.get("qos_overrides./cam/pose.publisher.depth").unwrap();
    assert!(spec.read_only);
    assert_eq!(value, &ParamValue::Integer(10));
    // Values rclcpp would refuse are refused with the parameter's name.
    for (name, bad) in [
        ("qos_overrides./cam/pose.publisher.reliability", s("sometimes")),
        ("qos_overrides./cam/pose.publisher.depth", ParamValue::Integer(0)),
        ("qos_overrides./cam/pose.publisher.durability", ParamValue::Bool(true)),
    ] {
        let e = resolve(&[(name, bad)]).unwrap_err().to_string();
        assert!(e.contains(name), "{e}");
    }
    // Nothing given: the node's profile.
    let (store, _) = resolve(&[]).unwrap();
    assert_eq!(store.output_qos("/cam/pose", Qos::OUTPUTS), Qos::OUTPUTS);
}

/// With the robot's odometry giving the scale, `ros2 param set publish_tf true` is refused while
/// the node runs: base_frame would get a second parent in /tf.
#[test]
fn publish_tf_stays_off_while_the_robots_odometry_parents_the_base() {
    use sp_dust3r_core::params::ParamStore;
    let params = [("scale_source", "odometry"), ("base_frame", "base_link"), ("odom_frame", "visual_odom")];
    let ros = RosArgs {
        params: params.iter().map(|(k, v)| (k.to_string(), ParamValue::String(v.to_string()))).collect(),
        ..RosArgs::default()
    };
    let (mut store, _) = ParamStore::resolve(&ros, "/sp_dust3r").unwrap();
    let err = store.set(&[("publish_tf".to_string(), ParamValue::Bool(true))]).unwrap_err().to_string();
    assert!(err.contains("second parent"), "{err}");
    assert!(!store.params().publish_tf);
    let missing = RosArgs { params: ros.params[..1].to_vec(), ..RosArgs::default() };
    let err = ParamStore::resolve(&missing, "/sp_dust3r").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("needs base_frame"), "{err}");
}
