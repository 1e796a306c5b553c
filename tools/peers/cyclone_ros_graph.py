"""Cyclone DDS peer (PyPI cyclonedds) for tests/node_ros_graph.rs: plays what ROS tools do around
the node. It calls the parameter services the way rmw_cyclonedds frames them (describe, get,
list, set), publishes /clock (rosgraph_msgs/Clock) and camera_info (a bad one, then a good one),
sends frames, subscribes to the debug image only half-way through, and collects keypoints, the
debug image, clouds, PairPose, PoseStamped, /tf, /diagnostics and /rosout; at the end it reads the
ROS graph as `ros2 node list` and `ros2 topic info -v` do (rmw_dds_common's graph cache: the DDS
publications, each mapped to a node through its participant's ros_discovery_info). Prints one
JSON line.

Run only inside a private network namespace (the test uses `unshare -n`); CYCLONEDDS_URI is set
to loopback only as a second guard (by ros_idl, imported first).
"""
import argparse
import json
import os
import threading
import time

from ros_idl import (
    CameraInfo, Clock, DescribeReq, DescribeResp, DiagnosticArray, GetReq, GetResp, Header, Image, Keypoints, ListReq,
    ListResp, Log, PairPose, ParameterValue, Parameter, ParticipantEntitiesInfo, Path, PointCloud2, PoseStamped,
    RegionOfInterest, SetReq, SetResp, TFMessage, Time, TriggerReq, TriggerResp, best_effort_qos, reliable_qos,
    diagnostics_report,
)
import numpy as np
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication
from cyclonedds.core import Policy
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from cyclone_camera import pair_summary


def pvalue(type, **kw):
    base = dict(bool_value=False, integer_value=0, double_value=0.0, string_value="", byte_array_value=[], bool_array_value=[],
                integer_array_value=[], double_array_value=[], string_array_value=[])
    base.update(kw)
    return ParameterValue(type=type, **base)


def value_json(v):
    return {1: lambda: v.bool_value, 2: lambda: v.integer_value, 3: lambda: v.double_value, 4: lambda: v.string_value}.get(v.type, lambda: None)()


class Client:
    def __init__(self, dp, node, name, req_type, resp_type, qos):
        self.w = DataWriter(dp, Topic(dp, f"rq{node}/{name}Request", req_type), qos=qos)
        self.r = DataReader(dp, Topic(dp, f"rr{node}/{name}Reply", resp_type), qos=qos)
        self.req_type, self.seq, self.guid = req_type, 0, 0x1122334455667788

    def matched(self):
        return self.w.get_publication_matched_status().current_count > 0 and self.r.get_subscription_matched_status().current_count > 0

    def call(self, timeout=10.0, **fields):
        self.seq += 1
        self.w.write(self.req_type(client_guid=self.guid, seq=self.seq, **fields))
        t0 = time.time()
        while time.time() - t0 < timeout:
            for s in self.r.take(N=10):
                if s.seq == self.seq and s.client_guid == self.guid:
                    return s
            time.sleep(0.02)
        return None


def ros_graph(discovery, publications):
    """Node names (as `ros2 node list`) and, per DDS topic, its writers' nodes (as
    `ros2 topic info -v`), the way rmw_dds_common's graph cache finds them: a writer belongs to
    the node that lists its gid in the ros_discovery_info of the writer's own participant."""
    participants = {}
    for info in discovery.read(N=100):
        if hasattr(info, "gid"):
            participants[bytes(info.gid.data)] = info.node_entities_info_seq
    nodes = sorted(f"{n.node_namespace.rstrip('/')}/{n.node_name}" for seq in participants.values() for n in seq)
    writers = {}
    qos = {}
    for pub in publications.read(N=1000):
        # The QoS the writer offers, as discovery carries it (`ros2 topic info -v`).
        qos.setdefault(pub.topic_name, []).append(
            [str(pub.qos[policy]) for policy in (Policy.Reliability, Policy.History, Policy.Durability)])
        owner = "_NODE_NAME_UNKNOWN_"
        for n in participants.get(pub.participant_key.bytes, []):
            if any(bytes(g.data) == pub.key.bytes for g in n.writer_gid_seq):
                owner = f"{n.node_namespace.rstrip('/')}/{n.node_name}"
        writers.setdefault(pub.topic_name, []).append(owner)
    return {"nodes": nodes, "writers": writers, "qos": qos}


