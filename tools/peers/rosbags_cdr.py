"""rosbags peer for tests/ros_messages.rs: checks our message definitions and CDR bytes against
the PyPI package `rosbags` (its own ROS 2 Jazzy message store and CDR (de)serialiser).

Reads a manifest JSON [{"type": "pkg/msg/Name", "file": "...cdr", "definition": "<.msg text>",
"custom": bool}], and prints one JSON object per type: whether our field list equals rosbags'
(standard types), whether rosbags re-serialises our bytes to the same bytes, and the values it
decoded.
"""
import dataclasses
import json
import sys

import numpy as np
from rosbags.typesys import Stores, get_typestore, get_types_from_msg


def plain(v, store):
    if isinstance(v, np.ndarray):
        return [plain(x, store) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [plain(x, store) for x in v]
    if dataclasses.is_dataclass(v):
        # The message's fields as its definition lists them (constants are class attributes).
        names = [f[0] for f in store.fielddefs[v.__msgtype__][1]]
        return {n: plain(getattr(v, n), store) for n in names}
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    return v


def cloud_points(msg):
    """Points of a PointCloud2 read with numpy from its field list, as RViz would."""
    kinds = {7: "<f4", 8: "<f8", 6: "<u4", 2: "u1"}
    dtype = np.dtype({"names": [f.name for f in msg.fields], "formats": [kinds[f.datatype] for f in msg.fields],
                      "offsets": [f.offset for f in msg.fields], "itemsize": msg.point_step})
    pts = np.frombuffer(bytes(msg.data), dtype=dtype, count=msg.width * msg.height)
    out = []
    for p in pts:
        row = {name: float(p[name]) for name in dtype.names if name != "rgb"}
        if "rgb" in dtype.names:
            packed = int(np.array([p["rgb"]], dtype="<f4").view("<u4")[0])
            row["rgb"] = [(packed >> 16) & 255, (packed >> 8) & 255, packed & 255]
        out.append(row)
    return out


def main():
    manifest = json.load(open(sys.argv[1]))
    store = get_typestore(Stores.ROS2_JAZZY)
    reference = get_typestore(Stores.ROS2_JAZZY)
    for entry in manifest:
        if entry["custom"]:
            store.register(get_types_from_msg(entry["definition"], entry["type"]))
    out = {}
    for entry in manifest:
        t = entry["type"]
        ours = get_types_from_msg(entry["definition"], t)[t][1]
        fields_match = None if entry["custom"] else ours == reference.fielddefs[t][1]
        data = open(entry["file"], "rb").read()
        msg = store.deserialize_cdr(data, t)
        again = bytes(store.serialize_cdr(msg, t))
        out[t] = {"fields_match": fields_match, "bytes_equal": again == data, "value": plain(msg, store)}
        if t == "sensor_msgs/msg/PointCloud2":
            out[t]["points"] = cloud_points(msg)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
