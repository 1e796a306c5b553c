"""What `ros2 bag play --clock` does, with PyPI rosbags + Cyclone DDS, for tests/bag_play.rs: reads
a rosbag2 bag and publishes its sensor_msgs/Image and CameraInfo messages at their recorded pace
on the same topics, with rosgraph_msgs/Clock on /clock from the bag's time (100 Hz, as --clock
does by default). Collects the node's keypoints and /diagnostics, and with --trajectory its
odometry, TF and keyframe path; prints one JSON line.

With --lockstep, the next frame goes out only once the node is done with the last one: its
keypoints arrived, and a /diagnostics message from after them counts a finished pair for every
keyframe but the first (the node then drops nothing, as a replay does not); every output message
is recorded (`outputs`: per topic, stamps, frames, poses and sizes) for a message-by-message
comparison with the replay of the same bag.

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
    CameraInfo, Clock, DiagnosticArray, Header, Image, Keypoints, Odometry, PairPose, Path as PathMsg, PointCloud2,
    PoseStamped, RegionOfInterest, TFMessage, Time, best_effort_qos, diagnostics_report, reliable_qos,
)
from cyclonedds.core import Policy


def pose_json(p):
    return {"position": [p.position.x, p.position.y, p.position.z],
            "orientation": [p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w]}


def stamp(h):
    return [h.stamp.sec, h.stamp.nanosec]


def quat(q):
    return [q.x, q.y, q.z, q.w]


class Recorder:
    """Every output of the node under /cam, as the comparison reads them, and the node's
    counters from /diagnostics."""

    def __init__(self, dp):
        reliable = reliable_qos(100)
        kinds = {"keypoints": Keypoints, "pointcloud": PointCloud2, "pair_pose": PairPose, "pose": PoseStamped,
                 "odom": Odometry, "path": PathMsg, "cloud_map": PointCloud2}
        self.readers = {k: DataReader(dp, Topic(dp, f"rt/cam/{k}", t), qos=reliable) for k, t in kinds.items()}
        self.readers["tf"] = DataReader(dp, Topic(dp, "rt/tf", TFMessage), qos=reliable)
        self.diagnostics = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable)
        self.outputs = {k: [] for k in self.readers}
        self.keypoints_at = {}

    def record(self, kind, m):
        if kind == "keypoints":
            return [stamp(m.header), m.header.frame_id, len(m.x)]
        if kind in ("pointcloud", "cloud_map"):
            return [stamp(m.header), m.header.frame_id, m.width * m.height]
        if kind == "pair_pose":
            return [stamp(m.header), m.header.frame_id, [m.view2_stamp.sec, m.view2_stamp.nanosec],
                    [m.pose.position.x, m.pose.position.y, m.pose.position.z] + quat(m.pose.orientation)]
        if kind == "pose":
            p = m.pose
            return [stamp(m.header), m.header.frame_id, [p.position.x, p.position.y, p.position.z] + quat(p.orientation)]
        if kind == "odom":
            p = m.pose.pose
            return [stamp(m.header), m.header.frame_id, m.child_frame_id,
                    [p.position.x, p.position.y, p.position.z] + quat(p.orientation)]
        if kind == "path":
            return [stamp(m.header), m.header.frame_id,
                    [[stamp(q.header)] + [[q.pose.position.x, q.pose.position.y, q.pose.position.z] + quat(q.pose.orientation)]
                     for q in m.poses]]
        t = m.transforms[0]
        v = t.transform.translation
        return [stamp(t.header), t.header.frame_id, t.child_frame_id, [v.x, v.y, v.z] + quat(t.transform.rotation)]

    def take(self):
        for kind, r in self.readers.items():
            for m in r.take(N=50):
                self.outputs[kind].append(self.record(kind, m))
                if kind == "keypoints":
                    self.keypoints_at[tuple(self.outputs[kind][-1][0])] = time.time()

    def wait_done(self, frame, timeout):
        """Until the node answered `frame` and has no pair left to finish."""
        t0 = time.time()
        while time.time() - t0 < timeout:
            self.take()
            got = self.keypoints_at.get(frame)
            for d in self.diagnostics.take(N=20):
                r = diagnostics_report(d)
                keyframes = int(r.get("keyframes", "0"))
                pairs = sum(int(r.get(k, "0")) for k in ("pairs_processed", "errors_dust3r", "dust3r_paused"))
                if got is not None and time.time() - got > 0.3 and pairs >= keyframes - 1:
                    self.take()
                    return True
            time.sleep(0.02)
        return False

    def drain(self, seconds):
        t0 = time.time()
        while time.time() - t0 < seconds:
            self.take()
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bag", required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--trajectory", action="store_true", help="also collect odom, /tf and path")
    ap.add_argument("--lockstep", action="store_true", help="one frame at a time; record every output")
    ap.add_argument("--depth-topic", help="an Image topic played as depth (not a frame the node answers)")
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

    recorder = Recorder(dp) if args.lockstep else None

    def collect_trajectory():
        if not args.trajectory:
            return
        for o in odom.take(N=50):
            trajectory["odom"].append(dict(pose_json(o.pose.pose), stamp=[o.header.stamp.sec, o.header.stamp.nanosec],
                                           frame_id=o.header.frame_id, child=o.child_frame_id))
        for m in tf.take(N=50):
            for t in m.transforms:
                trajectory["tf"].append({"stamp": [t.header.stamp.sec, t.header.stamp.nanosec], "parent": t.header.frame_id,
                                         "child": t.child_frame_id, "translation": [t.transform.translation.x, t.transform.translation.y, t.transform.translation.z],
                                         "rotation": quat(t.transform.rotation)})
        for p in path.take(N=10):
            trajectory["path"] = {"frame_id": p.header.frame_id, "stamps": [[q.header.stamp.sec, q.header.stamp.nanosec] for q in p.poses],
                                  "poses": [pose_json(q.pose) for q in p.poses]}

    with AnyReader([Path(args.bag)], default_typestore=ts) as reader:
        writers = {}
        for c in reader.connections:
            if c.msgtype == "sensor_msgs/msg/Image":
                writers[c.topic] = DataWriter(dp, Topic(dp, "rt" + c.topic, Image), qos=best_effort)
            elif c.msgtype == "sensor_msgs/msg/CameraInfo":
                writers[c.topic] = DataWriter(dp, Topic(dp, "rt" + c.topic, CameraInfo), qos=best_effort)
        # Every message made and serialized before the playback: Python takes about as long to
        # serialize one 640x480 frame as the camera takes between two, so serialized on the way
        # the bag would play late.
        prepared = [prepare(writers[c.topic], c, t, reader.deserialize(raw, c.msgtype))
                    for c, t, raw in reader.messages() if c.topic in writers]
        start = time.time()
        while not (keypoints.get_subscription_matched_status().current_count and all(w.get_publication_matched_status().current_count for w in writers.values())):
            if time.time() - start > args.timeout / 2:
                print(json.dumps({"error": "no match with the node"}))
                return
            time.sleep(0.1)
        bag_start = prepared[0][1]
        now_bag = [bag_start]
        stop = threading.Event()

        def tick():
            # --clock: the bag's time, advancing with the playback.
            while not stop.is_set():
                t = now_bag[0]
                clock.write(Clock(Time(sec=t // 1_000_000_000, nanosec=t % 1_000_000_000)))
                time.sleep(0.01)
        threading.Thread(target=tick, daemon=True).start()
        sent, got, diag_stamps, last_diagnostics = [], {}, [], {}
        wall0 = time.time()
        for c, t, stamp, sample in prepared:
            # Recorded pace: 1 s of bag time per 1 s of wall time.
            delay = (t - bag_start) / 1e9 - (time.time() - wall0)
            if delay > 0 and not args.lockstep:
                time.sleep(delay)
            now_bag[0] = t
            writers[c.topic].write(sample)
            if c.msgtype == "sensor_msgs/msg/Image" and c.topic != args.depth_topic:
                sent.append(stamp)
                if recorder and not recorder.wait_done(tuple(sent[-1]), args.timeout / 4):
                    print(json.dumps({"error": f"the node did not finish frame {sent[-1]}", "outputs": recorder.outputs}))
                    return
            for kp in keypoints.take(N=20):
                got[(kp.header.stamp.sec, kp.header.stamp.nanosec)] = len(kp.x)
            for d in diags.take(N=20):
                diag_stamps.append(d.header.stamp.sec + d.header.stamp.nanosec * 1e-9)
                last_diagnostics = diagnostics_report(d)
            collect_trajectory()
        played_s = time.time() - wall0
        t0 = time.time()
        while len(got) < len(sent) and time.time() - t0 < 5:
            for kp in keypoints.take(N=20):
                got[(kp.header.stamp.sec, kp.header.stamp.nanosec)] = len(kp.x)
            for d in diags.take(N=20):
                diag_stamps.append(d.header.stamp.sec + d.header.stamp.nanosec * 1e-9)
                last_diagnostics = diagnostics_report(d)
            time.sleep(0.05)
        # The last pairs may still be joining the chain.
        t0 = time.time()
        while args.trajectory and time.time() - t0 < 3:
            collect_trajectory()
            time.sleep(0.05)
        stop.set()
        if recorder:
            recorder.drain(1.0)
            trajectory["outputs"] = recorder.outputs
        print(json.dumps({"sent": sent, "received": sorted([list(k) for k in got]), "diagnostics_stamps": diag_stamps,
                          "diagnostics": last_diagnostics,
                          "bag_start_s": bag_start / 1e9, "bag_end_s": prepared[-1][1] / 1e9, "played_s": played_s,
                          "trajectory": trajectory}))


def prepare(writer, c, t, m):
    """A bag message as `writer` sends it, serialized now: (connection, bag time, header stamp,
    sample whose serialize() returns those bytes)."""
    h = Header(Time(sec=m.header.stamp.sec, nanosec=m.header.stamp.nanosec), m.header.frame_id)
    if c.msgtype == "sensor_msgs/msg/Image":
        sample = Image(h, m.height, m.width, m.encoding, m.is_bigendian, m.step, bytes(m.data))
    else:
        sample = CameraInfo(h, m.height, m.width, m.distortion_model, list(m.d), list(m.k), list(m.r), list(m.p),
                            m.binning_x, m.binning_y,
                            RegionOfInterest(m.roi.x_offset, m.roi.y_offset, m.roi.height, m.roi.width, m.roi.do_rectify))
    data = sample.serialize(use_version_2=getattr(writer, "_use_version_2", None))
    sample.serialize = lambda use_version_2=None, _data=data: _data
    return c, t, [m.header.stamp.sec, m.header.stamp.nanosec], sample


if __name__ == "__main__":
    main()
