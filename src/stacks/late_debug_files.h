// Frames named again once the separate debug file of their binary arrives from a debuginfod
// server: the fetcher works off the sampling path, and what it brings is taken up by the loop.
#pragma once

#include <cstdint>

#include "debuginfod/debug_file_fetcher.h"
#include "stacks/frame_resolver.h"
#include "status/metrics_registry.h"
#include "symbolize/elf_module.h"

namespace ember {

class LateDebugFiles {
 public:
  // Makes `fetcher` the modules' source of debug files; all three must outlive this. Registers
  // ember_debuginfod_frames_named_total in `metrics`.
  LateDebugFiles(DebugFileFetcher& fetcher, ModuleCache& modules, FrameResolver& frames,
                 MetricsRegistry& metrics);

  // Names again the frames of the files whose debug files arrived since the last call; with
  // `ask_again` (at an export), also asks again for those still awaited (the fetcher asks its
  // servers only once the last miss is old enough).
  void Collect(bool ask_again);

  // The fetcher's line of the run's summary.
  void LogSummary() const;

 private:
  DebugFileFetcher& fetcher_;
  ModuleCache& modules_;
  FrameResolver& frames_;
  Counter* frames_named_metric_;
};

}  // namespace ember
