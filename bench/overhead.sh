#!/usr/bin/env bash
# Ember's whole cost next to the profilers a user would otherwise run (issue 7): the same fixed-work
# workload (bench/overhead_work.c: one process per core, no frame pointers, 24 to 39 frames, 4096
# paths) run alone and under each profiler, every configuration once per round in a random order,
# and a soak mode. Needs root.
#
#   bench/overhead.sh [--build-dir build] [--rounds 3] [--seconds 15] [--settle 1] [--warm 0]
#                     [--configs LIST] [--quick] [--write-docs]
#                     | --soak MINUTES [--soak-processes 200] [--build-dir build]
#                     | --toggle SECONDS [--configs LIST] [--warm 10] [--settle 1]
#
# LIST is a comma-separated subset of: alone, ember19, ember99, perf-fp, perf-dwarf, bpftrace,
# ember99-idle, timer99 (default: the first six; alone is always added, the others are compared
# with it). --settle is how long a profiler runs before the workload starts (its start-up, such as
# Ember reading the symbols and building the unwind tables of every running binary, is then not in
# the workload's time). --warm is how many seconds of work each workload process does, untimed,
# before its timed work (then the profiler has seen its stacks: its caches are warm). Use both to
# measure the steady state's slowdown. --quick is a smoke run: 1 round of 4 s. --write-docs
# puts the figures into docs/benchmarks.md (or --docs FILE), between its "bench/overhead.sh"
# markers, replaced on every write.
#
# The configurations, all system-wide, because Ember profiles every process by default and
# bpftrace's profile probe fires on every CPU: comparing like with like means perf gets -a too.
#   ember19, ember99   build/ember-agent --sampling-hz 19|99 --metrics-address= --output-dir TMP
#   perf-fp            perf record -a -g -e cpu-clock -c 10101010 (99 Hz, a fixed period as Ember's)
#   perf-dwarf         the same with --call-graph dwarf,65528
#   bpftrace           bpftrace -e 'profile:hz:99 { @[ustack, kstack] = count(); }'
# and two floors, which take no stacks, to tell the 99 Hz timer's own cost from a profiler's:
#   ember99-idle       ember99 with --pid of a process that sleeps throughout: Ember's program runs
#                      on every tick and returns after its pid filter; the agent has nothing to do
#   timer99            bpftrace -e 'profile:hz:99 { @ = count(); }'
# Each run: start the workload blocked on its start byte, start the profiler, wait until it is
# attached and --settle seconds more, start the workload, wait for it to report its elapsed time,
# stop the profiler (SIGTERM for Ember, SIGINT for perf and bpftrace: bpftrace prints and
# symbolizes its map then), and only then end the workload, so every profiler can still read its
# maps.
#
# How each figure is measured (the methods of bench/unwind_vs_perf.sh, issue 3):
# - CPU: the profiler's user+sys from wait4() rusage (/usr/bin/time, every thread, start-up and
#   final write included); plus the run time of the profiler's own BPF programs (kernel.bpf_stats,
#   `bpftool prog show` run_time_ns of the program ids found in /proc/PID/fdinfo, read just before
#   the stop: Ember's and bpftrace's programs run in the sampled task's interrupt and are charged to
#   it, not to the profiler); plus for perf the CPU of `perf script`, where perf symbolizes and, for
#   dwarf, unwinds. Divided by every sample the profiler took (all processes: it is system-wide).
#   "start" is the profiler's CPU before the workload starts (/proc/PID/task/*/schedstat), and
#   "steady" per 1000 samples leaves it out. Not counted: perf's in-kernel cost of copying up to
#   64 KiB of stack per sample (no hook on this kernel), which favours perf-dwarf.
# - Throughput: the workload's own elapsed time for its fixed work; per round, alone's elapsed over
#   the configuration's (1.000 = no slowdown); the median over rounds and the min..max, and the
#   mean with its 95% bootstrap interval.
# - Peak RSS: wait4()'s ru_maxrss of the profiler, its VmHWM at exit (perf record's, not perf script's).
# - Bytes per sample: what the profiler wrote (Ember's pprof files and flame graph, perf.data,
#   bpftrace's printed map) over its samples.
# - Reach main: the share of the workload's samples (those with an ow_* frame; bpftrace's map has
#   no pid) whose stack has a `main` frame: Ember's pprof files through `pprof -traces`, perf's
#   through `perf script`, bpftrace's printed stacks.
# - Ember's start to first sample: its log line "first sample N ms after start (taken; read at M
#   ms)": N is when its BPF program took the sample (the sample's timestamp), M when the agent read
#   it, after loading the kernel's symbols (samples wait in the ring buffer). Every profiler
#   starts with half a second of work on one CPU running (bench/overhead_work --calibrate 0.5):
#   an idle CPU gives no sample, and the first would otherwise wait for whatever ran next.
# --soak MINUTES: Ember at 99 Hz system-wide while 200 (--soak-processes) long-lived processes
#   each work 2 ms a second, and about 40 processes a second start and exit (a
#   quarter of them each in a new cgroup under the cgroup v2 mount), exporting every 5 s to a local
#   OTLP http/protobuf listener that is up 20 s and down 20 s; every 10 s it prints Ember's RSS,
#   anonymous and file-backed RSS, peak RSS, its heap (allocated and held free by malloc), its symbol
#   and CFI cache bytes, flame graph nodes (thousands), open fds and ember_processes_tracked (from
#   its /metrics and /proc).
# --toggle SECONDS: the slowdown of sampling measured inside one run, for each configuration of
#   LIST in turn (default ember99,bpftrace): with the profiler started and settled,
#   build/bench/sampling_toggle runs the same workload on every CPU without a break for --warm
#   seconds (default 10) and then SECONDS more, turning the profiler's perf events off and on in
#   pairs of phases of random length and order, and prints the throughput with sampling on over
#   off: the mean over the pairs with its 95% bootstrap interval. Runs of their own differ by 1.5
#   to 3.5% on this host, pairs 1 s apart by far less. What it leaves out: whatever the profiler
#   costs with no samples to take (Ember: its wake-up every 5 s), and work that lands in either
#   kind of phase alike (Ember's export every 10 s of what it aggregated): `bench/warm_cost.sh`
#   accounts for those in CPU.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
# Under set -e a failing command ends the script: say which, rather than end silently.
trap 'echo "overhead: stopped by a failed command at line $LINENO: $BASH_COMMAND" >&2' ERR

