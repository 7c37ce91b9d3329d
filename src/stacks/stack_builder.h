// How a stack is built. One decoded sample (sampler/sample_record_layout.h) becomes its frames,
// leaf first:
// 1. Kernel frames, from the kernel's own walk; "[truncated]" after them when that walk hit
//    EMBER_MAX_STACK_DEPTH (frames are missing between them and the user frames).
// 2. User frames, by whichever walks the record carries: the frames the BPF program walked by
//    CFI rows (EMBER_SAMPLE_UNWOUND_IN_BPF), then, where that walk stopped short, the stack
//    snapshot unwound here with DWARF CFI (DwarfUnwinder, frame pointers where a module has no
//    CFI) from the registers the BPF walk handed over, code in no file stepped by the runtime
//    that generated it where one does (Runtime::StepCodeOutsideFiles); without either, the
//    frame-pointer walk done in BPF.
// 3. The user frames end at the first whose function nothing calls (Frame::thread_start, where a
//    thread or goroutine begins), whatever a walk made of the stack past it. A stack that does
//    not reach its thread's first frame ends with "[truncated]". How each user stack ended is
//    counted (ember_user_stacks_unwound_total).
// 4. The language runtimes (runtimes/runtime.h) splice their frames into the user frames: each
//    CPython _PyEval_EvalFrameDefault frame becomes the Python frames it ran.
// A sample of a process that exited before its maps could be read gets "[process exited]" in
// place of its user frames.
#pragma once

#include <cstdint>
#include <vector>

#include "process/process_table.h"
#include "runtimes/runtime.h"
#include "sampler/bpf_unwind_tables.h"
#include "sampler/sample_record_layout.h"
#include "stacks/frame_resolver.h"
#include "status/metrics_registry.h"
#include "unwind/dwarf_unwinder.h"

namespace ember {

// Samples by how their user stack ended, as ember_user_stacks_unwound_total counts them.
struct UserStackEnds {
  uint64_t complete = 0;   // reached the thread's first frame
  uint64_t truncated = 0;  // cut by the snapshot or the frame limit
  uint64_t failed = 0;     // stopped by a frame neither CFI nor a frame pointer could unwind
};

class StackBuilder {
 public:
  // Registers ember_user_stacks_unwound_total in `metrics`, and has the resolver ask its runtimes
  // to name code in no file (FrameResolver::set_runtimes) and the unwinder ask them to step it
  // (DwarfUnwinder::set_runtime_stepper). The resolver, the table and the
  // unwinder must outlive the builder.
  StackBuilder(FrameResolver* frames, const ProcessTable* processes, DwarfUnwinder* unwinder,
               MetricsRegistry& metrics);

  // The CFI row tables of the BPF walk, told which files its short walks needed
  // (BpfUnwindTables::WalkFellShort); null (the default) when the walk is off.
  void set_bpf_unwind_tables(BpfUnwindTables* tables) { bpf_unwind_ = tables; }
  // The runtimes whose frames are spliced into every sample, in the order added.
  RuntimeSet& runtimes() { return runtimes_; }

  // The frames of `sample` of `process` (null: not in the table, it exited before its first
  // read), leaf first. Valid until the next call; per-sample code: no allocation once the
  // scratch has grown, counts and never logs.
  const std::vector<const Frame*>& Build(const SampleView& sample, Process* process);

  UserStackEnds ends() const {
    return {.complete = complete_metric_->Value(),
            .truncated = truncated_metric_->Value(),
            .failed = failed_metric_->Value()};
  }
  // The run's line on user stacks unwound with CFI, and the BPF program's snapshot errors.
  void LogSummary(const BpfStats& bpf) const;

 private:
  // Appends the user frames of a sample to stack_ (steps 2 and 3 above).
  void AppendUserFrames(Process* process, const SampleView& sample);
  // Cuts the user frames from stack_[user_begin] after the first whose function nothing calls;
  // true when there is one: the stack is whole.
  bool EndAtThreadStart(size_t user_begin);

  FrameResolver* frames_;
  const ProcessTable* processes_;
  DwarfUnwinder* unwinder_;
  BpfUnwindTables* bpf_unwind_ = nullptr;
  RuntimeSet runtimes_;
  std::vector<const Frame*> stack_;  // reused per sample
  // Per user frame in stack_ (from AppendUserFrames): its pc, 0 for markers. Reused per sample.
  std::vector<uint64_t> user_pcs_;
  // Per user frame, beside user_pcs_: what a runtime's step kept of it. Reused per sample.
  std::vector<RuntimeFrame> user_runtime_frames_;
  UnwindResult unwound_;  // reused per sample
  Counter* complete_metric_ = nullptr;
  Counter* truncated_metric_ = nullptr;
  Counter* failed_metric_ = nullptr;
};

}  // namespace ember
