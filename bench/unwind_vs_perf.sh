#!/usr/bin/env bash
# Profiles the no-frame-pointer fixture (tests/fixtures/unwind/cfi_chains) with Ember and with
# `perf record --call-graph dwarf,65528`, each on its own fresh fixture run, alternately, and prints
# for each: samples, the share whose stack reaches `main`, the profiler's CPU seconds per 1000
# samples, and for Ember the in-kernel cost per sample of its BPF program (issue 3). Needs root.
#
#   bench/unwind_vs_perf.sh [--runs 3] [--seconds 10] [--hz 99] [--snapshot-bytes 16384[,N...]]
#                           [--deep-stack FRAMES] [--no-perf]
#
# --snapshot-bytes takes a list: each repeat then runs Ember once per size (e.g. 0,16384,65536).
# --deep-stack profiles bench/deep_stack.c instead, whose leaf runs under FRAMES frames of about
# 1 KiB each, so that the snapshot limit binds.
#
# How each figure is measured:
# - Samples and the reach-main share: Ember's pprof files read with `pprof -traces`, perf's
#   samples with `perf script`. A sample is complete when one of its frames is `main`.
# - Profiler CPU: bash's `time` around the profiler, i.e. the wait4() rusage of the whole process
#   (every thread, start-up and final write included) once it has exited, to the millisecond.
#   Start-up is the part spent before the fixture starts: the sum over the profiler's threads of
#   /proc/PID/task/TID/schedstat (on-CPU ns), read once the profiler has gone idle after
#   attaching. "steady" per 1000 samples leaves it out, as an always-on agent amortises it.
# - Ember's BPF program runs in the interrupt of the sampled task, so its time is charged to the
#   fixture, not to the agent: it is added from kernel.bpf_stats (`bpftool prog show`,
#   run_time_ns) of the agent's own program, found through /proc/AGENT/fdinfo (other engineers'
#   agents may have programs of the same name loaded). Read just before the agent is stopped.
# - perf's DWARF unwinding happens in `perf script`, so its CPU is reported separately and summed
#   with perf record's. perf's own in-kernel cost (copying up to 64 KB of stack per sample) has
#   no hook on this kernel (no kprobes; tracing programs are refused) and is not included.
# - In-kernel cost per sample: bpf_stats' mean per run (run_time_ns / run_cnt, which counts the
#   cheap early exits for other processes too); the same total per recorded sample; and the
#   median and p90 over the runs that build/bpf_run_times saw one at a time (it reads bpf_stats
#   every 500 us, costing about 3% of a core meanwhile).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
seconds=10
hz=99
snapshot_list=16384
deep_frames=0
with_perf=1
usage() {
  sed -n '7,8p' "$0" | sed 's/^#  *//' >&2
  exit 2
}
while (($#)); do
  case $1 in
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --hz) hz=${2:?--hz needs a value}; shift 2 ;;
    --snapshot-bytes) snapshot_list=${2:?--snapshot-bytes needs a value}; shift 2 ;;
    --deep-stack) deep_frames=${2:?--deep-stack needs a value}; shift 2 ;;
    --no-perf) with_perf=0; shift ;;
    -h | --help) usage ;;
    *) echo "unwind_vs_perf: unknown argument '$1'" >&2; usage ;;
  esac
