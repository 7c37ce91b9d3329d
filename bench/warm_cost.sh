#!/usr/bin/env bash
# Ember's warm, steady-state cost per sample (issue 7's target is stated "caches warm"), which
# bench/overhead.sh's short runs mix with first-time work (opening and symbolizing every binary,
# the final export). Runs bench/overhead_work on every CPU under ember-agent and reads the agent's
# own /metrics twice, after a warm-up and just before the end, and its BPF program's run time from
# bpf_stats at the same two points: the difference over the samples taken in between. Needs root.
#
#   bench/warm_cost.sh [--build-dir build] [--seconds 60] [--warmup 10] [--hz 99] [--pid-only]
#
# --pid-only profiles only the workload's processes (--pid), leaving out whatever else runs.
# Prints one line: samples, agent CPU and BPF time per 1000 samples, RSS.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
seconds=60
warmup=10
hz=99
pid_only=0
while (($#)); do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --hz) hz=$2; shift 2 ;;
    --pid-only) pid_only=1; shift ;;
    *) echo "warm_cost: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for value in "$seconds" "$warmup" "$hz"; do
  [[ $value =~ ^[0-9]+$ ]] || { echo "warm_cost: '$value' is not a whole number" >&2; exit 2; }
done
((seconds > warmup + 5)) || { echo "warm_cost: --seconds must exceed --warmup by 5" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "warm_cost: needs root (BPF, bpf_stats)" >&2; exit 1; }
agent=$build_dir/ember-agent
workload=$build_dir/bench/overhead_work
for f in "$agent" "$workload"; do
  [[ -x $f ]] || { echo "warm_cost: $f missing: cmake --build $build_dir" >&2; exit 1; }
done

tmp=$(mktemp -d)
started=()
units=0
cleanup() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  pkill -f "overhead_work $units\$" 2>/dev/null || true
  wait 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$stats_before" || true
  rm -rf "$tmp"
}
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
trap cleanup EXIT
sysctl -qw kernel.bpf_stats_enabled=1

# The workload: about 2 s of units a second more than the run needs, so it outlasts the agent.
units=$("$workload" --calibrate 1 | tail -1)
units=$((units * (seconds + 5)))
exec 3> >("$workload" "$units" > "$tmp/workload.out" 2>&1)
started+=($!)
printf g >&3
sleep 0.5
pid_args=()
if ((pid_only)); then
  parent=$(pgrep -f -o "overhead_work $units")
  for child in $(pgrep -P "$parent"); do pid_args+=(--pid "$child"); done
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$agent" --sampling-hz "$hz" --duration "${seconds}s" --output-dir "$tmp/out" \
  --metrics-address "127.0.0.1:$port" "${pid_args[@]}" > "$tmp/agent.log" 2>&1 &
agent_pid=$!
started+=("$agent_pid")

# samples, agent CPU seconds, RSS bytes, and the agent's BPF run time in ns, at this moment.
reading() {
  local metrics ids bpf_ns
  metrics=$(curl -s --max-time 2 "http://127.0.0.1:$port/metrics")
  ids=$(grep -h prog_id /proc/"$agent_pid"/fdinfo/* 2>/dev/null | awk '{ print $2 }' | sort -u)
  bpf_ns=0
  for id in $ids; do
    bpf_ns=$((bpf_ns + $(bpftool prog show id "$id" -j | python3 -c \
      'import json, sys; print(json.load(sys.stdin).get("run_time_ns", 0))')))
  done
  awk -v bpf="$bpf_ns" '/^ember_samples_total / { s = $2 } /^process_cpu_seconds_total / { c = $2 }
    /^process_resident_memory_bytes / { r = $2 } END { print s, c, r, bpf }' <<<"$metrics"
}
sleep "$warmup"
read -r s0 c0 r0 b0 < <(reading)
sleep $((seconds - warmup - 2))
read -r s1 c1 r1 b1 < <(reading)
wait "$agent_pid" || { echo "warm_cost: ember-agent failed: $(tail -3 "$tmp/agent.log")" >&2; exit 1; }
python3 - "$s0" "$c0" "$b0" "$s1" "$c1" "$b1" "$r1" "$hz" "$pid_only" <<'EOF'
import sys
s0, c0, b0, s1, c1, b1, r1 = map(float, sys.argv[1:8])
hz, pid_only = sys.argv[8], sys.argv[9] == "1"
n = max(1.0, s1 - s0)
agent = (c1 - c0) * 1e6 / n
bpf = (b1 - b0) / 1e3 / n
print(f"warm_cost: {hz} Hz, {'the workload only' if pid_only else 'system-wide'}: {n:.0f} samples "
      f"in the window; per 1000 samples: agent {agent:.1f} ms + BPF {bpf:.1f} ms = "
      f"{agent + bpf:.1f} ms; RSS {r1 / 1048576:.0f} MB "
      f"(agent CPU is in ticks of 10 ms: +-{10e3 / n:.1f} ms per 1000 here)")
EOF
