#!/usr/bin/env bash
# README command 2 (and CI): installs what is missing, builds, and runs every test: the `unit`
# tier and the `bpf` tier, which needs root and loads real BPF programs; then the `unit` tier again
# under AddressSanitizer and UndefinedBehaviorSanitizer, and each fuzz target for 20 s
# (scripts/sanitize-and-fuzz.sh), which also runs part of the `bpf` tier against the sanitized agent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# One run of both labels (bpf tests are RUN_SERIAL, so nothing competes with them for the CPU).
# A skipped test or an empty selection fails it (scripts/strict-ctest.sh).
(cd build && ../scripts/as-root.sh ../scripts/strict-ctest.sh --output-on-failure --timeout 300 -j2)
scripts/sanitize-and-fuzz.sh 20
