// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Samples every CPU from a cpu-clock perf event: who ran, and their kernel and user stacks.
// Kernel types first: the libbpf headers and sample_record.h build on them.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "maps.bpf.h"
#include "phase_times.h"
#include "sample_record.h"

// The unwinders, in the order a sample runs them.
#include "snapshot.bpf.h"
#include "cfi_walk.bpf.h"
#include "python_walk.bpf.h"
#include "context.bpf.h"

// bpf_get_stack and bpf_ringbuf_output are GPL-only helpers.
char LICENSE[] SEC("license") = "Dual BSD/GPL";

// When a sample last woke the agent for a new process (bpf_ktime_get_ns).
__u64 new_process_woken_at_ns = 0;

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
  if (pid == skip_tgid) return 0;
  if (filter_pids && !bpf_map_lookup_elem(&pid_filter, &pid)) return 0;

  PHASE_START();
  PHASE_COUNT(EMBER_PHASE_SAMPLES, 1);
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
  s->python_depth = 0;
  s->python_status = EMBER_PYTHON_NOT_WALKED;
  s->context_bytes = 0;
  s->context_status = EMBER_CONTEXT_NOT_READ;
  s->reserved8 = 0;
  s->reserved = 0;
  bpf_get_current_comm(s->comm, sizeof(s->comm));
  PHASE(EMBER_PHASE_HEADER);
  PHASE(EMBER_PHASE_TIMER);

  __u64 *ips = (__u64 *)buf->tail;
  __u32 flags = 0;
  // A sample taken in user mode has no kernel stack. bpf_get_stack finds that out too, but costs
  // 0.6 to 0.8 µs a sample to do so here.
  const bool in_user_mode = ctx->regs.ip < USER_ADDRESS_END;
  __u32 kernel_depth = 0;
  if (!in_user_mode) {
    kernel_depth = stack__read(ctx, ips, 0, EMBER_SAMPLE_KERNEL_STACK_ERROR, &flags);
  }
  if (kernel_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier: bounds the offset
  if (flags & EMBER_SAMPLE_KERNEL_STACK_ERROR) stats__add(EMBER_STAT_KERNEL_STACK_ERRORS);
  PHASE(EMBER_PHASE_KERNEL_STACK);

  // The user stack: the CFI walk where the process has rows (cfi_walk.bpf.h), then a snapshot
  // from where that walk stopped for the agent's DWARF unwinding; without either, a frame-pointer
  // walk (from kernel context the kernel walks the task's saved user registers). The agent unwinds
  // a snapshot's frame-pointer code itself, so walking both would only add cost.
  __u32 snapshot_bytes = 0;
  __u32 user_depth = 0;
  struct task_struct *task = bpf_get_current_task_btf();
  // Read once: the verifier checks each load through a kernel pointer on every path it explores,
  // by a name search through the kernel's BTF: loads of task->mm at each use take most of a
  // 110 ms load.
  const bool has_mm = task->mm != NULL;
  if (has_mm && regs__read_user(ctx, in_user_mode, task, s->user_regs)) {
    flags |= EMBER_SAMPLE_USER_REGS;
    PHASE(EMBER_PHASE_USER_REGS);
    if (unwind_in_bpf) user_depth = unwind__user(s, buf, task, pid_tgid, kernel_depth, &flags);
    if (user_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier
    // The walk times its own phases.
    PHASE_RESTART();
    if (snapshot_limit > 0 && !(flags & EMBER_SAMPLE_UNWIND_COMPLETE)) {
      snapshot_bytes =
          stack__snapshot(task, s->user_regs[EMBER_USER_REG_SP],
                          buf->tail + (kernel_depth + user_depth) * sizeof(__u64), &flags);
      if (flags & EMBER_SAMPLE_SNAPSHOT_ERROR) stats__add(EMBER_STAT_SNAPSHOT_ERRORS);
      if (flags & EMBER_SAMPLE_SNAPSHOT_CLAMPED) stats__add(EMBER_STAT_SNAPSHOT_CLAMPED);
    }
  } else {
    __builtin_memset(s->user_regs, 0, sizeof(s->user_regs));
  }
  if (snapshot_bytes == 0 && !(flags & EMBER_SAMPLE_UNWOUND_IN_BPF)) {
    user_depth = stack__read(ctx, &ips[kernel_depth], BPF_F_USER_STACK,
                             EMBER_SAMPLE_USER_STACK_ERROR, &flags);
    if (user_depth > EMBER_MAX_STACK_DEPTH) return 0;
    if (flags & EMBER_SAMPLE_USER_STACK_ERROR) stats__add(EMBER_STAT_USER_STACK_ERRORS);
  }
  __u64 size = sizeof(struct ember_sample) + (__u64)(kernel_depth + user_depth) * sizeof(__u64) +
               snapshot_bytes;
  PHASE(EMBER_PHASE_SNAPSHOT);

  // CPython frames, for the processes the agent configured.
  const __u8 *known = has_mm ? bpf_map_lookup_elem(&known_procs, &pid) : NULL;
  const struct ember_python_proc *python = NULL;
  __u64 python_bytes = 0;
  if (has_mm && (!known || (*known & EMBER_KNOWN_PROC_PYTHON))) {
    python = bpf_map_lookup_elem(&python_procs, &pid);
  }
  if (python) {
    __u32 zero = 0;
    struct python_scratch *scratch = bpf_map_lookup_elem(&python_scratch, &zero);
    __u32 status = EMBER_PYTHON_READ_FAILED;
    __u32 depth = 0;
    if (scratch) depth = python__walk(python, scratch, task, pid_tgid, &status);
    python__count(status);
    flags |= EMBER_SAMPLE_PYTHON;
    s->python_status = status;
    __u64 at = ((__u64)(kernel_depth + user_depth) * sizeof(__u64) + snapshot_bytes + 7) & ~7ull;
    __u64 bytes = (__u64)depth * sizeof(struct ember_python_frame);
    // Opaque to the compiler, so the bounds checks below reach the verifier as written.
    asm volatile("" : "+r"(at), "+r"(bytes));
    if (at <= PYTHON_FRAMES_MAX_AT + 8 && bytes > 0 && bytes <= PYTHON_FRAMES_BYTES && scratch &&
        bpf_probe_read_kernel(buf->tail + at, bytes, scratch->frames) == 0) {
      s->python_depth = depth;
      python_bytes = bytes;
      size = sizeof(struct ember_sample) + at + bytes;
    }
  }

  PHASE(EMBER_PHASE_PYTHON);
  // The OpenTelemetry thread context, for the processes the agent resolved it of.
  const struct ember_context_proc *context = NULL;
  if (has_mm && (!known || (*known & EMBER_KNOWN_PROC_CONTEXT))) {
    context = bpf_map_lookup_elem(&context_procs, &pid);
  }
  if (context) {
    __u64 at = (((__u64)(kernel_depth + user_depth) * sizeof(__u64) + snapshot_bytes + 7) & ~7ull) +
               python_bytes;
    asm volatile("" : "+r"(at));
    __u32 bytes = 0;
    __u32 status = context__read(context, task, buf, at, &bytes);
    context__count(status);
    s->context_status = status;
    if (status == EMBER_CONTEXT_OK && at <= CONTEXT_MAX_AT && bytes <= EMBER_MAX_CONTEXT_BYTES) {
      s->context_bytes = bytes;
      size = sizeof(struct ember_sample) + at + bytes;
    }
    PHASE_COUNT(EMBER_PHASE_CONTEXT_READS, 1);
  }
  PHASE(EMBER_PHASE_CONTEXT);
  s->flags = flags;
  s->kernel_depth = kernel_depth;
  s->user_depth = user_depth;
  s->user_snapshot_bytes = snapshot_bytes;
  if (size > sizeof(*buf)) return 0;
  // The agent drains the ring buffer on its own at least every 5 s (kMaxPollMs in
  // src/agent/agent.cc), so a record wakes it only when the buffer is a quarter full, or when its
  // process is new to the agent: a wake-up per sample would cost more than the sample. Samples
  // walked in BPF are looked up too: an exec clears the process's mark and its unwind entry, but
  // the agent may write the entry again from the maps it read before the exec (it reads samples
  // late); until it reads the process again, such a walk follows the old program's tables, which
  // without a wake-up could last until the next drain.
  __u64 pending = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA);
  __u64 wakeup = pending > bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 4 ? BPF_RB_FORCE_WAKEUP
                                                                             : BPF_RB_NO_WAKEUP;
  if (new_process_wakeup_gap_ns > 0 && has_mm && !known) {
    s->flags = flags | EMBER_SAMPLE_PROCESS_UNKNOWN;
    if (wakeup == BPF_RB_NO_WAKEUP &&
        s->timestamp_ns - new_process_woken_at_ns >= new_process_wakeup_gap_ns) {
      new_process_woken_at_ns = s->timestamp_ns;
      wakeup = BPF_RB_FORCE_WAKEUP;
    }
  }
  PHASE(EMBER_PHASE_WAKEUP);
  if (bpf_ringbuf_output(&samples, buf, size, wakeup) == 0) {
    stats__add(EMBER_STAT_SAMPLES);
  } else {
    stats__add(EMBER_STAT_RINGBUF_FULL);
  }
  PHASE(EMBER_PHASE_OUTPUT);
  PHASE_COUNT(EMBER_PHASE_RECORD_BYTES, size);
  return 0;
}

