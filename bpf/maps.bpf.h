// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// The sampling program's maps and the settings the agent writes before load: everything
// src/sampler/bpf_profiler.cc reaches through the skeleton, and the per-CPU counters.
#ifndef EMBER_BPF_MAPS_BPF_H_
#define EMBER_BPF_MAPS_BPF_H_

#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "sample_record.h"

// --- Settings, written by the agent before load ---

// Sample only the thread groups in pid_filter.
const volatile bool filter_pids = false;
// The agent's own process, never sampled (0: none): its cost is in its /metrics, and sampling it
// would have it symbolize itself, a feedback of work on its own samples.
const volatile __u32 skip_tgid = 0;
// Most bytes of user stack copied per sample for DWARF unwinding; 0 copies none.
const volatile __u32 snapshot_limit = 0;
// Walk user stacks here by the CFI rows the agent loads (unwind_rows, unwind_procs).
const volatile bool unwind_in_bpf = false;
// The shortest time between two wake-ups of the agent for a process it does not know yet; 0: never.
const volatile __u64 new_process_wakeup_gap_ns = 0;

// --- Every sample's ---

// The records, as the agent reads them (src/sampler/sample_record_layout.h).
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);  // resized by the agent before load
} samples SEC(".maps");

// Processes the agent has read (their maps, name and cgroup), set and cleared by the agent, and
// cleared here when the process execs (its maps are another program's). A sample of any other
// process is flagged EMBER_SAMPLE_PROCESS_UNKNOWN and wakes the agent at once (at most once per
// new_process_wakeup_gap_ns), so it reads that process while it still runs; other samples wait
// for the agent's next poll.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);   // tgid
  __type(value, __u8);  // EMBER_KNOWN_PROC | EMBER_KNOWN_PROC_PYTHON | EMBER_KNOWN_PROC_CONTEXT
} known_procs SEC(".maps");

// Thread group ids to sample when filter_pids is set.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} pid_filter SEC(".maps");

// Counters by enum ember_stat, summed over CPUs by BpfProfiler::ReadStats.
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, EMBER_STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

static __always_inline void stats__add(__u32 index) {
  __u64 *value = bpf_map_lookup_elem(&stats, &index);
  if (value) *value += 1;
}

// Where the Python frames of a record start: after the addresses and the snapshot, padded to 8.
#define PYTHON_FRAMES_MAX_AT (2 * EMBER_MAX_STACK_DEPTH * sizeof(__u64) + EMBER_MAX_SNAPSHOT_BYTES)
#define PYTHON_FRAMES_BYTES (EMBER_MAX_PYTHON_FRAMES * sizeof(struct ember_python_frame))

// Where the thread-context record of a record starts at the latest: after the Python frames.
#define CONTEXT_MAX_AT (PYTHON_FRAMES_MAX_AT + 8 + PYTHON_FRAMES_BYTES)

// A record is assembled here (too big for the 512-byte BPF stack), then copied out at its size.
// The snapshot starts right after the last stack address, so `tail` holds both, then the Python
// frames, then the thread-context record.
struct sample_buffer {
  struct ember_sample header;
  __u8 tail[CONTEXT_MAX_AT + EMBER_MAX_CONTEXT_BYTES];
};

// One buffer per CPU, indexed by CPU number: a per-CPU array cannot hold values above 32 KiB.
// A perf_event program does not nest on its CPU, so the buffer is never shared.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);  // set to the number of possible CPUs by the agent before load
  __type(key, __u32);
  __type(value, struct sample_buffer);
} scratch SEC(".maps");

// --- The snapshot's (snapshot.bpf.h) ---

// Where a thread's stack snapshot ends, found by an earlier sample. bpf_find_vma at every sample
// would be most of the program's cost (about 8 of 13 µs a sample on the project machine), and a
// thread's stack does not move: the end is looked up again only for a new thread, an sp outside the
// cached span, or after a copy from a cached end failed. Kept with the thread (task storage): it
// goes when the thread does, so a reused thread id starts afresh, and the lookup hashes nothing.
struct stack_end {
  __u64 end;  // 0: look it up again
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct stack_end);
} stack_ends SEC(".maps");

// --- The CFI walk's (cfi_walk.bpf.h, docs/bpf-unwinding.md) ---

// Every file's rows, each file's a sorted run the agent placed (ember_unwind_mapping.first_row).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);  // sized by the agent before load
  __type(key, __u32);
  __type(value, struct ember_unwind_row);
} unwind_rows SEC(".maps");

// Each file's bucket index into its rows, at the same place as its rows (ember_unwind_mapping).
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);  // sized by the agent before load, as unwind_rows
  __type(key, __u32);
  __type(value, __u32);
} unwind_buckets SEC(".maps");

// Where each process maps the files that have rows. A process without an entry is unwound by the
// agent from a snapshot, as without unwind_in_bpf.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, __u32);  // tgid
  __type(value, struct ember_unwind_proc);
} unwind_procs SEC(".maps");

// --- The Python walk's (python_walk.bpf.h, docs/cpython.md) ---

// CPython processes the agent found (docs/cpython.md): their interpreter's layout and addresses.
// Looked up only for a process that known_procs marks as having an entry, or does not hold: a
// hash lookup costs a sample 0.3 µs, 6% of the program, on the project machine.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);  // tgid
  __type(value, struct ember_python_proc);
} python_procs SEC(".maps");

// The PyThreadState of a thread found by an earlier sample, checked again before each use (its
// thread_id must still be the thread's fs base): one read instead of a search of the thread list.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u64);    // pid_tgid
  __type(value, __u64);  // PyThreadState* in the process
} python_threads SEC(".maps");

// The Python walk's working memory: one frame header at a time, and the frames found so far.
struct python_scratch {
  // +8: a field read at an offset masked to the header size stays inside.
  __u8 header[EMBER_MAX_PYTHON_FRAME_HEADER + 8];
  struct ember_python_frame frames[EMBER_MAX_PYTHON_FRAMES];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct python_scratch);
} python_scratch SEC(".maps");

// --- The thread context's (context.bpf.h, docs/trace-context.md) ---

// Processes that publish an OpenTelemetry thread context the agent resolved (src/context/): how
// their threads reach their record. Looked up only for a process that known_procs marks as having
// an entry, or does not hold, as python_procs.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);  // tgid
  __type(value, struct ember_context_proc);
} context_procs SEC(".maps");

// When each process's last re-publish notice was written (bpf_ktime_get_ns), for
// EMBER_CONTEXT_NOTICE_GAP_NS.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);    // tgid
  __type(value, __u64);  // ns
} context_notice_times SEC(".maps");

#endif  // EMBER_BPF_MAPS_BPF_H_
