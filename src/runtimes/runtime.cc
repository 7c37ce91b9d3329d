// The set of language runtimes: each event goes to every runtime, in the order they were added.
#include "runtimes/runtime.h"

namespace ember {

void RuntimeSet::ProcessMapsChanged(const Process& process) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->ProcessMapsChanged(process);
}

void RuntimeSet::ProcessExited(uint32_t pid) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->ProcessExited(pid);
}

void RuntimeSet::Splice(const Process& process, const SampleView& sample, UserFrames frames) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) {
    runtime->Splice(process, sample, frames);
  }
}

void RuntimeSet::NextGeneration() {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->NextGeneration();
}

void RuntimeSet::SyncMetrics() {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->SyncMetrics();
}

void RuntimeSet::LogSummary(const BpfStats& bpf) const {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->LogSummary(bpf);
}

}  // namespace ember
