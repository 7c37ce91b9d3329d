// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Samples every CPU from a cpu-clock perf event: who ran, and their kernel and user stacks.
// Kernel types first: the libbpf headers and sample_record.h build on them.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "sample_record.h"

// bpf_get_stack and bpf_ringbuf_output are GPL-only helpers.
char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Set by the agent before load.
const volatile bool filter_pids = false;
// Most bytes of user stack copied per sample for DWARF unwinding; 0 copies none.
const volatile __u32 snapshot_limit = 0;

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
// The snapshot starts right after the last stack address, so `tail` holds both.
struct sample_buffer {
  struct ember_sample header;
  __u8 tail[2 * EMBER_MAX_STACK_DEPTH * sizeof(__u64) + EMBER_MAX_SNAPSHOT_BYTES];
};

// One buffer per CPU, indexed by CPU number: a per-CPU array cannot hold values above 32 KiB.
// A perf_event program does not nest on its CPU, so the buffer is never shared.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);  // set to the number of possible CPUs by the agent before load
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

// Anything at or above this is a kernel address on x86-64.
#define USER_ADDRESS_END 0x800000000000ull

// Copies the user registers in DWARF order. A sample taken in user mode has them in its context
// (read field by field: the verifier rewrites each context load); one taken in the kernel finds
// them where the thread saved them on kernel entry.
static __always_inline bool regs__read_user(struct bpf_perf_event_data *ctx,
                                            struct task_struct *task, __u64 *out) {
  struct pt_regs regs;
  if (ctx->regs.ip < USER_ADDRESS_END) {
    regs.ax = ctx->regs.ax;
    regs.dx = ctx->regs.dx;
    regs.cx = ctx->regs.cx;
    regs.bx = ctx->regs.bx;
    regs.si = ctx->regs.si;
    regs.di = ctx->regs.di;
    regs.bp = ctx->regs.bp;
    regs.sp = ctx->regs.sp;
    regs.r8 = ctx->regs.r8;
    regs.r9 = ctx->regs.r9;
    regs.r10 = ctx->regs.r10;
    regs.r11 = ctx->regs.r11;
    regs.r12 = ctx->regs.r12;
    regs.r13 = ctx->regs.r13;
    regs.r14 = ctx->regs.r14;
    regs.r15 = ctx->regs.r15;
    regs.ip = ctx->regs.ip;
  } else {
    struct pt_regs *saved = (struct pt_regs *)bpf_task_pt_regs(task);
    if (!saved || bpf_probe_read_kernel(&regs, sizeof(regs), saved) != 0) return false;
  }
  if (regs.ip == 0 || regs.ip >= USER_ADDRESS_END) return false;
  out[0] = regs.ax;
  out[1] = regs.dx;
  out[2] = regs.cx;
  out[3] = regs.bx;
  out[4] = regs.si;
  out[5] = regs.di;
  out[6] = regs.bp;
  out[7] = regs.sp;
  out[8] = regs.r8;
  out[9] = regs.r9;
  out[10] = regs.r10;
  out[11] = regs.r11;
  out[12] = regs.r12;
  out[13] = regs.r13;
  out[14] = regs.r14;
  out[15] = regs.r15;
  out[16] = regs.ip;
  return true;
}

struct stack_end_search {
  __u64 start_stack;  // mm->start_stack: where the main thread's frames end (argc lies there)
  __u64 end;
};

static long stack__vma_end(struct task_struct *task, struct vm_area_struct *vma, void *data) {
  struct stack_end_search *search = data;
  search->end = vma->vm_end;
  // The main thread's stack mapping also holds argv, the environment and the auxiliary vector
  // above its first frame: none of it is needed to unwind.
  if (search->start_stack >= vma->vm_start && search->start_stack < vma->vm_end) {
    search->end = search->start_stack;
  }
  return 0;
}

