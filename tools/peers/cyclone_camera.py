"""Cyclone DDS peer (PyPI cyclonedds) for tests/node_dds.rs: an independent DDS stack that plays
a camera. Publishes sensor_msgs/Image frames (mono8 from a PNG's raw bytes given as .npy) on
rt/<ns>/image, with interleaved bad frames, and collects sp_dust3r/msg/Keypoints from
rt/<ns>/keypoints. Prints one JSON line with what arrived.

Run only inside a private network namespace (the test uses `unshare -n`); CYCLONEDDS_URI is set
to loopback only as a second guard (by ros_idl, imported first).
"""
import argparse
import json
import os
import time

from ros_idl import (
    CompressedImage, DiagnosticArray, Header, Image, Keypoints, PairPose, PointCloud2, Time, best_effort_qos, reliable_qos, diagnostics_report,
)
import numpy as np  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402


def pair_summary(p):
    q = p.pose.orientation
    return {"stamp": [p.header.stamp.sec, p.header.stamp.nanosec], "view2": [p.view2_stamp.sec, p.view2_stamp.nanosec],
            "frame_id": p.header.frame_id, "inliers": p.num_inliers, "unit_quaternion": abs(q.x**2 + q.y**2 + q.z**2 + q.w**2 - 1) < 1e-6}


