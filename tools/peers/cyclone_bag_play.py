"""What `ros2 bag play --clock` does, with PyPI rosbags + Cyclone DDS, for tests/bag_play.rs: reads
a rosbag2 bag and publishes its sensor_msgs/Image and CameraInfo messages at their recorded pace
on the same topics, with rosgraph_msgs/Clock on /clock from the bag's time (100 Hz, as --clock
does by default). Collects the node's keypoints and /diagnostics, and with --trajectory its
odometry, TF and keyframe path; prints one JSON line.

Run only inside a private network namespace; CYCLONEDDS_URI keeps Cyclone on loopback (set by
ros_idl, imported first, whose message types this uses).
"""
import argparse
import json
import os
import threading
import time
from pathlib import Path

from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

from ros_idl import (
    CameraInfo, Clock, DiagnosticArray, Header, Image, Keypoints, Odometry, Path as PathMsg, RegionOfInterest, TFMessage,
    Time, best_effort_qos, reliable_qos,
)
from cyclonedds.core import Policy


def pose_json(p):
    return {"position": [p.position.x, p.position.y, p.position.z],
            "orientation": [p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bag", required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--trajectory", action="store_true", help="also collect odom, /tf and path")
    args = ap.parse_args()
    ts = get_typestore(Stores.ROS2_JAZZY)
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    best_effort = best_effort_qos(5)
    reliable = reliable_qos(100)
    clock = DataWriter(dp, Topic(dp, "rt/clock", Clock), qos=reliable)
    keypoints = DataReader(dp, Topic(dp, "rt/cam/keypoints", Keypoints), qos=reliable)
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable)
    trajectory = {"odom": [], "tf": [], "path": None}
    if args.trajectory:
        odom = DataReader(dp, Topic(dp, "rt/cam/odom", Odometry), qos=reliable)
        tf = DataReader(dp, Topic(dp, "rt/tf", TFMessage), qos=reliable)
        path = DataReader(dp, Topic(dp, "rt/cam/path", PathMsg), qos=reliable_qos(1, Policy.Durability.TransientLocal))

    def collect_trajectory():
        if not args.trajectory:
            return
        for o in odom.take(N=50):
            trajectory["odom"].append(dict(pose_json(o.pose.pose), stamp=[o.header.stamp.sec, o.header.stamp.nanosec],
                                           frame_id=o.header.frame_id, child=o.child_frame_id))
        for m in tf.take(N=50):
            for t in m.transforms:
                trajectory["tf"].append({"stamp": [t.header.stamp.sec, t.header.stamp.nanosec], "parent": t.header.frame_id,
                                         "child": t.child_frame_id, "translation": [t.transform.translation.x, t.transform.translation.y, t.transform.translation.z]})
        for p in path.take(N=10):
            trajectory["path"] = {"frame_id": p.header.frame_id, "stamps": [[q.header.stamp.sec, q.header.stamp.nanosec] for q in p.poses]}

    with AnyReader([Path(args.bag)], default_typestore=ts) as reader:
        writers = {}
        for c in reader.connections:
            if c.msgtype == "sensor_msgs/msg/Image":
                writers[c.topic] = DataWriter(dp, Topic(dp, "rt" + c.topic, Image), qos=best_effort)
            elif c.msgtype == "sensor_msgs/msg/CameraInfo":
                writers[c.topic] = DataWriter(dp, Topic(dp, "rt" + c.topic, CameraInfo), qos=best_effort)
        start = time.time()
        while not (keypoints.get_subscription_matched_status().current_count and all(w.get_publication_matched_status().current_count for w in writers.values())):
            if time.time() - start > args.timeout / 2:
                print(json.dumps({"error": "no match with the node"}))
                return
            time.sleep(0.1)
        messages = [(c, t, raw) for c, t, raw in reader.messages() if c.topic in writers]
        bag_start = messages[0][1]
        now_bag = [bag_start]
        stop = threading.Event()

        def tick():
            # --clock: the bag's time, advancing with the playback.
            while not stop.is_set():
                t = now_bag[0]
                clock.write(Clock(Time(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000)))
                time.sleep(0.01)
        threading.Thread(target=tick, daemon=True).start()
        sent, got, diag_stamps = [], {}, []
        wall0 = time.time()
        for c, t, raw in messages:
            # Recorded pace: 1 s of bag time per 1 s of wall time.
            delay = (t - bag_start) / 1e9 - (time.time() - wall0)
            if delay > 0:
                time.sleep(delay)
            now_bag[0] = t
            m = reader.deserialize(raw, c.msgtype)
            h = Header(Time(sec=m.header.stamp.sec, nanosec=m.header.stamp.nanosec), m.header.frame_id)
            if c.msgtype == "sensor_msgs/msg/Image":
                writers[c.topic].write(Image(h, m.height, m.width, m.encoding, m.is_bigendian, m.step, list(bytes(m.data))))
                sent.append([m.header.stamp.sec, m.header.stamp.nanosec])
            else:
                writers[c.topic].write(CameraInfo(h, m.height, m.width, m.distortion_model, list(m.d), list(m.k), list(m.r), list(m.p), m.binning_x, m.binning_y,
                                                  RegionOfInterest(m.roi.x_offset, m.roi.y_offset, m.roi.height, m.roi.width, m.roi.do_rectify)))
            for kp in keypoints.take(N=20):
                got[(kp.header.stamp.sec, kp.header.stamp.nanosec)] = len(kp.x)
            for d in diags.take(N=20):
                diag_stamps.append(d.header.stamp.sec + d.header.stamp.nanosec * 1e-9)
            collect_trajectory()
        t0 = time.time()
        while len(got) < len(sent) and time.time() - t0 < 5:
            for kp in keypoints.take(N=20):
                got[(kp.header.stamp.sec, kp.header.stamp.nanosec)] = len(kp.x)
            for d in diags.take(N=20):
                diag_stamps.append(d.header.stamp.sec + d.header.stamp.nanosec * 1e-9)
            time.sleep(0.05)
        # The last pairs may still be joining the chain.
        t0 = time.time()
        while args.trajectory and time.time() - t0 < 3:
            collect_trajectory()
            time.sleep(0.05)
        stop.set()
        print(json.dumps({"sent": sent, "received": sorted([list(k) for k in got]), "diagnostics_stamps": diag_stamps,
                          "bag_start_s": bag_start / 1e9, "bag_end_s": messages[-1][1] / 1e9, "trajectory": trajectory}))


if __name__ == "__main__":
    main()
