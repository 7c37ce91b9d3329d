#!/usr/bin/env bash
# README command 2 (and CI): installs what is missing, builds, and runs every test: the `unit`
# tier and the `bpf` tier, which needs root and loads real BPF programs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
sudo_cmd=()
if [[ $EUID -ne 0 ]]; then sudo_cmd=(sudo); fi
cd build
# One run of both labels (bpf tests are RUN_SERIAL, so nothing competes with them for the CPU).
"${sudo_cmd[@]}" ctest --output-on-failure --timeout 300 -j2
