# Sourced by bench scripts that run bench/overhead_work under a profiler, one run after another
# (bench/bpf_phases.sh, bench/irq_time.sh): the workload's start and stop, and a clean-up of
# whatever is still running at exit. The sourcing script sets `workload` (the overhead_work
# binary) and `tmp` (its scratch directory) before it calls these.

# The pids to stop at exit or at the end of a run.
running=()

# Stops what is still running and removes $tmp, then runs the sourcing script's own clean-up
# (the function `cleanup_more`, when it defines one).
cleanup() {
  local pid
  for pid in "${running[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F cleanup_more >/dev/null; then cleanup_more; fi
  rm -rf "$tmp"
}

# workload_start UNITS [WORKERS]: starts overhead_work, which waits for a byte on stdin before it
# forks its workers (default: one per CPU), and sends it that byte.
workload_start() {
  exec 3> >(exec "$workload" "$@" > /dev/null 2>&1)
  workload_pid=$!
  running=("$workload_pid")
  printf g >&3
}

# Stops the workload and its workers, which stay alive after their work until signalled.
workload_stop() {
  pkill -P "$workload_pid" 2>/dev/null || true
  kill "$workload_pid" 2>/dev/null || true
  exec 3>&-
  wait "$workload_pid" 2>/dev/null || true
  running=()
}
