"""rosbag2 bags through PyPI rosbags, for tests/replay.rs: an independent writer of input bags and
reader of our output bags.

  write --out DIR --image PLANE.npy --frames N [--compressed JPEG] [--bad K]
      a rosbag2 MCAP bag: /cam/image_raw (mono8 frames of the plane, 1 s apart from t = 100 s;
      or /cam/image_raw/compressed with the JPEG) and /cam/camera_info; with --bad K, frame K
      is truncated (a bad frame in the middle). Prints the stamps written.
  read --bag FILE_OR_DIR
      prints JSON: per topic its type, recorded QoS offers, message count, header stamps and
      frames (a TF message's
      transforms' stamps and parent>child edges), and for keypoints the
      number of keypoints and descriptor width.
"""
import argparse
import json
import sys

import numpy as np
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.highlevel import AnyReader
from rosbags.typesys import Stores, get_typestore

TS = get_typestore(Stores.ROS2_JAZZY)
T = TS.types


def write(args):
    plane = np.load(args.image)
    h, w = plane.shape
    Image, Header, Time = T["sensor_msgs/msg/Image"], T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"]
    CameraInfo, ROI, Compressed = T["sensor_msgs/msg/CameraInfo"], T["sensor_msgs/msg/RegionOfInterest"], T["sensor_msgs/msg/CompressedImage"]
    stamps = []
    with Writer(args.out, version=8, storage_plugin=StoragePlugin.MCAP) as bag:
        topic = "/cam/image_raw/compressed" if args.compressed else "/cam/image_raw"
        msgtype = Compressed.__msgtype__ if args.compressed else Image.__msgtype__
        img_conn = bag.add_connection(topic, msgtype, typestore=TS)
        info_conn = bag.add_connection("/cam/camera_info", CameraInfo.__msgtype__, typestore=TS)
        other = bag.add_connection("/imu_like", T["std_msgs/msg/String"].__msgtype__, typestore=TS)
        jpeg = open(args.compressed, "rb").read() if args.compressed else None
        for i in range(args.frames):
            sec = 100 + i
            t_ns = sec * 1_000_000_000
            header = Header(stamp=Time(sec=sec, nanosec=0), frame_id="cam_optical")
            k = np.array([500.0, 0, w / 2, 0, 500.0, h / 2, 0, 0, 1])
            info = CameraInfo(header=header, height=h, width=w, distortion_model="plumb_bob", d=np.zeros(5), k=k, r=np.eye(3).ravel(),
                              p=np.array([500.0, 0, w / 2, 0, 0, 500.0, h / 2, 0, 0, 0, 1, 0]), binning_x=0, binning_y=0,
                              roi=ROI(x_offset=0, y_offset=0, height=0, width=0, do_rectify=False))
            bag.write(info_conn, t_ns, TS.serialize_cdr(info, CameraInfo.__msgtype__))
            bag.write(other, t_ns, TS.serialize_cdr(T["std_msgs/msg/String"](data="not a camera"), "std_msgs/msg/String"))
            data = plane.tobytes()
            if args.bad is not None and i == args.bad:
                data = data[: len(data) // 3]
            if args.compressed:
                msg = Compressed(header=header, format="jpeg", data=np.frombuffer(jpeg, dtype=np.uint8))
            else:
                msg = Image(header=header, height=h, width=w, encoding="mono8", is_bigendian=0, step=w, data=np.frombuffer(data, dtype=np.uint8))
            bag.write(img_conn, t_ns + 1000, TS.serialize_cdr(msg, msgtype))
            stamps.append([sec, 0])
    print(json.dumps({"stamps": stamps}))


def offered(conn):
    """The connection's recorded offers as rosbags parses them: [history, depth, reliability,
    durability] by name, one per offer."""
    profiles = getattr(conn.ext, "offered_qos_profiles", None) or []
    return [[q.history.name, q.depth, q.reliability.name, q.durability.name] for q in profiles]


def read(args):
    from pathlib import Path
    out = {}
    with AnyReader([Path(args.bag)], default_typestore=TS) as reader:
        for conn in reader.connections:
            out[conn.topic] = {"type": conn.msgtype, "count": 0, "stamps": [], "frames": [], "qos": offered(conn)}
        for conn, t, raw in reader.messages():
            entry = out[conn.topic]
            entry["count"] += 1
            msg = reader.deserialize(raw, conn.msgtype)
            header = getattr(msg, "header", None)
            if header is not None:
                entry["stamps"].append([header.stamp.sec, header.stamp.nanosec])
                if header.frame_id not in entry["frames"]:
                    entry["frames"].append(header.frame_id)
            if conn.msgtype == "tf2_msgs/msg/TFMessage":
                for tf in msg.transforms:
                    entry["stamps"].append([tf.header.stamp.sec, tf.header.stamp.nanosec])
                    edge = f"{tf.header.frame_id}>{tf.child_frame_id}"
                    if edge not in entry["frames"]:
                        entry["frames"].append(edge)
            if conn.msgtype == "sp_dust3r/msg/Keypoints":
                entry.setdefault("n", []).append(len(msg.x))
                entry["dim"] = int(msg.descriptor_dim)
            if conn.msgtype == "sensor_msgs/msg/PointCloud2":
                entry.setdefault("points", []).append(int(msg.width))
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--out", required=True)
    w.add_argument("--image", required=True)
    w.add_argument("--frames", type=int, default=4)
    w.add_argument("--compressed")
    w.add_argument("--bad", type=int)
    r = sub.add_parser("read")
    r.add_argument("--bag", required=True)
    args = ap.parse_args()
    {"write": write, "read": read}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