default_configs=(alone ember19 ember99 perf-fp perf-dwarf bpftrace)
all_configs=("${default_configs[@]}" ember99-idle timer99) # and the two floors
build_dir=build
rounds=3
seconds=15
settle=1
warm=0
config_list=$(IFS=,; echo "${default_configs[*]}")
write_docs=0
docs=docs/benchmarks.md
quick=0
soak_minutes=0
soak_processes=200
toggle_seconds=0
configs_given=0
bad() {
  echo "overhead: $* (see bench/overhead.sh --help)" >&2
  exit 2
}
need_value() { [[ $# -ge 2 && -n $2 ]] || bad "$1 needs a value"; }
while (($#)); do
  case $1 in
    --build-dir) need_value "$@"; build_dir=$2; shift 2 ;;
    --rounds) need_value "$@"; rounds=$2; shift 2 ;;
    --seconds) need_value "$@"; seconds=$2; shift 2 ;;
    --settle) need_value "$@"; settle=$2; shift 2 ;;
    --warm) need_value "$@"; warm=$2; shift 2 ;;
    --configs) need_value "$@"; config_list=$2; configs_given=1; shift 2 ;;
    --quick) rounds=1; seconds=4; quick=1; shift ;;
    --write-docs) write_docs=1; shift ;;
    --docs) need_value "$@"; docs=$2; shift 2 ;;
    --soak) need_value "$@"; soak_minutes=$2; shift 2 ;;
    --soak-processes) need_value "$@"; soak_processes=$2; shift 2 ;;
    --toggle) need_value "$@"; toggle_seconds=$2; shift 2 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) bad "unknown argument '$1'" ;;
  esac
done
for value in "$rounds" "$seconds" "$settle" "$warm" "$soak_minutes" "$soak_processes" \
  "$toggle_seconds"; do
  [[ $value =~ ^[0-9]+$ ]] || bad "'$value' is not a whole number"
done
((rounds > 0 && seconds > 0)) || bad "--rounds and --seconds must be at least 1"
IFS=, read -r -a configs <<<"$config_list"
for config in "${configs[@]}"; do
  [[ " ${all_configs[*]} " == *" $config "* ]] || bad "unknown configuration '$config'"
done
if ((toggle_seconds)); then
  ((configs_given)) || configs=(ember99 bpftrace)
  [[ " ${configs[*]} " != *" alone "* ]] || bad "--toggle compares sampling on and off: no 'alone'"
  ((warm)) || warm=10
  ((toggle_seconds >= 20)) || bad "--toggle needs at least 20 seconds"
else
  [[ " ${configs[*]} " == *" alone "* ]] || configs=(alone "${configs[@]}")
fi

if [[ $EUID -ne 0 ]]; then
  echo "overhead: needs root (BPF, perf -a, bpf_stats, cgroups): run it with sudo" >&2
  exit 1
fi
agent=$build_dir/ember-agent
workload=$build_dir/bench/overhead_work
toggler=$build_dir/bench/sampling_toggle
pprof=.cache/tools/pprof
if [[ ! -x $agent || ! -x $workload ]]; then
  echo "overhead: $agent or $workload missing:" \
    "cmake --build $build_dir --target ember-agent bench_overhead_work" >&2
  exit 1
fi
# need TOOL PACKAGE: a missing tool is one line naming the Debian package that has it.
need() { command -v "$1" >/dev/null || { echo "overhead: $1 not found: apt-get install $2" >&2; exit 1; }; }
need /usr/bin/time time
need bpftool bpftool
need shuf coreutils
wants() { [[ " ${configs[*]} " == *" $1"* ]]; }
if ((soak_minutes)); then
  need python3 python3
  need curl curl
else
  if wants perf; then need perf linux-perf; fi
  if wants bpftrace || wants timer99; then need bpftrace bpftrace; fi
  if ((toggle_seconds)) && [[ ! -x $toggler ]]; then
    echo "overhead: $toggler missing: cmake --build $build_dir --target bench_sampling_toggle" >&2
    exit 1
  fi
  if ((!toggle_seconds)) && wants ember && [[ ! -x $pprof ]]; then
    echo "overhead: $pprof not found: run scripts/setup.sh" >&2
    exit 1
  fi
fi

