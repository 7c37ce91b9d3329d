#!/usr/bin/env bash
# The whole time a profiler's samples take in the interrupt that takes them, the same way for every
# profiler. bench/warm_cost.sh counts a profiler's own CPU plus its BPF programs' run time (issue
# 7's measure): for perf that leaves out all it does when a sample is taken (its callchain walk,
# perf-dwarf's 64 KiB stack copy, the write to its ring buffer), which runs in the interrupted
# task's time. Here every sample is timed from the start to the end of the hrtimer callback that
# takes it (perf_swevent_hrtimer: a cpu-clock event's sample, its overflow, its BPF program or its
# perf output), read with the timer:hrtimer_expire_entry and _exit tracepoints, which need neither
# kprobes nor fentry. Needs root, bpftrace, bpftool, and kernel.bpf_stats_enabled (set here).
#
#   bench/irq_time.sh [--build-dir build] [--hz 99] [--warmup 30] [--seconds 20] [--rounds 2]
#                     PROFILER... [-- EMBER_AGENT_FLAGS...]
#
# PROFILER: ember, perf-fp, perf-dwarf, bpftrace (as bench/warm_cost.sh runs them), or
# perf-nocallchain (perf record -a -e cpu-clock: a sample with no stack, the floor of what perf
# does). Each round runs each profiler in turn, alone with bench/overhead_work on every CPU; after
# the warm-up it traces for --seconds. One line per run: the callbacks timed, their mean time in
# µs, and the mean run time of the perf_event BPF programs over the same seconds (Ember's and
# bpftrace's sampling programs; bpf_stats, read once the tracer is attached and once it has
# exited), so "outside BPF" is what the kernel adds around them.
# Then per profiler the median over the rounds.
#
# What it leaves in: the tracer's own work between its two timestamps (the end of the entry
# handler, the start of the exit handler: a few hundred ns, the same for every profiler).
# Timer callbacks of every CPU count, idle ones too (a profiler that skips idle samples is cheap
# there). Measure on a quiet machine; the host's speed drifts (docs/benchmarks.md), so compare
# figures of one run of this script.
set -euo pipefail

die() {
  echo "irq_time: $*" >&2
  exit 2
}

build_dir=build hz=99 warmup=30 seconds=20 rounds=2
profilers=() agent_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir | --hz | --warmup | --seconds | --rounds)
      [[ -n ${2:-} ]] || die "$1: expected a value"
      case $1 in
        --build-dir) build_dir=$2 ;;
        *)
          [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, not '$2'"
          declare "${1#--}=$2"
          ;;
      esac
      shift 2
      ;;
    ember | perf-fp | perf-dwarf | perf-nocallchain | bpftrace)
      profilers+=("$1")
      shift
      ;;
    --)
      shift
      agent_flags=("$@")
      break
      ;;
    *) die "unknown argument '$1' (profilers: ember perf-fp perf-dwarf perf-nocallchain bpftrace)" ;;
  esac
