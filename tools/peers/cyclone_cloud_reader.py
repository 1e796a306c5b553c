"""Cyclone DDS reader (PyPI cyclonedds) of sensor_msgs/PointCloud2 (or Image) for
examples/dds_large_messages.rs: the publisher stamps each message with its wall-clock publish
time (and a cloud names its size in frame_id); this prints how many arrived and after how long.
Reliable, keep-last 10, default Cyclone socket buffers unless --max-buffer caps them.

  --topic rt/big/pointcloud --duration S --expect N   (N messages in all; stops early when all came)
  --max-buffer BYTES                                  (cap the socket receive buffer)
  --image                                             (sensor_msgs/Image, best effort keep-last 5:
                                                       a camera subscriber's SensorDataQoS)
"""
import argparse
import json
import os
import sys
import time

# ros_idl, imported first, sets the loopback-only CYCLONEDDS_URI unless one is given.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ros_idl import Image, PointCloud2, best_effort_qos, loopback_uri, reliable_qos  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", default="rt/big/pointcloud")
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--expect", type=int, default=0)
    ap.add_argument("--max-buffer", type=int, help="cap the socket receive buffer (212992: Ubuntu's rmem_max)")
    ap.add_argument("--image", action="store_true")
    args = ap.parse_args()
    if args.max_buffer:
        # Read when the participant creates the domain, below.
        os.environ["CYCLONEDDS_URI"] = loopback_uri(
            f'<Internal><SocketReceiveBufferSize min="default" max="{args.max_buffer}B"/></Internal>')
    dp = DomainParticipant(0)
    if args.image:
        reader = DataReader(dp, Topic(dp, args.topic, Image), qos=best_effort_qos(5))
    else:
        reader = DataReader(dp, Topic(dp, args.topic, PointCloud2), qos=reliable_qos(10))
    print("READY", flush=True)
    arrived = []
    start = time.time()
    while time.time() - start < args.duration and (args.expect == 0 or len(arrived) < args.expect):
        for s in reader.take(N=10):
            if not hasattr(s, "header"):
                continue
            now = time.time()
            sent = s.header.stamp.sec + s.header.stamp.nanosec * 1e-9
            size = f"{s.width}x{s.height}" if args.image else s.header.frame_id
            arrived.append({"size": size, "bytes": len(s.data), "latency_s": now - sent})
        time.sleep(0.005)
    print(json.dumps({"arrived": arrived}), flush=True)


if __name__ == "__main__":
    main()