done
for value in "$runs" "$seconds" "$hz" "$deep_frames" ${snapshot_list//,/ }; do
  [[ $value =~ ^[0-9]+$ ]] || { echo "unwind_vs_perf: '$value' is not a number" >&2; exit 2; }
done
((runs > 0 && seconds > 0 && hz > 0)) || { echo "unwind_vs_perf: zero runs, seconds or hz" >&2; exit 2; }
IFS=, read -r -a snapshot_sizes <<<"$snapshot_list"

if [[ $EUID -ne 0 ]]; then
  echo "unwind_vs_perf: needs root (BPF, perf, bpf_stats): run it with sudo" >&2
  exit 1
fi
agent=build/ember-agent
run_times=build/bpf_run_times
fixture=build/tests/fixtures/unwind/cfi_chains
fixture_args=("$seconds")
if ((deep_frames)); then
  fixture=build/bench/deep_stack
  fixture_args=("$seconds" "$deep_frames")
fi
pprof=.cache/tools/pprof
if [[ ! -x $agent || ! -x $run_times || ! -x $fixture ]]; then
  echo "unwind_vs_perf: building (build/ lacks the agent, the fixture or bpf_run_times)" >&2
  bash scripts/build.sh
fi
for tool in bpftool "$pprof" $( ((with_perf)) && echo perf); do
  command -v "$tool" >/dev/null || {
    echo "unwind_vs_perf: $tool not found: run scripts/setup.sh" >&2
    exit 1
  }
done
fixture_exe=$(readlink -f "$fixture")

tmp=$(mktemp -d /tmp/ember-unwind-vs-perf.XXXXXX)
stats_sysctl_before=$(sysctl -n kernel.bpf_stats_enabled)
started=() # processes of the current run, killed by pid if the script ends early
cleanup() {
  local pid
  for pid in "${started[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  sysctl -q kernel.bpf_stats_enabled="$stats_sysctl_before" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -q kernel.bpf_stats_enabled=1
TIMEFORMAT='%3U %3S' # bash's `time`: user and system seconds, to the millisecond

die() {
  echo "unwind_vs_perf: $*" >&2
  exit 1
}
# wait_until SECONDS WHAT COMMAND...: runs COMMAND every 50 ms until it succeeds.
wait_until() {
  local limit=$(($1 * 20)) what=$2 i
  shift 2
  for ((i = 0; i < limit; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  die "timed out waiting for $what"
}
is_fixture() { [[ $(readlink "/proc/$1/exe") == "$fixture_exe" ]]; }
# Exited: no such process, or a zombie (an exited child of this script not yet waited for).
is_gone() { [[ ! -e /proc/$1 || $(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
has_perf_events() {
  local fd
  for fd in /proc/"$1"/fd/*; do [[ $(readlink "$fd") == *perf_event* ]] && return 0; done
  return 1
}
cpu_seconds() { awk '{ printf "%.3f", $1 + $2 }' "$1"; } # a `time` line: user sys
# On-CPU nanoseconds of a process so far, summed over its threads.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ ns += $1 } END { print ns + 0 }'; }
# Returns once the process used under 1 ms of CPU in 200 ms (start-up done); prints its CPU ns.
settled_cpu_ns() {
  local before after i
  before=$(cpu_ns "$1")
  for ((i = 0; i < 50; i++)); do
    sleep 0.2
    after=$(cpu_ns "$1")
    ((after - before < 1000000)) && break
    before=$after
  done
  echo "$after"
}

# Starts the fixture blocked on its start byte; sets fixture_pid. `go` lets it run.
start_fixture() {
  local dir=$1
  fixture_dir=$dir
  mkfifo "$dir/go"
  exec 3<>"$dir/go"
  "$fixture" "${fixture_args[@]}" <"$dir/go" >"$dir/fixture.out" 2>&1 &
  fixture_pid=$!
  started+=("$fixture_pid")
  wait_until 5 "the fixture to start" is_fixture "$fixture_pid"
}
go() {
  echo g >&3
  exec 3>&-
}
wait_fixture() {
  wait_until $((seconds + 30)) "the fixture to finish" is_gone "$fixture_pid"
  wait "$fixture_pid" || die "the fixture failed: $(cat "$fixture_dir/fixture.out")"
}

results=$tmp/results.tsv # one line per profiler run
printf 'profiler\trun\tsamples\tmain_pct\town_cpu_s\tstartup_s\tbpf_s\tscript_cpu_s'\
'\tbpf_mean_run_ns\tbpf_ns_per_sample\tbpf_median_ns\tbpf_p90_ns\ttimed_runs\tunwound\n' >"$results"

run_ember() {
  local run=$1 snapshot=$2 dir=$tmp/ember-$1-$2
  mkdir -p "$dir"
  start_fixture "$dir"
  { time "$agent" --pid "$fixture_pid" --sampling-hz "$hz" --stack-snapshot-bytes "$snapshot" \
    --output-dir "$dir/out" >"$dir/agent.log" 2>&1; } 2>"$dir/agent.time" &
  local time_pid=$!
  started+=("$time_pid")
  attached() {
    grep -q 'attached to' "$dir/agent.log" && return 0
    if is_gone "$time_pid"; then die "ember-agent exited: $(cat "$dir/agent.log")"; fi
    return 1
  }
  wait_until 20 "ember-agent to attach" attached
  local agent_pid prog_id startup_ns
  agent_pid=$(pgrep -P "$time_pid") || die "ember-agent exited: $(cat "$dir/agent.log")"
  started+=("$agent_pid")
  prog_id=$(awk '/^prog_id:/ { print $2 }' /proc/"$agent_pid"/fdinfo/* 2>/dev/null | sort -u)
  [[ $prog_id =~ ^[0-9]+$ ]] || die "cannot tell ember-agent's BPF program (ids: $prog_id)"
  "$run_times" --prog-id "$prog_id" --poll-us 500 >"$dir/run_times.out" 2>&1 &
  local poller_pid=$!
  started+=("$poller_pid")
  wait_until 5 "bpf_run_times to start" grep -q polling "$dir/run_times.out"
  startup_ns=$(settled_cpu_ns "$agent_pid")

  go
  wait_fixture
  # While the program is still loaded: its whole run time since the agent loaded it.
  local prog_json run_time_ns run_cnt
  prog_json=$(bpftool -j prog show id "$prog_id")
  run_time_ns=$(grep -o '"run_time_ns":[0-9]*' <<<"$prog_json" | cut -d: -f2)
  run_cnt=$(grep -o '"run_cnt":[0-9]*' <<<"$prog_json" | cut -d: -f2)
  kill -TERM "$poller_pid"
  wait "$poller_pid" || die "bpf_run_times failed: $(cat "$dir/run_times.out")"
  kill -TERM "$agent_pid"
  wait "$time_pid" || die "ember-agent failed: $(tail -5 "$dir/agent.log")"

  local samples main unwound timed
  read -r samples main < <(
    "$pprof" -traces -sample_index=samples "$dir"/out/cpu-*.pb.gz 2>/dev/null | awk -v pid="$fixture_pid" '
      function flush() { if (count && this_pid == pid) { n += count; if (has_main) m += count } }
      /^-----------\+/ { flush(); count = 0; has_main = 0; this_pid = ""; next }
      /^ *pid: / { this_pid = $2; next }
      /^ *[a-z_]+: / { next }
      !count && /^ +[0-9]+ +[^ ]/ { count = $1; sub(/^ +[0-9]+ +/, "") }
      count { sub(/^ +/, ""); if ($0 == "main") has_main = 1 }
      END { flush(); print n + 0, m + 0 }')
  unwound=$(sed -n 's/.*unwound from snapshots: \([0-9]*\) complete, \([0-9]*\) truncated, \([0-9]*\) failed.*/\1\/\2\/\3/p' "$dir/agent.log")
  timed=$(tail -n1 "$dir/run_times.out")
  field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<" $timed"; }
  awk -v OFS='\t' -v name="ember/$snapshot" -v run="$run" -v s="$samples" -v m="$main" \
    -v cpu="$(cpu_seconds "$dir/agent.time")" -v startup="$startup_ns" -v rt="$run_time_ns" \
    -v rc="$run_cnt" -v med="$(field median_ns)" -v p90="$(field p90_ns)" \
    -v timed="$(field sampled_runs)" -v unwound="${unwound:--}" 'BEGIN {
      print name, run, s, (s ? 100 * m / s : 0), cpu, startup / 1e9, rt / 1e9, "-",
            (rc ? rt / rc : 0), (s ? rt / s : 0), med, p90, timed, unwound }' >>"$results"
  echo "  ember/$snapshot run $run: $samples samples, $main reach main; bpf_run_times: $timed"
}

run_perf() {
  local run=$1 dir=$tmp/perf-$1
  mkdir -p "$dir"
  start_fixture "$dir"
  # A fixed period in ns, as Ember's cpu-clock events have (-F would let perf adjust it).
  { time perf record -e cpu-clock -c $((1000000000 / hz)) --call-graph dwarf,65528 \
    -p "$fixture_pid" -o "$dir/perf.data" >"$dir/record.log" 2>&1; } 2>"$dir/record.time" &
  local time_pid=$!
  started+=("$time_pid")
  local perf_pid startup_ns
  wait_until 10 "perf record to start" pgrep -P "$time_pid"
  perf_pid=$(pgrep -P "$time_pid")
  started+=("$perf_pid")
  wait_until 10 "perf record to open its events" has_perf_events "$perf_pid"
  startup_ns=$(settled_cpu_ns "$perf_pid") # the fixture waits meanwhile: no sample is lost

  go
  wait_fixture
  # perf record ends by itself once its target has exited.
  wait_until 30 "perf record to finish" is_gone "$perf_pid"
  wait "$time_pid" || die "perf record failed: $(tail -5 "$dir/record.log")"
  { time perf script -i "$dir/perf.data" -F pid,ip,sym >"$dir/script.txt" 2>"$dir/script.err"; } \
    2>"$dir/script.time" || die "perf script failed: $(tail -5 "$dir/script.err")"

  local samples main
  # One paragraph per sample: "PID" then one "ADDRESS SYMBOL" line per frame.
  read -r samples main < <(awk -v pid="$fixture_pid" -v RS= -F '\n' '
      $1 + 0 == pid { n++; for (i = 2; i <= NF; i++) if ($i ~ /^[ \t]+[0-9a-f]+ main$/) { m++; break } }
      END { print n + 0, m + 0 }' "$dir/script.txt")
  awk -v OFS='\t' -v run="$run" -v s="$samples" -v m="$main" \
    -v cpu="$(cpu_seconds "$dir/record.time")" -v startup="$startup_ns" \
    -v script="$(cpu_seconds "$dir/script.time")" 'BEGIN {
      print "perf/dwarf,65528", run, s, (s ? 100 * m / s : 0), cpu, startup / 1e9, "-", script,
            "-", "-", "-", "-", "-", "-" }' >>"$results"
  echo "  perf run $run: $samples samples, $main reach main; $(du -h "$dir/perf.data" | cut -f1) of perf.data"
  rm -f "$dir/perf.data" # up to 64 KB per sample
}

echo "unwind_vs_perf: ${fixture##*/} for ${seconds}s at ${hz} Hz per profiler run, ${runs} repeats" \
  "(load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs)"
for ((run = 1; run <= runs; run++)); do
  for snapshot in "${snapshot_sizes[@]}"; do
    run_ember "$run" "$snapshot"
    started=() # all reaped: their pids may be reused from now on
  done
  if ((with_perf)); then
    run_perf "$run"
    started=()
  fi
done

header() {
  printf '%-17s %3s %7s %6s | %6s %6s %6s %6s | %6s %6s %6s %6s %6s | %6s %6s %6s %6s %5s  %s\n' \
    profiler run samples main own start bpf script own/1k bpf/1k scr/1k total steady \
    mean per_s median p90 timed unwound
}
print_table() {
  awk -F '\t' '
    function opt(v, fmt) { return v == "-" ? "-" : sprintf(fmt, v) }
    NR == 1 { next }
    {
      own = $5; startup = $6; bpf = $7 + 0; script = $8 + 0; k = ($3 ? 1000 / $3 : 0)
      printf "%-17s %3s %7d %5.1f%% | %6.3f %6.3f %6s %6s | %6.3f %6s %6s %6.3f %6.3f | %6s %6s %6s %6s %5s  %s\n",
        $1, $2, $3, $4, own, startup, opt($7, "%.3f"), opt($8, "%.3f"),
        own * k, opt($7 == "-" ? "-" : bpf * k, "%.3f"), opt($8 == "-" ? "-" : script * k, "%.3f"),
        (own + bpf + script) * k, (own - startup + bpf + script) * k,
        opt($9, "%.0f"), opt($10, "%.0f"), opt($11, "%.0f"), opt($12, "%.0f"), $13, $14
    }' "$1"
}
# The median over runs of every numeric column, one line per profiler.
medians() {
  awk -F '\t' -v OFS='\t' '
    NR == 1 { print; next }
    { key[$1] = 1; n[$1]++; for (c = 3; c <= 13; c++) v[$1, c, n[$1]] = $c }
    END {
      for (k in key) {
        line = k OFS "med"
        for (c = 3; c <= 13; c++) {
          if (v[k, c, 1] == "-") { line = line OFS "-"; continue }
          m = n[k]; split("", a)
          for (i = 1; i <= m; i++) a[i] = v[k, c, i] + 0
          for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
          line = line OFS (m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2)
        }
        print line OFS "-"
      }
    }' "$results" | { IFS= read -r first; echo "$first"; sort; }
}

cat <<'EOF'

Columns: samples of the fixture, and the share reaching main. CPU seconds for the whole run:
own (ember-agent, or perf record), start (its share before the fixture started), bpf (Ember's BPF
program, from bpf_stats), script (perf script, where perf unwinds). Per 1000 samples: own, bpf,
script, total (all of them) and steady (total less start-up). In-kernel ns per sample of Ember's
program: bpf_stats mean per run, bpf_stats total per recorded sample (per_s), and the median and
p90 of the `timed` runs bpf_run_times saw one at a time. unwound: the agent's count of snapshots
unwound complete/truncated/failed.
EOF
echo
echo "Every run:"
header
print_table "$results"
echo
echo "Median over the $runs runs of each column:"
header
medians >"$tmp/medians.tsv"
print_table "$tmp/medians.tsv"
