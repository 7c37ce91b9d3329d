// CPython's detection, BPF configuration and splice, for the stack builder (runtime.h).
#include "runtimes/cpython/cpython_runtime.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log_safe.h"
#include "spdlog/spdlog.h"

namespace ember::python {
namespace {

// Lines about one process each: a workload starting many processes must not flood the log.
LogRateLimiter& ProcessLogLimiter() {
  static LogRateLimiter limiter(kLogLinesPerMinute, std::chrono::minutes(1));
  return limiter;
}

}  // namespace

CPythonRuntime::CPythonRuntime(RuntimeBpfConfig& bpf, MetricsRegistry& metrics,
                               MemoryReader* memory, std::function<BpfStats()> bpf_stats)
    : bpf_(bpf), memory_(memory) {
  // Registration fails only on a programming error (a bad or duplicate name).
  constexpr absl::string_view kPythonNames = "ember_python_frame_names_total";
  constexpr absl::string_view kPythonNamesHelp =
      "Python frames named from their code objects in process memory, once per cached frame, by "
      "result: named, named_again (the code object's address was reused), unreadable (the "
      "process could not be read: [python]), implausible (a size, kind, count or pointer out of "
      "bounds, or a chain that loops: refused before use, named as far as it was checked).";
  auto counter = [&](absl::string_view result) {
    return CounterMirror(
        metrics.AddCounter(kPythonNames, kPythonNamesHelp, {{"result", std::string(result)}})
            .value());
  };
  named_metric_ = counter("named");
  renamed_metric_ = counter("named_again");
  unreadable_metric_ = counter("unreadable");
  implausible_metric_ = counter("implausible");
  if (bpf_stats == nullptr) return;
  using Field = uint64_t BpfStats::*;
  const std::pair<const char*, Field> walks[] = {
      {"ok", &BpfStats::python_ok},
      {"no_thread_state", &BpfStats::python_no_thread_state},
      {"read_failed", &BpfStats::python_read_failed},
      {"not_code", &BpfStats::python_not_code},
      {"truncated", &BpfStats::python_truncated}};
  for (const auto& [result, field] : walks) {
    const absl::Status status = metrics.AddCallbackCounter(
        "ember_python_walks_total",
        "CPython frame walks done in BPF for samples of Python processes, by how they ended.",
        {{"result", result}},
        [bpf_stats, member = field] { return static_cast<double>(bpf_stats().*member); });
    if (!status.ok()) {
      spdlog::critical("ember_python_walks_total: {}", std::string(status.message()));
      std::abort();
    }
  }
}

void CPythonRuntime::ProcessMapsChanged(const Process& process) {
  bool changed = false;
  const PythonProcess& python = namer_.Update(
      process.pid, process.mappings, absl::StrCat("/proc/", process.pid, "/root"), &changed);
  if (!changed) return;
  if (python.bpf.has_value()) {
    if (absl::Status status = bpf_.SetPythonProcess(process.pid, *python.bpf); !status.ok()) {
      LogLimited(ProcessLogLimiter(), spdlog::level::warn,
                 "process {} ({}): Python frames not walked: {}", process.pid,
                 LogSafe(process.name), LogSafe(status.message()));
      return;
    }
    LogLimited(ProcessLogLimiter(), spdlog::level::info,
               "process {} ({}) runs CPython {}.{} ({}): walking its Python frames", process.pid,
               LogSafe(process.name), python.version.major, python.version.minor,
               LogSafe(python.interpreter));
    return;
  }
  bpf_.RemovePythonProcess(process.pid);
  if (python.outcome == DetectOutcome::kUnsupportedVersion) {
    LogLimited(ProcessLogLimiter(), spdlog::level::warn,
               "process {} ({}): {}: its Python frames stay native ({})", process.pid,
               LogSafe(process.name), LogSafe(python.reason), LogSafe(python.interpreter));
  }
}

void CPythonRuntime::ProcessExited(uint32_t pid) {
  if (const PythonProcess* python = namer_.Find(pid);
      python != nullptr && python->bpf.has_value()) {
    bpf_.RemovePythonProcess(pid);
  }
  namer_.Forget(pid);
}

void CPythonRuntime::Splice(const Process& process, const SampleView& sample, UserFrames frames) {
  if (sample.python_frames.empty()) return;
  const PythonProcess* python = namer_.Find(process.pid);
  if (python == nullptr || !python->bpf.has_value()) return;
  std::vector<const Frame*>& stack = frames.stack;
  const size_t user_begin = frames.begin;
  const size_t native_count = stack.size() - user_begin;
  if (native_count != frames.pcs.size()) return;  // no user frames were appended
  native_is_eval_.assign(native_count, false);
  for (size_t i = 0; i < native_count; ++i) {
    const uint64_t pc = frames.pcs[i];
    native_is_eval_[i] =
        pc != 0 && pc >= python->process.eval_frame_start && pc < python->process.eval_frame_end;
  }
  python_entry_.assign(sample.python_frames.size(), false);
  for (size_t j = 0; j < sample.python_frames.size(); ++j) {
    python_entry_[j] = (sample.python_frames[j].flags & EMBER_PYTHON_FRAME_ENTRY) != 0;
  }
  // Pairs are made from the root unless a walk stopped short of it: a native stack cut at the
  // snapshot, or Python frames cut at EMBER_MAX_PYTHON_FRAMES (or by a failed read), whose
  // missing outer groups would otherwise take the innermost eval frames' places.
  const bool native_truncated = native_count > 0 && frames.pcs.back() == 0;
  const bool python_complete = sample.header->python_status == EMBER_PYTHON_OK;
  SpliceStacksInto(native_is_eval_, python_entry_, native_truncated || !python_complete,
                   &splice_stats_, splice_scratch_, spliced_);
  native_.assign(stack.begin() + static_cast<ptrdiff_t>(user_begin), stack.end());
  stack.resize(user_begin);
  for (const SplicedFrame& frame : spliced_) {
    if (frame.kind == SplicedFrame::Kind::kNative) {
      stack.push_back(native_[frame.index]);
    } else if (memory_ != nullptr) {
      stack.push_back(
          namer_.Name(process.pid, *python, sample.python_frames[frame.index], *memory_));
    } else {
      stack.push_back(namer_.Name(process.pid, *python, sample.python_frames[frame.index]));
    }
  }
}

void CPythonRuntime::SyncMetrics() {
  const FrameNamerStats& stats = namer_.stats();
  named_metric_.Publish(stats.named);
  renamed_metric_.Publish(stats.renamed);
  unreadable_metric_.Publish(stats.unreadable);
  implausible_metric_.Publish(stats.implausible);
}

void CPythonRuntime::LogSummary(const BpfStats& bpf) const {
  if (bpf.python_ok + bpf.python_no_thread_state + bpf.python_read_failed + bpf.python_not_code +
          bpf.python_truncated ==
      0) {
    return;
  }
  const FrameNamerStats& named = namer_.stats();
  spdlog::info(
      "python frame walks: {} ok, {} without thread state, {} read failures, {} not code, {} "
      "truncated; {} frames named, {} named again (code address reused), {} unreadable, {} "
      "implausible; {} eval frames left native, {} groups unplaced",
      bpf.python_ok, bpf.python_no_thread_state, bpf.python_read_failed, bpf.python_not_code,
      bpf.python_truncated, named.named, named.renamed, named.unreadable, named.implausible,
      splice_stats_.eval_frames_left_native, splice_stats_.python_groups_unplaced);
}

}  // namespace ember::python