// Copies the user stack from sp up to the end of its mapping, at most snapshot_limit bytes, to dst.
// Returns the bytes copied.
static __always_inline __u32 stack__snapshot(struct task_struct *task, __u64 sp, __u8 *dst,
                                             __u32 *sample_flags) {
  struct stack_end_search search = {.start_stack = BPF_CORE_READ(task, mm, start_stack), .end = 0};
  if (bpf_find_vma(task, sp, stack__vma_end, &search, 0) != 0 || search.end <= sp) {
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_ERROR;
    return 0;
  }
  __u64 size = search.end - sp;
  if (size > snapshot_limit) {
    size = snapshot_limit;
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_CLAMPED;
  }
  if (size > EMBER_MAX_SNAPSHOT_BYTES) size = EMBER_MAX_SNAPSHOT_BYTES;  // for the verifier
  if (bpf_probe_read_user(dst, size, (const void *)sp) != 0) {
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_ERROR;
    return 0;
  }
  return size;
}

SEC("perf_event")
int profile__sample(struct bpf_perf_event_data *ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 pid = pid_tgid >> 32;
  __u32 tid = (__u32)pid_tgid;
  if (tid == 0) return 0;  // the idle task: not CPU anyone asked for
  if (filter_pids && !bpf_map_lookup_elem(&pid_filter, &pid)) return 0;

  __u32 cpu = bpf_get_smp_processor_id();
  struct sample_buffer *buf = bpf_map_lookup_elem(&scratch, &cpu);
  if (!buf) return 0;

  struct ember_sample *s = &buf->header;
  s->version = EMBER_RECORD_VERSION;
  s->kind = EMBER_RECORD_SAMPLE;
  s->flags = 0;
  s->pid = pid;
  s->tid = tid;
  s->timestamp_ns = bpf_ktime_get_ns();
  s->cgroup_id = bpf_get_current_cgroup_id();
  s->cpu = cpu;
  s->user_snapshot_bytes = 0;
  s->reserved = 0;
  bpf_get_current_comm(s->comm, sizeof(s->comm));

  __u64 *ips = (__u64 *)buf->tail;
  __u32 flags = 0;
  __u32 kernel_depth = stack__read(ctx, ips, 0, EMBER_SAMPLE_KERNEL_STACK_ERROR, &flags);
  if (kernel_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier: bounds the offset
  if (flags & EMBER_SAMPLE_KERNEL_STACK_ERROR) stats__add(EMBER_STAT_KERNEL_STACK_ERRORS);

  // The user stack: a snapshot for DWARF unwinding when there is one, else a frame-pointer walk
  // (from kernel context the kernel walks the task's saved user registers). The agent unwinds a
  // snapshot's frame-pointer code itself, so walking both would only add cost.
  __u32 snapshot_bytes = 0;
  struct task_struct *task = bpf_get_current_task_btf();
  if (task->mm && regs__read_user(ctx, task, s->user_regs)) {
    flags |= EMBER_SAMPLE_USER_REGS;
    if (snapshot_limit > 0) {
      snapshot_bytes = stack__snapshot(task, s->user_regs[EMBER_USER_REG_SP],
                                       buf->tail + kernel_depth * sizeof(__u64), &flags);
      if (flags & EMBER_SAMPLE_SNAPSHOT_ERROR) stats__add(EMBER_STAT_SNAPSHOT_ERRORS);
      if (flags & EMBER_SAMPLE_SNAPSHOT_CLAMPED) stats__add(EMBER_STAT_SNAPSHOT_CLAMPED);
    }
  } else {
    __builtin_memset(s->user_regs, 0, sizeof(s->user_regs));
  }
  __u32 user_depth = 0;
  if (snapshot_bytes == 0) {
    user_depth = stack__read(ctx, &ips[kernel_depth], BPF_F_USER_STACK,
                             EMBER_SAMPLE_USER_STACK_ERROR, &flags);
    if (user_depth > EMBER_MAX_STACK_DEPTH) return 0;
    if (flags & EMBER_SAMPLE_USER_STACK_ERROR) stats__add(EMBER_STAT_USER_STACK_ERRORS);
  }
  s->flags = flags;
  s->kernel_depth = kernel_depth;
  s->user_depth = user_depth;
  s->user_snapshot_bytes = snapshot_bytes;

  __u64 size = sizeof(struct ember_sample) + (__u64)(kernel_depth + user_depth) * sizeof(__u64) +
               snapshot_bytes;
  if (size > sizeof(*buf)) return 0;
  if (bpf_ringbuf_output(&samples, buf, size, 0) == 0) {
    stats__add(EMBER_STAT_SAMPLES);
  } else {
    stats__add(EMBER_STAT_RINGBUF_FULL);
  }
  return 0;
}
