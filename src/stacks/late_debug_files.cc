// Renaming the frames of binaries whose debug files arrived late.
#include "stacks/late_debug_files.h"

#include <string>
#include <utility>
#include <vector>

#include "spdlog/spdlog.h"

namespace ember {

LateDebugFiles::LateDebugFiles(DebugFileFetcher& fetcher, ModuleCache& modules,
                               FrameResolver& frames, MetricsRegistry& metrics)
    : fetcher_(fetcher), modules_(modules), frames_(frames) {
  modules_.SetDebugFileSource(&fetcher_);
  // Registration fails only on a programming error (a bad or duplicate name).
  frames_named_metric_ =
      metrics
          .AddCounter("ember_debuginfod_frames_named_total",
                      "Cached frames named again once the debug file of their binary arrived "
                      "from a debuginfod server.")
          .value();
}

void LateDebugFiles::Collect(bool ask_again) {
  std::vector<std::string> arrived;
  if (fetcher_.HasArrived()) arrived = fetcher_.TakeArrived();
  if (ask_again) {
    for (std::string& build_id : modules_.AwaitedBuildIds()) {
      if (fetcher_.Find(build_id).has_value()) arrived.push_back(std::move(build_id));
    }
  }
  // One pass over the cached frames for every file that arrived: a burst of arrivals (every
  // library of the host, at start) must not walk them once per file.
  std::vector<FileIdentity> files;
  for (const std::string& build_id : arrived) {
    std::vector<FileIdentity> reloaded = modules_.DebugFileArrived(build_id);
    files.insert(files.end(), reloaded.begin(), reloaded.end());
  }
  if (files.empty()) return;
  const size_t named = frames_.Rename(files);
  frames_named_metric_->Increment(named);
  spdlog::debug("debuginfod: {} debug file(s) arrived for {} file(s) in use; {} frame(s) named",
                arrived.size(), files.size(), named);
}

void LateDebugFiles::LogSummary() const { fetcher_.LogSummary(frames_named_metric_->Value()); }

}  // namespace ember
