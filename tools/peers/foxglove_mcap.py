"""Our output bags through Foxglove's own MCAP libraries (PyPI `mcap` and `mcap-ros2-support`):
what Foxglove needs to open a ROS 2 MCAP without a ROS install — a valid file (CRCs checked),
profile `ros2`, `ros2msg` schemas whose embedded text alone is enough to decode every `cdr`
message. The decoder parses the schema text; it has no ROS message definitions of its own.

  read --bag FILE.mcap
      prints JSON: {"profile", "library", "topics": {topic: {schema, schema_encoding,
      message_encoding, count, stamps, ...}}}; keypoints: their counts; clouds: width, height,
      fields, point_step; pair poses: the reference stamp and the pose.
"""
import argparse
import json
import sys

from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory


def read(args):
    out = {"topics": {}}
    with open(args.bag, "rb") as f:
        reader = make_reader(f, validate_crcs=True, decoder_factories=[DecoderFactory()])
        header = reader.get_header()
        out["profile"], out["library"] = header.profile, header.library
        for schema, channel, message, msg in reader.iter_decoded_messages():
            e = out["topics"].setdefault(channel.topic, {
                "schema": schema.name, "schema_encoding": schema.encoding,
                "message_encoding": channel.message_encoding, "count": 0, "stamps": [],
            })
            e["count"] += 1
            h = getattr(msg, "header", None)
            if h is not None:
                e["stamps"].append([h.stamp.sec, h.stamp.nanosec])
            if schema.name == "sp_dust3r/msg/Keypoints":
                e.setdefault("n", []).append(len(msg.x))
            elif schema.name == "sensor_msgs/msg/PointCloud2":
                e.setdefault("clouds", []).append({
                    "width": msg.width, "height": msg.height, "point_step": msg.point_step,
                    "fields": [[fl.name, fl.offset, fl.datatype, fl.count] for fl in msg.fields],
                    "bytes": len(msg.data),
                })
            elif schema.name == "sp_dust3r/msg/PairPose":
                p = msg.pose
                e.setdefault("poses", []).append({
                    "view2_stamp": [msg.view2_stamp.sec, msg.view2_stamp.nanosec],
                    "position": [p.position.x, p.position.y, p.position.z],
                    "orientation": [p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w],
                })
            elif schema.name == "tf2_msgs/msg/TFMessage":
                e.setdefault("frames", []).extend([[t.header.frame_id, t.child_frame_id] for t in msg.transforms])
                # A TF message has no header of its own: its transforms' stamps are its stamps.
                e["stamps"].extend([[t.header.stamp.sec, t.header.stamp.nanosec] for t in msg.transforms])
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("--bag", required=True)
    args = ap.parse_args()
    {"read": read}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