tmp=$(mktemp -d /tmp/ember-overhead.XXXXXX)
stats_sysctl_before=$(sysctl -n kernel.bpf_stats_enabled)
started=()  # every process this script started, killed by pid on the way out
cgroups=()  # cgroup directories the soak created
cg_root=""  # the cgroup v2 mount, once the soak has found it
cleanup() {
  local pid dir i
  trap - EXIT INT TERM
  for pid in "${started[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.2
  for pid in "${started[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The soak's churn makes its cgroups in a subshell: they are found by name.
  for dir in "${cgroups[@]}" "${cg_root:-/nonexistent}"/ember-overhead-soak-$$-*; do
    for ((i = 0; i < 20; i++)); do
      [[ -d $dir ]] || break
      rmdir "$dir" 2>/dev/null && break
      sleep 0.1
    done
  done
  sysctl -q kernel.bpf_stats_enabled="$stats_sysctl_before" || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sysctl -q kernel.bpf_stats_enabled=1

die() {
  echo "overhead: $*" >&2
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
  die "timed out after $limit/20 s waiting for $what"
}
# Exited: no such process, or a zombie not yet waited for.
is_gone() { [[ ! -e /proc/$1 || $(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) == Z ]]; }
# stop PID SIGNAL SECONDS: signals PID, waits for it to exit, then kills it.
stop() {
  kill -"$2" "$1" 2>/dev/null || return 0
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    is_gone "$1" && return 0
    sleep 0.05
  done
  echo "overhead: pid $1 ignored SIG$2 for $3 s: killed" >&2
  kill -KILL "$1" 2>/dev/null || true
}
has_perf_events() {
  local fd
  for fd in /proc/"$1"/fd/*; do [[ $(readlink "$fd") == *perf_event* ]] && return 0; done
  return 1
}
# A starting or stopping profiler opens and closes fds under the glob: awk then fails on a gone
# file, which is no error here (nor a message of the ERR trap).
prog_ids() { { awk '/^prog_id:/ { print $2 }' /proc/"$1"/fdinfo/* 2>/dev/null || true; } | sort -u; }
has_progs() { [[ -n $(prog_ids "$1") ]]; }
# Sum of run_time_ns over the BPF programs PID holds.
bpf_run_ns() {
  local id total=0 ns
  for id in $(prog_ids "$1"); do
    ns=$(bpftool -j prog show id "$id" 2>/dev/null | grep -o '"run_time_ns":[0-9]*' | cut -d: -f2 ||
      true)
    total=$((total + ${ns:-0}))
  done
  echo "$total"
}
# On-CPU nanoseconds of a process so far, summed over its threads.
cpu_ns() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ ns += $1 } END { print ns + 0 }'; }
loadavg() { cut -d' ' -f1 /proc/loadavg; }

units=$("$workload" --calibrate 1) || die "$workload --calibrate failed"
warm_units=$((units * warm))
units=$((units * seconds))

results=$tmp/results.tsv # one line per run
printf 'config\tround\telapsed_s\tsamples\twl_samples\twl_main\tuser_s\tsys_s\tmaxrss_kb'\
'\tbpf_ns\tscript_s\tbytes\tstart_ns\tfirst_ms\tload\tlost\n' >"$results"

# start_profiler CONFIG DIR: starts CONFIG's profiler under /usr/bin/time (rusage into DIR/time,
# log into DIR/profiler.log), waits until it is attached and --settle seconds more; sets time_pid,
# prof_pid and sleeper (ember99-idle's sleeping process), and adds them to started.
start_profiler() {
  local config=$1 dir=$2 hz=99
  time_pid="" prof_pid="" sleeper=""
  local timefmt='%U %S %M'
  case $config in
    ember19 | ember99)
      hz=${config#ember}
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- "$agent" --sampling-hz "$hz" \
        --metrics-address= --output-dir "$dir/out" >"$dir/profiler.log" 2>&1 &
      ;;
    ember99-idle)
      sleep 100000 &
      sleeper=$!
      started+=("$sleeper")
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- "$agent" --sampling-hz 99 --pid "$sleeper" \
        --metrics-address= --output-dir "$dir/out" >"$dir/profiler.log" 2>&1 &
      ;;
    perf-fp)
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- perf record -a -g -e cpu-clock \
        -c $((1000000000 / hz)) -o "$dir/perf.data" >"$dir/profiler.log" 2>&1 &
      ;;
    perf-dwarf)
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- perf record -a --call-graph dwarf,65528 \
        -e cpu-clock -c $((1000000000 / hz)) -o "$dir/perf.data" >"$dir/profiler.log" 2>&1 &
      ;;
    bpftrace)
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- bpftrace \
        -e 'profile:hz:99 { @[ustack, kstack] = count(); }' >"$dir/profiler.log" 2>&1 &
      ;;
    timer99)
      /usr/bin/time -f "$timefmt" -o "$dir/time" 3>&- bpftrace \
        -e 'profile:hz:99 { @ = count(); }' >"$dir/profiler.log" 2>&1 &
      ;;
  esac
  time_pid=$!
  started+=("$time_pid")
  wait_until 10 "$config to start" pgrep -P "$time_pid"
  prof_pid=$(pgrep -P "$time_pid")
  started+=("$prof_pid")
  # Half a second of work on one CPU as the profiler starts: something to sample, so that
  # Ember's first sample comes as soon as it can take one (an idle machine gives it none).
  "$workload" --calibrate 0.5 >/dev/null &
  local busy=$!
  started+=("$busy")
  # Ready, or exited (told apart below, with its log).
  ready() {
    is_gone "$prof_pid" && return 0
    case $config in
      ember*) grep -q 'attached to' "$dir/profiler.log" ;;
      perf*) has_perf_events "$prof_pid" ;;
      bpftrace | timer99) has_progs "$prof_pid" ;;
    esac
  }
  wait_until 30 "$config to attach" ready
  is_gone "$prof_pid" && die "$config exited at start: $(tail -3 "$dir/profiler.log")"
  sleep "$settle"
  wait "$busy" || die "$workload --calibrate failed"
}

# stop_profiler CONFIG: stops what start_profiler started (SIGTERM for Ember, SIGINT for perf and
# bpftrace: bpftrace prints and symbolizes its map then) and waits for /usr/bin/time's rusage.
stop_profiler() {
  case $1 in
    ember*) stop "$prof_pid" TERM 60 ;;
    *) stop "$prof_pid" INT 60 ;;
  esac
  wait "$time_pid" 2>/dev/null || true
  if [[ -n $sleeper ]]; then
    kill "$sleeper" 2>/dev/null || true
    wait "$sleeper" 2>/dev/null || true
  fi
}

# run CONFIG ROUND: one workload run under CONFIG; appends a line to $results.
run() {
  local config=$1 round=$2 dir=$tmp/$1-$2
  mkdir -p "$dir"
  mkfifo "$dir/go"
  exec 3<>"$dir/go"
  "$workload" "$units" "$(nproc)" "$warm_units" <"$dir/go" >"$dir/workload.out" 2>&1 &
  local workload_pid=$!
  started+=("$workload_pid")

  local load
  load=$(loadavg)
  time_pid="" prof_pid="" sleeper=""
  [[ $config == alone ]] || start_profiler "$config" "$dir"
  local start_ns=0
  [[ -n $prof_pid ]] && start_ns=$(cpu_ns "$prof_pid")
  echo g >&3
  exec 3>&-
  workload_done() { grep -q elapsed_s "$dir/workload.out" || is_gone "$workload_pid"; }
  wait_until $(((seconds + warm) * 6 + 60)) "the workload to finish" workload_done
  grep -q elapsed_s "$dir/workload.out" || die "the workload failed: $(tail -3 "$dir/workload.out")"

  local bpf_ns=0 script_s=0 samples=0 wl=0 wl_main=0 bytes=0 first_ms=- lost=-
  if [[ -n $prof_pid ]]; then
    is_gone "$prof_pid" && die "$config exited early: $(tail -3 "$dir/profiler.log")"
    [[ $config == ember* || $config == bpftrace || $config == timer99 ]] && bpf_ns=$(bpf_run_ns "$prof_pid")
    stop_profiler "$config"
  fi
  stop "$workload_pid" TERM 10
  wait "$workload_pid" 2>/dev/null || true
  local elapsed
  elapsed=$(sed -n 's/^elapsed_s=\([0-9.]*\).*/\1/p' "$dir/workload.out")

  case $config in
    ember*)
      samples=$(sed -n 's/.* done: \([0-9]*\) samples.*/\1/p' "$dir/profiler.log")
      first_ms=$(sed -n 's/.*first sample \([0-9]*\) ms after start.*/\1/p' "$dir/profiler.log")
      lost=$(sed -n 's/.* done: [0-9]* samples, \([0-9]*\) lost.*/\1/p' "$dir/profiler.log")
      bytes=$(du -sb "$dir/out" | cut -f1)
      # ember99-idle takes no samples, and may write no pprof file.
      read -r wl wl_main < <(
        compgen -G "$dir/out/cpu-*.pb.gz" >/dev/null || { echo 0 0; exit 0; }
        "$pprof" -traces -sample_index=samples "$dir"/out/cpu-*.pb.gz 2>/dev/null | awk '
          function flush() { if (count && ow) { n += count; if (has_main) m += count } }
          /^-----------\+/ { flush(); count = 0; has_main = 0; ow = 0; next }
          /^ *[a-z_]+: / { next }
          !count && /^ +[0-9]+ +[^ ]/ { count = $1; sub(/^ +[0-9]+ +/, "") }
          count { sub(/^ +/, ""); if ($0 == "main") has_main = 1; if ($0 ~ /^ow_/) ow = 1 }
          END { flush(); print n + 0, m + 0 }')
      ;;
    perf*)
      bytes=$(stat -c %s "$dir/perf.data")
      /usr/bin/time -f '%U %S' -o "$dir/script.time" perf script -i "$dir/perf.data" \
        -F comm,pid,ip,sym >"$dir/script.txt" 2>"$dir/script.err" ||
        die "perf script failed: $(tail -3 "$dir/script.err")"
      script_s=$(awk '{ print $1 + $2 }' "$dir/script.time")
      # perf counts what its buffers dropped as lost chunks (events), when it drops any.
      lost=$(cat "$dir/profiler.log" "$dir/script.err" |
        awk '{ while (match($0, /lost [0-9]+ chunks/)) { split(substr($0, RSTART, RLENGTH), w, " ")
                 n += w[2]; $0 = substr($0, RSTART + RLENGTH) } } END { print n + 0 }')
      # One paragraph per sample: "COMM PID" then one "ADDRESS SYMBOL" line per frame.
      # perf -a samples idle CPUs too (pid 0); Ember and bpftrace do not: those are left out.
      read -r samples wl wl_main < <(awk -v RS= -F '\n' '
          { n_h = split($1, h, " "); if (h[n_h] == 0) next
            s++; ow = 0; mn = 0
            for (i = 2; i <= NF; i++) {
              if ($i ~ /^[ \t]+[0-9a-f]+ ow_/) ow = 1
              if ($i ~ /^[ \t]+[0-9a-f]+ main$/) mn = 1
            }
            if (ow) { n++; if (mn) m++ } }
          END { print s + 0, n + 0, m + 0 }' "$dir/script.txt")
      rm -f "$dir/perf.data" # up to 64 KiB per sample
      ;;
    bpftrace)
      bytes=$(stat -c %s "$dir/profiler.log")
      # "@[" then the user frames, ", " and the kernel frames, then "]: COUNT".
      read -r samples wl wl_main < <(awk '
          /^@\[/ { ow = 0; mn = 0; next }
          /^[ \t]*ow_/ { ow = 1 }
          /^[ \t]*main(\+[0-9]+)?$/ { mn = 1 }
          /\]: [0-9]+$/ { c = $NF + 0; s += c; if (ow) { n += c; if (mn) m += c } }
          END { print s + 0, n + 0, m + 0 }' "$dir/profiler.log")
      ;;
    timer99)
      bytes=$(stat -c %s "$dir/profiler.log")
      samples=$(sed -n 's/^@: \([0-9]*\)$/\1/p' "$dir/profiler.log")
      ;;
  esac
  local user=0 sys=0 maxrss=0
  if [[ -s $dir/time ]]; then
    read -r user sys maxrss < <(grep -E '^[0-9.]+ [0-9.]+ [0-9]+$' "$dir/time" | tail -1)
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$config" "$round" \
    "${elapsed:-0}" "${samples:-0}" "${wl:-0}" "${wl_main:-0}" "$user" "$sys" "$maxrss" "$bpf_ns" \
    "$script_s" "${bytes:-0}" "$start_ns" "${first_ms:--}" "$load" "${lost:--}" >>"$results"
  printf '  round %d %-10s elapsed %6.2f s, %5d samples (%d of the workload, %d reach main), load %s\n' \
    "$round" "$config" "${elapsed:-0}" "${samples:-0}" "${wl:-0}" "${wl_main:-0}" "$load"
  started=() # all reaped: their pids may be reused from now on
  rm -rf "$dir/out" "$dir/script.txt"
}

