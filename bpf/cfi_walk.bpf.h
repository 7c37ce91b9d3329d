// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// User stacks walked by the CFI rows the agent placed in unwind_rows (docs/bpf-unwinding.md): as
// far as the rows reach, the rest left to the agent from the snapshot.
#ifndef EMBER_BPF_CFI_WALK_BPF_H_
#define EMBER_BPF_CFI_WALK_BPF_H_

#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "maps.bpf.h"
#include "phase_times.h"
#include "sample_record.h"
#include "snapshot.bpf.h"

#define UNWIND_MAPPING_MASK (EMBER_MAX_UNWIND_MAPPINGS - 1)
// Index steps of a binary search over EMBER_MAX_UNWIND_MAPPINGS mappings.
#define UNWIND_MAPPING_SEARCH_STEPS 8
#define UNWIND_ADDRESS_MASK 255
// Rows after a bucket's first looked at one by one before a binary search.
#define UNWIND_ROWS_SCANNED 2
_Static_assert(UNWIND_ADDRESS_MASK + 1 >= 2 * EMBER_MAX_STACK_DEPTH, "a kernel and a user stack");

// The walk reads the stack a window at a time into the buffer's tail, after the addresses: one
// read of user memory costs about as much as all the rest of a frame's step, and the return
// addresses of a run of small frames then come from one read. Kept in the map, not on the BPF
// stack with the walk, so the verifier does not follow its values from step to step (it would
// look at ten times the instructions).
#define UNWIND_WINDOW_BYTES 4096
#define UNWIND_WINDOW_MASK (UNWIND_WINDOW_BYTES - 1)
struct unwind_window {
  __u64 stack_end;  // stack__end's (0: not known, each pair is read on its own)
  __u64 start;      // the stack's bytes now in `bytes`
  __u64 size;
  __u64 end_cached;  // stack_end came from stack_ends: a failed read drops it there
  __u8 bytes[UNWIND_WINDOW_BYTES + 16];  // +16: a pair read at a masked offset stays inside
};
#define UNWIND_WINDOW_AT (2 * EMBER_MAX_STACK_DEPTH * sizeof(__u64))
_Static_assert(UNWIND_WINDOW_AT + sizeof(struct unwind_window) <=
                   sizeof(((struct sample_buffer *)0)->tail),
               "the window fits in the buffer's tail");

struct unwind_walk {
  const struct ember_unwind_proc *proc;
  struct sample_buffer *buf;
  __u32 first;  // index in the buffer's addresses of the first user frame (the kernel depth)
  __u32 depth;  // user frames recorded
  __u64 pc;     // the frame to step next
  __u64 sp;
  __u64 bp;
  bool bp_known;
  bool complete;                 // the thread's first frame was recorded
  __u32 last_mapping;            // index of the mapping of the frame before
  struct unwind_window *window;  // in buf
};

// One step of a binary search for the last entry at or below `target` among `high` entries:
// `low` ends as how many there are. Each step is its own bpf_loop call, so the verifier looks at
// one step, not at every path through the whole search.
struct unwind_search {
  const struct ember_unwind_proc *proc;  // searching its mappings, or (NULL) rows from first
  __u32 first;
  __u32 low;
  __u32 high;
  __u64 target;
};

static long unwind__search_step(__u64 index, void *data) {
  struct unwind_search *search = data;
  if (search->low >= search->high) return 1;
  __u32 middle = search->low + (search->high - search->low) / 2;
  __u64 start;
  if (search->proc) {
    start = search->proc->mappings[middle & UNWIND_MAPPING_MASK].start;
  } else {
    __u32 key = search->first + middle;
    const struct ember_unwind_row *row = bpf_map_lookup_elem(&unwind_rows, &key);
    if (!row) {
      search->low = 0;  // a row outside the map: no answer
      return 1;
    }
    start = row->pc;
  }
  if (start <= search->target) {
    search->low = middle + 1;
  } else {
    search->high = middle;
  }
  return 0;
}

