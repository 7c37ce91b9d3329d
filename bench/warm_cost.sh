#!/usr/bin/env bash
# Warm, steady-state cost per sample (issue 7's target is stated "caches warm") of Ember or of a
# peer, which bench/overhead.sh's short runs mix with first-time and end-of-run work. Runs
# bench/overhead_work on every CPU under the profiler and reads the profiler's cost at two moments,
# after a warm-up and 2 s before the end: the difference over the samples taken in between.
# The default warm-up of 15 s puts Ember's first export (at 10 s: its first flame graph page, and
# the heap left over from start-up handed back) before the window. Needs root.
#
#   bench/warm_cost.sh [--build-dir build] [--seconds 60] [--warmup 15] [--hz 99]
#                      [--profiler ember|perf-fp|perf-dwarf|bpftrace] [--pid-only]
#                      [--beside OTHER_BUILD_DIR] [--with perf-fp|perf-dwarf|bpftrace]
#                      [-- EMBER_AGENT_FLAGS...]
#
# The profilers, system-wide at --hz, run as bench/overhead.sh runs them:
#   ember       build/ember-agent --sampling-hz HZ --duration SECONDS (the default)
#   perf-fp     perf record -a -g -e cpu-clock -c 1e9/HZ -o TMP/perf.data
#   perf-dwarf  the same with --call-graph dwarf,65528
#   bpftrace    bpftrace -e 'profile:hz:HZ { @[ustack, kstack] = count(); }'
# --pid-only (ember only) profiles only the workload's processes (--pid). Flags after -- go to
# ember-agent as they are (e.g. -- --stack-snapshot-bytes 4096).
# --beside OTHER_BUILD_DIR (ember only) runs OTHER_BUILD_DIR/ember-agent at the same time, with the
# same flags, and prints its line too and the ratios of its costs to this build's: an A/B of two
# builds in one run. Each agent samples the same CPUs in the same seconds (each its own timer, so
# not the same instants), and the other agent too; this host's speed drifts by up to 2x over
# minutes (docs/benchmarks.md), which separate runs cannot tell from a change.
# Use it with --pid-only: system-wide, each agent also samples the other and symbolizes its binary
# (tens of MB of DWARF), which is no cost of either build's own.
# --with PEER (ember, system-wide) runs that peer at the same time, over the same window, and prints
# its line too and Ember's cost all told over the peer's: a comparison the host's drift cannot
# move, where one profiler after the other (interleaved rounds) can land in a slow stretch of the
# host alone (33.5 ms in one round was seen against 12.2 and 12.9 in the rounds around it). Each
# samples the other as it samples the workload, and their samples in the window are alike. Its
# warm-up is 60 s (and --seconds 110) unless given: the peer's start-up (bpftrace compiles its
# script for seconds) and what Ember does about it (symbolizing, and building the CFI tables of
# the files bpftrace maps) are no per-sample
# cost, and must end before the window. It also times every sample of both in the interrupt that
# takes it (bench/hrtimer_trace.sh, as bench/irq_time.sh does), from a third into the warm-up to
# the window's end, and prints both profilers' cost counted whole: the same sum with each one's
# mean time in the interrupt per sample in place of its BPF run time, which counts perf's work
# there too (its callchain walk, its output; for dwarf the stack copy).
#
# How each figure is read:
# - ember: its own /metrics (ember_samples_total, process_resident_memory_bytes), its CPU clock
#   (below) and its BPF programs' run time and run count (kernel.bpf_stats: run_time_ns and
#   run_cnt of the program ids in /proc/PID/fdinfo, `bpftool prog show`) at the two moments. Ember
#   unwinds, symbolizes and aggregates as it goes, so its window holds all of its per-sample work.
#   Its samples in the window are, system-wide, its programs' firings, as bpftrace's are: the
#   samples it has read lag the firings by up to its longest wait (5 s), which would move a window
#   of 8,500 samples by up to 1,000. With --pid-only they are the samples its program wrote
#   (ember_bpf_samples_total; ember_samples_total, those read, from builds without it): the
#   program fires on every CPU's tick, for other processes too.
# - CPU in the window: the profiler process's user+sys at the two moments, from its
#   process CPU clock (clock_getcpuclockid(): every thread, exited ones too, in ns; the sum that
#   /proc/PID/stat's utime+stime give in ticks of 10 ms); for bpftrace plus its BPF programs' run
#   time in the window, read as for Ember (they run in the sampled task's interrupt and are charged
#   to that task, not to bpftrace).
# - A peer's samples in the window: bpftrace's, the difference of its programs' bpf_stats run_cnt
#   (every firing, on idle CPUs too: nothing tells those apart; and profile:hz asks the kernel for
#   a frequency, not perf's fixed period, so its rate can stray a little from HZ).
#   perf's are counted afterwards in perf.data: at each moment the script execs a marker (a symlink
#   to true named wcmarkPID-0 or -1), whose PERF_RECORD_COMM perf -a records in its own clock, and
#   `perf script -F pid,time --show-task-events` counts the samples between the two markers, so no
#   clock has to be converted. Samples of idle CPUs (pid 0) are left out, as bench/overhead.sh
#   leaves them out, because Ember takes none; the line says how many there were.
# - The work a peer defers to the end, reported apart: for perf, perf record's CPU after its SIGINT
#   (it reads perf.data again for build ids) plus the CPU of bench/overhead.sh's `perf script -F
#   comm,pid,ip,sym` over the whole perf.data (where perf symbolizes and, for dwarf, unwinds); for
#   bpftrace, its CPU after SIGINT (it symbolizes and prints its map then). CPU after the signal is
#   wait4() rusage (bench/rusage.py, in microseconds) less the CPU clock just before the signal.
#   Per 1000 samples of the whole run (perf: every non-idle sample in perf.data; bpftrace: run_cnt
#   at the signal). In-window plus end-of-run per 1000 is what a sample costs all told.
# - RSS: ember's current RSS at the second moment (its /metrics); a peer's VmHWM at the second
#   moment and at exit (rusage maxrss), and perf script's.
# System-wide, the deferred work grows with the other processes and binaries sampled (perf script
# and bpftrace symbolize per process, perf-dwarf unwinds them too): measure on a quiet machine.
# Not counted for perf in "all told" (issue 7's measure): the kernel's work per sample in the sampled
# task's interrupt (walking frame pointers; for dwarf, copying up to 64 KiB of stack), for which
# there is no bpf_stats; --with counts it in its "whole" figures.
# Prints one line: samples, CPU per 1000 samples, RSS (with --beside, one per agent and the ratios;
# with --with, one per profiler, the ratio, and both counted whole); before it, up to five of each
# agent's warnings and rereads of the kernel's symbols from its log.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build
seconds=""
warmup=""
hz=99
pid_only=0
profiler=ember
beside=""
with_peer=""
agent_flags=()
bad() {
  echo "warm_cost: $*" >&2
  exit 2
}
die() {
  echo "warm_cost: $*" >&2
  exit 1
}
need_value() { [[ $# -ge 2 && -n $2 ]] || bad "$1 needs a value"; }
while (($#)); do
  case $1 in
    --build-dir) need_value "$@"; build_dir=$2; shift 2 ;;
    --seconds) need_value "$@"; seconds=$2; shift 2 ;;
    --warmup) need_value "$@"; warmup=$2; shift 2 ;;
    --hz) need_value "$@"; hz=$2; shift 2 ;;
    --profiler) need_value "$@"; profiler=$2; shift 2 ;;
    --pid-only) pid_only=1; shift ;;
    --beside) need_value "$@"; beside=$2; shift 2 ;;
    --with) need_value "$@"; with_peer=$2; shift 2 ;;
    --) shift; agent_flags=("$@"); break ;;
    *) bad "unknown argument '$1'" ;;
  esac