# The table: per configuration, medians over rounds (throughput: of the per-round ratios to alone).
summarize() {
  awk -F '\t' -v config_order="${all_configs[*]}" '
    # Sorts a[1..k] ascending (insertion sort: mawk has no asort).
    function sort_values(a, k,   i, j, t) {
      for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    }
    function median(key, col,   i, k, a) {
      k = cnt[key]; split("", a)
      for (i = 1; i <= k; i++) a[i] = v[key, col, i]
      sort_values(a, k)
      return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    function minmax(key, col,   i, lo, hi) {
      lo = hi = v[key, col, 1]
      for (i = 2; i <= cnt[key]; i++) { if (v[key, col, i] < lo) lo = v[key, col, i]; if (v[key, col, i] > hi) hi = v[key, col, i] }
      return sprintf("%.3f..%.3f", lo, hi)
    }
    # The mean, and its 95% interval from 2000 bootstrap resamples (fixed seed): whether a 1%
    # slowdown can be told from the rounds'"'"' noise at all.
    function mean_ci(key, col,   b, i, n, sum, means, t) {
      n = cnt[key]; sum = 0
      for (i = 1; i <= n; i++) sum += v[key, col, i]
      srand(1); split("", means)
      for (b = 1; b <= 2000; b++) {
        t = 0
        for (i = 1; i <= n; i++) t += v[key, col, 1 + int(rand() * n)]
        means[b] = t / n
      }
      sort_values(means, 2000)
      return sprintf("%.3f (%.3f..%.3f)", sum / n, means[51], means[1950])
    }
    NR == 1 { next }
    { rows[NR] = $0; if ($1 == "alone") alone[$2] = $3 }
    END {
      for (r in rows) {
        split(rows[r], f, "\t"); c = f[1]
        if (!(c in cnt)) order[++nc] = c
        k = ++cnt[c]
        s = f[4]; cpu = f[7] + f[8] + f[10] / 1e9 + f[11]
        v[c, "rel", k] = (f[3] > 0 && alone[f[2]] > 0) ? alone[f[2]] / f[3] : 0
        v[c, "cpu", k] = s ? 1e6 * cpu / s : 0
        v[c, "steady", k] = s ? 1e6 * (cpu - f[13] / 1e9) / s : 0
        v[c, "bpf", k] = s ? 1e6 * f[10] / 1e9 / s : 0
        v[c, "script", k] = s ? 1e6 * f[11] / s : 0
        v[c, "rss", k] = f[9] / 1024
        v[c, "bytes", k] = s ? f[12] / s : 0
        v[c, "main", k] = f[5] ? 100 * f[6] / f[5] : 0
        v[c, "samples", k] = s; v[c, "wl", k] = f[5]
        v[c, "first", k] = f[14] == "-" ? -1 : f[14]
        v[c, "load", k] = f[15]
        v[c, "elapsed", k] = f[3]
      }
      printf "| config | runs | samples (workload) | CPU ms /1000 samples | steady | of which BPF | perf script | throughput vs alone, median (min..max) | throughput, mean (95%% CI) | peak RSS MB | bytes /sample | reach main | first sample ms | load |\n"
      printf "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
      n = split(config_order, names, " ")  # as in all_configs
      for (i = 1; i <= n; i++) {
        c = names[i]; if (!(c in cnt)) continue
        if (c == "alone") {
          printf "| alone | %d | - | - | - | - | - | 1 (elapsed %.2f s, median) | - | - | - | - | - | %.2f |\n", cnt[c], median(c, "elapsed"), median(c, "load")
          continue
        }
        # The floors take no stacks (ember99-idle no samples at all): no per-sample figures.
        per = median(c, "samples") > 0; stacks = median(c, "wl") > 0
        printf "| %s | %d | %d (%d) | %s | %s | %s | %s | %.3f (%s) | %s | %.0f | %s | %s | %s | %.2f |\n",
          c, cnt[c], median(c, "samples"), median(c, "wl"), per ? sprintf("%.1f", median(c, "cpu")) : "-",
          per ? sprintf("%.1f", median(c, "steady")) : "-", per ? sprintf("%.1f", median(c, "bpf")) : "-",
          c ~ /^perf/ ? sprintf("%.1f", median(c, "script")) : "-",
          median(c, "rel"), minmax(c, "rel"), mean_ci(c, "rel"), median(c, "rss"),
          per ? sprintf("%.0f", median(c, "bytes")) : "-", stacks ? sprintf("%.1f%%", median(c, "main")) : "-",
          (c ~ /^ember/ && median(c, "first") >= 0) ? sprintf("%d", median(c, "first")) : "-", median(c, "load")
      }
    }' "$results"
}

# Every run, in the order run: the raw figures behind the table.
every_run() {
  echo "| round | config | elapsed s | samples | workload samples | reach main | user+sys s | BPF s | perf script s | peak RSS MB | bytes written | first sample ms | lost | load |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F '\t' 'NR > 1 {
      printf "| %d | %s | %.2f | %d | %d | %s | %.3f | %.3f | %.3f | %s | %d | %s | %s | %.2f |\n",
        $2, $1, $3, $4, $5,
        $5 ? sprintf("%.1f%%", 100 * $6 / $5) : "-", $7 + $8, $10 / 1e9, $11,
        $9 ? sprintf("%.0f", $9 / 1024) : "-", $12, $14, $16, $15 }' "$results"
}

