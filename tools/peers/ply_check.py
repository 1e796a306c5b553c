"""Reads a PLY file with PyPI plyfile (an independent reader) and compares it with what the points
should be: from the NPZ of the same `sp_dust3r dust3r` run (pts3d1/2, conf1/2) and the two input
PNGs (the 512x512 views, so each pixel is its point's colour), the finite points above the
threshold, view 1 then view 2, in row order. Prints one JSON line."""
import argparse
import json

import numpy as np
from PIL import Image  # Pillow, which evo's matplotlib brings
from plyfile import PlyData


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ply", required=True)
    ap.add_argument("--npz", required=True)
    ap.add_argument("--png", nargs=2, required=True)
    ap.add_argument("--min-confidence", type=float, required=True)
    args = ap.parse_args()

    ply = PlyData.read(args.ply)
    vertex = ply["vertex"]
    fields = [(p.name, p.val_dtype) for p in vertex.properties]
    data = vertex.data

    npz = np.load(args.npz)
    want_xyz, want_rgb, want_conf = [], [], []
    for k, png in zip(("1", "2"), args.png):
        pts = npz["pts3d" + k].reshape(-1, 3)
        conf = npz["conf" + k].reshape(-1)
        rgb = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3)
        keep = np.isfinite(pts).all(axis=1) & (conf > args.min_confidence)
        want_xyz.append(pts[keep])
        want_rgb.append(rgb[keep])
        want_conf.append(conf[keep])
    want_xyz, want_rgb, want_conf = (np.concatenate(a) for a in (want_xyz, want_rgb, want_conf))
    got_xyz = np.stack([data["x"], data["y"], data["z"]], axis=1)
    got_rgb = np.stack([data["red"], data["green"], data["blue"]], axis=1)
    same_count = len(data) == len(want_xyz)
    print(json.dumps({
        "format": "ascii" if ply.text else ("little" if ply.byte_order == "<" else "big"),
        "fields": fields,
        "comments": list(ply.comments),
        "count": int(len(data)),
        "expected": int(len(want_xyz)),
        "of_pixels": int(sum(npz["conf" + k].size for k in ("1", "2"))),
        "xyz_max_diff": float(np.abs(got_xyz - want_xyz).max()) if same_count and len(data) else None,
        "conf_max_diff": float(np.abs(data["confidence"] - want_conf).max()) if same_count and len(data) else None,
        "rgb_mismatches": int((got_rgb != want_rgb).any(axis=1).sum()) if same_count else None,
    }))


if __name__ == "__main__":
    main()
