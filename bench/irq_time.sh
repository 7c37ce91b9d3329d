#!/usr/bin/env bash
# The whole time a profiler's samples take in the interrupt that takes them, the same way for every
# profiler, and its cost counted both ways. bench/warm_cost.sh counts a profiler's own CPU plus its
# BPF programs' run time (issue 7's measure): for perf that leaves out all it does when a sample is
# taken (its callchain walk, perf-dwarf's 64 KiB stack copy, the write to its ring buffer), which
# runs in the interrupted task's time. Here every sample is timed from the start to the end of the
# hrtimer callback that takes it (perf_swevent_hrtimer: a cpu-clock event's sample, its overflow,
# its BPF program or its perf output), read with the timer:hrtimer_expire_entry and _exit
# tracepoints, which need neither kprobes nor fentry, and put down to the profiler whose event it
# is (the perf_event around the hrtimer, its owner's thread group). Needs root, bpftrace, bpftool,
# and kernel.bpf_stats_enabled (set here).
#
#   bench/irq_time.sh [--build-dir build] [--hz 99] [--warmup 30] [--seconds 20] [--rounds 2]
#                     [--together] PROFILER... [-- EMBER_AGENT_FLAGS...]
#
# PROFILER: ember, perf-fp, perf-dwarf, bpftrace (as bench/warm_cost.sh runs them), or
# perf-nocallchain (perf record -a -e cpu-clock: a sample with no stack, the floor of what perf
# does). Each round runs each profiler in turn, alone with bench/overhead_work on every CPU; with
# --together it runs them all at once, so every figure of a round comes from the same seconds
# (this host's speed drifts by up to 2x over minutes: docs/benchmarks.md). After the warm-up it
# traces for --seconds. One line per profiler and round:
# - its callbacks timed and their mean time in µs ("in the interrupt");
# - the mean run time of its perf_event BPF programs over the same seconds (bpf_stats of the
#   programs it holds, read once the tracer is attached and once it has exited), so "outside BPF"
#   is what the kernel adds around them;
# - its own CPU (user+sys of every thread: its process CPU clock) over the same seconds, per 1000
#   of its callbacks;
# - per 1000 callbacks, issue 7's measure (own CPU + BPF run time) and the whole cost (own CPU +
#   every callback's time in the interrupt), which counts perf's work in the interrupt too.
# Then per profiler the medians over the rounds, and with --together each profiler's whole cost
# over Ember's, round by round.
#
# What it leaves in: the tracer's own work between its two timestamps (the end of the entry
# handler, the start of the exit handler: a few hundred ns, the same for every profiler).
# Callbacks on idle CPUs count too (a profiler that skips idle samples is cheap there). What it
# leaves out: work a peer defers to the end of its run (perf record's build-id pass, perf script's
# symbolizing: bench/warm_cost.sh reports it), so a peer's whole cost here is a floor.
set -euo pipefail

die() {
  echo "irq_time: $*" >&2
  exit 2
}

