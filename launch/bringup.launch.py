"""Brings up one camera: its driver (when its package is installed), the sp_dust3r node and,
with rviz:=true, RViz on the node's outputs.

    ros2 launch sp_dust3r bringup.launch.py camera:=realsense2_camera rviz:=true

Takes every argument of sp_dust3r.launch.py (the node is started with its node_settings) and two
of its own: driver (true: start the camera preset's driver with its defaults, in
camera_namespace when one is given; when its package is not installed, a message names the apt
package and the node starts alone) and rviz (true: RViz on the package's trajectory.rviz with its
topics moved to this launch's; the node then publishes TF, which places the odometry in map,
unless publish_tf is given).

The plan (bringup_plan, rviz_config) is plain Python that imports nothing from launch, so it
can be checked without ROS (tests/launch_files.rs).
"""

import importlib.util
import os

# The node's launch file, beside this one: its arguments, presets and node_settings.
_spec = importlib.util.spec_from_file_location(
    "sp_dust3r_launch", os.path.join(os.path.dirname(os.path.abspath(__file__)), "sp_dust3r.launch.py"))
NODE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(NODE)

# How each preset's driver starts with its defaults (the topics NODE.PRESETS expects).
DRIVERS = {
    "realsense2_camera": {"package": "realsense2_camera", "launch": "rs_launch.py",
                          "arguments": {"align_depth.enable": "true"}},
    "usb_cam": {"package": "usb_cam", "executable": "usb_cam_node_exe"},
    "v4l2_camera": {"package": "v4l2_camera", "executable": "v4l2_camera_node"},
}

ARGUMENTS = NODE.ARGUMENTS + [
    ("driver", "true", "true: start the camera preset's driver when its package is installed"),
    ("rviz", "false", "true: RViz on the node's map, keyframes, odometry, last pair, TF and images"),
]


def in_namespace(driver, namespace, preset):
    """The driver started so that it publishes under `namespace` (the node's camera_namespace),
    when that is not the preset's own: rs_launch.py's topics are
    /<camera_namespace>/<camera_name>/..., so the last name goes to camera_name and the rest to
    camera_namespace; a node driver is started in the namespace."""
    namespace = "/" + namespace.strip("/")
    if namespace == "/" + NODE.PRESETS[preset]["camera_namespace"].strip("/"):
        return driver
    driver = dict(driver)
    if "launch" in driver:
        parent, _, name = namespace.rpartition("/")
        driver["arguments"] = dict(driver["arguments"], camera_namespace=parent.strip("/"), camera_name=name)
    else:
        driver["namespace"] = namespace
    return driver


def bringup_plan(config, installed):
    """What to start: the driver (or None, with a message when it is missing), the node's
    launch configuration, and whether RViz runs. `installed`: the ROS packages found."""
    preset = NODE.preset_of(config)
    driver = DRIVERS.get(preset) if NODE.as_bool("driver", config.get("driver") or "true") else None
    message = None
    if driver and driver["package"] not in installed:
        apt = "ros-$ROS_DISTRO-" + driver["package"].replace("_", "-")
        message = (f"camera:={preset}: package {driver['package']} is not installed (sudo apt install {apt}); "
                   "starting sp_dust3r without a driver")
        driver = None
    if driver:
        driver = in_namespace(driver, NODE.topic_settings(config)["camera_namespace"], preset)
    rviz = NODE.as_bool("rviz", config.get("rviz") or "false")
    node_config = dict(config)
    if rviz and not config.get("publish_tf"):
        node_config["publish_tf"] = "true"
    return {"driver": driver, "message": message, "node": node_config, "rviz": rviz}


def rviz_config(template, settings):
    """trajectory.rviz (written for the sample's /cam topics) with its topics moved to the node
    of `settings` (node_settings' result): the camera image it subscribes, its outputs."""
    image = dict(settings["remappings"])["image"]
    namespace = settings["namespace"]
    text = template.replace("Value: /cam/image_raw\n", f"Value: {image}\n")
    return text.replace("Value: /cam/", "Value: " + namespace.rstrip("/") + "/")


def _bringup(context):
    # Imported here so that the module loads without ROS (see the docstring).
    import tempfile

    from ament_index_python.packages import get_package_share_directory, get_packages_with_prefixes
    from launch.actions import IncludeLaunchDescription, LogInfo
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    from launch_ros.actions import Node

    config = {name: context.launch_configurations.get(name, "") for name, _, _ in ARGUMENTS}
    plan = bringup_plan(config, set(get_packages_with_prefixes()))
    actions = [LogInfo(msg=plan["message"])] if plan["message"] else []
    driver = plan["driver"]
    if driver and "launch" in driver:
        source = os.path.join(get_package_share_directory(driver["package"]), "launch", driver["launch"])
        actions.append(IncludeLaunchDescription(PythonLaunchDescriptionSource(source),
                                                launch_arguments=driver["arguments"].items()))
    elif driver:
        actions.append(Node(package=driver["package"], executable=driver["executable"],
                            namespace=driver.get("namespace"), output="screen"))
    settings = NODE.node_settings(plan["node"])
    actions.append(Node(package="sp_dust3r", executable="sp_dust3r", output="screen", **settings))
    if plan["rviz"]:
        share = get_package_share_directory("sp_dust3r")
        with open(os.path.join(share, "config", "trajectory.rviz")) as f:
            text = rviz_config(f.read(), settings)
        with tempfile.NamedTemporaryFile("w", suffix=".rviz", delete=False) as out:
            out.write(text)
        actions.append(Node(package="rviz2", executable="rviz2", arguments=["-d", out.name], output="screen"))
    return actions


def generate_launch_description():
    return NODE.launch_description(ARGUMENTS, _bringup)
