/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Where the sampling program's time goes, phase by phase: built in only with the CMake option
 * EMBER_BPF_PHASE_TIMES (a bench build; bench/bpf_phases.sh reads the map). Each phase's time runs
 * from the timing point before it to its own: bpf_ktime_get_ns and a per-CPU add, about 40 ns,
 * which the TIMER phase measures on its own. In a normal build every macro is empty. */
#ifndef EMBER_BPF_PHASE_TIMES_H_
#define EMBER_BPF_PHASE_TIMES_H_

/* Indexes of the phase_ns map: nanoseconds per phase, then counts. Names in bench/bpf_phases.sh. */
enum ember_phase {
  EMBER_PHASE_SAMPLES = 0,      /* count: program runs past the pid checks */
  EMBER_PHASE_HEADER = 1,       /* ns: record buffer, time, cgroup id, comm */
  EMBER_PHASE_TIMER = 2,        /* ns: an empty phase, what a timing point costs */
  EMBER_PHASE_KERNEL_STACK = 3, /* ns */
  EMBER_PHASE_USER_REGS = 4,    /* ns */
  EMBER_PHASE_STACK_END = 5,    /* ns: the walk's stack end (stack_ends, or bpf_find_vma) */
  EMBER_PHASE_WALK = 6,         /* ns: the CFI walk */
  EMBER_PHASE_SNAPSHOT = 7,     /* ns: snapshot or frame-pointer stack, when the walk fell short */
  EMBER_PHASE_PYTHON = 8,       /* ns: known_procs and python_procs lookups, the Python walk */
  EMBER_PHASE_WAKEUP = 9,       /* ns: the ring buffer's fill and the wake-up decision */
  EMBER_PHASE_OUTPUT = 10,      /* ns: bpf_ringbuf_output */
  EMBER_PHASE_WALKS = 11,       /* count */
  EMBER_PHASE_WALK_FRAMES = 12, /* count: frames the walks recorded */
  EMBER_PHASE_MAPPING_SEARCHES = 13, /* count: binary searches of a process's mappings */
  EMBER_PHASE_ROW_SEARCHES = 14,     /* count: binary searches of a bucket's rows */
  EMBER_PHASE_WINDOW_READS = 15,     /* count: stack window reads */
  EMBER_PHASE_WINDOW_BYTES = 16,     /* count: bytes of those reads */
  EMBER_PHASE_RECORD_BYTES = 17,     /* count: bytes of the records written */
  EMBER_PHASE_CONTEXT = 18,          /* ns: known_procs/context_procs lookups, the context read */
  EMBER_PHASE_CONTEXT_READS = 19,    /* count: thread-context reads (context_procs entries hit) */
  EMBER_PHASE_COUNT = 20,
};

#ifdef EMBER_BPF_PHASE_TIMES
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, EMBER_PHASE_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} phase_ns SEC(".maps");

static __always_inline void phase__add(__u32 index, __u64 value) {
  __u64 *sum = bpf_map_lookup_elem(&phase_ns, &index);
  if (sum) *sum += value;
}

static __always_inline void phase__mark(__u32 index, __u64 *at) {
  __u64 now = bpf_ktime_get_ns();
  phase__add(index, now - *at);
  *at = now;
}

#define PHASE_START() __u64 phase_at_ = bpf_ktime_get_ns()
#define PHASE_RESTART() (phase_at_ = bpf_ktime_get_ns())
#define PHASE(index) phase__mark(index, &phase_at_)
#define PHASE_COUNT(index, value) phase__add(index, value)
#else
#define PHASE_START()
#define PHASE_RESTART() ((void)0)
#define PHASE(index) ((void)0)
#define PHASE_COUNT(index, value) ((void)0)
#endif

#endif /* EMBER_BPF_PHASE_TIMES_H_ */
