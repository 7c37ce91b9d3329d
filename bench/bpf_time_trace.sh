#!/usr/bin/env bash
# Per-second mean run time of a profiler's BPF program, read from kernel.bpf_stats (run_cnt and
# run_time_ns in /proc/PID/fdinfo of the program's fd): whether its time per sample moves in steps
# over a run (the host) or stays put. Reads the counters every second until the process exits or
# SECONDS have passed, and prints one line a second: seconds since start, runs, mean ns a run.
# Needs root, and kernel.bpf_stats_enabled=1 (bench/warm_cost.sh and bench/overhead.sh set it).
#
#   bench/bpf_time_trace.sh PID [--seconds 60] [--program NAME]
#
# NAME is matched against the first line `bpftool prog show` prints of the program (its id, type
# and name): profile__sample (the default) finds ember-agent's sampling program, perf_event the
# program of bpftrace's profile probe (its only one of that type).
set -euo pipefail

die() {
  echo "bpf_time_trace: $*" >&2
  exit 2
}

[[ $# -ge 1 && $1 =~ ^[0-9]+$ ]] || die "usage: bpf_time_trace.sh PID [--seconds N] [--program NAME]"
pid=$1
shift
seconds=60
program=profile__sample
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--seconds: expected a positive whole number"
      seconds=$2
      shift 2
      ;;
    --program)
      [[ -n ${2:-} ]] || die "--program: expected a program name"
      program=$2
      shift 2
      ;;
    *) die "unknown argument $1" ;;
  esac
done
[[ $EUID -eq 0 ]] || die "needs root (it reads BPF program statistics)"
[[ -d /proc/$pid ]] || die "no process $pid"
[[ $(cat /proc/sys/kernel/bpf_stats_enabled) == 1 ]] ||
  die "kernel.bpf_stats_enabled is 0: no run times are counted (sysctl -w kernel.bpf_stats_enabled=1)"

# The fd of the program, by its id in the fd's fdinfo and its name in bpftool's listing.
fdinfo=""
for info in /proc/"$pid"/fdinfo/*; do
  id=$(awk '$1 == "prog_id:" { print $2 }' "$info" 2>/dev/null) || continue
  [[ -n $id ]] || continue
  if bpftool prog show id "$id" 2>/dev/null | head -1 | grep -q -- "$program"; then
    fdinfo=$info
    break
  fi
done
[[ -n $fdinfo ]] || die "process $pid holds no BPF program named like '$program'"

read_counters() {
  runs=0
  run_ns=0
  local key value
  while read -r key value; do
    case $key in
      run_cnt:) runs=$value ;;
      run_time_ns:) run_ns=$value ;;
    esac
  done < "$fdinfo"
}

echo "# $program of process $pid ($fdinfo): seconds, runs, mean ns a run"
read_counters || die "process $pid exited"
last_runs=$runs
last_ns=$run_ns
for ((t = 1; t <= seconds; t++)); do
  sleep 1
  read_counters 2>/dev/null || break # the process exited
  if ((runs > last_runs)); then
    echo "$t $((runs - last_runs)) $(((run_ns - last_ns) / (runs - last_runs)))"
  else
    echo "$t 0 -"
  fi
  last_runs=$runs
  last_ns=$run_ns
done