// The mapping holding `address`, or NULL. *last: the index of the mapping found for the frame
// before, looked at first (callers are mostly in the same file), updated.
static __always_inline const struct ember_unwind_mapping *unwind__mapping(
    const struct ember_unwind_proc *proc, __u64 address, __u32 *last) {
  const struct ember_unwind_mapping *cached = &proc->mappings[*last & UNWIND_MAPPING_MASK];
  if (cached->start <= address && address < cached->end) return cached;
  struct unwind_search search = {.proc = proc, .low = 0, .high = proc->count, .target = address};
  if (search.high > EMBER_MAX_UNWIND_MAPPINGS) search.high = EMBER_MAX_UNWIND_MAPPINGS;
  PHASE_COUNT(EMBER_PHASE_MAPPING_SEARCHES, 1);
  bpf_loop(UNWIND_MAPPING_SEARCH_STEPS, unwind__search_step, &search, 0);
  if (search.low == 0 || search.low > EMBER_MAX_UNWIND_MAPPINGS) return NULL;
  *last = search.low - 1;
  const struct ember_unwind_mapping *mapping = &proc->mappings[*last & UNWIND_MAPPING_MASK];
  return address < mapping->end ? mapping : NULL;
}

// The row of a file holding ELF address `elf_pc`: the last one starting at or below it, searched
// for among the rows of elf_pc's bucket.
static __always_inline const struct ember_unwind_row *unwind__row(
    const struct ember_unwind_mapping *mapping, __u64 elf_pc) {
  const __u32 rows = mapping->row_count;
  if (rows == 0 || rows > EMBER_MAX_UNWIND_ROWS_PER_FILE || elf_pc < mapping->table_base) {
    return NULL;
  }
  const __u64 bucket = (elf_pc - mapping->table_base) >> (mapping->bucket_shift & 63);
  struct unwind_search search = {
      .proc = NULL, .first = mapping->first_row, .high = rows, .target = elf_pc};
  __u32 in_force = rows - 1;  // past the last bucket: the last row
  if (bucket < mapping->bucket_count) {
    __u32 key = mapping->first_row + (__u32)bucket;
    const __u32 *at_start = bpf_map_lookup_elem(&unwind_buckets, &key);
    if (!at_start) return NULL;
    in_force = *at_start;
    key += 1;
    const __u32 *at_next =
        bucket + 1 < mapping->bucket_count ? bpf_map_lookup_elem(&unwind_buckets, &key) : NULL;
    if (at_next && *at_next < rows) search.high = *at_next + 1;
  }
  // The row in force at the bucket's start is at or below elf_pc: the search looks past it. A
  // bucket holds a row or two in most files, so the next rows are looked at in turn first.
  __u32 found = in_force;
  for (int i = 0; i < UNWIND_ROWS_SCANNED; i++) {
    if (found + 1 >= search.high) {
      search.high = 0;  // found
      break;
    }
    __u32 key = search.first + found + 1;
    const struct ember_unwind_row *row = bpf_map_lookup_elem(&unwind_rows, &key);
    if (!row) return NULL;
    if (row->pc > elf_pc) {
      search.high = 0;
      break;
    }
    found += 1;
  }
  if (search.high != 0) {
    search.low = found + 1;
    PHASE_COUNT(EMBER_PHASE_ROW_SEARCHES, 1);
    bpf_loop(EMBER_UNWIND_ROW_SEARCH_STEPS + 1, unwind__search_step, &search, 0);
    if (search.low == 0) return NULL;  // a row outside the map
    found = search.low - 1;
  }
  __u32 key = search.first + found;
  return bpf_map_lookup_elem(&unwind_rows, &key);
}

