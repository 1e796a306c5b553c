"""Baseline peer for `sp_dust3r_bench vo`: a classic sparse RGB-D odometry with OpenCV (PyPI
opencv-python-headless), frame to frame. Each frame's ORB features (1000) are matched to the last
tracked frame's (brute force, Hamming, cross-checked); the last frame's keypoints are lifted to
3-D from its registered depth (rays through the lens: distortion undone), the frame's keypoints
undistorted; solvePnPRansac (SQPnP, 3 px, 200 iterations) then solvePnPRefineLM on the inliers
give the motion, chained. A frame with fewer than 15 inliers is lost; the next is matched to the
last tracked one. Prints one JSON line: the poses (TUM order: t tx ty tz qx qy qz qw, the first
frame at the origin), the lost frames' stamps and the median time per frame.

    python vo_orb_opencv.py --tum DIR --k fx fy cx cy --dist k1 k2 p1 p2 k3 --first 0 --frames 198

--stamps FILE keeps only the frames whose colour stamp is on one of FILE's lines (seconds), as a
live node took them. --features DIR replaces ORB by the keypoints and descriptors in DIR/<colour
image's name>.npz (`keypoints` n x 2, `descriptors` n x d, float32: what `sp_dust3r superpoint`
writes), matched by L2 distance, cross-checked: the same odometry on other features.
"""
import argparse
import json
import os
import statistics
import time

import cv2
import numpy as np

MIN_INLIERS = 15


def frames_of(tum, first, count, every=1, stamps=None):
    rows = [l.split() for l in open(os.path.join(tum, "associations.txt")) if l.strip() and not l.startswith("#")]
    frames = [(float(r[0]), os.path.join(tum, r[1]), os.path.join(tum, r[3])) for r in rows][first::every][:count]
    if stamps is not None:
        frames = [f for f in frames if any(abs(f[0] - s) < 5e-4 for s in stamps)]
    return frames


def quaternion(r):
    w = np.sqrt(max(0.0, 1.0 + np.trace(r))) / 2.0
    x = np.sqrt(max(0.0, 1.0 + r[0, 0] - r[1, 1] - r[2, 2])) / 2.0 * np.sign(r[2, 1] - r[1, 2])
    y = np.sqrt(max(0.0, 1.0 - r[0, 0] + r[1, 1] - r[2, 2])) / 2.0 * np.sign(r[0, 2] - r[2, 0])
    z = np.sqrt(max(0.0, 1.0 - r[0, 0] - r[1, 1] + r[2, 2])) / 2.0 * np.sign(r[1, 0] - r[0, 1])
    return [x, y, z, w]


def lift(kps, depth, k, dist):
    """3-D points (camera frame) of keypoints with depth, and which keypoints they are."""
    uv = np.array([kp.pt for kp in kps], dtype=np.float64)
    px = np.rint(uv).astype(int)
    h, w = depth.shape
    ok = (px[:, 0] >= 0) & (px[:, 1] >= 0) & (px[:, 0] < w) & (px[:, 1] < h)
    z = np.zeros(len(uv))
    z[ok] = depth[px[ok, 1], px[ok, 0]]
    rays = cv2.undistortPoints(uv.reshape(-1, 1, 2), k, dist).reshape(-1, 2)
    pts = np.column_stack([rays * z[:, None], z])
    return pts, z > 0


def load_features(folder, rgb):
    """Keypoints and descriptors of the colour image `rgb` from `folder`."""
    stem = os.path.splitext(os.path.basename(rgb))[0]
    with np.load(os.path.join(folder, stem + ".npz")) as f:
        xy, desc = f["keypoints"], f["descriptors"].astype(np.float32)
    return [cv2.KeyPoint(float(x), float(y), 8.0) for x, y in xy], desc


def track(prev, cur, k, dist, matcher):
    matches = matcher.match(prev["desc"], cur["desc"])
    pts, valid = prev["points"]
    idx = [(m.queryIdx, m.trainIdx) for m in matches if valid[m.queryIdx]]
    if len(idx) < MIN_INLIERS:
        return None
    q, t = np.array(idx).T
    obj = pts[q]
    img = cv2.undistortPoints(np.array([cur["kps"][i].pt for i in t]).reshape(-1, 1, 2), k, dist, P=k).reshape(-1, 2)
    ok, rvec, tvec, inliers = cv2.solvePnPRansac(obj, img, k, None, iterationsCount=200, reprojectionError=3.0,
                                                 confidence=0.999, flags=cv2.SOLVEPNP_SQPNP)
    if not ok or inliers is None or len(inliers) < MIN_INLIERS:
        return None
    i = inliers[:, 0]
    rvec, tvec = cv2.solvePnPRefineLM(obj[i], img[i], k, None, rvec, tvec)
    t_cur_prev = np.eye(4)
    t_cur_prev[:3, :3] = cv2.Rodrigues(rvec)[0]
    t_cur_prev[:3, 3] = tvec[:, 0]
    return np.linalg.inv(t_cur_prev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tum", required=True)
    ap.add_argument("--k", type=float, nargs=4, required=True)
    ap.add_argument("--dist", type=float, nargs=5, default=[0.0] * 5)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--frames", type=int, default=1 << 30)
    ap.add_argument("--every", type=int, default=1, help="every n-th frame only")
    ap.add_argument("--stamps", help="file of colour stamps (seconds, one a line): those frames only")
    ap.add_argument("--features", help="folder of other features (see above) to use instead of ORB")
    ap.add_argument("--depth-scale", type=float, default=5000.0)
    a = ap.parse_args()
    stamps = [float(l) for l in open(a.stamps) if l.strip()] if a.stamps else None
    cv2.setNumThreads(1)
    fx, fy, cx, cy = a.k
    k = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]], dtype=np.float64)
    dist = np.array(a.dist, dtype=np.float64)
    orb = cv2.ORB_create(nfeatures=1000)
    matcher = cv2.BFMatcher(cv2.NORM_L2 if a.features else cv2.NORM_HAMMING, crossCheck=True)
    poses, lost, times, prev, pose = [], [], [], None, np.eye(4)
    for t, rgb, depth_file in frames_of(a.tum, a.first, a.frames, a.every, stamps):
        gray = cv2.imread(rgb, cv2.IMREAD_GRAYSCALE)
        depth = cv2.imread(depth_file, cv2.IMREAD_UNCHANGED).astype(np.float64) / a.depth_scale
        start = time.perf_counter()
        kps, desc = load_features(a.features, rgb) if a.features else orb.detectAndCompute(gray, None)
        cur = {"kps": kps, "desc": desc, "points": lift(kps, depth, k, dist) if kps else None}
        step = None if prev is None or desc is None else track(prev, cur, k, dist, matcher)
        times.append((time.perf_counter() - start) * 1e3)
        if prev is not None and step is None:
            lost.append(t)
            continue
        if step is not None:
            pose = pose @ step
        poses.append([t, *pose[:3, 3].tolist(), *quaternion(pose[:3, :3])])
        prev = cur
    print(json.dumps({"poses": poses, "lost": lost, "ms_per_frame": statistics.median(times)}))


if __name__ == "__main__":
    main()