done
if [[ -n $with_peer ]]; then
  seconds=${seconds:-110} warmup=${warmup:-60}
else
  seconds=${seconds:-60} warmup=${warmup:-15}
fi
for value in "$seconds" "$warmup" "$hz"; do
  [[ $value =~ ^[0-9]+$ ]] || bad "'$value' is not a whole number"
done
((seconds > warmup + 5)) || bad "--seconds must exceed --warmup by 5"
((hz > 0)) || bad "--hz must be at least 1"
case $profiler in
  ember | perf-fp | perf-dwarf | bpftrace) ;;
  *) bad "unknown profiler '$profiler' (ember, perf-fp, perf-dwarf or bpftrace)" ;;
esac
((pid_only == 0)) || [[ $profiler == ember ]] || bad "--pid-only is for --profiler ember only"
((${#agent_flags[@]} == 0)) || [[ $profiler == ember ]] || bad "flags after -- are for --profiler ember only"
[[ -z $beside ]] || [[ $profiler == ember ]] || bad "--beside is for --profiler ember only"
if [[ -n $with_peer ]]; then
  [[ $profiler == ember ]] || bad "--with is for --profiler ember only"
  ((pid_only == 0)) || bad "--with is system-wide: the peers profile every process"
  [[ -z $beside ]] || bad "--with and --beside: one or the other"
  case $with_peer in
    perf-fp | perf-dwarf | bpftrace) ;;
    *) bad "unknown peer '$with_peer' for --with (perf-fp, perf-dwarf or bpftrace)" ;;
  esac
fi
# The peer this run measures: the profiler, or the one --with runs beside Ember.
peer=$profiler
[[ -z $with_peer ]] || peer=$with_peer
[[ $(id -u) == 0 ]] || { echo "warm_cost: needs root (BPF, perf -a, bpf_stats)" >&2; exit 1; }
agent=$build_dir/ember-agent
workload=$build_dir/bench/overhead_work
agents=("$agent")
[[ -z $beside ]] || agents+=("$beside/ember-agent")
for f in "${agents[@]}" "$workload"; do
  [[ -x $f ]] || { echo "warm_cost: $f missing: cmake --build $build_dir" >&2; exit 1; }
done
need() { command -v "$1" >/dev/null || die "$1 not found: apt-get install $2"; }
need bpftool bpftool
case $peer in
  perf-*) need perf linux-perf ;;
  bpftrace) need bpftrace bpftrace ;;
