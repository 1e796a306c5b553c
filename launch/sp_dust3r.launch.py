"""Starts the sp_dust3r node for one camera.

    ros2 launch sp_dust3r sp_dust3r.launch.py camera:=realsense2_camera
    ros2 launch sp_dust3r sp_dust3r.launch.py camera_namespace:=/camera image_topic:=image_raw

Input: `<camera_namespace>/<image_topic>` (with image_transport:=compressed, that topic's
`/compressed`), and the camera_info beside it (image_transport's pairing) unless
camera_info_topic names another; `camera` picks a driver's topics (PRESETS), which the topic
arguments given override. Outputs: under `namespace`, by default the preset's (the camera's).
Parameters: params_file first, then only the launch arguments given on the command line, so a
value in the user's file is never replaced by a launch default.

The argument logic is plain Python (node_settings) that imports nothing from launch, so it can
be checked without ROS (tests/launch_files.rs).
"""

# Where each camera driver publishes, as it does on Jazzy with its defaults (realsense2_camera's
# rs_launch.py with align_depth.enable:=true; usb_cam's and v4l2_camera's nodes run without a
# namespace, so the outputs get one of their own rather than the root, where /odom is the
# robot's). '' for camera_info_topic: beside the image; for depth_topic: the node's depth/image;
# for namespace: camera_namespace.
PRESETS = {
    "generic": {"camera_namespace": "/camera", "image_topic": "image_raw", "camera_info_topic": "",
                "depth_topic": "", "namespace": ""},
    "realsense2_camera": {"camera_namespace": "/camera/camera", "image_topic": "color/image_raw",
                          "camera_info_topic": "", "depth_topic": "aligned_depth_to_color/image_raw",
                          "namespace": ""},
    "usb_cam": {"camera_namespace": "/", "image_topic": "image_raw", "camera_info_topic": "",
                "depth_topic": "", "namespace": "/sp_dust3r"},
    "v4l2_camera": {"camera_namespace": "/", "image_topic": "image_raw", "camera_info_topic": "",
                    "depth_topic": "", "namespace": "/sp_dust3r"},
}

# The preset when `camera` is not given.
DEFAULT_CAMERA = "generic"

LOG_LEVELS = ("debug", "info", "warn", "error", "fatal")

# (name, default, description); None: the package's config/params.yaml, filled in at launch.
ARGUMENTS = [
    ("camera", DEFAULT_CAMERA, "Camera driver whose topics to use: " + ", ".join(PRESETS)
     + " (the topic arguments below, when given, win)"),
    ("camera_namespace", "", "Namespace of the camera driver's topics; '' = the preset's (generic: /camera)"),
    ("image_topic", "", "Image topic, relative to camera_namespace unless absolute; '' = the preset's (generic: image_raw)"),
    ("camera_info_topic", "", "CameraInfo topic; '' = the preset's, else camera_info beside the image topic, as image_transport pairs them"),
    ("depth_topic", "", "Registered depth image (scale_source: depth), relative to camera_namespace unless absolute; "
     "'' = the preset's (realsense2_camera: aligned_depth_to_color/image_raw), else the node's depth/image"),
    ("image_transport", "", "raw or compressed (then <image_topic>/compressed); '' = params_file's (raw)"),
    ("namespace", "", "Namespace of the node and its outputs; '' = the preset's, else camera_namespace"),
    ("node_name", "sp_dust3r", "Name of the node"),
    ("log_level", "", "The node's log level: " + ", ".join(LOG_LEVELS) + "; '' = info"),
    ("params_file", None, "Parameter file (rcl format); the package's config/params.yaml by default"),
    ("backend", "", "cpu or tt-server, for both models; '' = params_file's"),
    ("superpoint_weights", "", "SuperPoint weights folder; '' = params_file's (env, HF cache, download)"),
    ("dust3r_weights", "", "DUSt3R weights folder; '' = params_file's (env, HF cache, download)"),
    ("use_sim_time", "", "true: time from /clock (ros2 bag play --clock); '' = params_file's (false)"),
    ("publish_tf", "", "true: TF map -> odom -> camera (RViz places the odometry with it); '' = params_file's (false)"),
    ("scale_source", "", "none, depth (metres from depth_topic) or odometry (metres from the robot's /tf); "
     "'' = params_file's (none)"),
]

