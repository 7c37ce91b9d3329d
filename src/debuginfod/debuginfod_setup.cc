// The debuginfod fetcher's set-up from the flags and the environment.
#include "debuginfod/debuginfod_setup.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/log_safe.h"
#include "debuginfod/libdebuginfod_transport.h"
#include "spdlog/spdlog.h"

namespace ember {

absl::StatusOr<std::unique_ptr<DebugFileFetcher>> SetUpDebuginfod(
    const DebuginfodSettings& settings) {
  std::string urls;
  if (settings.urls.has_value()) {
    urls = *settings.urls;
  } else if (const char* from_env = std::getenv("DEBUGINFOD_URLS")) {
    urls = from_env;
  }
  if (absl::StripAsciiWhitespace(urls).empty()) {
    // libdebuginfod's own users in this process (none today) must not ask either.
    unsetenv("DEBUGINFOD_URLS");
    return nullptr;
  }
  const std::string& dir = settings.cache_dir;
  const auto fail = [](absl::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("--debuginfod-cache-dir: ", what,
                     " (give a writable directory, or --debuginfod-urls \"\" for no debuginfod)"));
  };
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(dir).parent_path(), error);
  if (error) return fail(absl::StrCat("cannot create '", dir, "': ", error.message()));
  const LibdebuginfodConfig config{
      .urls = urls,
      .staging_dir = dir + "/client",
      .timeout = std::chrono::seconds(std::max<int64_t>(1, absl::ToInt64Seconds(settings.timeout))),
      .max_file_bytes = settings.cache_bytes};
  DebugFileFetcherOptions fetcher_options{.cache_dir = dir,
                                          .max_cache_bytes = settings.cache_bytes,
                                          .max_file_bytes = settings.cache_bytes,
                                          .max_concurrent = settings.max_fetches};
  auto fetcher = DebugFileFetcher::Create(std::move(fetcher_options), [config] {
    absl::StatusOr<std::unique_ptr<LibdebuginfodTransport>> transport =
        LibdebuginfodTransport::Create(config);
    if (!transport.ok()) {
      spdlog::warn("debuginfod: {}", std::string(transport.status().message()));
      return std::unique_ptr<DebuginfodTransport>();
    }
    return std::unique_ptr<DebuginfodTransport>(std::move(transport).value());
  });
  if (!fetcher.ok()) return fail(fetcher.status().message());
  if (absl::Status status = ConfigureLibdebuginfod(config); !status.ok()) {
    return fail(status.message());
  }
  const DebugFileFetcherStats cached = (*fetcher)->stats();
  spdlog::info("debuginfod: asking {} for missing debug files; cache {} ({} files, {} bytes)",
               LogSafe(urls), dir, cached.cache_files, cached.cache_bytes);
  return std::move(fetcher).value();
}

}  // namespace ember
