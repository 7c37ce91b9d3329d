// What the process table tells those that keep per-process state (unwind tables, unwinder address
// spaces, runtime state, the BPF side's marks): they follow its events instead of checking for
// themselves whether a pid still names the process they knew.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

namespace ember {

struct Process;

class ProcessEvents {
 public:
  virtual ~ProcessEvents() = default;
  // The process's maps were read since the last event of it: its first sight, an exec (its main
  // thread renamed, or the BPF side forgot it; Process::execs counts them), or a re-read that
  // found code the old maps lacked (dlopen, a loader still settling). Once per sample at most,
  // however many reads the sample caused (ProcessTable::Publish).
  virtual void OnMapsChanged(const Process& process) = 0;
  // The process exited, or its pid names another process now: its state is to be forgotten.
  // Once per process. A process the table evicted to stay within max_processes is not exited: it
  // is told when it really exits (or when too many evicted processes are remembered, the oldest
  // of them); read again before, it is published again (OnMapsChanged) with no exit between.
  virtual void OnExited(uint32_t pid) = 0;
};

// A subscriber made of functions, for state kept below the table's layer (the unwinder's) or by
// whoever wires the pieces together. An empty function is not called.
class ProcessEventCallbacks final : public ProcessEvents {
 public:
  ProcessEventCallbacks(std::function<void(const Process&)> maps_changed,
                        std::function<void(uint32_t pid)> exited)
      : maps_changed_(std::move(maps_changed)), exited_(std::move(exited)) {}
  void OnMapsChanged(const Process& process) override {
    if (maps_changed_) maps_changed_(process);
  }
  void OnExited(uint32_t pid) override {
    if (exited_) exited_(pid);
  }

 private:
  std::function<void(const Process&)> maps_changed_;
  std::function<void(uint32_t pid)> exited_;
};

}  // namespace ember
