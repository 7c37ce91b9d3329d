#!/usr/bin/env bash
# What reading the OpenTelemetry thread context costs the BPF program per sample, with against
# without, for both ways a thread reaches its TLS (docs/benchmarks.md, "Thread context"). Needs
# root. Configures and builds build-phases/ (-DEMBER_BPF_PHASE_TIMES=ON: each phase costs a timing
# point, never a production build) unless --build-dir names another such build.
#
#   bench/thread_context_cost.sh [--build-dir build-phases] [--hz 999] [--window-ms 1000] [--rounds 20]
#
# For each model (exe: the variable in the executable, an offset from the thread pointer; gd: in
# a library by general dynamic, through the thread's DTV) build/thread_context_cost profiles one
# busy helper whose main thread has a record and whose second thread has none, and sets and removes
# its context_procs entry in alternate windows.
set -euo pipefail

die() {
  echo "thread_context_cost: $*" >&2
  exit 2
}

build_dir=build-phases hz=999 window_ms=1000 rounds=20
while (($#)); do
  case $1 in
    --build-dir)
      [[ -n ${2:-} ]] || die "$1: expected a value"
      build_dir=$2
      shift 2
      ;;
    --hz | --window-ms | --rounds)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, not '${2:-}'"
      case $1 in
        --hz) hz=$2 ;;
        --window-ms) window_ms=$2 ;;
        --rounds) rounds=$2 ;;
      esac
      shift 2
      ;;
    *) die "unknown argument $1" ;;
  esac
done
((EUID == 0)) || die "needs root (it loads the BPF program)"
repo=$(cd "$(dirname "$0")/.." && pwd)
if [[ ! -f $build_dir/CMakeCache.txt ]]; then
  cmake -S "$repo" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DEMBER_BPF_PHASE_TIMES=ON >/dev/null
fi
grep -q '^EMBER_BPF_PHASE_TIMES:BOOL=ON' "$build_dir/CMakeCache.txt" ||
  die "$build_dir is not configured with -DEMBER_BPF_PHASE_TIMES=ON"
cmake --build "$build_dir" --target thread_context_cost >/dev/null
for model in exe gd; do
  "$build_dir/thread_context_cost" --model "$model" --hz "$hz" --window-ms "$window_ms" \
    --rounds "$rounds"
done
