"""ONNX Runtime CPU peer for `sp_dust3r_bench superpoint`.

Builds the SuperPoint network as an ONNX graph (PyPI `onnx`) from the same model.safetensors the
Rust code loads, runs it in ONNX Runtime (PyPI `onnxruntime`) on the same input plane, and prints
one JSON line: median forward time, thread count, and the outputs' location for comparison.

    python superpoint_ort.py --weights DIR --input plane.npy --repeat 10 --out-dir DIR
"""
import argparse
import json
import os
import statistics
import time

import numpy as np
import onnx
import safetensors.numpy
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort


def load_safetensors(path):
    """The checkpoint's float32 tensors as numpy arrays (PyPI safetensors reads the file)."""
    tensors = safetensors.numpy.load_file(path)
    for name, value in tensors.items():
        assert value.dtype == np.float32, name
    # Magic Leap's own names (superpoint_v1.pth, as in shared/real) for the Hugging Face ones.
    original = {f"conv{i + 1}{ab}": f"encoder.conv_blocks.{i}.conv_{ab}" for i in range(4) for ab in "ab"}
    original.update({"convPa": "keypoint_decoder.conv_score_a", "convPb": "keypoint_decoder.conv_score_b",
                     "convDa": "descriptor_decoder.conv_descriptor_a", "convDb": "descriptor_decoder.conv_descriptor_b"})
    renamed = {}
    for name, value in tensors.items():
        prefix, _, kind = name.rpartition(".")
        renamed[f"{original.get(prefix, prefix)}.{kind}"] = value
    return renamed


def build_graph(w, height, width):
    nodes, inits = [], []

    def conv(x, prefix, relu, name):
        k = w[prefix + ".weight"].shape[-1]
        inits.append(numpy_helper.from_array(w[prefix + ".weight"], prefix + ".weight"))
        inits.append(numpy_helper.from_array(w[prefix + ".bias"], prefix + ".bias"))
        pad = k // 2
        out = name if not relu else name + "_pre"
        nodes.append(helper.make_node("Conv", [x, prefix + ".weight", prefix + ".bias"], [out],
                                      kernel_shape=[k, k], pads=[pad] * 4))
        if relu:
            nodes.append(helper.make_node("Relu", [out], [name]))
        return name

    x = "image"
    for i in range(4):
        x = conv(x, f"encoder.conv_blocks.{i}.conv_a", True, f"b{i}a")
        x = conv(x, f"encoder.conv_blocks.{i}.conv_b", True, f"b{i}b")
        if i < 3:
            nodes.append(helper.make_node("MaxPool", [x], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            x = f"p{i}"
    s = conv(x, "keypoint_decoder.conv_score_a", True, "sa")
    conv(s, "keypoint_decoder.conv_score_b", False, "logits")
    d = conv(x, "descriptor_decoder.conv_descriptor_a", True, "da")
    conv(d, "descriptor_decoder.conv_descriptor_b", False, "descriptors")
    hc, wc = height // 8, width // 8
    graph = helper.make_graph(
        nodes, "superpoint",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, height, width])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 65, hc, wc]),
         helper.make_tensor_value_info("descriptors", TensorProto.FLOAT, [1, 256, hc, wc])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()

    plane = np.load(args.input).astype(np.float32)
    h, w = plane.shape
    model = build_graph(load_safetensors(os.path.join(args.weights, "model.safetensors")), h, w)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feed = {"image": plane[None, None]}
    for _ in range(args.warmup):
        sess.run(None, feed)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        logits, desc = sess.run(None, feed)
        times.append((time.perf_counter() - t) * 1e3)
    np.save(os.path.join(args.out_dir, "ort_logits.npy"), logits[0])
    np.save(os.path.join(args.out_dir, "ort_descriptors.npy"), desc[0])
    print(json.dumps({"median_ms": statistics.median(times), "threads": args.threads,
                      "onnxruntime": ort.__version__}))


if __name__ == "__main__":
    main()
