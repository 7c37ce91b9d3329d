// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// CPython frames (docs/cpython.md, "The BPF half"): the sampled thread's PyThreadState, then its
// frames, read as the interpreter's layout in python_procs describes them.
#ifndef EMBER_BPF_PYTHON_WALK_BPF_H_
#define EMBER_BPF_PYTHON_WALK_BPF_H_

#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "maps.bpf.h"
#include "sample_record.h"

#define PYTHON_HEADER_MASK (EMBER_MAX_PYTHON_FRAME_HEADER - 1)

static __always_inline __u64 python__read_u64(__u64 address, bool *ok) {
  __u64 value = 0;
  if (bpf_probe_read_user(&value, sizeof(value), (const void *)address) != 0) *ok = false;
  return value;
}

// A field of the frame header copied into scratch; offsets come from the map, masked so every
// access stays inside the header buffer.
static __always_inline __u64 python__header_u64(const __u8 *header, __u16 offset) {
  return *(const __u64 *)(header + (offset & PYTHON_HEADER_MASK));
}

struct python_thread_search {
  const struct ember_python_proc *proc;
  __u64 fsbase;
  __u64 candidate;  // the thread state to look at next; 0: end of the list
  __u64 found;
  bool failed;
};

static long python__thread_step(__u64 index, void *data) {
  struct python_thread_search *search = data;
  if (search->candidate == 0) return 1;
  bool ok = true;
  __u64 id = python__read_u64(search->candidate + search->proc->tstate_thread_id, &ok);
  if (ok && id == search->fsbase) {
    search->found = search->candidate;
    return 1;
  }
  search->candidate = python__read_u64(search->candidate + search->proc->tstate_next, &ok);
  if (!ok) {
    search->failed = true;
    return 1;
  }
  return 0;
}

// The PyThreadState of the sampled thread, matched by thread_id == its fs base (pthread_self()):
// the cached one, else the GIL holder (3.8-3.11), else a search of the interpreter's threads.
// Returns 0 and sets *status when there is none.
static __always_inline __u64 python__thread_state(const struct ember_python_proc *proc,
                                                  struct task_struct *task, __u64 pid_tgid,
                                                  __u32 *status) {
  __u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
  bool ok = true;
  __u64 *cached = bpf_map_lookup_elem(&python_threads, &pid_tgid);
  if (cached && *cached) {
    __u64 tstate = *cached;
    if (python__read_u64(tstate + proc->tstate_thread_id, &ok) == fsbase && ok) return tstate;
    ok = true;
  }
  __u64 found = 0;
  if (proc->tstate_current_address) {
    __u64 current = python__read_u64(proc->tstate_current_address, &ok);
    if (ok && current && python__read_u64(current + proc->tstate_thread_id, &ok) == fsbase && ok) {
      found = current;
    }
    ok = true;
  }
  if (!found) {
    __u64 interp = python__read_u64(proc->runtime_address + proc->interpreters_head, &ok);
    if (!ok) {
      *status = EMBER_PYTHON_READ_FAILED;
      return 0;
    }
    struct python_thread_search search = {.proc = proc, .fsbase = fsbase};
    if (interp) search.candidate = python__read_u64(interp + proc->interp_threads_head, &ok);
    if (!ok) {
      *status = EMBER_PYTHON_READ_FAILED;
      return 0;
    }
    bpf_loop(EMBER_MAX_PYTHON_THREADS, python__thread_step, &search, 0);
    found = search.found;
    if (!found) {
      *status = search.failed ? EMBER_PYTHON_READ_FAILED : EMBER_PYTHON_NO_THREAD_STATE;
      return 0;
    }
  }
  bpf_map_update_elem(&python_threads, &pid_tgid, &found, BPF_ANY);
  return found;
}

struct python_walk {
  const struct ember_python_proc *proc;
  struct python_scratch *scratch;
  __u64 frame;   // the next frame to read; 0: the walk reached the thread's first frame
  __u32 depth;   // frames recorded
  __u32 status;  // EMBER_PYTHON_OK until something stops the walk
};

