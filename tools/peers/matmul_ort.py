"""ONNX Runtime CPU MatMul peer for `sp_dust3r_bench dust3r`: the machine's practical GEMM rate.

One MatMul node, activations (M x K) times a constant weight (K x N) held as an initializer, the
way a transformer's linear layer runs in ONNX Runtime (PyPI `onnx`, `onnxruntime`). Prints one JSON
line: the median time and GFLOP/s (2 M N K per product), the thread count, and the largest
difference from numpy's product, so the figure is known to be of a real product.

    python matmul_ort.py --m 1024 --k 1024 --n 4096 --threads 2 --repeat 20
"""
import argparse
import json
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=1024)
    ap.add_argument("--k", type=int, default=1024)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.m, args.k), dtype=np.float32)
    b = (rng.standard_normal((args.k, args.n), dtype=np.float32) / np.sqrt(args.k)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])],
        "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [args.m, args.k])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [args.m, args.n])],
        [numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    times = []
    for i in range(args.warmup + args.repeat):
        t = time.perf_counter()
        (c,) = session.run(None, {"a": a})
        if i >= args.warmup:
            times.append(time.perf_counter() - t)
    median = statistics.median(times)
    diff = float(np.abs(c - a.astype(np.float64) @ b.astype(np.float64)).max())
    print(json.dumps({
        "median_ms": median * 1e3,
        "gflops": 2.0 * args.m * args.n * args.k / median / 1e9,
        "threads": args.threads,
        "max_abs_diff": diff,
        "onnxruntime": ort.__version__,
    }))


if __name__ == "__main__":
    main()
