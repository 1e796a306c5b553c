#!/usr/bin/env bash
# Builds the Fast DDS subscriber peer (fastdds_reader.cpp, against Debian's libfastrtps-dev) into
# target/peers/fastdds_reader when it is missing or older than its source; prints its path.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=tools/peers/fastdds_reader.cpp
out=target/peers/fastdds_reader
if [ ! -x "$out" ] || [ "$src" -nt "$out" ]; then
    mkdir -p target/peers
    g++ -std=c++17 -O2 "$src" -o "$out" -lfastrtps -lfastcdr
fi
echo "$PWD/$out"