// One frame: a copy of its header, then one read of its code object's type. Returns 1 to stop.
static long python__frame_step(__u64 index, void *data) {
  struct python_walk *walk = data;
  if (walk->frame == 0) return 1;
  const struct ember_python_proc *proc = walk->proc;
  struct python_scratch *scratch = walk->scratch;
  __u32 size = proc->frame_header_bytes;
  if (size == 0 || size > EMBER_MAX_PYTHON_FRAME_HEADER ||
      bpf_probe_read_user(scratch->header, size & (EMBER_MAX_PYTHON_FRAME_HEADER * 2 - 1),
                          (const void *)walk->frame) != 0) {
    walk->status = EMBER_PYTHON_READ_FAILED;
    return 1;
  }
  const __u8 *header = scratch->header;
  __u64 previous = python__header_u64(header, proc->frame_previous);
  __u32 depth = walk->depth;
  if (proc->frame_owner != EMBER_PYTHON_NO_OFFSET && proc->owner_cstack != EMBER_PYTHON_NO_OWNER &&
      header[proc->frame_owner & PYTHON_HEADER_MASK] == proc->owner_cstack) {
    // The shim frame of one _PyEval_EvalFrameDefault call (3.12+): the frame recorded before it
    // was that call's first.
    if (depth > 0 && depth <= EMBER_MAX_PYTHON_FRAMES) {
      scratch->frames[(depth - 1) & (EMBER_MAX_PYTHON_FRAMES - 1)].flags |=
          EMBER_PYTHON_FRAME_ENTRY;
    }
    walk->frame = previous;
    return 0;
  }
  if (depth >= EMBER_MAX_PYTHON_FRAMES) {
    walk->status = EMBER_PYTHON_TRUNCATED;
    return 1;
  }
  __u64 code = python__header_u64(header, proc->frame_code);
  __u64 position = python__header_u64(header, proc->frame_position);
  if (proc->position_kind <= 2) position = (__u64)(__s64)(__s32)position;  // an int f_lasti
  __u32 flags = 0;
  if (!(proc->flags & EMBER_PYTHON_PROC_INTERPRETER_FRAMES)) {
    flags = EMBER_PYTHON_FRAME_ENTRY;  // 3.8-3.10: one eval call per frame
  } else if (proc->frame_is_entry != EMBER_PYTHON_NO_OFFSET &&
             header[proc->frame_is_entry & PYTHON_HEADER_MASK]) {
    flags = EMBER_PYTHON_FRAME_ENTRY;
  }
  if (proc->code_type_address) {
    bool ok = true;
    __u64 type = python__read_u64(code + proc->code_type_offset, &ok);
    if (!ok) {
      walk->status = EMBER_PYTHON_READ_FAILED;
      return 1;
    }
    if (type != proc->code_type_address) {
      walk->status = EMBER_PYTHON_NOT_CODE;
      return 1;
    }
  }
  struct ember_python_frame *out = &scratch->frames[depth & (EMBER_MAX_PYTHON_FRAMES - 1)];
  out->code = code;
  out->position = position;
  out->flags = flags;
  out->reserved = 0;
  walk->depth = depth + 1;
  walk->frame = previous;
  return 0;
}

// Walks the sampled thread's Python frames into scratch->frames (leaf first). Returns how many;
// *status says how the walk ended.
static __always_inline __u32 python__walk(const struct ember_python_proc *proc,
                                          struct python_scratch *scratch, struct task_struct *task,
                                          __u64 pid_tgid, __u32 *status) {
  __u64 tstate = python__thread_state(proc, task, pid_tgid, status);
  if (!tstate) return 0;
  bool ok = true;
  __u64 frame = python__read_u64(tstate + proc->tstate_frame, &ok);
  if (ok && frame && proc->cframe_current_frame != EMBER_PYTHON_NO_OFFSET) {
    frame = python__read_u64(frame + proc->cframe_current_frame, &ok);
  }
  if (!ok) {
    *status = EMBER_PYTHON_READ_FAILED;
    return 0;
  }
  struct python_walk walk = {
      .proc = proc, .scratch = scratch, .frame = frame, .depth = 0, .status = EMBER_PYTHON_OK};
  // Shim frames (3.12+) take a step without a record: room for one per recorded frame.
  bpf_loop(2 * EMBER_MAX_PYTHON_FRAMES, python__frame_step, &walk, 0);
  if (walk.status == EMBER_PYTHON_OK && walk.frame != 0) walk.status = EMBER_PYTHON_TRUNCATED;
  *status = walk.status;
  return walk.depth;
}

static __always_inline void python__count(__u32 status) {
  switch (status) {
    case EMBER_PYTHON_OK:
      stats__add(EMBER_STAT_PYTHON_OK);
      break;
    case EMBER_PYTHON_NO_THREAD_STATE:
      stats__add(EMBER_STAT_PYTHON_NO_THREAD_STATE);
      break;
    case EMBER_PYTHON_READ_FAILED:
      stats__add(EMBER_STAT_PYTHON_READ_FAILED);
      break;
    case EMBER_PYTHON_NOT_CODE:
      stats__add(EMBER_STAT_PYTHON_NOT_CODE);
      break;
    case EMBER_PYTHON_TRUNCATED:
      stats__add(EMBER_STAT_PYTHON_TRUNCATED);
      break;
  }
}

#endif  // EMBER_BPF_PYTHON_WALK_BPF_H_