# The sum of the /metrics series matching $1 (read from stdin), in MB; "-" when there are none.
metric_mb() {
  awk -v pattern="$1" '$0 ~ pattern { n += $NF; found = 1 } END { if (found) printf "%.1f", n / 1048576; else print "-" }'
}

soak() {
  local minutes=$1 metrics_port otlp_port dir=$tmp/soak
  mkdir -p "$dir"
  cg_root=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
  [[ -n $cg_root && -w $cg_root ]] || die "no writable cgroup v2 mount in /proc/self/mounts"
  read -r metrics_port otlp_port < <(python3 -c '
import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
print(*ports)')
  # The flapping OTLP endpoint: accepts every http/protobuf export for 20 s, is gone for 20 s.
  cat >"$dir/flap.py" <<'EOF'
import http.server, sys, threading, time
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[1])
while True:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(time.strftime("%T"), "up", flush=True)
    time.sleep(20)
    server.shutdown(); server.server_close()
    print(time.strftime("%T"), "down", flush=True)
    time.sleep(20)
EOF
  python3 "$dir/flap.py" "$otlp_port" >"$dir/flap.log" 2>&1 &
  started+=($!)

  "$agent" --sampling-hz 99 --metrics-address "127.0.0.1:$metrics_port" \
    --otlp-endpoint "http://127.0.0.1:$otlp_port" --otlp-protocol http/protobuf --otlp-insecure \
    --export-interval 5s --otlp-timeout 2s --output-dir "$dir/out" >"$dir/agent.log" 2>&1 &
  local agent_pid=$!
  started+=("$agent_pid")
  wait_until 30 "ember-agent to attach" grep -q 'attached to' "$dir/agent.log"

  # Churn: batches of 10 processes (5 ms of the workload's deep stacks each, 3 of them each in a
  # new cgroup, removed once empty), about 4 batches a second.
  (
    trap 'exit 0' TERM
    batch=0
    while :; do
      batch=$((batch + 1))
      pids=() dirs=()
      for ((i = 0; i < 10; i++)); do
        if ((i < 3)); then
          cg=$cg_root/ember-overhead-soak-$$-$batch-$i
          mkdir "$cg" && dirs+=("$cg")
          sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" --calibrate 0.005' sh "$cg" "$workload" >/dev/null &
        else
          "$workload" --calibrate 0.005 >/dev/null &
        fi
        pids+=($!)
      done
      wait "${pids[@]}" 2>/dev/null || true
      for cg in "${dirs[@]}"; do rmdir "$cg" 2>/dev/null || true; done
      sleep 0.15
    done
  ) >"$dir/churn.log" 2>&1 &
  local churn_pid=$!
  started+=("$churn_pid")

  # The long-lived processes: 2 ms of work every second each, so each is sampled every few seconds.
  local i
  for ((i = 0; i < soak_processes; i++)); do
    "$workload" --pulse 2 $((minutes * 60 + 60)) &
    started+=($!)
  done

  echo "overhead: soak for $minutes min: ember-agent pid $agent_pid at 99 Hz, metrics :$metrics_port," \
    "OTLP http://127.0.0.1:$otlp_port up 20 s / down 20 s, $soak_processes long-lived processes," \
    "~40 short-lived processes/s (a quarter in new cgroups)"
  # RSS is split into anonymous memory and file pages (mapped ELF images, shared with the page
  # cache), since the agent maps the files it unwinds and symbolizes.
  # The agent's heap (allocated, and held free by malloc) and its bounded caches, from /metrics,
  # tell which part of anonymous memory grows.
  printf '%8s %9s %9s %9s %9s %8s %8s %8s %8s %7s %5s %9s %10s %10s %s\n' elapsed rss_MB \
    anon_MB file_MB hwm_MB heap_MB hfree_MB sym_MB cfi_MB fg_knodes fds tracked exports_ok \
    exports_bad load
  local t0=$SECONDS end=$((SECONDS + minutes * 60)) metrics tracked ok failed rss anon file hwm fds
  local heap heap_free symbols cfi flame_nodes
  local samples_file=$dir/samples.tsv
  while ((SECONDS < end)); do
    sleep 10
    if is_gone "$agent_pid"; then
      die "ember-agent exited after $((SECONDS - t0)) s of soak: $(tail -3 "$dir/agent.log")"
    fi
    metrics=$(curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" || true)
    tracked=$(awk '/^ember_processes_tracked / { print $2 }' <<<"$metrics")
    ok=$(awk '/^ember_otlp_intervals_total\{.*"(sent|ok|success)/ { n += $2 } END { print n + 0 }' <<<"$metrics")
    failed=$(awk '/^ember_otlp_intervals_total\{/ && !/"(sent|ok|success)"/ { n += $2 } END { print n + 0 }' <<<"$metrics")
    rss=$(awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' /proc/"$agent_pid"/status)
    hwm=$(awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' /proc/"$agent_pid"/status)
    anon=$(awk '/^RssAnon/ { printf "%.1f", $2 / 1024 }' /proc/"$agent_pid"/status)
    file=$(awk '/^RssFile/ { printf "%.1f", $2 / 1024 }' /proc/"$agent_pid"/status)
    fds=$(ls /proc/"$agent_pid"/fd | wc -l)
    heap=$(metric_mb '^ember_heap_allocated_bytes ' <<<"$metrics")
    heap_free=$(metric_mb '^ember_heap_free_bytes ' <<<"$metrics")
    symbols=$(metric_mb '^ember_symbol_cache_bytes' <<<"$metrics")
    cfi=$(metric_mb '^ember_cfi_cache_bytes ' <<<"$metrics")
    flame_nodes=$(awk '/^ember_flame_graph_nodes / { printf "%.1f", $2 / 1000 }' <<<"$metrics")
    printf '%7ds %9s %9s %9s %9s %8s %8s %8s %8s %7s %5s %9s %10s %10s %s\n' $((SECONDS - t0)) \
      "$rss" "$anon" "$file" "$hwm" "$heap" "$heap_free" "$symbols" "$cfi" "${flame_nodes:--}" "$fds" \
      "${tracked:--}" "$ok" "$failed" "$(loadavg)" | tee -a "$samples_file"
  done
  stop "$churn_pid" TERM 10
  grep '^ember_otlp\|^ember_processes' <<<"$metrics" | sed 's/^/  /' || true
  echo "  churn: $(awk 'END { print NR }' "$dir/churn.log") error lines;" \
    "flapping listener: $(grep -c up "$dir/flap.log") up phases"
  # Flat once warm: the last third against the middle third (maxima of each).
  awk -v n="$(wc -l <"$samples_file")" '
    { rss[NR] = $2; anon[NR] = $3; heap[NR] = $6; fds[NR] = $11; tr[NR] = $12 }
    function max_of(v, from, to,   i, m) { m = v[from]; for (i = from; i < to; i++) if (v[i] > m) m = v[i]; return m }
    END {
      if (n < 3) { print "  too short to tell flat from growing"; exit }
      a = int(n / 3) + 1; b = int(2 * n / 3) + 1
      printf "  warm (middle third) max vs last third max: RSS %.1f -> %.1f MB, anonymous %.1f -> %.1f MB, heap allocated %.1f -> %.1f MB, fds %d -> %d, tracked %d -> %d\n",
        max_of(rss, a, b), max_of(rss, b, n + 1), max_of(anon, a, b), max_of(anon, b, n + 1),
        max_of(heap, a, b), max_of(heap, b, n + 1), max_of(fds, a, b), max_of(fds, b, n + 1),
        max_of(tr, a, b), max_of(tr, b, n + 1)
    }' "$samples_file"
  stop "$agent_pid" TERM 30
  # The agent's most frequent warnings and errors, numbers masked so that alike lines count as one.
  grep -E ' (warning|error) ' "$dir/agent.log" | sed -E 's/^[^ ]+ //; s/[0-9]+/N/g' |
    sort | uniq -c | sort -rn | head -5 | sed 's/^/  agent log: /' || true
}

if ((soak_minutes)); then
  soak "$soak_minutes"
  exit 0
fi

# toggle CONFIG: sampling_toggle's pairs under CONFIG's profiler; appends its summary to the table.
toggle() {
  local config=$1 dir=$tmp/toggle-$1 line
  mkdir -p "$dir"
  start_profiler "$config" "$dir"
  echo "overhead: $config (pid $prof_pid) attached; $warm s warm, then $toggle_seconds s of pairs"
  "$toggler" "$prof_pid" "$toggle_seconds" "$warm" >"$dir/toggle.out" 2>"$dir/toggle.err" ||
    die "sampling_toggle under $config failed: $(tail -3 "$dir/toggle.err")"
  is_gone "$prof_pid" && die "$config exited during the run: $(tail -3 "$dir/profiler.log")"
  stop_profiler "$config"
  started=()
  line=$(grep '^sampling_toggle:' "$dir/toggle.out") || die "no summary from sampling_toggle"
  echo "  $config: ${line#sampling_toggle: }"
  sed -E 's/^sampling_toggle: pid [0-9]+, ([0-9]+) perf events, ([0-9]+) pairs: .*mean ([0-9.]+) \(95% CI ([0-9.]+)\.\.([0-9.]+)\), median ([0-9.]+), standard deviation of a pair ([0-9.]+%)$/| '"$config"' | \2 | \3 (\4..\5) | \6 | \7 | \1 |/' \
    <<<"$line" >>"$tmp/toggle.md"
}

if ((toggle_seconds)); then
  echo "overhead: --toggle $toggle_seconds s under each of ${configs[*]}, $(nproc) CPUs," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
  for config in "${configs[@]}"; do toggle "$config"; done
  echo
  echo "| config | pairs | throughput with sampling on over off, mean (95% CI) | median | standard deviation of a pair | perf events |"
  echo "|---|---|---|---|---|---|"
  cat "$tmp/toggle.md"
  exit 0
fi

echo "overhead: ${#configs[@]} configurations x $rounds rounds, $units units per core (~${seconds} s alone)," \
  "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
for ((round = 1; round <= rounds; round++)); do
  for config in $(shuf -e "${configs[@]}"); do
    run "$config" "$round"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

table=$(summarize)
runs_table=$(every_run)
echo
echo "Every run:"
echo "$runs_table"
echo
echo "Medians over rounds:"
echo "$table"
cat <<'EOF'

CPU per 1000 samples of every sample the profiler took (it is system-wide): its user+sys, its BPF
programs' run time and perf script's CPU; steady leaves out its CPU before the workload started.
Throughput: alone's elapsed over the configuration's in the same round; the mean's 95% interval is
from 2000 bootstrap resamples of the rounds (a 1% slowdown is ruled out only when it lies above
0.990). Reach main: the workload's samples (an ow_* frame) that have a main frame. Load: the
1-minute load average at each run's start.
EOF

if ((write_docs)); then
  section=$tmp/section.md
  {
    echo "<!-- bench/overhead.sh begin: written by bench/overhead.sh --write-docs -->"
    if ((quick)); then
      echo "### Smoke run of $started_at (--quick: one short round, not a measurement)"
    else
      echo "### Figures of $started_at"
    fi
    echo
    echo "Measured $started_at on $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))," \
      "kernel $(uname -r), $agent built $(date -u -r "$agent" '+%H:%M UTC') (tree at commit" \
      "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        [[ -n $(git status --porcelain -- src bpf 2>/dev/null) ]] && echo ", with uncommitted changes in src/ or bpf/")):" \
      "\`bench/overhead.sh --rounds $rounds --seconds $seconds --configs $(IFS=,; echo "${configs[*]}")\`," \
      "load average $load_before before and $load_after after. The workload" \
      "(\`bench/overhead_work.c\`) runs $units units on each of $(nproc) processes; every" \
      "configuration runs once per round in a random order. How each figure is measured is written" \
      "at the top of the script." | fmt -w 100
    echo
    echo "$table"
    echo
    echo "CPU is per 1000 samples the profiler took on every CPU (all processes): its user+sys," \
      "its BPF programs' run time (bpf_stats) and perf script's CPU (perf's samples of idle CPUs," \
      "pid 0, are left out: Ember and bpftrace take none); steady leaves out its CPU" \
      "before the workload started. Not counted: perf's in-kernel copy of up to 64 KiB of stack" \
      "per sample. Throughput is alone's elapsed time over the configuration's in the same round." \
      "Reach main is over the workload's samples (an \`ow_*\` frame). Load is the 1-minute load" \
      "average at each run's start: above about 0.5 other work competes for the" \
      "2 CPUs and every figure is noisy." | fmt -w 100
    echo
    echo "Every run, in the order run:"
    echo
    echo "$runs_table"
    echo "<!-- bench/overhead.sh end -->"
  } >"$section"
  if grep -q '^<!-- bench/overhead.sh begin' "$docs"; then
    awk -v file="$section" '
      /^<!-- bench\/overhead.sh begin/ { while ((getline line < file) > 0) print line; skip = 1; next }
      /^<!-- bench\/overhead.sh end/ { skip = 0; next }
      !skip' "$docs" >"$tmp/docs.md"
  else
    {
      cat "$docs"
      printf '\n## Overhead side by side: `bench/overhead.sh` (issue 7)\n\n'
      cat "$section"
    } >"$tmp/docs.md"
  fi
  cat "$tmp/docs.md" >"$docs"
  echo "overhead: wrote the figures into $docs"
fi
