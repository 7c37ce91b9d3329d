// The process part of a sample: its process from the table, read again when the sample shows an
// exec, and whether the BPF side knows it. A process's samples wake the agent (and carry
// EMBER_SAMPLE_PROCESS_UNKNOWN) until it is marked known there, which waits until its maps have
// settled: a process read while its dynamic loader ran has not mapped its libraries yet, and if it
// lives shorter than a poll its later samples come after its exit.
#pragma once

#include <cstdint>
#include <functional>

#include "process/process_events.h"
#include "process/process_table.h"
#include "sampler/sample_record_layout.h"

namespace ember {

// How long after its first read (sample clock) a process's maps are read once more before it is
// marked known: the dynamic loader maps a program's libraries within its first milliseconds.
inline constexpr uint64_t kProcessSettleTimeNs = 100'000'000;

class KnownProcesses final : public ProcessEvents {
 public:
  // `mark` tells the BPF side a process is known (BpfProfiler::MarkProcessKnown), `forget` that it
  // is not (BpfProfiler::ForgetProcess): when the table says it exited. Subscribes to `table`.
  KnownProcesses(ProcessTable& table, std::function<void(uint32_t pid)> mark,
                 std::function<void(uint32_t pid)> forget);

  // The sample's process, its maps read again after an exec and the subscribers told of what
  // was read (ProcessTable::Publish); nullptr when it could not be read (gone before its first
  // read: it is marked known, as nothing more can be read of it).
  Process* OnSample(const SampleView& sample);
  // A poll of the ring buffer begins: a sample read two polls after a process was marked known
  // was taken after the mark.
  void OnPoll() { ++polls_; }

  void OnMapsChanged(const Process&) override {}
  void OnExited(uint32_t pid) override { forget_(pid); }

 private:
  // Marks the process known once its maps have settled. It settles again after its main thread
  // renamed (`renamed`: its maps were just read again) or when a sample shows it is not known
  // there any more (an exec), whose maps are read again here.
  void MarkKnownOnceSettled(Process* process, const SampleView& sample, bool renamed);

  ProcessTable& table_;
  std::function<void(uint32_t pid)> mark_;
  std::function<void(uint32_t pid)> forget_;
  uint64_t polls_ = 0;
};

}  // namespace ember