// Reads the 16 bytes at `address` of the stack through the window, reading the window again from
// `address` when they are not in it. Stack beyond the window's reach (below the frame, past the
// stack's end, or no known end) is read as it is asked for.
static __always_inline bool unwind__read_pair(struct unwind_walk *walk, __u64 address,
                                              __u64 *pair) {
  struct unwind_window *window = walk->window;
  if (address < window->start || address + 16 > window->start + window->size) {
    const __u64 end = window->stack_end;
    if (address < walk->sp || address >= end || end - address < 16) {
      return bpf_probe_read_user(pair, 16, (const void *)address) == 0;
    }
    __u64 size = end - address;
    if (size > UNWIND_WINDOW_BYTES) size = UNWIND_WINDOW_BYTES;
    PHASE_COUNT(EMBER_PHASE_WINDOW_READS, 1);
    PHASE_COUNT(EMBER_PHASE_WINDOW_BYTES, size);
    if (bpf_probe_read_user(window->bytes, size, (const void *)address) != 0) {
      // A page of the stack not present, or a stale end: each pair is read on its own from here,
      // and the thread's next sample looks its end up again.
      if (window->end_cached) stack__forget_end(bpf_get_current_task_btf());
      window->stack_end = 0;
      window->size = 0;
      return bpf_probe_read_user(pair, 16, (const void *)address) == 0;
    }
    window->start = address;
    window->size = size;
  }
  const __u64 offset = (address - window->start) & UNWIND_WINDOW_MASK;
  pair[0] = *(const __u64 *)(window->bytes + offset);
  pair[1] = *(const __u64 *)(window->bytes + offset + 8);
  return true;
}

// Records the frame walk->pc and steps to its caller. Returns 1 to stop: the thread's first
// frame is recorded (walk->complete), or the frame in walk cannot be stepped here.
static long unwind__step(__u64 index, void *data) {
  struct unwind_walk *walk = data;
  if (walk->first > EMBER_MAX_STACK_DEPTH || walk->depth >= EMBER_MAX_STACK_DEPTH) return 1;
  // Masked for the verifier: below 2 * EMBER_MAX_STACK_DEPTH already, inside the buffer's
  // addresses either way.
  __u32 at = walk->first + walk->depth;
  asm volatile("" : "+r"(at));  // keeps the mask below, which the compiler knows is a no-op
  at &= UNWIND_ADDRESS_MASK;
  // A return address is looked up at its call, the byte before it.
  const __u64 lookup = walk->depth > 0 ? walk->pc - 1 : walk->pc;
  const struct ember_unwind_mapping *mapping =
      unwind__mapping(walk->proc, lookup, &walk->last_mapping);
  if (!mapping) return 1;
  const struct ember_unwind_row *row = unwind__row(mapping, lookup - mapping->bias);
  if (!row) return 1;
  __u64 *ips = (__u64 *)walk->buf->tail;
  if (row->kind == EMBER_UNWIND_ROW_OUTERMOST) {
    ips[at] = walk->pc;
    walk->depth += 1;
    walk->complete = true;
    return 1;
  }
  __u64 cfa;
  if (row->kind == EMBER_UNWIND_ROW_CFA_SP) {
    cfa = walk->sp + (__s64)row->cfa_offset;
  } else if (row->kind == EMBER_UNWIND_ROW_CFA_BP && walk->bp_known) {
    cfa = walk->bp + (__s64)row->cfa_offset;
  } else {
    return 1;
  }
  // The caller's frame lies above this one: anything else is a bad row or a bad register, and
  // would loop.
  if (cfa <= walk->sp) return 1;
  // The two words below the CFA: the return address, and under it where `push rbp` right after
  // the call saves rbp, so one read has both.
  __u64 below_cfa[2] = {0, 0};
  const bool pair_in_frame = cfa - 16 >= walk->sp;
  if (pair_in_frame) {
    if (!unwind__read_pair(walk, cfa - 16, below_cfa)) return 1;
  } else if (bpf_probe_read_user(&below_cfa[1], 8, (const void *)(cfa - 8)) != 0) {
    return 1;
  }
  const __u64 return_address = below_cfa[1];
  __u64 bp = walk->bp;
  bool bp_known = walk->bp_known;
  if (row->bp_rule == EMBER_UNWIND_BP_SAVED) {
    if (row->bp_offset == -16 && pair_in_frame) {
      bp = below_cfa[0];
      bp_known = true;
    } else {
      bp_known =
          bpf_probe_read_user(&bp, sizeof(bp), (const void *)(cfa + (__s64)row->bp_offset)) == 0;
    }
  } else if (row->bp_rule == EMBER_UNWIND_BP_UNDEFINED) {
    bp_known = false;
  }
  ips[at] = walk->pc;
  walk->depth += 1;
  if (return_address == 0) {  // a zeroed return address: the first frame of code without CFI
    walk->complete = true;
    return 1;
  }
  walk->pc = return_address;
  walk->sp = cfa;
  walk->bp = bp;
  walk->bp_known = bp_known;
  return 0;
}

