/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every record and counter that crosses from bpf/ to src/sampler/. Included by both sides; the C++
 * side static_asserts the layout (src/sampler/sample_record_layout.h) so drift fails the build. */
#ifndef EMBER_BPF_SAMPLE_RECORD_H_
#define EMBER_BPF_SAMPLE_RECORD_H_

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Bumped whenever the layout below changes. */
#define EMBER_RECORD_VERSION 5

#define EMBER_MAX_STACK_DEPTH 127
#define EMBER_COMM_LEN 16
/* x86-64 user registers in DWARF numbering: rax rdx rcx rbx rsi rdi rbp rsp r8..r15, then rip
 * (16, the return-address column). */
#define EMBER_USER_REG_COUNT 17
#define EMBER_USER_REG_BP 6
#define EMBER_USER_REG_SP 7
#define EMBER_USER_REG_IP 16
/* Upper bound of --stack-snapshot-bytes: the size of the BPF scratch buffer's snapshot area. */
#define EMBER_MAX_SNAPSHOT_BYTES 65536
/* Python frames recorded per sample (docs/cpython.md); shim frames count towards the walk's
 * bound but are not recorded. */
#define EMBER_MAX_PYTHON_FRAMES 64
/* Thread states visited when looking for the sampled thread's. */
#define EMBER_MAX_PYTHON_THREADS 32
/* Bytes of a frame copied per step: the largest header any version needs (PyFrameObject's first
 * 112 bytes in 3.8-3.10). */
#define EMBER_MAX_PYTHON_FRAME_HEADER 128

enum ember_record_kind {
  EMBER_RECORD_SAMPLE = 1,
  EMBER_RECORD_CONTEXT_NOTICE = 2, /* struct ember_context_notice */
};

/* A process re-published its OpenTelemetry process context: it named its mapping OTEL_CTX again
 * (prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, ...)), which the agent reads at once instead of at its
 * next read of the process's maps. Travels in the `samples` ring buffer; starts as ember_sample
 * does, so the kind tells the records apart. */
struct ember_context_notice {
  __u16 version; /* EMBER_RECORD_VERSION */
  __u16 kind;    /* EMBER_RECORD_CONTEXT_NOTICE */
  __u32 pid;     /* thread group id in the initial pid namespace */
};

/* Most bytes of an OpenTelemetry thread-context record copied per sample (docs/trace-context.md):
 * its 28-byte header and up to 612 bytes of attributes (the OTEP recommends records under 640). */
#define EMBER_CONTEXT_HEADER_BYTES 28
#define EMBER_MAX_CONTEXT_BYTES 640

/* How a process's threads reach their thread-context pointer (the TLS variable
 * otel_thread_ctx_v1), from the thread pointer (the task's fs base; x86-64 TLS variant II). */
enum ember_context_tls_kind {
  EMBER_CONTEXT_TLS_TP_OFFSET = 1, /* at fs base + offset (static TLS: executable, libraries
                                      loaded at start, TLSDESC resolved to a static offset) */
  EMBER_CONTEXT_TLS_DTV = 2,       /* at the block of module_id in the thread's DTV + offset */
};

/* Value of the `context_procs` map, key: pid (tgid in the initial pid namespace). Written by the
 * agent (src/context/) for each process whose thread context it resolved. */
struct ember_context_proc {
  __s64 offset;
  __u64 module_id;      /* EMBER_CONTEXT_TLS_DTV: the module's index in the DTV */
  __u8 kind;            /* enum ember_context_tls_kind */
  __u8 dtv_entry_shift; /* log2 of a DTV entry's size: 4 with glibc, 3 with musl */
  __u8 reserved[6];
};

/* The shortest time between two re-publish notices of one process: a process naming its mapping
 * in a loop (cheap where the kernel refuses the name) must not fill the ring buffer every
 * process's samples share. The agent reads a process's context once more a while after each
 * notice it acts on, so an update within the gap is seen all the same. */
#define EMBER_CONTEXT_NOTICE_GAP_NS 1000000000ull

/* ember_sample.context_status: what the thread-context read found. */
enum ember_context_status {
  EMBER_CONTEXT_NOT_READ = 0,    /* the process publishes no thread context the agent resolved */
  EMBER_CONTEXT_OK = 1,          /* a record with valid == 1: context_bytes of it follow */
  EMBER_CONTEXT_NONE = 2,        /* the thread's pointer is NULL: it serves no span now */
  EMBER_CONTEXT_INVALID = 3,     /* the record's valid byte is not 1 (being written, or bogus) */
  EMBER_CONTEXT_READ_FAILED = 4, /* the TLS slot, the pointer or the record could not be read */
  EMBER_CONTEXT_NO_TLS_BLOCK = 5 /* the thread has no block of that module yet (its DTV entry) */
};

