"""A DDS peer (Cyclone DDS from PyPI) with the wrong message definitions: it publishes samples
under the DDS type names of sensor_msgs/Image and CameraInfo whose bodies are a single uint32,
as a writer built from a mismatched .msg would, then a few good frames; it also subscribes to
the node's /diagnostics and /rosout and then leaves without a goodbye, as a crashed tool does.

  --image PLANE.npy --ns /cam --bad N
      prints JSON: {"bad_sent", "good_sent", "keypoints": [stamps answered], "diagnostics": {key: value}}
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl.types import uint32
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from ros_idl import (
    DiagnosticArray, Header, Image, Keypoints, Log, Time, best_effort_qos, diagnostics_report, msg, reliable_qos)

# The node's types' DDS names with another body.
WrongImage = msg("sensor_msgs", "Image", junk=uint32)
WrongCameraInfo = msg("sensor_msgs", "CameraInfo", junk=uint32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True)
    ap.add_argument("--ns", default="/cam")
    ap.add_argument("--bad", type=int, default=300)
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    plane = np.load(args.image)
    h, w = plane.shape
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    prefix = "rt" + args.ns
    qos = best_effort_qos(5)
    bad_images = DataWriter(dp, Topic(dp, prefix + "/image", WrongImage), qos=qos)
    bad_infos = DataWriter(dp, Topic(dp, prefix + "/camera_info", WrongCameraInfo), qos=qos)
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable_qos(50))
    DataReader(dp, Topic(dp, "rt/rosout", Log), qos=reliable_qos(50))
    keypoints = DataReader(dp, Topic(dp, prefix + "/keypoints", Keypoints), qos=reliable_qos(50))
    start = time.time()
    while (bad_images.get_publication_matched_status().current_count == 0
           or bad_infos.get_publication_matched_status().current_count == 0
           or keypoints.get_subscription_matched_status().current_count == 0):
        if time.time() - start > args.timeout / 2:
            print(json.dumps({"error": "no match with the node"}))
            return 1
        time.sleep(0.05)
    for i in range(args.bad):
        bad_images.write(WrongImage(junk=i))
        bad_infos.write(WrongCameraInfo(junk=i))
        time.sleep(0.01)
    # Good frames on a second writer of the right type (same topic): still served.
    good = DataWriter(dp, Topic(dp, prefix + "/image", Image), qos=qos)
    while good.get_publication_matched_status().current_count == 0 and time.time() - start < args.timeout:
        time.sleep(0.05)
    sent, answered = [], set()
    for i in range(3):
        stamp = Time(sec=300 + i, nanosec=0)
        good.write(Image(Header(stamp, "cam_optical"), h, w, "mono8", 0, w, list(plane.tobytes())))
        sent.append([stamp.sec, 0])
        t0 = time.time()
        while (stamp.sec, 0) not in answered and time.time() - t0 < 10:
            for kp in keypoints.take(N=10):
                answered.add((kp.header.stamp.sec, kp.header.stamp.nanosec))
            time.sleep(0.05)
    # The newest /diagnostics after the last frame.
    diagnostics, t0 = {}, time.time()
    while time.time() - t0 < 3:
        for d in diags.take(N=20):
            diagnostics = diagnostics_report(d)
        time.sleep(0.1)
    print(json.dumps({"bad_sent": args.bad, "good_sent": sent, "keypoints": sorted(list(a) for a in answered),
                      "diagnostics": diagnostics}), flush=True)
    # Leave as a crashed tool does: no goodbye, its readers stay matched until the lease ends.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