// Walks the user stack from the registers in s by the CFI rows of process pid, recording its
// frames after the kernel's. Returns how many it recorded and sets the sample's flags: a walk that
// stopped short leaves in s->user_regs the frame the agent is to go on from.
static __always_inline __u32 unwind__user(struct ember_sample *s, struct sample_buffer *buf,
                                          struct task_struct *task, __u64 pid_tgid,
                                          __u32 kernel_depth, __u32 *flags) {
  const __u32 pid = pid_tgid >> 32;
  const struct ember_unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &pid);
  if (!proc) {
    stats__add(EMBER_STAT_UNWIND_NO_TABLES);
    return 0;
  }
  bool cached = false;
  PHASE_START();
  const __u64 stack_end = stack__end(task, s->user_regs[EMBER_USER_REG_SP], &cached);
  PHASE(EMBER_PHASE_STACK_END);
  struct unwind_walk walk = {
      .proc = proc,
      .buf = buf,
      .first = kernel_depth,
      .depth = 0,
      .pc = s->user_regs[EMBER_USER_REG_IP],
      .sp = s->user_regs[EMBER_USER_REG_SP],
      .bp = s->user_regs[EMBER_USER_REG_BP],
      .bp_known = true,
      .complete = false,
      .last_mapping = 0,
      .window = (struct unwind_window *)(buf->tail + UNWIND_WINDOW_AT),
  };
  walk.window->stack_end = stack_end;
  walk.window->start = 0;
  walk.window->size = 0;
  walk.window->end_cached = cached;
  bpf_loop(EMBER_MAX_STACK_DEPTH, unwind__step, &walk, 0);
  PHASE(EMBER_PHASE_WALK);
  PHASE_COUNT(EMBER_PHASE_WALKS, 1);
  PHASE_COUNT(EMBER_PHASE_WALK_FRAMES, walk.depth);
  if (walk.complete) {
    stats__add(EMBER_STAT_UNWIND_COMPLETE);
    *flags |= EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_UNWIND_COMPLETE;
    return walk.depth;
  }
  stats__add(EMBER_STAT_UNWIND_STOPPED);
  if (walk.depth == 0) return 0;  // the registers are the leaf's, as without the walk
  *flags |= EMBER_SAMPLE_UNWOUND_IN_BPF | EMBER_SAMPLE_CONTINUE_REGS;
  if (!walk.bp_known) *flags |= EMBER_SAMPLE_CONTINUE_NO_BP;
  s->user_regs[EMBER_USER_REG_IP] = walk.pc;
  s->user_regs[EMBER_USER_REG_SP] = walk.sp;
  s->user_regs[EMBER_USER_REG_BP] = walk.bp_known ? walk.bp : 0;
  return walk.depth;
}

#endif  // EMBER_BPF_CFI_WALK_BPF_H_
