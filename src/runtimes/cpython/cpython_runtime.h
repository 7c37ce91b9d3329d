// CPython behind the runtime interface (docs/cpython.md): detects a supported interpreter in a
// process's mappings, hands the BPF program the process's walk configuration, and splices the
// Python frames the BPF walk recorded into the sample's native frames, in place of the
// _PyEval_EvalFrameDefault frames that ran them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtimes/cpython/frame_namer.h"
#include "runtimes/cpython/frame_splice.h"
#include "runtimes/process_memory.h"
#include "runtimes/runtime.h"
#include "status/metrics_registry.h"

namespace ember::python {

class CPythonRuntime : public Runtime {
 public:
  // Registers ember_python_frame_names_total in `metrics`, and ember_python_walks_total when
  // given `bpf_stats`, the BPF program's counters as read on the scraping thread. `memory`: where
  // code objects are read (tests stand in for a process); null reads each process with
  // process_vm_readv.
  CPythonRuntime(RuntimeBpfConfig& bpf, MetricsRegistry& metrics, MemoryReader* memory = nullptr,
                 std::function<BpfStats()> bpf_stats = nullptr);

  void ProcessMapsChanged(const Process& process) override;
  void ProcessExited(uint32_t pid) override;
  void Splice(const Process& process, const SampleView& sample, UserFrames frames) override;
  void NextGeneration() override { namer_.NextGeneration(); }
  void SyncMetrics() override;
  void LogSummary(const BpfStats& bpf) const override;

  const FrameNamer& namer() const { return namer_; }
  const SpliceStats& splice_stats() const { return splice_stats_; }

 private:
  RuntimeBpfConfig& bpf_;
  MemoryReader* memory_;
  FrameNamer namer_;
  SpliceStats splice_stats_;
  // Per-sample scratch, reused: no allocation once they have grown to a stack's size.
  std::vector<bool> native_is_eval_;
  std::vector<bool> python_entry_;
  std::vector<const Frame*> native_;
  SpliceScratch splice_scratch_;
  std::vector<SplicedFrame> spliced_;
  // Python frames named from process memory, by result (FrameNamerStats).
  CounterMirror named_metric_;
  CounterMirror renamed_metric_;
  CounterMirror unreadable_metric_;
  CounterMirror implausible_metric_;
};

}  // namespace ember::python