/* ember_sample.flags */
#define EMBER_SAMPLE_KERNEL_STACK_ERROR (1u << 0)
#define EMBER_SAMPLE_USER_STACK_ERROR (1u << 1)
/* user_regs holds the thread's user registers (not set for kernel threads). */
#define EMBER_SAMPLE_USER_REGS (1u << 2)
/* The stack goes on past the snapshot: it was cut at --stack-snapshot-bytes. */
#define EMBER_SAMPLE_SNAPSHOT_CLAMPED (1u << 3)
/* The snapshot could not be taken (stack mapping not found, or the copy faulted). */
#define EMBER_SAMPLE_SNAPSHOT_ERROR (1u << 4)
/* The process is a configured CPython: python_status says how the frame walk ended. */
#define EMBER_SAMPLE_PYTHON (1u << 5)
/* The user addresses come from the walk over the agent's CFI rows in BPF (docs/bpf-unwinding.md),
 * not from a frame-pointer walk: each after the first is a return address. */
#define EMBER_SAMPLE_UNWOUND_IN_BPF (1u << 6)
/* That walk reached the thread's first frame: the user stack is whole. */
#define EMBER_SAMPLE_UNWIND_COMPLETE (1u << 7)
/* That walk stopped after user_depth frames (> 0), at the frame whose registers user_regs now
 * hold: only sp, ip (a return address) and, unless EMBER_SAMPLE_CONTINUE_NO_BP, bp are known.
 * The snapshot, if any, starts at that sp. */
#define EMBER_SAMPLE_CONTINUE_REGS (1u << 8)
#define EMBER_SAMPLE_CONTINUE_NO_BP (1u << 9)
/* The process is not among those the agent has read (known_procs): new to it, or exec'd since. */
#define EMBER_SAMPLE_PROCESS_UNKNOWN (1u << 10)

/* Values of the known_procs map (the processes the agent has read): flags. */
#define EMBER_KNOWN_PROC (1u << 0)
/* The process has an entry in python_procs (CPython frames walked). A sample of a known process
 * without it skips that lookup. */
#define EMBER_KNOWN_PROC_PYTHON (1u << 1)
/* The process has an entry in context_procs (its thread-context record is copied). */
#define EMBER_KNOWN_PROC_CONTEXT (1u << 2)

/* ember_sample.python_status: how the CPython frame walk ended (the agent's WalkStatus + 1). */
enum ember_python_status {
  EMBER_PYTHON_NOT_WALKED = 0,      /* not a configured CPython process */
  EMBER_PYTHON_OK = 1,              /* every frame up to the thread's first one */
  EMBER_PYTHON_NO_THREAD_STATE = 2, /* the thread runs no Python (or was not found) */
  EMBER_PYTHON_READ_FAILED = 3,     /* a read of user memory failed; frames so far kept */
  EMBER_PYTHON_NOT_CODE = 4,        /* a frame's code is not a code object; frames so far kept */
  EMBER_PYTHON_TRUNCATED = 5,       /* more than EMBER_MAX_PYTHON_FRAMES frames */
};

/* ember_python_frame.flags */
/* The outermost Python frame of one _PyEval_EvalFrameDefault call (docs/cpython.md, "Splicing"). */
#define EMBER_PYTHON_FRAME_ENTRY (1u << 0)

/* One Python frame, as the walk read it: no strings, the agent names it from the code object. */
struct ember_python_frame {
  __u64 code;     /* PyCodeObject* */
  __u64 position; /* f_lasti sign-extended (3.8-3.10), prev_instr / instr_ptr (3.11+) */
  __u32 flags;    /* EMBER_PYTHON_FRAME_* */
  __u32 reserved;
};

/* ember_python_proc.flags */
/* 3.11+: frames are _PyInterpreterFrame, not every frame has its own eval call. */
#define EMBER_PYTHON_PROC_INTERPRETER_FRAMES (1u << 0)
/* Offsets a version does not have. */
#define EMBER_PYTHON_NO_OFFSET 0xffff
#define EMBER_PYTHON_NO_OWNER 0xff

/* Value of the `python_procs` map, key: pid (tgid in the initial pid namespace). Filled by the
 * agent from the interpreter's layout (src/runtimes/cpython/bpf_proc_config.h). Offsets in bytes.
 */
