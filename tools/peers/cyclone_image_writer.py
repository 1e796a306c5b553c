"""Cyclone DDS camera (PyPI cyclonedds) for examples/dds_large_messages.rs `images`: publishes
sensor_msgs/Image frames of a given size on rt/big/image, best effort keep-last 5 (a camera
driver's SensorDataQoS), as fast as asked or as it can, and prints how many it sent.

  --width W --height H --encoding rgb8|mono8 --rate HZ --duration S
"""
import argparse
import json
import os
import sys
import time

# ros_idl, imported first, sets the loopback-only CYCLONEDDS_URI unless one is given.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ros_idl import Header, Image, Time, best_effort_qos  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--encoding", default="rgb8")
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--wait", type=float, default=3.0, help="seconds for discovery first")
    args = ap.parse_args()
    bpp = {"rgb8": 3, "bgr8": 3, "mono8": 1}[args.encoding]
    dp = DomainParticipant(0)
    writer = DataWriter(dp, Topic(dp, "rt/big/image", Image), qos=best_effort_qos(5))
    time.sleep(args.wait)
    data = bytes(args.width * args.height * bpp)
    start, sent = time.time(), 0
    while time.time() - start < args.duration:
        target = start + sent / args.rate
        if time.time() < target:
            time.sleep(target - time.time())
        writer.write(Image(Header(Time(sec=sent, nanosec=0), "cam"), args.height, args.width, args.encoding, 0, args.width * bpp, data))
        sent += 1
    print(json.dumps({"sent": sent, "seconds": time.time() - start}), flush=True)


if __name__ == "__main__":
    main()