// An exec replaces the process's maps: what the agent read of it, the CFI rows it placed for it,
// where its threads kept their thread context, and the exec'ing thread's stack end are the old
// program's. Its samples must not be walked by those rows, nor carry a record read at the old
// program's TLS offsets, and must wake the agent to read it again.
SEC("raw_tp/sched_process_exec")
int profile__exec(void *ctx) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  bpf_map_delete_elem(&known_procs, &tgid);
  bpf_map_delete_elem(&unwind_procs, &tgid);
  bpf_map_delete_elem(&context_procs, &tgid);
  stack__forget_end(bpf_get_current_task_btf());
  return 0;
}

// A process re-published its process context: prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, addr, len,
// "OTEL_CTX") (OTEP 4719). Seen on entry, so the notice comes also where the kernel lacks
// CONFIG_ANON_VMA_NAME and the call fails: the header is in memory all the same. Other names (glibc
// names its thread stacks so) are not the agent's business.
#define CONTEXT_PR_SET_VMA 0x53564d41
#define CONTEXT_PR_SET_VMA_ANON_NAME 0

SEC("tracepoint/syscalls/sys_enter_prctl")
int profile__prctl(struct trace_event_raw_sys_enter *ctx) {
  if (ctx->args[0] != CONTEXT_PR_SET_VMA || ctx->args[1] != CONTEXT_PR_SET_VMA_ANON_NAME) return 0;
  __u32 pid = bpf_get_current_pid_tgid() >> 32;
  if (pid == skip_tgid) return 0;
  if (filter_pids && !bpf_map_lookup_elem(&pid_filter, &pid)) return 0;
  char name[16] = {};
  if (bpf_probe_read_user_str(name, sizeof(name), (const void *)ctx->args[4]) != 9) return 0;
  if (name[0] != 'O' || name[1] != 'T' || name[2] != 'E' || name[3] != 'L' || name[4] != '_' ||
      name[5] != 'C' || name[6] != 'T' || name[7] != 'X') {
    return 0;
  }
  const __u64 now = bpf_ktime_get_ns();
  __u64 *last = bpf_map_lookup_elem(&context_notice_times, &pid);
  if (last && now - *last < EMBER_CONTEXT_NOTICE_GAP_NS) {
    stats__add(EMBER_STAT_CONTEXT_NOTICES_SUPPRESSED);
    return 0;
  }
  bpf_map_update_elem(&context_notice_times, &pid, &now, BPF_ANY);
  struct ember_context_notice notice = {
      .version = EMBER_RECORD_VERSION, .kind = EMBER_RECORD_CONTEXT_NOTICE, .pid = pid};
  if (bpf_ringbuf_output(&samples, &notice, sizeof(notice), 0) == 0) {
    stats__add(EMBER_STAT_CONTEXT_NOTICES);
  } else {
    stats__add(EMBER_STAT_CONTEXT_NOTICES_LOST);
  }
  return 0;
}