# Launch arguments that set node parameters when given: argument -> (parameters, type).
PARAMETER_ARGUMENTS = {
    "image_transport": (("image_transport",), str),
    "backend": (("superpoint_backend", "dust3r_backend"), str),
    "superpoint_weights": (("superpoint_weights",), str),
    "dust3r_weights": (("dust3r_weights",), str),
    "use_sim_time": (("use_sim_time",), bool),
    "publish_tf": (("publish_tf",), bool),
    "scale_source": (("scale_source",), str),
}


def join(namespace, name):
    """`name` under `namespace` unless it is absolute (ROS name resolution)."""
    if name.startswith("/"):
        return name
    return namespace.rstrip("/") + "/" + name if namespace else name


def as_bool(argument, text):
    """A launch argument's boolean, as ROS parameters spell them."""
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"launch argument {argument}:={text!r} is not a boolean (true or false)")


def preset_of(config):
    """The camera preset `config` names (the default when empty); an unknown one is refused."""
    preset = config.get("camera") or DEFAULT_CAMERA
    if preset not in PRESETS:
        raise ValueError(f"launch argument camera:={preset!r} is not one of {', '.join(PRESETS)}")
    return preset


def topic_settings(config):
    """The camera's topics and the outputs' namespace: each argument given, else the preset's."""
    return {name: config.get(name) or value for name, value in PRESETS[preset_of(config)].items()}


def node_settings(config):
    """The node's name, namespace, remappings, parameters and ROS arguments from the launch
    arguments' strings."""
    topics = topic_settings(config)
    camera = topics["camera_namespace"]
    if not camera.startswith("/"):
        camera = "/" + camera
    remappings = [("image", join(camera, topics["image_topic"]))]
    if topics["camera_info_topic"]:
        remappings.append(("camera_info", join(camera, topics["camera_info_topic"])))
    if topics["depth_topic"]:
        remappings.append(("depth/image", join(camera, topics["depth_topic"])))
    level = config.get("log_level", "").strip().lower()
    if level and level not in LOG_LEVELS:
        raise ValueError(f"launch argument log_level:={level!r} is not one of {', '.join(LOG_LEVELS)}")
    given = {}
    for argument, (parameters, kind) in PARAMETER_ARGUMENTS.items():
        text = config.get(argument, "")
        if text == "":
            continue
        value = as_bool(argument, text) if kind is bool else text
        for parameter in parameters:
            given[parameter] = value
    return {
        "name": config["node_name"],
        "namespace": topics["namespace"] or camera,
        "remappings": remappings,
        "parameters": [config["params_file"]] + ([given] if given else []),
        "ros_arguments": ["--log-level", level] if level else [],
    }


def _node(context):
    # Imported here so that the module loads without ROS (see the docstring).
    from launch_ros.actions import Node

    config = {name: context.launch_configurations.get(name, "") for name, _, _ in ARGUMENTS}
    return [Node(package="sp_dust3r", executable="sp_dust3r", output="screen", **node_settings(config))]


def launch_description(arguments, function):
    """Declares `arguments` (ARGUMENTS' form) and runs `function` on the launch context."""
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.substitutions import FindPackageShare

    package_params = PathJoinSubstitution([FindPackageShare("sp_dust3r"), "config", "params.yaml"])
    declared = [
        DeclareLaunchArgument(name, default_value=package_params if default is None else default,
                              description=description)
        for name, default, description in arguments
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=function)])


def generate_launch_description():
    return launch_description(ARGUMENTS, _node)
