"""A tt-model server double that follows shared/spec/tt-model-servers.md, for the tests of the
tt-server backends. It is not a model: answers come from data with a known truth.

- superpoint-p150: the upstream reference keypoints of tests/fixtures/superpoint (the HF model
  on image.png at 640x480), the best `max_keypoints` of them, scaled to the request's image size;
  descriptors as a base64 float16 NPZ, as the real server sends them.
- mast3r-blackhole: pointmaps of a synthetic scene seen by two cameras with a known relative pose
  (X_cam2 = R X_cam1 + t), both in camera 1's frame, pts3d float32 and conf float16 in an NPZ;
  the `preprocess` blocks of the requested images (pad to a square, 512); the pose. With
  `--sample-bag BAG` (the project's rendered sample, data/sample/sequence.mcap) it answers as a
  perfect DUSt3R instead: it recognises each image among the bag's frames and returns the room's
  exact points seen through that camera (the renderer's geometry, src/sample.rs, re-derived here
  from its published formulas) and the true relative pose. With `--tum DIR` (a TUM RGB-D
  sequence: associations.txt, groundtruth.txt, intrinsics.json) it answers for that sequence's
  frames (recognised as the nearest in pixels, since JPEG decoders differ in the last bit) with
  the points of their registered depth (nearest pixel, the plumb_bob lens undone by fixed-point
  iteration) and the motion capture's relative pose.

Behaviour a client must handle, by flag: `--starting S` (/health "starting" and /predict 503 for
the first S seconds), `--faults a,b,...` (the next /predict requests, in order, get: 400, 500,
garbage (200 with a non-JSON body), badshape (200 with wrongly shaped arrays), drop (connection
closed without an answer), slow:SECONDS (answer after a delay)), `--die-after N` (exit after N
answered /predict requests), `--info-revision REV` (what /info reports). Writes its port to --port-file once listening (port 0 = any free).
Loopback only.
"""
import argparse
import base64
import io
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def npz_b64(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return base64.b64encode(buf.getvalue()).decode()


def image_size(data):
    """(width, height) of PNG or JPEG bytes, or None when they are neither (-> HTTP 400)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            length = int.from_bytes(data[i + 2:i + 4], "big")
            if marker in (0xC0, 0xC1, 0xC2):
                return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
            i += 2 + length
    return None


def scene_pose():
    a = np.array([0.05, -0.2, 0.03])
    th = np.linalg.norm(a)
    k = a / th
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    R = np.eye(3) + np.sin(th) * K + (1 - np.cos(th)) * K @ K
    return R, np.array([0.3, -0.05, 0.1])


def synthetic_pair(size=512, focal=600.0):
    """Camera 1 looks at a wavy surface; camera 2 = (R, t) sees the same surface. Returns
    pts3d1 (camera 1's points), pts3d2 (camera 2's points in camera 1's frame)."""
    R, t = scene_pose()
    v, u = np.mgrid[0:size, 0:size].astype(np.float64)
    rays = np.stack([(u - size / 2) / focal, (v - size / 2) / focal, np.ones_like(u)], -1)
    depth1 = 3.0 + 0.3 * np.sin(u / 40.0) * np.cos(v / 55.0)
    pts1 = rays * depth1[..., None]
    depth2 = 3.2 + 0.25 * np.cos(u / 47.0) * np.sin(v / 38.0)
    x_c2 = rays * depth2[..., None]
    pts2_in_1 = (x_c2 - t) @ R  # R^T (X_c2 - t), row-wise
    return pts1.astype(np.float32), pts2_in_1.astype(np.float32), R, t, focal


# The rendered sample (src/sample.rs): a 6 x 3 x 8 m room, a 640x480 camera with f = 500.
ROOM_MIN, ROOM_MAX = np.array([-3.0, -1.5, -2.0]), np.array([3.0, 1.5, 6.0])
SAMPLE_F, SAMPLE_W, SAMPLE_H = 500.0, 640, 480


def sample_pose(i, n):
    """Camera i of n: (R, t), a point x of the camera is R x + t in the room."""
    s = i / (max(n, 2) - 1)
    yaw, pitch = np.radians(-12 + 24 * s), np.radians(3 * np.sin(s * np.pi))
    ry = np.array([[np.cos(yaw), 0, np.sin(yaw)], [0, 1, 0], [-np.sin(yaw), 0, np.cos(yaw)]])
    rx = np.array([[1, 0, 0], [0, np.cos(pitch), -np.sin(pitch)], [0, np.sin(pitch), np.cos(pitch)]])
    return ry @ rx, np.array([-1 + 2 * s, 0.1 * np.sin(s * 2 * np.pi), -0.5 + 0.6 * s])


def sample_points(pose, pre, size=512):
    """The room's points seen through each grid pixel of an image prepared as `pre` (the
    contract's u = (x + offx) * scale), in the camera's frame; confidence 10 inside the image,
    1 on the padding."""
    R, t = pose
    v, u = np.mgrid[0:size, 0:size].astype(np.float64)
    x, y = u / pre["scale"] - pre["offx"], v / pre["scale"] - pre["offy"]
    d_cam = np.stack([(x - (SAMPLE_W / 2 - 0.5)) / SAMPLE_F, (y - (SAMPLE_H / 2 - 0.5)) / SAMPLE_F, np.ones_like(x)], -1)
    d = d_cam @ R.T
    with np.errstate(divide="ignore", invalid="ignore"):
        hits = [np.where(d[..., a:a + 1] != 0, (b - t[a]) / d[..., a:a + 1], np.inf) for a in range(3) for b in (ROOM_MIN[a], ROOM_MAX[a])]
    hits = np.concatenate(hits, -1)
    hits[hits <= 1e-9] = np.inf
    depth = hits.min(-1)  # along d_cam, whose z is 1: the depth in the camera
    inside = (x >= -0.5) & (x < SAMPLE_W - 0.5) & (y >= -0.5) & (y < SAMPLE_H - 0.5)
    return d_cam * depth[..., None], np.where(inside, 10.0, 1.0)


class Tum:
    """A TUM RGB-D sequence as a perfect DUSt3R sees it."""

    def __init__(self, folder):
        from PIL import Image
        d = Path(folder)
        cam = json.loads((d / "intrinsics.json").read_text())
        self.k = np.array([[cam["fx"], 0, cam["cx"]], [0, cam["fy"], cam["cy"]], [0, 0, 1.0]])
        self.dist, self.depth_scale = np.array(cam["dist"]), cam["depth_scale"]
        gt = np.loadtxt(d / "groundtruth.txt")
        self.frames = []
        for line in (d / "associations.txt").read_text().split("\n"):
            f = line.split()
            if len(f) < 4 or not gt[0, 0] <= float(f[0]) <= gt[-1, 0]:
                continue
            rgb = np.asarray(Image.open(d / f[1]).convert("RGB"), np.int16)
            depth = np.asarray(Image.open(d / f[3]), np.float64) / self.depth_scale
            self.frames.append((rgb[::8, ::8], depth, self.pose(gt, float(f[0]))))
        h, w = self.frames[0][1].shape
        v, u = np.mgrid[0:h, 0:w].astype(np.float64)
        self.rays = self.undistort(u, v)

    def undistort(self, u, v):
        """The rays (z = 1) through pixels (u, v) of the plumb_bob lens."""
        (fx, cx), (fy, cy) = self.k[0, [0, 2]], self.k[1, [1, 2]]
        k1, k2, p1, p2, k3 = self.dist
        xd, yd = (u - cx) / fx, (v - cy) / fy
        x, y = xd.copy(), yd.copy()
        for _ in range(50):
            r2 = x * x + y * y
            radial = 1 + k1 * r2 + k2 * r2 * r2 + k3 * r2 ** 3
            x = (xd - (2 * p1 * x * y + p2 * (r2 + 2 * x * x))) / radial
            y = (yd - (p1 * (r2 + 2 * y * y) + 2 * p2 * x * y)) / radial
        return np.stack([x, y, np.ones_like(x)], -1)

    @staticmethod
    def pose(gt, t):
        """(R, t) of the camera in the world at time t (the nearest motion-capture sample)."""
        row = gt[np.argmin(np.abs(gt[:, 0] - t))]
        x, y, z, w = row[4:8] / np.linalg.norm(row[4:8])
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                      [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                      [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        return r, row[1:4]

    def index(self, png):
        from PIL import Image
        px = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), np.int16)[::8, ::8]
        diffs = [np.abs(f[0] - px).mean() if f[0].shape == px.shape else np.inf for f in self.frames]
        best = int(np.argmin(diffs))
        return best if diffs[best] < 4.0 else None

    def points(self, i, pre, size=512):
        """Frame i's depth points through each grid pixel of an image prepared as `pre`, in its
        camera's frame; confidence 10 where there is depth, 1 elsewhere."""
        depth = self.frames[i][1]
        h, w = depth.shape
        v, u = np.mgrid[0:size, 0:size].astype(np.float64)
        x, y = np.rint(u / pre["scale"] - pre["offx"]).astype(int), np.rint(v / pre["scale"] - pre["offy"]).astype(int)
        inside = (x >= 0) & (y >= 0) & (x < w) & (y < h)
        xc, yc = np.clip(x, 0, w - 1), np.clip(y, 0, h - 1)
        z = np.where(inside, depth[yc, xc], 0.0)
        pts = self.rays[yc, xc] * z[..., None]
        pts[z <= 0] = np.nan
        return pts, np.where(z > 0, 10.0, 1.0)


def tum_answer(st, body, pre):
    """The perfect DUSt3R of a TUM frame pair: both views' depth points in camera 1's frame and
    the motion capture's pose (X_cam2 = R X_cam1 + t); a frame not of the sequence: HTTP 400."""
    index = [st.tum.index(base64.b64decode(body[k])) for k in ["image1", "image2"]]
    if None in index:
        return None
    views = [(st.tum.frames[i][2], st.tum.points(i, p)) for i, p in zip(index, pre)]
    return true_answer(body, views, pre, float(st.tum.k[0, 0]))


def true_answer(body, views, pre, focal):
    """The answer of a perfect DUSt3R: views [((R, t) of the camera in the world, (its points
    in its own frame, their confidence))] for view 1 and 2; both views' points in camera 1's
    frame, the pose X_cam2 = R X_cam1 + t, and `focal` unless the request knows it."""
    ((r1, t1), (p1, c1)), ((r2, t2), (p2_own, c2)) = views
    # Camera 2's points in camera 1's frame: r1^T (r2 x + t2 - t1).
    p2 = (p2_own @ r2.T + t2 - t1) @ r1
    R, t = r2.T @ r1, r2.T @ (t1 - t2)
    out = {"npz_b64": npz_b64(pts3d1=p1.astype(np.float32), pts3d2=p2.astype(np.float32),
                              conf1=c1.astype(np.float16), conf2=c2.astype(np.float16)),
           "preprocess": pre, "timing_ms": {"total": 0}}
    if body.get("return_pose"):
        known = body.get("intrinsics") is not None
        f = float(body["intrinsics"][0][0]) if known else focal
        out["pose"] = {"R": R.tolist(), "t": t.tolist(), "focal_1": f, "focal_2": f, "used_known_intrinsics": known}
    return out


def decode_grey_png(data):
    """The pixels of a PNG (PIL, which evo brings into the test venv)."""
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(data)).convert("L"))


