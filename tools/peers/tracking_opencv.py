"""OpenCV peer for `sp_dust3r_bench tracking`: one frame placed against a keyframe the way the
node tracks it, with numpy and OpenCV (PyPI opencv-python-headless): BFMatcher (L2) nearest and
second-nearest neighbours with Lowe's ratio test, kept when mutual and similar enough; the
keyframe keypoints looked up in the keyframe's pointmap at their nearest grid pixel (confident
points only); solvePnPRansac (SQPNP) with the camera's K. Prints one JSON line with the median
time over --repeat runs and what it found.

    python tracking_opencv.py --inputs IN.npz --repeat 50
"""
import argparse
import json
import statistics
import time

import cv2
import numpy as np


def track(d):
    fr, kf = d["frame_desc"], d["keyframe_desc"]
    matcher = cv2.BFMatcher(cv2.NORM_L2)
    knn = matcher.knnMatch(fr, kf, k=2)
    back = matcher.match(kf, fr)
    best_of_kf = {m.queryIdx: m.trainIdx for m in back}
    ratio, max_dist = float(d["ratio"]), float(np.sqrt(2 - 2 * float(d["min_similarity"])))
    pairs = [(m.queryIdx, m.trainIdx) for m, n in (p for p in knn if len(p) == 2)
             if best_of_kf.get(m.trainIdx) == m.queryIdx and m.distance <= max_dist and m.distance <= ratio * n.distance]
    if not pairs:
        return 0, 0, None
    q, t = np.array(pairs).T
    sx, sy, ox, oy = d["mapping"]
    uv = np.rint(d["keyframe_xy"][t] * [sx, sy] + [ox, oy]).astype(int)
    h, w = d["conf"].shape
    inside = (uv[:, 0] >= 0) & (uv[:, 1] >= 0) & (uv[:, 0] < w) & (uv[:, 1] < h)
    q, uv = q[inside], uv[inside]
    pts = d["points"][uv[:, 1], uv[:, 0]]
    ok = (d["conf"][uv[:, 1], uv[:, 0]] > float(d["min_confidence"])) & np.isfinite(pts).all(1) & (pts[:, 2] > 0)
    obj, img = pts[ok].astype(np.float64), d["frame_xy"][q[ok]].astype(np.float64)
    good, rvec, tvec, inliers = cv2.solvePnPRansac(obj, img, d["K"], None, iterationsCount=int(d["iterations"]),
                                                  reprojectionError=float(d["threshold_px"]), confidence=0.999,
                                                  flags=cv2.SOLVEPNP_SQPNP)
    n_in = 0 if inliers is None else len(inliers)
    return len(pairs), n_in, (rvec, tvec) if good else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    d = dict(np.load(args.inputs))
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        matches, inliers, pose = track(d)
        times.append((time.perf_counter() - t) * 1e3)
    out = {"median_ms": statistics.median(times), "matches": matches, "inliers": inliers, "opencv": cv2.__version__,
           "threads": cv2.getNumThreads()}
    if pose is not None:
        R, _ = cv2.Rodrigues(pose[0])
        out["R"], out["t"] = R.tolist(), pose[1].ravel().tolist()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
