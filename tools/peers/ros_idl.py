"""The ROS 2 message and service types the Cyclone DDS peers speak, declared once, as Cyclone
IDL structs (PyPI cyclonedds) with the DDS type names rmw implementations use
(`pkg::msg::dds_::Name_`). Field order and types follow the .msg/.srv files. Also the QoS the
peers build from (XCDR1 data, as rmw implementations write it).

Importing this module first also keeps Cyclone on loopback (CYCLONEDDS_URI, unless one is
given): the peers run inside a private network namespace, and this is the second guard.
"""
import os
import types
from dataclasses import dataclass


def loopback_uri(internal=""):
    """Cyclone settings that keep it on loopback, with optional `<Internal>` settings."""
    return ("<CycloneDDS><Domain><General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces>"
            "<AllowMulticast>false</AllowMulticast></General><Discovery><Peers><Peer address=\"127.0.0.1\"/></Peers>"
            "<ParticipantIndex>auto</ParticipantIndex><MaxAutoParticipantIndex>50</MaxAutoParticipantIndex>"
            f"</Discovery>{internal}</Domain></CycloneDDS>")


os.environ.setdefault("CYCLONEDDS_URI", loopback_uri())

import cyclonedds.idl.annotations as annotate  # noqa: E402
from cyclonedds.core import Policy, Qos  # noqa: E402
from cyclonedds.idl import IdlStruct  # noqa: E402
from cyclonedds.idl.types import array, float32, float64, int32, int64, sequence, uint8, uint32, uint64  # noqa: E402
from cyclonedds.util import duration  # noqa: E402

XCDR1 = Policy.DataRepresentation(use_cdrv0_representation=True)


def reliable_qos(depth, *more):
    """Reliable, keep last `depth` (and `more` policies), XCDR1."""
    return Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(depth), *more, XCDR1)


def best_effort_qos(depth):
    """Best effort, keep last `depth`, XCDR1 (the sensor-data profile)."""
    return Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(depth), XCDR1)


def _struct(name, typename, fields):
    cls = types.new_class(name, (IdlStruct,), {"typename": typename},
                          lambda ns: ns.update({"__annotations__": dict(fields), "__module__": __name__}))
    return dataclass(annotate.final(cls))


def msg(package, name, /, **fields):
    """The message `package/msg/name` with `fields` in .msg order."""
    return _struct(name, f"{package}::msg::dds_::{name}_", fields)


def service(name, request, response, package="rcl_interfaces"):
    """Request and reply structs of <package>/srv/<name>, framed as rmw_cyclonedds frames
    them: a (client guid, sequence number) header before the fields."""
    header = {"client_guid": uint64, "seq": int64}
    return tuple(_struct(f"{name}_{part}", f"{package}::srv::dds_::{name}_{part}_", {**header, **fields})
                 for part, fields in (("Request", request), ("Response", response)))


Time = msg("builtin_interfaces", "Time", sec=int32, nanosec=uint32)

# The ROS graph (rmw_dds_common, Iron and later: 16-byte gids), as rmw publishes it on ros_discovery_info.
Gid = msg("rmw_dds_common", "Gid", data=array[uint8, 16])
NodeEntitiesInfo = msg("rmw_dds_common", "NodeEntitiesInfo", node_namespace=str, node_name=str,
                       reader_gid_seq=sequence[Gid], writer_gid_seq=sequence[Gid])
ParticipantEntitiesInfo = msg("rmw_dds_common", "ParticipantEntitiesInfo", gid=Gid,
                              node_entities_info_seq=sequence[NodeEntitiesInfo])
Header = msg("std_msgs", "Header", stamp=Time, frame_id=str)
Clock = msg("rosgraph_msgs", "Clock", clock=Time)

Image = msg("sensor_msgs", "Image", header=Header, height=uint32, width=uint32, encoding=str, is_bigendian=uint8,
            step=uint32, data=sequence[uint8])
CompressedImage = msg("sensor_msgs", "CompressedImage", header=Header, format=str, data=sequence[uint8])
RegionOfInterest = msg("sensor_msgs", "RegionOfInterest", x_offset=uint32, y_offset=uint32, height=uint32,
                       width=uint32, do_rectify=bool)
CameraInfo = msg("sensor_msgs", "CameraInfo", header=Header, height=uint32, width=uint32, distortion_model=str,
                 d=sequence[float64], k=array[float64, 9], r=array[float64, 9], p=array[float64, 12],
                 binning_x=uint32, binning_y=uint32, roi=RegionOfInterest)
PointField = msg("sensor_msgs", "PointField", name=str, offset=uint32, datatype=uint8, count=uint32)
PointCloud2 = msg("sensor_msgs", "PointCloud2", header=Header, height=uint32, width=uint32,
                  fields=sequence[PointField], is_bigendian=bool, point_step=uint32, row_step=uint32,
                  data=sequence[uint8], is_dense=bool)

