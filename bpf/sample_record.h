/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every record and counter that crosses from bpf/ to src/agent/. Included by both sides; the C++
 * side static_asserts the layout (src/agent/sample_record_layout.h) so drift fails the build. */
#ifndef EMBER_BPF_SAMPLE_RECORD_H_
#define EMBER_BPF_SAMPLE_RECORD_H_

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Bumped whenever the layout below changes. */
#define EMBER_RECORD_VERSION 2

#define EMBER_MAX_STACK_DEPTH 127
#define EMBER_COMM_LEN 16
/* x86-64 user registers in DWARF numbering: rax rdx rcx rbx rsi rdi rbp rsp r8..r15, then rip
 * (16, the return-address column). */
#define EMBER_USER_REG_COUNT 17
#define EMBER_USER_REG_SP 7
#define EMBER_USER_REG_IP 16
/* Upper bound of --stack-snapshot-bytes: the size of the BPF scratch buffer's snapshot area. */
#define EMBER_MAX_SNAPSHOT_BYTES 65536

enum ember_record_kind {
  EMBER_RECORD_SAMPLE = 1,
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

/* One CPU sample. Variable length: the fixed header, then user_regs, then kernel_depth kernel
 * addresses and user_depth frame-pointer user addresses (each leaf first), then
 * user_snapshot_bytes bytes of the user stack copied from user_regs[EMBER_USER_REG_SP] upwards.
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
  __u32 reserved;
  __u64 user_regs[EMBER_USER_REG_COUNT]; /* valid with EMBER_SAMPLE_USER_REGS, else zero */
  /* Followed by __u64 ips[kernel_depth + user_depth], then the snapshot bytes. */
};

/* Indexes of the per-CPU counters in the `stats` map. */
enum ember_stat {
  EMBER_STAT_SAMPLES = 0,      /* records written to the ring buffer */
  EMBER_STAT_RINGBUF_FULL = 1, /* records lost: ring buffer full */
  EMBER_STAT_KERNEL_STACK_ERRORS = 2,
  EMBER_STAT_USER_STACK_ERRORS = 3,
  EMBER_STAT_SNAPSHOT_ERRORS = 4,  /* no stack mapping found, or the copy faulted */
  EMBER_STAT_SNAPSHOT_CLAMPED = 5, /* stacks deeper than --stack-snapshot-bytes */
  EMBER_STAT_COUNT = 6,
};

#endif /* EMBER_BPF_SAMPLE_RECORD_H_ */
