// The DebuginfodTransport of elfutils' own client library, libdebuginfod: the servers of
// DEBUGINFOD_URLS, over libcurl, within the agent's time and size limits.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "debuginfod/debug_file_fetcher.h"

struct debuginfod_client;  // <elfutils/debuginfod.h>

namespace ember {

struct LibdebuginfodConfig {
  std::string urls;         // space-separated server URLs, as DEBUGINFOD_URLS
  std::string staging_dir;  // the library's own cache, where downloads land first
  // No first bytes within it, or no whole file within twice it: a timeout.
  std::chrono::seconds timeout{30};
  size_t max_file_bytes = size_t{1} << 30;
};

// The library reads its settings from the environment at each request: they are set here once,
// before any thread of the agent exists (setenv is not thread-safe), and never changed after.
// Also writes the staging cache's control files (the library forgets its misses at once and
// cleans its cache hourly: the fetcher keeps what matters). Errors name the staging directory.
absl::Status ConfigureLibdebuginfod(const LibdebuginfodConfig& config);

class LibdebuginfodTransport : public DebuginfodTransport {
 public:
  // One libdebuginfod client handle (the library wants one per thread).
  static absl::StatusOr<std::unique_ptr<LibdebuginfodTransport>> Create(
      const LibdebuginfodConfig& config);
  ~LibdebuginfodTransport() override;

  Download Fetch(const std::string& build_id, const std::atomic<bool>& cancel) override;

 private:
  struct Progress;
  explicit LibdebuginfodTransport(const LibdebuginfodConfig& config);
  static int OnProgress(::debuginfod_client* client, long done, long total);

  LibdebuginfodConfig config_;
  ::debuginfod_client* client_ = nullptr;
};

}  // namespace ember
