"""Cyclone DDS camera (PyPI cyclonedds) for examples/dds_large_messages.rs `images` and
tests/node_dds.rs: publishes sensor_msgs/Image frames of a given size, best effort keep-last 5 (a
camera driver's SensorDataQoS), as fast as asked or as it can, and prints how many it sent.

  --width W --height H --encoding rgb8|mono8 --rate HZ --duration S [--topic rt/big/image]
  [--markers N]: N 8x8 frames 0.2 s apart before the frames and N after (one datagram each, so
      they arrive: the reader counts the sequence numbers between its first and last sample)
  [--diagnostics]: then the node's last /diagnostics (3 s) in the report
"""
import argparse
import json
import os
import sys
import time

# ros_idl, imported first, sets the loopback-only CYCLONEDDS_URI unless one is given.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ros_idl import DiagnosticArray, Header, Image, Time, best_effort_qos, diagnostics_report, reliable_qos  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--encoding", default="rgb8")
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--wait", type=float, default=3.0, help="seconds for discovery first")
    ap.add_argument("--topic", default="rt/big/image")
    ap.add_argument("--markers", type=int, default=0)
    ap.add_argument("--diagnostics", action="store_true")
    args = ap.parse_args()
    bpp = {"rgb8": 3, "bgr8": 3, "mono8": 1}[args.encoding]
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    writer = DataWriter(dp, Topic(dp, args.topic, Image), qos=best_effort_qos(5))
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable_qos(50)) if args.diagnostics else None
    time.sleep(args.wait)
    data = bytes(args.width * args.height * bpp)

    def markers(first):
        for i in range(args.markers):
            time.sleep(0.2)
            writer.write(Image(Header(Time(sec=first + i, nanosec=0), "cam"), 8, 8, args.encoding, 0, 8 * bpp, bytes(64 * bpp)))

    markers(1000000)
    start, sent = time.time(), 0
    while time.time() - start < args.duration:
        target = start + sent / args.rate
        if time.time() < target:
            time.sleep(target - time.time())
        writer.write(Image(Header(Time(sec=sent, nanosec=0), "cam"), args.height, args.width, args.encoding, 0, args.width * bpp, data))
        sent += 1
    seconds = time.time() - start
    markers(2000000)
    report = {"sent": sent, "markers": 2 * args.markers, "seconds": seconds}
    if diags is not None:
        # Two diagnostics periods after the last marker, so the counts include it.
        report["diagnostics"] = {}
        t0 = time.time()
        while time.time() - t0 < 3.0:
            for d in diags.take(N=20):
                report["diagnostics"] = diagnostics_report(d)
            time.sleep(0.1)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
