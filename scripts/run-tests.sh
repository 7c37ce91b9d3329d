#!/usr/bin/env bash
# README command 2 (and CI): installs what is missing, builds, and runs every test: the `unit`
# tier and the `bpf` tier, which needs root and loads real BPF programs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
# One run of both labels (bpf tests are RUN_SERIAL, so nothing competes with them for the CPU).
../scripts/as-root.sh ctest --output-on-failure --timeout 300 -j2
