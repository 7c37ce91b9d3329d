# Sourced by bench scripts that time each profiler's samples in the interrupt that takes them
# (bench/irq_time.sh, bench/warm_cost.sh --with): the hrtimer tracer and the reading of its output.
# A cpu-clock sample is the hrtimer callback perf_swevent_hrtimer (its overflow, its BPF program or
# its perf output, perf's callchain walk and stack copy); timer:hrtimer_expire_entry and _exit time
# each one without kprobes or fentry, and the perf_event around the hrtimer names its owner (the
# profiler that opened it): its thread group id keys the figures.

# hrtimer_trace_write FILE [SECONDS]: writes the bpftrace script to FILE; it prints "attached" once
# attached, and its figures when it exits, after SECONDS or at SIGINT.
hrtimer_trace_write() {
  local offset
  # Where the event's hrtimer lies in its struct perf_event (hw.hrtimer), from the kernel's BTF.
  offset=$(bpftool btf dump file /sys/kernel/btf/vmlinux format raw | python3 -c '
import re, sys
types, current = {}, None
for line in sys.stdin:
    head = re.match(r"\[(\d+)\] (\w+) \x27([^\x27]*)\x27", line)
    if head:
        current = types.setdefault(int(head.group(1)), (head.group(2), head.group(3), []))
        continue
    member = re.match(r"\s+\x27([^\x27]*)\x27 type_id=(\d+) bits_offset=(\d+)", line)
    if member and current:
        current[2].append((member.group(1), int(member.group(2)), int(member.group(3))))
def find(type_id, name):  # bits to member `name`, through anonymous members
    for member, member_type, bits in types.get(type_id, ("", "", []))[2]:
        if member == name:
            return bits
        if member == "(anon)":
            inner = find(member_type, name)
            if inner is not None:
                return bits + inner
    return None
event = next(i for i, t in types.items() if t[0] == "STRUCT" and t[1] == "perf_event")
hw_bits, hw_type = next((b, t) for n, t, b in types[event][2] if n == "hw")
print((hw_bits + find(hw_type, "hrtimer")) // 8)') || return 1
  {
    cat <<BT
BEGIN { printf("attached\\n"); }
tracepoint:timer:hrtimer_expire_entry /args->function == kaddr("perf_swevent_hrtimer")/ {
  \$event = (struct perf_event *)((uint64)args->hrtimer - $offset);
  @owner[cpu] = \$event->owner->tgid;
  @start[cpu] = nsecs;
}
tracepoint:timer:hrtimer_expire_exit /@start[cpu]/ {
  @ns[@owner[cpu]] = sum(nsecs - @start[cpu]);
  @n[@owner[cpu]] = count();
  delete(@start[cpu]);
}
BT
    [[ -z ${2:-} ]] || echo "interval:s:$2 { exit(); }"
  } > "$1"
}

# hrtimer_trace_attached OUTPUT PID: waits (up to 30 s) until the tracer PID writing OUTPUT is
# attached; fails if it exits first.
hrtimer_trace_attached() {
  local i
  for ((i = 0; i < 600; i++)); do
    grep -q '^attached' "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# hrtimer_trace_figures OUTPUT PID: "CALLBACKS NS" of PID's events in the tracer's OUTPUT (0 0 if
# none).
hrtimer_trace_figures() {
  awk -v n="@n[$2]:" -v ns="@ns[$2]:" '$1 == n { c = $2 } $1 == ns { t = $2 }
    END { print c + 0, t + 0 }' "$1"
}

# hrtimer_trace_stop PID: stops the tracer so that it prints its figures. Once in a run (beside
# perf-dwarf) a tracer went on after its SIGINT for minutes, though a SIGINT by hand
# ended it at once; so the signal is sent again every second, for up to 20 s. Fails if it does
# not exit.
hrtimer_trace_stop() {
  local i state
  for ((i = 0; i < 200; i++)); do
    # Gone, or a zombie (exited, not yet reaped by the caller's wait).
    state=$(sed 's/.*) //' /proc/"$1"/stat 2>/dev/null | cut -d' ' -f1)
    [[ -n $state && $state != Z ]] || return 0
    ((i % 10 != 0)) || kill -INT "$1" 2>/dev/null || true
    sleep 0.1
  done
  return 1
}
