// Every thread of a live process stopped at once, with what a sample of each would hold: its user
// registers in DWARF order and a copy of its stack from sp, clamped as the BPF snapshot clamps it.
// Fixtures record this next to the process memory a walk read while the threads stood still.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "support/recorded_memory.h"
#include "unwind/frame_registers.h"

namespace ember::testing {

// rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip: x86-64 DWARF register numbers 0..16, the order of
// EMBER_USER_REG_* and of the unwinder's registers.
inline constexpr int kThreadRegisterCount = 17;
inline constexpr int kThreadRegisterBp = 6;
inline constexpr int kThreadRegisterSp = 7;
inline constexpr int kThreadRegisterIp = 16;

struct CapturedThread {
  pid_t tid = 0;
  std::string comm;  // the thread's name (/proc/PID/task/TID/comm)
  std::array<uint64_t, kThreadRegisterCount> regs{};
  uint64_t stack_start = 0;  // = regs[kThreadRegisterSp]
  std::vector<uint8_t> stack;
  // The stack went on past stack_bytes, so the copy stops short of the stack's end.
  bool clamped = false;
  // No mapping holds sp (the BPF snapshot's "no mapping" error): the copy is empty.
  bool no_stack_mapping = false;

  uint64_t sp() const { return regs[kThreadRegisterSp]; }
  uint64_t ip() const { return regs[kThreadRegisterIp]; }
  // Every register known, for a DwarfUnwinder or a runtime's step.
  FrameRegisters frame_registers() const;
  StackMemory stack_memory() const { return {stack_start, stack}; }
};

struct ThreadCapture {
  pid_t pid = 0;
  std::vector<CapturedThread> threads;  // by tid, ascending
  const CapturedThread* Find(pid_t tid) const;
};

struct CaptureOptions {
  // A thread not stopped by then fails the capture (a thread in an uninterruptible wait, say)
  // rather than hanging it.
  std::chrono::milliseconds stop_timeout{2000};
};

// Stops every thread of `pid` (PTRACE_SEIZE + PTRACE_INTERRUPT, each wait bounded), reads each
// one's registers and copies `stack_bytes` of its stack from sp (0: up to the stack's end), runs
// `while_stopped` while every thread still stands still, then detaches them all, on every path.
// An error from `while_stopped` is returned as it is. The tracing runs on a thread of its own,
// whose exit also lets go of a thread that never stopped; `while_stopped` runs on that thread.
// Needs ptrace access to `pid` (root here). A process that is gone, or a thread that does not
// stop in time, is an error naming it.
absl::StatusOr<ThreadCapture> CaptureThreads(
    pid_t pid, size_t stack_bytes,
    absl::FunctionRef<absl::Status(const ThreadCapture&)> while_stopped, CaptureOptions options);
absl::StatusOr<ThreadCapture> CaptureThreads(pid_t pid, size_t stack_bytes);

// Writes `capture` into `memory`: values "capture.pid", "thread.N.tid", "thread.N.comm" (C
// escaped), "thread.N.regs" (17 hex words, DWARF order), "thread.N.stack" ("START SIZE" in hex,
// then "clamped" or "no_mapping" when so), and each stack's bytes as a recorded range.
void StoreCapture(const ThreadCapture& capture, RecordedMemory& memory);
// Reads back what StoreCapture wrote; an error names the first value that is missing or malformed.
absl::StatusOr<ThreadCapture> LoadCapture(RecordedMemory& memory);

}  // namespace ember::testing
