// Where language runtimes (src/runtimes/) write the BPF program's per-process configuration of
// their frame walks: one map per runtime, keyed by process id (tgid). BpfProfiler implements it;
// tests record the calls. A runtime whose frames the BPF program walks adds its map to the BPF
// program and its Set/Remove pair here, beside CPython's.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "sample_record.h"

namespace ember {

class RuntimeBpfConfig {
 public:
  virtual ~RuntimeBpfConfig() = default;
  // Walks the CPython frames of `pid` with `config` from its next sample on.
  virtual absl::Status SetPythonProcess(uint32_t pid, const ember_python_proc& config) = 0;
  // Stops walking them; no-op for a pid without an entry.
  virtual void RemovePythonProcess(uint32_t pid) = 0;
};

}  // namespace ember

namespace ember {

// Where the thread-context reader (src/context/) tells the BPF program how each process's threads
// reach their OpenTelemetry thread-context record. BpfProfiler implements it; tests record calls.
class ThreadContextBpfConfig {
 public:
  virtual ~ThreadContextBpfConfig() = default;
  // Copies the record of each sampled thread of `pid` as `config` says, from its next sample on.
  virtual absl::Status SetThreadContextProcess(uint32_t pid, const ember_context_proc& config) = 0;
  // Stops reading them; no-op for a pid without an entry.
  virtual void RemoveThreadContextProcess(uint32_t pid) = 0;
};

}  // namespace ember