def camera_info(stamp, w, h, fx):
    k = [fx, 0.0, w / 2, 0.0, fx, h / 2, 0.0, 0.0, 1.0]
    return CameraInfo(Header(stamp, "cam_optical"), h, w, "plumb_bob", [0.0] * 5, k, [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0],
                      [fx, 0, w / 2, 0, 0, fx, h / 2, 0, 0, 0, 1.0, 0], 0, 0, RegionOfInterest(0, 0, 0, 0, False))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True, help=".npy uint8 (H, W) plane")
    ap.add_argument("--ns", default="/cam")
    ap.add_argument("--node", default="/cam/sp_dust3r")
    ap.add_argument("--timeout", type=float, default=90.0)
    args = ap.parse_args()
    plane = np.load(args.image)
    h, w = plane.shape
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    prefix = "rt" + args.ns
    best_effort = best_effort_qos(5)
    reliable = reliable_qos(50)
    services_qos = reliable_qos(10)
    rosout_qos = reliable_qos(1000, Policy.Durability.TransientLocal)

    images = DataWriter(dp, Topic(dp, prefix + "/image", Image), qos=best_effort)
    infos = DataWriter(dp, Topic(dp, prefix + "/camera_info", CameraInfo), qos=best_effort)
    clock = DataWriter(dp, Topic(dp, "rt/clock", Clock), qos=reliable)
    keypoints = DataReader(dp, Topic(dp, prefix + "/keypoints", Keypoints), qos=reliable)
    clouds = DataReader(dp, Topic(dp, prefix + "/pointcloud", PointCloud2), qos=reliable)
    pairs = DataReader(dp, Topic(dp, prefix + "/pair_pose", PairPose), qos=reliable)
    poses = DataReader(dp, Topic(dp, prefix + "/pose", PoseStamped), qos=reliable)
    tf = DataReader(dp, Topic(dp, "rt/tf", TFMessage), qos=reliable)
    # The path and the map are state: transient local, as RViz's Map-style displays ask.
    state_qos = reliable_qos(1, Policy.Durability.TransientLocal)
    paths = DataReader(dp, Topic(dp, prefix + "/path", Path), qos=state_qos)
    maps = DataReader(dp, Topic(dp, prefix + "/cloud_map", PointCloud2), qos=state_qos)
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable)
    rosout = DataReader(dp, Topic(dp, "rt/rosout", Log), qos=rosout_qos)
    describe = Client(dp, args.node, "describe_parameters", DescribeReq, DescribeResp, services_qos)
    get = Client(dp, args.node, "get_parameters", GetReq, GetResp, services_qos)
    setp = Client(dp, args.node, "set_parameters", SetReq, SetResp, services_qos)
    listp = Client(dp, args.node, "list_parameters", ListReq, ListResp, services_qos)
    save_map = Client(dp, args.node, "save_map", TriggerReq, TriggerResp, services_qos)
    reset = Client(dp, args.node, "reset", TriggerReq, TriggerResp, services_qos)
    # The topic is keyless, so a reader's history is shared by every participant's announcements:
    # deep enough to keep each one (rmw's graph cache takes them as they come instead).
    discovery = DataReader(dp, Topic(dp, "ros_discovery_info", ParticipantEntitiesInfo),
                           qos=reliable_qos(100, Policy.Durability.TransientLocal))
    publications = BuiltinDataReader(dp, BuiltinTopicDcpsPublication)
    report = {}

    # Sim time: /clock at 20 Hz from 5000 s on, for the whole run.
    stop = threading.Event()
    sim_start = time.time()

    def tick():
        while not stop.is_set():
            t = 5000.0 + (time.time() - sim_start)
            clock.write(Clock(Time(sec=int(t), nanosec=int((t % 1) * 1e9))))
            time.sleep(0.05)
    threading.Thread(target=tick, daemon=True).start()

    start = time.time()
    while not (images.get_publication_matched_status().current_count and keypoints.get_subscription_matched_status().current_count
               and describe.matched() and get.matched() and setp.matched() and listp.matched() and save_map.matched()
               and reset.matched()):
        if time.time() - start > args.timeout / 3:
            print(json.dumps({"error": "no match with the node"}))
            return
        time.sleep(0.1)

    # Parameters, as `ros2 param describe/get/list/set` would do them.
    d = describe.call(names=["keypoint_threshold", "image_transport", "max_keypoints", "no_such_parameter"])
    report["describe"] = None if d is None else [
        {"name": x.name, "type": x.type, "description": x.description, "constraints": x.additional_constraints, "read_only": x.read_only,
         "float_range": [[r.from_value, r.to_value] for r in x.floating_point_range], "int_range": [[r.from_value, r.to_value] for r in x.integer_range]}
        for x in d.descriptors]
    g = get.call(names=["max_keypoints", "image_transport", "keypoint_threshold"])
    report["get"] = None if g is None else [[v.type, value_json(v)] for v in g.values]
    lst = listp.call(prefixes=[], depth=0)
    report["list"] = None if lst is None else list(lst.result.names)
    s = setp.call(parameters=[Parameter("image_transport", pvalue(4, string_value="compressed")), Parameter("keypoint_threshold", pvalue(3, double_value=2.0)),
                              Parameter("max_keypoints", pvalue(2, integer_value=5)), Parameter("nms_radius", pvalue(4, string_value="four"))])
    report["set"] = None if s is None else [[r.successful, r.reason] for r in s.results]
    g = get.call(names=["max_keypoints"])
    report["get_after_set"] = None if g is None else [value_json(v) for v in g.values]

    # camera_info: one without focal lengths (rejected), then a good one for these frames.
    infos.write(camera_info(Time(sec=199, nanosec=0), w, h, 0.0))
    time.sleep(0.2)
    good_info = camera_info(Time(sec=199, nanosec=1), w, h, 500.0)

    def frame(sec):
        infos.write(good_info)
        time.sleep(0.2)
        stamp = Time(sec=sec, nanosec=0)
        images.write(Image(Header(stamp, "cam_optical"), h, w, "mono8", 0, w, list(plane.tobytes())))
        t0 = time.time()
        while time.time() - t0 < 20:
            for kp in keypoints.take(N=10):
                if (kp.header.stamp.sec, kp.header.stamp.nanosec) == (sec, 0):
                    return len(kp.x)
            time.sleep(0.05)
        return None

    report["kp_counts"] = [frame(200)]
    # Now subscribe to the debug image, as RViz does when its Image display is enabled.
    debug = DataReader(dp, Topic(dp, prefix + "/keypoints/image", Image), qos=reliable)
    t0 = time.time()
    while debug.get_subscription_matched_status().current_count == 0 and time.time() - t0 < 10:
        time.sleep(0.05)
    time.sleep(0.5)
    report["kp_counts"].append(frame(201))
    report["kp_counts"].append(frame(202))
    debug_images = []
    t0 = time.time()
    while len(debug_images) < 2 and time.time() - t0 < 10:
        for im in debug.take(N=10):
            px = np.frombuffer(bytes(im.data), dtype=np.uint8).reshape(im.height, im.width, 3)
            # The frame sent is grey (mono8): the keypoints' rings are the coloured pixels above
            # the caption band (at most the bottom eighth, whose colour scale is left out).
            top = px[: im.height * 7 // 8].astype(np.int16)
            ring = int(np.sum((top[:, :, 0] != top[:, :, 1]) | (top[:, :, 1] != top[:, :, 2])))
            debug_images.append({"stamp": im.header.stamp.sec, "encoding": im.encoding, "size": [im.width, im.height], "ring_pixels": ring})
        time.sleep(0.05)
    report["debug_images"] = debug_images

    # Frames 200, 201, 202 are keyframes (max interval 0.5 s): two pairs.
    got = {"clouds": [], "pairs": [], "poses": [], "tf": [], "paths": [], "maps": []}

    def collect():
        got["clouds"] += [{"stamp": c.header.stamp.sec, "frame_id": c.header.frame_id, "width": c.width,
                           "finite": bool(np.all(np.isfinite(np.frombuffer(bytes(c.data), dtype="<f4").reshape(-1, 5)[:, :3])))} for c in clouds.take(N=10)]
        got["pairs"] += [dict(pair_summary(p), used_known_intrinsics=p.used_known_intrinsics, focal=[p.focal_reference, p.focal_query]) for p in pairs.take(N=10)]
        got["poses"] += [{"stamp": p.header.stamp.sec, "frame_id": p.header.frame_id,
                          "position": [p.pose.position.x, p.pose.position.y, p.pose.position.z]} for p in poses.take(N=10)]
        got["paths"] += [{"stamp": p.header.stamp.sec, "frame_id": p.header.frame_id,
                          "poses": [[q.header.stamp.sec, q.header.frame_id] for q in p.poses]} for p in paths.take(N=10)]
        got["maps"] += [{"stamp": m.header.stamp.sec, "frame_id": m.header.frame_id, "width": m.width,
                         "finite": bool(np.all(np.isfinite(np.frombuffer(bytes(m.data), dtype="<f4").reshape(-1, 5)[:, :3])))}
                        for m in maps.take(N=10)]
        for m in tf.take(N=10):
            got["tf"] += [{"stamp": t.header.stamp.sec, "parent": t.header.frame_id, "child": t.child_frame_id,
                           "translation": [t.transform.translation.x, t.transform.translation.y, t.transform.translation.z]} for t in m.transforms]
    # Clouds always come; a pair's pose right after its cloud, or not at all (no pose found).
    t0 = time.time()
    while (len(got["clouds"]) < 2 or not got["paths"]) and time.time() - t0 < args.timeout / 2:
        collect()
        time.sleep(0.1)
    time.sleep(1.0)
    collect()
    report.update(got)

    # The map saved, then a reset (the path and the map cleared for transient-local readers),
    # nothing left to save, and a new chain from the next keyframes on.
    def trigger(client):
        r = client.call(structure_needs_at_least_one_member=0)
        return None if r is None else [r.success, r.message]
    report["save_map"] = trigger(save_map)
    report["reset"] = trigger(reset)
    time.sleep(0.5)
    got = {k: [] for k in got}
    collect()
    report["after_reset"] = {"paths": got["paths"], "maps": got["maps"]}
    report["save_map_after_reset"] = trigger(save_map)
    report["kp_counts_after_reset"] = [frame(203), frame(204)]
    t0 = time.time()
    got = {k: [] for k in got}
    while not got["paths"] and time.time() - t0 < args.timeout / 4:
        collect()
        time.sleep(0.1)
    report["new_chain"] = {"paths": got["paths"], "maps": got["maps"]}

    diagnostics, stamps = {}, []
    t0 = time.time()
    while time.time() - t0 < 2.5:
        for dg in diags.take(N=20):
            stamps.append(dg.header.stamp.sec + dg.header.stamp.nanosec * 1e-9)
            diagnostics = diagnostics_report(dg)
        time.sleep(0.1)
    report["diagnostics"] = diagnostics
    report["diagnostics_stamps"] = stamps
    report["sim_now"] = 5000.0 + (time.time() - sim_start)
    report["rosout"] = [{"level": l.level, "name": l.name, "msg": l.msg, "file": l.file, "line": l.line} for l in rosout.take(N=1000)]
    report["graph"] = ros_graph(discovery, publications)
    stop.set()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