class State:
    def __init__(self, args):
        self.args = args
        self.t0 = time.time()
        self.faults = [f for f in args.faults.split(",") if f]
        self.answered = 0
        self.lock = threading.Lock()
        # One request at a time reaches the chip, as on the real servers; /health stays free.
        self.chip = threading.Lock()
        if args.model == "superpoint":
            ref = np.load(os.path.join(ROOT, "tests/fixtures/superpoint/superpoint_random_seed0.npz"))
            # The server answers with scores descending (keypoints and descriptors in that order).
            order = np.argsort(-ref["scores"], kind="stable")
            self.kp, self.scores, self.desc = ref["keypoints_xy"][order], ref["scores"][order], ref["descriptors"][order]
        elif args.tum:
            self.tum = Tum(args.tum)
        elif args.sample_bag:
            from pathlib import Path
            from rosbags.highlevel import AnyReader
            from rosbags.typesys import Stores, get_typestore
            self.frames = []
            with AnyReader([Path(args.sample_bag)], default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
                for c, _, raw in reader.messages():
                    if c.msgtype == "sensor_msgs/msg/Image":
                        m = reader.deserialize(raw, c.msgtype)
                        self.frames.append(np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.width))
        else:
            self.pts1, self.pts2, self.R, self.t, self.focal = synthetic_pair()

    def starting(self):
        return time.time() - self.t0 < self.args.starting


