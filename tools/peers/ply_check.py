"""Reads PLY files with PyPI plyfile (an independent reader) and compares them with what they
should hold. Prints one JSON line.

  pair --ply F --npz N --png A B --min-confidence C
      the PLY of `sp_dust3r dust3r`: from the NPZ of the same run (pts3d1/2, conf1/2) and the two
      input PNGs (512x512 views, so each pixel is its point's colour), the finite points above
      the threshold, view 1 then view 2, in row order.
  bag --bag OUT --dir D --cloud-topic T --map-topic M
      the PLYs of `replay --export-ply D`: each cloud on T of the output bag (read by rosbags, its
      points by its PointField layout) as pair_<sec>.<nanosec>.ply, the last one on M as map.ply.
"""
import argparse
import json
import os

import numpy as np
from PIL import Image  # Pillow, which evo's matplotlib brings
from plyfile import PlyData


def read_ply(path):
    ply = PlyData.read(path)
    v = ply["vertex"]
    d = v.data
    return {
        "format": "ascii" if ply.text else ("little" if ply.byte_order == "<" else "big"),
        "fields": [(p.name, p.val_dtype) for p in v.properties],
        "comments": list(ply.comments),
        "xyz": np.stack([d["x"], d["y"], d["z"]], axis=1),
        "rgb": np.stack([d["red"], d["green"], d["blue"]], axis=1),
        "conf": np.asarray(d["confidence"]),
    }


def compare(got, xyz, rgb, conf):
    same = len(got["xyz"]) == len(xyz)
    return {
        "format": got["format"], "fields": got["fields"], "comments": got["comments"],
        "count": int(len(got["xyz"])), "expected": int(len(xyz)),
        "xyz_max_diff": float(np.abs(got["xyz"] - xyz).max()) if same and len(xyz) else None,
        "conf_max_diff": float(np.abs(got["conf"] - conf).max()) if same and len(xyz) else None,
        "rgb_mismatches": int((got["rgb"] != rgb).any(axis=1).sum()) if same else None,
    }


def pair(args):
    npz = np.load(args.npz)
    xyz, rgb, conf = [], [], []
    for k, png in zip(("1", "2"), args.png):
        pts = npz["pts3d" + k].reshape(-1, 3)
        c = npz["conf" + k].reshape(-1)
        colours = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
        keep = np.isfinite(pts).all(axis=1) & (c > args.min_confidence)
        xyz.append(pts[keep])
        rgb.append(colours[keep])
        conf.append(c[keep])
    report = compare(read_ply(args.ply), *(np.concatenate(a) for a in (xyz, rgb, conf)))
    report["of_pixels"] = int(sum(npz["conf" + k].size for k in ("1", "2")))
    print(json.dumps(report))


def cloud_arrays(msg):
    """x, y, z, rgb and confidence of a PointCloud2 from its fields (float32 each here)."""
    names = {f.name: f.offset for f in msg.fields}
    step = msg.point_step
    raw = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(-1, step)
    order = ">" if msg.is_bigendian else "<"
    col = lambda name, t: raw[:, names[name]:names[name] + 4].copy().view(order + t).reshape(-1)
    xyz = np.stack([col("x", "f4"), col("y", "f4"), col("z", "f4")], axis=1)
    packed = col("rgb", "u4")
    rgb = np.stack([(packed >> 16) & 255, (packed >> 8) & 255, packed & 255], axis=1).astype(np.uint8)
    return xyz, rgb, col("confidence", "f4")


def bag(args):
    from pathlib import Path
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_JAZZY)
    pairs, last_map = [], None
    with AnyReader([Path(args.bag)], default_typestore=store) as reader:
        conns = [c for c in reader.connections if c.topic in (args.cloud_topic, args.map_topic)]
        for conn, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic == args.map_topic:
                last_map = msg
                continue
            s = msg.header.stamp
            path = os.path.join(args.dir, f"pair_{s.sec}.{s.nanosec:09d}.ply")
            entry = compare(read_ply(path), *cloud_arrays(msg)) if os.path.exists(path) else {"missing": True}
            entry["file"] = os.path.basename(path)
            pairs.append(entry)
    out = {"pairs": pairs, "files": sorted(os.listdir(args.dir))}
    if last_map is not None:
        path = os.path.join(args.dir, "map.ply")
        out["map"] = compare(read_ply(path), *cloud_arrays(last_map)) if os.path.exists(path) else {"missing": True}
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pair")
    p.add_argument("--ply", required=True)
    p.add_argument("--npz", required=True)
    p.add_argument("--png", nargs=2, required=True)
    p.add_argument("--min-confidence", type=float, required=True)
    b = sub.add_parser("bag")
    b.add_argument("--bag", required=True)
    b.add_argument("--dir", required=True)
    b.add_argument("--cloud-topic", required=True)
    b.add_argument("--map-topic", required=True)
    args = ap.parse_args()
    {"pair": pair, "bag": bag}[args.cmd](args)


if __name__ == "__main__":
    main()
