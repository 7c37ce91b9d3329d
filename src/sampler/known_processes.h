// The process part of a sample: its process from the table, read again when the sample shows an
// exec, and whether the BPF side knows it. A process's samples wake the agent (and carry
// EMBER_SAMPLE_PROCESS_UNKNOWN) until it is marked known there, which waits until its maps have
// settled: a process read while its dynamic loader ran has not mapped its libraries yet, and if it
// lives shorter than a poll its later samples come after its exit.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/container/flat_hash_map.h"
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

  // Whether the BPF side was told the process is known, and not since told otherwise.
  bool IsMarked(uint32_t pid) const {
    auto it = marks_.find(pid);
    return it != marks_.end() && it->second.marked;
  }

  void OnMapsChanged(const Process&) override {}
  void OnExited(uint32_t pid) override {
    marks_.erase(pid);
    forget_(pid);
  }

 private:
  // What the BPF side was told of a process: whether it is known there (MarkProcessKnown), since
  // which poll, and the sample time its maps settle from. Until it is marked its samples wake the
  // agent. Kept from its first sample until the table says it exited, not only while the table
  // holds it: an evicted process the BPF side still knows is read again, but not settled again.
  struct Mark {
    bool marked = false;
    uint64_t marked_in_poll = 0;
    uint64_t settle_from_ns = 0;
  };

  // Marks the process known once its maps have settled. It settles again after its main thread
  // renamed (`renamed`: its maps were just read again) or when a sample shows it is not known
  // there any more (an exec), whose maps are read again here.
  void MarkKnownOnceSettled(Process* process, Mark& mark, const SampleView& sample, bool renamed);

  ProcessTable& table_;
  std::function<void(uint32_t pid)> mark_;
  std::function<void(uint32_t pid)> forget_;
  uint64_t polls_ = 0;
  absl::flat_hash_map<uint32_t, Mark> marks_;  // by pid, from a process's first sample
};

}  // namespace ember
