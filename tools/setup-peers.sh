#!/usr/bin/env bash
# Creates ./.venv with the peers the benchmarks compare against (PyPI: numpy, onnx, onnxruntime,
# opencv-python-headless, safetensors;
# with --torch also torch, a multi-GB download, for `bench dust3r`).
#
#     tools/setup-peers.sh && cargo run --release -p sp_dust3r_bench -- superpoint --weights DIR
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet numpy onnx onnxruntime opencv-python-headless safetensors
if [ "${1:-}" = "--torch" ]; then
    .venv/bin/pip install --quiet torch
fi
.venv/bin/python -c "import onnxruntime, onnx, numpy; print('onnxruntime', onnxruntime.__version__, 'onnx', onnx.__version__)"
