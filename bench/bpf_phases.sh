#!/usr/bin/env bash
# Where Ember's BPF sampling program spends its time, phase by phase (bpf/phase_times.h), on
# bench/overhead_work: the figures to decide what to make cheaper, where kernel.bpf_stats gives
# one mean. Needs an agent built with the CMake option EMBER_BPF_PHASE_TIMES (never a production
# build: each phase costs a timing point), and root.
#
#   cmake -S . -B build-phases -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_BPF_PHASE_TIMES=ON
#   ninja -C build-phases ember-agent bench_overhead_work
#   bench/bpf_phases.sh --build-dir build-phases [--hz 99] [--workers N] [--warmup 30]
#                       [--seconds 20] [--rounds 2] [-- EMBER_AGENT_FLAGS...]
#
# Each round runs the workload (WORKERS processes, default every CPU) under the agent, system-wide,
# and reads the per-CPU sums of the program's phase_ns map after the warm-up and --seconds later.
# It prints per phase the mean ns per sample over that window, and what the walk did per walk.
# A phase's time includes one timing point (the "timer" line), and samples of the tools this
# script runs (bpftool, python3: new processes, snapshots instead of walks) are in the window too.
# Cache misses make most of the time on this host, and its speed drifts between rounds: compare
# phases within a round.
set -euo pipefail

die() {
  echo "bpf_phases: $*" >&2
  exit 2
}

build_dir="" hz=99 workers=$(nproc) warmup=30 seconds=20 rounds=2
agent_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir)
      [[ -n ${2:-} ]] || die "--build-dir: expected a directory"
      build_dir=$2
      shift 2
      ;;
    --hz | --workers | --warmup | --seconds | --rounds)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, not '${2:-}'"
      declare "${1#--}=$2"
      shift 2
      ;;
    --)
      shift
      agent_flags=("$@")
      break
      ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ -n $build_dir ]] || die "--build-dir: name a build configured with -DEMBER_BPF_PHASE_TIMES=ON"
grep -q '^EMBER_BPF_PHASE_TIMES:BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null ||
  die "$build_dir is not configured with -DEMBER_BPF_PHASE_TIMES=ON"
agent=$build_dir/ember-agent
workload=$build_dir/bench/overhead_work
[[ -x $agent && -x $workload ]] || die "build $agent and $workload first"
[[ $EUID -eq 0 ]] || die "needs root (BPF, perf events)"
command -v bpftool >/dev/null || die "bpftool not found"

tmp=$(mktemp -d)
source "$(dirname "$0")/workload_run.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM

# The phase_ns map of the agent's program, summed over CPUs: one JSON object, index -> sum.
read_phases() {
  bpftool map dump name phase_ns -j | python3 -c '
import json, sys
def number(v):
    return v if isinstance(v, int) else int.from_bytes(bytes(int(x, 16) for x in v), "little")
sums = {}
for entry in json.load(sys.stdin):
    key = number(entry["key"])
    sums[key] = sum(number(v["value"]) for v in entry["values"])
print(json.dumps(sums))'
}

units=$("$workload" --calibrate 1 | tail -1)
units=$((units * (warmup + seconds + 15)))
echo "bpf_phases: $(nproc) CPUs, $workers workers, $hz Hz, warm-up ${warmup} s, ${seconds} s read, $rounds round(s)"
for ((round = 1; round <= rounds; round++)); do
  workload_start "$units" "$workers"
  "$agent" --sampling-hz "$hz" --output-dir "$tmp/out" --metrics-address "" "${agent_flags[@]}" \
    > "$tmp/agent.log" 2>&1 &
  agent_pid=$!
  running+=("$agent_pid")
  sleep "$warmup"
  kill -0 "$agent_pid" 2>/dev/null || die "the agent stopped: $(tail -3 "$tmp/agent.log")"
  before=$(read_phases) || die "no phase_ns map: is $agent built with EMBER_BPF_PHASE_TIMES?"
  sleep "$seconds"
  after=$(read_phases)
  kill -INT "$agent_pid" 2>/dev/null || true
  wait "$agent_pid" 2>/dev/null || true
  workload_stop
  echo "round $round:"
  python3 - "$before" "$after" <<'EOF'
import json, sys
before = {int(k): v for k, v in json.loads(sys.argv[1]).items()}
after = {int(k): v for k, v in json.loads(sys.argv[2]).items()}
d = {k: after[k] - before.get(k, 0) for k in after}
# bpf/phase_times.h's enum ember_phase.
names = {1: "header (buffer, time, cgroup, comm)", 2: "timer (an empty phase)", 3: "kernel stack",
         4: "user registers", 5: "stack end", 6: "CFI walk", 7: "snapshot / frame-pointer stack",
         8: "known and Python lookups, Python walk", 18: "thread-context lookup and read",
         9: "wake-up decision (ring buffer fill)",
         10: "ring buffer output"}
samples = d.get(0, 0)
if samples == 0:
    sys.exit("bpf_phases: no sample in the window")
walks = max(d.get(11, 0), 1)
total = sum(d.get(k, 0) for k in names)
print(f"  {samples} samples, {d.get(11, 0)} walks; {total / samples:.0f} ns a sample in all")
for k, name in names.items():
    print(f"  {name:40s} {d.get(k, 0) / samples:7.0f} ns a sample  {100 * d.get(k, 0) / total:5.1f}%")
frames = d.get(12, 0)
print(f"  per walk: {frames / walks:.1f} frames, {d.get(6, 0) / max(frames, 1):.0f} ns a frame, "
      f"{d.get(13, 0) / walks:.2f} mapping and {d.get(14, 0) / walks:.2f} row searches, "
      f"{d.get(15, 0) / walks:.2f} window reads of {d.get(16, 0) / max(d.get(15, 0), 1):.0f} bytes; "
      f"records of {d.get(17, 0) / samples:.0f} bytes; {d.get(19, 0)} thread-context reads")
EOF
done