struct ember_python_proc {
  __u64 runtime_address;        /* &_PyRuntime in the process */
  __u64 code_type_address;      /* &PyCode_Type in the process, 0: no check */
  __u64 tstate_current_address; /* &_PyRuntime.gilstate.tstate_current, 0 (3.12+): none */
  __u16 interpreters_head;      /* _PyRuntime -> first PyInterpreterState* */
  __u16 interp_threads_head;    /* PyInterpreterState -> first PyThreadState* */
  __u16 tstate_next;
  __u16 tstate_thread_id;     /* pthread_self() of the thread: its fs base on x86-64 */
  __u16 tstate_frame;         /* frame (3.8-3.10), cframe (3.11-3.12), current_frame (3.13) */
  __u16 cframe_current_frame; /* _PyCFrame.current_frame (3.11-3.12), else NO_OFFSET */
  __u16 frame_previous;       /* within the frame header */
  __u16 frame_code;
  __u16 frame_position;
  __u16 frame_owner;      /* NO_OFFSET before 3.12 */
  __u16 frame_is_entry;   /* 3.11 only, else NO_OFFSET */
  __u16 code_type_offset; /* ob_type */
  __u8 minor;
  __u8 position_kind;      /* 1, 2: a 4-byte int; 3, 4: a pointer (LastInstruction) */
  __u8 owner_cstack;       /* owner of shim frames (3.12+), else NO_OWNER */
  __u8 frame_header_bytes; /* bytes copied per frame: covers every field above */
  __u32 flags;             /* EMBER_PYTHON_PROC_* */
};

/* --- In-BPF unwinding from the agent's CFI rows (docs/bpf-unwinding.md) --- */

/* How a row finds the caller. */
enum ember_unwind_row_kind {
  EMBER_UNWIND_ROW_NONE = 0,      /* no row the BPF walk applies here: the agent takes over */
  EMBER_UNWIND_ROW_CFA_SP = 1,    /* CFA = rsp + cfa_offset; the return address at CFA - 8 */
  EMBER_UNWIND_ROW_CFA_BP = 2,    /* CFA = rbp + cfa_offset; the return address at CFA - 8 */
  EMBER_UNWIND_ROW_OUTERMOST = 3, /* the return address is undefined: the thread's first frame */
};

/* The caller's rbp. */
enum ember_unwind_bp_rule {
  EMBER_UNWIND_BP_SAME = 0,      /* unchanged */
  EMBER_UNWIND_BP_SAVED = 1,     /* saved at CFA + bp_offset */
  EMBER_UNWIND_BP_UNDEFINED = 2, /* lost */
};

/* One row of a file's table: it holds from pc (an ELF address) up to the next row's pc. The
 * caller's rsp is the CFA. 16 bytes, in the `unwind_rows` array map. */
struct ember_unwind_row {
  __u64 pc;
  __s32 cfa_offset;
  __s16 bp_offset;
  __u8 kind;    /* enum ember_unwind_row_kind */
  __u8 bp_rule; /* enum ember_unwind_bp_rule */
};

/* Executable mappings of one process the walk knows: those whose file has a table. */
#define EMBER_MAX_UNWIND_MAPPINGS 128
/* Binary search steps over one file's rows: tables of up to 2^24 rows. */
#define EMBER_UNWIND_ROW_SEARCH_STEPS 24
#define EMBER_MAX_UNWIND_ROWS_PER_FILE (1u << EMBER_UNWIND_ROW_SEARCH_STEPS)

/* A file's rows are found through its buckets: bucket b covers the ELF addresses from
 * table_base + (b << bucket_shift) for 1 << bucket_shift bytes, and holds the index (among the
 * file's rows) of the row in force at its start. A search then looks only at that row and those
 * starting inside the bucket. A file has at most as many buckets as rows, at the same place in
 * `unwind_buckets` as its rows in `unwind_rows`. */
struct ember_unwind_mapping {
  __u64 start; /* process addresses [start, end) */
  __u64 end;
  __u64 bias;       /* process address minus ELF address */
  __u64 table_base; /* ELF address of the file's first row */
  __u32 first_row;  /* the file's rows in `unwind_rows`: [first_row, first_row + row_count) */
  __u32 row_count;
  __u32 bucket_count;
  __u8 bucket_shift;
  __u8 reserved[3];
};

/* Value of the `unwind_procs` map, key: pid (tgid in the initial pid namespace). */
struct ember_unwind_proc {
  __u32 count; /* mappings used, ascending by start, not overlapping */
  __u32 reserved;
  struct ember_unwind_mapping mappings[EMBER_MAX_UNWIND_MAPPINGS];
};

