"""A tt-model server double that follows shared/spec/tt-model-servers.md, for the tests of the
tt-server backends. It is not a model: answers come from data with a known truth.

- superpoint-p150: the upstream reference keypoints of tests/fixtures/superpoint (the HF model
  on image.png at 640x480), the best `max_keypoints` of them, scaled to the request's image size;
  descriptors as a base64 float16 NPZ, as the real server sends them.
- mast3r-blackhole: pointmaps of a synthetic scene seen by two cameras with a known relative pose
  (X_cam2 = R X_cam1 + t), both in camera 1's frame, pts3d float32 and conf float16 in an NPZ;
  the `preprocess` blocks of the requested images (pad to a square, 512); the pose.

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


def dust3r_answer(st, body, sizes, badshape=False):
    pre = []
    for w, h in sizes:
        s = max(w, h)
        pre.append({"orig_w": w, "orig_h": h, "offx": (s - w) // 2, "offy": (s - h) // 2, "pad_side": s, "out_size": 512, "scale": 512.0 / s})
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
