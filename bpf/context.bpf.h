// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// The OpenTelemetry thread context (docs/trace-context.md, "BPF read"): the sampled thread's
// otel_thread_ctx_v1 pointer, found from its fs base as context_procs says, and the record it
// points to, copied into the sample after the Python frames. Read only while the thread is
// interrupted, as the OTEP requires: its writer updates it with compiler fences only.
#ifndef EMBER_BPF_CONTEXT_BPF_H_
#define EMBER_BPF_CONTEXT_BPF_H_

#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "maps.bpf.h"
#include "sample_record.h"

#define CONTEXT_MAX_ATTRS (EMBER_MAX_CONTEXT_BYTES - EMBER_CONTEXT_HEADER_BYTES)
#define CONTEXT_VALID_AT 24
#define CONTEXT_ATTRS_SIZE_AT 26

static __always_inline bool context__read_u64(__u64 address, __u64 *value) {
  return bpf_probe_read_user(value, sizeof(*value), (const void *)address) == 0;
}

// Where the thread keeps its otel_thread_ctx_v1 pointer; 0 with *status set when it has none.
static __always_inline __u64 context__slot(const struct ember_context_proc *proc, __u64 fsbase,
                                           __u32 *status) {
  if (proc->kind == EMBER_CONTEXT_TLS_TP_OFFSET) return fsbase + proc->offset;
  if (proc->kind != EMBER_CONTEXT_TLS_DTV) {
    *status = EMBER_CONTEXT_READ_FAILED;
    return 0;
  }
  // The TCB's second word (glibc's tcbhead_t.dtv, musl's pthread.dtv).
  __u64 dtv = 0;
  if (!context__read_u64(fsbase + 8, &dtv)) {
    *status = EMBER_CONTEXT_READ_FAILED;
    return 0;
  }
  // The DTV's length: glibc keeps it one entry before the pointer, musl in its first word. A
  // thread whose DTV predates the module's dlopen has no entry for it yet.
  const __u32 shift = proc->dtv_entry_shift == 3 ? 3 : 4;
  __u64 length = 0;
  if (!context__read_u64(shift == 3 ? dtv : dtv - 16, &length)) {
    *status = EMBER_CONTEXT_READ_FAILED;
    return 0;
  }
  if (proc->module_id == 0 || proc->module_id > length) {
    *status = EMBER_CONTEXT_NO_TLS_BLOCK;
    return 0;
  }
  __u64 block = 0;
  if (!context__read_u64(dtv + (proc->module_id << shift), &block)) {
    *status = EMBER_CONTEXT_READ_FAILED;
    return 0;
  }
  // glibc's TLS_DTV_UNALLOCATED (-1) until the thread first touches a dlopened module's TLS.
  if (block == 0 || block == ~0ull) {
    *status = EMBER_CONTEXT_NO_TLS_BLOCK;
    return 0;
  }
  return block + proc->offset;
}

// Copies the sampled thread's record to buf->tail + at (at <= CONTEXT_MAX_AT). Returns its
// status (enum ember_context_status); *bytes is set with EMBER_CONTEXT_OK.
static __always_inline __u32 context__read(const struct ember_context_proc *proc,
                                           struct task_struct *task, struct sample_buffer *buf,
                                           __u64 at, __u32 *bytes) {
  __u32 status = EMBER_CONTEXT_OK;
  __u64 slot = context__slot(proc, BPF_CORE_READ(task, thread.fsbase), &status);
  if (slot == 0) return status;
  __u64 record = 0;
  if (!context__read_u64(slot, &record)) return EMBER_CONTEXT_READ_FAILED;
  if (record == 0) return EMBER_CONTEXT_NONE;
  if (at > CONTEXT_MAX_AT) return EMBER_CONTEXT_READ_FAILED;
  __u8 *out = buf->tail + at;
  if (bpf_probe_read_user(out, EMBER_CONTEXT_HEADER_BYTES, (const void *)record) != 0) {
    return EMBER_CONTEXT_READ_FAILED;
  }
  if (out[CONTEXT_VALID_AT] != 1) return EMBER_CONTEXT_INVALID;
  __u64 attrs = out[CONTEXT_ATTRS_SIZE_AT] | ((__u64)out[CONTEXT_ATTRS_SIZE_AT + 1] << 8);
  if (attrs > CONTEXT_MAX_ATTRS) attrs = CONTEXT_MAX_ATTRS;
  // Opaque to the compiler, so the bound below reaches the verifier as written.
  asm volatile("" : "+r"(attrs));
  if (attrs > CONTEXT_MAX_ATTRS) return EMBER_CONTEXT_READ_FAILED;
  if (attrs > 0 && bpf_probe_read_user(out + EMBER_CONTEXT_HEADER_BYTES, attrs,
                                       (const void *)(record + EMBER_CONTEXT_HEADER_BYTES)) != 0) {
    return EMBER_CONTEXT_READ_FAILED;
  }
  *bytes = EMBER_CONTEXT_HEADER_BYTES + attrs;
  return EMBER_CONTEXT_OK;
}

static __always_inline void context__count(__u32 status) {
  switch (status) {
    case EMBER_CONTEXT_OK:
      stats__add(EMBER_STAT_CONTEXT_OK);
      break;
    case EMBER_CONTEXT_NONE:
      stats__add(EMBER_STAT_CONTEXT_NONE);
      break;
    case EMBER_CONTEXT_INVALID:
      stats__add(EMBER_STAT_CONTEXT_INVALID);
      break;
    case EMBER_CONTEXT_READ_FAILED:
      stats__add(EMBER_STAT_CONTEXT_READ_FAILED);
      break;
    case EMBER_CONTEXT_NO_TLS_BLOCK:
      stats__add(EMBER_STAT_CONTEXT_NO_TLS_BLOCK);
      break;
  }
}

#endif  // EMBER_BPF_CONTEXT_BPF_H_
