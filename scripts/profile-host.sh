#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and profiles this machine for 30 seconds
# into ./ember-profiles/ (pprof files and flamegraph.html). Extra arguments go to ember-agent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
scripts/as-root.sh build/ember-agent --duration 30s --output-dir ./ember-profiles "$@"
echo
echo "Open the flame graph: $PWD/ember-profiles/flamegraph.html"
echo "Or read a profile:    .cache/tools/pprof -top ember-profiles/cpu-*.pb.gz"
