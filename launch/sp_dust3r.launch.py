"""Starts the sp_dust3r node for one camera.

    ros2 launch sp_dust3r sp_dust3r.launch.py camera_namespace:=/camera \
        superpoint_weights:=/path/superpoint dust3r_weights:=/path/dust3r
"""
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    arg = LaunchConfiguration
    return LaunchDescription([
        DeclareLaunchArgument("camera_namespace", default_value="/camera", description="Namespace of the camera's topics (image, camera_info)"),
        DeclareLaunchArgument("backend", default_value="cpu", description="cpu or tt-server, for both models"),
        DeclareLaunchArgument("superpoint_weights", default_value="", description="SuperPoint weights folder ('' = env, HF cache, download)"),
        DeclareLaunchArgument("dust3r_weights", default_value="", description="DUSt3R weights folder ('' = env, HF cache, download)"),
        DeclareLaunchArgument("params_file", default_value=PathJoinSubstitution([FindPackageShare("sp_dust3r"), "config", "params.yaml"]),
                              description="Parameter file"),
        DeclareLaunchArgument("use_sim_time", default_value="false", description="Use /clock (ros2 bag play --clock)"),
        Node(
            package="sp_dust3r",
            executable="sp_dust3r",
            name="sp_dust3r",
            namespace=arg("camera_namespace"),
            output="screen",
            parameters=[
                arg("params_file"),
                {
                    "superpoint_backend": ParameterValue(arg("backend"), value_type=str),
                    "dust3r_backend": ParameterValue(arg("backend"), value_type=str),
                    "superpoint_weights": ParameterValue(arg("superpoint_weights"), value_type=str),
                    "dust3r_weights": ParameterValue(arg("dust3r_weights"), value_type=str),
                    "use_sim_time": ParameterValue(arg("use_sim_time"), value_type=bool),
                },
            ],
        ),
    ])