def superpoint_answer(st, body, size):
    w, h = size
    k = int(body.get("max_keypoints", 1024))
    thr = float(body.get("keypoint_threshold", 0.005))
    keep = np.where(st.scores > thr)[0]
    if k >= 0:
        keep = keep[:k]
    sx, sy = w / 640.0, h / 480.0
    kp = st.kp[keep].astype(np.float64) * [sx, sy]
    out = {"num_keypoints": int(len(keep)), "keypoints": kp.tolist(), "scores": st.scores[keep].astype(float).tolist(),
           "original_size": {"height": h, "width": w}, "image_size": {"height": 480, "width": 640}, "scale": {"x": sx, "y": sy},
           "params": {"max_keypoints": k, "keypoint_threshold": thr, "nms_radius": body.get("nms_radius", 4), "border_removal_distance": 4},
           "timing_ms": {"preprocess": 1.0, "device_forward": 5.3, "postprocess": 1.3, "total": 7.6}}
    if body.get("return_descriptors", True):
        out["descriptors"] = {"format": "npz", "key": "descriptors", "dtype": "float16", "shape": [int(len(keep)), 256],
                              "data": npz_b64(descriptors=st.desc[keep].astype(np.float16))}
    return out


def sample_answer(st, body, pre):
    """The perfect DUSt3R of the sample: both views' true points in camera 1's frame, the true
    pose (X_cam2 = R X_cam1 + t); a frame that is not the sample's gets HTTP 400."""
    n = len(st.frames)
    index = []
    for k in ["image1", "image2"]:
        px = decode_grey_png(base64.b64decode(body[k]))
        found = [i for i, f in enumerate(st.frames) if f.shape == px.shape and np.array_equal(f, px)]
        if not found:
            return None
        index.append(found[0])
    poses = [sample_pose(i, n) for i in index]
    return true_answer(body, [(pose, sample_points(pose, p)) for pose, p in zip(poses, pre)], pre, SAMPLE_F)


