// A sample becomes its frames (stack_builder.h says how).
#include "stacks/stack_builder.h"

#include <span>

#include "spdlog/spdlog.h"

namespace ember {

StackBuilder::StackBuilder(FrameResolver* frames, const ProcessTable* processes,
                           DwarfUnwinder* unwinder, MetricsRegistry& metrics)
    : frames_(frames), processes_(processes), unwinder_(unwinder) {
  frames_->set_runtimes(&runtimes_);           // they name code in no file
  unwinder_->set_runtime_stepper(&runtimes_);  // and step its frames
  // Registration fails only on a programming error (a bad or duplicate name).
  constexpr absl::string_view kUnwound = "ember_user_stacks_unwound_total";
  constexpr absl::string_view kUnwoundHelp =
      "User stacks unwound with DWARF CFI (in BPF, from stack snapshots, or both), by how the "
      "walk ended.";
  complete_metric_ = metrics.AddCounter(kUnwound, kUnwoundHelp, {{"result", "complete"}}).value();
  truncated_metric_ = metrics.AddCounter(kUnwound, kUnwoundHelp, {{"result", "truncated"}}).value();
  failed_metric_ = metrics.AddCounter(kUnwound, kUnwoundHelp, {{"result", "failed"}}).value();
}

const std::vector<const Frame*>& StackBuilder::Build(const SampleView& sample, Process* process) {
  const ember_sample& header = *sample.header;
  stack_.clear();
  for (size_t i = 0; i < sample.kernel_ips.size(); ++i) {
    stack_.push_back(frames_->Kernel(sample.kernel_ips[i], /*caller=*/i > 0));
  }
  // Kernel frames past the limit are missing between these and the user frames.
  if (header.kernel_depth >= EMBER_MAX_STACK_DEPTH) {
    stack_.push_back(frames_->Marker("[truncated]"));
  }
  if (process != nullptr) {
    const size_t user_begin = stack_.size();
    AppendUserFrames(process, sample);
    if (bpf_unwind_ != nullptr && !(header.flags & EMBER_SAMPLE_UNWIND_COMPLETE)) {
      // The BPF walk fell short: the files of the frames it left to the agent (or to the
      // frame-pointer walk) count towards having tables of their own.
      bpf_unwind_->WalkFellShort(process->pid, user_pcs_);
    }
    runtimes_.Splice(*process, sample,
                     UserFrames{.stack = stack_,
                                .begin = user_begin,
                                .pcs = user_pcs_,
                                .runtime_frames = user_runtime_frames_});
  } else if (!sample.user_ips.empty() || !sample.user_regs.empty()) {
    stack_.push_back(frames_->Marker("[process exited]"));  // gone before its maps were read
  }
  return stack_;
}

bool StackBuilder::EndAtThreadStart(size_t user_begin) {
  std::optional<size_t> keep = FramesToThreadStart(std::span(stack_).subspan(user_begin));
  if (!keep.has_value()) return false;
  stack_.resize(user_begin + *keep);
  user_pcs_.resize(*keep);
  user_runtime_frames_.resize(*keep);
  return true;
}

void StackBuilder::AppendUserFrames(Process* process, const SampleView& sample) {
  const ember_sample& header = *sample.header;
  const size_t user_begin = stack_.size();
  user_pcs_.clear();
  user_runtime_frames_.clear();
  // Frames walked in BPF (by CFI rows) come first; a snapshot, if any, goes on from where that
  // walk stopped.
  const bool walked_in_bpf = (header.flags & EMBER_SAMPLE_UNWOUND_IN_BPF) != 0;
  if (sample.user_stack.empty() || walked_in_bpf) {
    for (size_t i = 0; i < sample.user_ips.size(); ++i) {
      stack_.push_back(frames_->User(process, sample.user_ips[i], /*caller=*/i > 0));
      user_pcs_.push_back(sample.user_ips[i]);
      user_runtime_frames_.emplace_back();
    }
  }
  if (walked_in_bpf && (header.flags & EMBER_SAMPLE_UNWIND_COMPLETE)) {
    complete_metric_->Increment();
    return;
  }
  const bool continued = (header.flags & EMBER_SAMPLE_CONTINUE_REGS) != 0;
  if (sample.user_stack.empty()) {
    if (walked_in_bpf) {
      // Stopped short with no snapshot to go on with: the frame it stopped at, then the cut.
      if (continued && !sample.user_regs.empty()) {
        const uint64_t pc = sample.user_regs[EMBER_USER_REG_IP];
        stack_.push_back(frames_->User(process, pc, /*caller=*/true));
        user_pcs_.push_back(pc);
        user_runtime_frames_.emplace_back();
      }
      if (EndAtThreadStart(user_begin)) {
        complete_metric_->Increment();
        return;
      }
      failed_metric_->Increment();
    } else if (EndAtThreadStart(user_begin) || header.user_depth < EMBER_MAX_STACK_DEPTH) {
      return;  // a frame-pointer walk, whole as far as it could tell
    }
    stack_.push_back(frames_->Marker("[truncated]"));
    user_pcs_.push_back(0);
    user_runtime_frames_.emplace_back();
    return;
  }
  UserStack user_stack{.registers = sample.user_regs,
                       .stack = sample.user_stack,
                       .clamped = (header.flags & EMBER_SAMPLE_SNAPSHOT_CLAMPED) != 0};
  if (continued) {
    user_stack.known_registers = (1u << EMBER_USER_REG_SP) | (1u << EMBER_USER_REG_IP);
    if (!(header.flags & EMBER_SAMPLE_CONTINUE_NO_BP)) {
      user_stack.known_registers |= 1u << EMBER_USER_REG_BP;
    }
    user_stack.first_is_return_address = true;
  }
  UnwindResult& unwound = unwound_;
  unwinder_->Unwind(
      header.pid, process->maps_version, [&] { return UnwindMappingsOf(*processes_, *process); },
      user_stack, unwound);
  for (const UnwoundFrame& frame : unwound.frames) {
    stack_.push_back(frames_->User(process, frame.pc, frame.is_return_address));
    user_pcs_.push_back(frame.pc);
    user_runtime_frames_.push_back(frame.runtime);
  }
  // A goroutine's stack is not its thread's: the walk cannot tell where it begins, but Go's
  // symbol table says which function nothing calls.
  if (EndAtThreadStart(user_begin)) {
    complete_metric_->Increment();
    return;
  }
  switch (unwound.end) {
    case UnwindEnd::kOutermost:
      complete_metric_->Increment();
      return;
    case UnwindEnd::kTruncated:
      truncated_metric_->Increment();
      break;
    case UnwindEnd::kError:  // neither CFI nor a frame pointer explained a frame
      failed_metric_->Increment();
      break;
  }
  stack_.push_back(frames_->Marker("[truncated]"));
  user_pcs_.push_back(0);
  user_runtime_frames_.emplace_back();
}

void StackBuilder::LogSummary(const BpfStats& bpf) const {
  const UserStackEnds counts = ends();
  spdlog::info(
      "user stacks unwound with CFI: {} complete, {} truncated, {} failed; {} snapshot "
      "errors ({} with no stack mapping found)",
      counts.complete, counts.truncated, counts.failed, bpf.snapshot_errors,
      bpf.snapshot_no_mapping);
}

}  // namespace ember
