"""Cyclone DDS writer (PyPI cyclonedds: the C library) of large sensor_msgs/PointCloud2 samples:
the reference the node's DDS stack is measured against in examples/dds_large_messages.rs. Same
QoS as the node's outputs (reliable, keep last 10), same samples as the example writes (stamp =
send time, frame_id = the size in MB), on rt/big/pointcloud.

    python cyclone_cloud_writer.py --sizes 0.27,1.06,2.6 --count 20 --interval 0.5

Run only inside a private network namespace; ros_idl, imported first, keeps Cyclone on loopback.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ros_idl import Header, PointCloud2, Time, reliable_qos  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topic", default="rt/big/pointcloud")
    ap.add_argument("--sizes", required=True, help="comma-separated sizes in MB, as the example prints them")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args()
    dp = DomainParticipant(0)
    writer = DataWriter(dp, Topic(dp, args.topic, PointCloud2), qos=reliable_qos(10))
    start = time.time()
    while not writer.get_matched_subscriptions() and time.time() - start < 20:
        time.sleep(0.1)
    time.sleep(2.0)
    for size in args.sizes.split(","):
        points = int(float(size) * 1e6 / 20.0)
        for _ in range(args.count):
            now = time.time()
            stamp = Time(sec=int(now), nanosec=int((now - int(now)) * 1e9))
            writer.write(PointCloud2(header=Header(stamp=stamp, frame_id=size), height=1, width=points, fields=[],
                                     is_bigendian=False, point_step=20, row_step=20 * points,
                                     data=bytes(points * 20), is_dense=True))
            time.sleep(args.interval)
    # Reliable delivery of what is still in the history before the participant goes.
    time.sleep(5.0)


if __name__ == "__main__":
    main()