def dust3r_answer(st, body, sizes, badshape=False):
    pre = []
    for w, h in sizes:
        s = max(w, h)
        pre.append({"orig_w": w, "orig_h": h, "offx": (s - w) // 2, "offy": (s - h) // 2, "pad_side": s, "out_size": 512, "scale": 512.0 / s})
    if st.args.sample_bag:
        return sample_answer(st, body, pre)
    if st.args.tum:
        return tum_answer(st, body, pre)
    conf1 = np.full((512, 512), 5.0, np.float16)
    conf2 = np.full((512, 512), 4.0, np.float16)
    conf2[:, :64] = 1.5  # a low-confidence band
    pts2 = st.pts2[:256] if badshape else st.pts2
    out = {"npz_b64": npz_b64(pts3d1=st.pts1, pts3d2=pts2, conf1=conf1, conf2=conf2), "preprocess": pre,
           "summary": [{"conf_mean": 5.0}, {"conf_mean": 3.7}],
           "timing_ms": {"decode": 1, "preprocess": 2, "forward": 228, "forward_sym": 0, "pose": 10, "encode": 20, "total": 261}}
    if body.get("return_pose"):
        known = body.get("intrinsics") is not None
        f2 = float(body["intrinsics"][0][0]) if known else st.focal / pre[1]["scale"]
        out["pose"] = {"R": st.R.tolist(), "t": st.t.tolist(), "focal_1": st.focal / pre[0]["scale"], "focal_2": f2, "used_known_intrinsics": known}
    else:
        out["pose"] = None
    return out


def make_handler(st):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send(self, code, payload, raw=None):
            data = raw if raw is not None else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            name = "superpoint-p150" if st.args.model == "superpoint" else "mast3r-blackhole"
            if self.path == "/health":
                self.send(200, {"status": "starting" if st.starting() else "ok", "model": name, "device": {"arch": "blackhole", "id": 0, "open": True}})
            elif self.path == "/info" and st.args.model == "superpoint":
                self.send(200, {"model": name, "task": "keypoints", "input": {"height": 480, "width": 640, "batch": 1},
                                "weights": {"repo": "magic-leap-community/superpoint", "revision": st.args.info_revision, "loaded": True}})
            else:
                self.send(404, {"detail": "Not Found"})

        def do_POST(self):
            with st.chip:
                self.predict()

        def predict(self):
            length = int(self.headers.get("Content-Length", 0))
            body_bytes = self.rfile.read(length)
            started = time.time()
            if self.path != "/predict":
                return self.send(404, {"detail": "Not Found"})
            if st.starting():
                return self.send(503, {"detail": "model is starting"})
            with st.lock:
                fault = st.faults.pop(0) if st.faults else None
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault and fault.startswith("slow:"):
                time.sleep(float(fault.split(":")[1]))
            if fault == "400":
                return self.send(400, {"detail": "invalid field: keypoint_threshold"})
            if fault == "500":
                return self.send(500, {"detail": "RuntimeError: TT_FATAL device timeout"})
            if fault == "garbage":
                return self.send(200, None, raw=b"<html>502 Bad Gateway</html>")
            try:
                body = json.loads(body_bytes)
            except ValueError:
                return self.send(400, {"detail": "body is not JSON"})
            keys = ["image"] if st.args.model == "superpoint" else ["image1", "image2"]
            sizes = []
            for k in keys:
                try:
                    size = image_size(base64.b64decode(body[k]))
                except (KeyError, ValueError, TypeError):
                    size = None
                if size is None:
                    return self.send(400, {"detail": f"cannot decode {k}"})
                sizes.append(size)
            if st.args.model == "superpoint":
                out = superpoint_answer(st, body, sizes[0])
                if fault == "badshape":
                    out["scores"] = out["scores"][:-1]
            else:
                out = dust3r_answer(st, body, sizes, badshape=fault == "badshape")
                if out is None:
                    return self.send(400, {"detail": "not a frame of the sample"})
            # Like the real servers, timing_ms.total is the server's own time for the request,
            # here including the answer's serialisation (patched into the finished text).
            out["timing_ms"]["total"] = "@@TOTAL@@"
            text = json.dumps(out)
            text = text.replace('"@@TOTAL@@"', "%.3f" % ((time.time() - started) * 1e3))
            self.send(200, None, raw=text.encode())
            st.answered += 1
            if st.args.die_after and st.answered >= st.args.die_after:
                threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0)), daemon=True).start()

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["superpoint", "dust3r"], required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--starting", type=float, default=0.0)
    ap.add_argument("--faults", default="")
    ap.add_argument("--die-after", type=int, default=0)
    ap.add_argument("--sample-bag", help="answer DUSt3R requests with the true geometry of this sample bag's frames")
    ap.add_argument("--tum", help="answer DUSt3R requests with the depth and motion capture of this TUM sequence's frames")
    ap.add_argument("--info-revision", default="734450e9ffe229074f5998494ddc615475cdb20a", help="weights revision /info reports")
    args = ap.parse_args()
    st = State(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(st))
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(str(server.server_address[1]))
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"listening on {server.server_address[1]}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
