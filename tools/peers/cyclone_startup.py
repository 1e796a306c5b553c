"""Cyclone DDS peer (PyPI cyclonedds) for tests/node_startup.rs: watches a node start while its
weights download. From the start it looks for the node in the ROS graph (as `ros2 node list`),
asks get_parameters as rmw_cyclonedds_cpp frames it (as `ros2 param get`), sends a frame every 0.5 s and records every
/diagnostics status as it changes, and when keypoints come back. Prints one JSON line: seconds
from the peer's start for each first, the timeline, and the last /diagnostics.

Run only inside a private network namespace (the test uses `unshare -n`); CYCLONEDDS_URI is set
to loopback only as a second guard (by ros_idl, imported first).
"""
import argparse
import json
import os
import time

from ros_idl import (
    DiagnosticArray, GetReq, GetResp, Header, Image, Keypoints, ParticipantEntitiesInfo, Time, best_effort_qos,
    diagnostics_report, reliable_qos,
)
import numpy as np
from cyclonedds.builtin import BuiltinDataReader, BuiltinTopicDcpsPublication
from cyclonedds.core import Policy
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from cyclone_ros_graph import Client, ros_graph, value_json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True, help=".npy uint8 (H, W) plane")
    ap.add_argument("--ns", default="/cam")
    ap.add_argument("--node", default="/cam/sp_dust3r")
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    plane = np.load(args.image)
    h, w = plane.shape
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    images = DataWriter(dp, Topic(dp, "rt" + args.ns + "/image", Image), qos=best_effort_qos(5))
    keypoints = DataReader(dp, Topic(dp, "rt" + args.ns + "/keypoints", Keypoints), qos=reliable_qos(50))
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable_qos(50))
    get = Client(dp, args.node, "get_parameters", GetReq, GetResp, reliable_qos(10))
    discovery = DataReader(dp, Topic(dp, "ros_discovery_info", ParticipantEntitiesInfo),
                           qos=reliable_qos(100, Policy.Durability.TransientLocal))
    publications = BuiltinDataReader(dp, BuiltinTopicDcpsPublication)

    start = time.time()
    report = {"in_graph_s": None, "params_s": None, "params": None, "timeline": [], "keypoints_s": []}
    last_status, last, next_frame, i = {}, {}, start, 0
    while time.time() - start < args.seconds:
        now = time.time() - start
        if report["in_graph_s"] is None and args.node in ros_graph(discovery, publications)["nodes"]:
            report["in_graph_s"] = now
        if report["params_s"] is None and get.matched():
            r = get.call(timeout=1.0, names=["superpoint_weights", "stale_timeout"])
            if r is not None:
                report["params_s"] = time.time() - start
                report["params"] = [value_json(v) for v in r.values]
        if time.time() >= next_frame:
            images.write(Image(Header(Time(sec=i, nanosec=0), "cam_optical"), h, w, "mono8", 0, w, plane.tobytes()))
            i += 1
            next_frame += 0.5
        for kp in keypoints.take(N=10):
            report["keypoints_s"].append(time.time() - start)
        for d in diags.take(N=20):
            last = diagnostics_report(d)
            for task, st in last["_status"].items():
                if last_status.get(task) != (st["level"], st["message"]):
                    last_status[task] = (st["level"], st["message"])
                    report["timeline"].append([time.time() - start, task, st["level"], st["message"]])
        time.sleep(0.05)
    report["frames_sent"] = i
    report["diagnostics"] = last
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
