// LibdebuginfodTransport: debuginfod_find_debuginfo with a progress callback that enforces the
// agent's deadline and size limit and its shutdown.
#include "debuginfod/libdebuginfod_transport.h"

#include <elfutils/debuginfod.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ember {

// What the progress callback checks, per request.
struct LibdebuginfodTransport::Progress {
  std::chrono::steady_clock::time_point deadline;
  size_t max_file_bytes = 0;
  const std::atomic<bool>* cancel = nullptr;
  bool timed_out = false;
  bool too_big = false;
  bool cancelled = false;
};

namespace {

absl::Status WriteControlFile(const std::string& dir, const char* name, const char* value) {
  const std::string path = absl::StrCat(dir, "/", name);
  FILE* file = std::fopen(path.c_str(), "we");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
  }
  const bool written = std::fputs(value, file) >= 0;
  if (std::fclose(file) != 0 || !written) {
    return absl::FailedPreconditionError(absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConfigureLibdebuginfod(const LibdebuginfodConfig& config) {
  if (mkdir(config.staging_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create '", config.staging_dir, "': ", std::strerror(errno)));
  }
  // The library remembers misses by files of its own; the fetcher remembers them (and for how
  // long) itself, so the library forgets them at once, and cleans what it leaves hourly.
  if (absl::Status s = WriteControlFile(config.staging_dir, "cache_miss_s", "0\n"); !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteControlFile(config.staging_dir, "max_unused_age_s", "3600\n");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteControlFile(config.staging_dir, "cache_clean_interval_s", "3600\n");
      !s.ok()) {
    return s;
  }
  const std::string timeout = absl::StrCat(config.timeout.count());
  const std::pair<const char*, const std::string*> settings[] = {
      {DEBUGINFOD_URLS_ENV_VAR, &config.urls},
      {DEBUGINFOD_CACHE_PATH_ENV_VAR, &config.staging_dir},
      {DEBUGINFOD_TIMEOUT_ENV_VAR, &timeout}};
  for (const auto& [name, value] : settings) {
    if (setenv(name, value->c_str(), 1) != 0) {
      return absl::InternalError(absl::StrCat("setenv ", name, ": ", std::strerror(errno)));
    }
  }
  // No progress lines on stderr, no verbose output, no headers from a file, one try per request
  // (the fetcher decides when to ask again). The size and time limits are the progress
  // callback's: the library's own (DEBUGINFOD_MAXSIZE, DEBUGINFOD_MAXTIME) report through
  // dprintf to its verbose fd even when there is none, and glibc's dprintf to fd -1 leaks its
  // 8 KiB buffer, once per request.
  unsetenv(DEBUGINFOD_PROGRESS_ENV_VAR);
  unsetenv(DEBUGINFOD_VERBOSE_ENV_VAR);
  unsetenv(DEBUGINFOD_HEADERS_FILE_ENV_VAR);
  unsetenv(DEBUGINFOD_MAXSIZE_ENV_VAR);
  unsetenv(DEBUGINFOD_MAXTIME_ENV_VAR);
  setenv(DEBUGINFOD_RETRY_LIMIT_ENV_VAR, "0", 1);
  return absl::OkStatus();
}

LibdebuginfodTransport::LibdebuginfodTransport(const LibdebuginfodConfig& config)
    : config_(config) {}

absl::StatusOr<std::unique_ptr<LibdebuginfodTransport>> LibdebuginfodTransport::Create(
    const LibdebuginfodConfig& config) {
  std::unique_ptr<LibdebuginfodTransport> transport(new LibdebuginfodTransport(config));
  transport->client_ = debuginfod_begin();
  if (transport->client_ == nullptr) {
    return absl::InternalError(absl::StrCat("debuginfod_begin failed: ", std::strerror(errno)));
  }
  debuginfod_set_progressfn(transport->client_, &LibdebuginfodTransport::OnProgress);
  return transport;
}

LibdebuginfodTransport::~LibdebuginfodTransport() {
  if (client_ != nullptr) debuginfod_end(client_);
}

int LibdebuginfodTransport::OnProgress(::debuginfod_client* client, long done, long total) {
  auto* progress = static_cast<Progress*>(debuginfod_get_user_data(client));
  if (progress == nullptr) return 0;
  if (progress->cancel->load()) {
    progress->cancelled = true;
    return 1;
  }
  // `done` counts bytes once a server sends the file (before, the library's loop turns); `total`
  // is the announced length, 0 or -1 when unknown (chunked). A server that announces nothing and
  // sends on is cut off here at the limit, which DEBUGINFOD_MAXSIZE alone would not do.
  const auto over = [limit = progress->max_file_bytes](long bytes) {
    return bytes > 0 && static_cast<unsigned long>(bytes) > limit;
  };
  if (over(total) || over(done)) {
    progress->too_big = true;
    return 1;
  }
  if (std::chrono::steady_clock::now() >= progress->deadline) {
    progress->timed_out = true;
    return 1;
  }
  return 0;
}

Download LibdebuginfodTransport::Fetch(const std::string& build_id,
                                       const std::atomic<bool>& cancel) {
  Progress progress{.deadline = std::chrono::steady_clock::now() + 2 * config_.timeout,
                    .max_file_bytes = config_.max_file_bytes,
                    .cancel = &cancel};
  debuginfod_set_user_data(client_, &progress);
  char* path = nullptr;
  const int rc = debuginfod_find_debuginfo(
      client_, reinterpret_cast<const unsigned char*>(build_id.c_str()), 0, &path);
  debuginfod_set_user_data(client_, nullptr);
  Download download;
  if (rc >= 0) {
    close(rc);
    if (path != nullptr) download.path = path;
    std::free(path);
    // Stopped late: whatever arrived is still checked, as any other answer.
    download.result = download.path.empty() ? FetchResult::kError : FetchResult::kOk;
    return download;
  }
  std::free(path);
  if (progress.too_big || rc == -EFBIG) {
    download.result = FetchResult::kRefused;
    download.too_big = true;
  } else if (progress.timed_out || rc == -ETIME || rc == -ETIMEDOUT) {
    download.result = FetchResult::kTimeout;
  } else if (progress.cancelled) {
    download.result = FetchResult::kError;
  } else if (rc == -ENOENT) {
    download.result = FetchResult::kNotFound;
  } else {
    download.result = FetchResult::kError;
  }
  return download;
}

}  // namespace ember
