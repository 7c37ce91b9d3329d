// The debuginfod fetcher as the flags ask for it: which servers (--debuginfod-urls, else
// $DEBUGINFOD_URLS), and libdebuginfod's settings, made before any thread exists.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "debuginfod/debug_file_fetcher.h"

namespace ember {

struct DebuginfodSettings {
  std::optional<std::string> urls;  // space-separated; nullopt: $DEBUGINFOD_URLS
  std::string cache_dir;
  size_t cache_bytes = size_t{1} << 30;  // the cache's bound, and each file's
  absl::Duration timeout = absl::Seconds(30);
  int max_fetches = 2;  // at once
};

// Null without servers (then $DEBUGINFOD_URLS is unset, so that nothing else in the process asks
// them either). The fetcher is not started (DebugFileFetcher::Start): its workers start later,
// without capabilities. A cache that cannot be made is FailedPrecondition, naming
// --debuginfod-cache-dir. Sets environment variables: call it while the process has one thread.
absl::StatusOr<std::unique_ptr<DebugFileFetcher>> SetUpDebuginfod(
    const DebuginfodSettings& settings);

}  // namespace ember
