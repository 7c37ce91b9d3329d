#!/usr/bin/env bash
# What a Java (HotSpot) sample costs against a native one, and the agent's memory for a large Java
# application against a small one, all in one run (docs/benchmarks.md, "Java (HotSpot) samples").
# Needs root.
#
#   bench/hotspot_cost.sh [--build-dir build] [--jdk DIR] [--seconds 60] [--hz 99] [--rounds 300]
#                         [--classes 20000] [--methods 20] [--depth 40] [--parts agent,bpf]
#
# It starts three programs: the HotSpot tests' fixture (ember.fixture.Phases, default mode, warmed
# for 5 s: the small Java program), bench/overhead_work --pulse (native, CFI only) and
# bench/many_classes (CLASSES generated classes of METHODS methods, called in chains of DEPTH: the
# large Java program), all on --jdk (default Temurin 25, which many_classes needs).
#   agent: build/hotspot_cost on the fixture and the native program (StackBuilder::Build per sample,
#          ptrace captures, interleaved), ROUNDS rounds; then on the large program and the native.
#   bpf:   three agents at once, each --pid one program at --hz, for --seconds: each one's BPF run
#          time per sample (build/bpf_run_times on its program, runs of 1 µs or more), its peak RSS
#          (VmHWM) and warm RSS (the mean VmRSS over the second half), and its HotSpot metrics.
set -euo pipefail

die() {
  echo "hotspot_cost: $*" >&2
  exit 2
}

build_dir=build jdk=/usr/lib/jvm/temurin-25-jdk-amd64 seconds=60 hz=99 rounds=300
classes=20000 methods=20 depth=40 parts=agent,bpf
while (($#)); do
  case $1 in
    --build-dir | --jdk | --parts)
      [[ -n ${2:-} ]] || die "$1: expected a value"
      case $1 in
        --build-dir) build_dir=$2 ;;
        --jdk) jdk=$2 ;;
        --parts) parts=$2 ;;
      esac
      shift 2
      ;;
    --seconds | --hz | --rounds | --classes | --methods | --depth)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1: expected a positive whole number, not '${2:-}'"
      declare "${1#--}=$2"
      shift 2
      ;;
    -h | --help)
      sed -n '6,7p' "$0" | sed 's/^#  *//' >&2
      exit 2
      ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (ptrace, BPF)"
agent=$build_dir/ember-agent
for file in "$agent" "$build_dir/hotspot_cost" "$build_dir/bpf_run_times" \
  "$build_dir/bench/overhead_work" "$build_dir/tests/fixtures/java/classes/ember/fixture/Phases.class" \
  "$build_dir/bench/many_classes/ember/bench/ManyClasses.class" "$jdk/bin/java"; do
  [[ -e $file ]] || die "missing $file: cmake --build $build_dir --target ember-agent hotspot_cost \
bpf_run_times bench_overhead_work fixture_java_phases bench_many_classes"
done

dir=$(mktemp -d /tmp/hotspot_cost.XXXXXX)
children=()
cleanup() {
  local pid
  for pid in "${children[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${children[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_for_line() {  # FILE PATTERN SECONDS
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  die "timed out waiting for '$2' in $1: $(tail -3 "$1")"
}

life=$((seconds + rounds / 10 + 120))
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); results in $dir"
"$build_dir/bench/overhead_work" --pulse 1000 "$life" >"$dir/native.out" 2>&1 &
native=$!
children+=("$native")
# The fixture runs its phases for 5 s, then waits for a byte on stdin before the next phases.
{ sleep 6; echo go; sleep "$life"; } |
  "$jdk/bin/java" -cp "$build_dir/tests/fixtures/java/classes" ember.fixture.Phases "$life" 5 \
    >"$dir/small.out" 2>&1 &
small=$!
children+=("$small")
"$jdk/bin/java" -cp "$build_dir/bench/many_classes" ember.bench.ManyClasses "$classes" "$methods" \
  "$depth" "$life" >"$dir/large.out" 2>&1 &
