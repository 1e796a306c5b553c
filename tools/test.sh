#!/usr/bin/env bash
# The test command (README, .ci/run, and what `colcon test` should agree with): the gates first
# (rustfmt, then clippy on every target with warnings as errors, so Cargo.toml's [lints] hold),
# then makes sure ./.venv has the Python peers the tests compare against (PyPI rosbags: ROS 2
# message definitions and CDR; cyclonedds: an independent DDS stack for the node tests, which run
# inside `unshare -n`; mcap + mcap-ros2-support: Foxglove's MCAP readers; evo: the trajectory
# metrics' reference; plyfile: an independent PLY reader; opencv-python-headless: the classic RGB-D
# odometry the live tracking test compares against), then runs every test of every crate of the workspace with the node
# feature, the model tests again at the AVX2 level, then 5 s of each fuzz target (tools/fuzz.sh; skipped when arguments pick some tests).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian packages: cmake and libclang-dev build Cyclone DDS (the cyclors crate compiles it from its
# bundled source; the node's outputs go out through it), g++ and libfastrtps-dev build the Fast DDS
# subscriber and service-client peers (tests/dds_transport.rs, tests/node_services_fastdds.rs), colcon with its ROS and CMake support, ament-cmake and
# python3-rosidl (rosidl's .msg parser) build and check the package as a workspace would
# (tests/colcon.rs).
missing=()
for p in cmake libclang-dev g++ libfastrtps-dev colcon python3-colcon-ros python3-colcon-cmake \
    python3-colcon-test-result ament-cmake python3-rosidl; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cargo fmt --all --check
# Every crate with the node, then the binary as the offline job builds it (no DDS). In the
# release profile, so that the build scripts (Cyclone DDS's C build among them) and proc macros
# they run are the ones the release tests below reuse rather than build again.
cargo clippy --release --workspace --all-targets --features sp_dust3r/node --locked -- -D warnings
cargo clippy --release -p sp_dust3r --all-targets --locked -- -D warnings
# The node crate as the fuzz targets build it: without Cyclone DDS.
cargo clippy --release -p sp_dust3r_node --no-default-features --locked -- -D warnings
if ! .venv/bin/python -c "import rosbags, numpy, cyclonedds, mcap_ros2, evo, plyfile, PIL, cv2" 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet rosbags numpy cyclonedds mcap-ros2-support evo plyfile opencv-python-headless
fi
export SP_DUST3R_PYTHON="$PWD/.venv/bin/python"
if [ $# -gt 0 ]; then
    cargo test --release --features node "$@"
else
    cargo test --release --workspace --features sp_dust3r/node
    # The models against upstream again at the AVX2 level (SP_DUST3R_CPU_LEVEL caps it): our
    # machines have AVX-512 or only AVX2, and the linear layers take another kernel on each.
    # Same packages and features as above, so the test binaries are reused, not rebuilt.
    SP_DUST3R_CPU_LEVEL=avx2 cargo test --release --workspace --features sp_dust3r/node --test dust3r_tiny \
        --test superpoint_network --test superpoint_real --test tensor_ops
    # Last, as nothing after it may use this run's build: the fresh clone builds its crates over
    # it (cargo names a path crate's artifacts by its place in the workspace, the same in the
    # clone) and its binary becomes target/release/sp_dust3r.
    cargo test --release --workspace --features sp_dust3r/node --test offline_build -- --ignored
    tools/fuzz.sh --seconds 5 --opt-level 1
fi
