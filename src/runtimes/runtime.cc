// The set of language runtimes: each event goes to every runtime, in the order they were added.
#include "runtimes/runtime.h"

namespace ember {

void RuntimeSet::OnMapsChanged(const Process& process) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->ProcessMapsChanged(process);
}

void RuntimeSet::OnExited(uint32_t pid) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) runtime->ProcessExited(pid);
}

void RuntimeSet::Splice(const Process& process, const SampleView& sample, UserFrames frames) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) {
    runtime->Splice(process, sample, frames);
  }
}

bool RuntimeSet::Step(uint32_t pid, const FrameRegisters& frame, bool is_return_address,
                      const StackMemory& stack, StepResult& result, RuntimeFrame& runtime_frame) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) {
    if (runtime->StepCodeOutsideFiles(pid, frame, is_return_address, stack, result,
                                      runtime_frame)) {
      return true;
    }
  }
  return false;
}

const Frame* RuntimeSet::NameCodeOutsideFiles(const Process& process, ProcessAddress address,
                                              CodeFrameCache& frames) {
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) {
    if (const Frame* frame = runtime->NameCodeOutsideFiles(process, address, frames)) return frame;
  }
  return nullptr;
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

size_t RuntimeSet::HeldBytes() const {
  size_t bytes = 0;
  for (const std::unique_ptr<Runtime>& runtime : runtimes_) bytes += runtime->HeldBytes();
  return bytes;
}

}  // namespace ember