/* One CPU sample. Variable length: the fixed header, then user_regs, then kernel_depth kernel
 * addresses and user_depth frame-pointer user addresses (each leaf first), then
 * user_snapshot_bytes bytes of the user stack copied from user_regs[EMBER_USER_REG_SP] upwards,
 * then (from the next multiple of 8) python_depth struct ember_python_frame, leaf first, then
 * context_bytes of the thread-context record.
 * A record has a snapshot or frame-pointer user addresses, not both. Only the bytes actually used
 * travel through the ring buffer. */
struct ember_sample {
  __u16 version;      /* EMBER_RECORD_VERSION */
  __u16 kind;         /* enum ember_record_kind */
  __u32 flags;        /* EMBER_SAMPLE_* */
  __u32 pid;          /* thread group id in the initial pid namespace */
  __u32 tid;          /* thread id in the initial pid namespace */
  __u64 timestamp_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
  __u64 cgroup_id;    /* cgroup v2 id of the task */
  __u32 cpu;
  __u16 kernel_depth;
  __u16 user_depth;
  char comm[EMBER_COMM_LEN]; /* thread name */
  __u32 user_snapshot_bytes;
  __u16 python_depth;  /* ember_python_frame records at the end */
  __u16 python_status; /* enum ember_python_status */
  __u16 context_bytes; /* thread-context record bytes at the end */
  __u8 context_status; /* enum ember_context_status */
  __u8 reserved8;
  __u32 reserved;
  __u64 user_regs[EMBER_USER_REG_COUNT]; /* valid with EMBER_SAMPLE_USER_REGS, else zero */
  /* Followed by __u64 ips[kernel_depth + user_depth], the snapshot bytes, padding to 8 bytes,
   * then struct ember_python_frame python[python_depth], then context_bytes bytes of the
   * thread's context record (header and attributes, as in its memory). */
};

/* Indexes of the per-CPU counters in the `stats` map. */
enum ember_stat {
  EMBER_STAT_SAMPLES = 0,      /* records written to the ring buffer */
  EMBER_STAT_RINGBUF_FULL = 1, /* records lost: ring buffer full */
  EMBER_STAT_KERNEL_STACK_ERRORS = 2,
  EMBER_STAT_USER_STACK_ERRORS = 3,
  EMBER_STAT_SNAPSHOT_ERRORS = 4,  /* no stack mapping found, or the copy faulted */
  EMBER_STAT_SNAPSHOT_CLAMPED = 5, /* stacks deeper than --stack-snapshot-bytes */
  /* CPython frame walks, by how they ended (enum ember_python_status). */
  EMBER_STAT_PYTHON_OK = 6,
  EMBER_STAT_PYTHON_NO_THREAD_STATE = 7,
  EMBER_STAT_PYTHON_READ_FAILED = 8,
  EMBER_STAT_PYTHON_NOT_CODE = 9,
  EMBER_STAT_PYTHON_TRUNCATED = 10,
  /* of EMBER_STAT_SNAPSHOT_ERRORS: no stack mapping found for sp (bpf_find_vma failed, e.g. the
     mmap lock was busy), rather than the copy faulting */
  EMBER_STAT_SNAPSHOT_NO_MAPPING = 11,
  /* In-BPF unwinding: stacks walked to the thread's first frame; walks stopped short (the agent
     goes on from a snapshot); samples of processes without tables yet. */
  EMBER_STAT_UNWIND_COMPLETE = 12,
  EMBER_STAT_UNWIND_STOPPED = 13,
  EMBER_STAT_UNWIND_NO_TABLES = 14,
  /* Thread-context reads of processes in context_procs, by enum ember_context_status. */
  EMBER_STAT_CONTEXT_OK = 15,
  EMBER_STAT_CONTEXT_NONE = 16,
  EMBER_STAT_CONTEXT_INVALID = 17,
  EMBER_STAT_CONTEXT_READ_FAILED = 18,
  EMBER_STAT_CONTEXT_NO_TLS_BLOCK = 19,
  /* Re-publish notices written (EMBER_RECORD_CONTEXT_NOTICE), and those lost: ring buffer full. */
  EMBER_STAT_CONTEXT_NOTICES = 20,
  EMBER_STAT_CONTEXT_NOTICES_LOST = 21,
  /* Notices not written: the same process gave one less than EMBER_CONTEXT_NOTICE_GAP_NS before. */
  EMBER_STAT_CONTEXT_NOTICES_SUPPRESSED = 22,
  EMBER_STAT_COUNT = 23,
};

#endif /* EMBER_BPF_SAMPLE_RECORD_H_ */