done
((${#profilers[@]} > 0)) || die "name at least one profiler (ember perf-fp perf-dwarf perf-nocallchain bpftrace)"
((hz <= 1000)) || die "--hz: at most 1000"
[[ $EUID -eq 0 ]] || die "needs root (perf events, BPF, tracepoints)"
for tool in bpftrace bpftool python3; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
for p in "${profilers[@]}"; do
  case $p in
    ember) [[ -x $build_dir/ember-agent ]] || die "no $build_dir/ember-agent: build first" ;;
    perf-*) command -v perf >/dev/null || die "perf not found: apt-get install linux-perf" ;;
  esac
done
workload=$build_dir/bench/overhead_work
[[ -x $workload ]] || die "no $workload: build first"

tmp=$(mktemp -d)
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
source "$(dirname "$0")/workload_run.sh"
cleanup_more() { sysctl -qw kernel.bpf_stats_enabled="$stats_before" || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -qw kernel.bpf_stats_enabled=1

cat > "$tmp/trace.bt" <<EOF
BEGIN { printf("attached\\n"); }
tracepoint:timer:hrtimer_expire_entry /args->function == kaddr("perf_swevent_hrtimer")/ {
  @start[cpu] = nsecs;
}
tracepoint:timer:hrtimer_expire_exit /@start[cpu]/ {
  @ns = sum(nsecs - @start[cpu]);
  @n = count();
  delete(@start[cpu]);
}
interval:s:$seconds { exit(); }
EOF

# Run time and runs of every perf_event BPF program on the machine.
bpf_totals() {
  bpftool prog show -j | python3 -c '
import json, sys
programs = [p for p in json.load(sys.stdin) if p.get("type") == "perf_event"]
print(sum(p.get("run_time_ns", 0) for p in programs), sum(p.get("run_cnt", 0) for p in programs))'
}

period=$((1000000000 / hz))
units=$("$workload" --calibrate 1 | tail -1)
units=$((units * (warmup + seconds + 15)))
results=$tmp/results
: > "$results"

run_one() {
  local profiler=$1 cmd
  case $profiler in
    ember)
      cmd=("$build_dir/ember-agent" --sampling-hz "$hz" --output-dir "$tmp/out" --metrics-address ""
        "${agent_flags[@]}")
      ;;
    perf-fp) cmd=(perf record -a -g -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
    perf-dwarf) cmd=(perf record -a --call-graph dwarf,65528 -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
    perf-nocallchain) cmd=(perf record -a -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
    bpftrace) cmd=(bpftrace -e "profile:hz:$hz { @[ustack, kstack] = count(); }") ;;
  esac
  workload_start "$units"
  "${cmd[@]}" > "$tmp/profiler.log" 2>&1 &
  local profiler_pid=$!
  running+=("$profiler_pid")
  sleep "$warmup"
  kill -0 "$profiler_pid" 2>/dev/null || die "$profiler stopped in the warm-up: $(tail -3 "$tmp/profiler.log")"
  local before after traced
  # The BPF totals are read once the tracer is attached and right after it exits, so that its
  # start-up (compiling, which the profiler samples) stays out of them.
  bpftrace "$tmp/trace.bt" > "$tmp/trace.out" 2>&1 &
  local tracer_pid=$! i
  running+=("$tracer_pid")
  for ((i = 0; i < 600; i++)); do
    grep -q '^attached' "$tmp/trace.out" && break
    kill -0 "$tracer_pid" 2>/dev/null || die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
    sleep 0.05
  done
  before=$(bpf_totals)
  wait "$tracer_pid" || die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
  after=$(bpf_totals)
  traced=$(cat "$tmp/trace.out")
  kill -INT "$profiler_pid" 2>/dev/null || true
  wait "$profiler_pid" 2>/dev/null || true
  workload_stop
  python3 - "$profiler" "$before" "$after" "$traced" >> "$results" <<'EOF'
import re, sys
profiler, before, after, traced = sys.argv[1:5]
n = re.search(r"^@n: (\d+)", traced, re.M)
ns = re.search(r"^@ns: (\d+)", traced, re.M)
if not n or not ns or int(n.group(1)) == 0:
    sys.exit(f"irq_time: no {profiler} sample was timed (no perf_swevent_hrtimer callback)")
t0, c0 = map(int, before.split())
t1, c1 = map(int, after.split())
runs = c1 - c0
bpf = (t1 - t0) / runs / 1000 if runs > 0 else 0.0
irq = int(ns.group(1)) / int(n.group(1)) / 1000
print(profiler, n.group(1), f"{irq:.2f}", runs, f"{bpf:.2f}", f"{irq - bpf:.2f}")
EOF
  tail -1 "$results" | awk '{ printf "%-17s %7d callbacks  %6.2f µs each in the interrupt  BPF %6.2f µs a run (%d runs)  outside BPF %6.2f\n", $1, $2, $3, $5, $4, $6 }'
}

echo "irq_time: $(nproc) CPUs, $hz Hz, warm-up ${warmup} s, ${seconds} s traced, $rounds round(s)"
for ((round = 1; round <= rounds; round++)); do
  for p in "${profilers[@]}"; do run_one "$p"; done
done
echo "median over the rounds (µs per sample, in the interrupt; BPF; outside BPF):"
python3 - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[0], []).append((float(f[2]), float(f[4]), float(f[5])))
for name, values in rows.items():
    med = [statistics.median(v[i] for v in values) for i in range(3)]
    spread = ", ".join(f"{v[0]:.2f}" for v in values)
    print(f"  {name:17s} {med[0]:6.2f}  BPF {med[1]:6.2f}  outside {med[2]:6.2f}   (rounds: {spread})")
EOF