build_dir=build hz=99 warmup=30 seconds=20 rounds=2 together=0
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
    --together)
      together=1
      shift
      ;;
    ember | perf-fp | perf-dwarf | perf-nocallchain | bpftrace)
      [[ " ${profilers[*]} " != *" $1 "* ]] || die "$1 named twice"
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
if ((together)); then
  ((${#profilers[@]} > 1)) || die "--together: name two profilers or more"
  [[ " ${profilers[*]} " == *" ember "* ]] || die "--together compares with Ember: name ember"
  # Two perf records on one machine is allowed, but their output is not told apart here.
  (($(printf '%s\n' "${profilers[@]}" | grep -c '^perf-') <= 1)) || die "--together: one perf at a time"
fi
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
source "$(dirname "$0")/hrtimer_trace.sh"
cleanup_more() { sysctl -qw kernel.bpf_stats_enabled="$stats_before" || true; }
# The reading process (below) ends first: cleanup waits for every child.
trap '[[ -z ${PROBE_PID:-} ]] || kill "$PROBE_PID" 2>/dev/null; cleanup' EXIT
trap 'exit 130' INT TERM
sysctl -qw kernel.bpf_stats_enabled=1

hrtimer_trace_write "$tmp/trace.bt" "$seconds" || die "no struct perf_event hw.hrtimer in the kernel's BTF"

# Readings come from one Python process started before any profiler: a reading must not start a
# program, which the profilers would then sample and (Ember) read and symbolize in the window.
# Asked "PID...", it answers per pid "CPU_NS BPF_NS BPF_RUNS": the pid's user+sys so far (its
# process CPU clock, every thread, exited ones too) and run_time_ns and run_cnt summed over the
# perf_event BPF programs it holds (fdinfo of its fds: prog_type 7, kernel.bpf_stats).
coproc PROBE {
  exec python3 -u -c '
import os, sys, time
for line in sys.stdin:
    out = []
    for pid in map(int, line.split()):
        cpu = time.clock_gettime_ns(~pid << 3 | 2)
        programs = {}
        for fd in os.listdir(f"/proc/{pid}/fdinfo"):
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    fields = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
            except OSError:
                continue
            if "run_time_ns" in fields and fields.get("prog_type", "").strip() == "7":
                programs[fields["prog_id"].strip()] = (int(fields["run_time_ns"]), int(fields["run_cnt"]))
        out += [cpu, sum(p[0] for p in programs.values()), sum(p[1] for p in programs.values())]
    print(*out)
'
}
probe() {
  echo "$@" >&"${PROBE[1]}"
  read -r reading <&"${PROBE[0]}" || die "the reading of pids $* failed"
}

period=$((1000000000 / hz))
units=$("$workload" --calibrate 1 | tail -1)
units=$((units * (warmup + seconds + 15)))
results=$tmp/results
: > "$results"

# run_set ROUND PROFILER...: the workload under these profilers at once, traced once warm.
run_set() {
  local round=$1 p cmd pids=()
  shift
  workload_start "$units"
  for p in "$@"; do
    case $p in
      ember)
        cmd=("$build_dir/ember-agent" --sampling-hz "$hz" --output-dir "$tmp/out" --metrics-address ""
          "${agent_flags[@]}")
        ;;
      perf-fp) cmd=(perf record -a -g -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
      perf-dwarf) cmd=(perf record -a --call-graph dwarf,65528 -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
      perf-nocallchain) cmd=(perf record -a -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
      bpftrace) cmd=(bpftrace -e "profile:hz:$hz { @[ustack, kstack] = count(); }") ;;
    esac
    "${cmd[@]}" > "$tmp/$p.log" 2>&1 &
    pids+=("$!")
    running+=("$!")
  done
  sleep "$warmup"
  local i
  for i in "${!pids[@]}"; do
    kill -0 "${pids[$i]}" 2>/dev/null ||
      die "${*:i+1:1} stopped in the warm-up: $(tail -3 "$tmp/${*:i+1:1}.log")"
  done
  # The readings are taken once the tracer is attached and right after it exits, so that its
  # start-up (compiling, which the profilers sample) stays out of them.
  bpftrace "$tmp/trace.bt" > "$tmp/trace.out" 2>&1 &
  local tracer_pid=$!
  running+=("$tracer_pid")
  hrtimer_trace_attached "$tmp/trace.out" "$tracer_pid" ||
    die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
  probe "${pids[@]}"
  local before=$reading
  wait "$tracer_pid" || die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
  probe "${pids[@]}"
  local after=$reading
  for i in "${pids[@]}"; do kill -INT "$i" 2>/dev/null || true; done
  for i in "${pids[@]}"; do wait "$i" 2>/dev/null || true; done
  workload_stop
  local traced=()
  for i in "${pids[@]}"; do traced+=("$(hrtimer_trace_figures "$tmp/trace.out" "$i")"); done
  python3 - "$round" "$*" "$before" "$after" "${traced[@]}" >> "$results" <<'EOF'
import sys
round_, names, before, after = sys.argv[1:5]
names = names.split()
before, after = list(map(int, before.split())), list(map(int, after.split()))
for i, name in enumerate(names):
    n, ns = map(int, sys.argv[5 + i].split())
    if n == 0:
        sys.exit(f"irq_time: no {name} sample was timed (no perf_swevent_hrtimer callback of its events)")
    cpu, bpf_ns, runs = (after[3 * i + k] - before[3 * i + k] for k in range(3))
    irq = ns / n / 1000               # µs a callback
    bpf = bpf_ns / runs / 1000 if runs > 0 else 0.0  # µs a run
    own = cpu / n / 1000                             # µs a callback: ms per 1000
    measure = own + bpf_ns / n / 1000
    print(round_, name, n, f"{irq:.2f}", runs, f"{bpf:.2f}", f"{irq - bpf:.2f}", f"{own:.2f}",
          f"{measure:.2f}", f"{own + irq:.2f}")
EOF
  local line
  tail -n $# "$results" | while read -r line; do
    set -- $line
    printf '%-17s %6d callbacks  %6.2f µs each in the interrupt (BPF %5.2f, outside %5.2f)  per 1000: own CPU %6.2f ms, issue-7 measure %6.2f, whole %6.2f\n' \
      "$2" "$3" "$4" "$6" "$7" "$8" "$9" "${10}"
  done
}

mode="each alone"
((together == 0)) || mode="all at once"
echo "irq_time: $(nproc) CPUs, $hz Hz, warm-up ${warmup} s, ${seconds} s traced, $rounds round(s), $mode"
for ((round = 1; round <= rounds; round++)); do
  if ((together)); then
    run_set "$round" "${profilers[@]}"
  else
    for p in "${profilers[@]}"; do run_set "$round" "$p"; done
  fi
done
echo "medians over the rounds (µs a callback in the interrupt, its BPF, outside BPF; ms per 1000 callbacks: own CPU, issue-7 measure, whole):"
python3 - "$results" "$together" <<'EOF'
import statistics, sys
rows, by_round = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    rows.setdefault(f[1], []).append([float(f[i]) for i in (3, 5, 6, 7, 8, 9)])
    by_round.setdefault(f[0], {})[f[1]] = (float(f[8]), float(f[9]))
for name, values in rows.items():
    med = [statistics.median(v[i] for v in values) for i in range(6)]
    spread = ", ".join(f"{v[5]:.2f}" for v in values)
    print(f"  {name:17s} {med[0]:6.2f}  BPF {med[1]:6.2f}  outside {med[2]:6.2f}   own {med[3]:6.2f}"
          f"  issue-7 {med[4]:6.2f}  whole {med[5]:6.2f}   (whole by round: {spread})")
if sys.argv[2] == "1":
    print("Ember over each peer, same window (issue-7 measure; whole):")
    for round_, costs in by_round.items():
        ember = costs["ember"]
        print(f"  round {round_}: " + "  ".join(
            f"{name} {ember[0] / c[0]:.3f}; {ember[1] / c[1]:.3f}" for name, c in costs.items()
            if name != "ember"))
EOF