large=$!
children+=("$large")
wait_for_line "$dir/large.out" defined 300
sleep 5
echo "native $native, small Java $small, large Java $large ($(head -1 "$dir/large.out"))"

if [[ ,$parts, == *,agent,* ]]; then
  echo "== agent: StackBuilder::Build per sample (µs), $rounds rounds, load $(cut -d' ' -f1 /proc/loadavg)"
  "$build_dir/hotspot_cost" "$small" "$native" "$rounds" 20 2>&1 | grep -v '\[info\]'
  echo "-- the large Java program against the same native one"
  "$build_dir/hotspot_cost" "$large" "$native" "$rounds" 20 2>&1 | grep -v '\[info\]'
fi

if [[ ,$parts, == *,bpf,* ]]; then
  echo "== bpf and memory: three agents at $hz Hz for $seconds s, load $(cut -d' ' -f1 /proc/loadavg)"
  declare -A agents pollers
  port=19464
  for name in native small large; do
    pid=${!name}
    mkdir -p "$dir/$name"
    "$agent" --pid "$pid" --sampling-hz "$hz" --output-dir "$dir/$name" \
      --metrics-address "127.0.0.1:$port" >"$dir/$name/agent.log" 2>&1 &
    agents[$name]=$!
    children+=("$!")
    eval "port_$name=$port"
    port=$((port + 1))
  done
  for name in native small large; do
    wait_for_line "$dir/$name/agent.log" 'first sample\|profiling\|sampling' 60
    prog_id=""
    for ((i = 0; i < 100; i++)); do
      prog_id=$(awk '/^prog_id:/ { print $2 }' /proc/"${agents[$name]}"/fdinfo/* 2>/dev/null |
        sort -u | head -1)
      [[ -n $prog_id ]] && break
      sleep 0.1
    done
    [[ $prog_id =~ ^[0-9]+$ ]] || die "cannot tell the BPF program of the $name agent"
    "$build_dir/bpf_run_times" --prog-id "$prog_id" --poll-us 500 >"$dir/$name/run_times.out" 2>&1 &
    pollers[$name]=$!
    children+=("$!")
  done
  declare -A rss_sum rss_n
  for ((t = 0; t < seconds; t++)); do
    sleep 1
    ((t * 2 < seconds)) && continue
    for name in native small large; do
      kb=$(awk '/^VmRSS:/ { print $2 }' /proc/"${agents[$name]}"/status)
      rss_sum[$name]=$((${rss_sum[$name]:-0} + kb))
      rss_n[$name]=$((${rss_n[$name]:-0} + 1))
    done
  done
  printf '%-7s %9s %9s %9s %9s %9s %9s %12s %s\n' program bpf_runs median_ns p90_ns mean_ns \
    peak_MiB warm_MiB named_frames hotspot
  for name in native small large; do
    kill -INT "${pollers[$name]}"
    wait "${pollers[$name]}" || true
    port_var=port_$name
    metrics=$(curl -s "http://127.0.0.1:${!port_var}/metrics" || true)
    echo "$metrics" >"$dir/$name/metrics.txt"
    hwm=$(awk '/^VmHWM:/ { print $2 }' /proc/"${agents[$name]}"/status)
    line=$(tail -1 "$dir/$name/run_times.out")
    field() { echo "$line" | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
    named=$(echo "$metrics" | awk '/^ember_hotspot_frames_named_total\{result="named"\}/ { print $2 }')
    cache=$(echo "$metrics" | awk '/^ember_hotspot_cache_bytes / { printf "%.1fMiB", $2 / 1048576 }')
    printf '%-7s %9s %9s %9s %9s %9.1f %9.1f %12s %s\n' "$name" "$(field sampled_runs)" \
      "$(field median_ns)" "$(field p90_ns)" "$(field mean_ns)" "$(echo "$hwm / 1024" | bc -l)" \
      "$(echo "${rss_sum[$name]} / ${rss_n[$name]} / 1024" | bc -l)" "${named:-0}" "${cache:-}"
  done
  for name in native small large; do kill -INT "${agents[$name]}" 2>/dev/null || true; done
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
