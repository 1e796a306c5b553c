#!/usr/bin/env bash
# Builds a Fast DDS peer, tools/peers/fastdds_NAME.cpp (with fastdds_raw.hpp, against Debian's
# libfastrtps-dev), into target/peers/fastdds_NAME when it is missing or older than its sources;
# prints its path.
#   build-fastdds-peer.sh NAME      (reader: a subscriber; requester: a service client)
set -euo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: build-fastdds-peer.sh reader|requester}
src=tools/peers/fastdds_$name.cpp
out=target/peers/fastdds_$name
if [ ! -x "$out" ] || [ "$src" -nt "$out" ] || [ tools/peers/fastdds_raw.hpp -nt "$out" ]; then
    mkdir -p target/peers
    g++ -std=c++17 -O2 "$src" -o "$out" -lfastrtps -lfastcdr
fi
echo "$PWD/$out"
