// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// The sampled thread's user registers, where its stack ends, and the copy of that stack that the
// agent unwinds by DWARF (--stack-snapshot-bytes).
#ifndef EMBER_BPF_SNAPSHOT_BPF_H_
#define EMBER_BPF_SNAPSHOT_BPF_H_

#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "maps.bpf.h"
#include "sample_record.h"

// Anything at or above this is a kernel address on x86-64.
#define USER_ADDRESS_END 0x800000000000ull

// Copies the user registers in DWARF order. A sample taken in user mode has them in its context
// (read field by field: the verifier rewrites each context load); one taken in the kernel finds
// them where the thread saved them on kernel entry.
static __always_inline bool regs__read_user(struct bpf_perf_event_data *ctx, bool in_user_mode,
                                            struct task_struct *task, __u64 *out) {
  struct pt_regs regs;
  if (in_user_mode) {
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

// A cached end farther than this above sp is looked up again (another stack, e.g. a signal
// handler's alternate stack).
#define MAX_CACHED_STACK_SPAN (8ull << 20)

// Drops the thread's cached stack end: its next sample looks it up again.
static __always_inline void stack__forget_end(struct task_struct *task) {
  struct stack_end *known = bpf_task_storage_get(&stack_ends, task, 0, 0);
  if (known) known->end = 0;
}

// The end of the stack sp lies in (its mapping's end, or for a main thread where its frames end);
// 0 when there is none. *cached: the answer came from stack_ends.
static __always_inline __u64 stack__end(struct task_struct *task, __u64 sp, bool *cached) {
  struct stack_end *known = bpf_task_storage_get(&stack_ends, task, 0, 0);
  if (known && sp < known->end && known->end - sp <= MAX_CACHED_STACK_SPAN) {
    *cached = true;
    return known->end;
  }
  *cached = false;
  struct stack_end_search search = {.start_stack = BPF_CORE_READ(task, mm, start_stack), .end = 0};
  if (bpf_find_vma(task, sp, stack__vma_end, &search, 0) != 0 || search.end <= sp) return 0;
  if (!known) known = bpf_task_storage_get(&stack_ends, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
  if (known) known->end = search.end;
  return search.end;
}

// Copies the user stack from sp up to the end of its mapping, at most snapshot_limit bytes, to dst.
// Returns the bytes copied.
static __always_inline __u32 stack__snapshot(struct task_struct *task, __u64 sp, __u8 *dst,
                                             __u32 *sample_flags) {
  bool cached = false;
  __u64 end = stack__end(task, sp, &cached);
  if (end == 0) {
    stats__add(EMBER_STAT_SNAPSHOT_NO_MAPPING);
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_ERROR;
    return 0;
  }
  __u64 size = end - sp;
  if (size > snapshot_limit) {
    size = snapshot_limit;
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_CLAMPED;
  }
  if (size > EMBER_MAX_SNAPSHOT_BYTES) size = EMBER_MAX_SNAPSHOT_BYTES;  // for the verifier
  if (bpf_probe_read_user(dst, size, (const void *)sp) != 0) {
    // A cached end may be stale: the next sample of the thread looks it up again.
    if (cached) stack__forget_end(task);
    *sample_flags |= EMBER_SAMPLE_SNAPSHOT_ERROR;
    return 0;
  }
  return size;
}

#endif  // EMBER_BPF_SNAPSHOT_BPF_H_
