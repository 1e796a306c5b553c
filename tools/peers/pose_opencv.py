"""OpenCV peer for `sp_dust3r_bench pose`: upstream PairViewer's recipe for the reference-edge
pose with numpy and OpenCV (PyPI opencv-python-headless): Weiszfeld focal over all pixels, then
solvePnPRansac(SQPNP, 100 iterations, 5 px, 0.99) of view 2's pixels against its points in
camera 1's frame, confidence > 3. Prints one JSON line with the median time.

    python pose_opencv.py --pointmaps IN.npz --repeat 10
"""
import argparse
import json
import statistics
import time

import cv2
import numpy as np


def weiszfeld(pts, pp):
    h, w, _ = pts.shape
    v, u = np.mgrid[0:h, 0:w].astype(np.float32)
    p = np.stack([u - pp[0], v - pp[1]], -1).reshape(-1, 2)
    a = np.nan_to_num(pts[..., :2] / pts[..., 2:3], posinf=0, neginf=0).reshape(-1, 2)
    xy_over_z = a
    dot = (p * xy_over_z).sum(-1)
    dot2 = (xy_over_z * xy_over_z).sum(-1)
    f = dot.mean() / dot2.mean()
    for _ in range(10):
        r = np.linalg.norm(p - f * xy_over_z, axis=-1)
        wgt = 1 / np.maximum(r, 1e-8)
        f = (wgt * dot).mean() / (wgt * dot2).mean()
    return float(f)


def pose(d):
    pts2_in_1 = d["pred2_pts3d_in_other_view"][0]
    own2 = d["pred1_pts3d"][1]
    conf = np.maximum(d["pred2_conf"][0], d["pred1_conf"][1])
    h, w, _ = own2.shape
    pp = (w / 2, h / 2)
    f2 = weiszfeld(own2, pp)
    K = np.float32([[f2, 0, pp[0]], [0, f2, pp[1]], [0, 0, 1]])
    v, u = np.mgrid[0:h, 0:w].astype(np.float32)
    mask = conf > 3
    obj = pts2_in_1[mask].astype(np.float32)
    img = np.stack([u, v], -1)[mask].astype(np.float32)
    ok, rvec, tvec, inl = cv2.solvePnPRansac(obj, img, K, None, iterationsCount=100, reprojectionError=5.0, flags=cv2.SOLVEPNP_SQPNP)
    return ok, rvec, tvec, f2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pointmaps", required=True)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    d = dict(np.load(args.pointmaps))
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        ok, rvec, tvec, f2 = pose(d)
        times.append((time.perf_counter() - t) * 1e3)
    R, _ = cv2.Rodrigues(rvec)
    print(json.dumps({"median_ms": statistics.median(times), "ok": bool(ok), "R": R.tolist(), "t": tvec.ravel().tolist(),
                      "focal2": f2, "opencv": cv2.__version__}))


if __name__ == "__main__":
    main()
