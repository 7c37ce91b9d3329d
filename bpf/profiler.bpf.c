// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Samples every CPU from a cpu-clock perf event: who ran, and their kernel and user stacks.
// Kernel types first: the libbpf headers and sample_record.h build on them.
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "sample_record.h"

// bpf_get_stack and bpf_ringbuf_output are GPL-only helpers.
char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Set by the agent before load.
const volatile bool filter_pids = false;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);  // resized by the agent before load
} samples SEC(".maps");

// Thread group ids to sample when filter_pids is set.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} pid_filter SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, EMBER_STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

// A record is assembled here (too big for the 512-byte BPF stack), then copied out at its size.
struct sample_buffer {
  struct ember_sample header;
  __u64 ips[2 * EMBER_MAX_STACK_DEPTH];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct sample_buffer);
} scratch SEC(".maps");

static __always_inline void stats__add(__u32 index) {
  __u64 *value = bpf_map_lookup_elem(&stats, &index);
  if (value) *value += 1;
}

// Reads one stack into ips; returns its depth in frames, 0 on error (and sets error_flag).
static __always_inline __u32 stack__read(struct bpf_perf_event_data *ctx, __u64 *ips, __u64 flags,
                                         __u32 error_flag, __u32 *sample_flags) {
  long bytes = bpf_get_stack(ctx, ips, EMBER_MAX_STACK_DEPTH * sizeof(__u64), flags);
  if (bytes < 0) {
    *sample_flags |= error_flag;
    return 0;
  }
  __u32 depth = bytes / sizeof(__u64);
  return depth > EMBER_MAX_STACK_DEPTH ? EMBER_MAX_STACK_DEPTH : depth;
}

SEC("perf_event")
int profile__sample(struct bpf_perf_event_data *ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 pid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  if (tid == 0) return 0;  // the idle task: not CPU anyone asked for
  if (filter_pids && !bpf_map_lookup_elem(&pid_filter, &pid)) return 0;

  __u32 zero = 0;
  struct sample_buffer *buf = bpf_map_lookup_elem(&scratch, &zero);
  if (!buf) return 0;

  struct ember_sample *s = &buf->header;
  s->version = EMBER_RECORD_VERSION;
  s->kind = EMBER_RECORD_SAMPLE;
  s->flags = 0;
  s->pid = pid;
  s->tid = tid;
  s->timestamp_ns = bpf_ktime_get_ns();
  s->cgroup_id = bpf_get_current_cgroup_id();
  s->cpu = bpf_get_smp_processor_id();
  s->user_snapshot_bytes = 0;
  s->reserved = 0;
  bpf_get_current_comm(s->comm, sizeof(s->comm));

  __u32 flags = 0;
  __u32 kernel_depth = stack__read(ctx, buf->ips, 0, EMBER_SAMPLE_KERNEL_STACK_ERROR, &flags);
  if (kernel_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier: bounds the offset
  // From kernel context the kernel walks the task's saved user registers.
  __u32 user_depth = stack__read(ctx, &buf->ips[kernel_depth], BPF_F_USER_STACK,
                                 EMBER_SAMPLE_USER_STACK_ERROR, &flags);
  if (flags & EMBER_SAMPLE_KERNEL_STACK_ERROR) stats__add(EMBER_STAT_KERNEL_STACK_ERRORS);
  if (flags & EMBER_SAMPLE_USER_STACK_ERROR) stats__add(EMBER_STAT_USER_STACK_ERRORS);
  s->flags = flags;
  s->kernel_depth = kernel_depth;
  s->user_depth = user_depth;

  __u64 size = sizeof(struct ember_sample) + (__u64)(kernel_depth + user_depth) * sizeof(__u64);
  if (size > sizeof(*buf)) return 0;
  if (bpf_ringbuf_output(&samples, buf, size, 0) == 0) {
    stats__add(EMBER_STAT_SAMPLES);
  } else {
    stats__add(EMBER_STAT_RINGBUF_FULL);
  }
  return 0;
}
