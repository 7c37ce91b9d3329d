// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
// Samples every CPU from a cpu-clock perf event: who ran, and their kernel and user stacks.
// Kernel types first: the libbpf headers and sample_record.h build on them.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "phase_times.h"
#include "sample_record.h"

// bpf_get_stack and bpf_ringbuf_output are GPL-only helpers.
char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Set by the agent before load.
const volatile bool filter_pids = false;
// The agent's own process, never sampled (0: none): its cost is in its /metrics, and sampling it
// would have it symbolize itself, a feedback of work on its own samples.
const volatile __u32 skip_tgid = 0;
// Most bytes of user stack copied per sample for DWARF unwinding; 0 copies none.
const volatile __u32 snapshot_limit = 0;
// Walk user stacks here by the CFI rows the agent loads (unwind_rows, unwind_procs).
const volatile bool unwind_in_bpf = false;

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);  // resized by the agent before load
} samples SEC(".maps");

// The shortest time between two wake-ups of the agent for a process it does not know yet; 0: never.
const volatile __u64 new_process_wakeup_gap_ns = 0;

// Processes the agent has read (their maps, name and cgroup), set and cleared by the agent, and
// cleared here when the process execs (its maps are another program's). A sample of any other
// process is flagged EMBER_SAMPLE_PROCESS_UNKNOWN and wakes the agent at once (at most once per
// new_process_wakeup_gap_ns), so it reads that process while it still runs; other samples wait
// for the agent's next poll.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);   // tgid
  __type(value, __u8);  // EMBER_KNOWN_PROC | EMBER_KNOWN_PROC_PYTHON
} known_procs SEC(".maps");

// When a sample last woke the agent for a new process (bpf_ktime_get_ns).
__u64 new_process_woken_at_ns = 0;

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

// Where the Python frames of a record start: after the addresses and the snapshot, padded to 8.
#define PYTHON_FRAMES_MAX_AT (2 * EMBER_MAX_STACK_DEPTH * sizeof(__u64) + EMBER_MAX_SNAPSHOT_BYTES)
#define PYTHON_FRAMES_BYTES (EMBER_MAX_PYTHON_FRAMES * sizeof(struct ember_python_frame))

// A record is assembled here (too big for the 512-byte BPF stack), then copied out at its size.
// The snapshot starts right after the last stack address, so `tail` holds both, then the Python
// frames.
struct sample_buffer {
  struct ember_sample header;
  __u8 tail[PYTHON_FRAMES_MAX_AT + 8 + PYTHON_FRAMES_BYTES];
};

// One buffer per CPU, indexed by CPU number: a per-CPU array cannot hold values above 32 KiB.
// A perf_event program does not nest on its CPU, so the buffer is never shared.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);  // set to the number of possible CPUs by the agent before load
  __type(key, __u32);
  __type(value, struct sample_buffer);
} scratch SEC(".maps");

// CPython processes the agent found (docs/cpython.md): their interpreter's layout and addresses.
// Looked up only for a process that known_procs marks as having an entry, or does not hold: a
// hash lookup cost a sample 0.3 µs, 6% of the program, on the project machine.
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

// Where a thread's stack snapshot ends, found by an earlier sample. bpf_find_vma was most of the
// program's cost (about 8 of 13 µs a sample on the project machine), and a thread's stack does not
// move: the end is looked up again only for a new thread, an sp outside the cached span, or after
// a copy from a cached end failed. Kept with the thread (task storage): it goes when the thread
// does, so a reused thread id starts afresh, and the lookup hashes nothing.
struct stack_end {
  __u64 end;  // 0: look it up again
};

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct stack_end);
} stack_ends SEC(".maps");

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

// --- User stacks walked by CFI rows (docs/bpf-unwinding.md) ---

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
// stack with the walk, so the verifier does not follow its values from step to step (that made
// it look at ten times the instructions).
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

// --- CPython frames (docs/cpython.md, "The BPF half") ---

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
  bpf_get_current_comm(s->comm, sizeof(s->comm));
  PHASE(EMBER_PHASE_HEADER);
  PHASE(EMBER_PHASE_TIMER);

  __u64 *ips = (__u64 *)buf->tail;
  __u32 flags = 0;
  // A sample taken in user mode has no kernel stack. bpf_get_stack finds that out too, but took
  // 0.6 to 0.8 µs a sample to do so here.
  const bool in_user_mode = ctx->regs.ip < USER_ADDRESS_END;
  __u32 kernel_depth = 0;
  if (!in_user_mode) {
    kernel_depth = stack__read(ctx, ips, 0, EMBER_SAMPLE_KERNEL_STACK_ERROR, &flags);
  }
  if (kernel_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier: bounds the offset
  if (flags & EMBER_SAMPLE_KERNEL_STACK_ERROR) stats__add(EMBER_STAT_KERNEL_STACK_ERRORS);
  PHASE(EMBER_PHASE_KERNEL_STACK);

  // The user stack: a snapshot for DWARF unwinding when there is one, else a frame-pointer walk
  // (from kernel context the kernel walks the task's saved user registers). The agent unwinds a
  // snapshot's frame-pointer code itself, so walking both would only add cost.
  __u32 snapshot_bytes = 0;
  __u32 user_depth = 0;
  struct task_struct *task = bpf_get_current_task_btf();
  // Read once: the verifier checks each load through a kernel pointer on every path it explores,
  // by a name search through the kernel's BTF, and that was most of the program's 110 ms load.
  const bool has_mm = task->mm != NULL;
  if (has_mm && regs__read_user(ctx, in_user_mode, task, s->user_regs)) {
    flags |= EMBER_SAMPLE_USER_REGS;
    PHASE(EMBER_PHASE_USER_REGS);
    if (unwind_in_bpf) user_depth = unwind__user(s, buf, task, pid_tgid, kernel_depth, &flags);
    if (user_depth > EMBER_MAX_STACK_DEPTH) return 0;  // for the verifier
    // The walk timed its own phases.
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
      size = sizeof(struct ember_sample) + at + bytes;
    }
  }

  PHASE(EMBER_PHASE_PYTHON);
  s->flags = flags;
  s->kernel_depth = kernel_depth;
  s->user_depth = user_depth;
  s->user_snapshot_bytes = snapshot_bytes;
  if (size > sizeof(*buf)) return 0;
  // The agent drains the ring buffer on its own every 2 s, so a record wakes it only when the
  // buffer is filling up, or when its process is new to the agent: a wake-up per sample would
  // cost more than the sample. Samples walked in BPF are looked up too: an exec clears the
  // process's mark and its unwind entry, but the agent may write the entry again from the maps
  // it read before the exec (it reads samples late); until it reads the process again, such a
  // walk follows the old program's tables, and without a wake-up that lasted until the next drain.
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
// and the exec'ing thread's stack end are the old program's. Its samples must not be walked by
// those rows, and must wake the agent to read it again.
SEC("raw_tp/sched_process_exec")
int profile__exec(void *ctx) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  bpf_map_delete_elem(&known_procs, &tgid);
  bpf_map_delete_elem(&unwind_procs, &tgid);
  stack__forget_end(bpf_get_current_task_btf());
  return 0;
}