esac

tmp=$(mktemp -d)
started=()
units=0
# sleep that a signal to this script interrupts (bash runs traps only between commands).
sleep_pid=""
pause() {
  sleep "$1" &
  sleep_pid=$!
  wait "$sleep_pid"
}
# Running: neither gone nor a zombie.
running() { [[ $(sed 's/.*) //' /proc/"$1"/stat 2>/dev/null | cut -d' ' -f1) == [^Z]* ]]; }
cleanup() {
  local pid i left
  [[ -z $sleep_pid ]] || kill "$sleep_pid" 2>/dev/null || true
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  pkill -f "overhead_work $units\$" 2>/dev/null || true
  # A peer writes out its data on SIGTERM: up to 10 s before the kill.
  for ((i = 0; i < 100; i++)); do
    left=0
    for pid in "${started[@]}"; do running "$pid" && left=1; done
    ((left)) || break
    sleep 0.1
  done
  for pid in "${started[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$stats_before" || true
  rm -rf "$tmp"
}
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
# Another program's clean-up can turn bpf_stats off under this run: then the BPF figures are low.
stats_check() {
  [[ $(sysctl -n kernel.bpf_stats_enabled) == 1 ]] ||
    echo "warm_cost: kernel.bpf_stats_enabled was turned off during the run: BPF time is low" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -qw kernel.bpf_stats_enabled=1

# The workload: units for twice the run, as one process alone does them, so that it outlasts the
# window under two profilers and in the host's slow stretches (a worker done early leaves its CPU
# idle; a run with 16% idle firings was seen). It is stopped at the end.
units=$("$workload" --calibrate 1 | tail -1)
units=$((units * (2 * seconds + 10)))
exec 3> >("$workload" "$units" > "$tmp/workload.out" 2>&1)
workload_pid=$!
started+=("$workload_pid")
printf g >&3
sleep 0.5

# The readings at the window's two moments come from one Python process started before the
# profiler: a reading must not start programs, which a system-wide profiler would then sample,
# open and symbolize inside the window (that cost belongs to process churn, which the soak of
# bench/overhead.sh measures). Asked "PID [PORT]", it answers
# "CPU_NS BPF_NS BPF_RUNS SAMPLES RSS TABLES":
# - CPU_NS: PID's user+sys so far, every thread, exited ones too: its process CPU clock
#   (clock_getcpuclockid: ~pid << 3 | CPUCLOCK_SCHED), the sum /proc/PID/stat's utime+stime give in
#   10 ms ticks and wait4() in microseconds;
# - BPF_NS, BPF_RUNS: run_time_ns and run_cnt summed over the BPF programs PID holds, from the
#   fdinfo of their fds (kernel.bpf_stats);
# - SAMPLES, RSS, TABLES: ember_bpf_samples_total (or ember_samples_total),
#   process_resident_memory_bytes and ember_bpf_unwind_table_build_seconds_total from the agent's
#   /metrics on PORT (0 without a port). Tables are built once per file while it is in use: in
#   the window only for binaries first sampled then (on this machine: the script's own bash, the
#   sandbox's tools).
coproc PROBE {
  exec python3 -u -c '
import os, sys, time, urllib.request
first = True
for line in sys.stdin:
    args = line.split()
    pid = int(args[0])
    if first and len(args) > 1:
        # Busy for 0.3 s at the first reading (in the warm-up) so that the profiler samples this
        # process, and has built its tables, before the window.
        first = False
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            pass
    cpu = time.clock_gettime_ns(~pid << 3 | 2)
    programs = {}
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(f"{fdinfo}/{fd}") as f:
                fields = dict(l.split(":", 1) for l in f.read().splitlines() if ":" in l)
        except OSError:
            continue
        if "run_time_ns" in fields:
            programs[fields["prog_id"].strip()] = (int(fields["run_time_ns"]), int(fields["run_cnt"]))
    samples = rss = tables = 0
    written = -1
    if len(args) > 1:
        url = f"http://127.0.0.1:{args[1]}/metrics"
        for l in urllib.request.urlopen(url, timeout=2).read().decode().splitlines():
            if l.startswith("ember_samples_total "):
                samples = float(l.split()[1])
            elif l.startswith("ember_bpf_samples_total "):
                written = float(l.split()[1])
            elif l.startswith("process_resident_memory_bytes "):
                rss = float(l.split()[1])
            elif l.startswith("ember_bpf_unwind_table_build_seconds_total "):
                tables = float(l.split()[1])
    # The samples its program wrote as they were taken, where the agent counts them; else those
    # it has read (an older build).
    print(cpu, sum(p[0] for p in programs.values()), sum(p[1] for p in programs.values()),
          written if written >= 0 else samples, rss, tables)
'
}
started+=("$PROBE_PID")
# probe PID [PORT]: one reading, as above, into $reading (not a subshell: it has no coproc fds).
reading=""
probe() {
  echo "$@" >&"${PROBE[1]}"
  read -r reading <&"${PROBE[0]}" || die "the reading of pid $1 failed"
}

# --- A peer: run under bench/rusage.py for its CPU and peak RSS at exit ---
period=$((1000000000 / hz))
case $peer in
  perf-fp) cmd=(perf record -a -g -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
  perf-dwarf)
    cmd=(perf record -a --call-graph dwarf,65528 -e cpu-clock -c "$period" -o "$tmp/perf.data") ;;
  bpftrace) cmd=(bpftrace -e "profile:hz:$hz { @[ustack, kstack] = count(); }") ;;
  *) cmd=() ;;