Point = msg("geometry_msgs", "Point", x=float64, y=float64, z=float64)
Vector3 = msg("geometry_msgs", "Vector3", x=float64, y=float64, z=float64)
Quaternion = msg("geometry_msgs", "Quaternion", x=float64, y=float64, z=float64, w=float64)
Pose = msg("geometry_msgs", "Pose", position=Point, orientation=Quaternion)
PoseStamped = msg("geometry_msgs", "PoseStamped", header=Header, pose=Pose)
Transform = msg("geometry_msgs", "Transform", translation=Vector3, rotation=Quaternion)
TransformStamped = msg("geometry_msgs", "TransformStamped", header=Header, child_frame_id=str, transform=Transform)
TFMessage = msg("tf2_msgs", "TFMessage", transforms=sequence[TransformStamped])
Path = msg("nav_msgs", "Path", header=Header, poses=sequence[PoseStamped])
PoseWithCovariance = msg("geometry_msgs", "PoseWithCovariance", pose=Pose, covariance=array[float64, 36])
Twist = msg("geometry_msgs", "Twist", linear=Vector3, angular=Vector3)
TwistWithCovariance = msg("geometry_msgs", "TwistWithCovariance", twist=Twist, covariance=array[float64, 36])
Odometry = msg("nav_msgs", "Odometry", header=Header, child_frame_id=str, pose=PoseWithCovariance,
               twist=TwistWithCovariance)

KeyValue = msg("diagnostic_msgs", "KeyValue", key=str, value=str)
DiagnosticStatus = msg("diagnostic_msgs", "DiagnosticStatus", level=uint8, name=str, message=str, hardware_id=str,
                       values=sequence[KeyValue])
DiagnosticArray = msg("diagnostic_msgs", "DiagnosticArray", header=Header, status=sequence[DiagnosticStatus])

Keypoints = msg("sp_dust3r", "Keypoints", header=Header, height=uint32, width=uint32, x=sequence[float32],
                y=sequence[float32], scores=sequence[float32], descriptor_dim=uint32, descriptors=sequence[float32])
PairPose = msg("sp_dust3r", "PairPose", header=Header, view2_stamp=Time, pose=Pose, focal_reference=float64,
               focal_query=float64, used_known_intrinsics=bool, num_inliers=uint32, mean_confidence=float32)

Log = msg("rcl_interfaces", "Log", stamp=Time, level=uint8, name=str, msg=str, file=str, function=str, line=uint32)
ParameterValue = msg("rcl_interfaces", "ParameterValue", type=uint8, bool_value=bool, integer_value=int64,
                     double_value=float64, string_value=str, byte_array_value=sequence[uint8],
                     bool_array_value=sequence[bool], integer_array_value=sequence[int64],
                     double_array_value=sequence[float64], string_array_value=sequence[str])
Parameter = msg("rcl_interfaces", "Parameter", name=str, value=ParameterValue)
SetParametersResult = msg("rcl_interfaces", "SetParametersResult", successful=bool, reason=str)
FloatingPointRange = msg("rcl_interfaces", "FloatingPointRange", from_value=float64, to_value=float64, step=float64)
IntegerRange = msg("rcl_interfaces", "IntegerRange", from_value=int64, to_value=int64, step=uint64)
ParameterDescriptor = msg("rcl_interfaces", "ParameterDescriptor", name=str, type=uint8, description=str,
                          additional_constraints=str, read_only=bool, dynamic_typing=bool,
                          floating_point_range=sequence[FloatingPointRange, 1],
                          integer_range=sequence[IntegerRange, 1])
ListParametersResult = msg("rcl_interfaces", "ListParametersResult", names=sequence[str], prefixes=sequence[str])

DescribeReq, DescribeResp = service("DescribeParameters", {"names": sequence[str]},
                                    {"descriptors": sequence[ParameterDescriptor]})
GetReq, GetResp = service("GetParameters", {"names": sequence[str]}, {"values": sequence[ParameterValue]})
SetReq, SetResp = service("SetParameters", {"parameters": sequence[Parameter]},
                          {"results": sequence[SetParametersResult]})
ListReq, ListResp = service("ListParameters", {"prefixes": sequence[str], "depth": uint64},
                            {"result": ListParametersResult})
# An empty request carries IDL's one placeholder byte.
TriggerReq, TriggerResp = service("Trigger", {"structure_needs_at_least_one_member": uint8},
                                  {"success": bool, "message": str}, package="std_srvs")


def diagnostics_report(array):
    """One /diagnostics array as the tests read it: every status's values in one dict (the node's
    tasks use distinct keys) and `_status`: task (the name after `<node>: `) -> level, message,
    hardware_id."""
    report, status = {}, {}
    for st in array.status:
        report.update({kv.key: kv.value for kv in st.values})
        status[st.name.split(": ", 1)[-1]] = {"level": st.level, "message": st.message, "hardware_id": st.hardware_id}
    report["_status"] = status
    return report