def load(args, writer, reader, plane):
    """Publishes frames at a fixed rate and measures, per answered frame, the time from its
    publication to the arrival of its keypoints."""
    h, w = plane.shape
    data = plane.tobytes()
    period = 1.0 / args.rate
    sent_at, latency = {}, []
    start = time.time()
    i = 0
    while time.time() - start < args.duration:
        target = start + i * period
        now = time.time()
        if now < target:
            time.sleep(target - now)
        stamp = Time(sec=int(i * period), nanosec=int(round((i * period % 1) * 1e9)))
        sent_at[(stamp.sec, stamp.nanosec)] = time.time()
        writer.write(Image(Header(stamp, "cam_optical"), h, w, "mono8", 0, w, data))
        i += 1
        for kp in reader.take(N=50):
            key = (kp.header.stamp.sec, kp.header.stamp.nanosec)
            if key in sent_at:
                latency.append((sent_at[key] - start, time.time() - sent_at[key]))
    t0 = time.time()
    while time.time() - t0 < 3.0:
        for kp in reader.take(N=50):
            key = (kp.header.stamp.sec, kp.header.stamp.nanosec)
            if key in sent_at:
                latency.append((sent_at[key] - start, time.time() - sent_at[key]))
        time.sleep(0.05)

    def p95(values):
        return float(np.percentile(values, 95)) if values else None

    lat = [l for _, l in latency]
    first = [l for t, l in latency if t < 15.0]
    last = [l for t, l in latency if t >= args.duration - 15.0]
    print(json.dumps({"sent": i, "answered": len(latency), "median_s": float(np.median(lat)) if lat else None, "p95_s": p95(lat),
                      "max_s": max(lat) if lat else None, "p95_first_15s": p95(first), "p95_last_15s": p95(last),
                      "seconds": time.time() - start}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image", required=True, help=".npy uint8 (H, W) plane")
    ap.add_argument("--ns", default="")
    ap.add_argument("--frames", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--expect-pairs", type=int, default=0)
    ap.add_argument("--jpeg", help="send this JPEG file as sensor_msgs/CompressedImage on <ns>/image/compressed")
    ap.add_argument("--rate", type=float, default=0.0, help="load mode: frames per second")
    ap.add_argument("--duration", type=float, default=60.0, help="load mode: seconds")
    args = ap.parse_args()
    plane = np.load(args.image)
    h, w = plane.shape
    dp = DomainParticipant(int(os.environ.get("ROS_DOMAIN_ID", "0")))
    prefix = "rt" + args.ns
    img_topic = Topic(dp, prefix + "/image/compressed", CompressedImage) if args.jpeg else Topic(dp, prefix + "/image", Image)
    kp_topic = Topic(dp, prefix + "/keypoints", Keypoints)
    writer = DataWriter(dp, img_topic, qos=best_effort_qos(5))
    reliable = reliable_qos(50)
    reader = DataReader(dp, kp_topic, qos=reliable)
    clouds = DataReader(dp, Topic(dp, prefix + "/pointcloud", PointCloud2), qos=reliable)
    pairs = DataReader(dp, Topic(dp, prefix + "/pair_pose", PairPose), qos=reliable)
    diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=reliable)

    start = time.time()
    while writer.get_publication_matched_status().current_count == 0 or reader.get_subscription_matched_status().current_count == 0:
        if time.time() - start > args.timeout / 2:
            print(json.dumps({"error": "no match with the node", "received": []}))
            return
        time.sleep(0.1)

    if args.rate > 0:
        load(args, writer, reader, plane)
        return

    sent, received, bad = [], {}, 0
    good = plane.tobytes()
    jpeg = open(args.jpeg, "rb").read() if args.jpeg else b""
    for i in range(args.frames):
        stamp = Time(sec=100 + i, nanosec=1000 * i)
        bad_header = Header(Time(sec=900 + i, nanosec=0), "cam_optical")
        # A bad frame before each good one, a different fault each time.
        if args.jpeg:
            faults = [jpeg[: len(jpeg) // 3] + bytes(range(200)), b"not an image at all", jpeg[:10]]
            writer.write(CompressedImage(bad_header, "jpeg", list(faults[i % 3])))
        else:
            faults = [(w, good[: w * 10], "mono8"), (w - 1, good, "mono8"), (w, good, "yuv444")]
            step, data, enc = faults[i % 3]
            writer.write(Image(bad_header, h, w, enc, 0, step, list(data)))
        bad += 1
        time.sleep(0.3)
        if args.jpeg:
            writer.write(CompressedImage(Header(stamp, "cam_optical"), "jpeg", list(jpeg)))
        else:
            writer.write(Image(Header(stamp, "cam_optical"), h, w, "mono8", 0, w, list(good)))
        sent.append([stamp.sec, stamp.nanosec])
        # Wait for this frame's answer before the next (the node keeps only the newest frame).
        t0 = time.time()
        while (stamp.sec, stamp.nanosec) not in received and time.time() - t0 < args.timeout / args.frames:
            for kp in reader.take(N=10):
                norms = np.linalg.norm(np.asarray(kp.descriptors, dtype=np.float64).reshape(-1, max(kp.descriptor_dim, 1)), axis=1)
                received[(kp.header.stamp.sec, kp.header.stamp.nanosec)] = {
                    "frame_id": kp.header.frame_id, "n": len(kp.x), "width": kp.width, "height": kp.height,
                    "dim": kp.descriptor_dim, "unit": bool(np.all(np.abs(norms - 1) < 1e-3)),
                    "descending": bool(all(a >= b for a, b in zip(kp.scores, kp.scores[1:]))),
                }
            time.sleep(0.05)
    out = [{"stamp": list(k), **v} for k, v in sorted(received.items())]
    got_clouds, got_pairs = [], []
    t0 = time.time()
    # Clouds always come; poses may not (the node reports "no pose" instead), so wait for the
    # clouds, then a little longer for poses.
    while len(got_clouds) < args.expect_pairs and time.time() - t0 < args.timeout:
        for c in clouds.take(N=10):
            got_clouds.append({"stamp": [c.header.stamp.sec, c.header.stamp.nanosec], "frame_id": c.header.frame_id, "width": c.width,
                               "fields": [f.name for f in c.fields], "point_step": c.point_step, "bytes": len(c.data),
                               "finite": bool(np.all(np.isfinite(np.frombuffer(bytes(c.data), dtype="<f4").reshape(-1, 5)[:, :3])))})
        got_pairs.extend(pair_summary(p) for p in pairs.take(N=10))
        time.sleep(0.1)
    time.sleep(1.0)
    got_pairs.extend(pair_summary(p) for p in pairs.take(N=10))
    # The node's latest /diagnostics (published at 1 Hz).
    diagnostics = {}
    t0 = time.time()
    while time.time() - t0 < 3.0:
        for d in diags.take(N=20):
            diagnostics = diagnostics_report(d)
        time.sleep(0.1)
    print(json.dumps({"diagnostics": diagnostics, "sent": sent, "bad_sent": bad, "received": out, "clouds": got_clouds, "pairs": got_pairs}))


if __name__ == "__main__":
    main()