esac
prof_pid="" time_pid=""
# unstart OLD [NEW]: OLD leaves the pids the clean-up signals, NEW (if given) takes its place.
unstart() {
  local pid kept=()
  for pid in "${started[@]}"; do
    if [[ $pid == "$1" ]]; then
      [[ -z ${2:-} ]] || kept+=("$2")
    else
      kept+=("$pid")
    fi
  done
  started=("${kept[@]}")
}
peer_start() {
  local i
  bench/rusage.py "$tmp/time" 3>&- "${cmd[@]}" >"$tmp/profiler.log" 2>&1 &
  time_pid=$!
  started+=("$time_pid")
  for ((i = 0; i < 100; i++)); do
    # By name: a pyenv python3 shim runs helpers of its own before it execs python.
    prof_pid=$(pgrep -P "$time_pid" -x "${cmd[0]}" || true)
    [[ -n $prof_pid ]] && break
    sleep 0.05
  done
  [[ -n $prof_pid ]] || die "$peer did not start: $(tail -3 "$tmp/profiler.log")"
  # From now on the peer is signalled, not time: time reaps it and reports, then exits.
  unstart "$time_pid" "$prof_pid"
  ln -s "$(type -P true)" "$tmp/wcmark$$-0"
  ln -s "$(type -P true)" "$tmp/wcmark$$-1"
}
attached() {
  local fd
  if [[ $peer == bpftrace ]]; then
    grep -qs prog_id /proc/"$prof_pid"/fdinfo/*
  else
    for fd in /proc/"$prof_pid"/fd/*; do [[ $(readlink "$fd") == *perf_event* ]] && return 0; done
    return 1
  fi
}
alive() {
  running "$prof_pid" || die "$peer exited $1: $(tail -3 "$tmp/profiler.log")"
}
# peer_moment 0|1: the window's first or last moment. perf gets a marker exec (see the header),
# then the peer's CPU is read.
c0="" b0="" n0="" c1="" b1="" n1="" hwm=""
peer_moment() {
  if (($1 == 0)); then
    alive "during the warm-up"
    attached || die "$peer not attached after the $warmup s warm-up"
  else
    alive "in the window"
  fi
  [[ $peer != perf-* ]] || "$tmp/wcmark$$-$1"
  probe "$prof_pid"
  if (($1 == 0)); then
    read -r c0 b0 n0 _ <<<"$reading"
  else
    read -r c1 b1 n1 _ <<<"$reading"
    hwm=$(awk '/^VmHWM/ { print $2 }' /proc/"$prof_pid"/status)
    [[ $peer != bpftrace ]] || stats_check
  fi
}
# After the window: stops the peer, counts what it deferred to the end, prints its line and
# writes its cost all told per 1000 samples to $tmp/peer.sum.
peer_finish() {
  local c_stop n_stop user sys maxrss script_s=0 script_rss=0 idle=0 lost=0 n_window n_total marks
  pgrep -f "overhead_work $units\$" >/dev/null || die "the workload ended inside the window"
  pause 2
  alive "before the end"
  probe "$prof_pid"
  read -r c_stop _ n_stop _ <<<"$reading"
  kill -INT "$prof_pid"
  wait "$time_pid" || true
  unstart "$prof_pid"  # the peer is reaped: its pid may be reused
  read -r user sys maxrss < <(grep -E '^[0-9.]+ [0-9.]+ [0-9]+$' "$tmp/time" | tail -1) ||
    die "no rusage from bench/rusage.py: $(tail -3 "$tmp/time")"
  if [[ $peer == perf-* ]]; then
    # Non-idle samples between the markers and in all; idle ones in the window.
    read -r n_window n_total idle marks < <(
      perf script -i "$tmp/perf.data" -F pid,time --show-task-events 2>"$tmp/count.err" |
        awk -v m0="exec: wcmark$$-0:" -v m1="exec: wcmark$$-1:" '
          index($0, m0) { phase = 1; marks++; next }
          index($0, m1) { phase = 2; marks++; next }
          NF == 2 && $2 ~ /:$/ { if ($1 == 0) { if (phase == 1) i++; next } t++; if (phase == 1) w++ }
          END { print w + 0, t + 0, i + 0, marks + 0 }')
    ((marks == 2)) || die "perf.data lacks the window's markers: $(tail -3 "$tmp/count.err")"
    bench/rusage.py "$tmp/script.time" perf script -i "$tmp/perf.data" \
      -F comm,pid,ip,sym >"$tmp/script.txt" 2>"$tmp/script.err" ||
      die "perf script failed: $(tail -3 "$tmp/script.err")"
    read -r script_s script_rss < <(awk '{ print $1 + $2, $3 }' "$tmp/script.time")
    lost=$(cat "$tmp/profiler.log" "$tmp/script.err" |
      awk '{ while (match($0, /lost [0-9]+ chunks/)) { split(substr($0, RSTART, RLENGTH), w, " ")
               n += w[2]; $0 = substr($0, RSTART + RLENGTH) } } END { print n + 0 }')
  else
    n_window=$((n1 - n0))
    n_total=$n_stop
  fi

  python3 - "$peer" "$hz" "$n_window" "$n_total" "$idle" "$c0" "$c1" "$c_stop" "$b0" "$b1" \
    "$user" "$sys" "$script_s" "$hwm" "$maxrss" "$script_rss" "$lost" "$tmp/peer.sum" <<'EOF'
import sys
profiler, hz = sys.argv[1:3]
(n, total, idle, c0, c1, c_stop, b0, b1, user, sys_s, script_s, hwm, maxrss, script_rss,
 lost) = map(float, sys.argv[3:18])
n, total = max(1.0, n), max(1.0, total)
window = (c1 - c0) / 1e3 / n
bpf = (b1 - b0) / 1e3 / n
after_stop = max(0.0, user + sys_s - c_stop / 1e9)
if profiler == "bpftrace":
    inside = f"bpftrace {window:.1f} ms + BPF {bpf:.1f} ms = {window + bpf:.1f} ms"
    end = after_stop * 1e6 / total
    at_end = f"bpftrace after SIGINT {end:.1f} ms"
    rss = f"bpftrace {hwm / 1024:.0f} MB in the window, {maxrss / 1024:.0f} MB at exit"
    idle_note = ""
else:
    inside = f"perf record {window:.1f} ms"
    record_end = after_stop * 1e6 / total
    script = script_s * 1e6 / total
    end = record_end + script
    at_end = (f"perf record after SIGINT {record_end:.1f} ms + perf script {script:.1f} ms = "
              f"{end:.1f} ms")
    rss = (f"perf record {hwm / 1024:.0f} MB in the window, {maxrss / 1024:.0f} MB at exit, "
           f"perf script {script_rss / 1024:.0f} MB")
    idle_note = f" ({idle:.0f} idle left out)"
    if lost:
        rss += f"; perf lost {lost:.0f} chunks"
print(f"warm_cost: {profiler}, {hz} Hz, system-wide: {n:.0f} samples in the window{idle_note}, "
      f"{total:.0f} in the run; per 1000 samples: in the window {inside}; deferred to the end (per "
      f"1000 of the run's samples) {at_end}; sum {window + bpf + end:.1f} ms; peak RSS {rss}")
with open(sys.argv[18], "w") as f:
    print(window + bpf + end, bpf, file=f)
EOF
}

if [[ $profiler != ember ]]; then
  peer_start
  pause "$warmup"
  peer_moment 0
  pause $((seconds - warmup - 2))
  peer_moment 1
  peer_finish
  exit 0
fi

# --- Ember (and with --with, its peer beside it) ---
if [[ -n $with_peer ]]; then
  source bench/hrtimer_trace.sh
  hrtimer_trace_write "$tmp/trace.bt" || die "no struct perf_event hw.hrtimer in the kernel's BTF"
  peer_start
fi
pid_args=()
if ((pid_only)); then
  parent=$(pgrep -f -o "overhead_work $units")
  for child in $(pgrep -P "$parent"); do pid_args+=(--pid "$child"); done
fi
agent_pids=() ports=()
for ((a = 0; a < ${#agents[@]}; a++)); do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${agents[a]}" --sampling-hz "$hz" --duration "${seconds}s" --output-dir "$tmp/out$a" \
    --metrics-address "127.0.0.1:$port" "${pid_args[@]}" "${agent_flags[@]}" > "$tmp/agent$a.log" 2>&1 &
  agent_pids+=($!)
  ports+=("$port")
  started+=($!)
done
# read_all: one reading of every agent, into readings[a].
readings=()
read_all() {
  for ((a = 0; a < ${#agents[@]}; a++)); do
    probe "${agent_pids[a]}" "${ports[a]}"
    readings[a]=$reading
  done
}

# A reading a third into the warm-up too: the probe maps its HTTP and TLS libraries then, and
# runs for 0.3 s, so Ember samples it and builds their tables (libpython and libcrypto: 0.2 s)
# before the window instead of in it. Left to the window's first reading, that landed in the
# window whenever a sample caught the probe, about one run in two.
pause $((warmup / 3))
read_all
tracer_pid=""
if [[ -n $with_peer ]]; then
  bpftrace "$tmp/trace.bt" > "$tmp/trace.out" 2>&1 &
  tracer_pid=$!
  started+=("$tracer_pid")
  hrtimer_trace_attached "$tmp/trace.out" "$tracer_pid" ||
    die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
fi
pause $((warmup - warmup / 3))
read_all
[[ -z $with_peer ]] || peer_moment 0
first=("${readings[@]}")
pause $((seconds - warmup - 2))
read_all
if [[ -n $with_peer ]]; then
  peer_moment 1
  hrtimer_trace_stop "$tracer_pid" || die "the hrtimer trace did not stop at SIGINT"
  wait "$tracer_pid" || die "the hrtimer trace failed: $(tail -2 "$tmp/trace.out")"
  unstart "$tracer_pid"
  hrtimer_trace_figures "$tmp/trace.out" "${agent_pids[0]}" > "$tmp/ember.irq"
  hrtimer_trace_figures "$tmp/trace.out" "$prof_pid" > "$tmp/peer.irq"
fi
stats_check
# The peer stops 2 s after the window, as the agents do.
[[ -z $with_peer ]] || peer_finish
for ((a = 0; a < ${#agents[@]}; a++)); do
  wait "${agent_pids[a]}" ||
    { echo "warm_cost: ${agents[a]} failed: $(tail -3 "$tmp/agent$a.log")" >&2; exit 1; }
  # What may explain an odd figure: the agent's warnings, and its rereads of the kernel's symbols
  # (a read costs 40 to 100 ms, 4 to 10 ms per 1000 samples of a 60 s window here).
  grep -hE " (warning|error) |kernel symbols read again" "$tmp/agent$a.log" | cut -c 1-200 |
    sed "s|^|warm_cost: ${agents[a]} log: |" | head -5 || true
done
python3 - "$hz" "$pid_only" "$tmp/ember.sum" "${agents[@]}" -- "${first[@]}" -- "${readings[@]}" <<'EOF'
import sys
hz, pid_only, sum_file = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
rest = sys.argv[4:]
agents = rest[: rest.index("--")]
rest = rest[rest.index("--") + 1 :]
first, last = rest[: rest.index("--")], rest[rest.index("--") + 1 :]
costs = []
for name, r0, r1 in zip(agents, first, last):
    c0, b0, n0, s0, _, t0 = map(float, r0.split())
    c1, b1, n1, s1, rss, t1 = map(float, r1.split())
    recorded = s1 - s0
    n = max(1.0, recorded if pid_only else n1 - n0)
    agent = (c1 - c0) / 1e3 / n
    bpf = (b1 - b0) / 1e3 / n
    tables = (t1 - t0) * 1e6 / n
    costs.append((c1 - c0, b1 - b0))
    if len(costs) == 1:
        with open(sum_file, "w") as f:
            print(agent + bpf, bpf, file=f)
    taken = "samples" if pid_only else f"samples (program firings; {recorded:.0f} recorded)"
    who = f"{name}: " if len(agents) > 1 else ""
    print(f"warm_cost: {who}{hz} Hz, {'the workload only' if pid_only else 'system-wide'}: "
          f"{n:.0f} {taken} in the window; per 1000 samples: agent {agent:.1f} ms + BPF "
          f"{bpf:.1f} ms = {agent + bpf:.1f} ms (of the agent's, building tables for processes "
          f"first seen in the window: {tables:.1f} ms); RSS {rss / 1048576:.0f} MB")
if len(costs) == 2:
    # Ratios of the CPU and BPF time in the window, not per sample read: both agents take the
    # same samples, and what each has read lags by up to its wait (8% of a 60 s window).
    (a0, p0), (a1, p1) = costs
    print(f"warm_cost: {agents[1]} over {agents[0]}: agent {a1 / max(a0, 1e-9):.3f}, "
          f"BPF {p1 / max(p0, 1e-9):.3f}, total {(a1 + p1) / max(a0 + p0, 1e-9):.3f}")
EOF
if [[ -n $with_peer ]]; then
  python3 - "$with_peer" "$tmp/ember.sum" "$tmp/peer.sum" "$tmp/ember.irq" "$tmp/peer.irq" <<'EOF'
import sys
peer = sys.argv[1]
(ember, ember_bpf), (other, other_bpf) = (map(float, open(f).read().split()) for f in sys.argv[2:4])
(ember_n, ember_ns), (other_n, other_ns) = (map(int, open(f).read().split()) for f in sys.argv[4:6])
if ember_n == 0 or other_n == 0:
    sys.exit(f"warm_cost: no sample of {'Ember' if ember_n == 0 else peer} was timed in the interrupt")
print(f"warm_cost: Ember over {peer}, all told per 1000 samples, same window: {ember / max(other, 1e-9):.3f}")
# µs a sample in the interrupt is ms per 1000 samples.
ember_irq, other_irq = ember_ns / ember_n / 1e3, other_ns / other_n / 1e3
ember_whole, other_whole = ember - ember_bpf + ember_irq, other - other_bpf + other_irq
print(f"warm_cost: in the interrupt, µs a sample: Ember {ember_irq:.2f} ({ember_n} timed), {peer} "
      f"{other_irq:.2f} ({other_n}); counted whole per 1000 samples: Ember {ember_whole:.1f} ms, "
      f"{peer} {other_whole:.1f} ms; Ember over {peer}, whole, same window: "
      f"{ember_whole / max(other_whole, 1e-9):.3f}")
EOF
fi
